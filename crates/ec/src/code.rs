//! The systematic Reed-Solomon code: shards `0..k` are the data, `k..k + r` the
//! parities `P_j = sum_i g[j][i] * D_i`.
//!
//! The parity matrix `g` is a Cauchy matrix `1 / (x_j + y_i)` with `y_i = i` and
//! `x_j = k + j`, each column then scaled so that row 0 is all ones. Every square
//! sub-matrix of a Cauchy matrix is non-singular and scaling a column by a non-zero
//! constant keeps it so, hence any k of the k + r shards determine the data (MDS), and
//! `P_1 = D_1 ^ ... ^ D_k`: the plain XOR that ECS2 (section 2.1) rebuilds one lost
//! node with and RIMAC reads a sleeping disk's block through.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::gf;
use crate::kernels::{self, BLOCK, Backend};
use crate::matrix::Matrix;

/// How many decoding plans (one per pattern of present and wanted shards) a code
/// keeps. Past it the cache is emptied and refills with the patterns in use.
const MAX_PLANS: usize = 4096;

/// A set of shard indices (k + r <= 256).
type ShardSet = [u64; 4];

fn shard_set(indices: impl IntoIterator<Item = usize>) -> ShardSet {
    let mut set = [0u64; 4];
    for index in indices {
        set[index / 64] |= 1 << (index % 64);
    }
    set
}

/// A (k + r, k) code. Cheap to share between threads: encoding takes `&self`, and
/// the cache of decoding plans is behind a lock held only to look a plan up.
pub struct Code {
    k: usize,
    r: usize,
    /// `r x k`, row-major: `parity[j * k + i] = g[j][i]`.
    parity: Vec<u8>,
    backend: Backend,
    plans: Mutex<BTreeMap<(ShardSet, ShardSet), Arc<Plan>>>,
}

/// How to rebuild a set of shards: the `k` shards read and, for each rebuilt shard, its
/// row of coefficients over them.
struct Plan {
    sources: Vec<usize>,
    targets: Vec<usize>,
    coefs: Vec<u8>,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Code")
            .field("k", &self.k)
            .field("r", &self.r)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Code {
    /// The code with `k` data and `r` parity shards and the scaled Cauchy parity
    /// matrix described above.
    pub fn new(k: usize, r: usize) -> Result<Code> {
        check_shape(k, r)?;
        let mut parity = vec![0u8; r * k];
        for i in 0..k {
            let y = i as u8;
            // Cauchy entries are never zero, so the column's scale is invertible.
            let cauchy = |j: usize| gf::inv((k + j) as u8 ^ y).unwrap_or(0);
            let scale = gf::inv(cauchy(0)).unwrap_or(0);
            for j in 0..r {
                parity[j * k + i] = gf::mul(cauchy(j), scale);
            }
        }
        Ok(Code::from_parts(k, r, parity))
    }

    /// A code with a parity matrix of the caller's (`r` rows of `k` coefficients). It is
    /// not checked to be MDS: [`Code::reconstruct`] returns [`Error::Singular`] for a
    /// pattern of shards it cannot decode. The tests use it to check this crate's
    /// encoding and decoding against another library's matrix.
    pub fn with_parity_matrix(k: usize, r: usize, rows: &[u8]) -> Result<Code> {
        check_shape(k, r)?;
        if rows.len() != r * k {
            return Err(Error::MatrixSize { k, r, expected: r * k, got: rows.len() });
        }
        Ok(Code::from_parts(k, r, rows.to_vec()))
    }

    fn from_parts(k: usize, r: usize, parity: Vec<u8>) -> Code {
        Code { k, r, parity, backend: Backend::detect(), plans: Mutex::new(BTreeMap::new()) }
    }

    /// The same code computed with another backend, or `None` if this CPU cannot run
    /// it. For tests and benchmarks; [`Code::new`] already picks the fastest.
    pub fn with_backend(&self, backend: Backend) -> Option<Code> {
        backend
            .is_available()
            .then(|| Code { backend, ..Code::from_parts(self.k, self.r, self.parity.clone()) })
    }

    /// The backend this code computes with.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `k`, the number of data shards.
    pub fn data_shards(&self) -> usize {
        self.k
    }

    /// `r`, the number of parity shards (and of lost shards the code survives).
    pub fn parity_shards(&self) -> usize {
        self.r
    }

    /// `k + r`.
    pub fn total_shards(&self) -> usize {
        self.k + self.r
    }

    /// `g[j][i]`, the coefficient of data shard `i` in parity `j` (both from 0). Row 0
    /// is all ones. A parity node holding only `P_j` applies a buffered data delta with
    /// [`crate::mul_slice_xor`]`(g[j][i], delta, P_j)`.
    pub fn parity_coefficient(&self, j: usize, i: usize) -> Result<u8> {
        if i >= self.k {
            return Err(Error::DataIndex { index: i, k: self.k });
        }
        if j >= self.r {
            return Err(Error::ParityIndex { index: j, r: self.r });
        }
        Ok(self.parity[j * self.k + i])
    }

    /// Computes the `r` parity shards of the `k` data shards. Every shard has the
    /// data shards' length, which may be any, zero included.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()> {
        let len = check_lengths(
            ("data shards", "data shard"),
            data.iter().map(|d| d.len()),
            self.k,
            None,
        )?;
        check_lengths(
            ("parity shards", "parity shard"),
            parity.iter().map(|p| p.len()),
            self.r,
            Some(len),
        )?;
        kernels::dot(self.backend, &self.parity, data, parity, false);
        Ok(())
    }

    /// Encodes in place: `shards` holds the `k` data shards followed by `r` parity
    /// shards whose contents are overwritten.
    pub fn encode_shards<S: AsRef<[u8]> + AsMut<[u8]>>(&self, shards: &mut [S]) -> Result<()> {
        check_count("shards", shards.len(), self.k + self.r)?;
        let (data, parity) = shards.split_at_mut(self.k);
        let data: Vec<&[u8]> = data.iter().map(AsRef::as_ref).collect();
        let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(AsMut::as_mut).collect();
        self.encode(&data, &mut parity)
    }

    /// Whether the parity shards (`shards[k..]`) are those of the data (`shards[..k]`).
    /// Works through the shards a block at a time, so it needs only `r` blocks of
    /// scratch memory however long the shards are.
    pub fn verify<S: AsRef<[u8]>>(&self, shards: &[S]) -> Result<bool> {
        check_count("shards", shards.len(), self.k + self.r)?;
        let len = check_lengths(
            ("shards", "shard"),
            shards.iter().map(|s| s.as_ref().len()),
            self.k + self.r,
            None,
        )?;
        let mut scratch = vec![0u8; self.r * BLOCK.min(len)];
        for start in (0..len).step_by(BLOCK) {
            let end = (start + BLOCK).min(len);
            let data: Vec<&[u8]> =
                shards[..self.k].iter().map(|s| &s.as_ref()[start..end]).collect();
            let mut computed: Vec<&mut [u8]> =
                scratch.chunks_mut(BLOCK.min(len)).map(|chunk| &mut chunk[..end - start]).collect();
            kernels::dot(self.backend, &self.parity, &data, &mut computed, false);
            let stored = shards[self.k..].iter().map(|s| &s.as_ref()[start..end]);
            if computed.iter().zip(stored).any(|(computed, stored)| **computed != *stored) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Rebuilds, in place, every shard whose `present` flag is false from the others;
    /// at most `r` may be absent. Absent shards must already have the right length;
    /// their contents are ignored and overwritten.
    pub fn reconstruct<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
    ) -> Result<()> {
        self.rebuild(shards, present, self.k + self.r)
    }

    /// Like [`Code::reconstruct`], but rebuilds only absent data shards: absent parity
    /// shards are left as they are.
    pub fn reconstruct_data<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
    ) -> Result<()> {
        self.rebuild(shards, present, self.k)
    }

    /// [`Code::reconstruct`] for shards held as `Option<Vec<u8>>`: every `None` is
    /// replaced by its rebuilt shard.
    pub fn reconstruct_vecs(&self, shards: &mut [Option<Vec<u8>>]) -> Result<()> {
        check_count("shards", shards.len(), self.k + self.r)?;
        let present: Vec<bool> = shards.iter().map(Option::is_some).collect();
        let len = shards.iter().flatten().map(Vec::len).next().unwrap_or(0);
        let mut full: Vec<Vec<u8>> =
            shards.iter_mut().map(|s| s.take().unwrap_or_else(|| vec![0; len])).collect();
        let result = self.reconstruct(&mut full, &present);
        for ((slot, shard), was_present) in shards.iter_mut().zip(full).zip(&present) {
            if result.is_ok() || *was_present {
                *slot = Some(shard);
            }
        }
        result
    }

    fn rebuild<S: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        shards: &mut [S],
        present: &[bool],
        wanted_below: usize,
    ) -> Result<()> {
        check_count("shards", shards.len(), self.k + self.r)?;
        check_count("present flags", present.len(), self.k + self.r)?;
        check_lengths(
            ("shards", "shard"),
            shards.iter().map(|s| s.as_ref().len()),
            self.k + self.r,
            None,
        )?;
        let targets: Vec<usize> = (0..wanted_below).filter(|&index| !present[index]).collect();
        if targets.is_empty() {
            return Ok(());
        }
        let plan = self.plan(present, &targets)?;
        // Split the shards into the sources (read) and the targets (written).
        let mut sources: Vec<Option<&[u8]>> = vec![None; self.k + self.r];
        let mut outputs: Vec<Option<&mut [u8]>> = (0..self.k + self.r).map(|_| None).collect();
        for (index, shard) in shards.iter_mut().enumerate() {
            let shard: &mut [u8] = shard.as_mut();
            if present[index] {
                sources[index] = Some(&*shard);
            } else {
                outputs[index] = Some(shard);
            }
        }
        let inputs: Vec<&[u8]> = plan.sources.iter().filter_map(|&index| sources[index]).collect();
        let mut outputs: Vec<&mut [u8]> =
            plan.targets.iter().filter_map(|&index| outputs[index].take()).collect();
        kernels::dot(self.backend, &plan.coefs, &inputs, &mut outputs, false);
        Ok(())
    }

    /// The plan for rebuilding `targets` from the `present` shards, from the cache or
    /// computed: the first `k` present shards with independent rows (data first, so
    /// that a lost data shard with `P_1` present is rebuilt by XOR alone), the inverse of
    /// their rows of the generator, and each target's row of the generator times that
    /// inverse.
    fn plan(&self, present: &[bool], targets: &[usize]) -> Result<Arc<Plan>> {
        let available: Vec<usize> = (0..self.k + self.r).filter(|&index| present[index]).collect();
        if available.len() < self.k {
            return Err(Error::TooFewShards { present: available.len(), needed: self.k });
        }
        let key = (shard_set(available.iter().copied()), shard_set(targets.iter().copied()));
        if let Some(plan) = self.plans.lock().unwrap_or_else(|poison| poison.into_inner()).get(&key)
        {
            return Ok(Arc::clone(plan));
        }
        let sources = self.independent_rows(&available).ok_or(Error::Singular)?;
        let sub = Matrix::from_rows(
            self.k,
            self.k,
            sources.iter().flat_map(|&s| self.generator_row(s)).collect(),
        );
        let inverse = sub.invert().ok_or(Error::Singular)?;
        let wanted = Matrix::from_rows(
            targets.len(),
            self.k,
            targets.iter().flat_map(|&t| self.generator_row(t)).collect(),
        );
        let plan = Arc::new(Plan {
            sources,
            targets: targets.to_vec(),
            coefs: wanted.mul(&inverse).into_data(),
        });
        let mut plans = self.plans.lock().unwrap_or_else(|poison| poison.into_inner());
        if plans.len() >= MAX_PLANS {
            plans.clear();
        }
        plans.insert(key, Arc::clone(&plan));
        Ok(plan)
    }

    /// Shard `index`'s row of the generator `[I; g]`.
    fn generator_row(&self, index: usize) -> Vec<u8> {
        if index < self.k {
            (0..self.k).map(|i| u8::from(i == index)).collect()
        } else {
            self.parity[(index - self.k) * self.k..(index - self.k + 1) * self.k].to_vec()
        }
    }

    /// The first k of `available` whose generator rows are independent, found by
    /// elimination; `None` if there are not k. With an MDS matrix these are simply the
    /// first k; with one given to [`Code::with_parity_matrix`] a later shard may
    /// replace one that adds nothing.
    fn independent_rows(&self, available: &[usize]) -> Option<Vec<usize>> {
        // Rows reduced against the earlier ones, each scaled to 1 at its pivot.
        let mut basis: Vec<(usize, Vec<u8>)> = Vec::with_capacity(self.k);
        let mut chosen = Vec::with_capacity(self.k);
        for &index in available {
            let mut row = self.generator_row(index);
            for (pivot, reduced) in &basis {
                let factor = row[*pivot];
                if factor != 0 {
                    row.iter_mut().zip(reduced).for_each(|(x, y)| *x ^= gf::mul(factor, *y));
                }
            }
            let Some(pivot) = row.iter().position(|&x| x != 0) else { continue };
            let scale = gf::inv(row[pivot]).unwrap_or(1);
            row.iter_mut().for_each(|x| *x = gf::mul(*x, scale));
            basis.push((pivot, row));
            chosen.push(index);
            if chosen.len() == self.k {
                return Some(chosen);
            }
        }
        None
    }

    /// How many decoding plans are cached (for tests and diagnostics).
    pub fn cached_plans(&self) -> usize {
        self.plans.lock().unwrap_or_else(|poison| poison.into_inner()).len()
    }

    /// The read-modify-write update of ECS2 3.3.3 and RIMAC's PU-DA policies: data shard
    /// `i` changed from `old` to `new`; every parity becomes
    /// `P_j ^= g[j][i] * (old ^ new)` without reading the other data shards.
    pub fn update_parity(
        &self,
        i: usize,
        old: &[u8],
        new: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        self.check_update(i, old.len(), parity)?;
        if new.len() != old.len() {
            return Err(Error::ShardLength {
                what: "new data shard",
                index: i,
                expected: old.len(),
                got: new.len(),
            });
        }
        let mut delta = vec![0u8; BLOCK.min(old.len())];
        for start in (0..old.len()).step_by(BLOCK) {
            let end = (start + BLOCK).min(old.len());
            let delta = &mut delta[..end - start];
            kernels::dot(
                self.backend,
                &[1, 1],
                &[&old[start..end], &new[start..end]],
                &mut [delta],
                false,
            );
            let mut blocks: Vec<&mut [u8]> =
                parity.iter_mut().map(|p| &mut p[start..end]).collect();
            kernels::dot(self.backend, &self.column(i), &[delta], &mut blocks, true);
        }
        Ok(())
    }

    /// Applies a buffered delta `old ^ new` of data shard `i` to every parity:
    /// `P_j ^= g[j][i] * delta`. Deltas of the same shard compose by XOR, so a node can
    /// buffer many updates as one delta and apply it once the parity nodes wake.
    pub fn apply_delta(&self, i: usize, delta: &[u8], parity: &mut [&mut [u8]]) -> Result<()> {
        self.check_update(i, delta.len(), parity)?;
        kernels::dot(self.backend, &self.column(i), &[delta], parity, true);
        Ok(())
    }

    fn check_update(&self, i: usize, len: usize, parity: &[&mut [u8]]) -> Result<()> {
        if i >= self.k {
            return Err(Error::DataIndex { index: i, k: self.k });
        }
        check_lengths(
            ("parity shards", "parity shard"),
            parity.iter().map(|p| p.len()),
            self.r,
            Some(len),
        )
        .map(drop)
    }

    /// Column `i` of the parity matrix: the coefficients of data shard `i`.
    fn column(&self, i: usize) -> Vec<u8> {
        (0..self.r).map(|j| self.parity[j * self.k + i]).collect()
    }
}

fn check_shape(k: usize, r: usize) -> Result<()> {
    if k == 0 || r == 0 || k + r > 256 {
        return Err(Error::InvalidShape { k, r });
    }
    Ok(())
}

fn check_count(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(Error::ShardCount { what, expected, got });
    }
    Ok(())
}

/// Checks there are `count` lengths, all equal (to `expected` if given); returns it.
fn check_lengths(
    (plural, what): (&'static str, &'static str),
    lengths: impl ExactSizeIterator<Item = usize>,
    count: usize,
    expected: Option<usize>,
) -> Result<usize> {
    check_count(plural, lengths.len(), count)?;
    let mut expected = expected;
    for (index, len) in lengths.enumerate() {
        match expected {
            None => expected = Some(len),
            Some(expected) if expected != len => {
                return Err(Error::ShardLength { what, index, expected, got: len });
            }
            Some(_) => {}
        }
    }
    Ok(expected.unwrap_or(0))
}
