//! `somnus bench`: speed figures measured against a reference taken in the same run,
//! so that the ratios mean something on a shared, noisy machine.

//!
//! One module per subcommand; `stats` (medians, a thread's CPU time) and `local` (a
//! local cluster of processes to measure) are what several of them share, and depend
//! on none of them.

pub(crate) mod cluster;
pub(crate) mod cluster_trace;
pub(crate) mod ec;
pub(crate) mod local;
pub(crate) mod offload;
pub(crate) mod runtime;
pub(crate) mod s3;
pub(crate) mod stats;
pub(crate) mod wire;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// End-to-end simulated requests per second of the rack-level off-load
    /// configuration (open and pre-scan the trace, then replay it), and trace parse
    /// throughput next to `wc -l` on the same file, each the median of `--repeat` runs.
    Offload(offload::BenchOffloadArgs),
    /// Erasure-coding encode and reconstruct (2 data shards lost) throughput in GB/s of
    /// data on one core: somnus next to reed-solomon-erasure (C SIMD), reed-solomon-simd
    /// and a plain XOR of the same data buffers, all in the same run, with each figure's
    /// ratio to the XOR.
    Ec(ec::BenchEcArgs),
    /// Simulated client requests per second of the deterministic cluster simulation
    /// (every message and disk I/O modelled, every read checked) on one core, for a
    /// 9-server and a 300-server cluster by default; target 300,000.
    Cluster(cluster::BenchClusterArgs),
    /// The real cluster of processes on this disk: client writes and reads of 4 KiB and
    /// 1 MiB (throughput, p50, p99) beside a raw write + fdatasync loop measured in the
    /// same run, the time to gear down from 3 to 1, and the rebuild rate of a removed
    /// server. Takes about a minute and a half; needs 1 GiB free.
    Runtime(runtime::BenchRuntimeArgs),
    /// An S3 endpoint (somnus's gateway by default, or any other store): PUT and GET
    /// of 4 KiB and 1 MiB objects by 8 clients for 10 s each, with ops/s, MiB/s, p50
    /// and p99.
    S3(s3::BenchS3Args),
}

pub(crate) fn run(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Offload(args) => offload::run(&args),
        BenchCommand::Ec(args) => ec::run(&args),
        BenchCommand::Cluster(args) => cluster::run(&args),
        BenchCommand::Runtime(args) if args.compare_wire => wire::run(&args),
        BenchCommand::Runtime(args) => runtime::run(&args),
        BenchCommand::S3(args) => s3::run(&args),
    }
}
