//! The MDS's snapshot: the commands that rebuild its durable state, as it is now, on
//! a new MDS of the same layout (`Mds::restore`). The runtime writes it in place of
//! the command log once the log has grown (`CommandLog::compact`), so a restart
//! replays a command per object and per changed group, not every command ever.
//!
//! The snapshot is the difference from `Mds::new` on the layout: the gear (and the
//! operator's override of its scheduler), the
//! servers' power, each group's replicas (a replacement per slot that changed), its
//! rebuilds, primary and epoch, logger view, kept-on flag and kept holders, every name
//! with its data,
//! every allocation not bound yet, the free log, the next object id (a deleted
//! object's id is never given again), and the creates and deletes answered lately.

use somnus_types::ObjectId;

use super::{Command, Mds};
use crate::cluster::ServerPower;
use crate::gear::GearMode;
use crate::layout::Layout;

impl Mds {
    /// The commands that rebuild this MDS's durable state from `Mds::new` on `layout`
    /// (the layout it was made with).
    pub fn snapshot(&self, layout: &Layout) -> Vec<Command> {
        let base = Mds::new(self.config, layout, self.now);
        let mut commands = vec![Command::SetPlan {
            full_groups: self.plan.full_groups,
            partial: self.plan.partial,
            order: self.order.clone(),
        }];
        if self.gear_override != GearMode::Auto {
            commands.push(Command::SetGearMode { mode: self.gear_override });
        }
        for (index, (now, then)) in self.servers.iter().zip(&base.servers).enumerate() {
            if now.power != then.power {
                let server = somnus_types::ServerId(index as u32);
                commands.push(Command::SetPower { server, power: now.power });
                if let (ServerPower::Asleep, Some(sent_at)) = (now.power, now.heartbeat_sent) {
                    commands.push(Command::SleptAt { server, sent_at });
                }
            }
        }
        for (index, (now, then)) in self.groups.iter().zip(&base.groups).enumerate() {
            let group = somnus_types::ChunkGroupId(index as u32);
            // A slot replaced more than once goes straight to its last server: a lost
            // server is never chosen again, so each slot's first server is unique.
            for (lost, with) in then.replicas.iter().zip(&now.replicas) {
                if lost != with {
                    commands.push(Command::ReplaceReplica { group, lost: *lost, with: *with });
                    if !now.rebuilding.contains(with) {
                        commands.push(Command::RebuildDone { group, server: *with });
                    }
                }
            }
            if (now.epoch, now.primary) != (then.epoch, then.primary) {
                commands.push(Command::SetPrimary { group, epoch: now.epoch, server: now.primary });
            }
            if now.logger_view_set != then.logger_view_set
                && self.broken != Some(crate::cluster::server::Broken::LoggerViewInMemory)
            {
                let (epoch, seq) = now.logger_view_set;
                let loggers = now.logger_view.clone();
                commands.push(Command::SetLoggerView { group, epoch, seq, loggers });
            }
            if now.kept_on {
                commands.push(Command::KeepReplicasOn { group });
            }
            if !now.kept_holders.is_empty() {
                commands.push(Command::KeepHoldersOn { group, servers: now.kept_holders.clone() });
            }
        }
        self.snapshot_names(&mut commands);
        let next_seq = self.frees.next_seq();
        commands.push(Command::QueueFrees { frees: self.frees.specs(), next_seq });
        commands.push(Command::ReserveObjectIds { next: ObjectId(self.next_object) });
        let requests = self.answered.requests();
        if !requests.is_empty() {
            commands.push(Command::AnsweredRequests { requests });
        }
        commands
    }

    /// Every name with its data, and every allocation not bound yet: a plain object
    /// (one data object, made with its name) as its create, others as allocations of
    /// their data and a bind.
    fn snapshot_names(&self, commands: &mut Vec<Command>) {
        for (object, entry) in &self.data {
            if let Some((creator, _)) = entry.pending {
                commands.push(Command::AllocateObject {
                    object: *object,
                    size_bytes: entry.size_bytes,
                    chunk_groups: entry.chunk_groups.to_vec(),
                    creator,
                });
            }
        }
        for (name, entry) in &self.names {
            let plain = entry.attrs.is_empty()
                && entry.data.len() == 1
                && entry.data[0].0 == entry.generation;
            if plain {
                let data = &self.data[&entry.data[0]];
                commands.push(Command::CreateObject {
                    name: name.clone(),
                    object: entry.data[0],
                    size_bytes: data.size_bytes,
                    chunk_groups: data.chunk_groups.to_vec(),
                    creator: entry.creator,
                });
                continue;
            }
            for object in &entry.data {
                let data = &self.data[object];
                commands.push(Command::AllocateObject {
                    object: *object,
                    size_bytes: data.size_bytes,
                    chunk_groups: data.chunk_groups.to_vec(),
                    creator: entry.creator,
                });
            }
            commands.push(Command::Bind {
                name: name.clone(),
                data: entry.data.clone(),
                attrs: entry.attrs.clone(),
                taking: Vec::new(),
                generation: entry.generation,
                creator: entry.creator,
            });
        }
    }

    /// The durable state in a comparable form, for tests of snapshots and restores.
    #[cfg(test)]
    pub(super) fn durable_state(&self) -> String {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {} {:?}",
                    g.replicas,
                    g.epoch,
                    g.primary,
                    g.logger_view,
                    g.logger_view_set,
                    g.rebuilding,
                    g.kept_on,
                    g.kept_holders
                )
            })
            .collect();
        let power: Vec<_> = self.servers.iter().map(|s| s.power).collect();
        let objects: Vec<String> = self
            .names
            .iter()
            .map(|(name, e)| {
                let data: Vec<_> = e.data.iter().map(|o| (o, &self.data[o].chunk_groups)).collect();
                format!("{name} {:?} {} {data:?} {:?}", e.creator, e.generation, e.attrs)
            })
            .chain(
                self.data
                    .iter()
                    .filter(|(_, d)| d.pending.is_some())
                    .map(|(o, d)| format!("pending {o:?} {} {:?}", d.size_bytes, d.chunk_groups)),
            )
            .chain(self.frees.specs().iter().map(|f| format!("free {f:?}")))
            .collect();
        format!(
            "plan {:?} {:?} {:?} next {} led {:?} down {:?} lost {:?} answered {:?}\n{power:?}\n{}\n{}",
            self.plan,
            self.order,
            self.gear_override,
            self.next_object,
            self.led,
            self.down,
            self.lost,
            self.answered.requests(),
            groups.join("\n"),
            objects.join("\n")
        )
    }
}
