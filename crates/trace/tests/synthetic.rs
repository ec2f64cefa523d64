//! The synthetic generator: deterministic for a seed, and its output follows its
//! knobs (read fraction, daily shape, sizes and alignment, load curves, idle volumes).
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use somnus_trace::synthetic::{RateCurve, SizeWeight};
use somnus_trace::{Request, SyntheticConfig, SyntheticTrace, TimeBase};
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
