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
}

impl FaultKind {
    pub const ALL: [FaultKind; 11] = [
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
        }
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
