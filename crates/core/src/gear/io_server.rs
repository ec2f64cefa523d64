//! The io-server controller (001 3.1): the servers on are either in max-perf, running
//! the cluster's compute, or in the io-server state, compute off and disks serving.
//! It sizes the max-perf set to the compute load; the gear scheduler sizes the servers
//! on to the larger of the compute and the I/O load ([`super::Load::compute_servers`]),
//! so the rest serve the I/O at the io-server state's watts.
//!
//! A sans-IO state machine fed, once a second, the compute the cluster needs (in
//! max-perf servers). It rises at once, with `headroom` above the measured need, and
//! falls only once the need was lower for `dwell`: one quiet second moves no server
//! (a transition costs seconds at max-perf watts, 001's 5 s).

use std::collections::VecDeque;

use somnus_types::VirtualDuration;

use super::load::servers_needed;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IoServerConfig {
    /// Whether servers whose compute is not needed go to the io-server state; without
    /// it every server on stays in max-perf (the all-on baseline of 001 Table 2).
    pub io_server: bool,
    /// The max-perf set provisions this share above the measured compute.
    pub headroom: f64,
    /// How long the need must stay lower before a server leaves max-perf.
    pub dwell: VirtualDuration,
}

impl IoServerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.headroom.is_finite() && (0.0..=1.0).contains(&self.headroom)) {
            return Err(format!("io-server headroom {} must be within 0..=1", self.headroom));
        }
        if self.dwell < VirtualDuration::from_secs(1) {
            return Err("io-server dwell: at least 1 s".into());
        }
        Ok(())
    }
}

/// How many of the servers on are in max-perf.
#[derive(Clone, Debug)]
pub struct IoServerController {
    config: IoServerConfig,
    /// The last `dwell` seconds' needs (second, max-perf servers), oldest first.
    window: VecDeque<(u64, u32)>,
    /// Compute reports that were not a finite number >= 0, dropped.
    malformed: u64,
}

impl IoServerController {
    pub fn new(config: IoServerConfig) -> IoServerController {
        IoServerController { config, window: VecDeque::new(), malformed: 0 }
    }

    pub fn config(&self) -> IoServerConfig {
        self.config
    }

    /// The compute the cluster needed in `second`, in max-perf servers. Seconds come
    /// in order; a repeated or earlier one is merged into the newest.
    pub fn report(&mut self, second: u64, servers: f64) {
        if !(servers.is_finite() && servers >= 0.0) {
            self.malformed += 1;
            return;
        }
        let need = servers_needed(servers * (1.0 + self.config.headroom));
        match self.window.back_mut() {
            Some((last, worst)) if *last >= second => *worst = (*worst).max(need),
            _ => self.window.push_back((second, need)),
        }
        let newest = self.window.back().map_or(second, |(s, _)| *s);
        let dwell = self.config.dwell.as_nanos().div_ceil(1_000_000_000);
        while self.window.front().is_some_and(|(s, _)| s + dwell <= newest) {
            self.window.pop_front();
        }
    }

    /// Servers in max-perf, of `on` servers on: all of them without the io-server
    /// state, else the largest need of the last `dwell` (never more than are on).
    pub fn max_perf(&self, on: u32) -> u32 {
        if !self.config.io_server {
            return on;
        }
        self.window.iter().map(|(_, need)| *need).max().unwrap_or(0).min(on)
    }

    pub fn malformed_reports(&self) -> u64 {
        self.malformed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(io_server: bool) -> IoServerController {
        IoServerController::new(IoServerConfig {
            io_server,
            headroom: 0.0,
            dwell: VirtualDuration::from_secs(10),
        })
    }

    #[test]
    fn the_max_perf_set_rises_at_once_and_falls_after_the_dwell() {
        // Goal: a need of 2.5 servers puts 3 in max-perf in its own second; a quiet
        // second after it changes nothing until 10 s have passed without the need.
        let mut c = controller(true);
        assert_eq!(c.max_perf(8), 0, "no compute: every server on is an io-server");
        c.report(0, 1.0);
        c.report(1, 2.5);
        assert_eq!(c.max_perf(8), 3);
        assert_eq!(c.max_perf(2), 2, "never more than are on");
        for second in 2..11 {
            c.report(second, 0.5);
            assert_eq!(c.max_perf(8), 3, "second {second}: within the dwell");
        }
        c.report(11, 0.5);
        assert_eq!(c.max_perf(8), 1);
        c.report(12, f64::NAN);
        c.report(12, -1.0);
        assert_eq!((c.max_perf(8), c.malformed_reports()), (1, 2));
    }

    #[test]
    fn without_the_io_server_state_every_server_on_is_max_perf() {
        let mut c = controller(false);
        c.report(0, 1.0);
        assert_eq!(c.max_perf(4), 4);
    }

    #[test]
    fn headroom_and_config_checks() {
        let mut c = IoServerController::new(IoServerConfig {
            io_server: true,
            headroom: 0.2,
            dwell: VirtualDuration::from_secs(5),
        });
        c.report(0, 2.0);
        assert_eq!(c.max_perf(9), 3, "2 servers' compute with 20 % headroom");
        let bad = IoServerConfig { headroom: 2.0, ..c.config() };
        assert!(bad.validate().unwrap_err().contains("headroom"));
        let bad = IoServerConfig { dwell: VirtualDuration::ZERO, ..c.config() };
        assert!(bad.validate().unwrap_err().contains("dwell"));
    }
}
