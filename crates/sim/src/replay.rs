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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: TraceTimestamp,
    pub end: TraceTimestamp,
    pub warmup: VirtualDuration,
}

impl Window {
    /// From the first request to just after the last one; `None` for an empty trace.
    pub fn whole(summary: &TraceSummary) -> Option<Window> {
        let (first, last) = summary.span()?;
        Some(Window {
            start: first,
            end: TraceTimestamp(last.0.saturating_add(1)),
            warmup: VirtualDuration::ZERO,
        })
    }

    /// One calendar day (see [`day_window`]).
    pub fn day(summary: &TraceSummary, day: DaySpec) -> Result<Window, DayError> {
        let (start, end) = day_window(summary, day)?;
        Ok(Window { start, end, warmup: VirtualDuration::ZERO })
    }

    /// The same window after a warm-up of `warmup` (cut at the trace's time 0).
    pub fn with_warmup(self, warmup: VirtualDuration) -> Window {
        Window { warmup: VirtualDuration::from_nanos(warmup.as_nanos().min(self.start.0)), ..self }
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
