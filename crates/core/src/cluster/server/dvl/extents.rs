//! A DVL's map of logged writes, with the indexes its hot paths look up instead of
//! scanning: while a replica sleeps for hours, a group's map holds thousands of
//! extents, and every logged write, acknowledgement, client read and timer would
//! otherwise walk all of them.

use std::collections::{BTreeMap, BTreeSet};

use smallvec::SmallVec;
use somnus_types::{ByteRange, ObjectId, ServerId, Version, VirtualDuration, VirtualInstant};

use crate::cluster::{ChunkId, ChunkIndex, Epoch, LogRecord};

/// A few servers, held inline: a logged write has r - 1 loggers and r replicas, and a
/// group's map holds a day of logged writes, four such lists each (as `Vec`s, four
/// allocations more per write).
pub(super) type Servers = SmallVec<[ServerId; 4]>;

/// A logged write in the map.
#[derive(Clone, Debug, Default)]
pub(super) struct Extent {
    /// The loggers known to hold it: reads back ask them.
    pub(super) holders: Servers,
    /// Every logger that may hold it: each appends its deletion marker.
    pub(super) loggers: Servers,
    pub(super) applied: Servers,
    /// Loggers that appended its deletion marker.
    pub(super) invalidated: Servers,
    /// When its reclaimed copy was sent to the replicas lacking it: not read back
    /// again before their answers are due (indexed: set it through
    /// [`Extents::reclaim_sent`]).
    reclaim_sent_at: Option<VirtualInstant>,
    /// When its deletion markers count as sent, a repeat's moved later by
    /// [`super::backoff`] (indexed: set it through [`Extents::invalidation_sent`]).
    invalidate_sent_at: Option<VirtualInstant>,
    /// Times its markers were sent since it became due.
    invalidate_sends: u32,
    /// Its rank in the kept sets of due markers and of extents lacking (none: not in
    /// the set): kept here rather than in a map of each set by record, which would
    /// hold every logged write's record twice more.
    markers_rank: Option<u8>,
    lacking_rank: Option<u8>,
}

impl Extent {
    pub(super) fn reclaim_sent_at(&self) -> Option<VirtualInstant> {
        self.reclaim_sent_at
    }

    pub(super) fn invalidate_sent_at(&self) -> Option<VirtualInstant> {
        self.invalidate_sent_at
    }
}

/// The lowest record of `owner`'s epoch in the map's order: the map's records of
/// older epochs come before it.
pub(super) fn first_record_of(owner: Epoch) -> LogRecord {
    let chunk = ChunkId { object: ObjectId(0), chunk: ChunkIndex(0) };
    LogRecord { owner, chunk, range: ByteRange::new(0, 0), version: Version(0) }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Extents {
    map: BTreeMap<LogRecord, Extent>,
    by_version: BTreeSet<(Version, LogRecord)>,
    /// Every record by chunk and where its range starts.
    by_chunk: BTreeSet<(ChunkId, u64, LogRecord)>,
    /// The longest range indexed (never lowered): a record over an offset starts at
    /// most this far before it, so a range's records are found without walking the
    /// chunk's others.
    longest: u64,
    invalidations_sent: BTreeSet<(VirtualInstant, LogRecord)>,
    reclaims_sent: BTreeSet<(VirtualInstant, LogRecord)>,
    /// The extents every replica has applied with deletion markers to append now.
    markers_due: Kept<MarkersDue>,
    /// The extents a ready replica lacks, at-risk ones (a holder down) first: the ones
    /// reclaim reads back.
    lacking: Kept<Lacking>,
}

impl Extents {
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn get(&self, record: &LogRecord) -> Option<&Extent> {
        self.map.get(record)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        self.map.iter()
    }

    /// The extent of `record`, to change (the kept sets test it again).
    pub(super) fn get_mut(&mut self, record: &LogRecord) -> Option<&mut Extent> {
        if !self.map.contains_key(record) {
            return None;
        }
        self.touch(*record);
        self.map.get_mut(record)
    }

    /// The extent of `record`, added empty if the map lacks it, to change.
    pub(super) fn entry(&mut self, record: LogRecord) -> &mut Extent {
        if !self.map.contains_key(&record) {
            self.by_version.insert((record.version, record));
            self.by_chunk.insert((record.chunk, record.range.start, record));
            self.longest = self.longest.max(record.range.size_bytes());
        }
        self.touch(record);
        self.map.entry(record).or_default()
    }

    /// `record` is done with: it counts as applied by every one of `replicas`, so
    /// nothing reclaims it and its deletion markers fall due (its holders all lost,
    /// or showing no byte of it, R3; superseded; replaced by an adoption).
    pub(super) fn done_with(&mut self, record: &LogRecord, replicas: &[ServerId]) {
        if let Some(extent) = self.get_mut(record) {
            extent.applied = Servers::from_slice(replicas);
        }
    }

    pub(super) fn remove(&mut self, record: &LogRecord) -> Option<Extent> {
        let mut extent = self.map.remove(record)?;
        self.by_version.remove(&(record.version, *record));
        self.by_chunk.remove(&(record.chunk, record.range.start, *record));
        if let Some(at) = extent.invalidate_sent_at {
            self.invalidations_sent.remove(&(at, *record));
        }
        if let Some(at) = extent.reclaim_sent_at {
            self.reclaims_sent.remove(&(at, *record));
        }
        self.markers_due.forget(record, &mut extent);
        self.lacking.forget(record, &mut extent);
        Some(extent)
    }

    /// Notes that the deletion markers of `record` were looked at `now`, and `sent`
    /// to some logger (a repeat counts from later: [`super::backoff`] of `retry`), or
    /// to none (every logger up still appends it: looked at again after `retry`).
    pub(super) fn invalidation_sent(
        &mut self,
        record: &LogRecord,
        now: VirtualInstant,
        retry: VirtualDuration,
        sent: bool,
    ) {
        let Some(extent) = self.map.get_mut(record) else { return };
        let at = if sent { super::backoff(now, retry, extent.invalidate_sends) } else { now };
        extent.invalidate_sends += u32::from(sent);
        if let Some(before) = extent.invalidate_sent_at.replace(at) {
            self.invalidations_sent.remove(&(before, *record));
        }
        self.invalidations_sent.insert((at, *record));
        self.touch(*record);
    }

    /// Notes that the reclaimed copy of `record` was sent at `at`; false if the map
    /// lacks it.
    pub(super) fn reclaim_sent(&mut self, record: &LogRecord, at: VirtualInstant) -> bool {
        let Some(extent) = self.map.get_mut(record) else { return false };
        if let Some(before) = extent.reclaim_sent_at.replace(at) {
            self.reclaims_sent.remove(&(before, *record));
        }
        self.reclaims_sent.insert((at, *record));
        true
    }

    /// Notes that every replica the reclaimed copy of `record` went to has it: the
    /// copy is no longer in flight, and frees its place for the next read back.
    pub(super) fn reclaim_done(&mut self, record: &LogRecord) {
        let Some(extent) = self.map.get_mut(record) else { return };
        if let Some(at) = extent.reclaim_sent_at.take() {
            self.reclaims_sent.remove(&(at, *record));
        }
    }

    /// How many reclaimed copies were sent less than `timeout` before `now` and not
    /// yet acknowledged by every replica they went to.
    pub(super) fn reclaims_in_flight(
        &self,
        now: VirtualInstant,
        timeout: VirtualDuration,
    ) -> usize {
        let in_flight = |(at, _): &&(VirtualInstant, LogRecord)| at.saturating_add(timeout) > now;
        self.reclaims_sent.iter().rev().take_while(in_flight).count()
    }

    /// The earliest time deletion markers were sent and not all answered.
    pub(super) fn oldest_invalidation_sent(&self) -> Option<VirtualInstant> {
        self.invalidations_sent.first().map(|(at, _)| *at)
    }

    /// The records of the write of `version` (one per epoch that logged it).
    pub(super) fn of_version(&self, version: Version) -> Vec<LogRecord> {
        let low = (version, first_record_of(Epoch(0)));
        self.by_version.range(low..).take_while(|(v, _)| *v == version).map(|(_, r)| *r).collect()
    }

    /// The extents of `chunk` over `range`, by where they start: only the records
    /// that start within the longest range before it are walked (a chunk a sleeping
    /// gear's writes kept hitting has thousands, and every admitted read asks).
    pub(super) fn of_chunk_over(
        &self,
        chunk: ChunkId,
        range: ByteRange,
    ) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        let low = (chunk, range.start.saturating_sub(self.longest), first_record_of(Epoch(0)));
        self.by_chunk
            .range(low..)
            .take_while(move |(c, start, _)| *c == chunk && *start < range.end)
            .filter(move |(_, _, record)| record.range.overlaps(range))
            .filter_map(|(_, _, record)| self.map.get_key_value(record))
    }

    fn touch(&mut self, record: LogRecord) {
        self.markers_due.touched.insert(record);
        self.lacking.touched.insert(record);
    }

    /// The extents every one of `replicas` has applied whose deletion markers are due
    /// (never sent, or sent `retry` or more before `now`) at a logger not `down`, and
    /// those finished (each of their loggers appended its marker or is `lost`), in the
    /// map's order. One that waits only for loggers that sleep is left out until one
    /// wakes, and one whose markers are in flight until they are late: while a gear
    /// sleeps, thousands of extents wait.
    pub(super) fn markers_due(
        &mut self,
        (replicas, down, lost): (&[ServerId], &[ServerId], &[ServerId]),
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Vec<LogRecord> {
        // Rank 0: due at once; rank 1: sent, due when late.
        let rank = |e: &Extent| {
            let applied_by_all = replicas.iter().all(|r| e.applied.contains(r));
            let hidden = |l: &ServerId| e.invalidated.contains(l) || lost.contains(l);
            let finished = e.loggers.iter().all(hidden);
            let up_left = e.loggers.iter().any(|l| !hidden(l) && !down.contains(l));
            let sent = e.invalidate_sent_at.is_some();
            (applied_by_all && (finished || up_left)).then_some(u8::from(sent && !finished))
        };
        let left = self.markers_due.update(&mut self.map, &[replicas, down, lost], rank);
        // One left out is not due again before a logger wakes: the timer is not set
        // by when its markers were last sent.
        for record in left {
            let Some(extent) = self.map.get_mut(&record) else { continue };
            extent.invalidate_sends = 0;
            if let Some(at) = extent.invalidate_sent_at.take() {
                self.invalidations_sent.remove(&(at, record));
            }
        }
        let (kept, map) = (&self.markers_due, &self.map);
        let at_once = kept.set.iter().take_while(|(rank, _)| *rank == 0).map(|(_, r)| *r);
        let late = self
            .invalidations_sent
            .iter()
            .take_while(|(at, _)| at.saturating_add(retry) <= now)
            .filter(|(_, record)| map.get(record).and_then(|e| e.markers_rank) == Some(1))
            .map(|(_, record)| *record);
        let mut due: Vec<LogRecord> = at_once.chain(late).collect();
        due.sort();
        due
    }

    /// The extents one of `ready` lacks: at-risk ones first (one of their holders is
    /// in `down`), then in the map's order.
    pub(super) fn lacking(
        &mut self,
        ready: &[ServerId],
        down: &[ServerId],
    ) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        let lacks = |e: &Extent| ready.iter().any(|r| !e.applied.contains(r));
        let at_risk = |e: &Extent| e.holders.iter().any(|l| down.contains(l));
        let rank = |e: &Extent| lacks(e).then(|| if at_risk(e) { 0 } else { 1 });
        self.lacking.update(&mut self.map, &[ready, down], rank);
        self.lacking.set.iter().filter_map(|(_, record)| self.map.get_key_value(record))
    }
}

/// The map's records that pass a test, ranked, kept up to date lazily: the test reads
/// an extent and some servers (`of`); when those change, the set is built again from
/// the whole map, and otherwise only the extents changed since the last look
/// (`touched`) are tested again. While a replica sleeps for hours, this spares a
/// timer's scan of thousands of extents. Each record's rank is kept in its extent
/// (the field `R` names).
#[derive(Clone, Debug, Default)]
struct Kept<R> {
    set: BTreeSet<(u8, LogRecord)>,
    of: Vec<Vec<ServerId>>,
    touched: BTreeSet<LogRecord>,
    rank_field: std::marker::PhantomData<R>,
}

/// Which of an extent's fields holds its rank in a [`Kept`] set.
trait RankField {
    fn of(extent: &mut Extent) -> &mut Option<u8>;
}

#[derive(Clone, Debug, Default)]
struct MarkersDue;

impl RankField for MarkersDue {
    fn of(extent: &mut Extent) -> &mut Option<u8> {
        &mut extent.markers_rank
    }
}

#[derive(Clone, Debug, Default)]
struct Lacking;

impl RankField for Lacking {
    fn of(extent: &mut Extent) -> &mut Option<u8> {
        &mut extent.lacking_rank
    }
}

impl<R: RankField> Kept<R> {
    /// `record` left the map, with `extent`.
    fn forget(&mut self, record: &LogRecord, extent: &mut Extent) {
        if let Some(rank) = R::of(extent).take() {
            self.set.remove(&(rank, *record));
        }
        self.touched.remove(record);
    }

    /// Brings the set up to date for servers `of` and the test `rank` (none: not in
    /// the set); returns the records that left it.
    fn update(
        &mut self,
        map: &mut BTreeMap<LogRecord, Extent>,
        of: &[&[ServerId]],
        rank: impl Fn(&Extent) -> Option<u8>,
    ) -> Vec<LogRecord> {
        let same = self.of.len() == of.len() && self.of.iter().zip(of).all(|(a, b)| a == b);
        let mut left = Vec::new();
        if !same {
            self.of = of.iter().map(|servers| servers.to_vec()).collect();
            self.touched.clear();
            self.set.clear();
            for (record, extent) in map.iter_mut() {
                let now = rank(extent);
                let before = std::mem::replace(R::of(extent), now);
                if let Some(now) = now {
                    self.set.insert((now, *record));
                } else if before.is_some() {
                    left.push(*record);
                }
            }
        }
        for record in std::mem::take(&mut self.touched) {
            let Some(extent) = map.get_mut(&record) else { continue };
            let now = rank(extent);
            let before = std::mem::replace(R::of(extent), now);
            if let Some(before) = before {
                self.set.remove(&(before, record));
            }
            match now {
                Some(now) => {
                    self.set.insert((now, record));
                }
                None if before.is_some() => left.push(record),
                None => {}
            }
        }
        left
    }
}

impl Extents {
    /// Panics unless every index holds exactly what the map says (the invariant the
    /// hot paths' lookups rest on). O(n): run under `expensive-checks`.
    #[cfg(any(test, feature = "expensive-checks"))]
    pub(super) fn check_indexes(&self) {
        let records: BTreeSet<LogRecord> = self.map.keys().copied().collect();
        let versions: BTreeSet<(Version, LogRecord)> =
            records.iter().map(|r| (r.version, *r)).collect();
        let chunks: BTreeSet<(ChunkId, u64, LogRecord)> =
            records.iter().map(|r| (r.chunk, r.range.start, *r)).collect();
        let longest = records.iter().map(|r| r.range.size_bytes()).max().unwrap_or(0);
        assert!(self.longest >= longest, "the DVL's longest record indexed");
        assert_eq!(self.by_version, versions, "the DVL's index by version");
        assert_eq!(self.by_chunk, chunks, "the DVL's index by chunk");
        let sent = |at: fn(&Extent) -> Option<VirtualInstant>| -> BTreeSet<_> {
            self.map.iter().filter_map(|(r, e)| Some((at(e)?, *r))).collect()
        };
        assert_eq!(self.invalidations_sent, sent(|e| e.invalidate_sent_at), "markers sent");
        assert_eq!(self.reclaims_sent, sent(|e| e.reclaim_sent_at), "reclaims sent");
        let ranked = |rank: fn(&Extent) -> Option<u8>| -> BTreeSet<(u8, LogRecord)> {
            self.map.iter().filter_map(|(r, e)| Some((rank(e)?, *r))).collect()
        };
        assert_eq!(self.markers_due.set, ranked(|e| e.markers_rank), "due markers' ranks");
        assert_eq!(self.lacking.set, ranked(|e| e.lacking_rank), "lacking extents' ranks");
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64Mcg;

    use super::*;

    const SERVERS: u32 = 6;

    fn servers(rng: &mut Pcg64Mcg) -> Vec<ServerId> {
        (0..SERVERS).filter(|_| rng.random_bool(0.4)).map(ServerId).collect()
    }

    fn record(rng: &mut Pcg64Mcg) -> LogRecord {
        let chunk = ChunkId { object: ObjectId(rng.random_range(0..2)), chunk: ChunkIndex(0) };
        let start = rng.random_range(0..4) * 4096;
        LogRecord {
            owner: Epoch(rng.random_range(1..3)),
            chunk,
            range: ByteRange::new(start, rng.random_range(1..4) * 4096),
            version: Version(rng.random_range(1..12)),
        }
    }

    /// One random change of the map, as the DVL makes them.
    fn change(extents: &mut Extents, rng: &mut Pcg64Mcg, now: VirtualInstant) {
        let retry = VirtualDuration::from_secs(1);
        let r = record(rng);
        match rng.random_range(0..7) {
            0 | 1 => {
                let extent = extents.entry(r);
                extent.holders = Servers::from_vec(servers(rng));
                extent.loggers = Servers::from_vec(servers(rng));
                extent.applied = Servers::from_vec(servers(rng));
            }
            2 => {
                if let Some(extent) = extents.get_mut(&r) {
                    let loggers = extent.loggers.clone();
                    extent.invalidated.extend(loggers.into_iter().filter(|_| rng.random()));
                    extent.applied.push(ServerId(rng.random_range(0..SERVERS)));
                }
            }
            3 => {
                extents.remove(&r);
            }
            4 => extents.invalidation_sent(&r, now, retry, rng.random()),
            5 => {
                extents.reclaim_sent(&r, now);
            }
            _ => extents.reclaim_done(&r),
        }
    }

    #[test]
    fn the_indexes_and_kept_sets_answer_as_a_scan_of_the_map_would() {
        for seed in 0..64 {
            let mut rng = Pcg64Mcg::seed_from_u64(seed);
            let mut extents = Extents::default();
            let retry = VirtualDuration::from_secs(1);
            let (mut replicas, mut down, mut lost) = (Vec::new(), Vec::new(), Vec::new());
            for step in 0..400u64 {
                let now = VirtualInstant::ZERO + VirtualDuration::from_millis(step * 300);
                change(&mut extents, &mut rng, now);
                extents.check_indexes();
                // The servers change now and then: between, the kept sets test again
                // only the extents changed since.
                if rng.random_bool(0.1) {
                    (replicas, down, lost) =
                        (servers(&mut rng), servers(&mut rng), servers(&mut rng));
                }
                if rng.random_bool(0.5) {
                    let due = extents.markers_due((&replicas, &down, &lost), now, retry);
                    // The scan: applied by every replica, and finished or with a logger
                    // up that has not appended its marker; one sent is due when late.
                    let scan: Vec<LogRecord> = extents
                        .iter()
                        .filter(|(_, e)| {
                            let hidden =
                                |l: &ServerId| e.invalidated.contains(l) || lost.contains(l);
                            let finished = e.loggers.iter().all(hidden);
                            let up_left = e.loggers.iter().any(|l| !hidden(l) && !down.contains(l));
                            let ranked = replicas.iter().all(|r| e.applied.contains(r))
                                && (finished || up_left);
                            let waits = e.invalidate_sent_at.is_some() && !finished;
                            ranked
                                && (!waits
                                    || e.invalidate_sent_at
                                        .is_some_and(|at| at.saturating_add(retry) <= now))
                        })
                        .map(|(r, _)| *r)
                        .collect();
                    assert_eq!(due, scan, "seed {seed} step {step}: markers due");
                } else {
                    let lacking: Vec<LogRecord> =
                        extents.lacking(&replicas, &down).map(|(r, _)| *r).collect();
                    let lacks = |e: &Extent| replicas.iter().any(|r| !e.applied.contains(r));
                    let at_risk = |e: &Extent| e.holders.iter().any(|l| down.contains(l));
                    let scan: Vec<LogRecord> = [true, false]
                        .into_iter()
                        .flat_map(|risk| {
                            extents
                                .iter()
                                .filter(move |(_, e)| lacks(e) && at_risk(e) == risk)
                                .map(|(r, _)| *r)
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    assert_eq!(lacking, scan, "seed {seed} step {step}: lacking");
                }
                extents.check_indexes();
                let r = record(&mut rng);
                let by_version: Vec<LogRecord> = extents
                    .iter()
                    .filter(|(x, _)| x.version == r.version)
                    .map(|(x, _)| *x)
                    .collect();
                assert_eq!(extents.of_version(r.version), by_version);
                // A chunk's records over a range are those a walk of the map finds.
                for over in [ByteRange::from_bounds(0, u64::MAX), r.range] {
                    let mut by_chunk: Vec<LogRecord> = extents
                        .iter()
                        .filter(|(x, _)| x.chunk == r.chunk && x.range.overlaps(over))
                        .map(|(x, _)| *x)
                        .collect();
                    let mut of_chunk: Vec<LogRecord> =
                        extents.of_chunk_over(r.chunk, over).map(|(x, _)| *x).collect();
                    by_chunk.sort_unstable();
                    of_chunk.sort_unstable();
                    assert_eq!(of_chunk, by_chunk, "the records of {:?} over {over:?}", r.chunk);
                }
                let timeout = VirtualDuration::from_secs(2);
                let in_flight = extents
                    .iter()
                    .filter(|(_, e)| {
                        e.reclaim_sent_at.is_some_and(|at| at.saturating_add(timeout) > now)
                    })
                    .count();
                assert_eq!(extents.reclaims_in_flight(now, timeout), in_flight);
            }
        }
    }
}
