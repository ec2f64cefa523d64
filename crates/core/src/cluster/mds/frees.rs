//! The free log (docs/space.md): the data objects no name holds any more, each to be
//! freed by every server holding a replica of one of its chunks' groups once its
//! grace has passed. It is the MDS's durable state (every entry comes and goes by a
//! command), sent to each server with its heartbeat replies, and applied there
//! idempotently: a server asleep gets its share when it wakes, never woken for it.
//!
//! Entries have sequence numbers in the order they were queued; their due times grow
//! with them (the grace is one constant, the MDS's clock never goes back, and a
//! restored log is due a whole grace after the restart). A server reports the
//! sequence up to which it has made every free it was sent durable (soft state: a
//! restarted MDS hears it again at the next heartbeat); an entry leaves the log once
//! every server it waits for has reported past it.
//!
//! Each server's waiting entries are indexed apart, and the entries by due time: a
//! heartbeat's reply and report look at their own server's entries only (a walk of
//! the whole log per heartbeat costs every deletion once per server of the cluster).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use somnus_types::{ChunkGroupId, ObjectId, ServerId, VirtualInstant};

/// A data object to free, as a command queues it: `seq` orders the log.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FreeSpec {
    pub seq: u64,
    pub object: ObjectId,
    /// The group of each of its chunks (for an orphan, those the finder holds).
    pub chunk_groups: Vec<ChunkGroupId>,
    pub size_bytes: u64,
}

#[derive(Clone, Debug)]
struct FreeEntry {
    spec: FreeSpec,
    due: VirtualInstant,
    /// The servers that hold a replica of one of its groups and have not reported
    /// the free durable.
    waiting: Vec<ServerId>,
}

/// Objects one heartbeat reply names at most: a server back from a long sleep
/// catches up over a few heartbeats.
pub(super) const FREES_PER_REPLY: usize = 4096;

#[derive(Clone, Debug, Default)]
pub(super) struct FreeLog {
    entries: BTreeMap<u64, FreeEntry>,
    /// The objects in `entries` (an orphan report of one already queued adds nothing).
    queued: BTreeSet<ObjectId>,
    /// The sequence the next entry gets (never given twice, also across restarts).
    next_seq: u64,
    /// Per server, the sequence up to which it reported its frees durable (soft).
    applied: Vec<u64>,
    /// Per server, the entries waiting for it (its `waiting` lists, inverted).
    waiting_for: Vec<BTreeSet<u64>>,
    /// The entries by due time, which grows with the sequence (the grace is one
    /// constant, and a restored log is due a whole grace after the restart)...
    by_due: BTreeSet<(VirtualInstant, u64)>,
    /// ...unless an entry was queued due before one queued earlier (only a broken
    /// protocol's, `Broken::FreeBeforeGrace`, after an MDS restart): replies are then
    /// found by the walk of the whole log, which does not need the order.
    dues_out_of_order: bool,
}

impl FreeLog {
    pub(super) fn new(servers: usize) -> FreeLog {
        FreeLog {
            next_seq: 1,
            applied: vec![0; servers],
            waiting_for: vec![BTreeSet::new(); servers],
            ..FreeLog::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(super) fn is_queued(&self, object: ObjectId) -> bool {
        self.queued.contains(&object)
    }

    /// Queues `spec` (its `seq` at or above every one given so far), due at `due`,
    /// for the `waiting` servers; with none to wait for, it is done at once.
    pub(super) fn push(&mut self, spec: FreeSpec, due: VirtualInstant, waiting: Vec<ServerId>) {
        assert!(
            !self.entries.contains_key(&spec.seq),
            "free log sequence {} queued twice",
            spec.seq
        );
        self.next_seq = self.next_seq.max(spec.seq + 1);
        if waiting.is_empty() {
            return;
        }
        let seq = spec.seq;
        if self.by_due.last().is_some_and(|(last, _)| *last > due) {
            self.dues_out_of_order = true;
        }
        self.queued.insert(spec.object);
        for server in &waiting {
            if let Some(seqs) = self.waiting_for.get_mut(server.index()) {
                seqs.insert(seq);
            }
        }
        self.by_due.insert((due, seq));
        self.entries.insert(seq, FreeEntry { spec, due, waiting });
    }

    /// Raises the sequence the next entry gets (a snapshot's, so no seq is reused).
    pub(super) fn reserve(&mut self, next_seq: u64) {
        self.next_seq = self.next_seq.max(next_seq);
    }

    /// Takes the entries `seqs` out of the log.
    pub(super) fn trim(&mut self, seqs: &[u64]) {
        for seq in seqs {
            if let Some(entry) = self.entries.remove(seq) {
                self.queued.remove(&entry.spec.object);
                self.by_due.remove(&(entry.due, *seq));
                for server in &entry.waiting {
                    if let Some(seqs) = self.waiting_for.get_mut(server.index()) {
                        seqs.remove(seq);
                    }
                }
            }
        }
    }

    /// `server` reported its frees durable up to `through`: the entries no server
    /// waits for any more (to trim by a command).
    pub(super) fn applied(&mut self, server: ServerId, through: u64) -> Vec<u64> {
        let Some(applied) = self.applied.get_mut(server.index()) else { return Vec::new() };
        let through = through.min(self.next_seq.saturating_sub(1));
        if through <= *applied {
            return Vec::new();
        }
        let from = *applied + 1;
        *applied = through;
        let mut done = Vec::new();
        let seqs = &mut self.waiting_for[server.index()];
        let reached: Vec<u64> = seqs.range(from..=through).copied().collect();
        for seq in reached {
            seqs.remove(&seq);
            let Some(entry) = self.entries.get_mut(&seq) else { continue };
            entry.waiting.retain(|s| *s != server);
            if entry.waiting.is_empty() {
                done.push(seq);
            }
        }
        done
    }

    /// `server` is gone for good: no entry waits for it (those it alone held are
    /// done, to trim).
    pub(super) fn forget(&mut self, server: ServerId) -> Vec<u64> {
        if let Some(seqs) = self.waiting_for.get_mut(server.index()) {
            seqs.clear();
        }
        let mut done = Vec::new();
        for (seq, entry) in &mut self.entries {
            let before = entry.waiting.len();
            entry.waiting.retain(|s| *s != server);
            if before > 0 && entry.waiting.is_empty() {
                done.push(*seq);
            }
        }
        done
    }

    /// The objects `server` is to free now (due, after what it applied, waiting for
    /// it), at most [`FREES_PER_REPLY`], and the sequence they reach: every due entry
    /// up to it that waits for the server is among them.
    pub(super) fn due_for(&self, server: ServerId, now: VirtualInstant) -> (Vec<ObjectId>, u64) {
        if self.dues_out_of_order {
            return self.due_for_by_walk(server, now);
        }
        let applied = self.applied.get(server.index()).copied().unwrap_or(0);
        let Some(seqs) = self.waiting_for.get(server.index()) else { return (Vec::new(), 0) };
        // The first entry past `applied` not due yet: the reply reaches just short of it.
        let first_not_due = self.by_due.range((Excluded((now, u64::MAX)), Unbounded)).next();
        let not_due = match first_not_due {
            Some(&(_, seq)) if seq > applied => Some(seq),
            // Every entry past `applied` is due later still (dues grow with seqs).
            Some(_) => self.entries.range(applied + 1..).next().map(|(seq, _)| *seq),
            None => None,
        };
        let mut through = not_due.map_or(self.next_seq.saturating_sub(1), |seq| seq - 1);
        let mut objects = Vec::new();
        for &seq in seqs.range(applied + 1..).take_while(|seq| **seq <= through) {
            let Some(entry) = self.entries.get(&seq) else { continue };
            objects.push(entry.spec.object);
            if objects.len() == FREES_PER_REPLY {
                // Full: the reply reaches just short of the entry after this one.
                let next = self.entries.range(seq + 1..).next().map(|(next, _)| *next);
                through = through.min(next.map_or(through, |next| next - 1));
                break;
            }
        }
        (objects, through.max(applied))
    }

    /// [`FreeLog::due_for`] by a walk of every entry past what the server applied, up
    /// to the first not due: what the log did before it indexed each server's entries,
    /// and still does where the dues are out of order (the index's reference in tests).
    fn due_for_by_walk(&self, server: ServerId, now: VirtualInstant) -> (Vec<ObjectId>, u64) {
        let applied = self.applied.get(server.index()).copied().unwrap_or(0);
        let mut objects = Vec::new();
        let mut through = self.next_seq.saturating_sub(1);
        for (seq, entry) in self.entries.range(applied + 1..) {
            if entry.due > now || objects.len() == FREES_PER_REPLY {
                through = seq - 1;
                break;
            }
            if entry.waiting.contains(&server) {
                objects.push(entry.spec.object);
            }
        }
        (objects, through.max(applied))
    }

    /// Per server, the bytes of data waiting to be freed there: for each entry it
    /// waits for, the chunks of groups it holds (an upper bound: a chunk may be
    /// written only in part).
    pub(super) fn bytes_waiting(
        &self,
        servers: usize,
        chunk_size_bytes: u64,
        holds: impl Fn(ServerId, ChunkGroupId) -> bool,
    ) -> Vec<u64> {
        let mut bytes = vec![0; servers];
        for entry in self.entries.values() {
            let spec = &entry.spec;
            for server in &entry.waiting {
                let chunks = spec.chunk_groups.iter().enumerate();
                let share: u64 = chunks
                    .filter(|(_, g)| holds(*server, **g))
                    .map(|(index, _)| {
                        let start = index as u64 * chunk_size_bytes;
                        spec.size_bytes.saturating_sub(start).min(chunk_size_bytes)
                    })
                    .sum();
                if let Some(total) = bytes.get_mut(server.index()) {
                    *total += share;
                }
            }
        }
        bytes
    }

    /// Every entry, in order (a snapshot's).
    pub(super) fn specs(&self) -> Vec<FreeSpec> {
        self.entries.values().map(|e| e.spec.clone()).collect()
    }

    /// What `server` last reported applied.
    #[cfg(test)]
    pub(super) fn applied_of(&self, server: ServerId) -> u64 {
        self.applied[server.index()]
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::VirtualDuration;

    use super::*;

    fn at(secs: u64) -> VirtualInstant {
        VirtualInstant::ZERO.saturating_add(VirtualDuration::from_secs(secs))
    }

    fn spec(seq: u64, object: u64) -> FreeSpec {
        FreeSpec {
            seq,
            object: ObjectId(object),
            chunk_groups: vec![ChunkGroupId(0)],
            size_bytes: 4096,
        }
    }

    /// Goal: an entry is sent to each server it waits for once due, and leaves only
    /// when every one of them applied it. Method: three servers, two entries.
    #[test]
    fn an_entry_goes_once_every_server_it_waits_for_applied_it() {
        let (a, b, c) = (ServerId(0), ServerId(1), ServerId(2));
        let mut log = FreeLog::new(3);
        log.push(spec(1, 10), at(5), vec![a, b]);
        log.push(spec(2, 11), at(6), vec![b, c]);
        assert_eq!(log.due_for(a, at(4)), (vec![], 0), "not due yet");
        assert_eq!(log.due_for(a, at(5)), (vec![ObjectId(10)], 1));
        assert_eq!(log.due_for(b, at(9)), (vec![ObjectId(10), ObjectId(11)], 2));
        assert_eq!(log.due_for(c, at(9)), (vec![ObjectId(11)], 2));
        assert!(log.applied(a, 1).is_empty(), "b still holds object 10");
        assert_eq!(log.applied(b, 2), vec![1]);
        log.trim(&[1]);
        assert_eq!(log.due_for(a, at(9)), (vec![], 2), "nothing more for a");
        assert!(log.is_queued(ObjectId(11)) && !log.is_queued(ObjectId(10)));
        // A lower report (a restarted server) changes nothing.
        assert!(log.applied(b, 0).is_empty());
        assert_eq!(log.applied_of(b), 2);
        // A lost server is not waited for.
        assert_eq!(log.forget(c), vec![2]);
    }

    #[test]
    fn a_reply_holds_a_bounded_number_and_says_how_far_it_reached() {
        let s = ServerId(0);
        let mut log = FreeLog::new(1);
        for seq in 1..=(FREES_PER_REPLY as u64 + 10) {
            log.push(spec(seq, 100 + seq), at(1), vec![s]);
        }
        let (objects, through) = log.due_for(s, at(2));
        assert_eq!(objects.len(), FREES_PER_REPLY);
        assert_eq!(through, FREES_PER_REPLY as u64);
        let done = log.applied(s, through);
        assert_eq!(done.len(), FREES_PER_REPLY);
        log.trim(&done);
        let (objects, through) = log.due_for(s, at(2));
        assert_eq!((objects.len(), through), (10, FREES_PER_REPLY as u64 + 10));
    }

    /// Goal: the per-server index answers every reply as the walk of the whole log
    /// did, whatever the order of queues, reports and trims. Method: random runs of
    /// five servers (entries queued in bursts past a reply's bound, due a grace
    /// later, each server reporting some of what it was sent), each reply compared
    /// with the walk's; a broken index (an entry left out of one server's set) is
    /// caught the same way.
    #[test]
    fn the_index_answers_as_a_walk_of_the_whole_log() {
        use rand::{Rng, SeedableRng};
        for (seed, broken) in (0..40u64).map(|s| (s, false)).chain([(7, true)]) {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
            let servers = 5;
            let mut log = FreeLog::new(servers);
            let mut now = at(0);
            let mut differ = false;
            for step in 0..300u64 {
                now = now.saturating_add(VirtualDuration::from_millis(rng.random_range(0..700)));
                let burst = if step % 97 == 0 {
                    FREES_PER_REPLY as u64 + 3
                } else {
                    rng.random_range(0..4)
                };
                for _ in 0..burst {
                    let seq = log.next_seq();
                    let waiting: Vec<ServerId> = (0..servers as u32)
                        .filter(|_| rng.random_bool(0.5))
                        .map(ServerId)
                        .collect();
                    let due = now.saturating_add(VirtualDuration::from_secs(3));
                    log.push(spec(seq, 1000 + seq), due, waiting);
                    if broken && seq.is_multiple_of(5) {
                        log.waiting_for[0].remove(&seq);
                    }
                }
                for server in (0..servers as u32).map(ServerId) {
                    let answer = log.due_for(server, now);
                    differ |= answer != log.due_for_by_walk(server, now);
                    if rng.random_bool(0.7) {
                        let done = log.applied(server, answer.1);
                        log.trim(&done);
                    }
                }
            }
            assert_eq!(differ, broken, "seed {seed}: the index and the walk differ: {differ}");
        }
    }

    /// Goal: entries queued due before earlier ones (a broken protocol's frees after an
    /// MDS restart) are answered as the walk answers them, not by the index, which
    /// assumes the order. Method: a restored entry due late, then new ones due at once.
    #[test]
    fn dues_out_of_order_are_answered_by_the_walk() {
        let (a, b) = (ServerId(0), ServerId(1));
        let mut log = FreeLog::new(2);
        log.push(spec(1, 10), at(10), vec![a]);
        log.push(spec(2, 11), at(1), vec![a, b]);
        log.push(spec(3, 12), at(1), vec![b]);
        // The walk stops at entry 1, not due until 10 s: b gets nothing before then.
        assert_eq!(log.due_for(b, at(5)), (vec![], 0));
        assert_eq!(log.due_for(b, at(5)), log.due_for_by_walk(b, at(5)));
        assert_eq!(log.due_for(b, at(10)), (vec![ObjectId(11), ObjectId(12)], 3));
    }

    #[test]
    fn bytes_waiting_count_each_servers_chunks() {
        let (a, b) = (ServerId(0), ServerId(1));
        let mut log = FreeLog::new(2);
        let mut big = spec(1, 7);
        big.chunk_groups = vec![ChunkGroupId(0), ChunkGroupId(1), ChunkGroupId(0)];
        big.size_bytes = 2 * 1024 + 100;
        log.push(big, at(0), vec![a, b]);
        // a holds group 0, b group 1; chunks of 1024 bytes.
        let holds = |s: ServerId, g: ChunkGroupId| s.0 == g.0;
        assert_eq!(log.bytes_waiting(2, 1024, holds), vec![1024 + 100, 1024]);
    }
}
