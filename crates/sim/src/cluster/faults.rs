//! The faults a cluster simulation injects, and their rates.

use std::fmt;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Messages dropped (1 in 100).
    Loss,
    /// Messages delivered twice (1 in 100).
    Duplication,
    /// Messages held up to 50 ms (1 in 20), so they overtake each other.
    Delay,
    /// A server cut off from every peer, or from the MDS only, for 1-8 s.
    Partition,
    /// A server crashes (what its disk had not finished is lost) and restarts 1-15 s
    /// later, past the MDS's failure timeout sometimes.
    Crash,
    /// A block of a replica garbled behind its checksum.
    Corrupt,
    /// A server's disk ten times slower for 2-10 s.
    SlowDisk,
    /// Every logger holds 8 MiB only: loggers fill, and a write that finds every
    /// logger full waits for collection.
    FullDisk,
    /// Gear shifts (every 7 s on average, to a gear from 1 to r): servers drain their
    /// primaries and sleep, or wake, while the other faults go on.
    Gear,
    /// A server lost for good, once a run: it crashes, the operator declares it lost
    /// 2 s later, and it never comes back; its replicas are rebuilt on the other
    /// servers of its gear group.
    Lost,
    /// The MDS crashes (every 12 s on average; its soft state is lost) and restarts
    /// 1-10 s later from its persisted commands, half the time from a snapshot of
    /// them, with its clock back at 0.
    MdsCrash,
    /// A server's disk fails an I/O with an error (every 6 s on average): a change
    /// that failed took no effect, a read that failed found nothing.
    DiskError,
    /// The whole cluster loses power once a run: every server and the MDS crash at
    /// the same instant, and power returns 1-10 s later.
    PowerCut,
}

impl FaultKind {
    pub const ALL: [FaultKind; 13] = [
        FaultKind::Loss,
        FaultKind::Duplication,
        FaultKind::Delay,
        FaultKind::Partition,
        FaultKind::Crash,
        FaultKind::Corrupt,
        FaultKind::SlowDisk,
        FaultKind::FullDisk,
        FaultKind::Gear,
        FaultKind::Lost,
        FaultKind::MdsCrash,
        FaultKind::DiskError,
        FaultKind::PowerCut,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Loss => "loss",
            FaultKind::Duplication => "duplication",
            FaultKind::Delay => "delay",
            FaultKind::Partition => "partition",
            FaultKind::Crash => "crash",
            FaultKind::Corrupt => "corrupt",
            FaultKind::SlowDisk => "slow-disk",
            FaultKind::FullDisk => "full-disk",
            FaultKind::Gear => "gear",
            FaultKind::Lost => "lost",
            FaultKind::MdsCrash => "mds-crash",
            FaultKind::DiskError => "disk-error",
            FaultKind::PowerCut => "power-cut",
        }
    }
}

/// How often each fault kind strikes where a run injects it: shares of messages, and
/// mean seconds between events. A drawn cluster draws them from its seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultRates {
    pub loss: f64,
    pub duplication: f64,
    /// Messages held up to 50 ms (so reordered); one in 25 of them is stalled
    /// 0.5-8 s more, past the lease margin.
    pub delay: f64,
    pub crash_every_s: f64,
    pub partition_every_s: f64,
    pub corrupt_every_s: f64,
    pub slow_disk_every_s: f64,
    pub gear_every_s: f64,
    pub mds_crash_every_s: f64,
    pub disk_error_every_s: f64,
}

impl Default for FaultRates {
    fn default() -> FaultRates {
        FaultRates {
            loss: 0.01,
            duplication: 0.01,
            delay: 0.05,
            crash_every_s: 4.0,
            partition_every_s: 6.0,
            corrupt_every_s: 2.0,
            slow_disk_every_s: 5.0,
            gear_every_s: 7.0,
            mds_crash_every_s: 12.0,
            disk_error_every_s: 6.0,
        }
    }
}

impl FaultRates {
    /// Rates drawn from `rng`: each message fault 0 to 3 % (delays 0 to 10 %), each
    /// event fault from a third to three times as often as by default.
    pub fn drawn(rng: &mut impl rand::Rng) -> FaultRates {
        let base = FaultRates::default();
        let mut share = |max_percent: u32| f64::from(rng.random_range(0..=max_percent)) / 100.0;
        let (loss, duplication, delay) = (share(3), share(3), share(10));
        let mut every = |mean: f64| mean * f64::from(rng.random_range(1..=9u32)) / 3.0;
        FaultRates {
            loss,
            duplication,
            delay,
            crash_every_s: every(base.crash_every_s),
            partition_every_s: every(base.partition_every_s),
            corrupt_every_s: every(base.corrupt_every_s),
            slow_disk_every_s: every(base.slow_disk_every_s),
            gear_every_s: every(base.gear_every_s),
            mds_crash_every_s: every(base.mds_crash_every_s),
            disk_error_every_s: every(base.disk_error_every_s),
        }
    }

    /// The rates in a few words, for a seed's line.
    pub fn describe(&self) -> String {
        format!(
            "loss {:.0} %, duplication {:.0} %, delay {:.0} %; every {:.1} s a crash, {:.1} s a \
             partition, {:.1} s a corruption, {:.1} s a slow disk, {:.1} s a gear shift, \
             {:.1} s an MDS crash, {:.1} s a disk error",
            self.loss * 100.0,
            self.duplication * 100.0,
            self.delay * 100.0,
            self.crash_every_s,
            self.partition_every_s,
            self.corrupt_every_s,
            self.slow_disk_every_s,
            self.gear_every_s,
            self.mds_crash_every_s,
            self.disk_error_every_s
        )
    }
}

/// Faults a run injected, by kind (`somnus sim cluster` reports them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts(pub [u64; FaultKind::ALL.len()]);

impl FaultCounts {
    pub fn add(&mut self, kind: FaultKind) {
        self.0[kind as usize] += 1;
    }

    pub fn get(&self, kind: FaultKind) -> u64 {
        self.0[kind as usize]
    }

    pub fn merge(&mut self, other: &FaultCounts) {
        for (total, count) in self.0.iter_mut().zip(other.0) {
            *total += count;
        }
    }
}

impl fmt::Display for FaultCounts {
    /// `loss 12, duplication 9, ...`: every kind, in the order of `FaultKind::ALL`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            FaultKind::ALL.iter().map(|k| format!("{} {}", k.name(), self.get(*k))).collect();
        f.write_str(&parts.join(", "))
    }
}

/// The set of fault kinds a run injects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultSet(u32);

impl FaultSet {
    pub fn none() -> FaultSet {
        FaultSet(0)
    }

    pub fn all() -> FaultSet {
        FaultKind::ALL.iter().fold(FaultSet(0), |set, kind| set.with(*kind))
    }

    pub fn with(self, kind: FaultKind) -> FaultSet {
        FaultSet(self.0 | 1 << kind as u32)
    }

    pub fn without(self, kind: FaultKind) -> FaultSet {
        FaultSet(self.0 & !(1 << kind as u32))
    }

    pub fn has(self, kind: FaultKind) -> bool {
        self.0 & 1 << kind as u32 != 0
    }

    /// `all`, `none`, or a comma-separated list of kinds.
    pub fn parse(text: &str) -> Result<FaultSet, String> {
        match text.trim() {
            "all" => return Ok(FaultSet::all()),
            "none" | "" => return Ok(FaultSet::none()),
            _ => {}
        }
        let mut set = FaultSet::none();
        for word in text.split(',').map(str::trim) {
            let kind = FaultKind::ALL.iter().find(|k| k.name() == word).ok_or_else(|| {
                let known: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown fault {word:?}; the kinds are all, none, {}", known.join(", "))
            })?;
            set = set.with(*kind);
        }
        Ok(set)
    }
}

impl fmt::Display for FaultSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == FaultSet::all() {
            return f.write_str("all");
        }
        let names: Vec<&str> =
            FaultKind::ALL.iter().filter(|k| self.has(**k)).map(|k| k.name()).collect();
        if names.is_empty() { f.write_str("none") } else { f.write_str(&names.join(",")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_sets_parse_and_print_back() {
        assert_eq!(FaultSet::parse("all").unwrap(), FaultSet::all());
        let set = FaultSet::parse("crash,loss").unwrap();
        assert!(
            set.has(FaultKind::Crash) && set.has(FaultKind::Loss) && !set.has(FaultKind::Delay)
        );
        assert_eq!(FaultSet::parse(&set.to_string()).unwrap(), set);
        let error = FaultSet::parse("crash,fire").unwrap_err();
        assert!(error.contains("\"fire\"") && error.contains("slow-disk"), "{error}");
    }
}
