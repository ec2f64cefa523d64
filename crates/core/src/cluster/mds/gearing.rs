//! The gear scheduler inside the MDS (Sierra 3.5; docs/gear-scheduler.md): the
//! primaries' heartbeats carry their per-second load, the scheduler turns it into
//! plans, and each plan is carried out as any gear shift is (P1-P4).

use somnus_types::VirtualInstant;

use super::{Command, Mds};
use crate::cluster::ServerPower;
use crate::gear::{GearMode, GearScheduler, LoadSample, PowerPlan, SchedulerConfig};

const NANOS_PER_SECOND: i128 = 1_000_000_000;

impl Mds {
    /// Lets a scheduler of `config` decide the gear from now on. Its r, g_min and gear
    /// group sizes are the MDS's own. It keeps the operator's override (a restarted
    /// MDS holds the gear the operator set or held, in the order it had); left to
    /// itself it starts with every server on and no history (a restarted MDS wakes its
    /// servers and learns the load again).
    pub fn enable_scheduler(&mut self, mut config: SchedulerConfig) -> Result<(), String> {
        config.replicas = self.config.replicas;
        config.gear_min = self.config.gear_min;
        let mut sizes = vec![0u32; self.config.replicas as usize];
        for server in &self.servers {
            if server.power != ServerPower::Removed
                && let Some(size) = sizes.get_mut(server.gear_group.index())
            {
                *size += 1;
            }
        }
        config.group_sizes = sizes;
        config.validate()?;
        let mut scheduler = GearScheduler::new(config, self.now);
        let first = self.order.first().copied().unwrap_or(0);
        scheduler.resume(self.now, self.gear_override, self.plan, first);
        let (plan, order) = (scheduler.plan(), scheduler.order());
        self.scheduler = Some(Box::new(scheduler));
        if (plan, &order) != (self.plan, &self.order) {
            self.set_plan(plan, order);
        }
        Ok(())
    }

    /// Servers the plan keeps on (removed ones aside), failures aside.
    pub fn planned_on_count(&self) -> u32 {
        (0..self.servers.len())
            .filter(|&s| self.servers[s].power != ServerPower::Removed)
            .filter(|&s| self.planned_on(somnus_types::ServerId(s as u32)))
            .count() as u32
    }

    /// The operator's override: to the scheduler if there is one; without one the
    /// gear is the operator's, and only `Set` changes it.
    pub(super) fn gear_mode(&mut self, mode: GearMode) {
        if self.scheduler.is_some() && mode != self.gear_override {
            self.commit(Command::SetGearMode { mode });
        }
        match self.scheduler.as_mut() {
            Some(scheduler) => {
                scheduler.set_mode(self.now, mode);
                self.take_decisions();
            }
            None => {
                if let GearMode::Set(gear) = mode {
                    let order = self.order.clone();
                    self.set_plan(PowerPlan { full_groups: gear, partial: 0 }, order);
                }
            }
        }
    }

    /// A heartbeat's load samples, to the scheduler. Their seconds are on the
    /// server's clock, which started when its process did: each is moved by how far
    /// the MDS's clock is ahead of the server's, read from the heartbeat's send time
    /// (the network's delay included, far below a second).
    pub(super) fn report_load(&mut self, sent_at: VirtualInstant, samples: &[LoadSample]) {
        let (Some(scheduler), now) = (self.scheduler.as_mut(), self.now) else { return };
        let ahead = i128::from(now.as_nanos()) - i128::from(sent_at.as_nanos());
        for sample in samples {
            let start = i128::from(sample.second) * NANOS_PER_SECOND + ahead;
            // A second from before the MDS's clock began is long final: dropped.
            let Ok(second) = u64::try_from(start.div_euclid(NANOS_PER_SECOND)) else {
                continue;
            };
            scheduler.report(now, second, sample.rate());
        }
    }

    /// Whatever the scheduler has due by now, carried out.
    pub(super) fn run_scheduler(&mut self) {
        let Some(scheduler) = self.scheduler.as_mut() else { return };
        scheduler.handle_timeout(self.now);
        self.take_decisions();
    }

    /// The scheduler's newest decision becomes the plan (the ones before it are
    /// already overtaken).
    pub(super) fn take_decisions(&mut self) {
        let mut last = None;
        while let Some(decision) = self.scheduler.as_mut().and_then(|s| s.poll_decision()) {
            last = Some(decision);
        }
        if let Some(decision) = last
            && (decision.plan, &decision.order) != (self.plan, &self.order)
        {
            self.set_plan(decision.plan, decision.order);
        }
    }
}
