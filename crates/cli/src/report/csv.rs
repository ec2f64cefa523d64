//! The report's CSV files: the data behind each plot, one row per point.

use std::fmt::Write as _;

use somnus_sim::experiment::OffloadResult;

pub(super) fn energy_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,volume,energy_j,energy_pct_of_baseline,cdf\n");
    for config in &result.configs {
        let mut values: Vec<(f64, &str, f64)> =
            config.volumes.iter().map(|v| (v.energy_pct, v.name.as_str(), v.energy_j)).collect();
        values.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        for (rank, (pct, name, joules)) in values.iter().enumerate() {
            let cdf = (rank + 1) as f64 / values.len() as f64;
            let _ = writeln!(
                out,
                "{},{},{:.3},{:.4},{:.4}",
                config.config.name(),
                name,
                joules,
                pct,
                cdf
            );
        }
    }
    out
}

pub(super) fn power_csv(result: &OffloadResult) -> String {
    let mut out = String::from(
        "config,energy_j,energy_pct,mean_power_w,mean_power_pct,peak_power_w,peak_power_pct\n",
    );
    for c in &result.configs {
        let _ = writeln!(
            out,
            "{},{:.3},{:.4},{:.4},{:.4},{:.4},{:.4}",
            c.config.name(),
            c.energy_j,
            c.energy_pct,
            c.mean_power_w,
            c.mean_power_pct,
            c.peak_power_w,
            c.peak_power_pct
        );
    }
    out
}

pub(super) fn ccdf_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,kind,latency_ms,fraction_slower\n");
    for curve in &result.curves {
        for (ms, fraction) in &curve.points {
            let _ =
                writeln!(out, "{},{},{:.4},{:.8}", curve.config.name(), curve.kind, ms, fraction);
        }
    }
    out
}

pub(super) fn spinup_csv(result: &OffloadResult) -> String {
    let mut out = String::from("config,reads_delayed_pct,writes_delayed_pct\n");
    for c in &result.configs {
        let _ = writeln!(
            out,
            "{},{:.5},{:.5}",
            c.config.name(),
            c.spinup_delayed_reads_pct,
            c.spinup_delayed_writes_pct
        );
    }
    out
}

pub(super) fn volumes_csv(result: &OffloadResult) -> String {
    let mut out = String::from(
        "config,volume,server,rack,raid,disks,reads,writes,energy_j,energy_pct,standby_pct,sleep_blocked_pct,spin_ups,writes_offloaded,reads_from_loggers,bytes_reclaimed\n",
    );
    for c in &result.configs {
        for v in &c.volumes {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{:.3},{:.4},{:.4},{:.4},{},{},{},{}",
                c.config.name(),
                v.name,
                v.server,
                v.rack,
                v.raid.name(),
                v.disks,
                v.reads,
                v.writes,
                v.energy_j,
                v.energy_pct,
                v.standby_pct,
                v.sleep_blocked_pct,
                v.spin_ups,
                v.writes_offloaded,
                v.reads_from_loggers,
                v.bytes_reclaimed
            );
        }
    }
    out
}
