//! The synthetic generator: deterministic for a seed, and its output follows its
//! knobs (read fraction, daily and weekly shape, sizes and alignment, load curves, idle
//! volumes, read sessions, named servers, stratified draws, the built-in preset).
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use somnus_trace::stats::{self, StatsOptions, StatsReport, StatsSpan};
use somnus_trace::synthetic::{NamedServer, RateCurve, SizeWeight};
use somnus_trace::{Request, SyntheticConfig, SyntheticTrace, TimeBase, TraceTimestamp};
use somnus_types::IoKind;

const S: u64 = 1_000_000_000;

fn generate(config: &SyntheticConfig, seed: u64) -> Vec<Request> {
    SyntheticTrace::new(config, seed).unwrap().collect()
}

fn quiet() -> SyntheticConfig {
    // No bursts, idle gaps, spread or daily cycle: a plain Poisson process per volume.
    SyntheticConfig {
        rate_spread: 0.0,
        diurnal_amplitude: 0.0,
        burst_factor: 1.0,
        idle_gap_probability: 0.0,
        read_fraction_spread: 0.0,
        ..SyntheticConfig::default()
    }
}

#[test]
fn same_seed_same_requests_other_seed_other_requests() {
    // Goal: the generator is a pure function of config and seed.
    let config = SyntheticConfig { duration_s: 3_600.0, ..SyntheticConfig::default() };
    let first = generate(&config, 42);
    assert!(first.len() > 1_000, "{} requests", first.len());
    assert_eq!(first, generate(&config, 42));
    assert_ne!(first, generate(&config, 43));
}

#[test]
fn requests_are_ordered_aligned_and_inside_the_volume() {
    // Goal: every request is well formed: time order, 512-byte alignment and
    // multiples, inside the capacity, only the configured sizes.
    let config = SyntheticConfig {
        duration_s: 7_200.0,
        capacity_bytes: 1 << 30,
        ..SyntheticConfig::default()
    };
    let trace = SyntheticTrace::new(&config, 9).unwrap();
    assert_eq!(trace.time_base(), TimeBase::Relative);
    let requests: Vec<Request> = trace.collect();
    let sizes: Vec<u32> = config.sizes.iter().map(|s| s.size_bytes).collect();
    for pair in requests.windows(2) {
        assert!(pair[0].timestamp <= pair[1].timestamp);
    }
    for request in &requests {
        assert_eq!(request.offset_bytes % 512, 0);
        assert!(sizes.contains(&request.size_bytes));
        assert!(request.offset_bytes + u64::from(request.size_bytes) <= config.capacity_bytes);
        assert!(request.timestamp.0 < 7_200 * S);
    }
    let sequential = requests
        .windows(2)
        .filter(|p| {
            p[0].volume == p[1].volume
                && p[0].offset_bytes + u64::from(p[0].size_bytes) == p[1].offset_bytes
        })
        .count();
    assert!(sequential > requests.len() / 20, "some requests continue sequentially: {sequential}");
}

#[test]
fn read_fraction_follows_the_knob() {
    // Goal: with no spread, the share of reads is the knob (70%) within sampling noise.
    let config = SyntheticConfig {
        read_fraction: 0.7,
        duration_s: 3_600.0,
        mean_rate_per_s: 5.0,
        ..quiet()
    };
    let requests = generate(&config, 1);
    let reads = requests.iter().filter(|r| r.kind == IoKind::Read).count() as f64;
    let fraction = reads / requests.len() as f64;
    assert!(
        (fraction - 0.7).abs() < 0.02,
        "read fraction {fraction} over {} requests",
        requests.len()
    );
    let expected = 12.0 * 5.0 * 3_600.0;
    assert!(
        (requests.len() as f64 - expected).abs() < 0.03 * expected,
        "{} requests, expected about {expected}",
        requests.len()
    );
}

#[test]
fn spread_makes_some_volumes_write_dominated() {
    // Goal: the default spread gives both read- and write-dominated volumes, as in the
    // MSR traces (19 of 36 volumes with read/write < 1).
    let config = SyntheticConfig { servers: 12, duration_s: 3_600.0, ..SyntheticConfig::default() };
    let trace = SyntheticTrace::new(&config, 5).unwrap();
    let volume_count = trace.volumes().len();
    let mut counts = vec![(0_u64, 0_u64); volume_count];
    for request in trace {
        let slot = &mut counts[request.volume.index()];
        if request.kind == IoKind::Read { slot.0 += 1 } else { slot.1 += 1 }
    }
    let write_dominated = counts.iter().filter(|(reads, writes)| reads < writes).count();
    assert!(
        write_dominated > volume_count / 5 && write_dominated < volume_count * 4 / 5,
        "{write_dominated} of {volume_count}"
    );
}

#[test]
fn diurnal_cycle_peaks_at_the_peak_hour() {
    // Goal: the daily shape follows diurnal_amplitude and peak_hour. Method: amplitude
    // 0.8 peaking at 14:00 gives rate 1.8x at 14:00 and 0.2x at 02:00; compare counts.
    let config = SyntheticConfig {
        diurnal_amplitude: 0.8,
        peak_hour: 14.0,
        mean_rate_per_s: 2.0,
        ..quiet()
    };
    let mut per_hour = [0_u64; 24];
    for request in SyntheticTrace::new(&config, 3).unwrap() {
        per_hour[(request.timestamp.0 / (3_600 * S)) as usize] += 1;
    }
    let ratio = per_hour[14] as f64 / per_hour[2] as f64;
    assert!(ratio > 6.0 && ratio < 12.0, "peak/trough ratio {ratio}: {per_hour:?}");
    let busiest =
        per_hour.iter().enumerate().max_by_key(|(_, count)| **count).map(|(hour, _)| hour).unwrap();
    assert!((13..=15).contains(&busiest), "busiest hour {busiest}");
}

#[test]
fn rate_curve_replaces_the_cosine_and_idle_volumes_idle() {
    // Goal: a load curve drives the rate (a zero step gives no requests), and the
    // listed idle volumes get about idle_volume_rate_factor of the others' requests.
    let curve = RateCurve::new(1_800.0, &[3.0, 0.0]).unwrap();
    let config = SyntheticConfig {
        rate_curve: Some(curve),
        duration_s: 4.0 * 3_600.0,
        idle_volumes: vec!["s00_0".to_owned()],
        idle_volume_rate_factor: 0.05,
        sizes: vec![SizeWeight { size_bytes: 512, weight: 1.0 }],
        ..quiet()
    };
    let requests = generate(&config, 11);
    assert!(
        requests.iter().all(|r| (r.timestamp.0 / (1_800 * S)).is_multiple_of(2)),
        "no request in the zero steps"
    );
    let idle = requests.iter().filter(|r| r.volume.0 == 0).count() as f64;
    let busy = requests.iter().filter(|r| r.volume.0 == 1).count() as f64;
    assert!(idle < 0.12 * busy && idle > 0.01 * busy, "idle {idle} vs busy {busy}");
    assert!(requests.iter().all(|r| r.size_bytes == 512));
}

#[test]
fn config_deserializes_with_defaults_and_refuses_unknown_keys() {
    // Goal: a config file names only what it changes; a typo is an error. Method:
    // serde_json stands in for TOML (the same derive serves both).
    let config: SyntheticConfig =
        serde_json::from_str(r#"{"servers": 2, "sizes": [{"size_bytes": 4096, "weight": 1}]}"#)
            .unwrap();
    assert_eq!(config.servers, 2);
    assert_eq!(config.volumes_per_server, SyntheticConfig::default().volumes_per_server);
    assert!(serde_json::from_str::<SyntheticConfig>(r#"{"server": 2}"#).is_err());
    let absolute = SyntheticConfig {
        start_unix_s: Some(1_172_163_600),
        duration_s: 60.0,
        ..SyntheticConfig::default()
    };
    let trace = SyntheticTrace::new(&absolute, 0).unwrap();
    assert_eq!(trace.time_base(), TimeBase::UnixEpoch);
    assert!(trace.take(10).all(|r| r.timestamp.0 >= 1_172_163_600 * S));
}

fn stats_of(config: &SyntheticConfig, seed: u64) -> StatsReport {
    let trace = SyntheticTrace::new(config, seed).unwrap();
    let volumes = trace.volumes().clone();
    let time_base = trace.time_base();
    let requests: Vec<Request> = trace.collect();
    let start = requests.first().unwrap().timestamp;
    let span = StatsSpan {
        start,
        end: TraceTimestamp(start.0 + (config.duration_s * 1e9) as u64 - 1),
        time_base,
    };
    stats::compute(requests, &volumes, span, &StatsOptions::default())
}

#[test]
fn read_sessions_keep_the_read_rate_and_shorten_read_activity() {
    // Goal: read sessions make reads bursty (004 section 2) without changing how many
    // there are. Method: the same knobs with reads always on and with reads on 10 % of
    // the time; the read count stays within sampling noise, the share of time active
    // counting reads only falls to about the session share, while writes keep the
    // volumes active.
    let mixed = SyntheticConfig {
        servers: 4,
        volumes_per_server: 4,
        duration_s: 2.0 * 86_400.0,
        mean_rate_per_s: 0.2,
        read_fraction: 0.5,
        ..quiet()
    };
    let sessions = SyntheticConfig {
        read_session_fraction: 0.1,
        read_session_mean_s: 1_200.0,
        ..mixed.clone()
    };
    let (before, after) = (stats_of(&mixed, 4), stats_of(&sessions, 4));
    let ratio = after.read_count as f64 / before.read_count as f64;
    assert!((0.75..1.25).contains(&ratio), "read count ratio {ratio}");
    assert!(before.read_active_share_mean > 0.9, "{}", before.read_active_share_mean);
    assert!(
        (0.05..0.2).contains(&after.read_active_share_mean),
        "read-only activity {}",
        after.read_active_share_mean
    );
    assert!(after.active_share_mean > 0.9, "writes keep volumes active");
}

#[test]
fn named_servers_name_the_volumes_and_bad_ones_are_refused() {
    // Goal: servers named one by one give `{name}_{index}` volumes in order; a
    // duplicate name or a server without volumes is refused with the key.
    let named = |servers: &[(&str, u32)]| SyntheticConfig {
        named_servers: servers
            .iter()
            .map(|&(name, volumes)| NamedServer { name: name.to_owned(), volumes })
            .collect(),
        duration_s: 60.0,
        ..SyntheticConfig::default()
    };
    let trace = SyntheticTrace::new(&named(&[("usr", 3), ("ts", 1)]), 0).unwrap();
    let names: Vec<&str> = trace.volumes().iter().map(|(_, name)| name).collect();
    assert_eq!(names, ["usr_0", "usr_1", "usr_2", "ts_0"]);
    let error = named(&[("usr", 3), ("usr", 1)]).validate().unwrap_err();
    assert_eq!(error.key, "named_servers");
    assert!(error.message.contains("twice"), "{error}");
    let error = named(&[("usr", 0)]).validate().unwrap_err();
    assert!(error.message.contains("at least 1"), "{error}");
}

#[test]
fn weekend_factor_lowers_saturday_and_sunday() {
    // Goal: the weekend factor scales the rate on Saturdays and Sundays (UTC), wherever
    // the trace starts. Method: a flat week from Friday 2007-02-23 12:00 UTC at factor
    // 0.25; each request is classed by its own UTC weekday (Unix day 0 was a Thursday).
    let start_s = 1_172_232_000;
    let config = SyntheticConfig {
        duration_s: 7.0 * 86_400.0,
        start_unix_s: Some(start_s),
        weekend_factor: 0.25,
        mean_rate_per_s: 0.5,
        ..quiet()
    };
    let (mut weekend, mut weekday) = (0_u64, 0_u64);
    for request in SyntheticTrace::new(&config, 2).unwrap() {
        let day = request.timestamp.0 / S / 86_400;
        if matches!(day % 7, 2 | 3) { weekend += 1 } else { weekday += 1 }
    }
    // The week holds 2 weekend days and 5 weekdays.
    let ratio = (weekend as f64 / 2.0) / (weekday as f64 / 5.0);
    assert!((0.2..0.3).contains(&ratio), "weekend/weekday {ratio}: {weekend} / {weekday}");
}

#[test]
fn idle_gaps_silence_reads_and_writes_together() {
    // Goal: an idle gap is the volume's, not one stream's: with reads and writes split
    // (read sessions almost always on), the share of time active is that of the same
    // volumes as one stream. Method: busy volumes (always active outside gaps) with
    // frequent hour-long gaps; the shares of the two agree within 0.05.
    let mixed = SyntheticConfig {
        servers: 4,
        volumes_per_server: 2,
        duration_s: 4.0 * 86_400.0,
        mean_rate_per_s: 1.0,
        idle_gap_probability: 0.5,
        idle_gap_mean_s: 7_200.0,
        ..quiet()
    };
    let split = SyntheticConfig { read_session_fraction: 0.9999, ..mixed.clone() };
    let (one, two) = (stats_of(&mixed, 6).active_share_mean, stats_of(&split, 6).active_share_mean);
    assert!(one < 0.8, "the gaps leave volumes idle: {one}");
    assert!((one - two).abs() < 0.05, "one stream {one}, split {two}");
}

#[test]
fn stratified_draws_give_every_seed_the_same_spread() {
    // Goal: with `stratify`, the volumes' rates cover the log-normal's quantiles
    // evenly whatever the seed. Method: 64 volumes with a wide rate spread; per seed,
    // count the volumes busier than the distribution's median rate. Independent draws
    // scatter that count binomially (sd 4); stratified ones hold it at 32 +- 1.
    let config = SyntheticConfig {
        servers: 64,
        volumes_per_server: 1,
        duration_s: 600.0,
        mean_rate_per_s: 20.0,
        rate_spread: 1.0,
        stratify: true,
        ..quiet()
    };
    // The median of exp(sigma z - sigma^2 / 2) is exp(-1/2) for sigma 1.
    let median_count = 20.0 * (-0.5_f64).exp() * 600.0;
    for seed in 0..6 {
        let mut counts = [0_u64; 64];
        for request in SyntheticTrace::new(&config, seed).unwrap() {
            counts[request.volume.index()] += 1;
        }
        let busier = counts.iter().filter(|&&c| c as f64 > median_count).count();
        assert!((30..=34).contains(&busier), "seed {seed}: {busier} of 64 above the median");
    }
}

#[test]
fn the_msr_fast08_preset_is_the_papers_data_center() {
    // Goal: the built-in preset has 004 Table 1's 13 servers and 36 volumes and starts
    // at the traced week's start; an unknown preset names the ones there are.
    let config = SyntheticConfig::preset("msr-fast08").unwrap();
    let servers: Vec<(&str, u32)> =
        config.named_servers.iter().map(|s| (s.name.as_str(), s.volumes)).collect();
    assert_eq!(servers.len(), 13);
    assert_eq!(servers.iter().map(|(_, v)| v).sum::<u32>(), 36);
    for expected in [("proj", 5), ("web", 4), ("ts", 1), ("rsrch", 3)] {
        assert!(servers.contains(&expected), "{expected:?} in {servers:?}");
    }
    assert_eq!(config.start_unix_s, Some(1_172_163_600));
    assert_eq!(config.duration_s, 7.0 * 86_400.0);
    let error = SyntheticConfig::preset("msr").unwrap_err();
    assert!(error.message.contains("msr-fast08"), "{error}");
}
