//! The logged writes a primary is reading back from its loggers, indexed by what
//! its events ask of them: the reads not sent yet (an admitted read that finds its
//! replica lacking sends those), the reads in the order they fall due (the timer sends
//! those again), and how many there are of each purpose. A replica that slept through
//! a busy day lacks hundreds of thousands of logged writes; walking every read under
//! way at each admitted request made a geared replay of a week crawl (issue 48).

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{VirtualDuration, VirtualInstant};

use super::{Purpose, Read};
use crate::cluster::LogRecord;

#[derive(Clone, Debug, Default)]
pub(super) struct Reads {
    by_record: BTreeMap<LogRecord, Read>,
    /// The reads no logger was asked for yet.
    unsent: BTreeSet<LogRecord>,
    /// Every read not parked by when it counts as sent.
    by_sent: BTreeSet<(VirtualInstant, LogRecord)>,
    /// The reads that found no logger to ask ([`Read::parked`]).
    parked: BTreeSet<LogRecord>,
    /// Reads of recovered records (the primary serves once none is left).
    adopting: usize,
    /// Records whose reads ended since the demand reads last looked
    /// ([`Reads::take_ended`]): only a demand read awaiting one of them can move.
    ended: BTreeSet<LogRecord>,
}

impl Reads {
    pub(super) fn len(&self) -> usize {
        self.by_record.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_record.is_empty()
    }

    pub(super) fn contains(&self, record: &LogRecord) -> bool {
        self.by_record.contains_key(record)
    }

    pub(super) fn get(&self, record: &LogRecord) -> Option<&Read> {
        self.by_record.get(record)
    }

    /// Reads of this purpose under way.
    pub(super) fn count(&self, purpose: Purpose) -> usize {
        match purpose {
            Purpose::Adopt => self.adopting,
            Purpose::Reclaim => self.len() - self.adopting,
        }
    }

    /// The earliest time a read counts as sent.
    pub(super) fn oldest_sent(&self) -> Option<VirtualInstant> {
        self.by_sent.first().map(|(at, _)| *at)
    }

    /// The reads no logger was asked for yet, in record order.
    pub(super) fn unsent(&self) -> Vec<LogRecord> {
        self.unsent.iter().copied().collect()
    }

    /// The reads late at `now` (sent a retry interval ago or longer), in record order.
    pub(super) fn late(&self, now: VirtualInstant, retry: VirtualDuration) -> Vec<LogRecord> {
        let mut late: Vec<LogRecord> = self
            .by_sent
            .iter()
            .take_while(|(at, _)| at.saturating_add(retry) <= now)
            .map(|(_, record)| *record)
            .collect();
        late.sort_unstable();
        late
    }

    /// Starts reading `record` back, unless it is read already.
    pub(super) fn start(&mut self, record: LogRecord, purpose: Purpose, now: VirtualInstant) {
        if !self.contains(&record) {
            self.insert(record, Read::new(purpose, now));
        }
    }

    /// Reads `record` back afresh, for `purpose`.
    pub(super) fn restart(&mut self, record: LogRecord, purpose: Purpose, now: VirtualInstant) {
        self.remove(&record);
        self.insert(record, Read::new(purpose, now));
    }

    pub(super) fn remove(&mut self, record: &LogRecord) -> Option<Read> {
        let read = self.by_record.remove(record)?;
        self.unindex(record, &read);
        self.ended.insert(*record);
        Some(read)
    }

    /// The records whose reads ended since the last call, and are not read again.
    pub(super) fn take_ended(&mut self) -> BTreeSet<LogRecord> {
        let mut ended = std::mem::take(&mut self.ended);
        ended.retain(|record| !self.by_record.contains_key(record));
        ended
    }

    /// Changes the read of `record` (if any) through `change`, its index kept.
    pub(super) fn update<R>(
        &mut self,
        record: &LogRecord,
        change: impl FnOnce(&mut Read) -> R,
    ) -> Option<R> {
        let mut read = self.by_record.remove(record)?;
        self.unindex(record, &read);
        let result = change(&mut read);
        self.insert(*record, read);
        Some(result)
    }

    /// Every parked read due again at once: the servers down or lost changed, so a
    /// logger may be there to ask.
    pub(super) fn unpark_all(&mut self) {
        for record in std::mem::take(&mut self.parked) {
            self.update(&record, |read| {
                read.parked = false;
                read.sent_at = VirtualInstant::ZERO;
            });
        }
    }

    /// Whether any read is parked.
    pub(super) fn any_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Reads parked.
    #[cfg(test)]
    pub(super) fn parked(&self) -> usize {
        self.parked.len()
    }

    fn insert(&mut self, record: LogRecord, read: Read) {
        if read.parked {
            self.parked.insert(record);
        } else {
            if read.asked.is_empty() {
                self.unsent.insert(record);
            }
            self.by_sent.insert((read.sent_at, record));
        }
        if read.purpose == Purpose::Adopt {
            self.adopting += 1;
        }
        self.by_record.insert(record, read);
    }

    fn unindex(&mut self, record: &LogRecord, read: &Read) {
        self.parked.remove(record);
        self.unsent.remove(record);
        self.by_sent.remove(&(read.sent_at, *record));
        if read.purpose == Purpose::Adopt {
            self.adopting -= 1;
        }
    }

    /// Asserts that the indexes say what the reads do. O(n): run under
    /// `expensive-checks`.
    #[cfg(any(test, feature = "expensive-checks"))]
    pub(super) fn check_indexes(&self) {
        let due = || self.by_record.iter().filter(|(_, r)| !r.parked);
        let unsent: BTreeSet<LogRecord> =
            due().filter(|(_, r)| r.asked.is_empty()).map(|(k, _)| *k).collect();
        let by_sent: BTreeSet<(VirtualInstant, LogRecord)> =
            due().map(|(k, r)| (r.sent_at, *k)).collect();
        let parked: BTreeSet<LogRecord> =
            self.by_record.iter().filter(|(_, r)| r.parked).map(|(k, _)| *k).collect();
        let adopting = self.by_record.values().filter(|r| r.purpose == Purpose::Adopt).count();
        assert_eq!(self.unsent, unsent, "the DVL's reads not sent");
        assert_eq!(self.by_sent, by_sent, "the DVL's reads by send time");
        assert_eq!(self.adopting, adopting, "the DVL's reads of recovered records");
        assert_eq!(self.parked, parked, "the DVL's reads parked");
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64Mcg;
    use somnus_types::{ByteRange, ObjectId, ServerId, Version};

    use super::*;
    use crate::cluster::{ChunkId, ChunkIndex, Epoch};

    fn record(rng: &mut Pcg64Mcg) -> LogRecord {
        let chunk = ChunkId { object: ObjectId(rng.random_range(0..2)), chunk: ChunkIndex(0) };
        LogRecord {
            owner: Epoch(1),
            chunk,
            range: ByteRange::new(rng.random_range(0..4) * 4096, 4096),
            version: Version(rng.random_range(1..16)),
        }
    }

    #[test]
    fn the_unsent_and_late_reads_are_those_a_scan_of_every_read_finds() {
        let retry = VirtualDuration::from_secs(1);
        for seed in 0..64 {
            let mut rng = Pcg64Mcg::seed_from_u64(seed);
            let mut reads = Reads::default();
            let mut ended = BTreeSet::new();
            for step in 0..300u64 {
                let now = VirtualInstant::ZERO + VirtualDuration::from_millis(step * 200);
                let r = record(&mut rng);
                let purpose = if rng.random_bool(0.3) { Purpose::Adopt } else { Purpose::Reclaim };
                match rng.random_range(0..7) {
                    0 => reads.start(r, purpose, now),
                    1 => {
                        if reads.contains(&r) {
                            ended.insert(r);
                        }
                        reads.restart(r, purpose, now)
                    }
                    2 => {
                        if reads.remove(&r).is_some() {
                            ended.insert(r);
                        }
                    }
                    3 => {
                        reads.update(&r, |read| read.parked = true);
                    }
                    4 if rng.random_bool(0.2) => reads.unpark_all(),
                    4 => {}
                    _ => {
                        let sends = rng.random_range(0..4);
                        reads.update(&r, |read| {
                            read.asked.push(ServerId(sends));
                            read.sent_at = super::super::backoff(now, retry, sends);
                            read.sends = sends;
                        });
                    }
                }
                reads.check_indexes();
                if rng.random_bool(0.2) {
                    // Ended: removed since the last look, and not read again.
                    let expected: BTreeSet<LogRecord> = std::mem::take(&mut ended)
                        .into_iter()
                        .filter(|r| !reads.contains(r))
                        .collect();
                    assert_eq!(reads.take_ended(), expected, "seed {seed} step {step}: ended");
                }
                // What the indexes answer is what walking every read answers (a
                // parked read is neither unsent nor late).
                let all = &reads.by_record;
                let due = || all.iter().filter(|(_, r)| !r.parked);
                let unsent: Vec<LogRecord> =
                    due().filter(|(_, r)| r.asked.is_empty()).map(|(k, _)| *k).collect();
                let late: Vec<LogRecord> = due()
                    .filter(|(_, r)| r.sent_at.saturating_add(retry) <= now)
                    .map(|(k, _)| *k)
                    .collect();
                assert_eq!(reads.unsent(), unsent, "seed {seed} step {step}: unsent");
                assert_eq!(reads.late(now, retry), late, "seed {seed} step {step}: late");
                let parked = all.values().filter(|r| r.parked).count();
                assert_eq!(reads.parked(), parked, "seed {seed} step {step}: parked");
                let oldest = due().map(|(_, r)| r.sent_at).min();
                assert_eq!(reads.oldest_sent(), oldest, "seed {seed} step {step}: oldest");
                let adopting = all.values().filter(|r| r.purpose == Purpose::Adopt).count();
                assert_eq!(reads.count(Purpose::Adopt), adopting);
                assert_eq!(reads.count(Purpose::Reclaim), all.len() - adopting);
            }
        }
    }

    #[test]
    #[should_panic(expected = "the DVL's reads not sent")]
    fn a_read_changed_behind_its_index_is_caught() {
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut reads = Reads::default();
        let r = record(&mut rng);
        reads.start(r, Purpose::Reclaim, VirtualInstant::ZERO);
        // Sent without `update`: the index still counts it unsent.
        if let Some(read) = reads.by_record.get_mut(&r) {
            read.asked.push(ServerId(1));
        }
        reads.check_indexes();
    }
}
