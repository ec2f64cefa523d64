//! From a trace to the engine's requests: the window replayed (the whole trace or one
//! calendar day) and the mapping of trace time onto virtual time.

use somnus_trace::{DayError, DaySpec, Request, TraceSummary, TraceTimestamp, day_window};
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

use crate::engine::{RunWindow, SimRequest};
use crate::topology::VolumeLoad;

/// Each volume's peak load over fixed windows of `window` (60 s in 004 Fig. 1), for
/// sizing arrays: one cheap pass that counts, per volume, reads and writes in the
/// current window and keeps the largest counts.
pub fn peak_loads<E>(
    requests: impl Iterator<Item = Result<Request, E>>,
    volume_count: usize,
    window: VirtualDuration,
) -> Result<Vec<VolumeLoad>, E> {
    assert!(window.as_nanos() > 0, "the load window must be positive");
    #[derive(Clone, Copy, Default)]
    struct Peak {
        /// The end of the current window, in trace nanoseconds: crossing it starts a new
        /// window (no division per request).
        window_end: u64,
        reads: u64,
        writes: u64,
        reads_max: u64,
        writes_max: u64,
        requests: u64,
        bytes: u64,
    }
    let mut peaks = vec![Peak::default(); volume_count];
    for request in requests {
        let request = request?;
        let Some(peak) = peaks.get_mut(request.volume.index()) else { continue };
        let t = request.timestamp.0;
        if t >= peak.window_end {
            let window_end = (t / window.as_nanos() + 1).saturating_mul(window.as_nanos());
            *peak = Peak { window_end, reads: 0, writes: 0, ..*peak };
        }
        match request.kind {
            somnus_types::IoKind::Read => peak.reads += 1,
            somnus_types::IoKind::Write => peak.writes += 1,
        }
        peak.reads_max = peak.reads_max.max(peak.reads);
        peak.writes_max = peak.writes_max.max(peak.writes);
        peak.requests += 1;
        peak.bytes += u64::from(request.size_bytes);
    }
    let seconds = window.as_secs_f64();
    Ok(peaks
        .iter()
        .map(|peak| VolumeLoad {
            peak_reads_per_s: peak.reads_max as f64 / seconds,
            peak_writes_per_s: peak.writes_max as f64 / seconds,
            mean_request_bytes: if peak.requests == 0 {
                0.0
            } else {
                peak.bytes as f64 / peak.requests as f64
            },
        })
        .collect())
}

/// The part of a trace measured: requests with `start <= timestamp < end`, after a
/// warm-up replayed from `start - warmup` but not measured. Virtual time 0 is the start
/// of the warm-up; energy is measured over the whole window, idle time included.
///
/// A window never reaches outside the trace set's span: the trace says nothing of the
/// volumes before its first request or after its last, so a day the trace covers only in
/// part (the MSR week starts on a Thursday at 17:00) is measured over that part, and a
/// warm-up stops at the first request. The replay starts as 004 4.1's did, every disk
/// spinning when the trace begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: TraceTimestamp,
    pub end: TraceTimestamp,
    pub warmup: VirtualDuration,
    /// The set's first timestamp: no replay starts before it.
    pub set_start: TraceTimestamp,
}

impl Window {
    /// From the first request to just after the last one; `None` for an empty trace.
    pub fn whole(summary: &TraceSummary) -> Option<Window> {
        let (first, last) = summary.span()?;
        Some(Window {
            start: first,
            end: TraceTimestamp(last.0.saturating_add(1)),
            warmup: VirtualDuration::ZERO,
            set_start: first,
        })
    }

    /// One calendar day (see [`day_window`]), cut to the part the set covers.
    pub fn day(summary: &TraceSummary, day: DaySpec) -> Result<Window, DayError> {
        let (day_start, day_end) = day_window(summary, day)?;
        let whole = Window::whole(summary).ok_or(DayError::EmptySet)?;
        // day_window refuses a day that misses the set, so the cut is never empty.
        Ok(Window { start: day_start.max(whole.start), end: day_end.min(whole.end), ..whole })
    }

    /// The same window after a warm-up of `warmup`, cut at the set's first request.
    pub fn with_warmup(self, warmup: VirtualDuration) -> Window {
        let room = self.start.0 - self.set_start.0;
        Window { warmup: VirtualDuration::from_nanos(warmup.as_nanos().min(room)), ..self }
    }

    /// Where the replay starts: the beginning of the warm-up.
    pub fn replay_start(&self) -> TraceTimestamp {
        TraceTimestamp(self.start.0 - self.warmup.as_nanos())
    }

    /// The measured span.
    pub fn span(&self) -> VirtualDuration {
        VirtualDuration::from_nanos(self.end.0 - self.start.0)
    }

    /// The engine's view of the window: warm-up, then the measured span.
    pub fn run_window(&self) -> RunWindow {
        RunWindow { warmup: self.warmup, span: self.span() }
    }

    /// Whether a request at `timestamp` is replayed (warm-up included).
    pub fn contains(&self, timestamp: TraceTimestamp) -> bool {
        self.replay_start() <= timestamp && timestamp < self.end
    }

    /// The engine's view of a request in this window.
    pub fn to_sim(&self, request: &Request) -> SimRequest {
        debug_assert!(self.contains(request.timestamp));
        SimRequest {
            arrival: VirtualInstant(request.timestamp.0 - self.replay_start().0),
            volume: request.volume,
            range: ByteRange::new(request.offset_bytes, u64::from(request.size_bytes)),
            kind: request.kind,
        }
    }

    /// The requests of `requests` replayed (warm-up included), as the engine takes
    /// them. Stops reading at the first request past the end (the stream is in time
    /// order).
    pub fn sim_requests<E>(
        self,
        requests: impl Iterator<Item = Result<Request, E>>,
    ) -> impl Iterator<Item = Result<SimRequest, E>> {
        let replay_start = self.replay_start();
        requests
            .filter(move |item| item.as_ref().map_or(true, |r| r.timestamp >= replay_start))
            .take_while(move |item| item.as_ref().map_or(true, |r| r.timestamp < self.end))
            .map(move |item| item.map(|request| self.to_sim(&request)))
    }
}

#[cfg(test)]
mod tests {
    use somnus_trace::TimeBase;
    use somnus_trace::day::DAY_NS;

    use super::*;

    /// 2007-02-22 00:00 UTC, day 0 of the MSR week.
    const DAY0_NS: u64 = 1_172_102_400_000_000_000;
    const HOUR_NS: u64 = 3_600_000_000_000;

    fn summary(first_ns: u64, last_ns: u64) -> TraceSummary {
        TraceSummary {
            files: Vec::new(),
            record_count: 2,
            first_timestamp: Some(TraceTimestamp(first_ns)),
            last_timestamp: Some(TraceTimestamp(last_ns)),
            time_base: TimeBase::UnixEpoch,
            volume_count: 1,
            skipped_count: 0,
        }
    }

    #[test]
    fn a_day_is_cut_to_the_span_the_trace_covers() {
        // Goal: the first and last days are measured from the first request and to just
        // after the last, days inside the set whole; a warm-up never starts before the
        // first request. Method: a set from day 0 at 17:00 to day 2 at 05:00.
        let (first, last) = (DAY0_NS + 17 * HOUR_NS, DAY0_NS + 2 * DAY_NS + 5 * HOUR_NS);
        let set = summary(first, last);
        let hour = VirtualDuration::from_nanos(HOUR_NS);

        let day0 = Window::day(&set, DaySpec::Index(0)).unwrap().with_warmup(hour);
        assert_eq!((day0.start.0, day0.end.0), (first, DAY0_NS + DAY_NS));
        assert_eq!(day0.warmup, VirtualDuration::ZERO, "nothing precedes the first request");
        assert_eq!(day0.replay_start().0, first);

        let day1 = Window::day(&set, DaySpec::Index(1)).unwrap().with_warmup(hour);
        assert_eq!((day1.start.0, day1.end.0), (DAY0_NS + DAY_NS, DAY0_NS + 2 * DAY_NS));
        assert_eq!(day1.warmup, hour);
        let long = VirtualDuration::from_nanos(10 * HOUR_NS);
        let day1_long = Window::day(&set, DaySpec::Index(1)).unwrap().with_warmup(long);
        assert_eq!(day1_long.replay_start().0, first, "a long warm-up stops at the first request");

        let day2 = Window::day(&set, DaySpec::Index(2)).unwrap();
        assert_eq!((day2.start.0, day2.end.0), (DAY0_NS + 2 * DAY_NS, last + 1));
        assert!(Window::day(&set, DaySpec::Index(3)).is_err());
    }
}
