//! The io-server controller inside the MDS (001 3.1; docs/gear-scheduler.md): the
//! shell reports the cluster's compute once a second; the gear scheduler keeps at
//! least that many servers on, and of the servers on the controller's count run in
//! max-perf, the rest in the io-server state. Roles are soft state, derived again by a
//! restarted MDS; a role changes only what a server draws, never what it serves.

use somnus_types::ServerId;

use super::{Mds, MdsAction};
use crate::gear::{IoServerConfig, IoServerController, Load};
use crate::power::ComputeRole;

impl Mds {
    /// Lets the io-server controller of `config` give the servers on their roles.
    pub fn enable_io_server(&mut self, config: IoServerConfig) -> Result<(), String> {
        config.validate()?;
        self.io_server = Some(Box::new(IoServerController::new(config)));
        self.roles = vec![None; self.servers.len()];
        self.assign_roles();
        Ok(())
    }

    /// The role of `server` now (none without the controller, or while it is off).
    pub fn compute_role(&self, server: ServerId) -> Option<ComputeRole> {
        self.roles.get(server.index()).copied().flatten()
    }

    /// The compute the cluster needed in `second` (whole seconds of the MDS's clock),
    /// in max-perf servers: to the controller, and to the scheduler as a floor of the
    /// servers on.
    pub(super) fn report_compute(&mut self, second: u64, servers: f64) {
        let Some(controller) = self.io_server.as_mut() else { return };
        controller.report(second, servers);
        if let Some(scheduler) = self.scheduler.as_mut()
            && servers.is_finite()
            && servers >= 0.0
        {
            scheduler.report(self.now, second, Load { compute_servers: servers, ..Load::ZERO });
            self.take_decisions();
        }
    }

    /// Gives every server powered on a role: the controller's count in max-perf, those
    /// already in it first (a change costs a transition), then in the order the gear
    /// keeps servers on; the rest io-servers. A server off has none.
    pub(super) fn assign_roles(&mut self) {
        let Some(controller) = self.io_server.as_ref() else { return };
        let place = |s: usize| {
            let group = self.servers[s].gear_group.0;
            let place = self.order.iter().position(|g| *g == group).unwrap_or(usize::MAX);
            (place, self.rank[s], s)
        };
        let mut on: Vec<usize> =
            (0..self.servers.len()).filter(|&s| self.servers[s].power.serves_replicas()).collect();
        on.sort_by_key(|&s| place(s));
        let wanted = controller.max_perf(on.len() as u32) as usize;
        let staying = on.iter().filter(|&&s| self.roles[s] == Some(ComputeRole::MaxPerf));
        let mut max_perf: Vec<usize> = staying.copied().take(wanted).collect();
        for &s in &on {
            if max_perf.len() >= wanted {
                break;
            }
            if !max_perf.contains(&s) {
                max_perf.push(s);
            }
        }
        let mut roles = vec![None; self.servers.len()];
        for &s in &on {
            let role =
                if max_perf.contains(&s) { ComputeRole::MaxPerf } else { ComputeRole::IoServer };
            roles[s] = Some(role);
            if self.roles[s] != Some(role) {
                let server = ServerId(s as u32);
                self.actions.push_back(MdsAction::ComputeRole { server, role });
            }
        }
        self.roles = roles;
    }
}
