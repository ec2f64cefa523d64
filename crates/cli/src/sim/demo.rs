//! `somnus sim demo`: the whole write off-loading experiment on a seeded synthetic day,
//! with no files needed.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_sim::engine::{ConfigKind, RunWindow, SimRequest};
use somnus_sim::experiment::run_offload;
use somnus_sim::replay::peak_loads;
use somnus_sim::topology::Topology;
use somnus_trace::{SyntheticConfig, SyntheticTrace};
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

use crate::progress::ProgressLine;
use crate::provenance::{Input, OffloadProvenance, Synthetic, TopologyInfo, WindowInfo};
use crate::sim::replay::{LOAD_WINDOW, ReplayOutcome, emit};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// Seed of the synthetic trace: the same seed gives the same output, byte for byte.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Hours of trace to generate and replay.
    #[arg(long, default_value_t = 24.0)]
    pub(crate) hours: f64,
    /// Print the results as one JSON document (schema `somnus-offload`: what produced
    /// it, then `configs`, one object per configuration) instead of tables; the README
    /// lists every key.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write CSV files and SVG plots (004 Fig. 6, 7, 8, 10) into this directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) report: Option<PathBuf>,
    /// A generator config (TOML, the knobs of `somnus trace generate --config`) to use
    /// instead of the demo's own. `--hours` replaces its `duration_s`, and it may not
    /// set `start_unix_s` (the demo replays from time 0); servers other than the demo
    /// topology's s00 to s05 each form a rack of their own.
    #[arg(long, value_name = "FILE.toml")]
    pub(crate) generator: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// The demo's generator: six servers of two volumes (a boot pair and a data array
/// each). Compared with the generator's defaults, volumes are quieter (0.5 requests/s
/// on average), mostly written (30 % reads, from 0 to 60 % per volume, as in the MSR
/// traces where 19 of 36 volumes are write-dominated), idle more often and follow a
/// deeper daily cycle: the regime where write off-loading pays (004 section 2).
fn demo_config(hours: f64) -> SyntheticConfig {
    SyntheticConfig {
        servers: 6,
        volumes_per_server: 2,
        duration_s: hours * 3600.0,
        mean_rate_per_s: 0.5,
        read_fraction: 0.3,
        read_fraction_spread: 0.3,
        idle_gap_probability: 0.2,
        diurnal_amplitude: 0.9,
        ..SyntheticConfig::default()
    }
}

fn to_sim(request: somnus_trace::Request) -> SimRequest {
    SimRequest {
        arrival: VirtualInstant(request.timestamp.0),
        volume: request.volume,
        range: ByteRange::new(request.offset_bytes, u64::from(request.size_bytes)),
        kind: request.kind,
    }
}

pub(crate) fn run(args: &DemoArgs) -> Result<()> {
    if let Some(dir) = &args.report {
        crate::report::prepare_dir(dir)?;
    }
    let outcome = simulate(args)?;
    emit(&outcome.result, &outcome.provenance, &outcome.heading, args.json, args.report.as_deref())
}

/// Generates the demo's synthetic trace and replays it under the four configurations.
pub(crate) fn simulate(args: &DemoArgs) -> Result<ReplayOutcome> {
    if !(args.hours > 0.0 && args.hours <= 24.0 * 7.0) {
        bail!("--hours must be more than 0 and at most a week (168), not {}", args.hours);
    }
    let config = generator_config(args)?;
    let trace = SyntheticTrace::new(&config, args.seed)?;
    let names: Vec<String> = trace.volumes().iter().map(|(_, name)| name.to_string()).collect();
    let span = VirtualDuration::from_nanos((args.hours * 3600e9) as u64);
    let mut requests = 0u64;
    let counted = trace.inspect(|_| requests += 1).map(Ok::<_, std::convert::Infallible>);
    let loads = peak_loads(counted, names.len(), LOAD_WINDOW)?;
    let layout = Topology::demo().layout_for_load(&names, &loads)?;
    if !args.quiet {
        noteln!(
            "simulating {} synthetic requests (seed {}) on {} volumes, four configurations...",
            somnus_trace::stats::thousands(requests),
            args.seed,
            names.len()
        );
    }
    let mut progress = ProgressLine::new(args.quiet);
    let source = || -> Result<_, std::io::Error> {
        let trace = SyntheticTrace::new(&config, args.seed).map_err(std::io::Error::other)?;
        Ok(trace.filter(|r| r.timestamp.0 < span.as_nanos()).map(|r| Ok(to_sim(r))))
    };
    let result =
        run_offload(&layout, RunWindow::measured(span), &ConfigKind::ALL, source, &mut |p| {
            progress.simulation(p)
        })?;
    let heading = format!(
        "synthetic trace (seed {}, results are synthetic): {} requests over {:.1} h\n\
         cluster: {} volumes on {} servers in {} racks, Seagate Cheetah 15K.4 disks (004 Table 3)\n\n",
        args.seed,
        somnus_trace::stats::thousands(requests),
        args.hours,
        names.len(),
        layout.servers.len(),
        layout.racks.len()
    );
    let provenance = provenance(args, span, requests, &layout);
    Ok(ReplayOutcome { result, provenance, heading })
}

/// The generator's knobs: the demo's own, or the file `--generator` names.
fn generator_config(args: &DemoArgs) -> Result<SyntheticConfig> {
    let Some(path) = &args.generator else { return Ok(demo_config(args.hours)) };
    let name = || format!("generator config {}", path.display());
    let mut config = crate::trace::read_generator_config(path)?;
    if config.start_unix_s.is_some() {
        // The demo replays from time 0; absolute timestamps would all fall after its span.
        bail!(
            "{}: start_unix_s is set, but the demo replays from time 0: remove it, or \
             generate the trace with `somnus trace generate` and replay it with `somnus sim \
             offload`",
            name()
        );
    }
    config.duration_s = args.hours * 3600.0;
    config.validate().with_context(name)?;
    Ok(config)
}

/// What produced the demo's result: the generator and seed, the span, the topology.
fn provenance(
    args: &DemoArgs,
    span: VirtualDuration,
    requests: u64,
    layout: &somnus_sim::topology::TraceLayout,
) -> OffloadProvenance {
    let generator = args
        .generator
        .as_ref()
        .map_or_else(|| "demo".to_string(), |path| path.display().to_string());
    let synthetic = Synthetic { generator, seed: args.seed, hours: args.hours };
    OffloadProvenance {
        input: Input { trace_files: Vec::new(), synthetic: Some(synthetic) },
        window: WindowInfo {
            day: None,
            start: format!("{:.3} s", 0.0),
            end: format!("{:.3} s", span.as_secs_f64()),
            span_s: span.as_secs_f64(),
            warmup_s: 0.0,
            requests,
        },
        topology: TopologyInfo::new("built-in demo", layout),
    }
}
