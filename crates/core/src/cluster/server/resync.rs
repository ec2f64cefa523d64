//! Resync (docs/protocol.md R4): a primary that recovered its DVL without the records
//! of a logger declared lost cannot know which replicas lack which logged writes. A
//! write whose every log copy was on that logger is then on the replicas that applied
//! it and nowhere else (with r = 2, the old primary's own replica alone), and nothing
//! in the map would bring it to the others.
//!
//! So the primary makes every replica equal before it serves: it pulls each other
//! replica's copy of every chunk of the group (`ResyncPull`, answered by `ResyncHeld`,
//! the chunks it holds, and a `RebuildData` per chunk) and applies it where newer,
//! then copies its own, now the newest of all, to each of them as a rebuild does
//! (R1, applied where newer).
//! A replica asleep is woken for it (P4's `WakeReplicas`); a lost one is left to its
//! rebuild. Until the copies are done the DVL is not empty, so the view keeps the lost
//! logger, and a primary that takes over meanwhile resyncs again.

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ChunkGroupId, ServerId, VirtualInstant};

use super::Server;
use super::rebuild::Rebuild;
use crate::cluster::{ChunkId, Epoch, Message, Peer};

/// What a resync has done.
#[derive(Clone, Debug, Default)]
pub(super) struct Resync {
    /// Per replica pulled from.
    pulls: BTreeMap<ServerId, Pull>,
    /// The own copy went out to these replicas (rebuilds under way).
    pushed_to: Option<Vec<ServerId>>,
}

#[derive(Clone, Debug, Default)]
struct Pull {
    /// The chunks the replica holds, once it said.
    held: Option<BTreeSet<ChunkId>>,
    /// The chunks of it applied here.
    applied: BTreeSet<ChunkId>,
    asked_at: Option<VirtualInstant>,
}

impl Pull {
    fn missing(&self) -> Vec<ChunkId> {
        let held = self.held.iter().flatten();
        held.filter(|c| !self.applied.contains(c)).copied().collect()
    }

    fn done(&self) -> bool {
        self.held.is_some() && self.missing().is_empty()
    }
}

impl Resync {
    /// Every replica's copy is here: the primary's replica is the newest of all.
    pub(super) fn pulled(&self) -> bool {
        self.pushed_to.is_some()
    }
}

impl Server {
    /// Pulls from the replicas not pulled yet, then pushes; ends once every push is
    /// done. At each timer of the group.
    pub(super) fn resync_timer(&mut self, group: ChunkGroupId) {
        let (now, retry, own) = (self.now, self.config.retry_interval, self.id);
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let Some(mut resync) = led.dvl.resync.take() else { return };
        if let Some(pushed_to) = &resync.pushed_to {
            if pushed_to.iter().any(|r| led.copying_to(*r)) {
                led.dvl.resync = Some(resync);
            } else {
                self.counters.resyncs += 1;
            }
            return;
        }
        if !led.synced_at(own) {
            led.dvl.resync = Some(resync);
            return;
        }
        let others: Vec<(usize, ServerId)> = led
            .replicas
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, r)| *r != own && !self.lost.contains(r))
            .collect();
        let mut asks = Vec::new();
        let mut asleep = false;
        for (i, replica) in &others {
            let pull = resync.pulls.entry(*replica).or_default();
            if pull.done() {
                continue;
            }
            if !led.synced[*i] || self.down.contains(replica) {
                asleep |= self.down.contains(replica);
                continue;
            }
            if pull.asked_at.is_none_or(|at| at.saturating_add(retry) <= now) {
                pull.asked_at = Some(now);
                asks.push((*replica, pull.missing()));
            }
        }
        if others.iter().all(|(_, r)| resync.pulls.get(r).is_some_and(Pull::done)) {
            let targets: Vec<ServerId> = others.iter().map(|(_, r)| *r).collect();
            for target in &targets {
                if !led.copying_to(*target) {
                    led.rebuilds.push(Rebuild::resync(*target));
                }
            }
            resync.pushed_to = Some(targets);
            led.dvl.resync = Some(resync);
            // Serving may start: the own replica holds the newest of every block.
            self.admit(group);
            return;
        }
        led.dvl.resync = Some(resync);
        for (replica, chunks) in asks {
            self.send(Peer::Server(replica), Message::ResyncPull { group, epoch, chunks });
        }
        if asleep {
            self.ask_wake(group);
        }
    }

    /// `replica` holds `chunks` of the group (their copies follow).
    pub(super) fn resync_held(
        &mut self,
        replica: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunks: Vec<ChunkId>,
    ) {
        let Some(led) = self.led.get_mut(&group).filter(|led| led.epoch == epoch) else { return };
        let Some(resync) = led.dvl.resync.as_mut() else { return };
        let pull = resync.pulls.entry(replica).or_default();
        pull.held = Some(chunks.into_iter().collect());
        if pull.done() {
            self.resync_timer(group);
        }
    }

    /// `replica`'s copy of `chunk`, pulled, is applied here.
    pub(super) fn resync_applied(
        &mut self,
        replica: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
    ) {
        let Some(led) = self.led.get_mut(&group).filter(|led| led.epoch == epoch) else { return };
        let Some(resync) = led.dvl.resync.as_mut() else { return };
        if let Some(pull) = resync.pulls.get_mut(&replica) {
            pull.applied.insert(chunk);
            if pull.done() {
                self.resync_timer(group);
            }
        }
    }

    /// The replica's side: its copy of `chunks` (every chunk it holds if none is
    /// named) goes to the primary that asked, if it is fenced at the primary's epoch.
    pub(super) fn resync_pull(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunks: Vec<ChunkId>,
    ) {
        if !self.fenced_at(primary, group, epoch) {
            return;
        }
        let held = self.store.chunks_of(group);
        let chunks = if chunks.is_empty() {
            held.clone()
        } else {
            chunks.into_iter().filter(|c| held.contains(c)).collect()
        };
        // Said each time: a chunk asked for again may be gone since (freed).
        self.answer_primary(primary, Message::ResyncHeld { group, epoch, chunks: held });
        for chunk in chunks {
            self.rebuild_read(primary, group, epoch, chunk);
        }
    }
}
