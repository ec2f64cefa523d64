//! Disk space (docs/protocol.md, "Disk space"): a server with less free disk than
//! the reserve counts itself full and says so in its heartbeats; the MDS relays the
//! full servers in every heartbeat reply; a primary refuses a new write to a group
//! with a full replica before any replica takes it, so the refusal is a write that
//! never took effect. A write that finds the disk full anyway (the reserve overrun)
//! fails at that replica without effect: its writer hears nothing and sends it
//! again, as after a lost message, until there is room.

use somnus_types::{ChunkGroupId, IoId, ServerId, VirtualDuration};

use super::{Io, Server, ServerPower};
use crate::slab::Key;

/// How long a write that found no room keeps the server full at the least: a
/// measure of free bytes above the reserve does not end it sooner, since what ran
/// out may be what the measure does not see (a quota, the inodes), and writes let in
/// again would only fail again.
const FAILED_HOLD: VirtualDuration = VirtualDuration::from_secs(10);

impl Server {
    /// Whether this server counts its disk full: below the reserve, or a write
    /// failed for lack of room (since the last measure above it, and for
    /// `FAILED_HOLD` at the least).
    pub fn is_full(&self) -> bool {
        self.space.failed_at.is_some()
            || self.space.free_bytes.is_some_and(|free| free < self.config.disk_reserve_bytes)
    }

    /// The free bytes last measured on this server's disk.
    pub fn free_bytes(&self) -> Option<u64> {
        self.space.free_bytes
    }

    /// A replica of `group` (led here) that is full, as this server knows.
    pub(super) fn full_replica(&self, group: ChunkGroupId) -> Option<ServerId> {
        let led = self.led.get(&group)?;
        let full = |r: &ServerId| match *r == self.id {
            true => self.is_full(),
            false => self.space.full_peers.contains(r),
        };
        led.replicas.iter().copied().find(full)
    }

    pub(super) fn disk_space(&mut self, free_bytes: u64) {
        let was_full = self.is_full();
        self.space.free_bytes = Some(free_bytes);
        let held = self.space.failed_at.is_some_and(|at| at.saturating_add(FAILED_HOLD) > self.now);
        if free_bytes > self.config.disk_reserve_bytes && !held {
            self.space.failed_at = None;
        }
        self.tell_fullness(was_full);
    }

    /// The disk had no room for `io`: nothing of it took effect.
    pub(super) fn disk_failed(&mut self, io: IoId) {
        let Some(io) = self.ios.remove(Key(io.0)) else {
            unreachable!("a disk I/O failed after it completed, or was never issued");
        };
        if io.change().is_none() {
            // Reads and the logger's writes are done by the core's own calls at
            // completion (the logger answers full if its log has no room): a shell
            // has nothing of theirs to fail.
            return self.io_done(io);
        }
        self.counters.disk_writes_failed += 1;
        let was_full = self.is_full();
        self.space.failed_at = Some(self.now);
        self.tell_fullness(was_full);
        match io {
            Io::ReplicaWrite { group, epoch, write, .. } => {
                // Not queued any more: the primary's retransmission is written anew.
                let settled = self.update_work(group, |work| {
                    if let Ok(at) = work.queued.binary_search(&(epoch, write.version)) {
                        work.queued.remove(at);
                    }
                    match work.queued.is_empty() {
                        true => std::mem::take(&mut work.fences_waiting),
                        false => Vec::new(),
                    }
                });
                for (primary, epoch) in settled.unwrap_or_default() {
                    self.reply_sync_when_settled(primary, group, epoch);
                }
            }
            Io::Fence { group, epoch, .. } => {
                // The primary asks again (its sync request is retried).
                self.update_work(group, |work| {
                    if work.fencing == Some(epoch) {
                        work.fencing = None;
                    }
                });
            }
            Io::Repair { group, chunk, range, .. } => self.repair_failed(group, chunk, range),
            // A rebuild's copy: the primary copies the chunk again.
            _ => {}
        }
    }

    /// Heartbeats at once when the server's fullness changed, so its primaries and
    /// the MDS hear it within a round trip; not while a `Standby` waits for its
    /// answer (a heartbeat then reads as the server coming back).
    fn tell_fullness(&mut self, was_full: bool) {
        let on = self.power == ServerPower::On && self.standby_sent_at.is_none();
        if self.is_full() != was_full && on {
            self.heartbeat();
        }
    }
}
