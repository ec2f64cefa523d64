//! The cluster simulation's checker (issue 11, docs/protocol.md C1, C3, C4).
//!
//! Linearizability per block, with the versions the cluster assigns as the witness
//! order: each block's writes are ordered by version, and the history is accepted
//! only if that order agrees with real time and every read fits it:
//! - a write invoked after another write to the block completed, or after a read of
//!   the block returned, gets a higher version than either (its version is above the
//!   block's *floor* when it was invoked);
//! - a read returns, for every block, a version at least the floor at its invocation
//!   (the latest acknowledged write, or anything newer that was read), of a write
//!   invoked before the read completed and covering that block;
//! - one version of a chunk is one write (two primaries that wrote in one epoch would
//!   hand out the same versions: C1), and one server sends a group's replica writes
//!   in each epoch (C1 on the wire).
//!
//! At the end, every block's floor must still be held by every replica (no
//! acknowledged write lost) and the replicas of every chunk must be equal.

use std::collections::BTreeMap;

use somnus_core::cluster::store::BLOCK_BYTES;
use somnus_core::cluster::{ChunkId, Epoch, Piece, Stamp};
use somnus_types::{ByteRange, ChunkGroupId, ServerId, Version, VirtualInstant};

/// One block of one chunk.
type Block = (ChunkId, u64);

/// A write's invocation: where its chunk ranges lie in [`Checker::write_ranges`].
#[derive(Clone, Copy, Debug)]
struct WriteRecord {
    ranges: (usize, usize),
    invoked: VirtualInstant,
}

/// What the history says of one chunk: its blocks' floors, by block index, and which
/// stamp each version of it belongs to (sorted by version; versions are claimed
/// mostly in increasing order, so nearly every claim is an append or a lookup).
#[derive(Clone, Debug, Default)]
struct ChunkHistory {
    floors: Vec<Version>,
    versions: Vec<(Version, Stamp)>,
}

/// The floors of one chunk range's blocks when an op was invoked.
#[derive(Clone, Debug)]
struct RangeFloors {
    chunk: ChunkId,
    first_block: u64,
    floors: Vec<Version>,
}

#[derive(Clone, Debug)]
struct Invocation {
    /// The floor of every block the op covers when it was invoked.
    ranges: Vec<RangeFloors>,
}

impl Invocation {
    fn floor(&self, (chunk, block): Block) -> Version {
        let range = self.ranges.iter().find(|r| {
            r.chunk == chunk
                && (r.first_block..r.first_block + r.floors.len() as u64).contains(&block)
        });
        range.map_or(Version(0), |r| r.floors[(block - r.first_block) as usize])
    }
}

#[derive(Default)]
pub struct Checker {
    /// One lookup per chunk an op covers, not one per block: the checker runs on
    /// every op of a benchmark.
    chunks: BTreeMap<ChunkId, ChunkHistory>,
    /// Every write invoked, by stamp: by its client, then its count (each client of
    /// the simulation is counted from 0, and mints its stamps densely from 1).
    writes: Vec<Vec<Option<WriteRecord>>>,
    /// The chunk ranges of every write, one after another.
    write_ranges: Vec<(ChunkId, ByteRange)>,
    open: BTreeMap<u64, Invocation>,
    /// The server that sent replica writes for each group and epoch.
    writers: BTreeMap<(ChunkGroupId, Epoch), ServerId>,
    violations: Vec<String>,
    /// Violations beyond this many are counted, not described.
    violations_more: u64,
}

const VIOLATIONS_KEPT: usize = 8;

/// The blocks `range` covers, as a first and an end block index.
fn block_span(range: ByteRange) -> (u64, u64) {
    (range.start / BLOCK_BYTES, range.end.div_ceil(BLOCK_BYTES))
}

fn blocks(chunk: ChunkId, range: ByteRange) -> impl Iterator<Item = Block> {
    let (first, end) = block_span(range);
    (first..end).map(move |b| (chunk, b))
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    pub fn violation_count(&self) -> u64 {
        self.violations.len() as u64 + self.violations_more
    }

    pub fn violate(&mut self, description: String) {
        if self.violations.len() < VIOLATIONS_KEPT {
            self.violations.push(description);
        } else {
            self.violations_more += 1;
        }
    }

    /// An op on `chunk_ranges` was invoked (a write of `stamp`, or a read).
    pub fn invoke(
        &mut self,
        op: u64,
        now: VirtualInstant,
        chunk_ranges: &[(ChunkId, ByteRange)],
        stamp: Option<Stamp>,
    ) {
        let ranges = chunk_ranges
            .iter()
            .map(|(chunk, range)| {
                let (first, end) = block_span(*range);
                let held = self.chunks.get(chunk).map_or(&[][..], |c| c.floors.as_slice());
                let floors = (first..end)
                    .map(|b| held.get(b as usize).copied().unwrap_or_default())
                    .collect();
                RangeFloors { chunk: *chunk, first_block: first, floors }
            })
            .collect();
        self.open.insert(op, Invocation { ranges });
        if let Some(stamp) = stamp {
            let first = self.write_ranges.len();
            self.write_ranges.extend_from_slice(chunk_ranges);
            let record = WriteRecord { ranges: (first, self.write_ranges.len()), invoked: now };
            let (client, count) = stamp_parts(stamp);
            if self.writes.len() <= client {
                self.writes.resize(client + 1, Vec::new());
            }
            let writes = &mut self.writes[client];
            if writes.len() <= count {
                writes.resize(count + 1, None);
            }
            writes[count] = Some(record);
        }
    }

    /// `server` sent a replica write of `group` in `epoch`: only one server may (C1).
    pub fn replica_write_sent(&mut self, group: ChunkGroupId, epoch: Epoch, server: ServerId) {
        let writer = *self.writers.entry((group, epoch)).or_insert(server);
        if writer != server {
            self.violate(format!(
                "C1: {group} had two primaries writing in {epoch}: {writer} and {server}"
            ));
        }
    }

    /// A write was acknowledged with these versions.
    pub fn written(&mut self, op: u64, stamp: Stamp, parts: &[(ChunkId, ByteRange, Version)]) {
        let Some(invocation) = self.open.remove(&op) else { return };
        for (chunk, range, version) in parts {
            self.claim_version(*chunk, *version, stamp);
            for block in blocks(*chunk, *range) {
                let floor = invocation.floor(block);
                if *version <= floor {
                    self.violate(format!(
                        "C4: write {stamp:?} of block {block:?} acknowledged at {version:?}, not above {floor:?} already acknowledged or read before it began"
                    ));
                }
            }
            self.raise_floors(*chunk, *range, *version);
        }
    }

    /// A read returned `pieces` (per chunk, ranges within the chunk).
    pub fn read(&mut self, op: u64, now: VirtualInstant, pieces: &[(ChunkId, Piece)]) {
        let Some(invocation) = self.open.remove(&op) else { return };
        for (chunk, piece) in pieces {
            if piece.stamp != Stamp(0) {
                self.check_source(*chunk, piece, now);
            }
            for block in blocks(*chunk, piece.range) {
                let floor = invocation.floor(block);
                if piece.version < floor {
                    self.violate(format!(
                        "C4: read of block {block:?} returned {:?} (stamp {:?}), older than {floor:?} acknowledged or read before the read began",
                        piece.version, piece.stamp
                    ));
                }
            }
            self.raise_floors(*chunk, piece.range, piece.version);
        }
    }

    /// Raises the floor of every block of `range` of `chunk` to `version`.
    fn raise_floors(&mut self, chunk: ChunkId, range: ByteRange, version: Version) {
        let (first, end) = block_span(range);
        let floors = &mut self.chunks.entry(chunk).or_default().floors;
        if floors.len() < end as usize {
            floors.resize(end as usize, Version(0));
        }
        for floor in &mut floors[first as usize..end as usize] {
            *floor = (*floor).max(version);
        }
    }

    /// A read's piece must come from a write invoked before the read completed that
    /// covers it, at a version no other write of the chunk has.
    fn check_source(&mut self, chunk: ChunkId, piece: &Piece, now: VirtualInstant) {
        let (client, count) = stamp_parts(piece.stamp);
        let write = self.writes.get(client).and_then(|w| w.get(count)).copied().flatten();
        let covered = write.is_some_and(|w| {
            let ranges = &self.write_ranges[w.ranges.0..w.ranges.1];
            w.invoked <= now && ranges.iter().any(|(c, r)| *c == chunk && r.contains(piece.range))
        });
        if !covered {
            self.violate(format!(
                "C4: read of {chunk:?} {:?} returned stamp {:?}, which no write of that range made",
                piece.range, piece.stamp
            ));
        }
        self.claim_version(chunk, piece.version, piece.stamp);
    }

    fn claim_version(&mut self, chunk: ChunkId, version: Version, stamp: Stamp) {
        let versions = &mut self.chunks.entry(chunk).or_default().versions;
        let owner = match versions.last() {
            Some((last, _)) if *last < version => {
                versions.push((version, stamp));
                stamp
            }
            _ => match versions.binary_search_by_key(&version, |(v, _)| *v) {
                Ok(at) => versions[at].1,
                Err(at) => {
                    versions.insert(at, (version, stamp));
                    stamp
                }
            },
        };
        if owner != stamp {
            self.violate(format!(
                "C1: version {version:?} of {chunk:?} belongs to two writes ({owner:?}, {stamp:?}): two primaries in one epoch"
            ));
        }
    }

    /// At the end: every acknowledged or read version is still on every replica of
    /// its chunk (`replicas`: each replica's contents of the chunk), and the replicas
    /// are equal.
    pub fn check_final(&mut self, chunk: ChunkId, replicas: &[(String, Vec<Piece>)]) {
        if let Some((first, reference)) = replicas.first() {
            for (name, contents) in &replicas[1..] {
                if contents != reference {
                    let at = reference.iter().zip(contents).find(|(a, b)| a != b);
                    let at = at.map(|(a, b)| format!("{a:?} vs {b:?}")).unwrap_or_else(|| {
                        format!("{} pieces vs {}", reference.len(), contents.len())
                    });
                    self.violate(format!(
                        "convergence: replicas {first} and {name} of {chunk:?} differ after the faults healed, first at {at}"
                    ));
                }
            }
        }
        let held = self.chunks.get(&chunk).map_or(&[][..], |c| c.floors.as_slice());
        // A floor of version 0 (nothing written) holds on any replica.
        let floors: Vec<(u64, Version)> = (0..held.len() as u64)
            .map(|b| (b, held[b as usize]))
            .filter(|(_, v)| *v > Version(0))
            .collect();
        for (name, contents) in replicas {
            for (block, floor) in &floors {
                let range = ByteRange::new(block * BLOCK_BYTES, BLOCK_BYTES);
                let held = contents
                    .iter()
                    .find(|p| p.range.overlaps(range))
                    .map_or(Version(0), |p| p.version);
                if held < *floor {
                    self.violate(format!(
                        "C3: {name} holds block {block} of {chunk:?} at {held:?}, below the acknowledged {floor:?}: a write was lost"
                    ));
                }
            }
        }
    }

    /// The chunks the history touched.
    pub fn chunks(&self) -> Vec<ChunkId> {
        self.chunks.keys().copied().collect()
    }
}

/// A stamp's client and count (`Stamp::parts`), as indexes.
fn stamp_parts(stamp: Stamp) -> (usize, usize) {
    let (client, count) = stamp.parts();
    (client as usize, count as usize)
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::{ChunkIndex, Payload};
    use somnus_types::ObjectId;

    use super::*;

    const CHUNK: ChunkId = ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) };

    fn at(ms: u64) -> VirtualInstant {
        VirtualInstant::ZERO + somnus_types::VirtualDuration::from_millis(ms)
    }

    fn piece(version: u64, stamp: u64) -> (ChunkId, Piece) {
        (
            CHUNK,
            Piece {
                range: ByteRange::new(0, BLOCK_BYTES),
                version: Version(version),
                stamp: Stamp(stamp),
                data: Payload::NONE,
            },
        )
    }

    const BLOCK0: ByteRange = ByteRange { start: 0, end: BLOCK_BYTES };

    #[test]
    fn a_read_of_the_latest_acknowledged_write_passes() {
        let mut checker = Checker::new();
        checker.invoke(1, at(0), &[(CHUNK, BLOCK0)], Some(Stamp(7)));
        checker.written(1, Stamp(7), &[(CHUNK, BLOCK0, Version(5))]);
        checker.invoke(2, at(2), &[(CHUNK, BLOCK0)], None);
        checker.read(2, at(3), &[piece(5, 7)]);
        assert_eq!(checker.violation_count(), 0, "{:?}", checker.violations());
    }

    #[test]
    fn two_servers_writing_one_groups_epoch_are_caught() {
        let mut checker = Checker::new();
        let (group, epoch) = (ChunkGroupId(3), Epoch(2));
        checker.replica_write_sent(group, epoch, ServerId(1));
        checker.replica_write_sent(group, epoch, ServerId(1));
        checker.replica_write_sent(group, Epoch(3), ServerId(4));
        assert_eq!(checker.violation_count(), 0);
        checker.replica_write_sent(group, epoch, ServerId(4));
        assert_eq!(checker.violation_count(), 1, "{:?}", checker.violations());
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_write_is_caught() {
        let mut checker = Checker::new();
        checker.invoke(1, at(0), &[(CHUNK, BLOCK0)], Some(Stamp(7)));
        checker.written(1, Stamp(7), &[(CHUNK, BLOCK0, Version(5))]);
        checker.invoke(2, at(2), &[(CHUNK, BLOCK0)], None);
        checker.read(2, at(3), &[piece(0, 0)]);
        assert_eq!(checker.violation_count(), 1);
    }

    #[test]
    fn a_read_going_back_after_a_newer_read_is_caught() {
        let mut checker = Checker::new();
        checker.invoke(1, at(0), &[(CHUNK, BLOCK0)], Some(Stamp(7)));
        checker.invoke(2, at(1), &[(CHUNK, BLOCK0)], None);
        checker.read(2, at(2), &[piece(5, 7)]); // concurrent with the write: fine
        checker.invoke(3, at(3), &[(CHUNK, BLOCK0)], None);
        checker.read(3, at(4), &[piece(0, 0)]);
        assert_eq!(checker.violation_count(), 1);
    }

    #[test]
    fn one_version_for_two_writes_and_a_lost_write_are_caught() {
        let mut checker = Checker::new();
        checker.invoke(1, at(0), &[(CHUNK, BLOCK0)], Some(Stamp(7)));
        checker.invoke(2, at(0), &[(CHUNK, BLOCK0)], Some(Stamp(8)));
        checker.written(1, Stamp(7), &[(CHUNK, BLOCK0, Version(5))]);
        checker.written(2, Stamp(8), &[(CHUNK, BLOCK0, Version(5))]);
        assert_eq!(checker.violation_count(), 1);
        let behind = vec![Piece {
            range: BLOCK0,
            version: Version(3),
            stamp: Stamp(9),
            data: Payload::NONE,
        }];
        checker.check_final(CHUNK, &[("s0".into(), behind.clone()), ("s1".into(), behind)]);
        assert_eq!(checker.violation_count(), 3, "{:?}", checker.violations());
    }
}
