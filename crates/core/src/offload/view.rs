//! A manager's view of its loggers: what each last said of itself (a report it pushed,
//! or the status its latest reply carried), and what the manager concluded on its own
//! (a logger that missed a deadline is unreachable until it answers again). The view
//! may be stale; decisions that must not rest on a stale view ask the logger itself
//! (a reservation before the home volume sleeps, O3).

use somnus_types::{LoggerId, Power, VirtualInstant};

use super::{LoggerAvailability, LoggerHost, LoggerStatus, ViewEntry};

#[derive(Clone, Copy, Debug)]
struct ViewState {
    entry: ViewEntry,
    /// The latest status heard; `None` until the logger reports (unusable until then).
    status: Option<LoggerStatus>,
    /// A request to it went unanswered past its deadline: treated as failed until it
    /// answers again.
    unreachable: bool,
    /// When to probe it next while unreachable, and whether a probe is out.
    probe_at: Option<VirtualInstant>,
    probe_in_flight: bool,
}

impl ViewState {
    /// How the manager sees this logger: on the home disks, awake while they spin; any
    /// other as it last said, failed while unreachable, asleep until heard.
    fn availability(&self, home_spins: bool) -> LoggerAvailability {
        if self.unreachable {
            return LoggerAvailability::Failed;
        }
        match (self.entry.shares_home_disks, self.status) {
            (true, _) if !home_spins => LoggerAvailability::Asleep,
            (true, _) => LoggerAvailability::Awake,
            (false, Some(status)) => status.availability,
            (false, None) => LoggerAvailability::Asleep,
        }
    }
}

/// The loggers of one manager's view, in the view's fixed order.
#[derive(Clone, Debug)]
pub(crate) struct LoggerView {
    loggers: Vec<ViewState>,
    /// (logger, index in `loggers`), by logger: the node notes every logger's load at
    /// every disk I/O, so a lookup must not scan the view.
    by_logger: Vec<(LoggerId, usize)>,
    /// How many loggers are unreachable: none, nearly always, and then nothing is due.
    unreachable_count: usize,
    /// The indices of the loggers on the home disks (one at most, in practice): asked
    /// after at every event, so not found by a scan.
    own: Vec<usize>,
}

impl LoggerView {
    pub(crate) fn new(entries: &[ViewEntry]) -> LoggerView {
        let loggers = entries
            .iter()
            .map(|&entry| ViewState {
                entry,
                status: None,
                unreachable: false,
                probe_at: None,
                probe_in_flight: false,
            })
            .collect();
        let mut by_logger: Vec<(LoggerId, usize)> =
            entries.iter().enumerate().map(|(index, entry)| (entry.logger, index)).collect();
        by_logger.sort_unstable();
        let own = (0..entries.len()).filter(|&index| entries[index].shares_home_disks).collect();
        LoggerView { loggers, by_logger, unreachable_count: 0, own }
    }

    fn index(&self, logger: LoggerId) -> Option<usize> {
        let found = self.by_logger.binary_search_by_key(&logger, |&(logger, _)| logger);
        found.ok().map(|at| self.by_logger[at].1)
    }

    fn state(&self, logger: LoggerId) -> Option<&ViewState> {
        self.index(logger).map(|index| &self.loggers[index])
    }

    fn state_mut(&mut self, logger: LoggerId) -> Option<&mut ViewState> {
        self.index(logger).map(|index| &mut self.loggers[index])
    }

    #[cfg_attr(not(feature = "expensive-checks"), allow(dead_code))]
    pub(crate) fn contains(&self, logger: LoggerId) -> bool {
        self.state(logger).is_some()
    }

    /// Records what a logger said of itself; it answered, so it is reachable. Returns
    /// whether its availability as the manager sees it changed. A logger outside the
    /// view is ignored (a report meant for another manager).
    pub(crate) fn report(&mut self, logger: LoggerId, status: LoggerStatus) -> bool {
        let Some(index) = self.index(logger) else { return false };
        let state = &mut self.loggers[index];
        if state.status.is_some_and(|known| status.sequence < known.sequence) {
            // Older than what the view holds: a late or repeated answer.
            return false;
        }
        let before = state.status.map(|s| s.availability);
        let was_unreachable = state.unreachable;
        state.status = Some(status);
        state.unreachable = false;
        state.probe_at = None;
        self.unreachable_count -= usize::from(was_unreachable);
        was_unreachable || before != Some(status.availability)
    }

    /// Records a logger's load and room; its availability stays as last reported.
    /// (The shell's note is current, so it is not held to the sequence; it does not move
    /// the sequence either, so a report already on its way is still heard.) Returns
    /// whether the hosting of the logger on the home disks changed.
    pub(crate) fn note_load(&mut self, logger: LoggerId, status: LoggerStatus) -> bool {
        if let Some(state) = self.state_mut(logger)
            && let Some(known) = &mut state.status
        {
            known.queue_length = status.queue_length;
            known.free_bytes = status.free_bytes;
            let hosting_before = std::mem::replace(&mut known.hosting_until, status.hosting_until);
            return state.entry.shares_home_disks && hosting_before != status.hosting_until;
        }
        false
    }

    /// A request to `logger` missed its deadline: it counts as failed, and is probed at
    /// `probe_at` unless it answers before.
    pub(crate) fn mark_unreachable(&mut self, logger: LoggerId, probe_at: VirtualInstant) {
        if let Some(index) = self.index(logger) {
            let state = &mut self.loggers[index];
            let was_unreachable = std::mem::replace(&mut state.unreachable, true);
            if !state.probe_in_flight {
                state.probe_at = Some(state.probe_at.map_or(probe_at, |at| at.min(probe_at)));
            }
            self.unreachable_count += usize::from(!was_unreachable);
        }
    }

    /// The loggers due for a probe at `now`; each is marked as probed.
    pub(crate) fn take_due_probes(&mut self, now: VirtualInstant, out: &mut Vec<LoggerId>) {
        for state in &mut self.loggers {
            if state.unreachable
                && !state.probe_in_flight
                && state.probe_at.is_some_and(|t| t <= now)
            {
                state.probe_in_flight = true;
                state.probe_at = None;
                out.push(state.entry.logger);
            }
        }
    }

    /// A probe came back (answered or not); an unanswered one is tried again at
    /// `retry_at`.
    pub(crate) fn probe_done(&mut self, logger: LoggerId, retry_at: VirtualInstant) {
        if let Some(state) = self.state_mut(logger) {
            state.probe_in_flight = false;
            if state.unreachable {
                state.probe_at = Some(retry_at);
            }
        }
    }

    /// The earliest probe due.
    pub(crate) fn next_probe_at(&self) -> Option<VirtualInstant> {
        #[cfg(feature = "expensive-checks")]
        assert_eq!(
            self.unreachable_count,
            self.loggers.iter().filter(|state| state.unreachable).count(),
            "the count of unreachable loggers drifted"
        );
        if self.unreachable_count == 0 {
            return None;
        }
        self.loggers.iter().filter(|state| state.unreachable).filter_map(|s| s.probe_at).min()
    }

    /// How the manager sees `logger` (failed if not in the view).
    pub(crate) fn availability(&self, logger: LoggerId, home_spins: bool) -> LoggerAvailability {
        match self.state(logger) {
            Some(state) => state.availability(home_spins),
            None => LoggerAvailability::Failed,
        }
    }

    /// Until when the logger on the home disks hosts other managers (they sleep on it).
    pub(crate) fn own_hosting_until(&self) -> VirtualInstant {
        self.own
            .iter()
            .filter_map(|&index| self.loggers[index].status)
            .map(|status| status.hosting_until)
            .max()
            .unwrap_or(VirtualInstant::ZERO)
    }

    pub(crate) fn is_remote(&self, logger: LoggerId) -> bool {
        self.state(logger).is_some_and(|state| state.entry.remote)
    }

    /// Ranks the loggers (004 3.1: by power state, queue length and free space): only
    /// awake loggers with room qualify; then the shortest queue, then a local one, then
    /// the most free space, then view order.
    pub(crate) fn choose(&self, needed_bytes: u64, home_spins: bool) -> Option<LoggerId> {
        type Rank = (u32, bool, std::cmp::Reverse<u64>, usize);
        let mut best: Option<(Rank, LoggerId)> = None;
        for (index, state) in self.loggers.iter().enumerate() {
            let logger = state.entry.logger;
            if state.availability(home_spins) != LoggerAvailability::Awake {
                continue;
            }
            let Some(status) = state.status else { continue };
            if status.free_bytes < needed_bytes {
                continue;
            }
            let rank = (
                status.queue_length,
                state.entry.remote,
                std::cmp::Reverse(status.free_bytes),
                index,
            );
            if best.is_none_or(|(best_rank, _)| rank < best_rank) {
                best = Some((rank, logger));
            }
        }
        best.map(|(_, logger)| logger)
    }

    /// A logger on other disks that, as far as the view says, could take the next
    /// writes while the home volume sleeps (O3): awake, with `room_min_bytes` free, and
    /// under the `Cheapest` rule drawing no more than the home volume. The first such
    /// in view order; the manager then asks it for a reservation.
    pub(crate) fn sleep_host(
        &self,
        rule: LoggerHost,
        home_idle_power: Power,
        room_min_bytes: u64,
    ) -> Option<LoggerId> {
        let cheapest = rule == LoggerHost::Cheapest;
        self.loggers.iter().find_map(|state| {
            let entry = state.entry;
            let status = state.status?;
            let usable = !entry.shares_home_disks
                && !state.unreachable
                && (!cheapest || entry.host_idle_power <= home_idle_power)
                && status.availability == LoggerAvailability::Awake
                && status.free_bytes >= room_min_bytes;
            usable.then_some(entry.logger)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(logger: u32, remote: bool, shares: bool) -> ViewEntry {
        ViewEntry {
            logger: LoggerId(logger),
            remote,
            shares_home_disks: shares,
            host_idle_power: Power::ZERO,
        }
    }

    fn status(availability: LoggerAvailability, queue_length: u32, free: u64) -> LoggerStatus {
        LoggerStatus {
            availability,
            queue_length,
            free_bytes: free,
            hosting_until: VirtualInstant::ZERO,
            sequence: 1,
        }
    }

    #[test]
    fn the_view_ranks_what_it_was_told_and_distrusts_the_silent() {
        // Goal: a logger is usable only once it reported; the ranking follows the
        // reports (queue, then local, then room); a missed deadline makes it failed
        // until it answers; the home disks' own logger follows the home volume.
        let mut view = LoggerView::new(&[
            entry(0, false, true),
            entry(1, false, false),
            entry(2, true, false),
        ]);
        assert_eq!(view.choose(100, false), None, "nobody reported yet");
        assert_eq!(view.choose(100, true), None, "the own logger has reported no room");
        use LoggerAvailability::{Asleep, Awake, Failed};
        assert!(view.report(LoggerId(1), status(Awake, 3, 1000)));
        assert!(view.report(LoggerId(2), status(Awake, 1, 1000)));
        assert!(!view.report(LoggerId(2), status(Awake, 0, 1000)), "only load changed");
        assert_eq!(view.choose(100, false), Some(LoggerId(2)), "shortest queue first");
        view.report(LoggerId(2), status(Awake, 3, 1000));
        assert_eq!(view.choose(100, false), Some(LoggerId(1)), "then a local one");
        assert_eq!(view.choose(5000, false), None, "no room");
        view.mark_unreachable(LoggerId(1), VirtualInstant(10));
        assert_eq!(view.availability(LoggerId(1), true), Failed);
        assert_eq!(view.choose(100, false), Some(LoggerId(2)));
        let mut due = Vec::new();
        view.take_due_probes(VirtualInstant(9), &mut due);
        assert!(due.is_empty());
        view.take_due_probes(VirtualInstant(10), &mut due);
        assert_eq!(due, vec![LoggerId(1)]);
        assert!(view.report(LoggerId(1), status(Asleep, 0, 1000)), "back, and asleep");
        let stale = LoggerStatus { sequence: 0, ..status(Awake, 0, 1000) };
        assert!(!view.report(LoggerId(1), stale), "an older status is ignored");
        assert_eq!(view.availability(LoggerId(1), true), Asleep);
        assert_eq!(view.next_probe_at(), None);
        view.report(LoggerId(0), status(Awake, 0, 1000));
        assert_eq!(view.availability(LoggerId(0), false), Asleep, "home disks sleep");
        assert_eq!(view.sleep_host(LoggerHost::Any, Power::ZERO, 500), Some(LoggerId(2)));
    }
}
