//! Prometheus metrics (`GET /metrics`): gauges set from the process's report at each
//! scrape, and request latency histograms recorded as requests finish. One recorder
//! per process, installed when the role starts.

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use somnus_core::cluster::ServerPower;

use crate::observe::status::{MdsReport, ServerReport, WireReport};

/// Bucket bounds of the latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0];

/// Installs this process's recorder; `None` if one is already installed (a test
/// running several roles in one process).
pub fn install() -> Option<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("seconds".into()), &LATENCY_BUCKETS)
        .ok()?
        .install_recorder()
        .ok()
}

/// A client request served: from its arrival to its answer.
pub fn request_done(kind: &'static str, seconds: f64) {
    histogram!("somnus_request_seconds", "kind" => kind).record(seconds);
}

/// A checkpoint of a server's replicas done (chunk files synced, snapshot written,
/// journal cut): the server's task serves nothing meanwhile.
pub fn checkpoint_done(seconds: f64) {
    histogram!("somnus_checkpoint_seconds").record(seconds);
}

/// A request answered with an error.
pub fn request_failed(kind: &'static str) {
    counter!("somnus_request_errors_total", "kind" => kind).increment(1);
}

fn power_code(power: ServerPower) -> f64 {
    match power {
        ServerPower::On => 0.0,
        ServerPower::Draining => 1.0,
        ServerPower::Asleep => 2.0,
        ServerPower::Waking => 3.0,
        ServerPower::Failed => 4.0,
        ServerPower::Removed => 5.0,
    }
}

pub fn record_server(report: &ServerReport) {
    let server = report.id.to_string();
    let power = report.power.map_or(-1.0, power_code);
    gauge!("somnus_server_power_state", "server" => server.clone()).set(power);
    let e = &report.energy;
    gauge!("somnus_power_watts", "unit" => "server", "source" => "model").set(e.watts);
    gauge!("somnus_energy_joules", "unit" => "server", "source" => "model").set(e.joules);
    gauge!("somnus_energy_if_always_on_joules", "unit" => "server").set(e.joules_if_always_on);
    if let Some(rapl) = e.rapl_joules {
        gauge!("somnus_energy_joules", "unit" => "package", "source" => "rapl").set(rapl);
    }
    gauge!("somnus_sleeps").set(e.sleeps as f64);
    gauge!("somnus_wakes").set(e.wakes as f64);
    gauge!("somnus_primaries").set(report.leads as f64);
    if let Some(free) = report.free_bytes {
        gauge!("somnus_disk_free_bytes").set(free as f64);
    }
    gauge!("somnus_disk_full").set(if report.full { 1.0 } else { 0.0 });
    gauge!("somnus_stored_bytes").set(report.stored_bytes as f64);
    if let Some(disk) = report.disk_bytes {
        gauge!("somnus_disk_used_bytes").set(disk as f64);
    }
    gauge!("somnus_pack_slots_used").set(report.slots_used as f64);
    gauge!("somnus_pack_slots_reserved").set(report.slots_reserved as f64);
    gauge!("somnus_journal_bytes").set(report.journal_bytes as f64);
    // The logger's live bytes are other servers' writes not yet reclaimed: the
    // reclaim backlog it holds; the used bytes are what its files take.
    gauge!("somnus_reclaim_backlog_bytes").set(report.dvl_live_bytes as f64);
    gauge!("somnus_dvl_used_bytes").set(report.dvl_used_bytes as f64);
    let c = &report.counters;
    for (name, value) in [
        ("writes_acknowledged", c.writes_acknowledged),
        ("reads_served", c.reads_served),
        ("requests_refused", c.requests_refused),
        ("corrupt_reads", c.corrupt_reads),
        ("blocks_repaired", c.blocks_repaired),
        ("writes_logged", c.writes_logged),
        ("bytes_logged", c.bytes_logged),
        ("writes_reclaimed", c.writes_reclaimed),
        ("reads_from_loggers", c.reads_from_loggers),
        ("rebuilt_bytes", c.rebuilt_bytes),
        ("writes_refused_no_space", c.writes_refused_no_space),
        ("disk_writes_failed", c.disk_writes_failed),
        ("objects_freed", c.objects_freed),
        ("logged_writes_dropped", c.logged_writes_dropped),
    ] {
        counter!(format!("somnus_{name}_total")).absolute(value);
    }
    record_wire(&report.wire);
}

pub fn record_mds(report: &MdsReport) {
    gauge!("somnus_gear").set(f64::from(report.gear));
    gauge!("somnus_objects").set(report.objects as f64);
    gauge!("somnus_rebuilds_under_way").set(report.rebuilds_under_way as f64);
    for server in &report.servers {
        let id = server.id.to_string();
        gauge!("somnus_server_power_state", "server" => id.clone()).set(power_code(server.power));
        gauge!("somnus_server_primaries", "server" => id.clone()).set(server.primaries as f64);
        let space = &server.space;
        gauge!("somnus_server_stored_bytes", "server" => id.clone()).set(space.stored_bytes as f64);
        if let Some(disk) = space.disk_bytes {
            gauge!("somnus_server_disk_used_bytes", "server" => id.clone()).set(disk as f64);
        }
        if let Some(free) = space.free_bytes {
            gauge!("somnus_server_disk_free_bytes", "server" => id.clone()).set(free as f64);
        }
        gauge!("somnus_server_to_free_bytes", "server" => id).set(space.to_free_bytes as f64);
    }
    let space = &report.space;
    gauge!("somnus_logical_bytes").set(space.logical_bytes as f64);
    gauge!("somnus_cluster_stored_bytes").set(space.stored_bytes as f64);
    gauge!("somnus_cluster_disk_used_bytes").set(space.disk_bytes as f64);
    gauge!("somnus_cluster_disk_free_bytes").set(space.free_bytes as f64);
    gauge!("somnus_cluster_to_free_bytes").set(space.to_free_bytes as f64);
    gauge!("somnus_frees_queued").set(space.frees_queued as f64);
    if let Some(rapl) = report.rapl_joules {
        gauge!("somnus_energy_joules", "unit" => "package", "source" => "rapl").set(rapl);
    }
    let c = &report.counters;
    counter!("somnus_view_changes_total").absolute(c.view_changes);
    counter!("somnus_migrations_total").absolute(c.migrations);
    counter!("somnus_servers_failed_total").absolute(c.servers_failed);
    counter!("somnus_wakes_total").absolute(c.wakes);
    counter!("somnus_orphans_found_total").absolute(c.orphans_found);
    record_wire(&report.wire);
}

fn record_wire(wire: &WireReport) {
    counter!("somnus_connections_authenticated_total").absolute(wire.connections_authenticated);
    for (kind, count) in &wire.refused {
        counter!("somnus_connections_refused_total", "kind" => kind.clone()).absolute(*count);
    }
    counter!("somnus_messages_dropped_total", "why" => "unreachable").absolute(wire.dropped);
    counter!("somnus_messages_dropped_total", "why" => "queue_full").absolute(wire.queue_full);
}
