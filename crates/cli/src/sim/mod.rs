//! `somnus sim`: replay traces in the discrete-event simulator. Each subcommand is a
//! module of its own; `replay` is the off-loading replay several of them (and `bench`,
//! `reproduce`) share.

pub(crate) mod cluster;
pub(crate) mod demo;
pub(crate) mod gear;
pub(crate) mod ioserver;
pub(crate) mod replay;
pub(crate) mod scenarios;
pub(crate) mod sierra;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use somnus_core::offload::LoggerHost;
use somnus_sim::engine::ConfigKind;

use somnus_trace::DaySpec;

use crate::report;
use crate::trace::InputArgs;
use replay::{ReplayRequest, emit, load_topology, replay};

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
    Demo(crate::sim::demo::DemoArgs),
    /// Run the cluster protocol (metadata service, storage servers, clients) in a
    /// deterministic simulation with injected faults, one run per seed, and check
    /// every read (linearizable per block), every acknowledged write (r copies in r
    /// racks, never lost), one primary per epoch, and that replicas are equal once the
    /// faults heal. Prints one line per seed; a failing seed prints the command that
    /// replays it with its event trace, and the command exits 1.
    Cluster(crate::sim::cluster::ClusterArgs),
    /// Run Sierra's cases as scripted cluster simulations and print what each
    /// measured: a secondary crash under writes (DVL, reclaim), a primary crash (view
    /// change, recovery), a gear shift under load (primaries migrated, migration time,
    /// retried requests: Sierra Table 3), a failure in the lowest gear with g_min 1 and
    /// 2 (wakes, reads that waited), and a lost server's rebuild at several cluster
    /// sizes (rate against N/r: Sierra Fig. 12). Each run ends with the checks of `sim
    /// cluster`; a violation makes the command exit 1.
    Scenarios(crate::sim::scenarios::ScenarioArgs),
    /// Sierra 4.1 and 4.2 on a load series: the hour-of-day predictor's RMS error
    /// against days of training (Fig. 8a), its gear-selection errors under full
    /// gearing (Fig. 8b), and power as a share of always on for the oracle, the
    /// predictor and the hybrid, full and fractional gearing, g_min 1 and 2 (Fig.
    /// 9a), beside the bound (each interval's N_load / N). The predictor and the
    /// hybrid are the gear scheduler the metadata service runs.
    Gear(crate::sim::gear::GearArgs),
    /// The io-server paper's cluster power (001 Table 2) from the shipped Obelix,
    /// Asterix-I and Asterix-II profiles: 1 to N nodes in max-perf, the rest in the
    /// io-server state, beside the paper's watts.
    Ioserver(crate::sim::ioserver::IoServerArgs),
    /// Sierra 4.3 on the cluster simulation: a block trace replayed through the whole
    /// protocol (each device an object of 1 MiB chunks), once with every server on
    /// and once with the metadata service's gear scheduler choosing gears from the
    /// load its primaries report; energy against the bound, read and write latency
    /// (Fig. 11), DVL bytes and reclaim (Table 2), shifts, migrations and retries
    /// (Table 3), and optionally a sweep of timescales (Fig. 9b). The history checker
    /// runs in every replay; a violation makes the command exit 1.
    Sierra(crate::sim::sierra::SierraArgs),
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
        SimCommand::Demo(args) => crate::sim::demo::run(&args),
        SimCommand::Cluster(args) => crate::sim::cluster::run(&args),
        SimCommand::Scenarios(args) => crate::sim::scenarios::run(&args),
        SimCommand::Gear(args) => crate::sim::gear::run(&args),
        SimCommand::Ioserver(args) => crate::sim::ioserver::run(&args),
        SimCommand::Sierra(args) => crate::sim::sierra::run(&args),
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
