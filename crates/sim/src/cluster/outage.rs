//! The faults that take a disk or the whole cluster out (issue 48, point 4): a disk
//! I/O that fails with an error, and a power cut of every server and the MDS at once.

use rand::Rng;
use somnus_core::cluster::server::{DiskError, ServerEvent};
use somnus_types::{IoId, VirtualDuration};

use super::{ClusterSim, Event, FaultKind};

impl ClusterSim<'_> {
    /// The `disk-error` fault: a server that may go down now (the core halts a server
    /// whose disk failed a change) gets its next I/O failed.
    pub(super) fn arm_disk_error(&mut self) {
        if self.healed {
            return;
        }
        if let Some(s) = self.pick_victim() {
            self.servers[s as usize].fail_next_io = true;
        }
        self.again(self.spec.rates.disk_error_every_s, Event::DiskError);
    }

    /// The failure of `io` on server `s`, if its disk is to fail its next I/O and the
    /// fault still fits (no more than r - 1 fault domains down with it). A read of the
    /// replicas' blocks is passed over: the core takes a failed one as corrupt blocks,
    /// which the corruption fault already covers within its own budget.
    pub(super) fn inject_disk_error(&mut self, s: u32, io: IoId) -> Option<ServerEvent> {
        let slot = &self.servers[s as usize];
        if !slot.fail_next_io || slot.server.as_ref().and_then(|v| v.read_found(io)).is_some() {
            return None;
        }
        self.servers[s as usize].fail_next_io = false;
        if !self.may_go_down(s) {
            return None;
        }
        // The logger's operation is not done: the engine's bytes stay as they were.
        self.servers[s as usize].log_ops.remove(&io.0);
        self.report.faults.add(FaultKind::DiskError);
        self.trace(|| format!("disk error s{s} {io:?}"));
        let error = DiskError::Io("an injected I/O error".to_owned());
        Some(ServerEvent::DiskFailed { io, error })
    }

    /// The `power-cut` fault: every server and the MDS stop at once, losing what their
    /// disks had not finished; nothing comes back before the power does, 1-10 s later.
    pub(super) fn power_cut(&mut self) {
        if self.healed {
            return;
        }
        self.report.faults.add(FaultKind::PowerCut);
        self.trace(|| "power cut: every server and the MDS".to_owned());
        self.power_off = true;
        for s in 0..self.spec.servers {
            if self.servers[s as usize].server.is_some() {
                self.crash_server(s);
            }
        }
        if !self.mds_down {
            self.stop_mds();
        }
        let off = VirtualDuration::from_millis(self.rng.random_range(1_000..=10_000));
        let at = self.now() + off;
        self.events.schedule(at, Event::PowerBack);
    }

    /// Power is back: the MDS restarts from its persisted commands, and every server
    /// not lost from its disk (a server down before the cut too).
    pub(super) fn power_back(&mut self) {
        if !self.power_off {
            return;
        }
        self.power_off = false;
        self.trace(|| "power back".to_owned());
        self.restart_mds();
        for s in 0..self.spec.servers {
            let slot = &self.servers[s as usize];
            if !slot.lost && slot.server.is_none() {
                self.restart(s);
            }
        }
    }
}
