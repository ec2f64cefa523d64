//! Disk space (docs/protocol.md, "Disk space"): a server with less free disk than
//! the reserve counts itself full and says so in its heartbeats; the MDS relays the
//! full servers in every heartbeat reply; a primary refuses a new write to a group
//! with a full replica before any replica takes it, so the refusal is a write that
//! never took effect. A write that finds the disk full anyway (the reserve overrun)
//! fails at that replica without effect: its writer hears nothing and sends it
//! again, as after a lost message, until there is room.
//!
//! Freeing (docs/space.md): the MDS's heartbeat replies name the deleted objects whose
//! grace has passed; the server makes their free durable (`StoreOp::Free`), frees
//! their chunks, drops the writes its DVLs logged of them, and says in its next
//! heartbeats how far it got. An orphan scan reports the objects it holds, a batch at
//! a time, so that the MDS frees those no name holds any more.

use somnus_types::{ChunkGroupId, ObjectId, ServerId, VirtualDuration};

use super::{HeldObject, Io, Message, Peer, Server, ServerPower, SpaceReport};

/// Objects one orphan report names at most.
const ORPHAN_BATCH: usize = 1024;

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

    /// The disk had no room for the change `io`: nothing of it took effect.
    pub(super) fn change_failed(&mut self, io: Io) {
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
            // The MDS sends the frees again with the next heartbeat reply.
            Io::Free { .. } => self.freeing = false,
            // A rebuild's copy: the primary copies the chunk again.
            _ => {}
        }
    }

    /// What this server tells the MDS of its disk in every heartbeat.
    pub fn space(&self) -> SpaceReport {
        SpaceReport {
            stored_bytes: self.store.bytes_held(),
            disk_bytes: self.space.used_bytes,
            free_bytes: self.space.free_bytes,
            freed_through: self.freed_through,
        }
    }

    /// The MDS's frees due here, up to `through`: made durable, then applied (one
    /// batch at a time; a reply meanwhile is sent again with the next heartbeat's).
    pub(super) fn frees_received(&mut self, objects: Vec<ObjectId>, through: u64) {
        if self.freeing || through <= self.freed_through {
            return;
        }
        if objects.is_empty() {
            // Nothing of them is held here: nothing to make durable.
            self.freed_through = through;
            return;
        }
        self.freeing = true;
        // Nothing of them lands from now on: a write issued after the free would put
        // blocks in place that the free, durable before it, never takes.
        self.store.forbid(&objects);
        let bytes = objects.len() as u64 * super::super::store::BLOCK_BYTES;
        self.disk(Io::Free { objects, through }, 0, bytes);
    }

    /// The free of `objects` is durable: their chunks go, and the writes the DVLs
    /// logged of them are dropped (their markers follow) instead of reclaimed.
    pub(super) fn freed(&mut self, objects: &[ObjectId], through: u64) {
        self.freeing = false;
        self.freed_through = self.freed_through.max(through);
        self.counters.objects_freed += objects.len() as u64;
        let groups: Vec<ChunkGroupId> = self.led.keys().copied().collect();
        for group in groups {
            let Some(led) = self.led.get_mut(&group) else { continue };
            let replicas = led.replicas.clone();
            let dropped = led.dvl.drop_objects(objects, &replicas);
            self.counters.logged_writes_dropped += dropped as u64;
            if dropped > 0 {
                self.serve_demand_reads(group, false);
            }
        }
    }

    /// Reports the next batch of objects held to the MDS (while on: background work
    /// never wakes a server); after the last, the scan starts again from the first.
    pub(super) fn scan_orphans(&mut self) {
        self.next_orphan_scan = self.now.saturating_add(self.config.orphan_scan_interval);
        if self.power != ServerPower::On {
            return;
        }
        let held = self.store.objects_held(self.orphan_cursor, ORPHAN_BATCH);
        self.orphan_cursor = match held.last() {
            Some((object, _, _)) if held.len() == ORPHAN_BATCH => *object,
            _ => ObjectId(0),
        };
        if held.is_empty() {
            return;
        }
        let objects = held
            .into_iter()
            .map(|(object, chunk_groups, bytes)| HeldObject { object, chunk_groups, bytes })
            .collect();
        self.send(Peer::Mds, Message::CheckObjects { objects });
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
