//! Generated load series in the load file's format, seeded: a diurnal curve with noise,
//! and the same curve with a flash crowd and a holiday that no past day foretells
//! (Sierra 3.5 names both as what a predictor alone misses).

use std::io::Write;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use crate::load::{HEADER_PREFIX, LoadSeries, LoadWindow};
use crate::synthetic::{SyntheticConfig, diurnal_curve};

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadGenSpec {
    pub days: u32,
    /// Window length in seconds (the shipped series has 1800).
    pub window_s: u32,
    /// Requests per second at the daily peak.
    pub peak_iops: f64,
    /// The trough as a share of the peak.
    pub trough: f64,
    /// Each window's load times 1 + noise * a uniform draw in -1..1.
    pub noise: f64,
    pub read_share: f64,
    pub request_bytes: u64,
}

impl Default for LoadGenSpec {
    fn default() -> LoadGenSpec {
        LoadGenSpec {
            days: 7,
            window_s: 1800,
            peak_iops: 2000.0,
            trough: 0.15,
            noise: 0.05,
            read_share: 0.6,
            request_bytes: 16 << 10,
        }
    }
}

/// The surprises put into the `surprise` workload: days and windows, for reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Surprises {
    /// The day whose load is a third of the usual.
    pub holiday: u32,
    /// The day, first window and length in windows of a crowd at the daily peak's
    /// level, in what is usually the trough.
    pub crowd_day: u32,
    pub crowd_window: u32,
    pub crowd_windows: u32,
}

/// Two workloads: `diurnal` (the curve with noise) and `surprise` (the same draws, with
/// a holiday and a flash crowd on two different days from day 2 on, so the predictor
/// has two days of history first). Needs at least 4 days.
pub fn generate_load(spec: &LoadGenSpec, seed: u64) -> (LoadSeries, Surprises) {
    let days = spec.days.max(4);
    let per_day = (86_400 / spec.window_s.max(1)).max(1);
    let mut rng = Pcg64::seed_from_u64(seed);
    let holiday = rng.random_range(2..days);
    let mut crowd_day = rng.random_range(2..days - 1);
    if crowd_day >= holiday {
        crowd_day += 1;
    }
    // The trough is around 04:00; the crowd starts between 01:00 and 05:00.
    let hour = f64::from(per_day) / 24.0;
    let crowd_window = (hour * rng.random_range(1.0..5.0)) as u32;
    let surprises =
        Surprises { holiday, crowd_day, crowd_window, crowd_windows: (2.0 * hour).ceil() as u32 };
    let levels = daily_levels(spec);
    let mut series = LoadSeries::default();
    for index in 0..days * per_day {
        let (day, slot) = (index / per_day, index % per_day);
        let level = levels[slot as usize % levels.len()];
        let noise = 1.0 + spec.noise * rng.random_range(-1.0..1.0);
        let iops = spec.peak_iops * level * noise;
        series.push("diurnal", window(spec, index, iops));
        let surprise = if day == holiday {
            iops / 3.0
        } else if day == crowd_day
            && (crowd_window..crowd_window + surprises.crowd_windows).contains(&slot)
        {
            spec.peak_iops * noise
        } else {
            iops
        };
        series.push("surprise", window(spec, index, surprise));
    }
    (series, surprises)
}

/// Each window's share of the peak over one day: the synthetic generator's daily
/// cosine, peaking at 16:00 with the trough (04:00) at `spec.trough`, taken at each
/// window's start.
fn daily_levels(spec: &LoadGenSpec) -> Vec<f64> {
    let amplitude = (1.0 - spec.trough) / (1.0 + spec.trough);
    let config = SyntheticConfig {
        diurnal_amplitude: amplitude,
        peak_hour: 16.0,
        rate_step_s: f64::from(spec.window_s.max(1)),
        weekend_factor: 1.0,
        ..SyntheticConfig::default()
    };
    // The curve is taken at each step's middle: start half a window early.
    const DAY_NS: u64 = 86_400_000_000_000;
    let half_window_ns = u64::from(spec.window_s.max(1)) * 500_000_000;
    let (_, curve) = diurnal_curve(&config, DAY_NS - half_window_ns);
    curve.iter().map(|m| m / (1.0 + amplitude)).collect()
}

fn window(spec: &LoadGenSpec, index: u32, iops: f64) -> LoadWindow {
    let requests = (iops.max(0.0) * f64::from(spec.window_s)).round() as u64;
    let reads = (requests as f64 * spec.read_share).round() as u64;
    let writes = requests - reads.min(requests);
    LoadWindow {
        window_index: index,
        window_end_us: u64::from(index + 1) * u64::from(spec.window_s) * 1_000_000,
        request_count: requests,
        read_request_count: reads,
        write_request_count: writes,
        read_bytes: Some(reads * spec.request_bytes),
        write_bytes: Some(writes * spec.request_bytes),
    }
}

/// Writes `series` in the load file's format (with the byte columns).
pub fn write_load(series: &LoadSeries, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{HEADER_PREFIX},io_request_size_sum,read_io_request_size_sum,write_io_request_size_sum"
    )?;
    for name in series.workloads() {
        for w in series.windows(name).unwrap_or_default() {
            let (read, write) = (w.read_bytes.unwrap_or(0), w.write_bytes.unwrap_or(0));
            writeln!(
                out,
                "{name},{},{},{},{},{},{},{read},{write}",
                w.window_index,
                w.window_end_us,
                w.request_count,
                w.read_request_count,
                w.write_request_count,
                read + write
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_series_has_its_surprises_and_reads_back() {
        // Goal: same seed, same series; the holiday is a third of the diurnal day, the
        // crowd reaches the peak in the trough; the file written parses to the same.
        let spec = LoadGenSpec::default();
        let (series, surprises) = generate_load(&spec, 7);
        assert_eq!(generate_load(&spec, 7).0, series);
        assert_ne!(surprises.holiday, surprises.crowd_day);
        assert!(surprises.holiday >= 2 && surprises.crowd_day >= 2);
        let diurnal = series.windows("diurnal").unwrap();
        let surprise = series.windows("surprise").unwrap();
        assert_eq!(diurnal.len(), 7 * 48);
        let day_sum = |w: &[LoadWindow], day: u32| -> u64 {
            w[day as usize * 48..(day as usize + 1) * 48].iter().map(|w| w.request_count).sum()
        };
        let ratio = day_sum(surprise, surprises.holiday) as f64
            / day_sum(diurnal, surprises.holiday) as f64;
        assert!((ratio - 1.0 / 3.0).abs() < 0.01, "{ratio}");
        let crowd = (surprises.crowd_day * 48 + surprises.crowd_window) as usize;
        assert!(surprise[crowd].request_count > 3 * diurnal[crowd].request_count);
        let mut text = Vec::new();
        write_load(&series, &mut text).unwrap();
        let back = LoadSeries::parse(text.as_slice(), std::path::Path::new("gen.csv")).unwrap();
        assert_eq!(back, series);
    }
}
