//! `somnus sim`: replay traces in the discrete-event simulator.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use somnus_core::offload::LoggerHost;
use somnus_core::power::PowerProfile;
use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{OffloadResult, run_offload};
use somnus_sim::replay::{Window, peak_loads};
use somnus_types::VirtualDuration;

/// The warm-up before a day: an hour settles every idle timer and logger.
const DAY_WARMUP_S: u64 = 3600;
const WARMUP_S_MAX: u64 = 7 * 24 * 3600;

/// Arrays are sized for the busiest minute of each volume (004 Fig. 1's peak rates).
pub(crate) const LOAD_WINDOW: VirtualDuration = VirtualDuration::from_secs(60);
use somnus_sim::topology::{Layout, Topology};
use somnus_trace::{DaySpec, TraceSet};

use crate::progress::ProgressLine;
use crate::provenance::{Input, OffloadProvenance, TopologyInfo, WindowInfo, trace_files};
use crate::report;
use crate::trace_cmd::InputArgs;

#[derive(Subcommand)]
pub(crate) enum SimCommand {
    /// Replay traces under the write off-loading configurations of FAST'08 (section
    /// 4.1) and compare each with the baseline: energy (total and per volume), mean and
    /// peak power, read and write response times, requests delayed by a spin-up, writes
    /// off-loaded, remote reads and network traffic.
    ///
    /// Volumes are laid out by a topology (default: the MSR Cambridge racks of 004
    /// Table 4; see `somnus show topology`): a volume named `host_disk` belongs to
    /// server `host`; servers no rack lists form a rack of their own.
    Offload(OffloadArgs),
    /// The simulator's demo: a seeded synthetic day of twelve volumes on three racks
    /// under the four configurations of Write Off-Loading (baseline, vanilla, machine,
    /// rack), and the summary table. Needs no files; takes a few seconds.
    Demo(crate::sim_demo::DemoArgs),
    /// Run the cluster protocol (metadata service, storage servers, clients) in a
    /// deterministic simulation with injected faults, one run per seed, and check
    /// every read (linearizable per block), every acknowledged write (r copies in r
    /// racks, never lost), one primary per epoch, and that replicas are equal once the
    /// faults heal. Prints one line per seed; a failing seed prints the command that
    /// replays it with its event trace, and the command exits 1.
    Cluster(crate::sim_cluster::ClusterArgs),
    /// Run Sierra's cases as scripted cluster simulations and print what each
    /// measured: a secondary crash under writes (DVL, reclaim), a primary crash (view
    /// change, recovery), a gear shift under load (primaries migrated, migration time,
    /// retried requests: Sierra Table 3), a failure in the lowest gear with g_min 1 and
    /// 2 (wakes, reads that waited), and a lost server's rebuild at several cluster
    /// sizes (rate against N/r: Sierra Fig. 12). Each run ends with the checks of `sim
    /// cluster`; a violation makes the command exit 1.
    Scenarios(crate::sim_scenarios::ScenarioArgs),
    /// Sierra 4.1 and 4.2 on a load series: the hour-of-day predictor's RMS error
    /// against days of training (Fig. 8a), its gear-selection errors under full
    /// gearing (Fig. 8b), and power as a share of always on for the oracle, the
    /// predictor and the hybrid, full and fractional gearing, g_min 1 and 2 (Fig.
    /// 9a), beside the bound (each interval's N_load / N). The predictor and the
    /// hybrid are the gear scheduler the metadata service runs.
    Gear(crate::sim_gear::GearArgs),
    /// The io-server paper's cluster power (001 Table 2) from the shipped Obelix,
    /// Asterix-I and Asterix-II profiles: 1 to N nodes in max-perf, the rest in the
    /// io-server state, beside the paper's watts.
    Ioserver(crate::sim_ioserver::IoServerArgs),
    /// Sierra 4.3 on the cluster simulation: a block trace replayed through the whole
    /// protocol (each device an object of 1 MiB chunks), once with every server on
    /// and once with the metadata service's gear scheduler choosing gears from the
    /// load its primaries report; energy against the bound, read and write latency
    /// (Fig. 11), DVL bytes and reclaim (Table 2), shifts, migrations and retries
    /// (Table 3), and optionally a sweep of timescales (Fig. 9b). The history checker
    /// runs in every replay; a violation makes the command exit 1.
    Sierra(crate::sim_sierra::SierraArgs),
}

/// The logger host rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LoggerHostChoice {
    /// Whichever volume goes idle last stays up (the paper).
    Any,
    /// The volume whose disks draw least stays up.
    Cheapest,
}

/// A configuration, or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConfigChoice {
    /// Volumes never spin down (the reference).
    Baseline,
    /// Spin down after 60 s idle; the next request waits for the spin-up.
    Vanilla,
    /// Off-load writes to loggers on the same server.
    Machine,
    /// Off-load writes to loggers anywhere in the rack.
    Rack,
    /// All four.
    All,
}

#[derive(Args)]
pub(crate) struct OffloadArgs {
    /// Trace files; together they form one trace set, merged in time order.
    #[arg(long = "trace", required = true, num_args = 1.., value_name = "FILES")]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
    /// Configurations to run, comma-separated. The baseline always runs as the
    /// reference, and is printed when asked for.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    config: Vec<ConfigChoice>,
    /// Replay one calendar day: N (the Nth day from the UTC midnight at or before the
    /// first request; from time 0 for traces without absolute time) or YYYY-MM-DD.
    /// A day the trace covers only in part is measured over that part. Without it the
    /// whole trace is replayed, from its first request to its last.
    #[arg(long, value_name = "N|YYYY-MM-DD")]
    day: Option<DaySpec>,
    /// Seconds of trace before the window replayed first but not measured, so that
    /// the window starts with its disks as the preceding hour left them; never before
    /// the first request, where every disk spins. Default: 3600 with --day, 0 for the
    /// whole trace (nothing precedes it).
    #[arg(long, value_name = "SECONDS")]
    warmup_s: Option<u64>,
    /// Print the results as one JSON document (schema `somnus-offload`: what produced
    /// it, then `configs`, one object per configuration) instead of tables; the README
    /// lists every key.
    #[arg(long)]
    json: bool,
    /// Also write CSV files and SVG plots equivalent to 004 Fig. 6, 7, 8 and 10 into
    /// this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// A topology file (TOML) instead of the built-in MSR Cambridge one.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// Which volume of a logger group stays awake to take the others' writes: any
    /// (whichever goes idle last, as in 004 3.1) or cheapest (the volume whose disks
    /// draw least). Overrides the topology's policy.logger_host.
    #[arg(long, value_enum)]
    logger_host: Option<LoggerHostChoice>,
    /// A power profile file (TOML) the topology may name; may be repeated.
    #[arg(long = "profile", value_name = "FILE")]
    profiles: Vec<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn run(command: SimCommand) -> Result<()> {
    match command {
        SimCommand::Offload(args) => offload(&args),
        SimCommand::Demo(args) => crate::sim_demo::run(&args),
        SimCommand::Cluster(args) => crate::sim_cluster::run(&args),
        SimCommand::Scenarios(args) => crate::sim_scenarios::run(&args),
        SimCommand::Gear(args) => crate::sim_gear::run(&args),
        SimCommand::Ioserver(args) => crate::sim_ioserver::run(&args),
        SimCommand::Sierra(args) => crate::sim_sierra::run(&args),
    }
}

/// The configurations a list of choices names, in the paper's order.
pub(crate) fn kinds(choices: &[ConfigChoice]) -> Vec<ConfigKind> {
    let all = choices.contains(&ConfigChoice::All);
    ConfigKind::ALL
        .into_iter()
        .filter(|kind| {
            all || choices.iter().any(|choice| match choice {
                ConfigChoice::Baseline => *kind == ConfigKind::Baseline,
                ConfigChoice::Vanilla => *kind == ConfigKind::Vanilla,
                ConfigChoice::Machine => *kind == ConfigKind::Machine,
                ConfigChoice::Rack => *kind == ConfigKind::Rack,
                ConfigChoice::All => true,
            })
        })
        .collect()
}

/// Loads the topology and the extra profiles it may name.
pub(crate) fn load_topology(path: Option<&Path>, profiles: &[PathBuf]) -> Result<Topology> {
    let mut topology = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading topology {}", path.display()))?;
            Topology::from_toml(&text, &path.display().to_string())?
        }
        None => Topology::msr_cambridge(),
    };
    for path in profiles {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading power profile {}", path.display()))?;
        topology.register_profile(PowerProfile::from_toml(&text, &path.display().to_string())?);
    }
    Ok(topology)
}

fn offload(args: &OffloadArgs) -> Result<()> {
    if let Some(dir) = &args.report {
        report::prepare_dir(dir)?;
    }
    let mut topology = load_topology(args.topology.as_deref(), &args.profiles)?;
    match args.logger_host {
        Some(LoggerHostChoice::Any) => topology.set_logger_host(LoggerHost::Any),
        Some(LoggerHostChoice::Cheapest) => topology.set_logger_host(LoggerHost::Cheapest),
        None => {}
    }
    let request = ReplayRequest {
        traces: &args.traces,
        input: args.input.options(),
        day: args.day,
        warmup_s: args.warmup_s,
        kinds: kinds(&args.config),
        quiet: args.quiet,
    };
    let outcome = replay(&request, &topology, args.topology.as_deref())?;
    emit(&outcome.result, &outcome.provenance, &outcome.heading, args.json, args.report.as_deref())
}

/// One replay of a trace set under some configurations: what `sim offload` runs, and
/// `reproduce` runs many of.
pub(crate) struct ReplayRequest<'a> {
    pub(crate) traces: &'a [PathBuf],
    pub(crate) input: somnus_trace::ReadOptions,
    pub(crate) day: Option<DaySpec>,
    pub(crate) warmup_s: Option<u64>,
    pub(crate) kinds: Vec<ConfigKind>,
    pub(crate) quiet: bool,
}

/// A replay's result, what produced it, and the heading of its tables.
pub(crate) struct ReplayOutcome {
    pub(crate) result: OffloadResult,
    pub(crate) provenance: OffloadProvenance,
    pub(crate) heading: String,
}

/// Replays a trace set on `topology` (read from `topology_file`, if it was).
pub(crate) fn replay(
    request: &ReplayRequest<'_>,
    topology: &Topology,
    topology_file: Option<&Path>,
) -> Result<ReplayOutcome> {
    if !request.quiet {
        noteln!("reading {} trace file(s)...", request.traces.len());
    }
    let set = TraceSet::open(request.traces, &request.input)?;
    let summary = set.summary();
    if summary.skipped_count > 0 && !request.quiet {
        let first = summary.files.iter().find_map(|file| file.skipped.first_errors.first());
        noteln!(
            "skipped {} malformed or out-of-order record(s) (--skip-bad); the first: {}",
            summary.skipped_count,
            first.map_or("", String::as_str)
        );
    }
    let window = measured_window(request.day, request.warmup_s, request.quiet, summary)?;
    let names: Vec<String> = set.volumes().iter().map(|(_, name)| name.to_string()).collect();
    let loads = peak_loads(set.requests(), names.len(), LOAD_WINDOW)?;
    let layout = topology.layout_for_load(&names, &loads)?;
    if let Some(path) = topology_file {
        warn_of_unused_names(path, topology, &layout);
    }
    let in_window = count_in_window(&set, window)?;
    if !request.quiet {
        noteln!(
            "replaying {} requests of {} volumes over {:.1} h in {} configuration(s)...",
            somnus_trace::stats::thousands(in_window),
            names.len(),
            window.span().as_secs_f64() / 3600.0,
            request.kinds.len()
        );
    }
    let mut progress = ProgressLine::new(request.quiet);
    let result = run_offload(
        &layout,
        window.run_window(),
        &request.kinds,
        || Ok::<_, somnus_trace::TraceError>(window.sim_requests(set.requests())),
        &mut |p| progress.simulation(p),
    )?;
    let heading = heading(&set, window, &layout, in_window);
    let provenance = OffloadProvenance {
        input: Input { trace_files: trace_files(summary), synthetic: None },
        window: window_info(summary.time_base, window, request.day, in_window),
        topology: TopologyInfo::new(topology.origin(), &layout),
    };
    Ok(ReplayOutcome { result, provenance, heading })
}

/// The window `--day` and `--warmup-s` ask for (the whole set without `--day`).
fn measured_window(
    day: Option<DaySpec>,
    warmup_s: Option<u64>,
    quiet: bool,
    summary: &somnus_trace::TraceSummary,
) -> Result<Window> {
    let window = match day {
        Some(day) => {
            let window = Window::day(summary, day)?;
            if window.span().as_nanos() < somnus_trace::day::DAY_NS && !quiet {
                noteln!(
                    "day {day} is covered by the trace only in part: measuring the {:.2} h it covers",
                    window.span().as_secs_f64() / 3600.0
                );
            }
            window
        }
        None => Window::whole(summary).ok_or(somnus_trace::DayError::EmptySet)?,
    };
    let warmup_s = warmup_s.unwrap_or(if day.is_some() { DAY_WARMUP_S } else { 0 });
    if warmup_s > WARMUP_S_MAX {
        bail!("--warmup-s is at most {WARMUP_S_MAX} (a week), not {warmup_s}");
    }
    Ok(window.with_warmup(VirtualDuration::from_secs(warmup_s)))
}

/// In a topology written for these volumes, a rack naming a server no volume is on, or
/// a `[[volume]]` naming no volume, is most likely a misspelt name; in a copy of a
/// built-in topology replayed on part of its data center, it is normal. Say so, once
/// (the built-in topologies themselves are not checked).
fn warn_of_unused_names(path: &Path, topology: &Topology, layout: &Layout) {
    let servers = topology.rack_servers_unused(layout);
    if !servers.is_empty() {
        let named: Vec<String> =
            servers.iter().map(|(rack, server)| format!("{server:?} ({rack})")).collect();
        noteln!(
            "warning: {}: racks name servers no volume of the trace set is on: {} (fine for \
             a trace set that covers part of the data center; a misspelt name otherwise)",
            path.display(),
            named.join(", ")
        );
    }
    let volumes = topology.volume_overrides_unused(layout);
    if !volumes.is_empty() {
        noteln!(
            "warning: {}: [[volume]] entries name volumes the trace set does not have, and \
             are not used: {}",
            path.display(),
            volumes.iter().map(|name| format!("{name:?}")).collect::<Vec<_>>().join(", ")
        );
    }
}

/// Prints the result and writes the report directory.
pub(crate) fn emit(
    result: &OffloadResult,
    provenance: &OffloadProvenance,
    heading: &str,
    json: bool,
    report_dir: Option<&Path>,
) -> Result<()> {
    if json {
        outln!("{}", report::json(result, provenance)?)?;
    } else {
        out!("{heading}")?;
        out!("{}", report::tables(result))?;
    }
    if let Some(dir) = report_dir {
        report::write_dir(dir, result, provenance, heading)?;
        if !json {
            outln!("\nreport written to {}", dir.display())?;
        }
    }
    Ok(())
}

/// The measured window, for the provenance of a result.
fn window_info(
    time_base: somnus_trace::TimeBase,
    window: Window,
    day: Option<DaySpec>,
    requests: u64,
) -> WindowInfo {
    WindowInfo {
        day: day.map(|day| day.to_string()),
        start: somnus_trace::stats::format_timestamp(time_base, window.start),
        end: somnus_trace::stats::format_timestamp(time_base, window.end),
        span_s: window.span().as_secs_f64(),
        warmup_s: window.warmup.as_secs_f64(),
        requests,
    }
}

fn count_in_window(set: &TraceSet, window: Window) -> Result<u64> {
    // The pre-scan counted every record; a day needs one more pass, which is cheap
    // next to the simulation.
    if Window::whole(set.summary()) == Some(window) {
        return Ok(set.summary().record_count);
    }
    let mut count = 0;
    for request in set.requests_between(window.start, window.end) {
        request?;
        count += 1;
    }
    Ok(count)
}

fn heading(set: &TraceSet, window: Window, layout: &Layout, requests: u64) -> String {
    let summary = set.summary();
    let from = somnus_trace::stats::format_timestamp(summary.time_base, window.start);
    let to = somnus_trace::stats::format_timestamp(summary.time_base, window.end);
    let warmup = if window.warmup.as_nanos() > 0 {
        format!(", after a warm-up of {:.0} s", window.warmup.as_secs_f64())
    } else {
        String::new()
    };
    format!(
        "trace set: {} file(s), {} volumes, {} requests in the window {} .. {} ({:.2} h{warmup})\n\
         cluster: {} racks, {} servers, {} disks\n\n",
        summary.files.len(),
        layout.volumes.len(),
        somnus_trace::stats::thousands(requests),
        from,
        to,
        window.span().as_secs_f64() / 3600.0,
        layout.racks.len(),
        layout.servers.len(),
        layout.volumes.iter().map(|v| v.disks).sum::<u32>(),
    )
}
