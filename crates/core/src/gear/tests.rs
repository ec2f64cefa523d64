//! The scheduler driven second by second on loads given in servers (capability 1 of
//! each metric, reads only): days of 4 one-minute intervals, 30 servers in 3 groups.

use somnus_types::{VirtualDuration, VirtualInstant};

use super::*;

const INTERVAL_S: u64 = 60;
const DAY_S: u64 = 4 * INTERVAL_S;
const SIZES: [u32; 3] = [10, 10, 10];

fn config(policy: Policy, gearing: Gearing) -> SchedulerConfig {
    SchedulerConfig {
        replicas: 3,
        group_sizes: SIZES.to_vec(),
        capability: Capability {
            read_iops: 1.0,
            write_iops: 1.0,
            read_mib_s: 1.0,
            write_mib_s: 1.0,
        },
        gearing,
        gear_min: 1,
        policy,
        interval: VirtualDuration::from_secs(INTERVAL_S),
        day: VirtualDuration::from_secs(DAY_S),
        origin: VirtualInstant::ZERO,
        wake_lead: VirtualDuration::from_secs(10),
        report_delay: VirtualDuration::from_secs(2),
        headroom: 0.1,
        dwell: VirtualDuration::from_secs(90),
        quiet_intervals: 2,
        forecast_margin: 0.0,
    }
}

fn at(seconds: f64) -> VirtualInstant {
    VirtualInstant::ZERO.saturating_add(VirtualDuration::try_from_secs_f64(seconds).unwrap())
}

fn reads(demand: f64) -> Load {
    Load { read_iops: demand, ..Load::ZERO }
}

/// Runs `seconds`, each reporting `demand(second)` from two primaries halfway
/// through it; returns the servers on at the end of each second.
fn drive(
    scheduler: &mut GearScheduler,
    seconds: std::ops::Range<u64>,
    demand: impl Fn(u64) -> f64,
) -> Vec<u32> {
    let mut on = Vec::new();
    for second in seconds {
        scheduler.handle_timeout(at(second as f64 + 0.5));
        let now = at(second as f64 + 0.5);
        scheduler.report(now, second, reads(demand(second) / 2.0));
        scheduler.report(now, second, reads(demand(second) / 2.0));
        scheduler.handle_timeout(at(second as f64 + 0.999));
        while scheduler.poll_decision().is_some() {}
        on.push(scheduler.plan().servers_on(&SIZES));
    }
    on
}

/// The daily pattern: 5, 15, 25 and 12 servers' worth, one minute each.
fn diurnal(second: u64) -> f64 {
    [5.0, 15.0, 25.0, 12.0][((second % DAY_S) / INTERVAL_S) as usize]
}

#[test]
fn the_predictor_follows_past_days_waking_ahead_and_sleeping_at_the_boundary() {
    // Goal: day 0 has no history (every server on); from day 1 each interval keeps
    // N_load on under fractional gearing; a rise is made wake_lead (10 s) before its
    // interval, a fall at its start.
    let mut s = GearScheduler::new(config(Policy::Predictor, Gearing::Fractional), at(0.0));
    let on = drive(&mut s, 0..3 * DAY_S, diurnal);
    assert!(on[..DAY_S as usize - 10].iter().all(|&n| n == 30), "day 0 is all on");
    let day2 = 2 * DAY_S as usize;
    for (interval, want) in [(0, 10), (1, 15), (2, 25), (3, 12)] {
        let middle = day2 + interval * INTERVAL_S as usize + 30;
        assert_eq!(on[middle], want, "interval {interval} of day 2 (g_min keeps 10)");
    }
    // The rise to 25 before interval 2 starts (second 120 of the day), by 10 s.
    let start = day2 + 2 * INTERVAL_S as usize;
    assert_eq!((on[start - 11], on[start - 9]), (15, 25));
    // The fall to 12 at interval 3's start, not before.
    let start = day2 + 3 * INTERVAL_S as usize;
    assert_eq!((on[start - 1], on[start]), (25, 12));
    assert_eq!(s.counters().reactive_shifts, 0);

    let mut full = GearScheduler::new(config(Policy::Predictor, Gearing::Full), at(0.0));
    let on = drive(&mut full, 0..3 * DAY_S, diurnal);
    let wanted: Vec<u32> = (0..4).map(|i| on[day2 + i * INTERVAL_S as usize + 30]).collect();
    assert_eq!(wanted, vec![10, 20, 30, 20], "full gearing powers whole groups");
}

#[test]
fn the_hybrid_shifts_up_within_seconds_of_a_flash_crowd_and_holds_for_its_dwell() {
    // Goal: two normal days, then a crowd of 22 servers' worth in the quiet first
    // interval of day 2 (seconds 20..50). The predictor stays at 10 (overloaded);
    // the hybrid is at 25 (22 + 10 %, rounded up to whole servers) 3 s after the
    // crowd starts (report delay 2 s), and keeps it through the dwell (90 s).
    let crowd = |second: u64| {
        let of_day = second % DAY_S;
        if second >= 2 * DAY_S && (20..50).contains(&of_day) { 22.0 } else { diurnal(second) }
    };
    let day2 = 2 * DAY_S as usize;
    let mut predictor = GearScheduler::new(config(Policy::Predictor, Gearing::Fractional), at(0.0));
    let mut hybrid = GearScheduler::new(config(Policy::Hybrid, Gearing::Fractional), at(0.0));
    let p = drive(&mut predictor, 0..3 * DAY_S, crowd);
    let h = drive(&mut hybrid, 0..3 * DAY_S, crowd);
    assert_eq!(p[day2 + 30], 10);
    assert_eq!(h[day2 + 19], 10);
    assert_eq!(h[day2 + 23], 25, "{:?}", &h[day2 + 15..day2 + 30]);
    assert_eq!(hybrid.counters().reactive_shifts, 1);
    // Interval 1 (15) starts at 60: the crowd ended at 50, the dwell holds until 112.
    assert_eq!(h[day2 + 70], 25);
    // Interval 2 wants 25 anyway; interval 3 (12) falls as the predictor does.
    assert_eq!(h[day2 + 3 * INTERVAL_S as usize + 5], 12);
    // Day 1, with a day of history, is the same for the two.
    assert_eq!(p[DAY_S as usize..day2], h[DAY_S as usize..day2]);
    // Day 0 has no history: the predictor keeps every server on; the hybrid plans the
    // last interval on the two before it and its own (25 servers' worth) instead.
    assert!(p[..DAY_S as usize - 10].iter().all(|&n| n == 30));
    assert_eq!(h[3 * INTERVAL_S as usize + 30], 25);
}

#[test]
fn the_hybrid_trusts_the_forecast_less_only_after_quiet_intervals_in_a_row() {
    // Goal: a holiday (day 2 at 30 % of the pattern). One quiet interval never
    // lowers the plan: the first two intervals of the day are planned as the
    // predictor plans them; from the third, the forecast is scaled by the larger of
    // the two last ratios. The hybrid uses less energy and is never short.
    let holiday = |second: u64| {
        let load = diurnal(second);
        if second / DAY_S == 2 { load * 0.3 } else { load }
    };
    let day2 = 2 * DAY_S as usize;
    let mut predictor = GearScheduler::new(config(Policy::Predictor, Gearing::Fractional), at(0.0));
    let mut hybrid = GearScheduler::new(config(Policy::Hybrid, Gearing::Fractional), at(0.0));
    let p = drive(&mut predictor, 0..3 * DAY_S, holiday);
    let h = drive(&mut hybrid, 0..3 * DAY_S, holiday);
    let middle = |on: &[u32], i: usize| on[day2 + i * INTERVAL_S as usize + 30];
    assert_eq!((middle(&p, 0), middle(&p, 1), middle(&p, 2)), (10, 15, 25));
    assert_eq!((middle(&h, 0), middle(&h, 1)), (10, 15), "no fall on one quiet interval");
    // Ratios 1.5/5 = 0.3 and 4.5/15 = 0.3: interval 2 forecasts 25 * 0.3 = 7.5, and
    // g_min keeps 10.
    assert_eq!(middle(&h, 2), 10);
    let energy = |on: &[u32]| on[day2..].iter().map(|&n| u64::from(n)).sum::<u64>();
    assert!(energy(&h) < energy(&p), "{} against {}", energy(&h), energy(&p));
    let short =
        |on: &[u32]| (day2..on.len()).filter(|&i| f64::from(on[i]) < holiday(i as u64)).count();
    assert_eq!((short(&h), short(&p)), (0, 0));
}

#[test]
fn an_operator_holds_sets_and_gives_back_control() {
    // Goal: `hold` freezes the plan whatever the load; `set 2` keeps two whole
    // groups; `auto` returns to the forecast at once.
    let mut s = GearScheduler::new(config(Policy::Predictor, Gearing::Fractional), at(0.0));
    drive(&mut s, 0..2 * DAY_S, diurnal);
    s.set_mode(at(2.0 * DAY_S as f64), GearMode::Hold);
    let held = drive(&mut s, 2 * DAY_S..3 * DAY_S, diurnal);
    assert!(held.iter().all(|&n| n == held[0]), "{held:?}");
    s.set_mode(at(3.0 * DAY_S as f64), GearMode::Set(2));
    assert_eq!(
        s.poll_decision().map(|d| (d.plan.full_groups, d.reason)),
        Some((2, Reason::Override))
    );
    let set = drive(&mut s, 3 * DAY_S..4 * DAY_S, diurnal);
    assert!(set.iter().all(|&n| n == 20));
    s.set_mode(at(4.0 * DAY_S as f64 + 0.5), GearMode::Auto);
    let auto = drive(&mut s, 4 * DAY_S..5 * DAY_S, diurnal);
    assert_eq!(auto[30], 10, "interval 0's forecast");
    assert_eq!(s.mode(), GearMode::Auto);
}

#[test]
fn the_group_that_never_sleeps_rotates_on_days_that_reach_the_top_gear() {
    // Goal: each day's peak (25) puts every group on under full gearing; the first
    // group of the order changes once a day, so every group sleeps on some day. An
    // operator's set gear keeps the order.
    let mut s = GearScheduler::new(config(Policy::Predictor, Gearing::Full), at(0.0));
    let mut firsts = Vec::new();
    for day in 0..4 {
        drive(&mut s, day * DAY_S..(day + 1) * DAY_S, diurnal);
        firsts.push(s.order()[0]);
    }
    assert_eq!(firsts, vec![0, 1, 2, 0]);
    s.set_mode(at(4.0 * DAY_S as f64), GearMode::Set(2));
    drive(&mut s, 4 * DAY_S..6 * DAY_S, diurnal);
    assert_eq!(s.order()[0], 0, "days under an operator's gear keep the order");
    assert_eq!(s.counters().rotations, 3);
}

#[test]
fn a_day_that_never_reaches_the_top_gear_rotates_at_its_midpoint() {
    // Goal: a load one group serves keeps the hybrid at gear 1 from the second day on;
    // the order still turns once a day: at the day's midpoint (interval 2 of 4) the
    // group to lead next wakes (gear 2), and at the next interval the order turns as
    // the gear falls back to 1, so each group leads in turn and none sleeps for the
    // whole run.
    let mut s = GearScheduler::new(config(Policy::Hybrid, Gearing::Full), at(0.0));
    let mut decisions = Vec::new();
    let mut firsts = Vec::new();
    for second in 0..5 * DAY_S {
        let now = at(second as f64 + 0.5);
        s.handle_timeout(now);
        s.report(now, second, reads(3.0));
        s.handle_timeout(at(second as f64 + 0.999));
        while let Some(d) = s.poll_decision() {
            decisions.push((d.at, d.reason, d.order[0], d.plan.full_groups));
        }
        if second % DAY_S == DAY_S - 1 {
            firsts.push(s.order()[0]);
        }
    }
    let rotations: Vec<_> =
        decisions.iter().filter(|d| d.1 == Reason::Rotation).map(|d| (d.0, d.2, d.3)).collect();
    let midday = |day: u64| at((day * DAY_S + DAY_S / 2) as f64);
    let next = |day: u64| at((day * DAY_S + DAY_S / 2 + INTERVAL_S) as f64);
    let expected: Vec<_> = (1..5)
        .flat_map(|day| {
            let (old, new) = (((day - 1) % 3) as u32, (day % 3) as u32);
            [(midday(day), old, 2), (next(day), new, 1)]
        })
        .collect();
    assert_eq!(rotations, expected, "{decisions:?}");
    assert_eq!(firsts, vec![0, 1, 2, 0, 1]);
    assert_eq!(s.plan().full_groups, 1);
}

#[test]
fn late_and_malformed_reports_are_counted_and_dropped() {
    // Goal: a report of a second already final, or with a negative or NaN rate, changes
    // nothing but a counter.
    let mut s = GearScheduler::new(config(Policy::Hybrid, Gearing::Fractional), at(0.0));
    drive(&mut s, 0..100, |_| 5.0);
    let now = at(100.5);
    s.report(now, 10, reads(1000.0));
    s.report(now, 100, reads(f64::NAN));
    s.report(now, 100, Load { write_iops: -1.0, ..Load::ZERO });
    // A clock far ahead, up to the end of time: dropped, no overflow, no growth.
    s.report(now, 104, reads(1000.0));
    s.report(now, u64::MAX, reads(1000.0));
    s.handle_timeout(at(110.0));
    assert_eq!(s.counters().late_reports, 5);
    assert_eq!(s.counters().reactive_shifts, 0);
    // A second nobody reported is final once its reports were due: a report of it
    // after that is late, though no other second was finalized in between.
    s.handle_timeout(at(120.0));
    s.report(at(120.0), 115, reads(1000.0));
    assert_eq!(s.counters().late_reports, 6);
}

#[test]
fn bad_configs_name_the_field() {
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.interval = VirtualDuration::from_secs(7);
    assert!(c.validate().unwrap_err().contains("interval"));
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.gear_min = 4;
    assert!(c.validate().unwrap_err().contains("gear_min"));
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.group_sizes.pop();
    assert!(c.validate().unwrap_err().contains("group_sizes"));
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.wake_lead = c.interval;
    assert!(c.validate().unwrap_err().contains("wake_lead"));
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.quiet_intervals = 1;
    assert!(c.validate().unwrap_err().contains("quiet_intervals"));
    let mut c = config(Policy::Hybrid, Gearing::Full);
    c.report_delay = c.interval;
    assert!(c.validate().unwrap_err().contains("report_delay"));
    assert_eq!(config(Policy::Hybrid, Gearing::Full).validate(), Ok(()));
}

#[test]
fn an_origin_or_interval_off_whole_seconds_is_refused() {
    // A load's second across an interval's start would count toward the interval
    // before it (the simulator once started its replay's days mid-second, and the
    // first second of a busy interval made the quiet one before it look busy).
    let base = config(Policy::Hybrid, Gearing::Fractional);
    assert_eq!(base.validate(), Ok(()));
    let late = SchedulerConfig { origin: at(5.3), ..base.clone() };
    assert!(late.validate().unwrap_err().contains("origin: 5.3 s"), "{:?}", late.validate());
    let whole = SchedulerConfig { origin: at(5.0), ..base.clone() };
    assert_eq!(whole.validate(), Ok(()));
    let interval = VirtualDuration::try_from_secs_f64(60.5).unwrap();
    let day = VirtualDuration::from_nanos(interval.as_nanos() * 4);
    let odd = SchedulerConfig { interval, day, ..base };
    assert!(odd.validate().unwrap_err().contains("whole seconds"), "{:?}", odd.validate());
}

#[test]
fn lead_times_are_the_wake_and_two_heartbeats_within_the_interval() {
    let s = VirtualDuration::from_secs;
    let leads = LeadTimes::of(s(13), s(1), s(3600));
    assert_eq!(leads, LeadTimes { wake_lead: s(15), report_delay: s(2) });
    // A wake as long as the interval is acted on a second before it at most.
    let leads = LeadTimes::of(s(90), s(1), s(INTERVAL_S));
    assert_eq!(leads, LeadTimes { wake_lead: s(INTERVAL_S - 1), report_delay: s(2) });
    let config = SchedulerConfig {
        wake_lead: leads.wake_lead,
        report_delay: leads.report_delay,
        ..config(Policy::Hybrid, Gearing::Fractional)
    };
    assert_eq!(config.validate(), Ok(()));
}
