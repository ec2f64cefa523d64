//! The paper's data center, synthetic: the `msr-fast08` generator preset (36 volumes
//! on 13 servers, calibrated to 004 section 2) replayed under the four configurations.
//!
//! Goal: where volumes are as busy as the paper's, the simulator shows the paper's
//! findings: energy rack < machine < vanilla < baseline, off-loaded writes as fast as
//! the baseline's at machine level, and reads (and vanilla's writes) with the spin-up
//! tail. The shared MSR traces are too idle to show the ordering (docs/results/offload.md).
//! Method: the preset's first day at a quarter of its request rate, to keep the test
//! short; the built-in MSR Cambridge topology (004 Table 4's racks).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use somnus_sim::engine::{ConfigKind, RunWindow, SimRequest};
use somnus_sim::experiment::{ConfigReport, run_offload};
use somnus_sim::replay::peak_loads;
use somnus_sim::topology::Topology;
use somnus_trace::{SyntheticConfig, SyntheticTrace};
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

#[test]
fn the_papers_cluster_orders_energy_as_the_paper() {
    let mut config = SyntheticConfig::preset("msr-fast08").unwrap();
    config.duration_s = 86_400.0;
    config.mean_rate_per_s /= 4.0;
    let start_ns = config.start_unix_s.unwrap() * 1_000_000_000;
    let trace = || SyntheticTrace::new(&config, 7).unwrap();
    let names: Vec<String> = trace().volumes().iter().map(|(_, n)| n.to_owned()).collect();
    let to_sim = move |r: somnus_trace::Request| {
        Ok::<_, std::io::Error>(SimRequest {
            arrival: VirtualInstant(r.timestamp.0 - start_ns),
            volume: r.volume,
            range: ByteRange::new(r.offset_bytes, u64::from(r.size_bytes)),
            kind: r.kind,
        })
    };
    let requests = trace().map(Ok::<_, std::io::Error>);
    let loads = peak_loads(requests, names.len(), VirtualDuration::from_secs(60));
    let layout = Topology::msr_cambridge().layout_for_load(&names, &loads.unwrap()).unwrap();
    assert_eq!((layout.racks.len(), layout.servers.len()), (3, 13));
    let window = RunWindow::measured(VirtualDuration::from_secs(86_400));
    let result = run_offload(
        &layout,
        window,
        &ConfigKind::ALL,
        || Ok::<_, std::io::Error>(trace().map(to_sim)),
        &mut |_| {},
    )
    .unwrap();
    let get = |kind: ConfigKind| -> &ConfigReport {
        result.configs.iter().find(|c| c.config == kind).unwrap()
    };
    let (baseline, vanilla, machine, rack) = (
        get(ConfigKind::Baseline),
        get(ConfigKind::Vanilla),
        get(ConfigKind::Machine),
        get(ConfigKind::Rack),
    );
    let energy = [rack.energy_pct, machine.energy_pct, vanilla.energy_pct, baseline.energy_pct];
    eprintln!("energy % of baseline, rack / machine / vanilla / baseline: {energy:.1?}");
    assert!(energy.windows(2).all(|pair| pair[0] < pair[1]), "energy % {energy:?}");
    // The paper saves 28-36 % with vanilla and 36-49 % with machine-level off-load.
    assert!(vanilla.energy_pct < 85.0 && machine.energy_pct < vanilla.energy_pct - 5.0);
    // Writes never wait for a spin-up of their own volume when off-loaded.
    assert!(machine.write_ms.p99 <= baseline.write_ms.p99 * 1.1, "{:?}", machine.write_ms);
    assert_eq!(machine.spinup_delayed_writes_pct, 0.0);
    assert!(machine.writes_offloaded_pct > 5.0 && rack.writes_offloaded_pct > 5.0);
    // The spin-up tail: reads wait 10 to 15 s when they find their volume asleep.
    for report in [vanilla, machine, rack] {
        assert!(report.read_ms.max > 10_000.0, "{:?}: {:?}", report.config, report.read_ms);
    }
    assert!(vanilla.write_ms.max > 10_000.0 && vanilla.spinup_delayed_writes_pct > 0.0);
    assert!(baseline.read_ms.max < 1_000.0);
    // Rack-level off-load sends writes to other servers over the network.
    assert!(rack.network_bytes > 0 && machine.network_bytes == 0);
}
