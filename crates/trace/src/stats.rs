//! The volume activity analysis of the Write Off-Loading paper (FAST'08, section 2),
//! for any trace set: per-volume mean and peak request rates (Fig. 1), the share of
//! time each volume is active with and without writes (Fig. 2), the number of
//! concurrently active volumes (Table 2), and a per-day table for finding the least and
//! most idle day.
//!
//! A volume is active from each request until `window` (60 s) after it, clipped to the
//! span. One pass over the time-ordered requests keeps, per volume, only its current
//! active interval and counters, plus a list of active volumes ordered by expiry (a
//! request moves its volume to the back, so the list stays sorted with O(1) updates).
//! Memory is bounded by the number of volumes (and days x volumes for the day table),
//! never by the number of requests.

use std::fmt;

use somnus_types::IoKind;

use crate::day::{DAY_NS, DayError, DaySpec, day_origin_ns, day_window, label, utc_date};
use crate::set::TraceSet;
use crate::volume::VolumeTable;
use crate::{Request, TimeBase, TraceError, TraceTimestamp};

/// The paper's idle threshold and peak-rate granularity, in seconds.
pub const DEFAULT_WINDOW_S: u64 = 60;
/// The per-day table is kept only while days x volumes stays below this many cells.
pub const DAY_CELLS_MAX: u64 = 16 << 20;
const NANOS_PER_SECOND: f64 = 1e9;
const NIL: u32 = u32::MAX;

/// Parameters of the analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsOptions {
    /// A volume stays active this long after a request; also the peak-rate window.
    pub window_ns: u64,
}

impl Default for StatsOptions {
    fn default() -> StatsOptions {
        StatsOptions { window_ns: DEFAULT_WINDOW_S * 1_000_000_000 }
    }
}

/// The time span the analysis covers, `[start, end]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsSpan {
    pub start: TraceTimestamp,
    pub end: TraceTimestamp,
    /// Decides how days are labelled and aligned (UTC midnight or time 0).
    pub time_base: TimeBase,
}

/// Why the statistics of a trace set could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Day(#[from] DayError),
}

/// One volume's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VolumeStats {
    pub name: String,
    pub read_count: u64,
    pub write_count: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Requests per second over the span.
    pub mean_read_rate_per_s: f64,
    pub mean_write_rate_per_s: f64,
    /// Requests per second in the busiest window (fixed windows from the span start).
    pub peak_read_rate_per_s: f64,
    pub peak_write_rate_per_s: f64,
    /// Share of the span (0 to 1) the volume is active, counting all requests.
    pub active_share: f64,
    /// Share of the span the volume is active counting reads only.
    pub read_active_share: f64,
}

/// The time-weighted distribution of the number of concurrently active volumes.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Concurrency {
    pub mean: f64,
    pub median: u64,
    pub p99: u64,
    pub max: u64,
    /// The same figures as a percentage of the number of volumes.
    pub mean_percent: f64,
    pub median_percent: f64,
    pub p99_percent: f64,
    pub max_percent: f64,
}

/// One calendar day (24-hour window) of the span.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DayStats {
    /// The day's index (see [`DaySpec::Index`]) and label (UTC date or `day N`).
    pub index: u64,
    pub label: String,
    pub request_count: u64,
    /// Reads over all requests, 0 for a day without requests.
    pub read_fraction: f64,
    /// Mean over volumes of the share of the day (its part inside the span) active.
    pub mean_active_share: f64,
    pub mean_read_active_share: f64,
    /// The share of the 24 hours that lies inside the span.
    pub coverage: f64,
}

/// Everything [`compute`] finds. `Display` prints it as aligned tables.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct StatsReport {
    pub window_s: f64,
    pub time_base: TimeBase,
    pub span_start: TraceTimestamp,
    pub span_end: TraceTimestamp,
    pub span_s: f64,
    pub volume_count: u64,
    pub request_count: u64,
    pub read_count: u64,
    pub volumes: Vec<VolumeStats>,
    /// Mean and median over volumes of the active shares (the paper's Fig. 2).
    pub active_share_mean: f64,
    pub active_share_median: f64,
    pub read_active_share_mean: f64,
    pub read_active_share_median: f64,
    /// Concurrently active volumes with all requests and with reads only (Table 2).
    pub concurrency: Concurrency,
    pub read_concurrency: Concurrency,
    pub days: Vec<DayStats>,
    /// True when the day table was left out because days x volumes exceeded [`DAY_CELLS_MAX`].
    pub days_omitted: bool,
    /// The full-coverage days (if any, else all days) with the highest and lowest mean
    /// active share counting all requests.
    pub least_idle_day: Option<String>,
    pub most_idle_day: Option<String>,
}

/// Computes the statistics of the requests of a set, or of one day of it.
pub fn compute_set(
    set: &TraceSet,
    day: Option<DaySpec>,
    options: &StatsOptions,
) -> Result<StatsReport, StatsError> {
    let summary = set.summary();
    // An empty set has no span to analyse: say so, as `sim offload` does, rather than
    // report on 1970-01-01.
    let (first, last) = summary.span().ok_or(DayError::EmptySet)?;
    let (start, end) = match day {
        Some(day) => {
            let (day_start, day_end) = day_window(summary, day)?;
            (day_start.max(first), TraceTimestamp(day_end.0 - 1).min(last))
        }
        None => (first, last),
    };
    let span = StatsSpan { start, end, time_base: summary.time_base };
    let mut error = None;
    let requests = set.requests().map_while(|item| item.map_err(|e| error = Some(e)).ok());
    let report = compute(requests, set.volumes(), span, options);
    match error {
        Some(error) => Err(error.into()),
        None => Ok(report),
    }
}

/// Computes the statistics of `requests` (in non-decreasing time order) over `span`.
/// Requests after the span are not read; requests up to one window before it count
/// only for activity that reaches into the span.
pub fn compute(
    requests: impl IntoIterator<Item = Request>,
    volumes: &VolumeTable,
    span: StatsSpan,
    options: &StatsOptions,
) -> StatsReport {
    assert!(options.window_ns > 0, "the activity window must be positive");
    assert!(span.start <= span.end, "span starts after it ends");
    let volume_count = volumes.len();
    let days = DayGrid::new(span, volume_count);
    let mut all = Activity::new(span, options.window_ns, volume_count, days.clone());
    let mut reads = Activity::new(span, options.window_ns, volume_count, days.clone());
    let mut counters = vec![Counters::default(); volume_count];
    let mut day_requests = vec![(0_u64, 0_u64); days.day_count as usize];
    let mut previous = 0_u64;
    for request in requests {
        let t = request.timestamp.0;
        assert!(t >= previous, "stats::compute needs requests in time order");
        assert!(request.volume.index() < volume_count, "request volume outside the table");
        previous = t;
        if t > span.end.0 {
            break;
        }
        if t.saturating_add(options.window_ns) <= span.start.0 {
            continue;
        }
        let volume = request.volume.index();
        all.on_request(t, volume);
        if request.kind == IoKind::Read {
            reads.on_request(t, volume);
        }
        if t >= span.start.0 {
            counters[volume].count(&request, (t - span.start.0) / options.window_ns);
            if let Some(slot) = days.day_of(t).and_then(|day| day_requests.get_mut(day)) {
                slot.0 += 1;
                slot.1 += u64::from(request.kind == IoKind::Read);
            }
        }
    }
    all.finish();
    reads.finish();
    report(volumes, span, options, &counters, &all, &reads, &days, &day_requests)
}

/// Per-volume request counters and fixed-window peak tracking.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    read_count: u64,
    write_count: u64,
    read_bytes: u64,
    write_bytes: u64,
    window: u64,
    window_reads: u64,
    window_writes: u64,
    peak_reads: u64,
    peak_writes: u64,
}

impl Counters {
    fn count(&mut self, request: &Request, window: u64) {
        if window != self.window {
            self.window = window;
            self.window_reads = 0;
            self.window_writes = 0;
        }
        let bytes = u64::from(request.size_bytes);
        match request.kind {
            IoKind::Read => {
                self.read_count += 1;
                self.read_bytes += bytes;
                self.window_reads += 1;
                self.peak_reads = self.peak_reads.max(self.window_reads);
            }
            IoKind::Write => {
                self.write_count += 1;
                self.write_bytes += bytes;
                self.window_writes += 1;
                self.peak_writes = self.peak_writes.max(self.window_writes);
            }
        }
    }
}

/// Calendar days overlapping the span, and per day and volume the active time.
#[derive(Clone, Debug)]
struct DayGrid {
    origin_ns: u64,
    first_day: u64,
    day_count: u64,
    volume_count: usize,
    /// `day_count x volume_count` cells, or empty when the table is omitted.
    active_ns: Vec<u64>,
    omitted: bool,
}

impl DayGrid {
    fn new(span: StatsSpan, volume_count: usize) -> DayGrid {
        let origin_ns = day_origin_ns(span.time_base, span.start);
        let first_day = (span.start.0 - origin_ns) / DAY_NS;
        let day_count = (span.end.0 - origin_ns) / DAY_NS - first_day + 1;
        let cells = day_count.saturating_mul(volume_count as u64);
        let omitted = cells > DAY_CELLS_MAX;
        let active_ns = if omitted { Vec::new() } else { vec![0; cells as usize] };
        let day_count = if omitted { 0 } else { day_count };
        DayGrid { origin_ns, first_day, day_count, volume_count, active_ns, omitted }
    }

    /// The row of the day holding `t`, if the table is kept and `t` is in it.
    fn day_of(&self, t: u64) -> Option<usize> {
        let day = t.checked_sub(self.origin_ns)? / DAY_NS;
        let row = day.checked_sub(self.first_day)?;
        (row < self.day_count).then_some(row as usize)
    }

    fn day_bounds(&self, row: u64) -> (u64, u64) {
        let start = self.origin_ns + (self.first_day + row) * DAY_NS;
        (start, start.saturating_add(DAY_NS))
    }

    /// Adds the active interval `[low, high)` (inside the span) of `volume`.
    fn add(&mut self, volume: usize, low: u64, high: u64) {
        let Some(first_row) = self.day_of(low) else { return };
        for row in first_row as u64..self.day_count {
            let (day_start, day_end) = self.day_bounds(row);
            if day_start >= high {
                break;
            }
            let overlap = high.min(day_end) - low.max(day_start);
            self.active_ns[row as usize * self.volume_count + volume] += overlap;
        }
    }
}

/// Activity of every volume under one request filter (all requests or reads only).
struct Activity {
    window_ns: u64,
    span_start: u64,
    span_end: u64,
    now_ns: u64,
    active: Vec<bool>,
    since_ns: Vec<u64>,
    until_ns: Vec<u64>,
    /// A doubly linked list of active volumes in expiry order.
    previous: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    active_count: usize,
    /// Time spent at each level of concurrency, 0 to the number of volumes.
    level_ns: Vec<u64>,
    active_ns: Vec<u64>,
    days: DayGrid,
}

impl Activity {
    fn new(span: StatsSpan, window_ns: u64, volume_count: usize, days: DayGrid) -> Activity {
        Activity {
            window_ns,
            span_start: span.start.0,
            span_end: span.end.0,
            now_ns: 0,
            active: vec![false; volume_count],
            since_ns: vec![0; volume_count],
            until_ns: vec![0; volume_count],
            previous: vec![NIL; volume_count],
            next: vec![NIL; volume_count],
            head: NIL,
            tail: NIL,
            active_count: 0,
            level_ns: vec![0; volume_count + 1],
            active_ns: vec![0; volume_count],
            days,
        }
    }

    fn on_request(&mut self, t: u64, volume: usize) {
        self.advance(t);
        if self.active[volume] {
            self.unlink(volume);
        } else {
            self.active[volume] = true;
            self.since_ns[volume] = t;
            self.active_count += 1;
        }
        self.until_ns[volume] = t.saturating_add(self.window_ns);
        self.push_back(volume);
        assert!(self.active_count <= self.active.len());
    }

    /// Moves time to `to`, expiring volumes whose window ended, and accounts the time.
    fn advance(&mut self, to: u64) {
        while self.head != NIL {
            let volume = self.head as usize;
            let until = self.until_ns[volume];
            if until > to {
                break;
            }
            self.accumulate(until);
            self.unlink(volume);
            self.active[volume] = false;
            self.active_count -= 1;
            self.add_interval(volume, self.since_ns[volume], until);
        }
        self.accumulate(to);
    }

    fn accumulate(&mut self, to: u64) {
        let low = self.now_ns.max(self.span_start);
        let high = to.min(self.span_end);
        if high > low {
            self.level_ns[self.active_count] += high - low;
        }
        self.now_ns = self.now_ns.max(to);
    }

    fn add_interval(&mut self, volume: usize, since: u64, until: u64) {
        let low = since.max(self.span_start);
        let high = until.min(self.span_end);
        if high > low {
            self.active_ns[volume] += high - low;
            if !self.days.omitted {
                self.days.add(volume, low, high);
            }
        }
    }

    /// Ends the pass at the span's end, closing the intervals still open.
    fn finish(&mut self) {
        self.advance(self.span_end);
        while self.head != NIL {
            let volume = self.head as usize;
            self.unlink(volume);
            self.active[volume] = false;
            self.active_count -= 1;
            self.add_interval(volume, self.since_ns[volume], self.until_ns[volume]);
        }
        assert_eq!(self.active_count, 0);
        debug_assert_eq!(self.level_ns.iter().sum::<u64>(), self.span_end - self.span_start);
    }

    fn unlink(&mut self, volume: usize) {
        let (previous, next) = (self.previous[volume], self.next[volume]);
        match previous {
            NIL => self.head = next,
            p => self.next[p as usize] = next,
        }
        match next {
            NIL => self.tail = previous,
            n => self.previous[n as usize] = previous,
        }
        self.previous[volume] = NIL;
        self.next[volume] = NIL;
    }

    fn push_back(&mut self, volume: usize) {
        // Volume indexes come from a VolumeTable, bounded by VOLUMES_MAX < u32::MAX.
        let id = volume as u32;
        self.previous[volume] = self.tail;
        self.next[volume] = NIL;
        match self.tail {
            NIL => self.head = id,
            t => self.next[t as usize] = id,
        }
        self.tail = id;
    }

    fn concurrency(&self, volume_count: usize) -> Concurrency {
        let total: u64 = self.level_ns.iter().sum();
        let percent =
            |value: f64| if volume_count == 0 { 0.0 } else { 100.0 * value / volume_count as f64 };
        if total == 0 {
            return Concurrency {
                mean: 0.0,
                median: 0,
                p99: 0,
                max: 0,
                mean_percent: 0.0,
                median_percent: 0.0,
                p99_percent: 0.0,
                max_percent: 0.0,
            };
        }
        let weighted: f64 =
            self.level_ns.iter().enumerate().map(|(level, &ns)| level as f64 * ns as f64).sum();
        let mean = weighted / total as f64;
        let quantile = |fraction: f64| -> u64 {
            let target = fraction * total as f64;
            let mut cumulative = 0_u64;
            for (level, &ns) in self.level_ns.iter().enumerate() {
                cumulative += ns;
                if cumulative as f64 >= target {
                    return level as u64;
                }
            }
            (self.level_ns.len() - 1) as u64
        };
        let (median, p99) = (quantile(0.5), quantile(0.99));
        let max = self.level_ns.iter().rposition(|&ns| ns > 0).unwrap_or(0) as u64;
        Concurrency {
            mean,
            median,
            p99,
            max,
            mean_percent: percent(mean),
            median_percent: percent(median as f64),
            p99_percent: percent(p99 as f64),
            max_percent: percent(max as f64),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    volumes: &VolumeTable,
    span: StatsSpan,
    options: &StatsOptions,
    counters: &[Counters],
    all: &Activity,
    reads: &Activity,
    days: &DayGrid,
    day_requests: &[(u64, u64)],
) -> StatsReport {
    let span_ns = span.end.0 - span.start.0;
    let span_s = span_ns as f64 / NANOS_PER_SECOND;
    let window_s = options.window_ns as f64 / NANOS_PER_SECOND;
    let rate = |count: u64| if span_ns == 0 { 0.0 } else { count as f64 / span_s };
    let share = |ns: u64| if span_ns == 0 { 0.0 } else { ns as f64 / span_ns as f64 };
    let volume_stats: Vec<VolumeStats> = volumes
        .iter()
        .zip(counters)
        .map(|((id, name), c)| VolumeStats {
            name: name.to_owned(),
            read_count: c.read_count,
            write_count: c.write_count,
            read_bytes: c.read_bytes,
            write_bytes: c.write_bytes,
            mean_read_rate_per_s: rate(c.read_count),
            mean_write_rate_per_s: rate(c.write_count),
            peak_read_rate_per_s: c.peak_reads as f64 / window_s,
            peak_write_rate_per_s: c.peak_writes as f64 / window_s,
            active_share: share(all.active_ns[id.index()]),
            read_active_share: share(reads.active_ns[id.index()]),
        })
        .collect();
    let shares: Vec<f64> = volume_stats.iter().map(|v| v.active_share).collect();
    let read_shares: Vec<f64> = volume_stats.iter().map(|v| v.read_active_share).collect();
    let day_stats = day_table(span, days, all, reads, day_requests);
    let full_days: Vec<&DayStats> = day_stats.iter().filter(|d| d.coverage >= 0.999).collect();
    let candidates: Vec<&DayStats> =
        if full_days.is_empty() { day_stats.iter().collect() } else { full_days };
    let by_share =
        |a: &&&DayStats, b: &&&DayStats| a.mean_active_share.total_cmp(&b.mean_active_share);
    StatsReport {
        window_s,
        time_base: span.time_base,
        span_start: span.start,
        span_end: span.end,
        span_s,
        volume_count: volumes.len() as u64,
        request_count: counters.iter().map(|c| c.read_count + c.write_count).sum(),
        read_count: counters.iter().map(|c| c.read_count).sum(),
        active_share_mean: mean(&shares),
        active_share_median: median(shares),
        read_active_share_mean: mean(&read_shares),
        read_active_share_median: median(read_shares),
        volumes: volume_stats,
        concurrency: all.concurrency(volumes.len()),
        read_concurrency: reads.concurrency(volumes.len()),
        days_omitted: days.omitted,
        least_idle_day: candidates.iter().max_by(by_share).map(|d| d.label.clone()),
        most_idle_day: candidates.iter().min_by(by_share).map(|d| d.label.clone()),
        days: day_stats,
    }
}

fn day_table(
    span: StatsSpan,
    days: &DayGrid,
    all: &Activity,
    reads: &Activity,
    day_requests: &[(u64, u64)],
) -> Vec<DayStats> {
    let mut table = Vec::with_capacity(days.day_count as usize);
    for row in 0..days.day_count {
        let (day_start, day_end) = days.day_bounds(row);
        let low = day_start.max(span.start.0);
        let high = day_end.min(span.end.0);
        let (request_count, read_count) = day_requests[row as usize];
        if high <= low && request_count == 0 {
            continue;
        }
        let length = (high.saturating_sub(low)).max(1) as f64;
        let cells = row as usize * days.volume_count..(row as usize + 1) * days.volume_count;
        let mean_share = |activity: &Activity| {
            let cells = &activity.days.active_ns[cells.clone()];
            if cells.is_empty() {
                0.0
            } else {
                cells.iter().map(|&ns| ns as f64 / length).sum::<f64>() / cells.len() as f64
            }
        };
        table.push(DayStats {
            index: days.first_day + row,
            label: label(span.time_base, day_start),
            request_count,
            read_fraction: if request_count == 0 {
                0.0
            } else {
                read_count as f64 / request_count as f64
            },
            mean_active_share: mean_share(all),
            mean_read_active_share: mean_share(reads),
            coverage: (high.saturating_sub(low)) as f64 / DAY_NS as f64,
        });
    }
    table
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() { 0.0 } else { values.iter().sum::<f64>() / values.len() as f64 }
}

/// The median; the mean of the two middle values for an even count.
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 }
}

/// An integer with thousands separators: 1234567 -> `1,234,567`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A timestamp for people: a UTC date and time, or seconds for relative time.
pub fn format_timestamp(time_base: TimeBase, timestamp: TraceTimestamp) -> String {
    match time_base {
        TimeBase::UnixEpoch => {
            let second_of_day = timestamp.0 % DAY_NS / 1_000_000_000;
            let (hours, minutes, seconds) =
                (second_of_day / 3600, second_of_day / 60 % 60, second_of_day % 60);
            format!("{} {hours:02}:{minutes:02}:{seconds:02} UTC", utc_date(timestamp.0))
        }
        TimeBase::Relative => format!("{:.3} s", timestamp.0 as f64 / NANOS_PER_SECOND),
    }
}

const MIB: f64 = 1024.0 * 1024.0;

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let read_percent = if self.request_count == 0 {
            0.0
        } else {
            100.0 * self.read_count as f64 / self.request_count as f64
        };
        writeln!(
            f,
            "span: {} .. {} ({:.1} s)",
            format_timestamp(self.time_base, self.span_start),
            format_timestamp(self.time_base, self.span_end),
            self.span_s
        )?;
        writeln!(
            f,
            "{} volumes, {} requests ({read_percent:.1}% reads); a volume is active until {} s after a request",
            self.volume_count,
            thousands(self.request_count),
            self.window_s
        )?;
        writeln!(f)?;
        self.fmt_volumes(f)?;
        writeln!(f)?;
        writeln!(f, "active share across volumes   mean     median")?;
        writeln!(
            f,
            "  read/write                 {:>6.1}%  {:>6.1}%",
            100.0 * self.active_share_mean,
            100.0 * self.active_share_median
        )?;
        writeln!(
            f,
            "  read-only                  {:>6.1}%  {:>6.1}%",
            100.0 * self.read_active_share_mean,
            100.0 * self.read_active_share_median
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "concurrently active volumes (time-weighted; % of {} volumes)",
            self.volume_count
        )?;
        writeln!(f, "  {:<12} {:>16} {:>16} {:>16} {:>16}", "", "mean", "median", "p99", "max")?;
        for (name, c) in [("read/write", &self.concurrency), ("read-only", &self.read_concurrency)]
        {
            writeln!(
                f,
                "  {name:<12} {:>16} {:>16} {:>16} {:>16}",
                format!("{:.1} ({:.0}%)", c.mean, c.mean_percent),
                format!("{} ({:.0}%)", c.median, c.median_percent),
                format!("{} ({:.0}%)", c.p99, c.p99_percent),
                format!("{} ({:.0}%)", c.max, c.max_percent),
            )?;
        }
        writeln!(f)?;
        self.fmt_days(f)
    }
}

impl StatsReport {
    fn fmt_volumes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.volumes.iter().map(|v| v.name.len()).max().unwrap_or(6).max(6);
        writeln!(
            f,
            "{:<width$} {:>11} {:>11} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
            "volume",
            "reads",
            "writes",
            "read MiB",
            "write MiB",
            "mean r/s",
            "mean w/s",
            "peak r/s",
            "peak w/s",
            "active%",
            "r-act%"
        )?;
        for v in &self.volumes {
            writeln!(
                f,
                "{:<width$} {:>11} {:>11} {:>10.1} {:>10.1} {:>9.3} {:>9.3} {:>9.2} {:>9.2} {:>8.1} {:>8.1}",
                v.name,
                thousands(v.read_count),
                thousands(v.write_count),
                v.read_bytes as f64 / MIB,
                v.write_bytes as f64 / MIB,
                v.mean_read_rate_per_s,
                v.mean_write_rate_per_s,
                v.peak_read_rate_per_s,
                v.peak_write_rate_per_s,
                100.0 * v.active_share,
                100.0 * v.read_active_share,
            )?;
        }
        Ok(())
    }

    fn fmt_days(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.days_omitted {
            return writeln!(
                f,
                "per-day table omitted: more than {DAY_CELLS_MAX} day x volume cells"
            );
        }
        writeln!(
            f,
            "per day            requests   read%  active% (r/w)  active% (read-only)  coverage%"
        )?;
        for day in &self.days {
            writeln!(
                f,
                "  {:<12} {:>12} {:>7.1} {:>14.1} {:>20.1} {:>10.1}",
                day.label,
                thousands(day.request_count),
                100.0 * day.read_fraction,
                100.0 * day.mean_active_share,
                100.0 * day.mean_read_active_share,
                100.0 * day.coverage,
            )?;
        }
        if let (Some(least), Some(most)) = (&self.least_idle_day, &self.most_idle_day) {
            writeln!(f, "least idle day: {least}; most idle day: {most}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use somnus_types::VolumeId;

    const S: u64 = 1_000_000_000;

    fn request(t_s: u64, volume: u32, kind: IoKind) -> Request {
        Request {
            timestamp: TraceTimestamp(t_s * S),
            volume: VolumeId(volume),
            offset_bytes: 0,
            size_bytes: 4096,
            kind,
        }
    }

    fn table(count: usize) -> VolumeTable {
        let mut table = VolumeTable::new();
        for index in 0..count {
            table.intern(&format!("v_{index}")).unwrap();
        }
        table
    }

    #[test]
    fn hand_computed_two_volume_trace() {
        // Goal: active shares and concurrency match values computed by hand.
        // Method: span [0, 200] s, window 60 s. Volume 0 writes at 0 and 30 (active
        // [0, 90)), reads at 150 (read-active [150, 200] clipped); volume 1 reads at
        // 60 (active [60, 120)). Levels: [0,60) 1, [60,90) 2, [90,120) 1, [120,150) 0,
        // [150,200] 1; so 30 s at 0, 140 s at 1, 30 s at 2: mean (140 + 60)/200 = 1.0,
        // median 1 (0 holds only 15% of the time), p99 2, max 2. Read-only: [60,120) and [150,200): 110 s at 1, 90 s at 0.
        let requests = [
            request(0, 0, IoKind::Write),
            request(30, 0, IoKind::Write),
            request(60, 1, IoKind::Read),
            request(150, 0, IoKind::Read),
        ];
        let span = StatsSpan {
            start: TraceTimestamp(0),
            end: TraceTimestamp(200 * S),
            time_base: TimeBase::Relative,
        };
        let report = compute(requests, &table(2), span, &StatsOptions::default());
        assert_eq!(report.volumes[0].active_share, 140.0 / 200.0);
        assert_eq!(report.volumes[1].active_share, 60.0 / 200.0);
        assert_eq!(report.volumes[0].read_active_share, 50.0 / 200.0);
        assert_eq!(report.active_share_mean, 0.5);
        assert_eq!(report.active_share_median, 0.5);
        let c = &report.concurrency;
        assert_eq!((c.mean, c.median, c.p99, c.max), (1.0, 1, 2, 2));
        assert_eq!(c.max_percent, 100.0);
        let r = &report.read_concurrency;
        assert_eq!((r.mean, r.median, r.p99, r.max), (110.0 / 200.0, 1, 1, 1));
        assert_eq!(report.volumes[0].write_count, 2);
        assert_eq!(report.volumes[0].peak_write_rate_per_s, 2.0 / 60.0);
        assert_eq!(report.volumes[0].mean_write_rate_per_s, 2.0 / 200.0);
        assert_eq!(report.days.len(), 1);
        assert_eq!(report.days[0].request_count, 4);
        assert_eq!(report.days[0].mean_active_share, 0.5);
    }

    #[test]
    fn idle_volume_and_days_split() {
        // Goal: a volume with no requests counts as idle in the shares and the
        // denominator, and activity that crosses midnight is split between the days.
        // Method: relative span [0, 2 days]; volume 0 at 86,370 s (active until
        // 86,430 s: 30 s on day 0, 30 s on day 1); volume 1 never.
        let day = 86_400;
        let requests = [
            request(0, 0, IoKind::Read),
            request(day - 30, 0, IoKind::Read),
            request(2 * day, 0, IoKind::Write),
        ];
        let span = StatsSpan {
            start: TraceTimestamp(0),
            end: TraceTimestamp(2 * day * S),
            time_base: TimeBase::Relative,
        };
        let report = compute(requests, &table(2), span, &StatsOptions::default());
        assert_eq!(report.days.len(), 3);
        assert_eq!(report.days[0].mean_active_share, (90.0 / day as f64) / 2.0);
        assert_eq!(report.days[1].mean_active_share, (30.0 / day as f64) / 2.0);
        assert_eq!(report.days[2].request_count, 1);
        assert_eq!(report.volumes[1].active_share, 0.0);
        assert_eq!(report.concurrency.median, 0);
        assert_eq!(report.concurrency.max, 1);
        assert_eq!(report.least_idle_day.as_deref(), Some("day 0"));
        assert_eq!(report.most_idle_day.as_deref(), Some("day 1"));
        let text = report.to_string();
        assert!(text.contains("concurrently active volumes"), "{text}");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
