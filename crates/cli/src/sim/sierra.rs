//! `somnus sim sierra`: Sierra 4.3 on the cluster simulation: a block trace replayed
//! through the protocol with every server on and with the MDS's gear scheduler, side
//! by side (Fig. 11, Tables 2 and 3, Fig. 9b).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use somnus_core::gear::{Gearing, IoServerConfig, Policy};
use somnus_core::power::builtin_profile;
use somnus_sim::cluster::{ComputeLoad, TraceWorkload};
use somnus_sim::sierra::{SierraConfig, SierraResult, SierraRun, run_sierra};
use somnus_trace::TraceSet;
use somnus_types::VirtualDuration;

use crate::output::note;

#[derive(Args, Debug)]
pub(crate) struct SierraArgs {
    /// The trace files (any format `somnus trace stats` reads; `somnus trace generate
    /// --preset msr-fast08` writes a week of Write Off-Loading's data center).
    #[arg(long = "trace", required = true, num_args = 1.., value_name = "FILE")]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    input: crate::trace::InputArgs,
    /// N: storage servers. Default: provisioned for the trace's peak second at the
    /// simulated server's measured capability, in whole gear groups of at least 3.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    servers: Option<u32>,
    /// r: replicas of every chunk group, and gear groups.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=8))]
    replicas: u32,
    /// The gearing interval (Sierra's timescale), in seconds; it must divide a day.
    #[arg(long, default_value_t = 3600)]
    timescale: u64,
    /// Also replay at these timescales (seconds, comma-separated), for Sierra Fig. 9b
    /// (each is a whole replay).
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<u64>,
    /// Whole gear groups only, or servers of the next group too.
    #[arg(long, value_enum, default_value = "fractional")]
    gearing: GearingChoice,
    /// g_min: the fewest whole gear groups on.
    #[arg(long, default_value_t = 1)]
    gear_min: u32,
    /// Which scheduler decides.
    #[arg(long, value_enum, default_value = "hybrid")]
    policy: PolicyChoice,
    #[command(flatten)]
    hybrid: crate::sim::gear::HybridArgs,
    /// The servers' built-in power profile (watts, sleep and wake times).
    #[arg(long, default_value = "ecs2-storage-node")]
    server_profile: String,
    /// Room of each server's logger for the other servers' DVLs, in GiB: a sleeping
    /// replica's writes stay logged until it wakes, and a write that finds every
    /// logger full waits (and wakes the replicas, P4).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    logger_gib: u64,
    /// The cluster's compute, for the io-server controller (001): a number of max-perf
    /// servers needed throughout, or a CSV file of `second,servers` rows (from that
    /// trace second on; `#` starts a comment). The servers on are never fewer; those
    /// the compute does not need run in the profile's io-server state in the geared
    /// runs, and the all-on run keeps every server in max-perf. Needs a profile with an
    /// io-server state (`--server-profile obelix|asterix-i|asterix-ii`).
    #[arg(long, value_name = "N|FILE")]
    compute: Option<String>,
    /// How long the compute must stay lower before a server leaves max-perf.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    compute_dwell: u64,
    /// Max-perf servers provisioned above the measured compute, as a share (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    compute_headroom: f64,
    /// Seed of the cluster's layout and random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay only the first SECONDS of the trace.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Skip the history checker (C1, C3, C4 on every op): faster; the end checks
    /// still run.
    #[arg(long)]
    no_check: bool,
    /// Print one JSON document (schema `somnus-sierra`) instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write CSV files and SVG plots (gears against the load, power over time,
    /// latency CCDFs, the timescale sweep) into this directory.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GearingChoice {
    Full,
    Fractional,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PolicyChoice {
    Predictor,
    Hybrid,
}

pub(crate) fn run(args: &SierraArgs) -> Result<()> {
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        bail!("--duration {d}: must be a positive number of seconds");
    }
    let profile = builtin_profile(&args.server_profile)?;
    let config = SierraConfig {
        servers: args.servers,
        replicas: args.replicas,
        timescale_s: args.timescale,
        gearing: match args.gearing {
            GearingChoice::Full => Gearing::Full,
            GearingChoice::Fractional => Gearing::Fractional,
        },
        gear_min: args.gear_min,
        policy: match args.policy {
            PolicyChoice::Predictor => Policy::Predictor,
            PolicyChoice::Hybrid => Policy::Hybrid,
        },
        headroom: args.hybrid.headroom,
        dwell_s: args.hybrid.dwell_s,
        quiet_intervals: args.hybrid.quiet_intervals,
        profile,
        seed: args.seed,
        check_history: !args.no_check,
        sweep_s: args.sweep.clone(),
        sample_s: 60,
        logger_capacity_bytes: args.logger_gib << 30,
        compute: args.compute.as_deref().map(|spec| compute_load(spec, args)).transpose()?,
    };
    config.validate().map_err(anyhow::Error::msg)?;
    let set = TraceSet::open(&args.traces, &args.input.options())?;
    let workload = TraceWorkload::read(&set, args.duration)?;
    if workload.ops.is_empty() {
        bail!("the traces hold no request to replay");
    }
    note(format!(
        "{} trace file(s): {} requests of {} devices over {:.1} h",
        args.traces.len(),
        workload.ops.len(),
        workload.devices.len(),
        workload.span().as_secs_f64() / 3600.0
    ));
    let started = crate::progress::now();
    let mut line = crate::progress::ProgressLine::new(false);
    let result = run_sierra(Arc::new(workload), &config, |name, progress| {
        if progress.done == 0 {
            note(format!("replaying: {name} ({:.0} s so far)", started.elapsed().as_secs_f64()));
        } else {
            line.replay(name, progress);
        }
    })
    .map_err(anyhow::Error::msg)?;
    if let Some(dir) = &args.report {
        crate::report::sierra::write_all(dir, &result)
            .with_context(|| format!("writing the report to {}", dir.display()))?;
    }
    let text = if args.json { json(&result)? } else { tables(&result) };
    crate::output::print(&text)?;
    let violations = result.violations().count();
    if violations > 0 {
        bail!("{violations} checker violation(s): see `violations` above");
    }
    Ok(())
}

/// `--compute`: a number of servers throughout, or a file of `second,servers` steps.
fn compute_load(spec: &str, args: &SierraArgs) -> Result<ComputeLoad> {
    let config = IoServerConfig {
        io_server: true,
        headroom: args.compute_headroom,
        dwell: VirtualDuration::from_secs(args.compute_dwell),
    };
    if let Ok(servers) = spec.parse::<f64>() {
        return Ok(ComputeLoad { config, steps: vec![(0, servers)] });
    }
    let path = std::path::Path::new(spec);
    let text = std::fs::read_to_string(path).with_context(|| {
        format!("--compute {spec}: neither a number of servers nor a readable file")
    })?;
    let mut steps = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), index + 1);
        let (second, servers) = line
            .split_once(',')
            .with_context(|| format!("{}: expected `second,servers`, got {line:?}", at()))?;
        let second = second.trim().parse::<u64>().with_context(|| {
            format!("{}: second {:?} is not a whole number of seconds", at(), second.trim())
        })?;
        let servers = servers
            .trim()
            .parse::<f64>()
            .with_context(|| format!("{}: servers {:?} is not a number", at(), servers.trim()))?;
        steps.push((second, servers));
    }
    if steps.is_empty() {
        bail!("{}: no `second,servers` row", path.display());
    }
    Ok(ComputeLoad { config, steps })
}

fn json(result: &SierraResult) -> Result<String> {
    let mut value = serde_json::to_value(result)?;
    value["schema"] = "somnus-sierra".into();
    Ok(serde_json::to_string_pretty(&value)? + "\n")
}

fn tables(r: &SierraResult) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let c = &r.capability;
    let _ = writeln!(
        out,
        "{} requests, {} devices, {:.1} h; N = {} servers, r = {}",
        r.requests,
        r.devices,
        r.span_s / 3600.0,
        r.servers,
        r.replicas
    );
    let _ = writeln!(
        out,
        "server capability (measured on the simulated disk): {:.0} read / {:.0} write IOPS, \
         {:.1} / {:.1} MiB/s; peak second {:.2} servers' worth",
        c.read_iops, c.write_iops, c.read_mib_s, c.write_mib_s, r.peak_demand
    );
    let _ = writeln!(out, "bound (mean N_load / N): {:.1} %\n", 100.0 * r.bound_share);
    let _ = writeln!(
        out,
        "{:<24} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "run (Fig. 11)",
        "energy %",
        "on %",
        "read ms",
        "read p99",
        "write ms",
        "write p99",
        "errors",
        "unfin."
    );
    for run in std::iter::once(&r.all_on).chain(&r.sweep) {
        let _ = writeln!(
            out,
            "{:<24} {:>9.1} {:>8.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>7} {:>7}",
            label(run),
            100.0 * run.energy_share,
            100.0 * run.servers_on_share,
            run.read.mean_ms,
            run.read.p99_ms,
            run.write.mean_ms,
            run.write.p99_ms,
            run.errors,
            run.unfinished
        );
    }
    let _ = writeln!(
        out,
        "\n{:<24} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "DVL (Table 2)", "writes", "MiB logged", "reclaimed", "need MiB/s", "got MiB/s"
    );
    for run in &r.sweep {
        let _ = writeln!(
            out,
            "{:<24} {:>12} {:>12.1} {:>12} {:>12.3} {:>12.3}",
            label(run),
            run.writes_logged,
            run.bytes_logged as f64 / f64::from(1u32 << 20),
            run.writes_reclaimed,
            run.reclaim_needed_mib_s,
            run.reclaim_achieved_mib_s
        );
    }
    let _ = writeln!(
        out,
        "\n{:<24} {:>8} {:>9} {:>11} {:>11} {:>9} {:>7} {:>7}",
        "shifts (Table 3)",
        "shifts",
        "reactive",
        "migrations",
        "per shift",
        "retries",
        "wakes",
        "failed"
    );
    for run in &r.sweep {
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>9} {:>11} {:>11.1} {:>9} {:>7} {:>7}",
            label(run),
            run.shifts,
            run.reactive_shifts,
            run.migrations,
            run.migrations_per_shift,
            run.client_retries,
            run.wakes,
            run.servers_failed
        );
    }
    let runs = || std::iter::once(&r.all_on).chain(&r.sweep);
    if runs().any(|run| run.max_perf_hours + run.io_server_hours > 0.0) {
        let _ = writeln!(
            out,
            "\n{:<24} {:>12} {:>12} {:>12}",
            "io-server (001)", "max-perf h", "io-server h", "median W"
        );
        for run in runs() {
            let _ = writeln!(
                out,
                "{:<24} {:>12.1} {:>12.1} {:>12.1}",
                label(run),
                run.max_perf_hours,
                run.io_server_hours,
                run.median_watts
            );
        }
    }
    let _ = writeln!(out, "\nchecker violations: {}", r.violations().count());
    for v in r.violations().take(10) {
        let _ = writeln!(out, "  {v}");
    }
    out
}

fn label(run: &SierraRun) -> String {
    match run.timescale_s {
        Some(t) => format!("{} {t} s", run.name),
        None => run.name.clone(),
    }
}
