//! What a `reproduce` run found, for its summary.

use somnus_trace::stats::StatsReport;

use crate::sim::replay::ReplayOutcome;

/// The paper's least and most idle days of its week.
pub(super) const LEAST_IDLE: &str = "2007-02-26";
pub(super) const MOST_IDLE: &str = "2007-02-25";

/// What the run found, for the summary.
#[derive(Default)]
pub(crate) struct Findings {
    pub(crate) msr_stats: Option<StatsReport>,
    pub(crate) msr_week: Option<ReplayOutcome>,
    pub(crate) msr_least_idle: Option<ReplayOutcome>,
    pub(crate) msr_most_idle: Option<ReplayOutcome>,
    /// Per day of the MSR set: the paper's rule and the cheapest-host rule.
    pub(crate) msr_days: Vec<(ReplayOutcome, ReplayOutcome)>,
    pub(crate) others: Vec<(&'static str, ReplayOutcome)>,
    pub(crate) demo: Option<ReplayOutcome>,
    /// Per seed of the preset: its statistics, the week, the least and most idle days.
    pub(crate) fast08: Vec<Fast08Seed>,
}

pub(crate) struct Fast08Seed {
    pub(crate) seed: u64,
    pub(crate) stats: StatsReport,
    pub(crate) week: ReplayOutcome,
    pub(crate) least_idle: ReplayOutcome,
    pub(crate) most_idle: ReplayOutcome,
}
