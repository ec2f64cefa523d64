//! Sierra's load metric (3.5): random-access IOPS and streaming MiB/s, reads and writes
//! apart, measured every second at each primary; and the servers a load needs.

use somnus_types::VirtualInstant;

/// One second's I/O rate (or an interval's peak of them), as a primary measures it.
/// Writes are counted once here; [`Capability::demand`] multiplies them by r.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Load {
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
    /// The cluster's compute, in max-perf servers (001; reported by the shell that
    /// knows it, not by primaries): the servers on are never fewer.
    #[serde(default)]
    pub compute_servers: f64,
}

impl Load {
    pub const ZERO: Load = Load {
        read_iops: 0.0,
        write_iops: 0.0,
        read_mib_s: 0.0,
        write_mib_s: 0.0,
        compute_servers: 0.0,
    };

    /// Two primaries' loads of the same second, summed.
    pub fn plus(self, other: Load) -> Load {
        Load {
            read_iops: self.read_iops + other.read_iops,
            write_iops: self.write_iops + other.write_iops,
            read_mib_s: self.read_mib_s + other.read_mib_s,
            write_mib_s: self.write_mib_s + other.write_mib_s,
            compute_servers: self.compute_servers + other.compute_servers,
        }
    }

    /// The peak of each metric apart (Sierra takes each metric's peak over the hour).
    pub fn peak(self, other: Load) -> Load {
        Load {
            read_iops: self.read_iops.max(other.read_iops),
            write_iops: self.write_iops.max(other.write_iops),
            read_mib_s: self.read_mib_s.max(other.read_mib_s),
            write_mib_s: self.write_mib_s.max(other.write_mib_s),
            compute_servers: self.compute_servers.max(other.compute_servers),
        }
    }

    /// Whether every metric is a finite number >= 0 (reports from peers are checked).
    pub fn is_valid(&self) -> bool {
        [self.read_iops, self.write_iops, self.read_mib_s, self.write_mib_s, self.compute_servers]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
    }
}

/// What one storage server sustains, measured (Sierra 4.4, Table 4) and given in the
/// config: the scheduler's unit of load.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capability {
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_mib_s: f64,
    pub write_mib_s: f64,
}

impl Capability {
    /// Sierra Table 4, the mean of five runs on one chunk server: 137 read IOPS, 179
    /// write IOPS, 82 MiB/s streaming either way.
    pub const SIERRA_TABLE_4: Capability =
        Capability { read_iops: 137.0, write_iops: 179.0, read_mib_s: 82.0, write_mib_s: 82.0 };

    /// An error naming the first metric that is not a finite number > 0.
    pub fn validate(&self) -> Result<(), String> {
        let metrics = [
            ("read_iops", self.read_iops),
            ("write_iops", self.write_iops),
            ("read_mib_s", self.read_mib_s),
            ("write_mib_s", self.write_mib_s),
        ];
        match metrics.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            Some((name, v)) => Err(format!("{name} {v} must be a finite number > 0")),
            None => Ok(()),
        }
    }

    /// Every metric times `factor`: a cluster provisioned for another peak.
    pub fn scaled(self, factor: f64) -> Capability {
        Capability {
            read_iops: self.read_iops * factor,
            write_iops: self.write_iops * factor,
            read_mib_s: self.read_mib_s * factor,
            write_mib_s: self.write_mib_s * factor,
        }
    }

    /// The servers `load` keeps busy, before rounding: max(N_nonseq, N_seq) of Sierra
    /// 3.5, writes counted `replicas` times, and at least its compute's servers.
    pub fn demand(&self, load: &Load, replicas: u32) -> f64 {
        let r = f64::from(replicas);
        let nonseq = load.read_iops / self.read_iops + r * load.write_iops / self.write_iops;
        let seq = load.read_mib_s / self.read_mib_s + r * load.write_mib_s / self.write_mib_s;
        nonseq.max(seq).max(load.compute_servers)
    }
}

/// N_load: the servers a demand needs, rounded up. A demand a rounding error above a
/// whole number needs that number, not one more.
pub fn servers_needed(demand: f64) -> u32 {
    if !(demand.is_finite() && demand > 0.0) {
        return 0;
    }
    let needed = (demand - 1e-9).ceil();
    if needed >= f64::from(u32::MAX) { u32::MAX } else { needed.max(0.0) as u32 }
}

/// One second of a primary's requests, as counted: what its heartbeats carry to the
/// MDS (counts, not rates, so a peer cannot send a rate that is not a number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadSample {
    /// The second, since the cluster clock's zero.
    pub second: u64,
    pub reads: u32,
    pub writes: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl LoadSample {
    /// The second's requests as a rate.
    pub fn rate(&self) -> Load {
        const MIB: f64 = (1 << 20) as f64;
        Load {
            read_iops: f64::from(self.reads),
            write_iops: f64::from(self.writes),
            read_mib_s: self.read_bytes as f64 / MIB,
            write_mib_s: self.write_bytes as f64 / MIB,
            compute_servers: 0.0,
        }
    }
}

/// A primary's load meter: counts requests and bytes per whole second of its clock
/// and hands each finished second over.
#[derive(Clone, Debug, Default)]
pub struct LoadMeter {
    current: LoadSample,
    /// Finished seconds not yet taken, oldest first.
    finished: Vec<LoadSample>,
}

/// Seconds a meter keeps before the oldest are dropped (their report was lost).
const FINISHED_MAX: usize = 120;

impl LoadMeter {
    /// The second of `now` since the clock's zero.
    pub fn second_of(now: VirtualInstant) -> u64 {
        now.as_nanos() / 1_000_000_000
    }

    /// A request the primary served at `now`.
    pub fn record(&mut self, now: VirtualInstant, write: bool, bytes: u64) {
        self.roll(now);
        let c = &mut self.current;
        if write {
            c.writes = c.writes.saturating_add(1);
            c.write_bytes = c.write_bytes.saturating_add(bytes);
        } else {
            c.reads = c.reads.saturating_add(1);
            c.read_bytes = c.read_bytes.saturating_add(bytes);
        }
    }

    /// Closes the seconds before `now`'s.
    pub fn roll(&mut self, now: VirtualInstant) {
        let second = Self::second_of(now);
        if second <= self.current.second {
            return;
        }
        if self.current.reads + self.current.writes > 0 {
            if self.finished.len() == FINISHED_MAX {
                self.finished.remove(0);
            }
            self.finished.push(self.current);
        }
        self.current = LoadSample { second, ..LoadSample::default() };
    }

    /// The finished seconds with any request, oldest first; taken once.
    pub fn take(&mut self, now: VirtualInstant) -> Vec<LoadSample> {
        self.roll(now);
        std::mem::take(&mut self.finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use somnus_types::VirtualDuration;

    #[test]
    fn demand_is_sierras_formula_with_writes_times_r() {
        // Goal: N_nonseq = R/C_r + r W/C_w and N_seq alike; N_load the larger, rounded up.
        let cap =
            Capability { read_iops: 100.0, write_iops: 200.0, read_mib_s: 50.0, write_mib_s: 25.0 };
        let load = Load {
            read_iops: 300.0,
            write_iops: 100.0,
            read_mib_s: 10.0,
            write_mib_s: 10.0,
            ..Load::ZERO
        };
        // nonseq = 3 + 3 * 0.5 = 4.5; seq = 0.2 + 3 * 0.4 = 1.4.
        assert_eq!(cap.demand(&load, 3), 4.5);
        assert_eq!(servers_needed(cap.demand(&load, 3)), 5);
        let streaming = Load { read_mib_s: 100.0, write_mib_s: 50.0, ..Load::ZERO };
        assert_eq!(cap.demand(&streaming, 3), 2.0 + 6.0);
        assert_eq!(servers_needed(8.0 + 1e-12), 8);
        let compute = Load { compute_servers: 6.5, ..load };
        assert_eq!(cap.demand(&compute, 3), 6.5, "the compute's servers are on too");
        assert_eq!(servers_needed(0.0), 0);
        assert_eq!(servers_needed(f64::NAN), 0);
        assert!(Capability { read_iops: 0.0, ..cap }.validate().unwrap_err().contains("read_iops"));
    }

    #[test]
    fn a_meter_reports_each_busy_second_as_a_rate() {
        // Goal: requests are binned by whole second; idle seconds send nothing.
        let at = |ms: u64| VirtualInstant::ZERO.saturating_add(VirtualDuration::from_millis(ms));
        let mut meter = LoadMeter::default();
        meter.record(at(100), false, 4096);
        meter.record(at(900), true, 1 << 20);
        meter.record(at(900), true, 1 << 20);
        meter.record(at(3_500), false, 1 << 20);
        let seconds = meter.take(at(4_000));
        assert_eq!(seconds.len(), 2);
        assert_eq!(seconds[0].second, 0);
        assert_eq!(seconds[0].rate().write_iops, 2.0);
        assert_eq!(seconds[0].rate().write_mib_s, 2.0);
        assert_eq!(seconds[0].rate().read_iops, 1.0);
        assert_eq!(seconds[1].second, 3);
        assert_eq!(seconds[1].rate(), Load { read_iops: 1.0, read_mib_s: 1.0, ..Load::ZERO });
        assert!(meter.take(at(5_000)).is_empty());
    }
}
