//! Progress lines on stderr for long runs, at most one every few seconds of wall time.

use std::time::{Duration, Instant};

use somnus_sim::cluster::ReplayProgress;
use somnus_sim::engine::Progress;

const INTERVAL: Duration = Duration::from_secs(2);

pub(crate) struct ProgressLine {
    quiet: bool,
    last: Instant,
}

impl ProgressLine {
    pub(crate) fn new(quiet: bool) -> ProgressLine {
        ProgressLine { quiet, last: now() }
    }

    /// Whether a line is due (not quiet, and enough wall time passed); if so, the
    /// next one waits from now.
    fn due(&mut self) -> bool {
        if self.quiet || self.last.elapsed() < INTERVAL {
            return false;
        }
        self.last = now();
        true
    }

    /// Reports a simulation's progress if enough wall time has passed.
    pub(crate) fn simulation(&mut self, progress: Progress) {
        if !self.due() {
            return;
        }
        let span = progress.span.as_secs_f64().max(f64::MIN_POSITIVE);
        let share = 100.0 * (progress.virtual_now.as_secs_f64() / span).min(1.0);
        noteln!(
            "  {}: {:.0}% of the trace's time, {} requests done",
            progress.kind.name(),
            share,
            somnus_trace::stats::thousands(progress.requests_done)
        );
    }

    /// Reports how far a trace replay through the cluster (`name`) is, if enough
    /// wall time has passed.
    pub(crate) fn replay(&mut self, name: &str, progress: ReplayProgress) {
        if !self.due() {
            return;
        }
        let share = 100.0 * progress.done as f64 / progress.total.max(1) as f64;
        noteln!(
            "  {name}: {share:.0}% of the requests answered ({} of {})",
            somnus_trace::stats::thousands(progress.done),
            somnus_trace::stats::thousands(progress.total)
        );
    }
}

/// The wall clock: the shell may read it, for progress and benchmarks only.
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> Instant {
    Instant::now()
}
