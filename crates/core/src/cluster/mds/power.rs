//! Power is protocol, not a fault (Sierra 3.3.2, 3.4; docs/protocol.md P1-P3): gear
//! shifts drain primaries off the servers that will sleep and wake those that will
//! serve; a failure wakes the sleeping replicas of the failed server's groups; a
//! sleeping server is never declared failed.

use somnus_types::{ChunkGroupId, ServerId};

use super::{Command, Mds, MdsAction};
use crate::cluster::{DvlHandoff, Message, Peer, ServerPower, ServerTime};
use crate::gear::PowerPlan;

impl Mds {
    /// The plan keeps its first `full_groups` gear groups of `order` on (at least
    /// `g_min` whole ones) and the first `partial` servers of the next: the others drain
    /// their primaries and sleep, the sleeping ones the plan has on wake.
    pub(super) fn set_plan(&mut self, plan: PowerPlan, order: Vec<u32>) {
        let r = self.config.replicas;
        let full_groups = plan.full_groups.clamp(self.config.gear_min, r);
        let partial = if full_groups < r { plan.partial } else { 0 };
        // An order that is not a permutation of the gear groups is not a plan: keep
        // the current one.
        let mut sorted = order.clone();
        sorted.sort_unstable();
        let order = if sorted == (0..r).collect::<Vec<_>>() { order } else { self.order.clone() };
        self.commit(Command::SetPlan { full_groups, partial, order });
        for index in 0..self.servers.len() {
            let server = ServerId(index as u32);
            if self.keeps_on(server) {
                self.keep_serving(server);
            }
        }
        self.settle_power();
    }

    /// A server the MDS keeps on: one draining serves on (shifted back up before it
    /// slept: migrations under way finish), one asleep wakes.
    fn keep_serving(&mut self, server: ServerId) {
        match self.servers[server.index()].power {
            ServerPower::Draining => {
                self.commit(Command::SetPower { server, power: ServerPower::On });
            }
            ServerPower::Asleep => self.wake(server),
            _ => {}
        }
    }

    /// Whether `server` stays on: its gear group is on, it holds a replica of a
    /// group whose replica in an on gear group failed (P3: it covers until that one is
    /// back or rebuilt) or whose primary could not log (P4), or it holds logged writes
    /// a group's primary must read back (P7).
    pub(super) fn keeps_on(&self, server: ServerId) -> bool {
        let on = |s: &ServerId| self.planned_on(*s);
        if on(&server) {
            return true;
        }
        let failed = |s: &ServerId| self.servers[s.index()].power == ServerPower::Failed;
        self.groups.iter().any(|g| {
            g.kept_holders.contains(&server)
                || (g.replicas.contains(&server)
                    && (g.kept_on || g.replicas.iter().any(|r| on(r) && failed(r))))
        })
    }

    /// Whether the plan has `server` on, failures aside.
    pub(super) fn planned_on(&self, server: ServerId) -> bool {
        let group = self.servers[server.index()].gear_group.0;
        let Some(place) = self.order.iter().position(|g| *g == group) else { return true };
        let place = place as u32;
        place < self.plan.full_groups
            || (place == self.plan.full_groups && self.rank[server.index()] < self.plan.partial)
    }

    /// P4: a primary that cannot log a write gets its replicas back: those draining
    /// stay on, those asleep wake, and they stay on until the gear shifts again or a
    /// failed server comes back (then the primary asks again if it still cannot log).
    pub(super) fn keep_replicas_on(&mut self, group: ChunkGroupId) {
        if self.groups[group.index()].kept_on {
            return;
        }
        self.commit(Command::KeepReplicasOn { group });
        for server in self.groups[group.index()].replicas.clone() {
            self.keep_serving(server);
        }
    }

    /// P7: the group's primary awaits logged writes whose every holder sleeps (a
    /// gear shift put them to sleep after the primary moved off the replica that had
    /// the writes): those it names stay on until the gear shifts again, those asleep
    /// wake, those draining serve on. Ids that are no server here, failed or removed
    /// servers and ones kept on already are left out.
    pub(super) fn keep_holders_on(&mut self, group: ChunkGroupId, mut servers: Vec<ServerId>) {
        // At most one of each server: a list longer than that is no primary's.
        servers.sort_unstable();
        servers.dedup();
        servers.truncate(self.servers.len());
        let kept = &self.groups[group.index()].kept_holders;
        servers.retain(|s| {
            let power = self.servers.get(s.index()).map(|e| e.power);
            !matches!(power, None | Some(ServerPower::Failed | ServerPower::Removed))
                && !kept.contains(s)
        });
        if servers.is_empty() {
            return;
        }
        self.commit(Command::KeepHoldersOn { group, servers: servers.clone() });
        for server in servers {
            self.keep_serving(server);
        }
    }

    /// Drains the servers on that the gear has off and no failure needs. Every one is
    /// draining before any primary moves: a primary moves once, to a replica that stays
    /// on, never to one that drains next.
    pub(super) fn settle_power(&mut self) {
        let mut draining = Vec::new();
        for index in 0..self.servers.len() {
            let server = ServerId(index as u32);
            if self.servers[index].power == ServerPower::On && !self.keeps_on(server) {
                self.commit(Command::SetPower { server, power: ServerPower::Draining });
                draining.push(server);
            }
        }
        for server in draining {
            self.drain(server);
        }
    }

    /// P1: asks each of `server`'s primaries to hand over to a replica that stays on;
    /// a server that leads nothing is told to go to standby.
    pub(super) fn drain(&mut self, server: ServerId) {
        for index in 0..self.groups.len() {
            let group = ChunkGroupId(index as u32);
            let entry = &self.groups[index];
            if entry.primary != Some(server) || entry.migrating_to.is_some() {
                continue;
            }
            let target = entry
                .replicas
                .iter()
                .copied()
                .filter(|s| *s != server && self.servers[s.index()].power.serves())
                .min_by_key(|s| (self.primaries_of(*s), s.0));
            let Some(target) = target else { continue };
            if entry.granted {
                let epoch = entry.epoch;
                self.groups[index].migrating_to = Some(target);
                self.counters.migrations += 1;
                self.send(Peer::Server(server), Message::MigratePrimary { group, epoch, target });
            } else {
                // Never granted (the server was not heard from): no state to hand over.
                self.change_view(group, Some(target));
            }
        }
        self.standby_if_idle(server);
    }

    fn standby_if_idle(&mut self, server: ServerId) {
        if self.servers[server.index()].power == ServerPower::Draining
            && self.primaries_of(server) == 0
        {
            self.send(Peer::Server(server), Message::EnterStandby);
        }
    }

    /// The primary gave `group` back with its DVL state (P1): the migration's target
    /// leads the next epoch with that state.
    pub(super) fn lease_cancelled(
        &mut self,
        server: ServerId,
        group: ChunkGroupId,
        handoff: DvlHandoff,
    ) {
        let target = self.groups[group.index()].migrating_to;
        self.groups[group.index()].handoff = Some(handoff);
        self.change_view(group, target);
        self.standby_if_idle(server);
    }

    /// The server announced standby: its peers log for it from now on (P2).
    /// A drained server may sleep; the answer is sent (again) to every `Standby`, so a
    /// lost one is repaired, and the server sleeps only once the MDS records it asleep.
    pub(super) fn standby(&mut self, server: ServerId, sent_at: ServerTime) {
        // A heartbeat sent before the standby and delivered late must not read as the
        // server coming back.
        let entry = &mut self.servers[server.index()];
        entry.heartbeat_sent = entry.heartbeat_sent.max(Some(sent_at));
        // A server waiting for its answer sends no heartbeat (it would read as the
        // server back on after it sleeps): the `Standby` shows it alive.
        entry.heartbeat_received = entry.heartbeat_received.max(self.now);
        let power = entry.power;
        self.index_server(server);
        // Standby with primaries left would leave their groups unserved until the
        // leases run out: refused, the server is told again once drained.
        let sleep = match power {
            ServerPower::Asleep => true,
            ServerPower::Draining => self.primaries_of(server) == 0,
            _ => false,
        };
        if sleep && power == ServerPower::Draining {
            self.commit(Command::SetPower { server, power: ServerPower::Asleep });
            self.commit(Command::SleptAt { server, sent_at });
        }
        self.send(Peer::Server(server), Message::StandbyAnswer { sleep });
    }

    pub(super) fn wake(&mut self, server: ServerId) {
        if self.servers[server.index()].power != ServerPower::Asleep {
            return;
        }
        self.counters.wakes += 1;
        self.commit(Command::SetPower { server, power: ServerPower::Waking });
        // The wake timeout runs from now.
        self.servers[server.index()].heartbeat_received = self.now;
        self.send_wake(server);
    }

    /// Sends `server` its wake packet, and again every `WAKE_RESEND` while it is waking.
    pub(super) fn send_wake(&mut self, server: ServerId) {
        self.servers[server.index()].wake_sent = Some(self.now);
        self.index_server(server);
        self.actions.push_back(MdsAction::WakeServer(server));
    }

    /// Sends the wakes due again: a server woken but not yet heard from may have missed
    /// its packet (a real NIC can, while its host suspends).
    pub(super) fn resend_wakes(&mut self) {
        for index in 0..self.servers.len() {
            if super::wake_resend_deadline(&self.servers[index]).is_some_and(|at| at <= self.now) {
                self.send_wake(ServerId(index as u32));
            }
        }
    }

    /// P3: wakes every sleeping replica of `group`.
    pub(super) fn wake_replicas(&mut self, group: ChunkGroupId) {
        for server in self.groups[group.index()].replicas.clone() {
            self.wake(server);
        }
    }

    /// A server silent past the failure timeout is failed; asleep, waking or removed
    /// ones are not watched (P2). The sleeping replicas of its groups wake (P3).
    pub(super) fn detect_failures(&mut self) {
        for index in 0..self.servers.len() {
            let silent =
                self.silence_deadline(&self.servers[index]).is_some_and(|at| at <= self.now);
            if !silent {
                continue;
            }
            let server = ServerId(index as u32);
            self.counters.servers_failed += 1;
            let was_waking = self.servers[index].power == ServerPower::Waking;
            self.commit(Command::SetPower { server, power: ServerPower::Failed });
            for group in 0..self.groups.len() {
                if self.groups[group].replicas.contains(&server) {
                    self.wake_replicas(ChunkGroupId(group as u32));
                }
            }
            // A wake that failed no longer holds back the others' rebalance.
            if was_waking {
                self.rebalance_after_wakes();
            }
        }
    }

    /// Servers back on take their share of primaries from the busiest replicas of
    /// their groups (Sierra 3.3.2: rebalance after a wake), once no server is waking:
    /// servers woken together rebalance together, in id order, so the outcome does not
    /// hang on which wake happened to end first (the two shells agree on it).
    pub(super) fn rebalance_after_wakes(&mut self) {
        if self.servers.iter().any(|s| s.power == ServerPower::Waking) {
            return;
        }
        for server in 0..self.servers.len() {
            let server = ServerId(server as u32);
            if self.servers[server.index()].power.serves() {
                self.rebalance_onto(server);
            }
        }
    }

    /// `server` takes groups from replicas leading more than a share, counting the
    /// migrations under way as done.
    fn rebalance_onto(&mut self, server: ServerId) {
        let serving = self.servers.iter().filter(|s| s.power.serves()).count().max(1);
        let share = self.groups.len().div_ceil(serving);
        let mut leads = vec![0usize; self.servers.len()];
        for entry in &self.groups {
            if let Some(leader) = entry.migrating_to.or(entry.primary) {
                leads[leader.index()] += 1;
            }
        }
        for index in 0..self.groups.len() {
            if leads[server.index()] >= share {
                break;
            }
            let entry = &self.groups[index];
            let Some(primary) = entry.primary else { continue };
            let movable = entry.granted
                && entry.migrating_to.is_none()
                && entry.replicas.contains(&server)
                && primary != server
                && leads[primary.index()] > share;
            if movable {
                let (group, epoch) = (ChunkGroupId(index as u32), entry.epoch);
                self.groups[index].migrating_to = Some(server);
                self.counters.migrations += 1;
                leads[server.index()] += 1;
                leads[primary.index()] -= 1;
                self.send(
                    Peer::Server(primary),
                    Message::MigratePrimary { group, epoch, target: server },
                );
            }
        }
    }
}
