//! The MDS's side of space (docs/space.md): data no name holds goes to the free log,
//! a grace later every server holding it frees its share, told in its heartbeat
//! replies; allocations never bound expire; a server's orphan scan reports objects no
//! name holds, which are freed the same way.

use somnus_types::{ChunkGroupId, ObjectId, ServerId};

use super::frees::FreeSpec;
use super::{Command, Mds};
use crate::cluster::server::Broken;
use crate::cluster::{HeldObject, ServerPower, SpaceReport};

/// Allocations expired by one timer at most (the rest at the next).
const EXPIRIES_PER_TIMER: usize = 4096;
/// Objects one orphan report may name (more are dropped: the scan sends batches).
pub const HELD_OBJECTS_MAX: usize = 4096;

impl Mds {
    /// Puts `spec` in the free log, waiting for every server that holds a replica of
    /// one of its groups, due a grace from now.
    pub(super) fn queue_free(&mut self, spec: FreeSpec) {
        let mut waiting: Vec<ServerId> = Vec::new();
        for group in &spec.chunk_groups {
            let Some(entry) = self.groups.get(group.index()) else { continue };
            for replica in &entry.replicas {
                let removed = self.servers[replica.index()].power == ServerPower::Removed;
                if !removed && !waiting.contains(replica) {
                    waiting.push(*replica);
                }
            }
        }
        waiting.sort_unstable();
        let due = match self.broken {
            Some(Broken::FreeBeforeGrace) => self.now,
            _ => self.now.saturating_add(self.config.free_grace),
        };
        self.frees.push(spec, due, waiting);
    }

    /// Allocations past their grace and still unbound are freed (a writer that died
    /// between its data and its bind).
    pub(super) fn expire_pending(&mut self) {
        let now = self.now;
        let expired: Vec<ObjectId> = self
            .pending_expiry
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(EXPIRIES_PER_TIMER)
            .map(|(_, object)| *object)
            .collect();
        if !expired.is_empty() {
            self.commit(Command::ExpirePending { objects: expired });
        }
    }

    /// A heartbeat's report of `server`'s disk and of the frees it made durable:
    /// kept for status, and the entries no server waits for any more leave the log.
    pub(super) fn space_reported(&mut self, server: ServerId, report: SpaceReport) {
        self.space[server.index()] = report;
        let done = self.frees.applied(server, report.freed_through);
        if !done.is_empty() {
            self.commit(Command::TrimFrees { seqs: done });
        }
    }

    /// The frees to send `server` with its heartbeat reply, and the sequence they reach.
    pub(super) fn frees_for(&self, server: ServerId) -> (Vec<ObjectId>, u64) {
        self.frees.due_for(server, self.now)
    }

    /// A lost server is waited for by no free.
    pub(super) fn forget_frees_of(&mut self, server: ServerId) {
        let done = self.frees.forget(server);
        if !done.is_empty() {
            self.commit(Command::TrimFrees { seqs: done });
        }
    }

    /// A server's orphan scan: of the objects it holds, those no name holds, no
    /// allocation is writing and the free log does not hold already (below the next
    /// id: ids are never given twice, so such an object is gone for good) are freed.
    pub(super) fn objects_held(&mut self, held: Vec<HeldObject>) {
        let next_seq = self.frees.next_seq();
        let mut frees: Vec<FreeSpec> = Vec::new();
        for held in held.into_iter().take(HELD_OBJECTS_MAX) {
            let known = held.object.0 < self.next_object;
            if !known || self.data.contains_key(&held.object) || self.frees.is_queued(held.object) {
                continue;
            }
            if frees.iter().any(|f| f.object == held.object) {
                continue;
            }
            let groups = held.chunk_groups.into_iter().filter(|g| g.index() < self.groups.len());
            frees.push(FreeSpec {
                seq: next_seq + frees.len() as u64,
                object: held.object,
                chunk_groups: groups.collect(),
                size_bytes: held.bytes,
            });
        }
        if !frees.is_empty() {
            self.counters.orphans_found += frees.len() as u64;
            let next_seq = next_seq + frees.len() as u64;
            self.commit(Command::QueueFrees { frees, next_seq });
        }
    }

    /// What each server last reported of its disk.
    pub fn space_of(&self, server: ServerId) -> SpaceReport {
        self.space[server.index()]
    }

    /// Per server, the bytes waiting to be freed there (sleeping servers included).
    pub fn bytes_to_free(&self) -> Vec<u64> {
        let holds = |server: ServerId, group: ChunkGroupId| {
            self.groups[group.index()].replicas.contains(&server)
        };
        self.frees.bytes_waiting(self.servers.len(), self.config.chunk_size_bytes, holds)
    }

    /// Entries of the free log (the simulation's end check: it drains).
    pub fn frees_queued(&self) -> usize {
        self.frees.len()
    }
}
