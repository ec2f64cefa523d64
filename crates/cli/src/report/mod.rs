//! Output of the off-loading experiment: the summary tables printed on stdout, and the
//! report directory: CSV files and SVG plots equivalent to 004 Fig. 6 (energy per
//! volume), Fig. 7 (mean and peak power), Fig. 8 (response-time distributions) and
//! Fig. 10 (requests delayed by a spin-up). Everything written is a function of the
//! result alone, so the same run gives byte-identical files.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use somnus_sim::experiment::{ConfigReport, LatencySummary, OffloadResult};

use crate::provenance::OffloadProvenance;

mod csv;
pub(crate) mod gear;
mod plots;
pub(crate) mod sierra;

use csv::{ccdf_csv, energy_csv, power_csv, spinup_csv, volumes_csv};

fn latency(summary: &LatencySummary) -> String {
    if summary.count == 0 {
        return format!("{:>44}", "no requests");
    }
    format!(
        "{:>7.2} {:>8.2} {:>7.2} {:>8.2} {:>9.1}",
        summary.p50, summary.mean, summary.p95, summary.p99, summary.max
    )
}

/// The summary tables: one row per configuration, then energy per volume, then the
/// volumes that could not sleep for want of a logger.
pub(crate) fn tables(result: &OffloadResult) -> String {
    let mut out = String::new();
    energy_and_latency(&mut out, result);
    let _ = writeln!(out);
    delays_and_traffic(&mut out, result);
    let _ = writeln!(out);
    energy_per_volume(&mut out, result);
    kept_awake(&mut out, result);
    let unfinished: u64 = result.configs.iter().map(|c| c.requests_unfinished).sum();
    if unfinished > 0 {
        let _ = writeln!(
            out,
            "\nwarning: {unfinished} requests were still in flight an hour after the window ended"
        );
    }
    out
}

fn energy_and_latency(out: &mut String, result: &OffloadResult) {
    let _ = writeln!(
        out,
        "{:<9} {:>8} {:>8} {:>8}   {:<44} {:<44}",
        "config",
        "energy",
        "mean P",
        "peak P",
        "read ms: p50 mean p95 p99 max",
        "write ms: p50 mean p95 p99 max"
    );
    let _ = writeln!(out, "{:<9} {:>8} {:>8} {:>8}", "", "% base", "% base", "% base");
    for config in &result.configs {
        let _ = writeln!(
            out,
            "{:<9} {:>8.1} {:>8.1} {:>8.1}   {} {}",
            config.config.name(),
            config.energy_pct,
            config.mean_power_pct,
            config.peak_power_pct,
            latency(&config.read_ms),
            latency(&config.write_ms)
        );
    }
}

fn delays_and_traffic(out: &mut String, result: &OffloadResult) {
    let _ = writeln!(
        out,
        "{:<9} {:>13} {:>13} {:>11} {:>11} {:>14} {:>12}",
        "config", "spin-up delay", "spin-up delay", "writes", "remote", "network", "net peak"
    );
    let _ = writeln!(
        out,
        "{:<9} {:>13} {:>13} {:>11} {:>11} {:>14} {:>12}",
        "", "reads %", "writes %", "offloaded %", "reads %", "bytes", "Mbit/s"
    );
    for config in &result.configs {
        let _ = writeln!(
            out,
            "{:<9} {:>13.3} {:>13.3} {:>11.2} {:>11.3} {:>14} {:>12.2}",
            config.config.name(),
            config.spinup_delayed_reads_pct,
            config.spinup_delayed_writes_pct,
            config.writes_offloaded_pct,
            config.remote_reads_pct,
            somnus_trace::stats::thousands(config.network_bytes),
            config.network_peak_mbps,
        );
    }
}

fn energy_per_volume(out: &mut String, result: &OffloadResult) {
    let _ = write!(
        out,
        "{:<24} {:>6} {:>11} {:>9} {:>9}",
        "energy per volume", "rack", "array", "reads", "writes"
    );
    for config in &result.configs {
        let _ = write!(out, " {:>9}", format!("{} %", config.config.name()));
    }
    let _ = writeln!(out);
    let Some(first) = result.configs.first() else { return };
    for (index, volume) in first.volumes.iter().enumerate() {
        let array = format!("{} x{}", volume.raid.name(), volume.disks);
        let _ = write!(
            out,
            "{:<24} {:>6} {:>11} {:>9} {:>9}",
            volume.name, volume.rack, array, volume.reads, volume.writes
        );
        for config in &result.configs {
            let _ = write!(out, " {:>9.1}", config.volumes[index].energy_pct);
        }
        let _ = writeln!(out);
    }
}

/// The share of the window (%) from which a volume kept awake for want of a logger is
/// named: below it, the moments between a volume's idleness and a logger's report.
pub(crate) const KEPT_AWAKE_PCT_MIN: f64 = 1.0;

/// The volumes that were idle enough to sleep yet kept spinning because no logger on
/// other disks was awake to take their writes (004 3.1): why an off-load configuration
/// can use more energy than vanilla on a nearly idle volume.
fn kept_awake(out: &mut String, result: &OffloadResult) {
    let mut lines = Vec::new();
    for config in &result.configs {
        for volume in config.volumes.iter().filter(|v| v.sleep_blocked_pct >= KEPT_AWAKE_PCT_MIN) {
            lines.push(format!(
                "  {:<9} {:<24} {:>5.1} % of the window{}",
                config.config.name(),
                volume.name,
                volume.sleep_blocked_pct,
                if volume.standby_pct == 0.0 { ", never slept" } else { "" }
            ));
        }
    }
    if lines.is_empty() {
        return;
    }
    let _ =
        writeln!(out, "\nkept awake, idle, for want of an awake logger on other disks (004 3.1):");
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
}

/// Makes sure the report directory exists and takes files, before any long run: a
/// report that cannot be written fails at once, not after the replay.
pub(crate) fn prepare_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("creating report directory {}", dir.display()))?;
    let probe = dir.join(".somnus-write-test");
    fs::write(&probe, b"")
        .with_context(|| format!("report directory {} is not writable", dir.display()))?;
    fs::remove_file(&probe).with_context(|| format!("removing {}", probe.display()))
}

/// Writes one file of a report, naming it if that fails.
pub(crate) fn write_file(path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The schema name of the off-loading experiment's JSON (`--json`, `summary.json`).
pub(crate) const OFFLOAD_SCHEMA: &str = "somnus-offload";

/// The result as one JSON document: what produced it, then one object per
/// configuration (README, "JSON of the off-loading experiment").
pub(crate) fn json(result: &OffloadResult, provenance: &OffloadProvenance) -> Result<String> {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        #[serde(flatten)]
        provenance: &'a OffloadProvenance,
        configs: &'a [ConfigReport],
    }
    let body = Body { provenance, configs: &result.configs };
    Ok(crate::provenance::Document::new(OFFLOAD_SCHEMA, body).to_json()?)
}

/// Writes the report directory.
pub(crate) fn write_dir(
    dir: &Path,
    result: &OffloadResult,
    provenance: &OffloadProvenance,
    heading: &str,
) -> Result<()> {
    prepare_dir(dir)?;
    let write = |name: &str, text: String| write_file(&dir.join(name), text);
    write("summary.txt", format!("{heading}{}", tables(result)))?;
    write("summary.json", json(result, provenance)? + "\n")?;
    write("fig6_energy_per_volume.csv", energy_csv(result))?;
    write("fig7_power.csv", power_csv(result))?;
    write("fig8_response_time_ccdf.csv", ccdf_csv(result))?;
    write("fig10_spinup_delays.csv", spinup_csv(result))?;
    write("volumes.csv", volumes_csv(result))?;
    plots::write_all(dir, result, &plots::subtitle(provenance))?;
    Ok(())
}
