//! Rebuild (Sierra 3.2, 4.4; docs/protocol.md R1, R2): a replica that replaces a lost
//! one starts empty. Its group's primary copies every chunk of the group it holds to
//! it, a few chunks at a time over all the groups it leads, each at the versions it
//! holds; the new replica applies them where newer, so writes that reach it during
//! the copy are never undone. Once every chunk is acknowledged the primary tells the
//! MDS, which may then make the new replica primary. A copy cut short (the new
//! replica went down, the primary changed) starts again from the first chunk.

use std::collections::{BTreeMap, VecDeque};

use somnus_types::{ByteRange, ChunkGroupId, ServerId, VirtualInstant};

use super::primary::Led;
use super::{Broken, Io, Server, disk_position};
use crate::cluster::{ChunkId, Epoch, Message, Peer, Piece};

#[derive(Clone, Debug)]
pub(super) struct Rebuild {
    target: ServerId,
    /// Chunks still to copy, once the copy started.
    todo: Option<VecDeque<ChunkId>>,
    /// Chunks sent (or read, or found corrupt and waiting for the scrub) and when.
    in_flight: BTreeMap<ChunkId, VirtualInstant>,
    /// When `RebuildDone` was last sent: the copy is complete.
    done_sent_at: Option<VirtualInstant>,
    /// The target holds the group already (a resync's copy, R4): it serves as a
    /// replica meanwhile, and the MDS is told nothing when the copy ends.
    resync: bool,
}

impl Rebuild {
    pub(super) fn new(target: ServerId) -> Rebuild {
        Rebuild {
            target,
            todo: None,
            in_flight: BTreeMap::new(),
            done_sent_at: None,
            resync: false,
        }
    }

    /// A resync's copy to `target`, a replica that holds the group (R4).
    pub(super) fn resync(target: ServerId) -> Rebuild {
        Rebuild { resync: true, ..Rebuild::new(target) }
    }

    pub(super) fn oldest_sent(&self) -> Option<VirtualInstant> {
        self.in_flight.values().copied().chain(self.done_sent_at).min()
    }

    fn restart(&mut self) {
        self.todo = None;
        self.in_flight.clear();
        self.done_sent_at = None;
    }
}

impl Led {
    /// Whether `server`'s copy is still being built (it holds only part of the group).
    pub(super) fn rebuilding(&self, server: ServerId) -> bool {
        self.rebuilds.iter().any(|r| r.target == server && !r.resync)
    }

    /// Whether a copy of the group to `server` is under way (a rebuild's or a
    /// resync's).
    pub(super) fn copying_to(&self, server: ServerId) -> bool {
        self.rebuilds.iter().any(|r| r.target == server)
    }

    fn rebuild_mut(&mut self, target: ServerId) -> Option<&mut Rebuild> {
        self.rebuilds.iter_mut().find(|r| r.target == target)
    }
}

impl Server {
    /// Starts copies whose new replica is fenced, takes back chunks unanswered for a
    /// retry interval, repeats `RebuildDone` until recorded.
    pub(super) fn rebuild_timer(&mut self, group: ChunkGroupId) {
        let (now, retry, id) = (self.now, self.config.retry_interval, self.id);
        let Some(led) = self.led.get_mut(&group) else { return };
        if led.rebuilds.is_empty() {
            return;
        }
        let ready = led.synced_at(id) && led.dvl.ready();
        let mut done = Vec::new();
        for index in 0..led.rebuilds.len() {
            let target = led.rebuilds[index].target;
            let fenced = led.synced_at(target) && !self.down.contains(&target);
            let rebuild = &mut led.rebuilds[index];
            if !fenced || !ready {
                rebuild.restart();
                continue;
            }
            if rebuild.todo.is_none() {
                let chunks = match self.broken {
                    Some(Broken::RebuildWithoutCopy) => Vec::new(),
                    _ => self.store.chunks_of(group),
                };
                rebuild.todo = Some(chunks.into());
            }
            let late: Vec<ChunkId> = rebuild
                .in_flight
                .iter()
                .filter(|(_, at)| at.saturating_add(retry) <= now)
                .map(|(c, _)| *c)
                .collect();
            for chunk in late {
                rebuild.in_flight.remove(&chunk);
                if let Some(todo) = rebuild.todo.as_mut() {
                    todo.push_front(chunk);
                }
            }
            if !rebuild.resync
                && rebuild.done_sent_at.is_some_and(|at| at.saturating_add(retry) <= now)
            {
                rebuild.done_sent_at = Some(now);
                done.push(target);
            }
        }
        let epoch = led.epoch;
        for server in done {
            self.send(Peer::Mds, Message::RebuildDone { group, epoch, server });
        }
        self.rebuild_pump(group);
    }

    /// Copies chunks while this server has fewer than `rebuild_chunks_max` in flight.
    fn rebuild_pump(&mut self, group: ChunkGroupId) {
        let max = self.config.rebuild_chunks_max as usize;
        let now = self.now;
        let mut in_flight: usize = self.rebuilds_in_flight();
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let mut reads = Vec::new();
        let mut done = Vec::new();
        for rebuild in &mut led.rebuilds {
            let Some(todo) = rebuild.todo.as_mut() else { continue };
            while in_flight < max {
                let Some(chunk) = todo.pop_front() else { break };
                in_flight += 1;
                rebuild.in_flight.insert(chunk, now);
                reads.push((rebuild.target, chunk));
            }
            let complete = todo.is_empty() && rebuild.in_flight.is_empty();
            if complete && rebuild.done_sent_at.is_none() {
                rebuild.done_sent_at = Some(now);
                if !rebuild.resync {
                    done.push(rebuild.target);
                }
            }
        }
        // A resync's copy ends when it is complete: nothing to record.
        led.rebuilds.retain(|r| !(r.resync && r.done_sent_at.is_some()));
        for (target, chunk) in reads {
            self.rebuild_read(target, group, epoch, chunk);
        }
        for server in done {
            self.send(Peer::Mds, Message::RebuildDone { group, epoch, server });
        }
    }

    /// Reads `chunk` to copy it to `target`. A corrupt copy is not sent: the chunk
    /// waits for the scrub's repair and is tried again when its retry interval has
    /// passed.
    pub(super) fn rebuild_read(
        &mut self,
        target: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
    ) {
        let chunk_range = ByteRange::new(0, self.config.chunk_size_bytes);
        let Ok(pieces) = self.store.read(chunk, chunk_range) else { return };
        let held = pieces.iter().filter(|p| p.version.0 > 0);
        let bytes: u64 = held.map(|p| p.range.size_bytes()).sum();
        let position = disk_position(chunk, chunk_range);
        let io = Io::RebuildRead { to: target, group, epoch, chunk, pieces };
        self.disk(io, position, bytes.max(1));
    }

    fn rebuilds_in_flight(&self) -> usize {
        let rebuilds = self.led.values().flat_map(|led| &led.rebuilds);
        rebuilds.map(|r| r.in_flight.len()).sum()
    }

    /// The new replica holds `chunk`: the next ones go, in this group or another.
    pub(super) fn rebuild_acked(
        &mut self,
        replica: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
    ) {
        if self.led.get(&group).is_none_or(|l| l.epoch != epoch) {
            return;
        }
        // A copy from this primary's own replica of records no logger holds any more
        // (R3) is answered as a rebuild's chunk is.
        self.own_copy_acked(group, replica, chunk);
        let Some(led) = self.led.get_mut(&group) else { return };
        let Some(rebuild) = led.rebuild_mut(replica) else { return };
        if rebuild.in_flight.remove(&chunk).is_none() {
            return;
        }
        let rebuilding = self.led.iter().filter(|(_, led)| !led.rebuilds.is_empty());
        let groups: Vec<ChunkGroupId> = rebuilding.map(|(group, _)| *group).collect();
        for group in groups {
            self.rebuild_pump(group);
        }
    }

    pub(super) fn rebuild_recorded(&mut self, group: ChunkGroupId, epoch: Epoch, server: ServerId) {
        let Some(led) = self.led.get_mut(&group).filter(|l| l.epoch == epoch) else { return };
        led.rebuilds.retain(|r| r.target != server || r.done_sent_at.is_none());
    }

    /// The new replica's side: C1 as for a write, then the copy is applied where newer.
    pub(super) fn rebuild_data(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        pieces: Vec<Piece>,
    ) {
        if !self.fenced_at(primary, group, epoch) {
            return;
        }
        let bytes: u64 = pieces.iter().map(|p| p.range.size_bytes()).sum();
        let position = disk_position(chunk, ByteRange::new(0, self.config.chunk_size_bytes));
        let io = Io::RebuildWrite { group, epoch, primary, chunk, pieces };
        self.disk(io, position, bytes.max(1));
    }
}
