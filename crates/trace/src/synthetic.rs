//! A seeded generator of server-like block workloads, for experiments the shipped
//! traces cannot drive (a week of many busy volumes). It models what the Write
//! Off-Loading paper (FAST'08, section 2) reports about enterprise volumes: mean rates
//! that differ by orders of magnitude across volumes, a diurnal cycle, bursty arrivals,
//! a read/write mix that is write-dominated on about half the volumes, and long idle
//! periods. Label every result obtained with it as synthetic.
//!
//! Each volume is an independent Poisson process whose rate is piecewise constant:
//! `mean rate x daily (or weekly) curve x burst state`, or zero during an idle gap.
//! With read sessions, a volume is two such processes, its writes and its reads, the
//! reads also zero outside their sessions; the two share the volume's idle gaps.
//! Within each constant piece arrivals are drawn exactly (exponential gaps), so there
//! is no thinning and no rejected draw. The streams are merged by time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use somnus_types::{IoKind, VolumeId};

use crate::volume::{VOLUMES_MAX, VolumeTable};
use crate::{Request, TimeBase, TraceTimestamp};

pub use crate::load::{LoadSeries, LoadSeriesError, LoadWindow};

const NANOS_PER_SECOND: f64 = 1e9;
const SECTOR_BYTES: u64 = 512;
const HOUR_NS: u64 = 3_600_000_000_000;
const DAY_NS: u64 = 24 * HOUR_NS;
const WEEK_NS: u64 = 7 * DAY_NS;
/// Bounds on the knobs, so that a typo cannot ask for an unbounded run.
const SERVERS_MAX: u32 = 10_000;
const DURATION_S_MAX: f64 = 10.0 * 366.0 * 86_400.0;
const RATE_PER_S_MAX: f64 = 1e7;
const SIZES_MAX: usize = 64;
const SIZE_BYTES_MAX: u32 = 64 << 20;
const PREFIX_BYTES_MAX: usize = 32;
const RATE_CURVE_STEPS_MAX: usize = 1 << 20;
/// Seeds a volume's read stream apart from its write stream.
const READ_STREAM_SALT: u64 = 0x5EAD_5EA5_0000_0001;
/// Seeds the stratified per-volume draws.
const STRATA_SALT: u64 = 0x57AA_7A00_0000_0002;
/// Seeds a volume's idle gaps when its reads and writes are separate streams.
const IDLE_SALT: u64 = 0x1D1E_0000_0000_0003;
/// The smallest per-volume read session share, so that sessions end.
const SESSION_SHARE_MIN: f64 = 1e-3;

/// One request size and its relative weight in the size mix.
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SizeWeight {
    /// A multiple of 512, at most 64 MiB.
    pub size_bytes: u32,
    /// Relative weight; the weights need not sum to 1.
    pub weight: f64,
}

/// The knobs of the generator. Every field has a default (see `Default`), so a TOML
/// file names only what it changes; unknown keys are refused.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Number of servers (default 4).
    pub servers: u32,
    /// Volumes on each server (default 3). Volumes are named `{server}_{index}`.
    pub volumes_per_server: u32,
    /// Server names are this prefix and a two-digit number: `s00`, `s01`, ... (default `s`).
    pub server_prefix: String,
    /// Length of the trace in seconds (default 86,400: one day).
    pub duration_s: f64,
    /// If set, timestamps are absolute, starting at this Unix time in seconds; if not,
    /// they are relative to 0 (default unset).
    pub start_unix_s: Option<u64>,
    /// Mean request rate of a volume outside idle gaps, requests/s, on weekdays
    /// (default 2.0).
    pub mean_rate_per_s: f64,
    /// Spread of the per-volume mean rates: the sigma of a log-normal factor with mean
    /// 1 (default 1.5: rates differ by orders of magnitude, as in the paper's Fig. 1).
    pub rate_spread: f64,
    /// Depth of the daily cycle, 0 (flat) to 1 (rate falls to 0 at the trough) (default 0.6).
    pub diurnal_amplitude: f64,
    /// Hour of day (UTC for absolute time) at which the daily cycle peaks (default 14).
    pub peak_hour: f64,
    /// The daily cycle is held constant over steps of this many seconds (default 60).
    pub rate_step_s: f64,
    /// Mean fraction of requests that are reads (default 0.5).
    pub read_fraction: f64,
    /// Each volume's read fraction is uniform in `read_fraction +- spread`, clamped to
    /// [0, 1] (default 0.4: about half the volumes are write-dominated, like the 19 of
    /// 36 MSR volumes with a read/write ratio below 1).
    pub read_fraction_spread: f64,
    /// The request size mix (default 4 KiB 50%, 8 KiB 20%, 16 KiB 10%, 64 KiB 20%).
    pub sizes: Vec<SizeWeight>,
    /// Rate multiplier of a burst relative to the calm rate (default 8; 1 disables bursts).
    pub burst_factor: f64,
    /// Share of time a volume spends in bursts (default 0.05).
    pub burst_fraction: f64,
    /// Mean length of a burst in seconds (default 5).
    pub burst_mean_s: f64,
    /// Probability that a request continues where the volume's previous one ended (default 0.3).
    pub sequential_fraction: f64,
    /// Share of the other requests that fall in the hot region (default 0.8).
    pub hot_fraction: f64,
    /// Size of the hot region as a share of the volume (default 0.1).
    pub hot_region_fraction: f64,
    /// Volume capacity in bytes, a multiple of 512 (default 64 GiB).
    pub capacity_bytes: u64,
    /// Probability, at each hour boundary, that a volume starts an idle gap (default 0.05).
    pub idle_gap_probability: f64,
    /// Mean length of an idle gap in seconds (default 1,800).
    pub idle_gap_mean_s: f64,
    /// Names of volumes that are mostly idle (default none).
    pub idle_volumes: Vec<String>,
    /// Rate multiplier of the mostly idle volumes (default 0.01).
    pub idle_volume_rate_factor: f64,
    /// Servers named one by one, each with its own number of volumes (default none).
    /// When given, it replaces `servers`, `volumes_per_server` and `server_prefix`, so a
    /// trace can have a real data center's layout, e.g. the 13 servers of 004 Table 1.
    pub named_servers: Vec<NamedServer>,
    /// Share of time a volume's reads are on (default 1: reads and writes are one
    /// stream, split by `read_fraction`). Below 1, reads and writes become two
    /// streams of the same mean rates, and reads arrive only in sessions that cover
    /// this share of the time: the bursty reads of 004 section 2, where a volume is
    /// active 60 % of the time but only 21 % counting reads alone.
    pub read_session_fraction: f64,
    /// Spread of the per-volume read session share: the sigma of a log-normal factor
    /// with mean 1, the product clamped to [0.001, 1] (default 0).
    pub read_session_spread: f64,
    /// Mean length of a read session in seconds (default 600).
    pub read_session_mean_s: f64,
    /// Rate multiplier on Saturdays and Sundays, UTC (relative time counts from
    /// 1970-01-01, a Thursday) (default 1: no weekly cycle). It shapes the daily
    /// cosine; a measured `rate_curve` carries its own week.
    pub weekend_factor: f64,
    /// If true, the per-volume rate factor, read fraction and read session share of
    /// the volumes not in `idle_volumes` are the evenly spaced quantiles
    /// `(i + 1/2) / n` of their distributions, dealt to the volumes in a seeded order;
    /// if false (the default), each volume draws them independently. With a few
    /// dozen volumes, independent draws let one seed's cluster be much busier than
    /// another's; stratified ones give every seed the same set of values.
    pub stratify: bool,
    /// A measured load curve replacing the daily cosine (see [`RateCurve`]); built by
    /// the caller, for example from a [`LoadSeries`], never read from TOML.
    #[serde(skip)]
    pub rate_curve: Option<RateCurve>,
}

impl Default for SyntheticConfig {
    fn default() -> SyntheticConfig {
        SyntheticConfig {
            servers: 4,
            volumes_per_server: 3,
            server_prefix: "s".to_owned(),
            duration_s: 86_400.0,
            start_unix_s: None,
            mean_rate_per_s: 2.0,
            rate_spread: 1.5,
            diurnal_amplitude: 0.6,
            peak_hour: 14.0,
            rate_step_s: 60.0,
            read_fraction: 0.5,
            read_fraction_spread: 0.4,
            sizes: vec![
                SizeWeight { size_bytes: 4096, weight: 0.5 },
                SizeWeight { size_bytes: 8192, weight: 0.2 },
                SizeWeight { size_bytes: 16384, weight: 0.1 },
                SizeWeight { size_bytes: 65536, weight: 0.2 },
            ],
            burst_factor: 8.0,
            burst_fraction: 0.05,
            burst_mean_s: 5.0,
            sequential_fraction: 0.3,
            hot_fraction: 0.8,
            hot_region_fraction: 0.1,
            capacity_bytes: 64 << 30,
            idle_gap_probability: 0.05,
            idle_gap_mean_s: 1_800.0,
            idle_volumes: Vec::new(),
            idle_volume_rate_factor: 0.01,
            named_servers: Vec::new(),
            read_session_fraction: 1.0,
            read_session_spread: 0.0,
            read_session_mean_s: 600.0,
            weekend_factor: 1.0,
            stratify: false,
            rate_curve: None,
        }
    }
}

/// The built-in generator configs: name, one-line description, TOML text.
pub const PRESETS: &[(&str, &str, &str)] = &[(
    "msr-fast08",
    "the 36 volumes on 13 servers traced by Write Off-Loading (FAST'08), a week calibrated to its section 2",
    include_str!("../presets/msr-fast08.toml"),
)];

impl SyntheticConfig {
    /// The TOML text of the built-in config named `name` (see [`PRESETS`]).
    pub fn preset_text(name: &str) -> Result<&'static str, SyntheticConfigError> {
        let (_, _, text) = PRESETS.iter().find(|(n, _, _)| *n == name).ok_or_else(|| {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _, _)| *n).collect();
            SyntheticConfigError {
                key: "preset",
                message: format!("no preset {name:?}; the presets are {}", names.join(", ")),
            }
        })?;
        Ok(text)
    }

    /// The built-in config named `name` (see [`PRESETS`]).
    pub fn preset(name: &str) -> Result<SyntheticConfig, SyntheticConfigError> {
        let text = SyntheticConfig::preset_text(name)?;
        let config: SyntheticConfig = toml::from_str(text).map_err(|error| {
            SyntheticConfigError { key: "preset", message: format!("{name}: {error}") }
        })?;
        config.validate()?;
        Ok(config)
    }
}

/// A server of `named_servers`: its name and how many volumes it has.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NamedServer {
    /// 1 to 32 bytes; its volumes are `{name}_0`, `{name}_1`, ...
    pub name: String,
    /// At least 1.
    pub volumes: u32,
}

const NAME_RULE: &str =
    "a server name must have 1 to 32 bytes of letters, digits, '-', '.' and '_'";

/// Whether a server name or prefix fits in every output format (an MSR CSV field
/// holds no comma; the text formats split on whitespace).
fn name_ok(name: &str) -> bool {
    (1..=PREFIX_BYTES_MAX).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
}

/// A knob out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("synthetic config: {key}: {message}")]
pub struct SyntheticConfigError {
    pub key: &'static str,
    pub message: String,
}

fn check(
    ok: bool,
    key: &'static str,
    message: impl FnOnce() -> String,
) -> Result<(), SyntheticConfigError> {
    if ok { Ok(()) } else { Err(SyntheticConfigError { key, message: message() }) }
}

fn check_range(
    value: f64,
    low: f64,
    high: f64,
    key: &'static str,
) -> Result<(), SyntheticConfigError> {
    check(value.is_finite() && (low..=high).contains(&value), key, || {
        format!("{value} is not in [{low}, {high}]")
    })
}

impl SyntheticConfig {
    /// Checks every knob against its documented range.
    pub fn validate(&self) -> Result<(), SyntheticConfigError> {
        check((1..=SERVERS_MAX).contains(&self.servers), "servers", || {
            format!("{} is not in 1..={SERVERS_MAX}", self.servers)
        })?;
        check((1..=SERVERS_MAX).contains(&self.volumes_per_server), "volumes_per_server", || {
            format!("{} is not in 1..={SERVERS_MAX}", self.volumes_per_server)
        })?;
        let volumes = u64::from(self.servers) * u64::from(self.volumes_per_server);
        check(volumes <= VOLUMES_MAX as u64, "volumes_per_server", || {
            format!("{volumes} volumes exceed {VOLUMES_MAX}")
        })?;
        check(name_ok(&self.server_prefix), "server_prefix", || {
            format!("{:?}: {NAME_RULE}", self.server_prefix)
        })?;
        check(self.duration_s > 0.0, "duration_s", || "must be positive".to_owned())?;
        check_range(self.duration_s, 0.0, DURATION_S_MAX, "duration_s")?;
        check_range(self.mean_rate_per_s, 0.0, RATE_PER_S_MAX, "mean_rate_per_s")?;
        check_range(self.rate_spread, 0.0, 4.0, "rate_spread")?;
        check_range(self.diurnal_amplitude, 0.0, 1.0, "diurnal_amplitude")?;
        check_range(self.peak_hour, 0.0, 24.0, "peak_hour")?;
        check_range(self.rate_step_s, 1.0, 86_400.0, "rate_step_s")?;
        check_range(self.read_fraction, 0.0, 1.0, "read_fraction")?;
        check_range(self.read_fraction_spread, 0.0, 1.0, "read_fraction_spread")?;
        self.validate_sizes()?;
        check_range(self.burst_factor, 1.0, 1_000.0, "burst_factor")?;
        check_range(self.burst_fraction, 0.0, 0.99, "burst_fraction")?;
        check_range(self.burst_mean_s, 0.001, DURATION_S_MAX, "burst_mean_s")?;
        check_range(self.sequential_fraction, 0.0, 1.0, "sequential_fraction")?;
        check_range(self.hot_fraction, 0.0, 1.0, "hot_fraction")?;
        check(self.hot_region_fraction > 0.0, "hot_region_fraction", || {
            "must be positive".to_owned()
        })?;
        check_range(self.hot_region_fraction, 0.0, 1.0, "hot_region_fraction")?;
        check_range(self.idle_gap_probability, 0.0, 1.0, "idle_gap_probability")?;
        check_range(self.idle_gap_mean_s, 0.0, DURATION_S_MAX, "idle_gap_mean_s")?;
        check_range(self.idle_volume_rate_factor, 0.0, 1.0, "idle_volume_rate_factor")?;
        check(self.read_session_fraction > 0.0, "read_session_fraction", || {
            "must be positive".to_owned()
        })?;
        check_range(self.read_session_fraction, 0.0, 1.0, "read_session_fraction")?;
        check_range(self.read_session_spread, 0.0, 4.0, "read_session_spread")?;
        check_range(self.read_session_mean_s, 0.001, DURATION_S_MAX, "read_session_mean_s")?;
        check_range(self.weekend_factor, 0.0, 1_000.0, "weekend_factor")?;
        self.validate_named_servers()
    }

    fn validate_named_servers(&self) -> Result<(), SyntheticConfigError> {
        let mut volumes = 0u64;
        for (index, server) in self.named_servers.iter().enumerate() {
            let name = &server.name;
            check(name_ok(name), "named_servers", || {
                format!("server {index}: name {name:?}: {NAME_RULE}")
            })?;
            check(
                !self.named_servers[..index].iter().any(|s| s.name == *name),
                "named_servers",
                || format!("server {index}: name {name:?} appears twice"),
            )?;
            check(server.volumes >= 1, "named_servers", || {
                format!("server {index} ({name}): volumes must be at least 1")
            })?;
            volumes += u64::from(server.volumes);
        }
        check(volumes <= VOLUMES_MAX as u64, "named_servers", || {
            format!("{volumes} volumes exceed {VOLUMES_MAX}")
        })
    }

    fn validate_sizes(&self) -> Result<(), SyntheticConfigError> {
        check(!self.sizes.is_empty() && self.sizes.len() <= SIZES_MAX, "sizes", || {
            format!("needs 1 to {SIZES_MAX} entries")
        })?;
        for size in &self.sizes {
            let bytes = size.size_bytes;
            let aligned = bytes > 0
                && u64::from(bytes).is_multiple_of(SECTOR_BYTES)
                && bytes <= SIZE_BYTES_MAX;
            check(aligned, "sizes", || {
                format!(
                    "size_bytes {bytes} is not a positive multiple of 512 up to {SIZE_BYTES_MAX}"
                )
            })?;
            check_range(size.weight, 0.0, f64::MAX, "sizes")?;
        }
        check(self.sizes.iter().map(|s| s.weight).sum::<f64>() > 0.0, "sizes", || {
            "the weights sum to 0".to_owned()
        })?;
        let largest = self.sizes.iter().map(|s| u64::from(s.size_bytes)).max().unwrap_or(0);
        check(
            self.capacity_bytes.is_multiple_of(SECTOR_BYTES) && self.capacity_bytes >= largest,
            "capacity_bytes",
            || {
                format!(
                    "{} is not a multiple of 512 at least the largest size {largest}",
                    self.capacity_bytes
                )
            },
        )
    }

    /// The volume names, in id order: `{name}_{index}` of each named server, or
    /// `{prefix}{server:02}_{index}` without named servers.
    fn volume_names(&self) -> Vec<String> {
        if !self.named_servers.is_empty() {
            return self
                .named_servers
                .iter()
                .flat_map(|server| (0..server.volumes).map(move |i| format!("{}_{i}", server.name)))
                .collect();
        }
        (0..self.servers)
            .flat_map(move |server| {
                (0..self.volumes_per_server)
                    .map(move |index| format!("{}{server:02}_{index}", self.server_prefix))
            })
            .collect()
    }

    /// Whether reads and writes are separate streams (reads in sessions).
    fn split_reads(&self) -> bool {
        self.read_session_fraction < 1.0
    }
}

/// A measured load curve: rate multipliers over consecutive steps, normalized to a
/// mean of 1 and repeated if the trace is longer than the curve.
#[derive(Clone, Debug, PartialEq)]
pub struct RateCurve {
    step_ns: u64,
    multipliers: Vec<f64>,
}

impl RateCurve {
    /// A curve of `loads` (any non-negative unit, e.g. requests per window) over steps
    /// of `step_s` seconds.
    pub fn new(step_s: f64, loads: &[f64]) -> Result<RateCurve, SyntheticConfigError> {
        check_range(step_s, 1.0, 86_400.0 * 366.0, "rate_curve")?;
        check(!loads.is_empty() && loads.len() <= RATE_CURVE_STEPS_MAX, "rate_curve", || {
            format!("needs 1 to {RATE_CURVE_STEPS_MAX} steps, has {}", loads.len())
        })?;
        for &load in loads {
            check(load.is_finite() && load >= 0.0, "rate_curve", || {
                format!("load {load} is not a non-negative number")
            })?;
        }
        let mean = loads.iter().sum::<f64>() / loads.len() as f64;
        check(mean > 0.0, "rate_curve", || "every load is 0".to_owned())?;
        let multipliers = loads.iter().map(|load| load / mean).collect();
        Ok(RateCurve { step_ns: (step_s * NANOS_PER_SECOND) as u64, multipliers })
    }

    /// The step length in nanoseconds.
    pub fn step_ns(&self) -> u64 {
        self.step_ns
    }

    /// The multipliers (mean 1), one per step.
    pub fn multipliers(&self) -> &[f64] {
        &self.multipliers
    }
}

/// Knobs turned into the numbers the streams use, shared by all volumes.
struct Shape {
    duration_ns: u64,
    start_ns: u64,
    step_ns: u64,
    /// Multiplier per step of one day (cosine) or of the whole rate curve.
    curve: Vec<f64>,
    burst_on_multiplier: f64,
    burst_off_multiplier: f64,
    burst_on_mean_ns: f64,
    burst_off_mean_ns: f64,
    bursts: bool,
    idle_gap_probability: f64,
    idle_gap_mean_ns: f64,
    size_cumulative: Vec<(f64, u32)>,
    sequential_fraction: f64,
    hot_fraction: f64,
    hot_region_bytes: u64,
    capacity_bytes: u64,
}

impl Shape {
    fn new(config: &SyntheticConfig) -> Shape {
        let start_ns = config.start_unix_s.map_or(0, |s| s.saturating_mul(1_000_000_000));
        let (step_ns, curve) = match &config.rate_curve {
            Some(curve) => (curve.step_ns.max(1), curve.multipliers.clone()),
            None => diurnal_curve(config, start_ns),
        };
        let p = config.burst_fraction;
        let b = config.burst_factor;
        let norm = 1.0 - p + p * b;
        let bursts = b > 1.0 && p > 0.0;
        let total_weight: f64 = config.sizes.iter().map(|s| s.weight).sum();
        let mut running = 0.0;
        let size_cumulative = config
            .sizes
            .iter()
            .map(|s| {
                running += s.weight / total_weight;
                (running, s.size_bytes)
            })
            .collect();
        let hot = (config.capacity_bytes as f64 * config.hot_region_fraction) as u64 / SECTOR_BYTES
            * SECTOR_BYTES;
        Shape {
            duration_ns: (config.duration_s * NANOS_PER_SECOND) as u64,
            start_ns,
            step_ns,
            curve,
            burst_on_multiplier: b / norm,
            burst_off_multiplier: 1.0 / norm,
            burst_on_mean_ns: config.burst_mean_s * NANOS_PER_SECOND,
            burst_off_mean_ns: if p > 0.0 {
                config.burst_mean_s * (1.0 - p) / p * NANOS_PER_SECOND
            } else {
                f64::INFINITY
            },
            bursts,
            idle_gap_probability: config.idle_gap_probability,
            idle_gap_mean_ns: config.idle_gap_mean_s * NANOS_PER_SECOND,
            size_cumulative,
            sequential_fraction: config.sequential_fraction,
            hot_fraction: config.hot_fraction,
            hot_region_bytes: hot.max(SECTOR_BYTES),
            capacity_bytes: config.capacity_bytes,
        }
    }

    /// The curve multiplier in force at relative time `t_ns`, and when it changes.
    fn curve_at(&self, t_ns: u64) -> (f64, u64) {
        let step = t_ns / self.step_ns;
        let multiplier = self.curve[(step % self.curve.len() as u64) as usize];
        (multiplier, (step + 1).saturating_mul(self.step_ns))
    }
}

/// One day (a week with a weekend factor) of the cosine curve, in steps, aligned so
/// step 0 starts at relative time 0.
pub(crate) fn diurnal_curve(config: &SyntheticConfig, start_ns: u64) -> (u64, Vec<f64>) {
    let step_ns = ((config.rate_step_s * NANOS_PER_SECOND) as u64).max(1);
    let weekly = config.weekend_factor != 1.0;
    let period_ns = if weekly { WEEK_NS } else { DAY_NS };
    // Whole periods of steps only when the step divides a day; else a curve as long as the run.
    let steps = if DAY_NS.is_multiple_of(step_ns) {
        period_ns / step_ns
    } else {
        ((config.duration_s * NANOS_PER_SECOND) as u64 / step_ns + 1)
            .min(RATE_CURVE_STEPS_MAX as u64)
    };
    let curve = (0..steps)
        .map(|step| {
            let middle_ns = start_ns.wrapping_add(step * step_ns + step_ns / 2);
            let hour = (middle_ns % DAY_NS) as f64 / HOUR_NS as f64;
            let phase = 2.0 * std::f64::consts::PI * (hour - config.peak_hour) / 24.0;
            // Day 0 of Unix time was a Thursday: days 2 and 3 (mod 7) are the weekend.
            let weekend = matches!((middle_ns / DAY_NS) % 7, 2 | 3);
            let week = if weekend { config.weekend_factor } else { 1.0 };
            (1.0 + config.diurnal_amplitude * phase.cos()) * week
        })
        .collect();
    (step_ns, curve)
}

/// The on/off read sessions of a read stream.
#[derive(Clone, Copy)]
struct Sessions {
    on: bool,
    switch_ns: u64,
    on_mean_ns: f64,
    off_mean_ns: f64,
    /// Rate multiplier while on, so that the mean rate is kept: 1 / (share of time on).
    on_multiplier: f64,
}

/// One volume's arrival process and request shape: all its requests, or with split
/// reads, its reads or its writes.
struct VolumeStream {
    rng: Pcg64,
    volume: VolumeId,
    base_rate_per_ns: f64,
    read_fraction: f64,
    /// `Some` for a stream of one kind only; `None` draws each kind by `read_fraction`.
    kind: Option<IoKind>,
    sessions: Option<Sessions>,
    hot_start_bytes: u64,
    last_end_bytes: u64,
    now_ns: u64,
    /// The current constant-rate piece: its rate and end.
    rate_per_ns: f64,
    piece_end_ns: u64,
    burst_on: bool,
    burst_switch_ns: u64,
    idle_until_ns: u64,
    next_idle_check_ns: u64,
    /// With split reads, idle gaps are drawn from a generator of the volume's own,
    /// which its two streams replay identically, so that a gap silences both.
    idle_rng: Option<Pcg64>,
}

impl VolumeStream {
    fn new(
        config: &SyntheticConfig,
        shape: &Shape,
        seed: u64,
        volume: VolumeId,
        mostly_idle: bool,
        strata: Option<&Strata>,
    ) -> VolumeStream {
        let mut rng = Pcg64::seed_from_u64(mix(seed, u64::from(volume.0)));
        let sigma = config.rate_spread;
        let mut normal = standard_normal(&mut rng);
        let mut uniform = rng.random::<f64>();
        if let Some(strata) = strata {
            normal = strata.rate_normal[volume.index()].unwrap_or(normal);
            uniform = strata.read_uniform[volume.index()].unwrap_or(uniform);
        }
        let lognormal = (sigma * normal - sigma * sigma / 2.0).exp();
        let idle_factor = if mostly_idle { config.idle_volume_rate_factor } else { 1.0 };
        let base_rate_per_ns = config.mean_rate_per_s * lognormal * idle_factor / NANOS_PER_SECOND;
        let spread = config.read_fraction_spread * (2.0 * uniform - 1.0);
        let read_fraction = (config.read_fraction + spread).clamp(0.0, 1.0);
        let hot_slots = (shape.capacity_bytes - shape.hot_region_bytes.min(shape.capacity_bytes))
            / SECTOR_BYTES;
        let hot_start_bytes = (rng.random::<f64>() * hot_slots as f64) as u64 * SECTOR_BYTES;
        let burst_switch_ns =
            if shape.bursts { exponential(&mut rng, shape.burst_off_mean_ns) } else { u64::MAX };
        let mut stream = VolumeStream {
            base_rate_per_ns,
            read_fraction,
            ..VolumeStream::at_start(rng, volume, hot_start_bytes, burst_switch_ns)
        };
        stream.start_piece(shape);
        stream
    }

    /// A stream at time 0 with no rate yet, outside bursts, sessions and idle gaps.
    fn at_start(
        rng: Pcg64,
        volume: VolumeId,
        hot_start_bytes: u64,
        burst_switch_ns: u64,
    ) -> VolumeStream {
        VolumeStream {
            rng,
            volume,
            base_rate_per_ns: 0.0,
            read_fraction: 0.0,
            kind: None,
            sessions: None,
            hot_start_bytes,
            last_end_bytes: 0,
            now_ns: 0,
            rate_per_ns: 0.0,
            piece_end_ns: 0,
            burst_on: false,
            burst_switch_ns,
            idle_until_ns: 0,
            next_idle_check_ns: HOUR_NS,
            idle_rng: None,
        }
    }

    /// Splits a mixed stream into its writes (this stream's random sequence) and its
    /// reads (a sequence of their own, arriving in sessions), with the same mean
    /// rates and hot region.
    fn split(
        mut self,
        config: &SyntheticConfig,
        shape: &Shape,
        seed: u64,
        strata: Option<&Strata>,
    ) -> (VolumeStream, VolumeStream) {
        let mut rng = Pcg64::seed_from_u64(mix(seed ^ READ_STREAM_SALT, u64::from(self.volume.0)));
        let idle_rng = Pcg64::seed_from_u64(mix(seed ^ IDLE_SALT, u64::from(self.volume.0)));
        let sigma = config.read_session_spread;
        let mut normal = standard_normal(&mut rng);
        if let Some(strata) = strata {
            normal = strata.session_normal[self.volume.index()].unwrap_or(normal);
        }
        let lognormal = (sigma * normal - sigma * sigma / 2.0).exp();
        let share = (config.read_session_fraction * lognormal).clamp(SESSION_SHARE_MIN, 1.0);
        let on_mean_ns = config.read_session_mean_s * NANOS_PER_SECOND;
        let off_mean_ns = on_mean_ns * (1.0 - share) / share;
        let on = rng.random::<f64>() < share;
        let switch_ns = exponential(&mut rng, if on { on_mean_ns } else { off_mean_ns });
        let burst_switch_ns =
            if shape.bursts { exponential(&mut rng, shape.burst_off_mean_ns) } else { u64::MAX };
        let mut reads = VolumeStream {
            base_rate_per_ns: self.base_rate_per_ns * self.read_fraction,
            read_fraction: 1.0,
            kind: Some(IoKind::Read),
            sessions: (share < 1.0).then_some(Sessions {
                on,
                switch_ns,
                on_mean_ns,
                off_mean_ns,
                on_multiplier: 1.0 / share,
            }),
            idle_rng: Some(idle_rng.clone()),
            ..VolumeStream::at_start(rng, self.volume, self.hot_start_bytes, burst_switch_ns)
        };
        reads.start_piece(shape);
        self.base_rate_per_ns *= 1.0 - self.read_fraction;
        self.read_fraction = 0.0;
        self.kind = Some(IoKind::Write);
        // No idle gap has been drawn yet (the first check is an hour in).
        debug_assert_eq!(self.idle_until_ns, 0);
        self.idle_rng = Some(idle_rng);
        self.start_piece(shape);
        (self, reads)
    }

    /// Starts the constant-rate piece at `now_ns`: updates burst, session and idle
    /// states that change here, then computes the piece's rate and end.
    fn start_piece(&mut self, shape: &Shape) {
        let mut session = (1.0, u64::MAX);
        if let Some(sessions) = &mut self.sessions {
            if self.now_ns >= sessions.switch_ns {
                sessions.on = !sessions.on;
                let mean = if sessions.on { sessions.on_mean_ns } else { sessions.off_mean_ns };
                sessions.switch_ns =
                    self.now_ns.saturating_add(exponential(&mut self.rng, mean).max(1));
            }
            session = (if sessions.on { sessions.on_multiplier } else { 0.0 }, sessions.switch_ns);
        }
        if self.now_ns >= self.burst_switch_ns {
            self.burst_on = !self.burst_on;
            let mean = if self.burst_on { shape.burst_on_mean_ns } else { shape.burst_off_mean_ns };
            self.burst_switch_ns =
                self.now_ns.saturating_add(exponential(&mut self.rng, mean).max(1));
        }
        if self.now_ns >= self.next_idle_check_ns {
            self.next_idle_check_ns = self.next_idle_check_ns.saturating_add(HOUR_NS);
            let rng = self.idle_rng.as_mut().unwrap_or(&mut self.rng);
            if self.now_ns >= self.idle_until_ns && rng.random::<f64>() < shape.idle_gap_probability
            {
                self.idle_until_ns =
                    self.now_ns.saturating_add(exponential(rng, shape.idle_gap_mean_ns));
            }
        }
        let (curve, curve_end_ns) = shape.curve_at(self.now_ns);
        let burst = if !shape.bursts {
            1.0
        } else if self.burst_on {
            shape.burst_on_multiplier
        } else {
            shape.burst_off_multiplier
        };
        let idle = self.now_ns < self.idle_until_ns;
        self.rate_per_ns =
            if idle { 0.0 } else { self.base_rate_per_ns * curve * burst * session.0 };
        let idle_end = if idle { self.idle_until_ns } else { u64::MAX };
        self.piece_end_ns = curve_end_ns
            .min(self.burst_switch_ns)
            .min(session.1)
            .min(self.next_idle_check_ns)
            .min(idle_end)
            .min(shape.duration_ns);
        assert!(
            self.piece_end_ns > self.now_ns || self.now_ns >= shape.duration_ns,
            "pieces advance time"
        );
    }

    /// The next arrival time (relative), or `None` at the end of the run.
    fn next_arrival(&mut self, shape: &Shape) -> Option<u64> {
        if self.base_rate_per_ns <= 0.0 {
            // A volume with no load never has an arrival; skip walking its pieces.
            return None;
        }
        while self.now_ns < shape.duration_ns {
            if self.rate_per_ns > 0.0 {
                let gap_ns = -(1.0 - self.rng.random::<f64>()).ln() / self.rate_per_ns;
                let candidate = self.now_ns as f64 + gap_ns;
                if candidate < self.piece_end_ns as f64 {
                    self.now_ns = (candidate as u64).max(self.now_ns);
                    return Some(self.now_ns);
                }
            }
            // No arrival in this piece: by memorylessness, restart at its end.
            self.now_ns = self.piece_end_ns;
            if self.now_ns < shape.duration_ns {
                self.start_piece(shape);
            }
        }
        None
    }

    fn request(&mut self, shape: &Shape, timestamp_ns: u64) -> Request {
        let kind = match self.kind {
            Some(kind) => kind,
            None if self.rng.random::<f64>() < self.read_fraction => IoKind::Read,
            None => IoKind::Write,
        };
        let draw = self.rng.random::<f64>();
        let size_bytes = shape
            .size_cumulative
            .iter()
            .find(|(cumulative, _)| draw < *cumulative)
            .map_or(shape.size_cumulative[shape.size_cumulative.len() - 1].1, |&(_, size)| size);
        let size = u64::from(size_bytes);
        let sequential = self.rng.random::<f64>() < shape.sequential_fraction;
        let offset_bytes = if sequential && self.last_end_bytes + size <= shape.capacity_bytes {
            self.last_end_bytes
        } else if self.rng.random::<f64>() < shape.hot_fraction {
            let hot_end = (self.hot_start_bytes + shape.hot_region_bytes).min(shape.capacity_bytes);
            let region_start = self.hot_start_bytes.min(hot_end.saturating_sub(size));
            self.aligned_in(region_start, hot_end.max(region_start + size) - size)
        } else {
            self.aligned_in(0, shape.capacity_bytes - size)
        };
        self.last_end_bytes = offset_bytes + size;
        assert_eq!(offset_bytes % SECTOR_BYTES, 0, "offsets are sector aligned");
        assert!(
            offset_bytes + size <= shape.capacity_bytes.max(size),
            "requests stay in the volume"
        );
        Request {
            timestamp: TraceTimestamp(shape.start_ns + timestamp_ns),
            volume: self.volume,
            offset_bytes,
            size_bytes,
            kind,
        }
    }

    /// A sector-aligned offset in `[low, high]`, both aligned.
    fn aligned_in(&mut self, low: u64, high: u64) -> u64 {
        let slots = (high.saturating_sub(low)) / SECTOR_BYTES + 1;
        let slot = ((self.rng.random::<f64>() * slots as f64) as u64).min(slots - 1);
        low + slot * SECTOR_BYTES
    }
}

/// Per-volume draws from evenly spaced quantiles (see `SyntheticConfig::stratify`).
struct Strata {
    rate_normal: Vec<Option<f64>>,
    read_uniform: Vec<Option<f64>>,
    session_normal: Vec<Option<f64>>,
}

impl Strata {
    /// Deals the quantiles `(i + 1/2) / n` to the `n` volumes whose `dealt` is true;
    /// the others keep their own independent draws (`None`).
    fn new(dealt: &[bool], seed: u64) -> Strata {
        let mut rng = Pcg64::seed_from_u64(mix(seed ^ STRATA_SALT, 0));
        let n = dealt.iter().filter(|&&d| d).count();
        let mut quantiles = || {
            let mut values: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) / n as f64).collect();
            for i in (1..values.len()).rev() {
                values.swap(i, rng.random_range(0..=i));
            }
            let mut values = values.into_iter();
            dealt.iter().map(|&d| if d { values.next() } else { None }).collect::<Vec<_>>()
        };
        let normal = |values: Vec<Option<f64>>| -> Vec<Option<f64>> {
            values.into_iter().map(|q| q.map(normal_quantile)).collect()
        };
        let rate_normal = normal(quantiles());
        let read_uniform = quantiles();
        let session_normal = normal(quantiles());
        Strata { rate_normal, read_uniform, session_normal }
    }
}

/// The standard normal quantile of `p` in (0, 1): Acklam's rational approximation
/// (relative error below 1.2e-9), plenty for drawing rates.
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// A 64-bit mix (splitmix64's finalizer) of the run seed and a volume index, so that
/// each volume's stream is independent of the others and of the volume count.
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A standard normal draw (Box-Muller).
fn standard_normal(rng: &mut Pcg64) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// An exponential draw with the given mean, in whole nanoseconds.
fn exponential(rng: &mut Pcg64, mean_ns: f64) -> u64 {
    let draw = -(1.0 - rng.random::<f64>()).ln() * mean_ns;
    if draw.is_finite() { draw as u64 } else { u64::MAX }
}

/// A synthetic trace: a [`VolumeTable`] and an iterator of requests in non-decreasing
/// time order (ties by volume id). The same config and seed give the same requests.
pub struct SyntheticTrace {
    volumes: VolumeTable,
    time_base: TimeBase,
    shape: Shape,
    /// One stream per volume, or with split reads two: writes at `2v`, reads at `2v + 1`.
    streams: Vec<VolumeStream>,
    /// (next arrival, stream index) of every stream that has one.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl SyntheticTrace {
    /// Builds the generator. Each volume's stream is seeded from `seed` and its index.
    pub fn new(
        config: &SyntheticConfig,
        seed: u64,
    ) -> Result<SyntheticTrace, SyntheticConfigError> {
        config.validate()?;
        let mut volumes = VolumeTable::new();
        let names_key =
            if config.named_servers.is_empty() { "server_prefix" } else { "named_servers" };
        for name in config.volume_names() {
            volumes.intern(&name).map_err(|error| SyntheticConfigError {
                key: names_key,
                message: error.to_string(),
            })?;
        }
        let mut idle = vec![false; volumes.len()];
        for name in &config.idle_volumes {
            let id = volumes.id(name).ok_or_else(|| SyntheticConfigError {
                key: "idle_volumes",
                message: format!(
                    "{name:?} is not a volume of this config (names look like {})",
                    volumes.name(VolumeId(0)).unwrap_or("")
                ),
            })?;
            idle[id.index()] = true;
        }
        let shape = Shape::new(config);
        let busy: Vec<bool> = idle.iter().map(|&i| !i).collect();
        let strata = config.stratify.then(|| Strata::new(&busy, seed));
        let mut streams = Vec::with_capacity(volumes.len() * 2);
        for (id, _) in volumes.iter() {
            let stream =
                VolumeStream::new(config, &shape, seed, id, idle[id.index()], strata.as_ref());
            if config.split_reads() {
                let (writes, reads) = stream.split(config, &shape, seed, strata.as_ref());
                streams.push(writes);
                streams.push(reads);
            } else {
                streams.push(stream);
            }
        }
        let mut heap = BinaryHeap::with_capacity(streams.len());
        for (index, stream) in (0u32..).zip(streams.iter_mut()) {
            if let Some(arrival) = stream.next_arrival(&shape) {
                heap.push(Reverse((arrival, index)));
            }
        }
        let time_base =
            if config.start_unix_s.is_some() { TimeBase::UnixEpoch } else { TimeBase::Relative };
        Ok(SyntheticTrace { volumes, time_base, shape, streams, heap })
    }

    /// The volumes, `{server}_{index}` in server-major order.
    pub fn volumes(&self) -> &VolumeTable {
        &self.volumes
    }

    /// Absolute if the config set `start_unix_s`, else relative.
    pub fn time_base(&self) -> TimeBase {
        self.time_base
    }
}

impl Iterator for SyntheticTrace {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let Reverse((arrival_ns, index)) = self.heap.pop()?;
        let stream = &mut self.streams[index as usize];
        let request = stream.request(&self.shape, arrival_ns);
        if let Some(next_ns) = stream.next_arrival(&self.shape) {
            debug_assert!(next_ns >= arrival_ns);
            self.heap.push(Reverse((next_ns, index)));
        }
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_name_volumes() {
        // Goal: the default config is valid and names volumes s00_0 .. s03_2.
        let trace = SyntheticTrace::new(&SyntheticConfig::default(), 1).unwrap();
        assert_eq!(trace.volumes().len(), 12);
        assert_eq!(trace.volumes().name(VolumeId(0)), Some("s00_0"));
        assert_eq!(trace.volumes().name(VolumeId(11)), Some("s03_2"));
    }

    #[test]
    fn normal_quantile_matches_the_table() {
        // Goal: the quantile function behind stratified draws is the standard normal's,
        // checked against published values in the centre and both tails.
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_985),
            (0.01, -2.326_347_874),
            (0.001, -3.090_232_306),
            (0.8413447461, 1.0),
            (0.99, 2.326_347_874),
            (0.999, 3.090_232_306),
        ] {
            assert!((normal_quantile(p) - z).abs() < 1e-6, "p {p}: {}", normal_quantile(p));
        }
        assert!(normal_quantile(1e-300).is_finite() && normal_quantile(1.0).is_finite());
    }

    #[test]
    fn bad_knobs_name_their_key() {
        // Goal: an out-of-range knob is refused with its key.
        let config = SyntheticConfig {
            sizes: vec![SizeWeight { size_bytes: 1000, weight: 1.0 }],
            ..SyntheticConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().key, "sizes");
        let config = SyntheticConfig { diurnal_amplitude: 1.5, ..SyntheticConfig::default() };
        assert_eq!(config.validate().unwrap_err().key, "diurnal_amplitude");
        let config =
            SyntheticConfig { idle_volumes: vec!["nope".into()], ..SyntheticConfig::default() };
        assert_eq!(SyntheticTrace::new(&config, 0).err().unwrap().key, "idle_volumes");
        for (config, key) in [
            (
                SyntheticConfig { read_session_fraction: 0.0, ..Default::default() },
                "read_session_fraction",
            ),
            (
                SyntheticConfig { read_session_fraction: f64::NAN, ..Default::default() },
                "read_session_fraction",
            ),
            (
                SyntheticConfig { read_session_spread: 5.0, ..Default::default() },
                "read_session_spread",
            ),
            (
                SyntheticConfig { read_session_mean_s: 0.0, ..Default::default() },
                "read_session_mean_s",
            ),
            (SyntheticConfig { weekend_factor: -1.0, ..Default::default() }, "weekend_factor"),
            (
                SyntheticConfig { server_prefix: "a b".into(), ..Default::default() },
                "server_prefix",
            ),
            (
                SyntheticConfig {
                    named_servers: vec![NamedServer { name: "a,b".into(), volumes: 1 }],
                    ..Default::default()
                },
                "named_servers",
            ),
        ] {
            assert_eq!(config.validate().unwrap_err().key, key);
        }
    }
}
