//! From a trace to the engine's requests: the window replayed (the whole trace or one
//! calendar day) and the mapping of trace time onto virtual time.

use somnus_trace::stats::StatsReport;
use somnus_trace::{DayError, DaySpec, Request, TraceSummary, TraceTimestamp, day_window};
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

use crate::engine::SimRequest;
use crate::topology::VolumeLoad;

/// Each volume's peak load, from the trace statistics, for sizing arrays (in the
/// order of the report's volumes, which is the trace's volume order).
pub fn volume_loads(report: &StatsReport) -> Vec<VolumeLoad> {
    report
        .volumes
        .iter()
        .map(|volume| {
            let count = volume.read_count + volume.write_count;
            let bytes = volume.read_bytes + volume.write_bytes;
            VolumeLoad {
                peak_reads_per_s: volume.peak_read_rate_per_s,
                peak_writes_per_s: volume.peak_write_rate_per_s,
                mean_request_bytes: if count == 0 { 0.0 } else { bytes as f64 / count as f64 },
            }
        })
        .collect()
}

/// The part of a trace replayed: requests with `start <= timestamp < end`. Virtual
/// time 0 is `start`, and energy is measured over the whole window, idle time included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: TraceTimestamp,
    pub end: TraceTimestamp,
}

impl Window {
    /// From the first request to just after the last one; `None` for an empty trace.
    pub fn whole(summary: &TraceSummary) -> Option<Window> {
        let (first, last) = summary.span()?;
        Some(Window { start: first, end: TraceTimestamp(last.0.saturating_add(1)) })
    }

    /// One calendar day (see [`day_window`]).
    pub fn day(summary: &TraceSummary, day: DaySpec) -> Result<Window, DayError> {
        let (start, end) = day_window(summary, day)?;
        Ok(Window { start, end })
    }

    pub fn span(&self) -> VirtualDuration {
        VirtualDuration::from_nanos(self.end.0 - self.start.0)
    }

    pub fn contains(&self, timestamp: TraceTimestamp) -> bool {
        self.start <= timestamp && timestamp < self.end
    }

    /// The engine's view of a request in this window.
    pub fn to_sim(&self, request: &Request) -> SimRequest {
        debug_assert!(self.contains(request.timestamp));
        SimRequest {
            arrival: VirtualInstant(request.timestamp.0 - self.start.0),
            volume: request.volume,
            range: ByteRange::new(request.offset_bytes, u64::from(request.size_bytes)),
            kind: request.kind,
        }
    }

    /// The requests of `requests` inside the window, as the engine takes them. Stops
    /// reading at the first request past the end (the stream is in time order).
    pub fn sim_requests<E>(
        self,
        requests: impl Iterator<Item = Result<Request, E>>,
    ) -> impl Iterator<Item = Result<SimRequest, E>> {
        requests
            .filter(move |item| item.as_ref().map_or(true, |r| r.timestamp >= self.start))
            .take_while(move |item| item.as_ref().map_or(true, |r| r.timestamp < self.end))
            .map(move |item| item.map(|request| self.to_sim(&request)))
    }
}
