//! A storage server's logger (Sierra 3.3): the records the DVLs of other servers'
//! primaries log here, kept in the one logger model every somnus log follows
//! (`crate::logger`, the `logstore` engine's semantics: versions grow per owner, a
//! deletion marker hides its version and older ones, space comes back when a segment
//! is collected), and per group the epoch the logger is fenced at.
//!
//! The core keeps the log's metadata: the model of its records (what each byte reads
//! as, how much space they take, when a collection is due) and the index of the
//! writes logged (their groups, owners, stamps). The shell owns the bytes, in its
//! engine (the runtime's `logstore` over files, the simulator's over its in-memory
//! disk, or none: the simulator may run the model alone). Every change of the log is
//! a [`LogCommit`] the core plans and hands the shell in an action, with the bytes of
//! its appends and the index's changes; the shell's engine carries out its steps in
//! order and makes them durable together, and only once the shell reports the commit
//! done does the core apply it to the model and the index ([`LogVolume::committed`]),
//! so a crash keeps exactly what was durable. A read is an action too: the shell
//! answers with the pieces its engine reads, checked here against the index.
//!
//! Each primary's epoch is one owner of the log (D1): a new primary appends under its
//! own owner, so it may log again, in its own order, writes an older epoch logged.

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ByteRange, ChunkGroupId, LoggerId, ObjectId, OwnerId, Version};

use super::{ChunkId, Epoch, LogRecord, Payload, Stamp, UnstableWrite};
use crate::logger::{LogGeometry, Logger, RECORD_HEADER_BYTES};

/// A piece a log reads: its range, the version it reads as, the stamp its bytes
/// hold (`None` from a log that keeps no stamps), and its bytes (none from a log that
/// keeps no payloads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogPiece {
    pub range: ByteRange,
    pub version: Version,
    pub stamp: Option<Stamp>,
    pub data: Payload,
}

/// Bytes of one segment of a server's log: small, so collection frees space soon.
pub const SEGMENT_BYTES: u64 = 4 << 20;

/// One step of a [`LogCommit`], for the shell's engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOp {
    /// Append `version` of `range` of `object` in `owner`'s log, written by `stamp`,
    /// with its bytes (none in the simulator).
    Append {
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
        stamp: Stamp,
        data: Payload,
    },
    /// A deletion marker: `version` and older ones of `range` are no longer read.
    Invalidate { owner: OwnerId, object: ObjectId, range: ByteRange, version: Version },
    /// Collect every segment collection may take (the engine's rule is the model's).
    Collect,
}

/// What a commit does to the index's journal (where a restarted process rebuilds
/// the index from: [`LogVolume::restore`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexWrite {
    /// Append these changes.
    Append(Vec<IndexChange>),
    /// Replace the whole journal by these (the index's state, then the commit's
    /// changes): it had grown past the index it describes.
    Rewrite(Vec<IndexChange>),
}

impl IndexWrite {
    pub fn changes(&self) -> &[IndexChange] {
        match self {
            IndexWrite::Append(changes) | IndexWrite::Rewrite(changes) => changes,
        }
    }
}

/// One group commit of a logger's log. The shell's engine carries out `ops` in order,
/// then makes them and `index` durable together (one sync), and answers `DiskDone`;
/// or `DiskFailed` with `NoSpace` when its engine cannot take every append (then
/// nothing of the commit took effect), or with an I/O error (what is durable is then
/// unknown: the core halts the server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogCommit {
    pub ops: Vec<LogOp>,
    pub index: IndexWrite,
}

impl LogCommit {
    /// Bytes of records the commit writes (its collection's copies apart).
    pub fn record_bytes(&self) -> u64 {
        let record = |op: &LogOp| match op {
            LogOp::Append { range, .. } => RECORD_HEADER_BYTES + range.size_bytes(),
            LogOp::Invalidate { .. } => RECORD_HEADER_BYTES,
            LogOp::Collect => 0,
        };
        let index = self.index.changes().len() as u64 * INDEX_CHANGE_BYTES;
        self.ops.iter().map(record).sum::<u64>() + index
    }

    /// Whether it has nothing to make durable.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.index.changes().is_empty()
    }

    /// The payload sizes of its appends, in order (what an engine asks whether it
    /// can take them all before taking any).
    pub fn append_sizes(&self) -> Vec<u64> {
        let size = |op: &LogOp| match op {
            LogOp::Append { range, .. } => Some(range.size_bytes()),
            _ => None,
        };
        self.ops.iter().filter_map(size).collect()
    }
}

/// Roughly what one index change takes in the journal (the simulator's disk model).
const INDEX_CHANGE_BYTES: u64 = 64;

/// A read of the log: the pieces of `range` of `object` in `owner`'s records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogAddress {
    pub owner: OwnerId,
    pub object: ObjectId,
    pub range: ByteRange,
}

/// One change of a logger's index: replaying them in order rebuilds the index a
/// process had.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IndexChange {
    /// The group's fence was raised to `epoch`.
    Fenced { group: ChunkGroupId, epoch: Epoch },
    /// A write was logged under the owner of `epoch` (its bytes are in the log).
    Logged { group: ChunkGroupId, epoch: Epoch, write: UnstableWrite },
    /// A marker came before its append: the append is dropped when it comes.
    Tombstone { group: ChunkGroupId, epoch: Epoch, version: Version },
    /// A write no byte of which is visible any more.
    Forgotten { group: ChunkGroupId, epoch: Epoch, version: Version },
    /// The owner's newest version appended (kept when its writes are forgotten: D1).
    Newest { group: ChunkGroupId, epoch: Epoch, version: Version },
}

/// A commit planned, kept by the server until the shell reports it: the steps to
/// apply to the model (without bytes) and the index's changes, and what it answers.
#[derive(Clone, Debug)]
pub struct Staged {
    ops: Vec<LogOp>,
    changes: Vec<IndexChange>,
    /// The versions a batch appends, those already logged (repeats, or dropped by a
    /// tombstone) and those the log has no room for.
    pub appended: Vec<Version>,
    pub repeats: Vec<Version>,
    pub full: Vec<Version>,
    /// The records a batch of markers marks (or finds logged nowhere).
    marked: Vec<(ChunkGroupId, LogRecord)>,
}

impl Staged {
    fn new(changes: Vec<IndexChange>) -> Staged {
        Staged {
            ops: Vec::new(),
            changes,
            appended: Vec::new(),
            repeats: Vec::new(),
            full: Vec::new(),
            marked: Vec::new(),
        }
    }
}

/// What a read asked, kept by the server until the shell answers it.
#[derive(Clone, Debug)]
pub struct ReadPlan {
    group: ChunkGroupId,
    /// Each record, and whether its range was asked of the log (the index held it).
    records: Vec<(LogRecord, bool)>,
}

/// The index is written whole again once this many changes were journaled since it
/// last was, and four times as many as it holds.
const INDEX_REWRITE_AFTER: u64 = 1 << 18;

/// A storage server's logger: the model of its log, and the index of what is logged.
#[derive(Debug)]
pub struct LogVolume {
    model: Logger,
    chunk_size_bytes: u64,
    /// Per group, the epoch the logger is fenced at: older primaries are refused.
    fences: BTreeMap<ChunkGroupId, Epoch>,
    /// The writes logged and still visible in part, by group, owner and version: the
    /// logger's index of its log, what recovery reports and reads return.
    writes: BTreeMap<(ChunkGroupId, Epoch, Version), UnstableWrite>,
    /// The keys of `writes` by chunk, with each write's range: a marker looks up the
    /// writes it may hide, and the simulation's check a chunk's records, among a day
    /// of logged writes (a hot chunk's hundreds, which looking each up in `writes`
    /// made a tenth of a geared replay).
    by_chunk: BTreeMap<(ChunkId, ChunkGroupId, Epoch, Version), ByteRange>,
    /// Markers that came before their append (it was delayed, or never sent): the
    /// append is dropped when it comes, until a newer epoch fences the owner.
    tombstones: BTreeSet<(ChunkGroupId, Epoch, Version)>,
    /// Per owner, the newest version appended: the model forgets it once collection
    /// took every record of the owner (and so the engine, after a reopen), and D1's
    /// repeat check must not.
    newest: BTreeMap<OwnerId, Version>,
    /// Changes applied but not yet journaled (the writes markers left with no visible
    /// byte): the next commit carries them.
    unsaved: Vec<IndexChange>,
    /// Changes journaled since the journal was last written whole, and how many
    /// call for writing it whole again (with four times those the index holds).
    journaled: u64,
    rewrite_after: u64,
    /// Where what the shell's engine read disagreed with this index: bugs of the
    /// engine or of this index, which the simulation reports as violations. The
    /// first `FAULTS_KEPT`, and how many there were in all.
    faults: Vec<String>,
    fault_count: u64,
    /// The used bytes the next collection waits for: a segment past where the last
    /// one left the log, unless an append was refused since (`None`). A collection
    /// plans the copies of up to eight segments, painting each of their records; after
    /// every batch of markers, that was most of a geared day's replay.
    collect_next_at_used: Option<u64>,
}

/// Faults kept word for word: a disk that fails every read must not grow the list
/// for as long as the process runs.
const FAULTS_KEPT: usize = 64;

/// The geometry of a server's log of `capacity_bytes` (the engine's, `logstore`'s
/// `Options::stepped_logger`).
fn geometry(capacity_bytes: u64) -> LogGeometry {
    LogGeometry {
        capacity_bytes: capacity_bytes.max(SEGMENT_BYTES),
        segment_bytes: SEGMENT_BYTES,
        compact_live_percent_max: 50,
    }
}

impl LogVolume {
    /// An empty logger of `capacity_bytes`.
    pub fn new(chunk_size_bytes: u64, capacity_bytes: u64) -> LogVolume {
        LogVolume::on(chunk_size_bytes, Logger::new(LoggerId(0), geometry(capacity_bytes)))
    }

    fn on(chunk_size_bytes: u64, model: Logger) -> LogVolume {
        LogVolume {
            model,
            chunk_size_bytes,
            fences: BTreeMap::new(),
            writes: BTreeMap::new(),
            by_chunk: BTreeMap::new(),
            tombstones: BTreeSet::new(),
            newest: BTreeMap::new(),
            unsaved: Vec::new(),
            journaled: 0,
            rewrite_after: INDEX_REWRITE_AFTER,
            faults: Vec::new(),
            fault_count: 0,
            collect_next_at_used: None,
        }
    }

    /// A logger a process opens again: its index rebuilt from the changes journaled
    /// before, in order, and its model from what the engine holds (`extents`: per
    /// owner, each visible extent with its version) and the newest version it holds
    /// of each owner (`newest`). A write no byte of which the engine reads is
    /// forgotten (its markers were durable, the change that forgot it not yet).
    pub fn restore(
        chunk_size_bytes: u64,
        capacity_bytes: u64,
        changes: impl IntoIterator<Item = IndexChange>,
        extents: impl IntoIterator<Item = (OwnerId, ObjectId, ByteRange, Version)>,
        newest: impl IntoIterator<Item = (OwnerId, Version)>,
    ) -> Result<LogVolume, String> {
        let model = Logger::restored(LoggerId(0), geometry(capacity_bytes), extents)
            .map_err(|error| format!("the log's extents do not fit its capacity: {error}"))?;
        let mut volume = LogVolume::on(chunk_size_bytes, model);
        for change in changes {
            volume.apply(change);
        }
        // What the engine appended counts for D1's repeats, journaled or not.
        for (owner, version) in newest {
            let newest = volume.newest.entry(owner).or_default();
            *newest = (*newest).max(version);
        }
        let hidden: Vec<(ChunkGroupId, Epoch, Version)> = volume
            .writes
            .iter()
            .filter(|((group, epoch, version), write)| {
                !volume.visible(*group, *epoch, write.chunk, write.range, *version)
            })
            .map(|(key, _)| *key)
            .collect();
        for (group, epoch, version) in hidden {
            volume.change(IndexChange::Forgotten { group, epoch, version });
        }
        Ok(volume)
    }

    fn forget(&mut self, key: (ChunkGroupId, Epoch, Version)) {
        if let Some(write) = self.writes.remove(&key) {
            self.by_chunk.remove(&(write.chunk, key.0, key.1, key.2));
        }
    }

    /// Applies `change`, to be journaled with the next commit.
    fn change(&mut self, change: IndexChange) {
        self.apply(change.clone());
        self.unsaved.push(change);
    }

    fn apply(&mut self, change: IndexChange) {
        match change {
            IndexChange::Fenced { group, epoch } => {
                let fence = self.fences.entry(group).or_default();
                *fence = (*fence).max(epoch);
                // Appends of older owners are refused now: their tombstones are not needed.
                self.tombstones.retain(|(g, owner, _)| *g != group || *owner >= epoch);
            }
            IndexChange::Logged { group, epoch, write } => {
                let newest = self.newest.entry(owner(group, epoch)).or_default();
                *newest = (*newest).max(write.version);
                let key = (group, epoch, write.version);
                self.forget(key);
                self.by_chunk.insert((write.chunk, group, epoch, write.version), write.range);
                self.writes.insert(key, write);
            }
            IndexChange::Tombstone { group, epoch, version } => {
                self.tombstones.insert((group, epoch, version));
            }
            IndexChange::Forgotten { group, epoch, version } => {
                self.forget((group, epoch, version))
            }
            IndexChange::Newest { group, epoch, version } => {
                let newest = self.newest.entry(owner(group, epoch)).or_default();
                *newest = (*newest).max(version);
            }
        }
    }

    /// The index as changes that rebuild it (what a rewrite keeps).
    fn index_state(&self) -> Vec<IndexChange> {
        let fences = self.fences.iter().map(|(g, e)| IndexChange::Fenced { group: *g, epoch: *e });
        let newest = self.newest.iter().map(|(owner, version)| IndexChange::Newest {
            group: ChunkGroupId((owner.0 >> 32) as u32),
            epoch: Epoch(owner.0 & 0xffff_ffff),
            version: *version,
        });
        let tombstones = self.tombstones.iter().map(|(group, epoch, version)| {
            IndexChange::Tombstone { group: *group, epoch: *epoch, version: *version }
        });
        let writes = self.writes.iter().map(|((group, epoch, _), write)| IndexChange::Logged {
            group: *group,
            epoch: *epoch,
            write: write.clone(),
        });
        fences.chain(newest).chain(tombstones).chain(writes).collect()
    }

    /// The commit of `staged`'s steps (with the bytes of its appends in `ops`): its
    /// index changes after those applied and not yet journaled, or the whole index
    /// once the journal has grown past it.
    fn commit(&mut self, ops: Vec<LogOp>, staged: &mut Staged) -> LogCommit {
        let mut changes = std::mem::take(&mut self.unsaved);
        changes.append(&mut staged.changes);
        self.journaled += changes.len() as u64;
        let held = (self.writes.len() + self.fences.len() + self.newest.len()) as u64;
        let index = if self.journaled > self.rewrite_after.max(4 * held) {
            let mut state = self.index_state();
            state.extend(changes.iter().cloned());
            self.journaled = state.len() as u64;
            IndexWrite::Rewrite(state)
        } else {
            IndexWrite::Append(changes.clone())
        };
        staged.changes = changes;
        staged.ops = ops.iter().map(without_bytes).collect();
        LogCommit { ops, index }
    }

    pub fn fence(&self, group: ChunkGroupId) -> Epoch {
        self.fences.get(&group).copied().unwrap_or_default()
    }

    /// Plans raising the group's fence to `epoch` (never lowering it).
    pub fn stage_fence(&mut self, group: ChunkGroupId, epoch: Epoch) -> (LogCommit, Staged) {
        let mut staged = Staged::new(Vec::new());
        if epoch > self.fence(group) {
            staged.changes.push(IndexChange::Fenced { group, epoch });
        }
        (self.commit(Vec::new(), &mut staged), staged)
    }

    /// Whether a record of `write` fits now.
    pub fn fits(&self, write: &UnstableWrite) -> bool {
        self.model.fits(write.range.size_bytes())
    }

    /// Plans a batch of writes under the owner of `epoch` (the group fenced at least
    /// there) as one commit: a version at or below the owner's newest is one appended
    /// already (a primary sends a logger its batches one at a time, in version order)
    /// and is taken as a repeat, as is one a marker came before; a write the log has no
    /// room for is refused.
    pub fn stage_append(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        writes: &[UnstableWrite],
    ) -> (LogCommit, Staged) {
        let owner = owner(group, epoch);
        let newest = self.newest.get(&owner).copied().unwrap_or_default();
        let mut staged = Staged::new(Vec::new());
        if epoch > self.fence(group) {
            staged.changes.push(IndexChange::Fenced { group, epoch });
        }
        let fresh: Vec<&UnstableWrite> = writes
            .iter()
            .filter(|w| {
                let repeat =
                    w.version <= newest || self.tombstones.contains(&(group, epoch, w.version));
                if repeat {
                    staged.repeats.push(w.version);
                }
                !repeat
            })
            .collect();
        let fits = self.model.fit_in_turn(fresh.iter().map(|w| w.range.size_bytes()));
        let mut ops = Vec::with_capacity(fresh.len());
        for (write, fits) in fresh.into_iter().zip(fits) {
            if !fits {
                self.collect_next_at_used = None;
                staged.full.push(write.version);
                continue;
            }
            let (object, range) = self.address(write.chunk, write.range);
            let (version, stamp, data) = (write.version, write.stamp, write.data.clone());
            ops.push(LogOp::Append { owner, object, range, version, stamp, data });
            // The index keeps no bytes: a read takes them from the log.
            let indexed = UnstableWrite { data: Payload::NONE, ..write.clone() };
            staged.changes.push(IndexChange::Logged { group, epoch, write: indexed });
            staged.appended.push(write.version);
        }
        (self.commit(ops, &mut staged), staged)
    }

    /// Plans deletion markers for `records`, as one commit; a record whose version
    /// this logger never took needs a tombstone instead (its append is dropped when it
    /// comes).
    pub fn stage_invalidate(
        &mut self,
        group: ChunkGroupId,
        records: &[LogRecord],
    ) -> (LogCommit, Staged) {
        self.stage_invalidates(&[(group, records)])
    }

    /// Plans the markers of several groups' records as one commit.
    pub fn stage_invalidates(
        &mut self,
        batches: &[(ChunkGroupId, &[LogRecord])],
    ) -> (LogCommit, Staged) {
        let mut staged = Staged::new(Vec::new());
        let mut ops = Vec::new();
        let records =
            batches.iter().flat_map(|(group, records)| records.iter().map(|r| (*group, r)));
        for (group, record) in records {
            let owner = owner(group, record.owner);
            let (epoch, version) = (record.owner, record.version);
            if version > self.newest.get(&owner).copied().unwrap_or_default() {
                staged.changes.push(IndexChange::Tombstone { group, epoch, version });
                continue;
            }
            // A log that holds no record of the owner at or past the version (its
            // collection took them all) needs no marker: nothing it holds reads so.
            if version <= self.model.newest_version(owner) {
                let (object, range) = self.address(record.chunk, record.range);
                ops.push(LogOp::Invalidate { owner, object, range, version });
            }
            staged.marked.push((group, *record));
        }
        (self.commit(ops, &mut staged), staged)
    }

    /// Plans a collection of every segment collection may take, once a segment's
    /// worth of records came since the last one or an append found the log full, or
    /// once the log holds no live byte past its head segment (every write reclaimed or
    /// dropped: an idle logger would otherwise keep its dead segments until it logged
    /// again).
    pub fn stage_collect(&mut self) -> Option<(LogCommit, Staged)> {
        let used = self.model.used_bytes();
        let all_dead = self.model.live_bytes() == 0 && used > SEGMENT_BYTES;
        if !all_dead && self.collect_next_at_used.is_some_and(|at| used < at) {
            return None;
        }
        // Not again before the commit is done, or a segment later.
        self.collect_next_at_used = Some(used + SEGMENT_BYTES);
        let mut staged = Staged::new(Vec::new());
        Some((self.commit(vec![LogOp::Collect], &mut staged), staged))
    }

    /// The shell made `staged`'s commit durable: it is applied to the model and the
    /// index; returns the bytes its collection copied. Where the model cannot take
    /// what the engine took, the two disagree: a fault.
    pub fn committed(&mut self, staged: Staged) -> u64 {
        let mut copied = 0;
        for op in staged.ops {
            let done = match op {
                LogOp::Append { owner, object, range, version, .. } => {
                    self.model.append(owner, object, range, version).map(|_| ())
                }
                LogOp::Invalidate { owner, object, range, version } => {
                    self.model.invalidate(owner, object, range, version).map(|_| ())
                }
                LogOp::Collect => {
                    let done = self.model.collect_garbage().map(|written| copied += written);
                    self.collect_next_at_used = Some(self.model.used_bytes() + SEGMENT_BYTES);
                    done
                }
            };
            if let Err(error) = done {
                self.fault(format!("the model does not take what the log took: {error}"));
            }
        }
        for change in staged.changes {
            self.apply(change);
        }
        for (group, record) in staged.marked {
            self.forget_hidden(group, &record);
        }
        #[cfg(feature = "expensive-checks")]
        self.check_index();
        copied
    }

    /// The index's own invariants (O(n): run under `expensive-checks`, which the
    /// simulation turns on): every write is indexed by its chunk and nothing else is;
    /// no write is above its owner's newest version (D1), which the model never
    /// remembers higher than the index.
    #[cfg(any(test, feature = "expensive-checks"))]
    fn check_index(&self) {
        assert_eq!(self.by_chunk.len(), self.writes.len(), "the index by chunk and its writes");
        for ((group, epoch, version), write) in &self.writes {
            let by_chunk = self.by_chunk.get(&(write.chunk, *group, *epoch, *version));
            assert_eq!(by_chunk, Some(&write.range), "the index by chunk and its writes");
            let newest = self.newest.get(&owner(*group, *epoch)).copied().unwrap_or_default();
            assert!(*version <= newest, "D1: {write:?} above its owner's newest {newest:?}");
            let model = self.model.newest_version(owner(*group, *epoch));
            assert!(model <= newest, "the model's newest {model:?} above the index's {newest:?}");
        }
    }

    /// The shell's engine had no room for `staged`'s appends: nothing of the commit
    /// took effect, and its changes not yet journaled before it wait for the next.
    pub fn refused(&mut self, staged: Staged) {
        self.collect_next_at_used = None;
        let mut unsaved: Vec<IndexChange> = staged
            .changes
            .into_iter()
            .filter(|c| matches!(c, IndexChange::Forgotten { .. }))
            .collect();
        unsaved.append(&mut self.unsaved);
        self.unsaved = unsaved;
    }

    /// Forgets the writes `record`'s marker left with no visible byte (journaled with
    /// the next commit; a restart also forgets what reads as hidden).
    fn forget_hidden(&mut self, group: ChunkGroupId, record: &LogRecord) {
        let (chunk, epoch) = (record.chunk, record.owner);
        let hidden: Vec<Version> = self
            .by_chunk
            .range((chunk, group, epoch, Version(0))..=(chunk, group, epoch, record.version))
            .filter(|&(_, range)| range.overlaps(record.range))
            .map(|(&(_, _, _, version), &range)| (version, range))
            .filter(|&(version, range)| !self.visible(group, epoch, chunk, range, version))
            .map(|(version, _)| version)
            .collect();
        for version in hidden {
            self.change(IndexChange::Forgotten { group, epoch, version });
        }
    }

    fn fault(&mut self, fault: String) {
        self.fault_count += 1;
        if self.faults.len() < FAULTS_KEPT {
            self.faults.push(fault);
        }
    }

    /// Whether any byte of `range` of `chunk` still reads as the write of `version`.
    fn visible(
        &self,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
        version: Version,
    ) -> bool {
        let (object, range) = self.address(chunk, range);
        let (pieces, _) = self.model.read(owner(group, epoch), object, range);
        pieces.iter().any(|(_, v)| *v == version)
    }

    /// Every write of `group` with a visible byte, without data (D4).
    pub fn records(&self, group: ChunkGroupId) -> Vec<LogRecord> {
        let all = (group, Epoch(0), Version(0))..=(group, Epoch(u64::MAX), Version(u64::MAX));
        self.writes
            .range(all)
            .map(|(&(_, owner, _), w)| LogRecord {
                owner,
                chunk: w.chunk,
                range: w.range,
                version: w.version,
            })
            .collect()
    }

    /// Every group with a visible write, and its records (the simulation's report).
    pub fn held(&self) -> Vec<(ChunkGroupId, LogRecord)> {
        let groups: BTreeSet<ChunkGroupId> =
            self.writes.keys().map(|(group, _, _)| *group).collect();
        groups.into_iter().flat_map(|g| self.records(g).into_iter().map(move |r| (g, r))).collect()
    }

    /// Plans the read of `records` of `group`: where the log holds each (none for a
    /// record the index no longer holds).
    pub fn stage_read(
        &self,
        group: ChunkGroupId,
        records: Vec<LogRecord>,
    ) -> (Vec<LogAddress>, ReadPlan) {
        let mut addresses = Vec::with_capacity(records.len());
        let records = records
            .into_iter()
            .map(|r| {
                let held = self.writes.get(&(group, r.owner, r.version));
                if let Some(w) = held {
                    let (object, range) = self.address(w.chunk, w.range);
                    addresses.push(LogAddress { owner: owner(group, r.owner), object, range });
                }
                (r, held.is_some())
            })
            .collect();
        (addresses, ReadPlan { group, records })
    }

    /// What the read `plan` found: per record, the write it names (`None` if the
    /// index no longer holds it), its bytes from `pieces` (the engine's answer, one
    /// list per address the plan asked, in order), or none where the shell has no
    /// engine (`pieces` is `None`: the model says what a read sees). Checked, the
    /// pieces are of writes the index holds, with their stamps; on a fault the
    /// index's write is returned all the same: a doubt never drops a logged write.
    pub fn read_done(
        &mut self,
        plan: ReadPlan,
        pieces: Option<Vec<Vec<LogPiece>>>,
    ) -> Vec<(LogRecord, Option<UnstableWrite>)> {
        let ReadPlan { group, records } = plan;
        let mut found = pieces.map(Vec::into_iter);
        let mut answers = Vec::with_capacity(records.len());
        for (record, asked) in records {
            // The engine's answer to this record's range, whatever became of it since.
            let read = match (asked, found.as_mut()) {
                (true, Some(found)) => Some(found.next().unwrap_or_default()),
                _ => None,
            };
            // Forgotten meanwhile (a marker's commit came first): nothing to send.
            let held = self.writes.get(&(group, record.owner, record.version)).cloned();
            let Some(mut write) = held.filter(|_| asked) else {
                answers.push((record, None));
                continue;
            };
            let (object, range) = self.address(write.chunk, write.range);
            let pieces = match read {
                Some(pieces) => pieces,
                None => self.model_pieces(owner(group, record.owner), object, range),
            };
            if pieces.is_empty() {
                // The log reads none of it: it holds nothing to send.
                answers.push((record, None));
                continue;
            }
            match self.check_pieces(group, record.owner, &write, &pieces) {
                Ok(()) => write.data = assemble(range, &pieces),
                Err(fault) => self.fault(fault),
            }
            answers.push((record, Some(write)));
        }
        answers
    }

    /// What the model says a read of `range` sees: pieces without stamps or bytes.
    fn model_pieces(&self, owner: OwnerId, object: ObjectId, range: ByteRange) -> Vec<LogPiece> {
        let (pieces, _) = self.model.read(owner, object, range);
        pieces
            .into_iter()
            .map(|(range, version)| LogPiece { range, version, stamp: None, data: Payload::NONE })
            .collect()
    }

    /// Whether what the log read over `write`'s range in its owner agrees with the
    /// index (D7): every piece is of a write the index holds, with its stamp. (The
    /// converse is not checked here: a write the index holds may read as newer writes
    /// of its owner everywhere, and is forgotten only once a marker hides it.)
    fn check_pieces(
        &self,
        group: ChunkGroupId,
        epoch: Epoch,
        write: &UnstableWrite,
        pieces: &[LogPiece],
    ) -> Result<(), String> {
        for LogPiece { range, version, stamp, .. } in pieces {
            match self.writes.get(&(group, epoch, *version)) {
                None => {
                    return Err(format!(
                        "reading {write:?}, the log reads {version:?} of epoch {epoch:?} at \
                         {range:?}, a write the index does not hold"
                    ));
                }
                Some(held) if stamp.is_some_and(|stamp| stamp != held.stamp) => {
                    return Err(format!("the log holds {stamp:?} at {range:?} for {held:?}"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Where the log holds each write of the index, in index order (the simulation's
    /// check that a log reads back the same after a crash).
    pub fn addresses(&self) -> Vec<LogAddress> {
        self.writes
            .iter()
            .map(|((group, epoch, _), w)| {
                let (object, range) = self.address(w.chunk, w.range);
                LogAddress { owner: owner(*group, *epoch), object, range }
            })
            .collect()
    }

    /// The machine crashed and its log is opened again: what was durable stays (every
    /// change applied here was), and the engine appends to a new segment.
    pub fn crash(&mut self) {
        self.model.reopen();
    }

    /// A fault the shell found in its log (the simulation's check after a crash).
    pub fn report_fault(&mut self, fault: String) {
        self.fault(fault);
    }

    /// Whether every byte of `range` of `chunk` is held by a record of the write of
    /// `version` or of a newer write (the simulation's check of copies at
    /// acknowledgement: an acknowledgement delayed past rewrites of its bytes finds
    /// the older record hidden, and the newer ones, together, keep what a read must
    /// return).
    pub fn holds(&self, chunk: ChunkId, range: ByteRange, version: Version) -> bool {
        let first = (chunk, ChunkGroupId(0), Epoch(0), Version(0));
        let last = (chunk, ChunkGroupId(u32::MAX), Epoch(u64::MAX), Version(u64::MAX));
        let mut covering: Vec<ByteRange> = self
            .by_chunk
            .range(first..=last)
            .filter(|&(&(_, _, _, v), r)| v >= version && r.overlaps(range))
            .map(|(_, &r)| r)
            .collect();
        covering.sort_by_key(|r| r.start);
        let mut held_to = range.start;
        for r in covering {
            if r.start > held_to {
                break;
            }
            held_to = held_to.max(r.end);
        }
        held_to >= range.end
    }

    /// Data bytes a read would see, across groups: zero once every DVL is reclaimed.
    pub fn live_bytes(&self) -> u64 {
        self.model.live_bytes()
    }

    pub fn used_bytes(&self) -> u64 {
        self.model.used_bytes()
    }

    /// The writes still visible, for the simulation's end check.
    pub fn write_count(&self) -> usize {
        self.writes.len()
    }

    /// Where the log disagreed with the index, or with the model (empty unless a
    /// bug): the first 64 word for word.
    pub fn faults(&self) -> &[String] {
        &self.faults
    }

    /// How many faults there were in all.
    pub fn fault_count(&self) -> u64 {
        self.fault_count
    }

    /// Bytes a record of `write` takes in the log.
    pub fn record_bytes(write: &UnstableWrite) -> u64 {
        RECORD_HEADER_BYTES + write.range.size_bytes()
    }

    /// The log addresses a chunk's range as a range of its object.
    fn address(&self, chunk: ChunkId, range: ByteRange) -> (ObjectId, ByteRange) {
        let base = u64::from(chunk.chunk.0) * self.chunk_size_bytes;
        (chunk.object, ByteRange::from_bounds(base + range.start, base + range.end))
    }
}

/// `op` as the model takes it: without its bytes.
fn without_bytes(op: &LogOp) -> LogOp {
    match op {
        LogOp::Append { owner, object, range, version, stamp, .. } => LogOp::Append {
            owner: *owner,
            object: *object,
            range: *range,
            version: *version,
            stamp: *stamp,
            data: Payload::NONE,
        },
        op => op.clone(),
    }
}

/// The bytes of `range` (of an object) from the pieces a log read over it, in order;
/// none when a piece has none (a log that keeps no payloads). Where a newer write of
/// the same owner hides part of the range, its bytes are what the log holds there: the
/// newer write is logged too, and replaces them where it is applied.
fn assemble(range: ByteRange, pieces: &[LogPiece]) -> Payload {
    if pieces.is_empty() || pieces.iter().any(|p| p.data.is_none()) {
        return Payload::NONE;
    }
    let mut bytes = vec![0u8; range.size_bytes() as usize];
    for piece in pieces {
        let Some(data) = piece.data.bytes() else { continue };
        let start = piece.range.start.saturating_sub(range.start) as usize;
        let end = (start + data.len()).min(bytes.len());
        if start < end {
            bytes[start..end].copy_from_slice(&data[..end - start]);
        }
    }
    Payload::new(bytes.into())
}

/// The log owner of a group's primary in one epoch.
pub fn owner(group: ChunkGroupId, epoch: Epoch) -> OwnerId {
    assert!(epoch.0 < 1 << 32, "epoch {} past the owner id's 32 bits", epoch.0);
    OwnerId(u64::from(group.0) << 32 | epoch.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ChunkIndex, Stamp};

    fn write(start: u64, end: u64, version: u64) -> UnstableWrite {
        let chunk = ChunkId { object: ObjectId(3), chunk: ChunkIndex(1) };
        UnstableWrite {
            chunk,
            range: ByteRange::from_bounds(start, end),
            version: Version(version),
            stamp: Stamp(version * 10),
            data: Payload::NONE,
        }
    }

    fn record(epoch: u64, w: &UnstableWrite) -> LogRecord {
        LogRecord { owner: Epoch(epoch), chunk: w.chunk, range: w.range, version: w.version }
    }

    /// A shell with no engine: it makes each commit durable at once, keeping the
    /// index's journal as a process does.
    #[derive(Default)]
    struct Shell {
        journal: Vec<IndexChange>,
        rewrites: u32,
    }

    impl Shell {
        fn commit(&mut self, log: &mut LogVolume, (commit, staged): (LogCommit, Staged)) -> u64 {
            match commit.index {
                IndexWrite::Append(changes) => self.journal.extend(changes),
                IndexWrite::Rewrite(changes) => {
                    self.journal = changes;
                    self.rewrites += 1;
                }
            }
            log.committed(staged)
        }

        /// The versions logged and those refused as full.
        fn append(
            &mut self,
            log: &mut LogVolume,
            group: ChunkGroupId,
            epoch: Epoch,
            writes: &[UnstableWrite],
        ) -> (Vec<Version>, Vec<Version>) {
            let planned = log.stage_append(group, epoch, writes);
            let (mut logged, full) = (planned.1.repeats.clone(), planned.1.full.clone());
            logged.extend(&planned.1.appended);
            self.commit(log, planned);
            (logged, full)
        }

        fn invalidate(&mut self, log: &mut LogVolume, group: ChunkGroupId, records: &[LogRecord]) {
            let planned = log.stage_invalidate(group, records);
            self.commit(log, planned);
        }

        fn fence(&mut self, log: &mut LogVolume, group: ChunkGroupId, epoch: Epoch) {
            let planned = log.stage_fence(group, epoch);
            self.commit(log, planned);
        }

        fn collect(&mut self, log: &mut LogVolume) -> u64 {
            match log.stage_collect() {
                Some(planned) => self.commit(log, planned),
                None => 0,
            }
        }
    }

    fn read(log: &mut LogVolume, group: ChunkGroupId, r: &LogRecord) -> Option<UnstableWrite> {
        let (_, plan) = log.stage_read(group, vec![*r]);
        log.read_done(plan, None).pop().and_then(|(_, write)| write)
    }

    #[test]
    fn records_are_reported_until_every_byte_is_invalidated() {
        let (group, mut shell) = (ChunkGroupId(2), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let (a, b) = (write(0, 8192, 5), write(4096, 12288, 6));
        let both = [a.clone(), b.clone()];
        assert_eq!(
            shell.append(&mut log, group, Epoch(1), &both),
            (vec![a.version, b.version], vec![])
        );
        // A repeat of an appended version changes nothing.
        let again = shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&a));
        assert_eq!(again, (vec![a.version], vec![]));
        assert_eq!(log.records(group).len(), 2);
        assert_eq!(read(&mut log, group, &record(1, &a)), Some(a.clone()));
        // The marker of b hides a as well (it is older) where they overlap; a's first
        // block is still visible.
        shell.invalidate(&mut log, group, &[record(1, &b)]);
        assert_eq!(log.records(group), vec![record(1, &a)]);
        shell.invalidate(&mut log, group, &[record(1, &a)]);
        assert!(log.records(group).is_empty());
        assert_eq!((log.live_bytes(), log.write_count()), (0, 0));
        assert_eq!(read(&mut log, group, &record(1, &a)), None);
    }

    /// A write whose bytes two newer writes cover between them is held by them (its
    /// own record is gone): drawn seed 51 acknowledged such a write again, to a
    /// retry, and the check of copies that asked for one record over all of it
    /// reported a C3 violation that was not.
    #[test]
    fn a_write_is_held_by_newer_writes_that_cover_it_together() {
        let (group, mut shell) = (ChunkGroupId(2), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let (a, b, c) = (write(4096, 12288, 5), write(0, 8192, 6), write(8192, 16384, 7));
        shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&a));
        shell.append(&mut log, group, Epoch(1), &[b.clone(), c.clone()]);
        // A newer write over a's bytes that b covers, written back and invalidated:
        // its marker leaves a with no visible byte, and a is forgotten.
        let d = write(4096, 8192, 8);
        shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&d));
        shell.invalidate(&mut log, group, &[record(1, &d)]);
        assert_eq!(log.records(group), vec![record(1, &b), record(1, &c)]);
        assert!(log.holds(a.chunk, a.range, a.version));
        assert!(log.holds(a.chunk, ByteRange::from_bounds(0, 16384), a.version));
        // Not a byte beyond what they cover, nor a version newer than theirs.
        assert!(!log.holds(a.chunk, ByteRange::from_bounds(0, 20480), a.version));
        assert!(!log.holds(a.chunk, a.range, Version(7)));
        assert!(log.holds(c.chunk, c.range, Version(7)));
    }

    /// The index's own check fires on an index that lost its by-chunk entry (the
    /// simulation runs it after every commit, under `expensive-checks`).
    #[test]
    #[should_panic(expected = "the index by chunk and its writes")]
    fn an_index_whose_two_maps_disagree_is_caught() {
        let (group, mut shell) = (ChunkGroupId(2), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let w = write(0, 4096, 3);
        shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&w));
        log.check_index();
        log.by_chunk.clear();
        log.check_index();
    }

    /// D1 as the index checks it: a write above its owner's newest version is caught.
    #[test]
    #[should_panic(expected = "D1")]
    fn a_write_above_its_owners_newest_is_caught() {
        let (group, mut shell) = (ChunkGroupId(2), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        shell.append(&mut log, group, Epoch(1), &[write(0, 4096, 3)]);
        log.newest.insert(owner(group, Epoch(1)), Version(2));
        log.check_index();
    }

    #[test]
    fn each_epoch_is_its_own_owner_and_fences_only_grow() {
        let (group, mut shell) = (ChunkGroupId(0), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        shell.append(&mut log, group, Epoch(1), &[write(0, 4096, 9)]);
        // A newer primary logs an older version again under its own owner.
        let newer = shell.append(&mut log, group, Epoch(2), &[write(0, 4096, 7)]);
        assert_eq!(newer.0, vec![Version(7)]);
        assert_eq!(log.records(group).len(), 2);
        shell.fence(&mut log, group, Epoch(3));
        shell.fence(&mut log, group, Epoch(2));
        assert_eq!(log.fence(group), Epoch(3));
        assert_eq!(log.fence(ChunkGroupId(1)), Epoch(0));
    }

    /// Nothing is applied until the shell reports the commit done: a planned append
    /// is neither held nor a repeat, and one the engine had no room for leaves no
    /// trace but the collection it calls for.
    #[test]
    fn a_commit_takes_effect_only_once_done_and_a_refused_one_never() {
        let group = ChunkGroupId(1);
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let w = write(0, 4096, 4);
        let (commit, staged) = log.stage_append(group, Epoch(2), std::slice::from_ref(&w));
        assert_eq!(commit.ops.len(), 1);
        assert!(matches!(&commit.ops[0], LogOp::Append { version: Version(4), .. }));
        assert!(log.records(group).is_empty(), "held before it is durable");
        assert_eq!(log.fence(group), Epoch(0), "fenced before it is durable");
        log.refused(staged);
        assert!(log.records(group).is_empty());
        // Not taken for a repeat: planned again, it is appended again.
        let (commit, staged) = log.stage_append(group, Epoch(2), std::slice::from_ref(&w));
        assert_eq!((commit.ops.len(), staged.repeats.len()), (1, 0));
        log.committed(staged);
        assert_eq!(log.records(group), vec![record(2, &w)]);
        assert_eq!(log.fence(group), Epoch(2));
    }

    /// What a logger's index answers, to compare two.
    fn index_of(log: &LogVolume) -> impl PartialEq + std::fmt::Debug {
        let groups = [ChunkGroupId(1), ChunkGroupId(2)];
        let fences: Vec<Epoch> = groups.iter().map(|g| log.fence(*g)).collect();
        (log.held(), fences, log.tombstones.clone(), log.newest.clone(), log.write_count())
    }

    /// A logger through appends, markers (one ahead of its append), fences, journaling
    /// its index; then one restored from the journal and the extents its log holds
    /// answers the same, and takes a late repeat as a repeat (D1) and the early
    /// marker's append as dropped.
    fn restored_answers_the_same(rewrite_after: u64) {
        let (mut log, mut shell) = (LogVolume::new(1 << 20, 64 << 20), Shell::default());
        log.rewrite_after = rewrite_after;
        let (g1, g2) = (ChunkGroupId(1), ChunkGroupId(2));
        // Writes logged and reclaimed: the journal grows past the index.
        let churn: Vec<UnstableWrite> = (1..=40).map(|v| write(0, 4096, v)).collect();
        shell.append(&mut log, g2, Epoch(1), &churn);
        shell.invalidate(&mut log, g2, &[record(1, &churn[39])]);
        let writes: Vec<UnstableWrite> =
            (1..=6).map(|v| write(v * 4096, v * 4096 + 8192, v)).collect();
        shell.append(&mut log, g1, Epoch(1), &writes[..4]);
        shell.append(&mut log, g2, Epoch(3), &writes[4..]);
        shell.invalidate(&mut log, g1, &[record(1, &writes[0]), record(1, &writes[1])]);
        shell.invalidate(&mut log, g2, &[record(3, &write(0, 4096, 9))]);
        shell.fence(&mut log, g1, Epoch(2));
        assert_eq!(log.write_count(), 4);
        assert_eq!(
            shell.rewrites > 0,
            rewrite_after < INDEX_REWRITE_AFTER,
            "{} rewrites",
            shell.rewrites
        );
        let owners = [owner(g1, Epoch(1)), owner(g2, Epoch(3)), owner(g2, Epoch(1))];
        let extents: Vec<_> = owners
            .iter()
            .flat_map(|o| log.model.extents(*o).into_iter().map(move |(b, r, v)| (*o, b, r, v)))
            .collect();
        let newest = owners.map(|o| (o, log.model.newest_version(o)));
        let mut restored =
            LogVolume::restore(1 << 20, 64 << 20, shell.journal.clone(), extents, newest).unwrap();
        assert_eq!(index_of(&restored), index_of(&log));
        assert_eq!(restored.live_bytes(), log.live_bytes());
        let late = shell.append(&mut restored, g1, Epoch(1), &writes[..1]);
        assert_eq!(late.0, vec![Version(1)]);
        let dropped = shell.append(&mut restored, g2, Epoch(3), &[write(0, 4096, 9)]);
        assert_eq!(dropped.0, vec![Version(9)]);
        assert_eq!(restored.write_count(), 4, "a repeat or a dropped append was logged");
    }

    #[test]
    fn a_logger_restored_from_its_journal_answers_the_same() {
        restored_answers_the_same(INDEX_REWRITE_AFTER);
    }

    #[test]
    fn a_logger_restored_from_a_rewritten_journal_answers_the_same() {
        restored_answers_the_same(2);
    }

    /// D7's check at a read: a piece of a version the index does not hold, or with
    /// another stamp, is a fault (the write is sent all the same, without those bytes).
    #[test]
    fn a_read_whose_pieces_the_index_does_not_hold_is_a_fault() {
        let (group, mut shell) = (ChunkGroupId(1), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let w = write(0, 4096, 3);
        shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&w));
        let piece = |version: u64, stamp: u64| LogPiece {
            range: ByteRange::new(1 << 20, 4096),
            version: Version(version),
            stamp: Some(Stamp(stamp)),
            data: Payload::NONE,
        };
        for (pieces, faults) in [(piece(3, 30), 0), (piece(3, 31), 1), (piece(8, 30), 2)] {
            let (addresses, plan) = log.stage_read(group, vec![record(1, &w)]);
            assert_eq!(addresses.len(), 1);
            let answers = log.read_done(plan, Some(vec![vec![pieces]]));
            assert_eq!(answers[0].1.as_ref().map(|w| w.version), Some(Version(3)));
            assert_eq!(log.fault_count(), faults);
        }
    }

    /// A read out at the engine while a marker's commit forgot one of its records:
    /// that record is answered as gone, and the others keep their own pieces (the
    /// simulation found them shifted by one, each piece checked against the wrong
    /// write).
    #[test]
    fn a_record_forgotten_while_its_read_was_out_leaves_the_others_their_pieces() {
        let (group, mut shell) = (ChunkGroupId(1), Shell::default());
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let (a, b) = (write(0, 4096, 1), write(8192, 12288, 2));
        shell.append(&mut log, group, Epoch(1), &[a.clone(), b.clone()]);
        let (addresses, plan) = log.stage_read(group, vec![record(1, &a), record(1, &b)]);
        shell.invalidate(&mut log, group, &[record(1, &a)]);
        let pieces: Vec<Vec<LogPiece>> = addresses
            .iter()
            .zip([&a, &b])
            .map(|(address, w)| {
                let stamp = Some(w.stamp);
                vec![LogPiece {
                    range: address.range,
                    version: w.version,
                    stamp,
                    data: Payload::NONE,
                }]
            })
            .collect();
        let answers = log.read_done(plan, Some(pieces));
        assert_eq!(answers[0].1, None);
        assert_eq!(answers[1].1.as_ref().map(|w| w.version), Some(b.version));
        assert_eq!(log.faults(), &[] as &[String]);
    }

    #[test]
    fn a_logger_left_with_no_live_record_collects_its_dead_segments() {
        let (group, mut shell) = (ChunkGroupId(0), Shell::default());
        let mut log = LogVolume::new(16 << 20, 64 << 20);
        let mib = 1 << 20;
        let writes: Vec<UnstableWrite> =
            (0..12).map(|i| write(i * mib, (i + 1) * mib, i + 1)).collect();
        for w in &writes {
            shell.append(&mut log, group, Epoch(1), std::slice::from_ref(w));
        }
        // A collection with every record live: nothing to take; the next waits for a
        // segment's worth of new records.
        assert_eq!(shell.collect(&mut log), 0);
        assert!(log.stage_collect().is_none());
        let full = log.used_bytes();
        assert!(full >= 12 * mib, "used {full}");
        // Every record reclaimed: the sealed segments go though no record came since.
        let records: Vec<LogRecord> = writes.iter().map(|w| record(1, w)).collect();
        shell.invalidate(&mut log, group, &records);
        assert_eq!(log.live_bytes(), 0);
        shell.collect(&mut log);
        assert!(log.used_bytes() <= 2 * SEGMENT_BYTES, "used {} of {full}", log.used_bytes());
    }

    #[test]
    fn a_full_log_refuses_and_collection_gives_space_back() {
        let (group, mut shell) = (ChunkGroupId(0), Shell::default());
        let mut log = LogVolume::new(1 << 20, SEGMENT_BYTES * 2);
        let mut version = 0;
        let mut appended = Vec::new();
        loop {
            version += 1;
            let w = write(0, 1 << 20, version);
            let (logged, full) = shell.append(&mut log, group, Epoch(1), std::slice::from_ref(&w));
            if !full.is_empty() {
                assert_eq!((logged, full), (vec![], vec![w.version]));
                break;
            }
            appended.push(w);
        }
        assert!(!log.fits(&write(0, 1 << 20, version)));
        let records: Vec<LogRecord> = appended.iter().map(|w| record(1, w)).collect();
        shell.invalidate(&mut log, group, &records);
        shell.collect(&mut log);
        assert!(log.fits(&write(0, 1 << 20, version)), "used {}", log.used_bytes());
        assert_eq!(log.live_bytes(), 0);
    }

    /// A batch planned in turn as the engine appends: one record too large for the
    /// room left is refused, and a smaller one after it still fits.
    #[test]
    fn a_batch_refuses_what_does_not_fit_in_turn() {
        let (group, mut shell) = (ChunkGroupId(0), Shell::default());
        let mut log = LogVolume::new(8 << 20, SEGMENT_BYTES);
        let big = [write(0, 3 << 20, 1), write(0, 2 << 20, 2), write(0, 4096, 3)];
        let (logged, full) = shell.append(&mut log, group, Epoch(1), &big);
        assert_eq!((logged, full), (vec![Version(1), Version(3)], vec![Version(2)]));
    }
}
