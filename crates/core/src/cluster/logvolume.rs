//! A storage server's logger (Sierra 3.3): the records the DVLs of other servers'
//! primaries log here, kept in the one logger model every somnus log follows
//! (`crate::logger`, the `logstore` engine's semantics: versions grow per owner, a
//! deletion marker hides its version and older ones, space comes back when a segment
//! is collected), and per group the epoch the logger is fenced at.
//!
//! Like [`super::store::ChunkStore`], it changes only when the shell reports a disk
//! write done, so a crash keeps exactly what was durable. The records themselves live
//! in a [`LogBackend`]: the core's model of a log ([`ModelLog`], no payloads), or the
//! shell's real engine (the simulator runs `somnus-logstore` over its fault-injecting
//! in-memory disk, stepped by its events; the runtime over files). Each disk
//! completion the shell reports is one group commit: its records are queued, then
//! flushed together.
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

/// A log a logger keeps its records in, in its owners' versions (the semantics of
/// `crate::logger`: a deletion marker hides its version and older ones of its bytes).
/// Appends and markers are queued; [`LogBackend::flush`] makes them durable and
/// visible, together.
pub trait LogBackend: std::fmt::Debug + Send {
    /// Whether an append of `payload_bytes` would fit now, the queued ones counted.
    fn fits(&self, payload_bytes: u64) -> bool;
    /// The owner's newest version, the queued ones counted.
    fn newest_version(&self, owner: OwnerId) -> Version;
    /// Queues `version` of `range`, written by `stamp`, with its bytes (none in the
    /// simulator). Only a full log refuses.
    fn append(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
        stamp: Stamp,
        data: &Payload,
    ) -> Result<(), BackendError>;
    /// Queues a deletion marker (it may use the segment of headroom past the capacity).
    fn invalidate(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<(), BackendError>;
    /// Makes everything queued durable and visible (one group commit).
    fn flush(&mut self) -> Result<(), BackendError>;
    /// The pieces of `range` that read as data, with their version and the stamp the
    /// log's bytes hold (`None` from a log that keeps no payloads).
    fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Result<Vec<LogPiece>, BackendError>;
    /// The version each piece of `range` reads as, without the bytes.
    fn versions(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Vec<(ByteRange, Version)>;
    /// Collects every segment collection may take; returns the bytes its copies wrote.
    fn collect(&mut self) -> Result<u64, BackendError>;
    /// Data bytes a read would see.
    fn live_bytes(&self) -> u64;
    fn used_bytes(&self) -> u64;
    /// The machine crashed: the log keeps what was durable and is opened again (its
    /// recovery runs).
    fn crash(&mut self) -> Result<(), BackendError>;
    /// A change of the logger's index, to be made durable with the next flush. The
    /// simulator's logger keeps its index across a crash in memory and ignores these;
    /// a process that restarts rebuilds its index from them ([`LogVolume::restore`]).
    fn note(&mut self, _change: &IndexChange) {}
    /// Whether the noted changes have grown enough to be replaced by the index's
    /// current state ([`LogBackend::rewrite_index`]).
    fn index_rewrite_due(&self) -> bool {
        false
    }
    /// Replaces every change noted so far by `state`, durably.
    fn rewrite_index(&mut self, _state: &[IndexChange]) -> Result<(), BackendError> {
        Ok(())
    }
}

/// One change of a logger's index ([`LogBackend::note`]): replaying them in order
/// rebuilds the index a process had.
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

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("the log is full")]
    Full,
    #[error("{0}")]
    Failed(String),
}

/// The core's model of a log as a backend: metadata and geometry, no payloads.
#[derive(Clone, Debug)]
pub struct ModelLog(Logger);

impl ModelLog {
    pub fn new(capacity_bytes: u64) -> ModelLog {
        let geometry = LogGeometry {
            capacity_bytes: capacity_bytes.max(SEGMENT_BYTES),
            segment_bytes: SEGMENT_BYTES,
            compact_live_percent_max: 50,
        };
        ModelLog(Logger::new(LoggerId(0), geometry))
    }
}

fn failed(error: impl std::fmt::Display) -> BackendError {
    BackendError::Failed(error.to_string())
}

impl LogBackend for ModelLog {
    fn fits(&self, payload_bytes: u64) -> bool {
        self.0.fits(payload_bytes)
    }

    fn newest_version(&self, owner: OwnerId) -> Version {
        self.0.newest_version(owner)
    }

    fn append(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
        _stamp: Stamp,
        _data: &Payload,
    ) -> Result<(), BackendError> {
        match self.0.append(owner, object, range, version) {
            Ok(_) => Ok(()),
            Err(crate::logger::LoggerError::Full { .. }) => Err(BackendError::Full),
            Err(error) => Err(failed(error)),
        }
    }

    fn invalidate(
        &mut self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
        version: Version,
    ) -> Result<(), BackendError> {
        self.0.invalidate(owner, object, range, version).map(|_| ()).map_err(failed)
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    fn read(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Result<Vec<LogPiece>, BackendError> {
        let (pieces, _) = self.0.read(owner, object, range);
        let piece =
            |(range, version)| LogPiece { range, version, stamp: None, data: Payload::NONE };
        Ok(pieces.into_iter().map(piece).collect())
    }

    fn versions(
        &self,
        owner: OwnerId,
        object: ObjectId,
        range: ByteRange,
    ) -> Vec<(ByteRange, Version)> {
        self.0.read(owner, object, range).0
    }

    fn collect(&mut self) -> Result<u64, BackendError> {
        self.0.collect_garbage().map_err(failed)
    }

    fn live_bytes(&self) -> u64 {
        self.0.live_bytes()
    }

    fn used_bytes(&self) -> u64 {
        self.0.used_bytes()
    }

    fn crash(&mut self) -> Result<(), BackendError> {
        // The model holds only what was durable.
        Ok(())
    }
}

#[derive(Debug)]
pub struct LogVolume {
    log: Box<dyn LogBackend>,
    chunk_size_bytes: u64,
    /// Per group, the epoch the logger is fenced at: older primaries are refused.
    fences: BTreeMap<ChunkGroupId, Epoch>,
    /// The writes logged and still visible in part, by group, owner and version: the
    /// logger's index of its log, what recovery reports and reads return.
    writes: BTreeMap<(ChunkGroupId, Epoch, Version), UnstableWrite>,
    /// The keys of `writes` by chunk: a marker looks up the writes it may hide, and
    /// the simulation's check a chunk's records, among a day of logged writes.
    by_chunk: BTreeSet<(ChunkId, ChunkGroupId, Epoch, Version)>,
    /// Markers that came before their append (it was delayed, or never sent): the
    /// append is dropped when it comes, until a newer epoch fences the owner.
    tombstones: BTreeSet<(ChunkGroupId, Epoch, Version)>,
    /// Per owner, the newest version appended: a log may forget it (the engine, once
    /// collection took every record of the owner and a crash reopened it), and D1's
    /// repeat check must not.
    newest: BTreeMap<OwnerId, Version>,
    /// Groups whose raised fence is not durable yet (its flush failed): a recovery is
    /// not answered until a flush makes it so (D4).
    fences_unsynced: BTreeSet<ChunkGroupId>,
    /// Where the log's records disagreed with this index, or the log failed: bugs of
    /// the engine or of this index, which the simulation reports as violations. The
    /// first `FAULTS_KEPT`, and how many there were in all.
    faults: Vec<String>,
    fault_count: u64,
    /// The used bytes the next collection waits for: a segment past where the last
    /// one left the log, unless an append was refused since (`None`). A collection
    /// plans the copies of up to eight segments, painting each of their records; after
    /// every batch of markers, that was most of a geared day's replay.
    collect_next_at_used: Option<u64>,
}

/// Faults kept word for word: a disk that fails every flush must not grow the list
/// for as long as the process runs.
const FAULTS_KEPT: usize = 64;

impl LogVolume {
    /// A logger on the core's model of a log.
    pub fn new(chunk_size_bytes: u64, capacity_bytes: u64) -> LogVolume {
        LogVolume::on(chunk_size_bytes, Box::new(ModelLog::new(capacity_bytes)))
    }

    /// A logger keeping its records in `log`, empty.
    pub fn on(chunk_size_bytes: u64, log: Box<dyn LogBackend>) -> LogVolume {
        LogVolume {
            log,
            chunk_size_bytes,
            fences: BTreeMap::new(),
            writes: BTreeMap::new(),
            by_chunk: BTreeSet::new(),
            tombstones: BTreeSet::new(),
            newest: BTreeMap::new(),
            fences_unsynced: BTreeSet::new(),
            faults: Vec::new(),
            fault_count: 0,
            collect_next_at_used: None,
        }
    }

    /// A logger on `log` whose index is rebuilt from the changes noted before a
    /// restart, in order.
    pub fn restore(
        chunk_size_bytes: u64,
        log: Box<dyn LogBackend>,
        changes: impl IntoIterator<Item = IndexChange>,
    ) -> LogVolume {
        let mut volume = LogVolume::on(chunk_size_bytes, log);
        for change in changes {
            volume.apply(change);
        }
        // Writes hidden by markers flushed before the crash, whose forgetting was not.
        let hidden: Vec<(ChunkGroupId, Epoch, Version)> = volume
            .writes
            .iter()
            .filter(|((group, epoch, _), write)| !volume.visible(*group, *epoch, write))
            .map(|(key, _)| *key)
            .collect();
        for key in hidden {
            volume.forget(key);
        }
        volume
    }

    fn forget(&mut self, key: (ChunkGroupId, Epoch, Version)) {
        if let Some(write) = self.writes.remove(&key) {
            self.by_chunk.remove(&(write.chunk, key.0, key.1, key.2));
        }
    }

    /// Notes `change` with the log (made durable by the next flush) and applies it.
    fn change(&mut self, change: IndexChange) {
        self.log.note(&change);
        self.apply(change);
    }

    fn apply(&mut self, change: IndexChange) {
        match change {
            IndexChange::Fenced { group, epoch } => {
                self.fences.insert(group, epoch);
                // Appends of older owners are refused now: their tombstones are not needed.
                self.tombstones.retain(|(g, owner, _)| *g != group || *owner >= epoch);
            }
            IndexChange::Logged { group, epoch, write } => {
                let newest = self.newest.entry(owner(group, epoch)).or_default();
                *newest = (*newest).max(write.version);
                let key = (group, epoch, write.version);
                self.forget(key);
                self.by_chunk.insert((write.chunk, group, epoch, write.version));
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

    /// Flushes the log, then rewrites the noted index if it has grown enough.
    fn flush(&mut self) -> Result<(), BackendError> {
        self.log.flush()?;
        if self.log.index_rewrite_due() {
            let state = self.index_state();
            self.log.rewrite_index(&state)?;
        }
        Ok(())
    }

    pub fn fence(&self, group: ChunkGroupId) -> Epoch {
        self.fences.get(&group).copied().unwrap_or_default()
    }

    /// Raises the group's fence (never lowers it); returns whether it is durable. A
    /// fence whose flush failed holds in memory (older owners stay refused) and is
    /// flushed again by the next call for it: a recovery is answered only once its
    /// fence is durable, or a restart could take a deposed primary's append (D4).
    pub fn set_fence(&mut self, group: ChunkGroupId, epoch: Epoch) -> bool {
        let fence = self.fence(group);
        if epoch < fence || (epoch == fence && !self.fences_unsynced.contains(&group)) {
            // Covered by the newer fence, once that is durable.
            return self.fence_durable(group);
        }
        if epoch > fence {
            self.change(IndexChange::Fenced { group, epoch });
        }
        match self.flush() {
            Ok(()) => {
                // A flush makes every change noted before it durable.
                self.fences_unsynced.clear();
                true
            }
            Err(error) => {
                self.fault(format!("flushing the log: {error}"));
                self.fences_unsynced.insert(group);
                false
            }
        }
    }

    /// Whether the group's fence is durable ([`LogVolume::set_fence`]).
    pub fn fence_durable(&self, group: ChunkGroupId) -> bool {
        !self.fences_unsynced.contains(&group)
    }

    /// Whether a record of `write` fits now.
    pub fn fits(&self, write: &UnstableWrite) -> bool {
        self.log.fits(write.range.size_bytes())
    }

    /// Logs a batch of writes under the owner of `epoch`, as one group commit; returns
    /// the versions logged and those refused because the log is full. A version at or
    /// below the owner's newest is one appended already (a primary sends a logger its
    /// batches one at a time, in version order): it is taken as a repeat.
    pub fn append_batch(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        writes: &[UnstableWrite],
    ) -> (Vec<Version>, Vec<Version>) {
        let owner = owner(group, epoch);
        let (mut logged, mut full, mut appended) = (Vec::new(), Vec::new(), Vec::new());
        for write in writes {
            if write.version <= self.newest_version(owner)
                || self.tombstones.contains(&(group, epoch, write.version))
            {
                logged.push(write.version);
                continue;
            }
            let (object, range) = self.address(write.chunk, write.range);
            match self.log.append(owner, object, range, write.version, write.stamp, &write.data) {
                Ok(()) => {
                    // The index keeps no bytes: a read takes them from the log.
                    let indexed = UnstableWrite { data: Payload::NONE, ..write.clone() };
                    self.change(IndexChange::Logged { group, epoch, write: indexed });
                    appended.push(write.version);
                    logged.push(write.version);
                }
                Err(BackendError::Full) => {
                    self.collect_next_at_used = None;
                    full.push(write.version);
                }
                Err(BackendError::Failed(error)) => {
                    self.fault(format!("appending {write:?}: {error}"));
                    full.push(write.version);
                }
            }
        }
        let flushed = self.flush();
        if flushed.is_ok() {
            self.fences_unsynced.clear();
        }
        if let Err(error) = flushed {
            // Not durable: the batch is not acknowledged (the primary logs it again,
            // elsewhere or later), and the index forgets it.
            self.fault(format!("flushing the log: {error}"));
            for version in &appended {
                self.change(IndexChange::Forgotten { group, epoch, version: *version });
            }
            logged.retain(|v| !appended.contains(v));
            full.extend(appended);
        }
        (logged, full)
    }

    /// The owner's newest version: this logger's memory of it, or the log's.
    fn newest_version(&self, owner: OwnerId) -> Version {
        let remembered = self.newest.get(&owner).copied().unwrap_or_default();
        remembered.max(self.log.newest_version(owner))
    }

    /// Appends deletion markers for `records`, as one group commit, and forgets the
    /// writes they leave with no visible byte; returns whether the markers are
    /// durable. A record this logger never held needs none. Markers whose flush failed
    /// are not answered for (the primary sends them again): a restart could bring the
    /// records back, and the primary would have forgotten them (D5).
    pub fn invalidate_batch(&mut self, group: ChunkGroupId, records: &[LogRecord]) -> bool {
        let mut marked = Vec::new();
        for record in records {
            let owner = owner(group, record.owner);
            if record.version > self.newest_version(owner) {
                let (epoch, version) = (record.owner, record.version);
                self.change(IndexChange::Tombstone { group, epoch, version });
                continue;
            }
            let (object, range) = self.address(record.chunk, record.range);
            // Markers may use the segment of headroom past the capacity, so they never
            // fail on a log that can hold them at all.
            if self.log.invalidate(owner, object, range, record.version).is_ok() {
                marked.push(*record);
            }
        }
        if let Err(error) = self.flush() {
            // The markers are not durable: nothing is pruned.
            self.fault(format!("flushing the log: {error}"));
            return false;
        }
        self.fences_unsynced.clear();
        for record in &marked {
            let (chunk, owner) = (record.chunk, record.owner);
            let hidden: Vec<Version> = self
                .by_chunk
                .range((chunk, group, owner, Version(0))..=(chunk, group, owner, record.version))
                .filter_map(|&(_, _, _, version)| self.writes.get(&(group, owner, version)))
                .filter(|w| w.range.overlaps(record.range) && !self.visible(group, owner, w))
                .map(|w| w.version)
                .collect();
            // Noted, durable with the next flush; a restart also forgets what reads
            // as hidden ([`LogVolume::restore`]).
            for version in hidden {
                self.change(IndexChange::Forgotten { group, epoch: record.owner, version });
            }
        }
        true
    }

    fn fault(&mut self, fault: String) {
        self.fault_count += 1;
        if self.faults.len() < FAULTS_KEPT {
            self.faults.push(fault);
        }
    }

    /// Whether any byte of `write` still reads as its version.
    fn visible(&self, group: ChunkGroupId, epoch: Epoch, write: &UnstableWrite) -> bool {
        let (object, range) = self.address(write.chunk, write.range);
        let pieces = self.log.versions(owner(group, epoch), object, range);
        pieces.iter().any(|(_, version)| *version == write.version)
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

    /// The write `record` names, if a byte of it is still visible.
    pub fn read(&mut self, group: ChunkGroupId, record: &LogRecord) -> Option<UnstableWrite> {
        let mut write = self.writes.get(&(group, record.owner, record.version)).cloned()?;
        // Checked, the log's bytes hold the index's stamp; on a fault the index's write
        // is returned all the same: a doubt never drops a logged write.
        match self.check_reads(group, record.owner, &write) {
            Ok(pieces) => write.data = assemble(self.address(write.chunk, write.range).1, &pieces),
            Err(fault) => self.fault(fault),
        }
        Some(write)
    }

    /// What the log reads over `write`'s range in its owner, checked against the index
    /// (D7): every piece is of a write the index holds as visible, with its stamp. (The
    /// converse is not checked here: a write the index holds may read as newer writes
    /// of its owner everywhere, and is forgotten only once a marker hides it; the
    /// crash check compares whole reads before and after.)
    fn check_reads(
        &self,
        group: ChunkGroupId,
        epoch: Epoch,
        write: &UnstableWrite,
    ) -> Result<Vec<LogPiece>, String> {
        let (object, range) = self.address(write.chunk, write.range);
        let pieces = self
            .log
            .read(owner(group, epoch), object, range)
            .map_err(|e| format!("reading {write:?}: {e}"))?;
        for LogPiece { range, version, stamp, .. } in &pieces {
            match self.writes.get(&(group, epoch, *version)) {
                None => {
                    return Err(format!(
                        "the log reads {version:?} of epoch {epoch:?} at {range:?}, a write \
                         the index does not hold"
                    ));
                }
                Some(held) if stamp.is_some_and(|stamp| stamp != held.stamp) => {
                    return Err(format!("the log holds {stamp:?} at {range:?} for {held:?}"));
                }
                Some(_) => {}
            }
        }
        Ok(pieces)
    }

    /// What the log reads over every write of the index, in index order.
    fn read_all(&mut self) -> Vec<Vec<LogPiece>> {
        let writes: Vec<((ChunkGroupId, Epoch, Version), UnstableWrite)> =
            self.writes.iter().map(|(k, w)| (*k, w.clone())).collect();
        let mut reads = Vec::with_capacity(writes.len());
        for ((group, epoch, _), write) in writes {
            match self.check_reads(group, epoch, &write) {
                Ok(pieces) => reads.push(pieces),
                Err(fault) => {
                    self.fault(fault);
                    reads.push(Vec::new());
                }
            }
        }
        reads
    }

    /// The machine crashed: the log is opened again from what was durable (its
    /// recovery runs). Everything it held was durable (each disk completion flushes),
    /// so it must read back exactly as before, and hold as many live bytes (D7).
    pub fn crash(&mut self) {
        let (before, live_before) = (self.read_all(), self.log.live_bytes());
        if let Err(error) = self.log.crash() {
            self.fault(format!("opening the log after a crash: {error}"));
            return;
        }
        let (after, live_after) = (self.read_all(), self.log.live_bytes());
        if live_before != live_after {
            self.fault(format!("{live_before} live bytes before a crash, {live_after} after"));
        }
        let keys: Vec<_> = self.writes.keys().copied().collect();
        if let Some(((key, was), is)) =
            keys.iter().zip(&before).zip(&after).find(|((_, was), is)| was != is)
        {
            self.fault(format!("{key:?} read {was:?} before a crash, {is:?} after"));
        }
    }

    /// Whether a record of the write of `version` over `range` of `chunk`, or of a
    /// newer write over all of it, is held (the simulation's check of copies at
    /// acknowledgement: an acknowledgement delayed past a rewrite of its bytes finds
    /// the older record hidden, and the newer one keeps what a read must return).
    pub fn holds(&self, chunk: ChunkId, range: ByteRange, version: Version) -> bool {
        let first = (chunk, ChunkGroupId(0), Epoch(0), Version(0));
        let last = (chunk, ChunkGroupId(u32::MAX), Epoch(u64::MAX), Version(u64::MAX));
        self.by_chunk
            .range(first..=last)
            .filter_map(|&(_, group, epoch, v)| self.writes.get(&(group, epoch, v)))
            .any(|w| {
                w.version >= version && w.range.start <= range.start && range.end <= w.range.end
            })
    }

    /// Collects every segment collection may take, once a segment's worth of records
    /// came since the last collection or an append found the log full, or once the
    /// log holds no live byte past its head segment (every write reclaimed or
    /// dropped: an idle logger would otherwise keep its dead segments until it logged
    /// again); returns the bytes it wrote (copies).
    pub fn collect(&mut self) -> u64 {
        let used = self.log.used_bytes();
        let all_dead = self.log.live_bytes() == 0 && used > SEGMENT_BYTES;
        if !all_dead && self.collect_next_at_used.is_some_and(|at| used < at) {
            return 0;
        }
        let written = match self.log.collect() {
            Ok(written) => written,
            Err(error) => {
                self.fault(format!("collecting the log: {error}"));
                0
            }
        };
        self.collect_next_at_used = Some(self.log.used_bytes() + SEGMENT_BYTES);
        written
    }

    /// Data bytes a read would see, across groups: zero once every DVL is reclaimed.
    pub fn live_bytes(&self) -> u64 {
        self.log.live_bytes()
    }

    pub fn used_bytes(&self) -> u64 {
        self.log.used_bytes()
    }

    /// The writes still visible, for the simulation's end check.
    pub fn write_count(&self) -> usize {
        self.writes.len()
    }

    /// Where the log disagreed with the index, or failed (empty unless a bug): the
    /// first 64 word for word.
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
fn owner(group: ChunkGroupId, epoch: Epoch) -> OwnerId {
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

    #[test]
    fn records_are_reported_until_every_byte_is_invalidated() {
        let group = ChunkGroupId(2);
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        let (a, b) = (write(0, 8192, 5), write(4096, 12288, 6));
        assert_eq!(
            log.append_batch(group, Epoch(1), &[a.clone(), b.clone()]),
            (vec![a.version, b.version], vec![])
        );
        // A repeat of an appended version changes nothing.
        assert_eq!(
            log.append_batch(group, Epoch(1), std::slice::from_ref(&a)),
            (vec![a.version], vec![])
        );
        assert_eq!(log.records(group).len(), 2);
        assert_eq!(log.read(group, &record(1, &a)), Some(a.clone()));
        // The marker of b hides a as well (it is older) where they overlap; a's first
        // block is still visible.
        log.invalidate_batch(group, &[record(1, &b)]);
        assert_eq!(log.records(group), vec![record(1, &a)]);
        log.invalidate_batch(group, &[record(1, &a)]);
        assert!(log.records(group).is_empty());
        assert_eq!(log.live_bytes(), 0);
        assert_eq!(log.write_count(), 0);
    }

    #[test]
    fn each_epoch_is_its_own_owner_and_fences_only_grow() {
        let group = ChunkGroupId(0);
        let mut log = LogVolume::new(1 << 20, 64 << 20);
        log.append_batch(group, Epoch(1), &[write(0, 4096, 9)]);
        // A newer primary logs an older version again under its own owner.
        assert_eq!(log.append_batch(group, Epoch(2), &[write(0, 4096, 7)]).0, vec![Version(7)]);
        assert_eq!(log.records(group).len(), 2);
        log.set_fence(group, Epoch(3));
        log.set_fence(group, Epoch(2));
        assert_eq!(log.fence(group), Epoch(3));
        assert_eq!(log.fence(ChunkGroupId(1)), Epoch(0));
    }

    type Shared<T> = std::sync::Arc<std::sync::Mutex<T>>;

    /// The model log (shared, so that a restored logger opens the same one), noting
    /// index changes into a shared list at each flush (the durable notes), rewritten
    /// whole once it holds `rewrite_at`; its flushes fail while `failing` is set.
    #[derive(Debug)]
    struct Noting {
        log: Shared<ModelLog>,
        notes: Shared<Vec<IndexChange>>,
        rewrite_at: usize,
        queued: Vec<IndexChange>,
        failing: Shared<bool>,
    }

    impl LogBackend for Noting {
        fn fits(&self, payload_bytes: u64) -> bool {
            self.log.lock().unwrap().fits(payload_bytes)
        }
        fn newest_version(&self, owner: OwnerId) -> Version {
            self.log.lock().unwrap().newest_version(owner)
        }
        fn append(
            &mut self,
            owner: OwnerId,
            object: ObjectId,
            range: ByteRange,
            version: Version,
            stamp: Stamp,
            data: &Payload,
        ) -> Result<(), BackendError> {
            self.log.lock().unwrap().append(owner, object, range, version, stamp, data)
        }
        fn invalidate(
            &mut self,
            owner: OwnerId,
            object: ObjectId,
            range: ByteRange,
            version: Version,
        ) -> Result<(), BackendError> {
            self.log.lock().unwrap().invalidate(owner, object, range, version)
        }
        fn flush(&mut self) -> Result<(), BackendError> {
            if *self.failing.lock().unwrap() {
                return Err(BackendError::Failed("injected".to_owned()));
            }
            self.notes.lock().unwrap().append(&mut self.queued);
            Ok(())
        }
        fn read(
            &self,
            owner: OwnerId,
            object: ObjectId,
            range: ByteRange,
        ) -> Result<Vec<LogPiece>, BackendError> {
            self.log.lock().unwrap().read(owner, object, range)
        }
        fn versions(
            &self,
            owner: OwnerId,
            object: ObjectId,
            range: ByteRange,
        ) -> Vec<(ByteRange, Version)> {
            self.log.lock().unwrap().versions(owner, object, range)
        }
        fn collect(&mut self) -> Result<u64, BackendError> {
            self.log.lock().unwrap().collect()
        }
        fn live_bytes(&self) -> u64 {
            self.log.lock().unwrap().live_bytes()
        }
        fn used_bytes(&self) -> u64 {
            self.log.lock().unwrap().used_bytes()
        }
        fn crash(&mut self) -> Result<(), BackendError> {
            Ok(())
        }
        fn note(&mut self, change: &IndexChange) {
            self.queued.push(change.clone());
        }
        fn index_rewrite_due(&self) -> bool {
            self.notes.lock().unwrap().len() >= self.rewrite_at
        }
        fn rewrite_index(&mut self, state: &[IndexChange]) -> Result<(), BackendError> {
            *self.notes.lock().unwrap() = state.to_vec();
            Ok(())
        }
    }

    /// What a logger's index answers, to compare two.
    fn index_of(log: &LogVolume) -> impl PartialEq + std::fmt::Debug {
        let groups = [ChunkGroupId(1), ChunkGroupId(2)];
        let fences: Vec<Epoch> = groups.iter().map(|g| log.fence(*g)).collect();
        (log.held(), fences, log.tombstones.clone(), log.newest.clone(), log.write_count())
    }

    /// A logger through appends, markers (one ahead of its append), fences, noting its
    /// index; then one restored from the notes on the same log answers the same, and
    /// takes a late repeat as a repeat (D1) and the early marker's append as dropped.
    fn restored_answers_the_same(rewrite_at: usize) {
        let (log, notes): (Shared<ModelLog>, Shared<Vec<IndexChange>>) = (
            std::sync::Arc::new(std::sync::Mutex::new(ModelLog::new(64 << 20))),
            Default::default(),
        );
        let backend = || Box::new(noting(&log, &notes, rewrite_at, &Shared::default()));
        let mut volume = LogVolume::on(1 << 20, backend());
        let (g1, g2) = (ChunkGroupId(1), ChunkGroupId(2));
        let writes: Vec<UnstableWrite> =
            (1..=6).map(|v| write(v * 4096, v * 4096 + 8192, v)).collect();
        volume.append_batch(g1, Epoch(1), &writes[..4]);
        volume.append_batch(g2, Epoch(3), &writes[4..]);
        volume.invalidate_batch(g1, &[record(1, &writes[0]), record(1, &writes[1])]);
        volume.invalidate_batch(g2, &[record(3, &write(0, 4096, 9))]);
        volume.set_fence(g1, Epoch(2));
        assert_eq!(volume.write_count(), 4);
        let noted = notes.lock().unwrap().clone();
        let mut restored = LogVolume::restore(1 << 20, backend(), noted);
        assert_eq!(index_of(&restored), index_of(&volume));
        assert_eq!(restored.append_batch(g1, Epoch(1), &writes[..1]).0, vec![Version(1)]);
        assert_eq!(restored.append_batch(g2, Epoch(3), &[write(0, 4096, 9)]).0, vec![Version(9)]);
        assert_eq!(restored.write_count(), 4, "a repeat or a dropped append was logged");
    }

    fn noting(
        log: &Shared<ModelLog>,
        notes: &Shared<Vec<IndexChange>>,
        rewrite_at: usize,
        failing: &Shared<bool>,
    ) -> Noting {
        let (log, notes, failing) = (log.clone(), notes.clone(), failing.clone());
        Noting { log, notes, rewrite_at, queued: Vec::new(), failing }
    }

    /// A fence or markers whose flush failed are reported not durable (so the logger
    /// does not answer the recovery or the invalidation: D4, D5), and a later flush
    /// makes them so; a restart in between would have lost them.
    #[test]
    fn a_fence_or_markers_whose_flush_failed_are_not_durable_until_flushed() {
        let log: Shared<ModelLog> =
            std::sync::Arc::new(std::sync::Mutex::new(ModelLog::new(64 << 20)));
        let (notes, failing) = (Shared::default(), Shared::default());
        let mut volume =
            LogVolume::on(1 << 20, Box::new(noting(&log, &notes, usize::MAX, &failing)));
        let group = ChunkGroupId(1);
        let writes = [write(0, 4096, 1), write(4096, 8192, 2)];
        assert_eq!(volume.append_batch(group, Epoch(1), &writes).0.len(), 2);
        let restored = |notes: &Shared<Vec<IndexChange>>| {
            let noted = notes.lock().unwrap().clone();
            let backend = Box::new(noting(&log, notes, usize::MAX, &Shared::default()));
            LogVolume::restore(1 << 20, backend, noted)
        };

        *failing.lock().unwrap() = true;
        assert!(!volume.set_fence(group, Epoch(2)), "a fence that failed its flush is durable");
        assert!(!volume.fence_durable(group));
        // Held in memory: the deposed owner is refused as before ...
        assert_eq!(volume.fence(group), Epoch(2));
        // ... but a restart now would take its appends again.
        assert_eq!(restored(&notes).fence(group), Epoch(0));
        assert!(!volume.set_fence(group, Epoch(2)), "a second failed flush");
        assert!(!volume.set_fence(group, Epoch(1)), "an older epoch is covered only when durable");
        let marker = [record(1, &writes[0])];
        assert!(!volume.invalidate_batch(group, &marker), "markers that failed are durable");
        assert_eq!(volume.records(group).len(), 2, "a write was forgotten for markers not durable");

        *failing.lock().unwrap() = false;
        assert!(volume.set_fence(group, Epoch(2)));
        assert!(volume.fence_durable(group));
        assert_eq!(restored(&notes).fence(group), Epoch(2));
        assert!(volume.set_fence(group, Epoch(1)));
        assert!(volume.invalidate_batch(group, &marker));
        assert_eq!(volume.records(group).len(), 1);
        assert_eq!(volume.fault_count(), 3);
    }

    #[test]
    fn a_logger_restored_from_its_noted_index_answers_the_same() {
        restored_answers_the_same(usize::MAX);
    }

    #[test]
    fn a_logger_restored_from_a_rewritten_index_answers_the_same() {
        restored_answers_the_same(3);
    }

    #[test]
    fn a_logger_left_with_no_live_record_collects_its_dead_segments() {
        let group = ChunkGroupId(0);
        let mut log = LogVolume::new(16 << 20, 64 << 20);
        let mib = 1 << 20;
        let writes: Vec<UnstableWrite> =
            (0..12).map(|i| write(i * mib, (i + 1) * mib, i + 1)).collect();
        for w in &writes {
            log.append_batch(group, Epoch(1), std::slice::from_ref(w));
        }
        // A collection with every record live: nothing to take; the next waits for a
        // segment's worth of new records.
        assert_eq!(log.collect(), 0);
        let full = log.used_bytes();
        assert!(full >= 12 * mib, "used {full}");
        // Every record reclaimed: the sealed segments go though no record came since.
        let records: Vec<LogRecord> = writes.iter().map(|w| record(1, w)).collect();
        assert!(log.invalidate_batch(group, &records));
        assert_eq!(log.live_bytes(), 0);
        log.collect();
        assert!(log.used_bytes() <= 2 * SEGMENT_BYTES, "used {} of {full}", log.used_bytes());
    }

    #[test]
    fn a_full_log_refuses_and_collection_gives_space_back() {
        let group = ChunkGroupId(0);
        let mut log = LogVolume::new(1 << 20, SEGMENT_BYTES * 2);
        let mut version = 0;
        let mut appended = Vec::new();
        loop {
            version += 1;
            let w = write(0, 1 << 20, version);
            let (logged, full) = log.append_batch(group, Epoch(1), std::slice::from_ref(&w));
            if !full.is_empty() {
                assert_eq!((logged, full), (vec![], vec![w.version]));
                break;
            }
            appended.push(w);
        }
        assert!(!log.fits(&write(0, 1 << 20, version)));
        let records: Vec<LogRecord> = appended.iter().map(|w| record(1, w)).collect();
        log.invalidate_batch(group, &records);
        log.collect();
        assert!(log.fits(&write(0, 1 << 20, version)), "used {}", log.used_bytes());
        assert_eq!(log.live_bytes(), 0);
    }
}
