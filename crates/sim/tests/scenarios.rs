//! Hand-written timelines for the write off-loading engine.
//!
//! Goal: each configuration of 004 section 4.1 behaves as the paper describes on a
//! timeline small enough to reason about by hand: who spins down when, which requests
//! wait for a spin-up, which writes are off-loaded, and where the energy goes.
//! Method: a two-rack topology (servers `a` and `b` in one rack, `c` in another) with
//! three or four volumes, requests written out by hand, one engine run per
//! configuration, and assertions on the measurements.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use somnus_core::power::PowerState;
use somnus_sim::engine::{ConfigKind, Engine, RunMeasurements, RunWindow, SimRequest};
use somnus_sim::experiment::run_one;
use somnus_sim::topology::{Topology, TraceLayout};
use somnus_types::{ByteRange, IoKind, VirtualDuration, VirtualInstant, VolumeId};

const TOPOLOGY: &str = r#"
[defaults]
boot_array = { raid = "raid1", disks = 2, profile = "seagate-cheetah-15k4-36gb" }
data_array = { raid = "raid5", disks = 4, profile = "seagate-cheetah-15k4-146gb" }
stripe_unit_kib = 64
log_partition_gib = 4.0

[[rack]]
name = "r1"
servers = ["a", "b"]

[[rack]]
name = "r2"
servers = ["c"]

[network]
rtt_ms = 0.2
link_gbps = 1.0

[policy]
vanilla_idle_s = 60.0
read_idle_s = 60.0
write_idle_s = 10.0
offload_limit_gib = 1.0
reclaim_after_idle_ms = 100.0
power_window_s = 60.0
"#;

fn layout(names: &[&str]) -> TraceLayout {
    let topology = Topology::from_toml(TOPOLOGY, "scenario").unwrap();
    topology.layout(&names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

fn at(secs: f64) -> VirtualInstant {
    VirtualInstant::ZERO + VirtualDuration::try_from_secs_f64(secs).unwrap()
}

fn request(secs: f64, volume: u32, offset: u64, kind: IoKind) -> SimRequest {
    SimRequest {
        arrival: at(secs),
        volume: VolumeId(volume),
        range: ByteRange::new(offset, 4096),
        kind,
    }
}

fn run(
    layout: &TraceLayout,
    span_s: u64,
    kind: ConfigKind,
    requests: &[SimRequest],
) -> RunMeasurements {
    run_one(layout, VirtualDuration::from_secs(span_s), kind, requests).unwrap()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[test]
fn baseline_never_sleeps_and_serves_in_milliseconds() {
    // Two data volumes on one server, a read and a write each minute for ten minutes.
    let layout = layout(&["a_1", "a_2"]);
    let requests: Vec<_> = (0..10)
        .flat_map(|i| {
            [
                request(i as f64 * 60.0, 0, 0, IoKind::Read),
                request(i as f64 * 60.0 + 1.0, 1, 8192, IoKind::Write),
            ]
        })
        .collect();
    let measured = run(&layout, 600, ConfigKind::Baseline, &requests);
    assert_eq!(measured.requests_unfinished, 0);
    assert_eq!(measured.read_latency_ns.len() + measured.write_latency_ns.len(), 20);
    assert!(
        ms(measured.read_latency_ns.max()) < 20.0,
        "read max {}",
        ms(measured.read_latency_ns.max())
    );
    assert!(
        ms(measured.write_latency_ns.max()) < 30.0,
        "write max {}",
        ms(measured.write_latency_ns.max())
    );
    for volume in &measured.volumes {
        assert_eq!(volume.reading.spin_ups, 0);
        // Four Cheetah 146 GB disks at 12 W for 600 s.
        assert_eq!(volume.reading.energy.as_joules(), 4.0 * 12.0 * 600.0);
    }
    assert_eq!(measured.reads_spin_delayed + measured.writes_spin_delayed, 0);
}

#[test]
fn vanilla_spins_down_after_a_minute_and_the_next_request_waits() {
    // One volume, spinning at the start: a write at 5 s is served at once, the volume
    // spins down a minute after it completes, and a read at 200 s waits the 15 s
    // spin-up of a 146 GB Cheetah; it spins down again a minute after the read. The
    // energy is exactly the state times at the Table 3 watts plus 200 J per disk for
    // the spin-up.
    let layout = layout(&["a_1"]);
    let requests = [request(5.0, 0, 0, IoKind::Write), request(200.0, 0, 4096, IoKind::Read)];
    let measured = run(&layout, 300, ConfigKind::Vanilla, &requests);
    let read_ms = ms(measured.read_latency_ns.max());
    assert!((15_000.0..15_050.0).contains(&read_ms), "read waited {read_ms} ms");
    assert!(ms(measured.write_latency_ns.max()) < 50.0);
    assert_eq!((measured.reads_spin_delayed, measured.writes_spin_delayed), (1, 0));
    let reading = measured.volumes[0].reading;
    assert_eq!((reading.spin_ups, reading.spin_downs), (1, 2));
    let write_done = 5.0 + measured.write_latency_sum_ns as f64 / 1e9;
    let read_done = 200.0 + measured.read_latency_sum_ns as f64 / 1e9;
    let standby = reading.state_time[PowerState::Standby.index()].as_secs_f64();
    let idle = reading.state_time[PowerState::Idle.index()].as_secs_f64();
    let expected_standby = (200.0 - (write_done + 60.0)) + (300.0 - (read_done + 60.0));
    assert!(
        (standby - expected_standby).abs() < 1e-6,
        "standby {standby} s, expected {expected_standby}"
    );
    assert!((standby + idle + reading.transition_time.as_secs_f64() - 300.0).abs() < 1e-6);
    let expected = 4.0 * (12.0 * idle + 2.6 * standby + 200.0);
    assert!(
        (reading.energy.as_joules() - expected).abs() < 1e-6,
        "{:?} vs {expected} J",
        reading.energy
    );
}

#[test]
fn machine_level_offloads_writes_while_home_sleeps() {
    // Volume a_1 is only written, every 20 s from 20 s on; a_2 on the same server is
    // read every 5 s, so its logger stays awake. a_1 spins down at 60 s (a minute
    // without reads, 10 s without writes); its later writes go to a_2's logger without
    // waiting, and reading an off-loaded block back is served by the logger, locally,
    // without waking a_1.
    let layout = layout(&["a_1", "a_2"]);
    let mut requests = vec![];
    for i in 0..40 {
        requests.push(request(i as f64 * 5.0 + 0.5, 1, (i % 8) * 65536, IoKind::Read));
    }
    for i in 0..9 {
        requests.push(request(20.0 + i as f64 * 20.0, 0, 1 << 20, IoKind::Write));
    }
    requests.push(request(195.0, 0, 1 << 20, IoKind::Read));
    requests.sort_by_key(|r| r.arrival);
    let measured = run(&layout, 200, ConfigKind::Machine, &requests);
    assert_eq!(measured.requests_unfinished, 0);
    assert_eq!(measured.writes_spin_delayed, 0, "off-loaded writes never wait for a spin-up");
    assert_eq!(measured.writes_logged, 7, "the writes at 60 s and after");
    assert_eq!(measured.reads_logged, 1, "the last read is served by the logger");
    assert_eq!(measured.reads_remote, 0, "machine-level off-load stays on the server");
    assert_eq!(measured.network_bytes, 0);
    assert!(
        ms(measured.write_latency_ns.max()) < 50.0,
        "write max {}",
        ms(measured.write_latency_ns.max())
    );
    let home = measured.volumes[0].reading;
    assert_eq!(
        (home.spin_downs, home.spin_ups),
        (1, 0),
        "reading an off-loaded block does not wake the home"
    );
    assert_eq!(home.state_time[PowerState::Standby.index()], VirtualDuration::from_secs(140));
    assert_eq!(measured.volumes[1].reading.spin_downs, 0);
}

#[test]
fn a_lone_volume_never_sleeps_without_another_logger() {
    // 004 3.1: "Before putting the volume into standby, the manager first ensures that
    // there is at least one logger ... using a set of disks different from its own and
    // that is not currently in standby." Alone on its server, c_1 stays up under
    // machine- and rack-level off-load, while vanilla spins it down.
    let layout = layout(&["c_1"]);
    let requests = [request(0.0, 0, 0, IoKind::Write)];
    for kind in [ConfigKind::Machine, ConfigKind::Rack] {
        let measured = run(&layout, 600, kind, &requests);
        assert_eq!(measured.volumes[0].reading.spin_downs, 0, "{kind:?}");
        // And it says so: idle from 10 s on (no reads since 0 s: from 60 s), kept up
        // for want of a logger for the rest of the window.
        let blocked = measured.volumes[0].counters.sleep_blocked_ns as f64 / 1e9;
        assert!((539.0..=540.0).contains(&blocked), "{kind:?}: blocked {blocked} s");
    }
    assert_eq!(run(&layout, 600, ConfigKind::Vanilla, &requests).volumes[0].reading.spin_downs, 1);
}

#[test]
fn rack_level_offloads_across_servers_over_the_network() {
    // a_1 and b_1 are on different servers of one rack. b_1 is kept busy; a_1 sleeps and
    // off-loads its writes to b_1's logger over the network. Machine-level off-load
    // cannot (a_1 is alone on a), so there a_1 never sleeps and uses more energy.
    let layout = layout(&["a_1", "b_1"]);
    let mut requests = vec![];
    for i in 0..120 {
        requests.push(request(i as f64 * 5.0 + 0.5, 1, (i % 16) * 65536, IoKind::Read));
    }
    for i in 0..25 {
        requests.push(request(100.0 + i as f64 * 20.0, 0, (i % 4) * 4096, IoKind::Write));
    }
    requests.sort_by_key(|r| r.arrival);
    let rack = run(&layout, 600, ConfigKind::Rack, &requests);
    let machine = run(&layout, 600, ConfigKind::Machine, &requests);
    assert!(rack.writes_logged >= 20, "rack writes logged: {}", rack.writes_logged);
    assert!(rack.network_bytes >= 20 * 4096, "network bytes: {}", rack.network_bytes);
    assert_eq!(machine.writes_logged, 0);
    let energy = |m: &RunMeasurements| m.volumes[0].reading.energy.as_joules();
    assert!(
        energy(&rack) < 0.5 * energy(&machine),
        "rack {} J vs machine {} J",
        energy(&rack),
        energy(&machine)
    );
    assert_eq!(rack.writes_spin_delayed, 0);
}

#[test]
fn the_offload_limit_wakes_the_home_volume_and_reclaim_empties_the_log() {
    // With a 1 MiB off-load limit, a sleeping volume that keeps being written wakes up
    // in the background once a MiB is logged, copies it home, and invalidates it.
    let text = TOPOLOGY.replace("offload_limit_gib = 1.0", "offload_limit_gib = 0.0009765625");
    let topology = Topology::from_toml(&text, "scenario").unwrap();
    let layout = topology.layout(&["a_1".to_string(), "a_2".to_string()]).unwrap();
    let mut requests = vec![];
    for i in 0..200 {
        requests.push(request(i as f64 * 2.0 + 0.5, 1, (i % 16) * 65536, IoKind::Read));
    }
    for i in 0..64 {
        let mut write = request(70.0 + i as f64, 0, i * 65536, IoKind::Write);
        write.range = ByteRange::new(i * 65536, 65536);
        requests.push(write);
    }
    requests.sort_by_key(|r| r.arrival);
    let measured = run(&layout, 400, ConfigKind::Machine, &requests);
    let home = &measured.volumes[0];
    assert!(home.counters.writes_logged >= 16, "logged {}", home.counters.writes_logged);
    assert!(home.counters.spin_ups_requested >= 1, "the limit should wake the home volume");
    assert!(
        home.counters.bytes_reclaimed >= 1 << 20,
        "reclaimed {}",
        home.counters.bytes_reclaimed
    );
    assert_eq!(measured.writes_spin_delayed, 0);
}

#[test]
fn a_request_after_the_window_is_refused() {
    // Goal: the engine refuses a request at or after the end of its window instead of
    // measuring it (or panicking on a meter read back in time).
    let layout = layout(&["a_1"]);
    let late = [request(10.0, 0, 0, IoKind::Write)];
    let error =
        run_one(&layout, VirtualDuration::from_secs(10), ConfigKind::Vanilla, &late).unwrap_err();
    assert!(error.to_string().contains("after the window"), "{error}");
}

#[test]
fn the_same_input_gives_the_same_measurements() {
    // Determinism: two runs of one configuration agree on every figure.
    let layout = layout(&["a_1", "a_2", "b_1"]);
    let mut requests = vec![];
    for i in 0..500u64 {
        let kind = if i % 3 == 0 { IoKind::Read } else { IoKind::Write };
        requests.push(request(i as f64 * 1.7, (i % 3) as u32, (i * 7919 % 512) * 4096, kind));
    }
    let first = run(&layout, 900, ConfigKind::Rack, &requests);
    let second = run(&layout, 900, ConfigKind::Rack, &requests);
    assert_eq!(first.read_latency_ns, second.read_latency_ns);
    assert_eq!(first.write_latency_ns, second.write_latency_ns);
    assert_eq!(first.timeline, second.timeline);
    assert_eq!(first.network_bytes, second.network_bytes);
}

#[test]
fn the_cheapest_volume_stays_up_as_the_logger_host() {
    // Goal: with logger_host = "cheapest", of two quiet volumes on one server the
    // RAID-1 pair (2 disks) stays awake for the RAID-5 array (4 disks), which sleeps
    // from 65 s (10 s after a write) and off-loads; with "any" (the paper) whichever
    // goes idle first sleeps, here the pair at 60 s, so the array stays up and its
    // writes go home.
    let requests: Vec<_> = (0..20)
        .map(|i| request(30.0 + i as f64 * 25.0, 1, (i % 4) * 4096, IoKind::Write))
        .collect();
    let run_with = |host: &str| {
        let text = TOPOLOGY.replace(
            "power_window_s = 60.0",
            &format!("power_window_s = 60.0\nlogger_host = \"{host}\""),
        );
        let layout = Topology::from_toml(&text, "scenario")
            .unwrap()
            .layout(&["a_0".into(), "a_1".into()])
            .unwrap();
        run(&layout, 600, ConfigKind::Machine, &requests)
    };
    let standby = |m: &RunMeasurements, v: usize| {
        m.volumes[v].reading.state_time[PowerState::Standby.index()]
    };
    let cheapest = run_with("cheapest");
    assert_eq!(standby(&cheapest, 0), VirtualDuration::ZERO, "the cheap pair stays up");
    let array = standby(&cheapest, 1).as_secs_f64();
    assert_eq!(array, 535.0, "the array sleeps from 65 s");
    assert_eq!(cheapest.writes_logged, 18);
    let any = run_with("any");
    assert_eq!(standby(&any, 0), VirtualDuration::from_secs(540));
    assert_eq!(standby(&any, 1), VirtualDuration::ZERO);
    assert_eq!(any.writes_logged, 0);
    let energy =
        |m: &RunMeasurements| m.volumes.iter().map(|v| v.reading.energy.as_joules()).sum::<f64>();
    assert!(
        energy(&cheapest) < 0.7 * energy(&any),
        "{} J vs {} J",
        energy(&cheapest),
        energy(&any)
    );
}

#[test]
fn the_write_cache_absorbs_bursts_and_is_destaged_before_a_spin_down() {
    // Goal: with a controller write cache, a burst of 200 small writes to a RAID-5
    // array is acknowledged in well under a millisecond each, while without one the
    // burst queues behind read-modify-writes for seconds; and the array spins down
    // only after the cached writes are on disk (standby never starts under them).
    // Scattered 4 KiB writes: each read-modify-write seeks.
    let burst: Vec<_> = (0..200)
        .map(|i| request(1.0, 0, (i * 2_654_435_761 % (1 << 25)) * 4096, IoKind::Write))
        .collect();
    let with_cache = TOPOLOGY
        .replace("log_partition_gib = 4.0", "log_partition_gib = 4.0\nwrite_cache_mib = 128");
    let cached =
        Topology::from_toml(&with_cache, "scenario").unwrap().layout(&["a_1".into()]).unwrap();
    let measured = run(&cached, 300, ConfigKind::Baseline, &burst);
    let p99 = ms(measured.write_latency_ns.value_at_quantile(0.99));
    assert!(p99 < 1.0, "cached p99 {p99} ms");
    // Vanilla: the burst is cached at once, and the array spins down a minute after
    // the last write is acknowledged (its 200 read-modify-writes, about
    // 200 * 4 * 6 ms / 4 disks = 1.2 s of disk work, long done by then).
    let measured = run(&cached, 300, ConfigKind::Vanilla, &burst);
    let reading = measured.volumes[0].reading;
    let standby = reading.state_time[PowerState::Standby.index()].as_secs_f64();
    let idle = reading.state_time[PowerState::Idle.index()].as_secs_f64();
    assert!((61.0..61.1).contains(&idle), "idle {idle} s");
    assert!((standby + idle - 300.0).abs() < 1e-6, "standby {standby} s");
    // With a 0.1 s idle threshold the spin-down is asked for long before the destage
    // ends: the disks stay up until the last cached write is on them.
    let quick = with_cache.replace("vanilla_idle_s = 60.0", "vanilla_idle_s = 0.1");
    let quick = Topology::from_toml(&quick, "scenario").unwrap().layout(&["a_1".into()]).unwrap();
    let measured = run(&quick, 300, ConfigKind::Vanilla, &burst);
    let idle = measured.volumes[0].reading.state_time[PowerState::Idle.index()].as_secs_f64();
    // The array sleeps at 0.1 s, the burst wakes it, and after the acknowledgements
    // it would be idle only 0.1 s more without the wait; the destage of 200 scattered
    // read-modify-writes takes about a second.
    assert!(idle > 1.0, "idle only {idle} s: spun down before the destage ended");
    let uncached = run(&layout(&["a_1"]), 300, ConfigKind::Baseline, &burst);
    assert!(
        ms(uncached.write_latency_ns.max()) > 500.0,
        "uncached max {}",
        ms(uncached.write_latency_ns.max())
    );
}

#[test]
fn the_warm_up_is_replayed_but_not_measured() {
    // Goal: requests and energy of the warm-up do not count: a volume busy only during
    // a 10-minute warm-up and idle in the measured hour is charged only its standby
    // time (vanilla), and no request of the warm-up appears in the latencies.
    let layout = layout(&["a_1"]);
    let requests: Vec<_> =
        (0..100).map(|i| request(i as f64 * 5.0, 0, i * 4096, IoKind::Write)).collect();
    let window = RunWindow {
        warmup: VirtualDuration::from_secs(600),
        span: VirtualDuration::from_secs(3600),
    };
    let measured = Engine::new(&layout, ConfigKind::Vanilla, window)
        .run(requests.iter().copied(), &mut |_| {})
        .unwrap();
    assert_eq!(measured.write_latency_ns.len(), 0);
    assert_eq!(measured.volumes[0].writes, 0, "warm-up writes are not counted");
    let reading = measured.volumes[0].reading;
    assert_eq!(reading.state_time[PowerState::Standby.index()], VirtualDuration::from_secs(3600));
    assert!((reading.energy.as_joules() - 4.0 * 2.6 * 3600.0).abs() < 1e-6, "{:?}", reading.energy);
    assert_eq!(measured.timeline.total(), reading.energy);
}

#[test]
fn the_write_cache_gathers_sequential_writes_into_whole_stripes() {
    // Goal: a sequential stream of 64 KiB writes (a disk copy) on a cached RAID-5
    // array costs a write per unit and a parity write per stripe, so the disks keep
    // up and the cache never fills; the same writes scattered cost four operations
    // each on two disks, the destaging falls behind, the cache fills and writes wait.
    // Method: 20 s of 64 KiB writes at 400/s, interleaved with 4 KiB reads at 50/s
    // elsewhere, on a 4-disk array with a 128 MiB write cache; compare write p99 and
    // the disks' busy time.
    let with_cache = TOPOLOGY
        .replace("log_partition_gib = 4.0", "log_partition_gib = 4.0\nwrite_cache_mib = 128");
    let layout =
        Topology::from_toml(&with_cache, "scenario").unwrap().layout(&["a_1".into()]).unwrap();
    let at_secs = at;
    let stream = |offset: &dyn Fn(u64) -> u64| -> Vec<SimRequest> {
        let mut requests = Vec::new();
        for i in 0..8_000u64 {
            let at = 1.0 + i as f64 / 400.0;
            requests.push(SimRequest {
                arrival: at_secs(at),
                volume: VolumeId(0),
                range: ByteRange::new(offset(i), 65_536),
                kind: IoKind::Write,
            });
            if i % 8 == 0 {
                let read = (i * 2_654_435_761 % (1 << 20)) * 4096 + (64 << 30);
                requests.push(request(at + 0.0001, 0, read, IoKind::Read));
            }
        }
        requests
    };
    let sequential = run(&layout, 120, ConfigKind::Baseline, &stream(&|i| (1 << 30) + i * 65_536));
    let scattered = run(
        &layout,
        120,
        ConfigKind::Baseline,
        &stream(&|i| (i * 2_654_435_761 % (1 << 18)) * 65_536),
    );
    let p50 = |m: &RunMeasurements| ms(m.read_latency_ns.value_at_quantile(0.5));
    assert!(p50(&sequential) < 20.0, "sequential stream: read p50 {} ms", p50(&sequential));
    let p99 = |m: &RunMeasurements| ms(m.write_latency_ns.value_at_quantile(0.99));
    assert!(p99(&sequential) < 1.0, "sequential stream: write p99 {} ms", p99(&sequential));
    assert!(p99(&scattered) > 100.0, "scattered writes: write p99 {} ms", p99(&scattered));
    let busy = |m: &RunMeasurements| {
        m.volumes[0].reading.state_time[PowerState::Active.index()].as_secs_f64()
    };
    // 8,000 units on 4 disks: 8,000 data writes and 2,667 parity writes of about
    // 1 ms each (sequential: transfer and overhead), against 32,000 seeking operations.
    assert!(
        busy(&sequential) * 5.0 < busy(&scattered),
        "{} vs {}",
        busy(&sequential),
        busy(&scattered)
    );
}

#[test]
fn reads_pass_the_destaging_of_cached_writes() {
    // Goal: an array controller serves reads before destaging its cache: after a
    // burst of 2,000 scattered cached writes (about 12 s of read-modify-writes on 4
    // disks), reads take milliseconds, not the seconds of the backlog; without a cache
    // they queue behind the writes. Method: the burst at 1 s, then 20 scattered reads
    // from 1.5 s, 50 ms apart, elsewhere on the volume.
    let mut requests: Vec<_> = (0..2_000)
        .map(|i| request(1.0, 0, (i * 2_654_435_761 % (1 << 25)) * 4096, IoKind::Write))
        .collect();
    for i in 0..20u64 {
        let offset = (64 << 30) + (i * 40_503 % (1 << 20)) * 4096;
        requests.push(request(1.5 + i as f64 * 0.05, 0, offset, IoKind::Read));
    }
    let with_cache = TOPOLOGY
        .replace("log_partition_gib = 4.0", "log_partition_gib = 4.0\nwrite_cache_mib = 128");
    let cached =
        Topology::from_toml(&with_cache, "scenario").unwrap().layout(&["a_1".into()]).unwrap();
    let measured = run(&cached, 300, ConfigKind::Baseline, &requests);
    let max = ms(measured.read_latency_ns.max());
    assert!(max < 30.0, "with a cache, reads wait {max} ms");
    assert!(ms(measured.write_latency_ns.max()) < 1.0, "the burst fits in the cache");
    let uncached = run(&layout(&["a_1"]), 300, ConfigKind::Baseline, &requests);
    let max = ms(uncached.read_latency_ns.value_at_quantile(0.5));
    assert!(max > 1_000.0, "without a cache, reads queue behind the writes: p50 {max} ms");
}

#[test]
fn a_request_held_behind_a_spin_up_counts_as_delayed() {
    // Goal: a request served after an overlapping one that waited for a spin-up waited
    // for that spin-up too, and counts as delayed. Method: vanilla, one volume; a write
    // at 0 s, then (the volume asleep from about 60 s) writes to the same block at 100
    // and 100.5 s: the second waits for the spin-up, the third waits behind the
    // second. Both are late by about the spin-up, and both count.
    let layout = layout(&["a_1"]);
    let requests = [
        request(0.0, 0, 0, IoKind::Write),
        request(100.0, 0, 0, IoKind::Write),
        request(100.5, 0, 0, IoKind::Write),
    ];
    let measured = run(&layout, 300, ConfigKind::Vanilla, &requests);
    assert_eq!(measured.write_latency_ns.len(), 3);
    let late =
        measured.write_latency_ns.iter_recorded().filter(|v| ms(v.value_iterated_to()) > 10_000.0);
    assert_eq!(late.map(|v| v.count_at_value()).sum::<u64>(), 2, "two writes waited");
    assert_eq!(measured.writes_spin_delayed, 2, "both late writes count");
}

#[test]
fn a_write_held_behind_a_read_that_waits_for_a_spin_up_counts_as_delayed() {
    // Goal: under machine-level off-load a write is never sent home to a sleeping
    // volume, but one held (overlapping requests are served in order) behind a read
    // that waits for the home volume's spin-up waits as long, and counts as delayed.
    // Method: a_2 is read every 5 s (its logger stays awake); a_1, written once at 1 s,
    // sleeps from about 61 s. At 100 s a read of a block of a_1 wakes it; a write to the
    // same block at 100.5 s is held behind the read.
    let layout = layout(&["a_1", "a_2"]);
    let mut requests: Vec<_> =
        (0..60).map(|i| request(i as f64 * 5.0 + 0.5, 1, (i % 8) * 65536, IoKind::Read)).collect();
    requests.push(request(1.0, 0, 1 << 20, IoKind::Write));
    requests.push(request(100.0, 0, 0, IoKind::Read));
    requests.push(request(100.5, 0, 0, IoKind::Write));
    requests.sort_by_key(|r| r.arrival);
    let measured = run(&layout, 300, ConfigKind::Machine, &requests);
    assert_eq!(measured.volumes[0].reading.spin_ups, 1, "the read wakes a_1");
    assert!(ms(measured.write_latency_ns.max()) > 10_000.0, "the held write waits the spin-up");
    assert_eq!(measured.reads_spin_delayed, 1);
    assert_eq!(measured.writes_spin_delayed, 1, "the held write counts");
}

#[test]
fn a_replay_shorter_than_the_power_window_peaks_at_its_mean() {
    // Goal: peak power is the mean power of the busiest window over that window's own
    // length: a 30 s baseline replay of one 4-disk array (48 W all along) peaks at
    // 48 W, not 24 W (30 s of energy divided by a whole minute).
    let layout = layout(&["a_1"]);
    let measured = run(&layout, 30, ConfigKind::Baseline, &[request(1.0, 0, 0, IoKind::Write)]);
    let mean = measured.timeline.total().as_joules() / 30.0;
    assert!((mean - 48.0).abs() < 1e-9, "mean {mean} W");
    assert!(
        (measured.timeline.peak_watts() - 48.0).abs() < 1e-9,
        "{}",
        measured.timeline.peak_watts()
    );
}
