//! Sierra 4.1-4.2 on load series: the hybrid against the predictor on generated loads
//! with a flash crowd and a holiday, and the study's invariants on every CloudPhysics
//! workload shipped.

use somnus_core::gear::Capability;
use somnus_sim::gear_study::{StudyConfig, WorkloadStudy, study};
use somnus_trace::load_gen::{LoadGenSpec, generate_load};
use somnus_trace::synthetic::LoadSeries;
use somnus_types::VirtualDuration;

fn config() -> StudyConfig {
    StudyConfig {
        servers: 300,
        replicas: 3,
        capability: Capability::SIERRA_TABLE_4,
        window_s: 1800,
        windows_per_interval: 1,
        wake: VirtualDuration::from_secs(13),
        headroom: 0.2,
        dwell: VirtualDuration::from_secs(1800),
        quiet_intervals: 2,
    }
}

fn row<'a>(
    s: &'a WorkloadStudy,
    strategy: &str,
    gearing: &str,
    gear_min: u32,
) -> &'a somnus_sim::gear_study::PowerRow {
    s.power
        .iter()
        .find(|r| r.strategy == strategy && r.gearing == gearing && r.gear_min == gear_min)
        .unwrap_or_else(|| panic!("no row for {strategy} {gearing} g_min {gear_min}"))
}

/// The hybrid's claim on one study, with the row named `hybrid` standing for the
/// hybrid: for every gearing and g_min, the predictor alone leaves load unserved; the
/// hybrid serves at least 10 times more of it; no predictor with a forecast margin
/// serves as well for less power; under full gearing with g_min 1 the hybrid uses no
/// more power than the predictor alone.
fn hybrid_claim(s: &WorkloadStudy, hybrid: &str) -> Result<(), String> {
    for gearing in ["full", "fractional"] {
        for gear_min in [1, 2] {
            let predictor = row(s, "predictor", gearing, gear_min);
            let h = row(s, hybrid, gearing, gear_min);
            let what = format!("{gearing} g_min {gear_min}: {predictor:?} {h:?}");
            let matched = s
                .predictor_at_hybrid_latency
                .iter()
                .find(|m| m.gearing == gearing && m.gear_min == gear_min)
                .ok_or(format!("{what}: no matched predictor"))?;
            if predictor.unserved_share <= 0.0 {
                return Err(format!("{what}: the predictor alone costs no latency"));
            }
            if h.unserved_share * 10.0 > predictor.unserved_share {
                return Err(format!("{what}: the hybrid serves too little more"));
            }
            if matched.power_share < h.power_share {
                return Err(format!("{what}: {matched:?} serves as well for less"));
            }
            if (gearing, gear_min) == ("full", 1) && h.power_share > predictor.power_share + 1e-9 {
                return Err(format!("{what}: the hybrid uses more than the predictor"));
            }
        }
    }
    Ok(())
}

#[test]
fn the_hybrid_never_costs_more_energy_than_a_predictor_that_serves_as_well() {
    // Goal: `hybrid_claim` holds on loads with a surprise (a holiday and a flash crowd,
    // seeds 1 to 5). With g_min 2 the holiday can sleep less, and the crowd costs up
    // to half a point more than the predictor alone, so that part is for g_min 1.
    // Broken variant: the predictor passed off as the hybrid (no reactive part, no
    // trust) fails the claim on every seed.
    for seed in 1..=5 {
        let (series, surprises) = generate_load(&LoadGenSpec::default(), seed);
        let s = study("surprise", series.windows("surprise").unwrap(), &config()).unwrap();
        if let Err(why) = hybrid_claim(&s, "hybrid") {
            panic!("seed {seed} {surprises:?}: {why}");
        }
        let caught = hybrid_claim(&s, "predictor").unwrap_err();
        assert!(caught.contains("serves too little more"), "seed {seed}: {caught}");
    }
}

#[test]
fn a_predictor_fed_the_future_is_the_oracle_and_errors_are_measured_on_test_days_only() {
    // Goal: on the surprise-free diurnal series the RMS error after one day is the
    // noise's (about 5 %, under 15 %), the right gear is chosen most of the time, and
    // the oracle keeps at least the bound and never leaves load unserved.
    let (series, _) = generate_load(&LoadGenSpec::default(), 3);
    let s = study("diurnal", series.windows("diurnal").unwrap(), &config()).unwrap();
    assert_eq!(s.days, 7);
    assert_eq!(s.rms_by_training_days.len(), 6);
    assert!(s.rms_by_training_days[0] < 0.15, "{:?}", s.rms_by_training_days);
    assert!(s.gear_errors.correct_share.unwrap() > 0.8, "{:?}", s.gear_errors);
    for r in s.power.iter().filter(|r| r.strategy == "oracle") {
        assert!(r.power_share + 1e-9 >= s.bound, "{r:?} bound {}", s.bound);
        assert_eq!(r.unserved_share, 0.0);
    }
    let fractional = row(&s, "oracle", "fractional", 1).power_share;
    let full = row(&s, "oracle", "full", 1).power_share;
    assert!(fractional < full, "fractional gearing is finer: {fractional} against {full}");
}

#[test]
fn every_shipped_cloudphysics_workload_is_studied_or_named_as_too_short() {
    // Goal: the study runs on every workload of the shipped series (or says why
    // not), and its figures hold together: shares within 0..1, the oracle at or
    // above the bound, the hybrid serving at least as much as the predictor.
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let series =
        LoadSeries::open(&traces.join("load-timeseries/cloudphysics_30min_load.csv")).unwrap();
    let mut studied = 0;
    for name in series.workloads() {
        let windows = series.windows(name).unwrap();
        match study(name, windows, &config()) {
            Ok(s) => {
                studied += 1;
                assert!(
                    s.rms_by_training_days.iter().all(|e| e.is_finite() && *e >= 0.0),
                    "{name}"
                );
                for r in &s.power {
                    assert!((0.0..=1.0 + 1e-9).contains(&r.power_share), "{name} {r:?}");
                }
                for gearing in ["full", "fractional"] {
                    let oracle = row(&s, "oracle", gearing, 1);
                    assert!(oracle.power_share + 1e-9 >= s.bound, "{name} {oracle:?}");
                    let predictor = row(&s, "predictor", gearing, 1);
                    let hybrid = row(&s, "hybrid", gearing, 1);
                    assert!(hybrid.unserved_share <= predictor.unserved_share + 1e-9, "{name}");
                }
            }
            Err(why) => assert!(windows.len() < 96, "{name}: {why}"),
        }
    }
    assert!(studied >= 50, "{studied} workloads studied");
}
