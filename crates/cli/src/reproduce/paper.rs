//! The paper's figures (004: Narayanan et al., FAST'08) the summary sets beside
//! somnus's, and the lookups both parts of the summary use.

use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{ConfigReport, OffloadResult};
use somnus_trace::stats::StatsReport;

/// 004 Fig. 6 / section 4.2: energy as % of the baseline on the least and most idle
/// day, and peak power (Fig. 7), for vanilla, machine and rack.
pub(super) const PAPER_ENERGY_LEAST_IDLE: [&str; 3] = ["72", "64", "55"];
pub(super) const PAPER_ENERGY_MOST_IDLE: [&str; 3] = ["64", "51", "40"];
pub(super) const PAPER_PEAK_POWER: [&str; 3] = ["87-89", "83-84", "80"];
/// 004 section 4: writes off-loaded and reads from a remote logger (rack level).
pub(super) const PAPER_WRITES_OFFLOADED: &str = "27";
pub(super) const PAPER_REMOTE_READS: &str = "3.8";
pub(super) const SAVING: [ConfigKind; 3] =
    [ConfigKind::Vanilla, ConfigKind::Machine, ConfigKind::Rack];

pub(super) fn config(result: &OffloadResult, kind: ConfigKind) -> &ConfigReport {
    match result.configs.iter().find(|c| c.config == kind) {
        Some(config) => config,
        None => unreachable!("every configuration ran"),
    }
}

pub(super) fn concurrency(stats: &StatsReport) -> String {
    let c = &stats.concurrency;
    format!("{:.2} / {} / {}", c.mean, c.p99, c.max)
}

/// The index of a saving configuration in the paper's arrays.
pub(super) fn saving_index(kind: ConfigKind) -> usize {
    SAVING.iter().position(|k| *k == kind).unwrap_or(0)
}

pub(super) fn paper_energy(least_idle: bool, kind: ConfigKind) -> &'static str {
    let paper = if least_idle { PAPER_ENERGY_LEAST_IDLE } else { PAPER_ENERGY_MOST_IDLE };
    paper[saving_index(kind)]
}

pub(super) fn paper_peak(kind: ConfigKind) -> &'static str {
    PAPER_PEAK_POWER[saving_index(kind)]
}
