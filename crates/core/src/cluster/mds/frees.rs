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

use std::collections::{BTreeMap, BTreeSet};

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
}

impl FreeLog {
    pub(super) fn new(servers: usize) -> FreeLog {
        FreeLog { next_seq: 1, applied: vec![0; servers], ..FreeLog::default() }
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
        self.queued.insert(spec.object);
        let seq = spec.seq;
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
        for (seq, entry) in self.entries.range_mut(from..=through) {
            entry.waiting.retain(|s| *s != server);
            if entry.waiting.is_empty() {
                done.push(*seq);
            }
        }
        done
    }

    /// `server` is gone for good: no entry waits for it (those it alone held are
    /// done, to trim).
    pub(super) fn forget(&mut self, server: ServerId) -> Vec<u64> {
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
