//! The writes a primary answered lately (S1). A client whose answer crosses its own
//! repeat on the wire (it timed out a moment before the answer came) sends the write
//! again; answered from here, the repeat is not written a second time. Written again,
//! it would take a newer version: once more work for every replica, and a write that
//! lands after, and over, one another client began once this one had its answer.
//!
//! Kept for a while and up to a count: a repeat later than that is written again,
//! as every repeat was before (the data is the same; only the order above is lost).

use somnus_types::{ByteRange, Version, VirtualDuration, VirtualInstant};
use std::collections::{BTreeMap, VecDeque};

use crate::cluster::{ChunkId, Peer, Stamp};

/// Answered writes a group keeps at most (the oldest go first).
pub(super) const ANSWERED_MAX: usize = 4096;

/// How long an answered write is kept, in request timeouts: a repeat arrives within
/// a round trip of the answer, and a round trip longer than this many timeouts has
/// the client ask for the view again anyway.
pub(super) const ANSWERED_KEEP_TIMEOUTS: u64 = 10;

/// What names a client's write: the client, the write's stamp, and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct WriteName {
    pub(super) client: Peer,
    pub(super) stamp: Stamp,
    pub(super) chunk: ChunkId,
    pub(super) range: ByteRange,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Answered {
    /// Key to the version it was written at and when it was answered.
    by_key: BTreeMap<WriteName, (Version, VirtualInstant)>,
    /// Keys in the order they were answered, for forgetting the oldest.
    order: VecDeque<(VirtualInstant, WriteName)>,
}

impl Answered {
    /// Remembers that the write `name` was answered at `now` as written at `version`;
    /// forgets what is older than `keep`.
    pub(super) fn record(
        &mut self,
        name: WriteName,
        version: Version,
        now: VirtualInstant,
        keep: VirtualDuration,
    ) {
        self.by_key.insert(name, (version, now));
        self.order.push_back((now, name));
        while let Some(&(at, oldest)) = self.order.front() {
            let expired = at.saturating_add(keep) < now;
            if !expired && self.order.len() <= ANSWERED_MAX {
                break;
            }
            self.order.pop_front();
            // A key answered again since is kept for its newer answer.
            if self.by_key.get(&oldest).is_some_and(|&(_, answered)| answered == at) {
                self.by_key.remove(&oldest);
            }
        }
    }

    /// The version the write `name` was answered at, if it is still kept.
    pub(super) fn version_of(&self, name: &WriteName) -> Option<Version> {
        self.by_key.get(name).map(|&(version, _)| version)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use somnus_types::ObjectId;

    use crate::cluster::{ChunkIndex, ClientId};

    fn chunk(index: u32) -> ChunkId {
        ChunkId { object: ObjectId(1), chunk: ChunkIndex(index) }
    }

    fn w(client: Peer, stamp: Stamp, chunk: ChunkId, range: ByteRange) -> WriteName {
        WriteName { client, stamp, chunk, range }
    }

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    fn at(ms: u64) -> VirtualInstant {
        VirtualInstant::ZERO.saturating_add(VirtualDuration::from_millis(ms))
    }

    #[test]
    fn a_repeat_is_known_by_client_stamp_chunk_and_range() {
        let mut answered = Answered::default();
        let keep = VirtualDuration::from_secs(10);
        let (client, other) = (Peer::Client(ClientId(1)), Peer::Client(ClientId(2)));
        answered.record(w(client, Stamp(7), chunk(0), r(0, 4096)), Version(3), at(0), keep);
        assert_eq!(
            answered.version_of(&w(client, Stamp(7), chunk(0), r(0, 4096))),
            Some(Version(3))
        );
        assert_eq!(answered.version_of(&w(other, Stamp(7), chunk(0), r(0, 4096))), None);
        assert_eq!(answered.version_of(&w(client, Stamp(8), chunk(0), r(0, 4096))), None);
        assert_eq!(answered.version_of(&w(client, Stamp(7), chunk(1), r(0, 4096))), None);
        assert_eq!(answered.version_of(&w(client, Stamp(7), chunk(0), r(0, 8192))), None);
    }

    #[test]
    fn what_is_older_than_the_keep_or_past_the_count_is_forgotten() {
        let mut answered = Answered::default();
        let keep = VirtualDuration::from_secs(10);
        let client = Peer::Client(ClientId(1));
        answered.record(w(client, Stamp(1), chunk(0), r(0, 4096)), Version(1), at(0), keep);
        answered.record(w(client, Stamp(2), chunk(0), r(0, 4096)), Version(2), at(10_000), keep);
        assert!(answered.version_of(&w(client, Stamp(1), chunk(0), r(0, 4096))).is_some());
        answered.record(w(client, Stamp(3), chunk(0), r(0, 4096)), Version(3), at(10_001), keep);
        assert_eq!(answered.version_of(&w(client, Stamp(1), chunk(0), r(0, 4096))), None);
        assert!(answered.version_of(&w(client, Stamp(2), chunk(0), r(0, 4096))).is_some());
        for n in 0..ANSWERED_MAX as u64 + 10 {
            let stamp = Stamp(100 + n);
            answered.record(w(client, stamp, chunk(0), r(0, 4096)), Version(n), at(10_002), keep);
        }
        assert_eq!(answered.len(), ANSWERED_MAX);
        assert_eq!(answered.version_of(&w(client, Stamp(100), chunk(0), r(0, 4096))), None);
        let newest = Stamp(100 + ANSWERED_MAX as u64 + 9);
        assert!(answered.version_of(&w(client, newest, chunk(0), r(0, 4096))).is_some());
    }
}
