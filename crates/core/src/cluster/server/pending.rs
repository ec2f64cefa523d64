//! The writes a primary has sent and not yet seen durable everywhere, in version
//! order: a group has a few at a time, so a sorted vector, kept between writes,
//! serves them with no allocation per write and no tree to walk.

use somnus_types::{ServerId, Version, VirtualInstant};

use crate::cluster::{Peer, UnstableWrite};

// A pending write's acknowledgements are bits of a `u16`, one per replica.
const _: () = assert!(crate::layout::REPLICAS_MAX <= 16);

/// A write sent to the replicas and not yet durable on all of them.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) write: UnstableWrite,
    /// Bit i: replica i (in `Led::replicas` order) has its copy durable.
    acked: u16,
    /// How many replicas the write goes to (at most `REPLICAS_MAX`, 8).
    replicas: u8,
    pub(super) sent_at: VirtualInstant,
    /// The client to answer, none for a write adopted from a replica or the log.
    pub(super) client: Option<(Peer, u64)>,
    /// The loggers it was sent to while a replica is down, and which acknowledged.
    pub(super) logged: Vec<(ServerId, bool)>,
    /// Loggers given up on (down, or full) that may hold a copy: it is invalidated there
    /// too, so no record is left behind (D5).
    pub(super) abandoned: Vec<ServerId>,
}

impl Pending {
    /// A write just sent, to `replicas` replicas; `client` is answered when it is durable.
    pub(super) fn new(
        write: UnstableWrite,
        replicas: usize,
        now: VirtualInstant,
        client: Option<(Peer, u64)>,
    ) -> Pending {
        let replicas = replicas.min(16) as u8;
        let (logged, abandoned) = (Vec::new(), Vec::new());
        Pending { write, acked: 0, replicas, sent_at: now, client, logged, abandoned }
    }

    /// Whether replica `index` has its copy durable.
    pub(super) fn acked(&self, index: usize) -> bool {
        self.acked >> index & 1 == 1
    }

    pub(super) fn ack(&mut self, index: usize) {
        if index < usize::from(self.replicas) {
            self.acked |= 1 << index;
        }
    }

    /// Whether every replica has its copy durable.
    pub(super) fn all_acked(&self) -> bool {
        u32::from(self.acked) == (1u32 << self.replicas) - 1
    }

    /// The loggers that acknowledged it: reads back ask them.
    pub(super) fn holders(&self) -> Vec<ServerId> {
        self.logged.iter().filter(|(_, acked)| *acked).map(|(l, _)| *l).collect()
    }

    /// Every logger that may hold it, acknowledged or given up on: each gets its marker.
    pub(super) fn loggers(&self) -> Vec<ServerId> {
        let mut loggers: Vec<ServerId> = self.logged.iter().map(|(l, _)| *l).collect();
        super::dvl::add(&mut loggers, self.abandoned.iter().copied());
        loggers
    }

    /// Logs the write elsewhere than `logger`, which has not acknowledged it.
    pub(super) fn abandon(&mut self, logger: ServerId) {
        let before = self.logged.len();
        self.logged.retain(|(l, acked)| *l != logger || *acked);
        if self.logged.len() < before && !self.abandoned.contains(&logger) {
            self.abandoned.push(logger);
        }
    }

    /// Whether a logger may hold a copy: one it was sent to, acknowledged or given up.
    pub(super) fn may_be_logged(&self) -> bool {
        !self.logged.is_empty() || !self.abandoned.is_empty()
    }
}

/// A group's pending writes, by version.
#[derive(Clone, Debug, Default)]
pub(super) struct PendingWrites(Vec<Pending>);

impl PendingWrites {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, version: Version) -> Result<usize, usize> {
        self.0.binary_search_by_key(&version, |p| p.write.version)
    }

    /// Adds `pending` under its write's version, replacing one already there.
    pub(super) fn insert(&mut self, pending: Pending) {
        match self.find(pending.write.version) {
            Ok(at) => self.0[at] = pending,
            Err(at) => self.0.insert(at, pending),
        }
    }

    pub(super) fn contains_key(&self, version: &Version) -> bool {
        self.find(*version).is_ok()
    }

    pub(super) fn get(&self, version: &Version) -> Option<&Pending> {
        self.find(*version).ok().map(|at| &self.0[at])
    }

    pub(super) fn get_mut(&mut self, version: &Version) -> Option<&mut Pending> {
        self.find(*version).ok().map(|at| &mut self.0[at])
    }

    pub(super) fn remove(&mut self, version: &Version) -> Option<Pending> {
        self.find(*version).ok().map(|at| self.0.remove(at))
    }

    /// The versions pending, oldest first.
    pub(super) fn keys(&self) -> impl Iterator<Item = &Version> + '_ {
        self.0.iter().map(|p| &p.write.version)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.0.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Pending> + '_ {
        self.0.iter_mut()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Version, &Pending)> + '_ {
        self.0.iter().map(|p| (&p.write.version, p))
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::{ByteRange, ObjectId};

    use super::*;
    use crate::cluster::{ChunkId, ChunkIndex, Payload, Stamp};

    fn pending(version: u64, stamp: u64) -> Pending {
        let chunk = ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) };
        let range = ByteRange::new(0, 4096);
        let (version, stamp) = (Version(version), Stamp(stamp));
        let write = UnstableWrite { chunk, range, version, stamp, data: Payload::NONE };
        Pending::new(write, 3, VirtualInstant::ZERO, None)
    }

    #[test]
    fn writes_are_kept_by_version_whatever_the_order_they_come_in() {
        let mut writes = PendingWrites::default();
        for version in [5, 2, 9, 7] {
            writes.insert(pending(version, version * 10));
        }
        writes.insert(pending(7, 71));
        let versions: Vec<u64> = writes.keys().map(|v| v.0).collect();
        assert_eq!(versions, [2, 5, 7, 9]);
        assert_eq!(writes.get(&Version(7)).map(|p| p.write.stamp), Some(Stamp(71)), "replaced");
        assert!(writes.get(&Version(6)).is_none());
        assert_eq!(writes.remove(&Version(5)).map(|p| p.write.stamp), Some(Stamp(50)));
        assert!(!writes.contains_key(&Version(5)));
        assert!(writes.remove(&Version(5)).is_none());
        let mut write = pending(1, 1);
        for index in [2, 0, 2, 5] {
            write.ack(index);
            assert!(!write.all_acked(), "replica 1 has not acked");
        }
        write.ack(1);
        assert!(write.all_acked() && write.acked(1) && !write.acked(3));
        let left: Vec<u64> = writes.iter().map(|(v, p)| v.0 + p.write.stamp.0).collect();
        assert_eq!(left, [22, 78, 99]);
    }
}
