//! ECS2's active group (paper 000, section 3.2 and the appendix): while the r parity
//! nodes sleep, the k data nodes buffer the parity blocks in memory, plus one or two
//! extra XOR parities so that the group survives `floor(r / 2) + 1` concurrent node
//! failures instead of `floor(r / 2)` (the paper's `ceil((r + 1) / 2)`):
//!
//! - r = 3: `Q1 = P1 ^ D[P2]`;
//! - r = 2: `Q1 = P1 ^ D[P2]` and `Q2 = D[P1] ^ D[P2]`,
//!
//! where `D[Pj]` is the data block of the node that buffers `Pj`. A [`Ecs2Layout`] says
//! which blocks each data node holds; [`Ecs2Layout::survival`] says whether a set of failed
//! nodes loses data, which blocks remain, and which lost blocks the extra parities give
//! back by XOR alone (the "auxiliary blocks" of Table III).

use std::collections::BTreeSet;
use std::fmt;

use crate::code::Code;
use crate::error::{Error, Result};
use crate::matrix::Matrix;

/// A block of one stripe, numbered from 0 (shown from 1, as the paper does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Block {
    /// `D{i+1}`, stored on data node `DN{i+1}`.
    Data(usize),
    /// `P{j+1}`, the Reed-Solomon parity `j`.
    Parity(usize),
    /// `Q{q+1}`, an extra XOR parity.
    Extra(usize),
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Block::Data(i) => write!(f, "D{}", i + 1),
            Block::Parity(j) => write!(f, "P{}", j + 1),
            Block::Extra(q) => write!(f, "Q{}", q + 1),
        }
    }
}

/// Which blocks each of the k data nodes holds, and what each extra parity is the XOR
/// of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ecs2Layout {
    k: usize,
    r: usize,
    nodes: Vec<Vec<Block>>,
    extras: Vec<Vec<Block>>,
}

/// What a set of failed data nodes leaves of a stripe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survival {
    /// Whether the data can still be read: the blocks left determine all k data blocks.
    pub survivable: bool,
    /// The blocks on the surviving nodes, data then parities then extras.
    pub available: Vec<Block>,
    /// Lost blocks rebuilt from an extra parity by XOR alone, in the order found; each
    /// is the XOR of the blocks listed with it.
    pub auxiliary: Vec<(Block, Vec<Block>)>,
}

impl Ecs2Layout {
    /// The layout where data node `i` holds `D{i+1}`, parity `Pj` is buffered on node
    /// `parity_hosts[j]`, and the extra parities ECS2 defines for `r` (none unless r is
    /// 2 or 3) on `extra_hosts`; without extra hosts, no extra parity is kept. Hosts
    /// may repeat (to study what sharing a node costs); ECS2 gives each block its own.
    pub fn ecs2(
        k: usize,
        r: usize,
        parity_hosts: &[usize],
        extra_hosts: &[usize],
    ) -> Result<Ecs2Layout> {
        if parity_hosts.len() != r {
            return Err(Error::ShardCount {
                what: "parity hosts",
                expected: r,
                got: parity_hosts.len(),
            });
        }
        let data_of = |j: usize| Block::Data(parity_hosts[j]);
        let extras = match (r, extra_hosts.len()) {
            (_, 0) => vec![],
            (3, 1) => vec![vec![Block::Parity(0), data_of(1)]],
            (2, 2) => vec![vec![Block::Parity(0), data_of(1)], vec![data_of(0), data_of(1)]],
            _ => {
                let expected = match r {
                    2 => 2,
                    3 => 1,
                    _ => 0,
                };
                return Err(Error::ShardCount {
                    what: "extra parity hosts",
                    expected,
                    got: extra_hosts.len(),
                });
            }
        };
        let mut nodes: Vec<Vec<Block>> = (0..k).map(|i| vec![Block::Data(i)]).collect();
        let hosts =
            parity_hosts.iter().map(|&h| (h, true)).chain(extra_hosts.iter().map(|&h| (h, false)));
        let (mut parity, mut extra) = (0, 0);
        for (host, is_parity) in hosts {
            let node = nodes.get_mut(host).ok_or(Error::DataIndex { index: host, k })?;
            if is_parity {
                node.push(Block::Parity(parity));
                parity += 1;
            } else {
                node.push(Block::Extra(extra));
                extra += 1;
            }
        }
        Ok(Ecs2Layout { k, r, nodes, extras })
    }

    /// The (9,6) layout of ECS2 Fig. 3: `P1` on DN3, `P2` on DN4, `P3` on DN6 and
    /// `Q1 = P1 ^ D4` on DN2; DN1 and DN5 hold only their data.
    pub fn ecs2_fig3() -> Ecs2Layout {
        Ecs2Layout::ecs2(6, 3, &[2, 3, 5], &[1]).unwrap_or_else(|_| unreachable!("a valid layout"))
    }

    /// The blocks data node `node` (from 0) holds.
    pub fn blocks_on(&self, node: usize) -> &[Block] {
        self.nodes.get(node).map_or(&[], Vec::as_slice)
    }

    /// The blocks extra parity `q` is the XOR of.
    pub fn extra_terms(&self, q: usize) -> &[Block] {
        self.extras.get(q).map_or(&[], Vec::as_slice)
    }

    /// How many extra parities the layout keeps.
    pub fn extra_count(&self) -> usize {
        self.extras.len()
    }

    /// Computes the extra parities from the data and parity blocks of a stripe.
    pub fn encode_extras(
        &self,
        data: &[&[u8]],
        parity: &[&[u8]],
        extras: &mut [&mut [u8]],
    ) -> Result<()> {
        if data.len() != self.k {
            return Err(Error::ShardCount {
                what: "data shards",
                expected: self.k,
                got: data.len(),
            });
        }
        if parity.len() != self.r {
            return Err(Error::ShardCount {
                what: "parity shards",
                expected: self.r,
                got: parity.len(),
            });
        }
        if extras.len() != self.extras.len() {
            return Err(Error::ShardCount {
                what: "extra parity blocks",
                expected: self.extras.len(),
                got: extras.len(),
            });
        }
        // Every length is checked before anything is written.
        let len = data.first().map_or(0, |d| d.len());
        let lengths = [("data shard", data.iter().map(|d| d.len()).collect::<Vec<_>>())]
            .into_iter()
            .chain([("parity shard", parity.iter().map(|p| p.len()).collect())])
            .chain([("extra parity", extras.iter().map(|q| q.len()).collect())]);
        for (what, lengths) in lengths {
            if let Some((index, &got)) = lengths.iter().enumerate().find(|(_, got)| **got != len) {
                return Err(Error::ShardLength { what, index, expected: len, got });
            }
        }
        for (q, out) in extras.iter_mut().enumerate() {
            let terms: Vec<&[u8]> = self.extras[q]
                .iter()
                .map(|term| match *term {
                    Block::Data(i) => data[i],
                    Block::Parity(j) => parity[j],
                    Block::Extra(_) => &[][..],
                })
                .collect();
            crate::xor_slices(&terms, out);
        }
        Ok(())
    }

    /// What is left when the data nodes in `failed` (from 0) are lost, with the code's
    /// coefficients deciding whether the remaining blocks determine the data: they do
    /// if their rows over the data (unit rows for data, the generator's for parities,
    /// XORs of those for extras) have rank k.
    ///
    /// The code must be the layout's shape ([`Error::LayoutCode`] otherwise).
    pub fn survival(&self, code: &Code, failed: &[usize]) -> Result<Survival> {
        self.check_code(code)?;
        let failed: BTreeSet<usize> = failed.iter().copied().collect();
        let mut available: Vec<Block> = (0..self.nodes.len())
            .filter(|node| !failed.contains(node))
            .flat_map(|node| self.nodes[node].clone())
            .collect();
        available.sort();
        let rows: Vec<u8> = available.iter().flat_map(|&block| self.row(code, block)).collect();
        let survivable = Matrix::from_rows(available.len(), self.k, rows).rank() == self.k;
        let p1_is_xor = (0..self.k).all(|i| code.parity_coefficient(0, i) == Ok(1));
        let auxiliary = self.auxiliary(&available, p1_is_xor);
        Ok(Survival { survivable, available, auxiliary })
    }

    fn check_code(&self, code: &Code) -> Result<()> {
        if (code.data_shards(), code.parity_shards()) != (self.k, self.r) {
            return Err(Error::LayoutCode {
                layout_k: self.k,
                layout_r: self.r,
                code_k: code.data_shards(),
                code_r: code.parity_shards(),
            });
        }
        Ok(())
    }

    /// The largest f such that every set of f failed data nodes is survivable, found by
    /// trying them all.
    pub fn fault_tolerance(&self, code: &Code) -> Result<usize> {
        self.check_code(code)?;
        let mut tolerated = 0;
        for f in 1..=self.k {
            for failed in subsets(self.k, f) {
                if !self.survival(code, &failed)?.survivable {
                    return Ok(tolerated);
                }
            }
            tolerated = f;
        }
        Ok(tolerated)
    }

    /// A block's coefficients over the k data blocks.
    fn row(&self, code: &Code, block: Block) -> Vec<u8> {
        match block {
            Block::Data(i) => (0..self.k).map(|t| u8::from(t == i)).collect(),
            Block::Parity(j) => {
                (0..self.k).map(|i| code.parity_coefficient(j, i).unwrap_or(0)).collect()
            }
            Block::Extra(q) => {
                let mut row = vec![0u8; self.k];
                for &term in &self.extras[q] {
                    for (sum, add) in row.iter_mut().zip(self.row(code, term)) {
                        *sum ^= add;
                    }
                }
                row
            }
        }
    }

    /// The lost blocks an available extra parity gives back by XOR: first from its
    /// definition (`Q1 = P1 ^ D4` gives `P1` or `D4` when the other is there), else with
    /// `P1` written out as the XOR of all data (`Q1 = D1 ^ D2 ^ D3 ^ D5 ^ D6` gives
    /// `D3` when only it is missing). An extra parity is one equation, so it gives back
    /// at most one block; blocks it gave back may let another extra parity give one.
    fn auxiliary(&self, available: &[Block], p1_is_xor: bool) -> Vec<(Block, Vec<Block>)> {
        let mut known: BTreeSet<Block> = available.iter().copied().collect();
        let mut used = BTreeSet::new();
        let mut found = Vec::new();
        loop {
            let mut progress = false;
            for (q, terms) in self.extras.iter().enumerate() {
                if !known.contains(&Block::Extra(q)) || used.contains(&q) {
                    continue;
                }
                for form in [Some(terms.clone()), self.as_data_xor(terms).filter(|_| p1_is_xor)]
                    .into_iter()
                    .flatten()
                {
                    let missing: Vec<Block> =
                        form.iter().copied().filter(|b| !known.contains(b)).collect();
                    if let [lost] = missing[..] {
                        let mut from = vec![Block::Extra(q)];
                        from.extend(form.iter().copied().filter(|&b| b != lost));
                        known.insert(lost);
                        used.insert(q);
                        found.push((lost, from));
                        progress = true;
                        break;
                    }
                }
            }
            if !progress {
                return found;
            }
        }
    }

    /// `terms` with `P1` replaced by the XOR of all data blocks and pairs cancelled, if
    /// every term is data or `P1` (the only parity that is a plain XOR, in a code from
    /// [`Code::new`]; the caller checks).
    fn as_data_xor(&self, terms: &[Block]) -> Option<Vec<Block>> {
        let mut set = BTreeSet::new();
        let mut toggle = |block: Block| {
            if !set.remove(&block) {
                set.insert(block);
            }
        };
        for &term in terms {
            match term {
                Block::Data(_) => toggle(term),
                Block::Parity(0) => (0..self.k).for_each(|i| toggle(Block::Data(i))),
                _ => return None,
            }
        }
        Some(set.into_iter().collect())
    }
}

/// Every `f`-element subset of `0..n`, in lexicographic order.
pub fn subsets(n: usize, f: usize) -> impl Iterator<Item = Vec<usize>> {
    let mut next = (f <= n).then(|| (0..f).collect::<Vec<usize>>());
    std::iter::from_fn(move || {
        let current = next.take()?;
        let mut following = current.clone();
        let mut i = f;
        while i > 0 {
            i -= 1;
            if following[i] < n - f + i {
                following[i] += 1;
                for t in i + 1..f {
                    following[t] = following[t - 1] + 1;
                }
                next = Some(following);
                break;
            }
        }
        Some(current)
    })
}
