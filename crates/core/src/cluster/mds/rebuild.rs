//! Rebuild after a permanent loss (Sierra 3.2, 4.4): every replica the lost server
//! held moves to another server of its gear group, the least loaded first, so the
//! copies are written on N/r - 1 servers in parallel (in a rack the group's other
//! replicas are not in: if its gear group has none, another gear group's); each group's primary copies
//! its chunks to the new replica and reports it done (docs/protocol.md R1, R2).
//!
//! Sleep is never loss (P2): only `declare_lost` starts a rebuild.

use somnus_types::{ChunkGroupId, ServerId};

use super::{Command, Mds};
use crate::cluster::{Epoch, Message, Peer, ServerPower};

impl Mds {
    /// The operator's declaration that `server` will not come back.
    pub(super) fn declare_lost(&mut self, server: ServerId) {
        let Some(entry) = self.servers.get(server.index()) else {
            self.counters.messages_dropped += 1;
            return;
        };
        if entry.power == ServerPower::Removed {
            return;
        }
        self.commit(Command::SetPower { server, power: ServerPower::Removed });
        self.forget_frees_of(server);
        // Replicas held per server, counted once and kept up to date as they move.
        let mut held = vec![0u32; self.servers.len()];
        for group in &self.groups {
            for replica in &group.replicas {
                held[replica.index()] += 1;
            }
        }
        for index in 0..self.groups.len() {
            if !self.groups[index].replicas.contains(&server) {
                continue;
            }
            let group = ChunkGroupId(index as u32);
            let Some(with) = self.replacement(group, server, &held) else {
                // No server can take it (its gear group is gone): the group stays one
                // copy short and its DVL keeps logging for the lost replica.
                continue;
            };
            held[with.index()] += 1;
            self.commit(Command::ReplaceReplica { group, lost: server, with });
            self.rebuild_view(group);
        }
    }

    /// Another server of the lost one's gear group in a rack none of the group's
    /// other replicas is in, the one holding fewest replicas. When the gear group has
    /// none in a free rack (a rotated layout of few racks), a server of another gear
    /// group in a free rack: r distinct fault domains are a durability rule, one
    /// replica per gear group only a power one (the group then keeps more servers on).
    /// Serving servers first, then ones down for now (the copy waits for them); none
    /// when no free rack has a server left.
    fn replacement(&self, group: ChunkGroupId, lost: ServerId, held: &[u32]) -> Option<ServerId> {
        let replicas = &self.groups[group.index()].replicas;
        let gear_group = self.servers[lost.index()].gear_group;
        let racks: Vec<_> =
            replicas.iter().filter(|r| **r != lost).map(|r| self.servers[r.index()].rack).collect();
        (0..self.servers.len() as u32)
            .map(ServerId)
            .filter(|s| {
                let entry = &self.servers[s.index()];
                entry.power != ServerPower::Removed
                    && !replicas.contains(s)
                    && !racks.contains(&entry.rack)
            })
            .min_by_key(|s| {
                let entry = &self.servers[s.index()];
                // A server down for now may take it (the copy waits for it): better
                // than a group left a copy short.
                let serving = entry.power.serves_replicas();
                (entry.gear_group != gear_group, !serving, held[s.index()], s.0)
            })
    }

    /// A new epoch for a group whose replicas changed: its primary keeps it if it
    /// serves (it learns the new replica and the rebuild from the grant), else the
    /// view changes as on a lease's end; the DVL is recovered from the loggers.
    fn rebuild_view(&mut self, group: ChunkGroupId) {
        let entry = &mut self.groups[group.index()];
        entry.handoff = None;
        let keeper = entry
            .primary
            .filter(|p| entry.replicas.contains(p) && self.servers[p.index()].power.serves());
        let Some(keeper) = keeper else {
            self.change_view(group, None);
            return;
        };
        let epoch = self.groups[group.index()].epoch.next();
        self.counters.view_changes += 1;
        self.commit(Command::SetPrimary { group, epoch, server: Some(keeper) });
        if self.servers[keeper.index()].heartbeat_sent.is_some() {
            self.send_pending_grants(keeper);
        }
    }

    /// R2: the primary of `epoch` built `rebuilt`'s copy; answered even when recorded
    /// already (the answer was lost).
    pub(super) fn rebuild_done(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        rebuilt: ServerId,
    ) {
        if self.groups[group.index()].rebuilding.contains(&rebuilt) {
            self.commit(Command::RebuildDone { group, server: rebuilt });
        }
        let answer = Message::RebuildRecorded { group, epoch, server: rebuilt };
        self.send(Peer::Server(primary), answer);
    }

    /// Replicas being rebuilt, over all groups (the simulation waits for none).
    pub fn rebuilds_under_way(&self) -> usize {
        self.groups.iter().map(|g| g.rebuilding.len()).sum()
    }
}
