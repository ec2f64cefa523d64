//! `somnus sim cluster`: the cluster protocol under injected faults, seed by seed,
//! every read checked (issue 11; docs/protocol.md).

use std::ops::RangeInclusive;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use somnus_core::cluster::server::Broken;
use somnus_sim::cluster::{
    ClusterSim, ClusterSpec, FaultKind, FaultSet, LoggerBackend, SeedReport,
};

/// The most seeds one command runs.
const SEEDS_MAX: u64 = 10_000_000;

#[derive(Args, Debug)]
pub(crate) struct ClusterArgs {
    /// The seeds to run, `A..B` (both included) or one seed.
    #[arg(long, default_value = "1..16", value_parser = parse_seeds)]
    seeds: RangeInclusive<u64>,
    /// Storage servers.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(u32).range(1..=4096))]
    servers: u32,
    /// Replicas of every chunk group (r), also the number of gear groups.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=8))]
    replicas: u32,
    /// Racks (fault domains); at least r.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=4096))]
    racks: u32,
    /// Clients, each with one op in flight (closed loop).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    clients: u32,
    /// Fault kinds: `all`, `none`, or a list of loss, duplication, delay, partition,
    /// crash, corrupt, slow-disk, full-disk, gear, lost, mds-crash, disk-error,
    /// power-cut (README: what each does).
    #[arg(long, default_value = "all", value_parser = FaultSet::parse)]
    faults: FaultSet,
    /// Virtual seconds of workload under faults; the heal and quiesce follow.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    virtual_secs: u64,
    /// The share of the random ops that replace an object (a new data object written
    /// and bound to its name, or the name deleted and made again), 0 to 1: what they
    /// replace is freed on every server a grace (3 s) later, and checked (F1-F3,
    /// docs/space.md).
    #[arg(long, default_value_t = 0.05, value_parser = parse_share)]
    churn: f64,
    /// Run a deliberately broken protocol, to see the checker catch it.
    #[arg(long, value_enum)]
    broken: Option<BrokenChoice>,
    /// Where each server's logger keeps its records: in the real `logstore` engine over
    /// an in-memory disk, which carries out every commit of the core's and answers its
    /// reads (checked: its reads against the index, its live bytes against the core's
    /// model, its recovery after each crash), or nowhere (the core's model of the log
    /// alone answers; faster, the same run otherwise).
    #[arg(long, value_enum, default_value = "logstore")]
    logger: LoggerChoice,
    /// Print every event of each seed (message, disk completion, fault) to stderr.
    #[arg(long)]
    trace: bool,
    /// Draw each seed's cluster and fault rates from the seed (VOPR-style): 3 to 5
    /// racks, r of 2 or 3, 1 to 3 servers per rack and replica, 2 to 6 groups per
    /// server, chunks of 256 KiB to 1 MiB, 4 to 12 objects, 1 to 6 clients, churn up
    /// to 10 %, each message fault 0 to 3 % (delay 0 to 10 %), each other fault a
    /// third to three times as often as by default; the shape flags are then ignored
    /// (`--faults` still says which kinds), and each seed's line says what was drawn.
    #[arg(long)]
    draw: bool,
    /// Run each seed twice and fail it where the two runs differ in any figure or
    /// event (a hash of every event handled, with its time): the simulation must be
    /// deterministic for a failing seed to be replayed.
    #[arg(long)]
    twice: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LoggerChoice {
    /// The `logstore` engine, stepped by the simulation's events.
    Logstore,
    /// The core's model of a log.
    Model,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BrokenChoice {
    /// The primary acknowledges once its own copy is durable.
    AckAfterOneReplica,
    /// No epoch or lease is checked, by primaries, replicas or loggers.
    SkipEpochCheck,
    /// A new primary recovers its DVL from one logger fewer than L - r_L + 1.
    TooFewLoggers,
    /// Loggers answer a DVL recovery without fencing the old epoch first.
    ReclaimBeforeFencing,
    /// A rebuild reports the new replica complete without copying a chunk.
    RebuildWithoutCopy,
    /// Clients read from a secondary, which answers from its own copy.
    ReadFromSecondary,
    /// A primary serves reads from its own copy though it lacks logged writes.
    ReadWithoutLoggers,
    /// The MDS sends a deleted object's frees at once, without the grace.
    FreeBeforeGrace,
    /// The MDS frees the data a bind names instead of the data it replaces.
    FreeNamed,
    /// A logged write counts as stale once a newer one overlaps it, not covers it.
    SupersedeOverlapped,
    /// A primary never asks to wake the sleeping holders of logged writes a read awaits.
    NeverWakeHolders,
    /// A logger takes a log commit its disk failed as done (found by `disk-error`).
    FailedLogCommitTaken,
    /// The MDS keeps logger views in memory only (found by `power-cut`).
    LoggerViewInMemory,
    /// A primary whose DVL recovery lost a logger serves without a resync (found by
    /// `lost`).
    SkipResync,
}

pub(crate) fn parse_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        Ok(share) => Err(format!("{share} is not a share between 0 and 1")),
        Err(error) => Err(format!("{text:?}: {error}")),
    }
}

fn parse_seeds(text: &str) -> Result<RangeInclusive<u64>, String> {
    let parse = |s: &str| s.trim().parse::<u64>().map_err(|e| format!("seed {s:?}: {e}"));
    let (a, b) = match text.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b.trim_start_matches('='))?),
        None => (parse(text)?, parse(text)?),
    };
    if a > b {
        return Err(format!("seeds {a}..{b}: the first is after the last"));
    }
    if b - a >= SEEDS_MAX {
        return Err(format!("seeds {a}..{b}: more than {SEEDS_MAX} seeds"));
    }
    Ok(a..=b)
}

pub(crate) fn run(args: &ClusterArgs) -> Result<()> {
    let broken = args.broken.map(|b| match b {
        BrokenChoice::AckAfterOneReplica => Broken::AckAfterOneReplica,
        BrokenChoice::SkipEpochCheck => Broken::SkipEpochCheck,
        BrokenChoice::TooFewLoggers => Broken::TooFewLoggers,
        BrokenChoice::ReclaimBeforeFencing => Broken::ReclaimBeforeFencing,
        BrokenChoice::RebuildWithoutCopy => Broken::RebuildWithoutCopy,
        BrokenChoice::ReadFromSecondary => Broken::ReadFromSecondary,
        BrokenChoice::ReadWithoutLoggers => Broken::ReadWithoutLoggers,
        BrokenChoice::FreeBeforeGrace => Broken::FreeBeforeGrace,
        BrokenChoice::FreeNamed => Broken::FreeNamed,
        BrokenChoice::SupersedeOverlapped => Broken::SupersedeOverlapped,
        BrokenChoice::NeverWakeHolders => Broken::NeverWakeHolders,
        BrokenChoice::FailedLogCommitTaken => Broken::FailedLogCommitTaken,
        BrokenChoice::LoggerViewInMemory => Broken::LoggerViewInMemory,
        BrokenChoice::SkipResync => Broken::SkipResync,
    });
    let spec = ClusterSpec {
        servers: args.servers,
        replicas: args.replicas,
        racks: args.racks,
        clients: args.clients,
        faults: args.faults,
        virtual_secs: args.virtual_secs,
        churn: args.churn,
        broken,
        logger: match args.logger {
            LoggerChoice::Logstore => LoggerBackend::Logstore,
            LoggerChoice::Model => LoggerBackend::Model,
        },
        ..ClusterSpec::small()
    };
    if let Err(error) = spec.validate(*args.seeds.start()) {
        bail!(
            "--servers {} --replicas {} --racks {}: {error}",
            spec.servers,
            spec.replicas,
            spec.racks
        );
    }
    let mut failing = Vec::new();
    let mut totals = SeedReport::default();
    let started = crate::progress::now();
    for seed in args.seeds.clone() {
        let mut print = |line: String| crate::output::note(line);
        let trace: Option<&mut dyn FnMut(String)> =
            if args.trace { Some(&mut print) } else { None };
        let spec = match args.draw {
            true => ClusterSpec::drawn(&spec, seed),
            false => spec.clone(),
        };
        let mut report = ClusterSim::new(&spec, seed, trace).run();
        if args.twice {
            let again = ClusterSim::new(&spec, seed, None).run();
            if again != report {
                report.violation_count += 1;
                report.violations.push(format!(
                    "nondeterministic: a second run differs (events hash {:016x}, then {:016x})",
                    report.event_hash, again.event_hash
                ));
            }
        }
        if args.draw {
            outln!("seed {seed}: {}", spec.shape())?;
        }
        let verdict = if report.violation_count == 0 {
            "ok".to_owned()
        } else {
            format!("FAIL ({} violations)", report.violation_count)
        };
        outln!(
            "seed {seed}: {verdict}: {} ops ({} writes, {} reads), {} crashes, {} MDS crashes, {} partitions, {} corruptions, {} gear shifts, {} lost ({:.1} MiB rebuilt), {} view changes, {} writes logged, {} reclaimed, {} superseded, {} reads from loggers ({} holder wakes), {} reads again, {} client retries, {} replaced ({} frees, {} logged writes dropped, {} orphans), {:.1} virtual s; faults injected: {}",
            report.ops,
            report.writes,
            report.reads,
            report.crashes,
            report.mds_crashes,
            report.faults.get(FaultKind::Partition),
            report.faults.get(FaultKind::Corrupt),
            report.gear_shifts,
            report.faults.get(FaultKind::Lost),
            report.rebuilt_bytes as f64 / (1u64 << 20) as f64,
            report.view_changes,
            report.writes_logged,
            report.writes_reclaimed,
            report.writes_superseded,
            report.reads_from_loggers,
            report.holder_wakes_asked,
            report.reads_again,
            report.client_retries,
            report.churns,
            report.objects_freed,
            report.logged_writes_dropped,
            report.orphans_found,
            report.virtual_nanos as f64 / 1e9,
            report.faults
        )?;
        for violation in &report.violations {
            outln!("  {violation}")?;
        }
        if report.violation_count > 0 {
            outln!("  replay: {}", replay_command(args, seed))?;
            failing.push(seed);
        }
        totals.ops += report.ops;
        totals.messages += report.messages;
        totals.disk_ios += report.disk_ios;
        totals.crashes += report.crashes;
        totals.mds_crashes += report.mds_crashes;
        totals.writes_logged += report.writes_logged;
        totals.reads_from_loggers += report.reads_from_loggers;
        totals.reads_again += report.reads_again;
        totals.violation_count += report.violation_count;
        totals.faults.merge(&report.faults);
    }
    let seeds = args.seeds.end() - args.seeds.start() + 1;
    outln!(
        "{seeds} seeds, {} failing, {} violations; {} ops, {} messages, {} disk I/Os, {} crashes, {} MDS crashes, {} writes logged, {} reads from loggers, {} reads again in {:.2} s",
        failing.len(),
        totals.violation_count,
        totals.ops,
        totals.messages,
        totals.disk_ios,
        totals.crashes,
        totals.mds_crashes,
        totals.writes_logged,
        totals.reads_from_loggers,
        totals.reads_again,
        started.elapsed().as_secs_f64()
    )?;
    outln!("faults injected, by kind: {}", totals.faults)?;
    if !failing.is_empty() {
        bail!("{} of {seeds} seeds found violations (first: seed {})", failing.len(), failing[0]);
    }
    Ok(())
}

/// The command that runs `seed` again exactly, with its event trace.
fn replay_command(args: &ClusterArgs, seed: u64) -> String {
    let broken = args
        .broken
        .and_then(|b| b.to_possible_value())
        .map_or_else(String::new, |value| format!(" --broken {}", value.get_name()));
    let logger = if args.logger == LoggerChoice::Model { " --logger model" } else { "" };
    let drawn = if args.draw { " --draw" } else { "" };
    format!(
        "somnus sim cluster --seeds {seed} --servers {} --replicas {} --racks {} --clients {} --faults {} --virtual-secs {} --churn {}{broken}{logger}{drawn} --trace",
        args.servers,
        args.replicas,
        args.racks,
        args.clients,
        args.faults,
        args.virtual_secs,
        args.churn
    )
}
