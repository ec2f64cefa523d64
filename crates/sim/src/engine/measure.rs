//! What a run measures: response times, requests delayed by a spin-up, off-loaded
//! writes and remote reads, network traffic, and per volume its energy and its
//! manager's counters over the measured window (the warm-up and the drain after the
//! window excluded).

use hdrhistogram::Histogram;
use somnus_core::offload::{ConfigKind, ManagerCounters, ReplyOutcome};
use somnus_core::power::{MeterReading, PowerTimeline};
use somnus_types::{IoKind, VirtualDuration, VirtualInstant};

/// What one run measured, before it is compared with the baseline.
#[derive(Clone, Debug)]
pub struct RunMeasurements {
    pub kind: ConfigKind,
    pub span: VirtualDuration,
    pub volumes: Vec<VolumeMeasurements>,
    /// Energy per power window, summed over the cluster.
    pub timeline: PowerTimeline,
    pub read_latency_ns: Histogram<u64>,
    pub write_latency_ns: Histogram<u64>,
    pub read_latency_sum_ns: u128,
    pub write_latency_sum_ns: u128,
    /// Requests whose response a spin-up lengthened (they waited for one, or were held
    /// behind an overlapping request that did).
    pub reads_spin_delayed: u64,
    pub writes_spin_delayed: u64,
    pub writes_logged: u64,
    pub reads_logged: u64,
    pub reads_remote: u64,
    pub network_bytes: u64,
    /// Network traffic per power window (the windows of `timeline`), in bytes.
    pub network_bytes_per_window: Vec<u64>,
    /// Requests still in flight when the engine gave up, an hour after the window.
    pub requests_unfinished: u64,
    pub requests_refused: u64,
    /// Requests answered with an I/O error.
    pub requests_failed: u64,
}

#[derive(Clone, Debug)]
pub struct VolumeMeasurements {
    pub reading: MeterReading,
    pub counters: ManagerCounters,
    pub reads: u64,
    pub writes: u64,
}

impl RunMeasurements {
    pub(crate) fn new(
        kind: ConfigKind,
        span: VirtualDuration,
        timeline: PowerTimeline,
    ) -> RunMeasurements {
        let histogram = || {
            // 1 us to 1000 s at three significant digits; bounds are constants.
            match Histogram::new_with_bounds(1_000, 1_000_000_000_000, 3) {
                Ok(histogram) => histogram,
                Err(error) => panic!("histogram bounds: {error}"),
            }
        };
        RunMeasurements {
            kind,
            span,
            volumes: Vec::new(),
            network_bytes_per_window: vec![0; timeline.windows().len()],
            timeline,
            read_latency_ns: histogram(),
            write_latency_ns: histogram(),
            read_latency_sum_ns: 0,
            write_latency_sum_ns: 0,
            reads_spin_delayed: 0,
            writes_spin_delayed: 0,
            writes_logged: 0,
            reads_logged: 0,
            reads_remote: 0,
            network_bytes: 0,
            requests_unfinished: 0,
            requests_refused: 0,
            requests_failed: 0,
        }
    }

    /// Counts a finished request of the measured window.
    pub(crate) fn reply(
        &mut self,
        kind: IoKind,
        outcome: ReplyOutcome,
        latency_ns: u64,
        spin_delayed: bool,
    ) {
        let (histogram, sum) = match kind {
            IoKind::Read => (&mut self.read_latency_ns, &mut self.read_latency_sum_ns),
            IoKind::Write => (&mut self.write_latency_ns, &mut self.write_latency_sum_ns),
        };
        histogram.saturating_record(latency_ns.max(1));
        *sum += u128::from(latency_ns);
        match (kind, outcome) {
            (IoKind::Read, ReplyOutcome::Logged { remote }) => {
                self.reads_logged += 1;
                self.reads_remote += u64::from(remote);
            }
            (IoKind::Write, ReplyOutcome::Logged { .. }) => self.writes_logged += 1,
            (_, ReplyOutcome::Busy) => self.requests_refused += 1,
            (_, ReplyOutcome::Failed) => self.requests_failed += 1,
            (_, ReplyOutcome::Home) => {}
        }
        if spin_delayed {
            match kind {
                IoKind::Read => self.reads_spin_delayed += 1,
                IoKind::Write => self.writes_spin_delayed += 1,
            }
        }
    }

    /// Counts `bytes` sent at `at`, if inside the window.
    pub(crate) fn network(&mut self, at: VirtualInstant, bytes: u64) {
        if let Some(window) = self.timeline.window_index(at) {
            self.network_bytes += bytes;
            self.network_bytes_per_window[window] += bytes;
        }
    }
}

/// Per volume, its meter reading and its manager's counters at one instant.
pub(crate) type Snapshot = Vec<(MeterReading, ManagerCounters)>;

/// Per volume, what was measured between two snapshots.
pub(crate) fn between(
    start: &Snapshot,
    end: &Snapshot,
    requests: &[(u64, u64)],
) -> Vec<VolumeMeasurements> {
    start
        .iter()
        .zip(end)
        .zip(requests)
        .map(|(((reading_at_start, counters_at_start), (reading, counters)), &(reads, writes))| {
            VolumeMeasurements {
                reading: reading.since(reading_at_start),
                counters: counters.since(counters_at_start),
                reads,
                writes,
            }
        })
        .collect()
}
