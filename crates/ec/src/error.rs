/// What can go wrong with an erasure-coding call. Every variant names the argument
/// at fault; no call changes any shard before it has checked its arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "a code needs k >= 1 data and r >= 1 parity shards with k + r <= 256; got k = {k}, r = {r}"
    )]
    InvalidShape { k: usize, r: usize },
    #[error("the parity matrix of a {k}+{r} code has {expected} entries, not {got}")]
    MatrixSize { k: usize, r: usize, expected: usize, got: usize },
    #[error("expected {expected} {what}, got {got}")]
    ShardCount { what: &'static str, expected: usize, got: usize },
    #[error("{what} {index} is {got} bytes long, not {expected}")]
    ShardLength { what: &'static str, index: usize, expected: usize, got: usize },
    #[error("data shard index {index} is out of range for {k} data shards")]
    DataIndex { index: usize, k: usize },
    #[error("parity shard index {index} is out of range for {r} parity shards")]
    ParityIndex { index: usize, r: usize },
    #[error("only {present} shards are present; {needed} are needed to reconstruct")]
    TooFewShards { present: usize, needed: usize },
    #[error(
        "the shards present do not determine the data: fewer than k of their rows of the generator are independent (a parity matrix that is not MDS)"
    )]
    Singular,
    #[error("the layout is for a {layout_k}+{layout_r} code, not {code_k}+{code_r}")]
    LayoutCode { layout_k: usize, layout_r: usize, code_k: usize, code_r: usize },
}

pub type Result<T> = std::result::Result<T, Error>;
