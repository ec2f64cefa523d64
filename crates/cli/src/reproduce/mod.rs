//! `somnus reproduce fast08`: every experiment of docs/results/offload.md in one
//! command, written to one report directory with the paper's figures beside somnus's.
//!
//! The experiments are the commands the document lists (the same code paths as `sim
//! offload`, `demo`, `trace stats` and `trace generate`, so each result is byte for byte
//! what those commands give): the MSR set over its week, its least and most idle days
//! with plots, every day with both logger-host rules, the other real trace sets, the
//! demo's synthetic day, and the paper's 36-volume data center (the `msr-fast08`
//! preset, synthetic) over several seeds, with and without the controllers' write cache,
//! at a quarter of its rate and with 10 Gbit/s links.

mod findings;
mod paper;
mod summary;
mod summary_fast08;

use findings::{Fast08Seed, Findings, LEAST_IDLE, MOST_IDLE};

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use somnus_core::offload::LoggerHost;
use somnus_sim::engine::ConfigKind;
use somnus_sim::topology::Topology;
use somnus_trace::stats::{StatsOptions, StatsReport, compute_set};
use somnus_trace::{DaySpec, ReadOptions, SyntheticConfig, TraceSet};

use crate::report;
use crate::sim::demo;
use crate::sim::replay::{ReplayOutcome, ReplayRequest, replay};

/// The files of the MSR set, under the trace directory.
const MSR_FILES: [&str; 3] =
    ["msr-csv/rsrch_1.csv", "msr-csv/hm_0.excerpt7016.csv", "msr-csv/hm_1.writes-excerpt13069.csv"];
/// The other real trace sets, each replayed alone.
const OTHER_TRACES: [(&str, &str); 4] = [
    ("MSR excerpt (replayer format)", "replayer-ascii/msr.cut.per_10k.rw_20_80.105.trace"),
    ("WebSearch (MQSim format)", "mqsim-ascii/wsrch-small.trace"),
    ("MSN file server (DiskSim format)", "disksim-ascii/MSN-FS-30s-ms.trace"),
    ("CloudPhysics VM disk (vSCSI)", "cloudphysics-vscsi/cloudPhysicsIO.vscsi.gz"),
];
/// Days of the MSR week (the set starts on a Thursday at 17:00 and ends a week later).
const MSR_DAYS: u32 = 8;
const SEEDS_MAX: u64 = 20;

#[derive(Subcommand)]
pub(crate) enum ReproduceCommand {
    /// Every experiment of docs/results/offload.md (Write Off-Loading, FAST'08) in one
    /// run: writes one directory with a report per experiment (tables, JSON, CSV and
    /// plots) and `summary.md`, the paper's figures beside somnus's. Takes about ten
    /// minutes on two cores with five seeds; `--seeds 1` is quicker.
    Fast08(Fast08Args),
}

#[derive(Args)]
pub(crate) struct Fast08Args {
    /// The shared trace set: the directory holding msr-csv/, replayer-ascii/, ...
    /// Default: $SOMNUS_TRACES if set, else ../shared/traces.
    #[arg(long, value_name = "DIR")]
    traces: Option<PathBuf>,
    /// The report directory to write (created if missing; files in it are replaced).
    #[arg(short, long, value_name = "DIR", default_value = "fast08-results")]
    out: PathBuf,
    /// Seeds of the synthetic msr-fast08 data center to run (0 to N-1; 0 skips it).
    #[arg(long, value_name = "N", default_value_t = 5)]
    seeds: u64,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
}

pub(crate) fn run(command: ReproduceCommand) -> Result<()> {
    match command {
        ReproduceCommand::Fast08(args) => fast08(&args),
    }
}

fn fast08(args: &Fast08Args) -> Result<()> {
    if args.seeds > SEEDS_MAX {
        bail!("--seeds is at most {SEEDS_MAX}, not {}", args.seeds);
    }
    let traces = traces_dir(args.traces.as_deref())?;
    report::prepare_dir(&args.out)?;
    let mut findings = Findings::default();
    msr_set(args, &traces, &mut findings)?;
    other_traces(args, &traces, &mut findings)?;
    note(args, "the demo's synthetic day");
    let demo_args = demo::DemoArgs {
        seed: 1,
        hours: 24.0,
        json: false,
        report: None,
        generator: None,
        quiet: true,
    };
    findings.demo = Some(save_report(&args.out.join("demo"), demo::simulate(&demo_args)?)?);
    if args.seeds > 0 {
        preset(args, &mut findings)?;
    }
    let path = args.out.join("summary.md");
    crate::report::write_file(&path, {
        let mut markdown = summary::markdown(&findings, args.seeds);
        summary_fast08::fast08(&mut markdown, &findings);
        markdown
    })?;
    outln!("report written to {}; start with {}", args.out.display(), path.display())
}

/// The trace directory: as given, else $SOMNUS_TRACES, else ../shared/traces.
fn traces_dir(given: Option<&Path>) -> Result<PathBuf> {
    let dir = match (given, std::env::var_os("SOMNUS_TRACES")) {
        (Some(dir), _) => dir.to_path_buf(),
        (None, Some(dir)) => PathBuf::from(dir),
        (None, None) => PathBuf::from("../shared/traces"),
    };
    for file in MSR_FILES {
        if !dir.join(file).is_file() {
            bail!(
                "{} is not the shared trace set (no {file}); name it with --traces DIR",
                dir.display()
            );
        }
    }
    Ok(dir)
}

fn note(args: &Fast08Args, what: &str) {
    if !args.quiet {
        noteln!("reproduce: {what}...");
    }
}

/// The replay of `files` under all configurations, on `topology`.
fn run_files(
    files: &[PathBuf],
    day: Option<DaySpec>,
    topology: &Topology,
) -> Result<ReplayOutcome> {
    let request = ReplayRequest {
        traces: files,
        input: ReadOptions::default(),
        day,
        // A day's default hour; none for the whole set (it starts at the first request).
        warmup_s: None,
        kinds: ConfigKind::ALL.to_vec(),
        quiet: true,
    };
    replay(&request, topology, None)
}

/// Writes a replay's report directory; returns the replay.
fn save_report(dir: &Path, outcome: ReplayOutcome) -> Result<ReplayOutcome> {
    report::write_dir(dir, &outcome.result, &outcome.provenance, &outcome.heading)?;
    Ok(outcome)
}

/// Writes a replay's JSON document; returns the replay.
fn save_json(path: &Path, outcome: ReplayOutcome) -> Result<ReplayOutcome> {
    let json = report::json(&outcome.result, &outcome.provenance)? + "\n";
    crate::report::write_file(path, json)?;
    Ok(outcome)
}

fn day(text: &str) -> Result<DaySpec> {
    text.parse().with_context(|| format!("the day {text}"))
}

/// The MSR set: section 2's statistics, the week, the paper's two days with plots, and
/// every day under both logger-host rules.
fn msr_set(args: &Fast08Args, traces: &Path, findings: &mut Findings) -> Result<()> {
    let files: Vec<PathBuf> = MSR_FILES.iter().map(|file| traces.join(file)).collect();
    let topology = Topology::msr_cambridge();
    note(args, "the MSR set: statistics (004 section 2)");
    findings.msr_stats = Some(save_stats(&args.out.join("msr-stats.json"), &files)?);
    note(args, "the MSR set: the whole week");
    let week = run_files(&files, None, &topology)?;
    findings.msr_week = Some(save_report(&args.out.join("msr-week"), week)?);
    for (label, slot) in
        [(LEAST_IDLE, &mut findings.msr_least_idle), (MOST_IDLE, &mut findings.msr_most_idle)]
    {
        note(args, &format!("the MSR set: {label}"));
        let outcome = run_files(&files, Some(day(label)?), &topology)?;
        *slot = Some(save_report(&args.out.join(format!("msr-{label}")), outcome)?);
    }
    let days_dir = args.out.join("msr-days");
    report::prepare_dir(&days_dir)?;
    let mut cheapest = topology.clone();
    cheapest.set_logger_host(LoggerHost::Cheapest);
    for index in 0..MSR_DAYS {
        note(args, &format!("the MSR set: day {index} of {MSR_DAYS}, both logger-host rules"));
        let spec = Some(DaySpec::Index(index));
        let any = run_files(&files, spec, &topology)?;
        let any = save_json(&days_dir.join(format!("day-{index}.json")), any)?;
        let cheap = run_files(&files, spec, &cheapest)?;
        let cheap = save_json(&days_dir.join(format!("day-{index}-cheapest.json")), cheap)?;
        findings.msr_days.push((any, cheap));
    }
    Ok(())
}

/// The statistics of a trace set, saved as the document `trace stats --json` prints.
fn save_stats(path: &Path, files: &[PathBuf]) -> Result<StatsReport> {
    let set = TraceSet::open(files, &ReadOptions::default())?;
    let report = compute_set(&set, None, &StatsOptions { window_ns: 60_000_000_000 })?;
    let json = crate::trace::stats_json(&set, None, &report)? + "\n";
    crate::report::write_file(path, json)?;
    Ok(report)
}

fn other_traces(args: &Fast08Args, traces: &Path, findings: &mut Findings) -> Result<()> {
    let dir = args.out.join("other-traces");
    report::prepare_dir(&dir)?;
    for (name, file) in OTHER_TRACES {
        note(args, name);
        let outcome = run_files(&[traces.join(file)], None, &Topology::msr_cambridge())?;
        let stem = Path::new(file).file_name().map_or_else(|| file.into(), |n| n.to_string_lossy());
        let outcome = save_json(&dir.join(format!("{stem}.json")), outcome)?;
        findings.others.push((name, outcome));
    }
    Ok(())
}

/// The msr-fast08 preset over `--seeds` seeds, then seed 1's variants.
fn preset(args: &Fast08Args, findings: &mut Findings) -> Result<()> {
    let work = args.out.join("work");
    report::prepare_dir(&work)?;
    let dir = args.out.join("fast08");
    report::prepare_dir(&dir)?;
    let config = SyntheticConfig::preset("msr-fast08")?;
    let topology = Topology::msr_cambridge();
    for seed in 0..args.seeds {
        note(
            args,
            &format!("the msr-fast08 data center (synthetic), seed {seed} of {}", args.seeds),
        );
        let trace = work.join(format!("fast08-{seed}.bin"));
        crate::trace::run_generate(
            &trace,
            seed,
            &config,
            crate::trace::OutputFormat::Somnus,
            args.quiet,
        )?;
        let files = [trace.clone()];
        let stats = save_stats(&dir.join(format!("seed{seed}-stats.json")), &files)?;
        let week = save_json(
            &dir.join(format!("seed{seed}-week.json")),
            run_files(&files, None, &topology)?,
        )?;
        let least = run_files(&files, Some(day(LEAST_IDLE)?), &topology)?;
        let most = run_files(&files, Some(day(MOST_IDLE)?), &topology)?;
        let (least_idle, most_idle) = if seed == 1 {
            variants(args, &files, &dir, &work)?;
            (
                save_report(&dir.join(format!("seed1-{LEAST_IDLE}")), least)?,
                save_report(&dir.join(format!("seed1-{MOST_IDLE}")), most)?,
            )
        } else {
            (
                save_json(&dir.join(format!("seed{seed}-{LEAST_IDLE}.json")), least)?,
                save_json(&dir.join(format!("seed{seed}-{MOST_IDLE}.json")), most)?,
            )
        };
        findings.fast08.push(Fast08Seed { seed, stats, week, least_idle, most_idle });
        std::fs::remove_file(&trace).with_context(|| format!("removing {}", trace.display()))?;
    }
    std::fs::remove_dir(&work).with_context(|| format!("removing {}", work.display()))
}

/// Seed 1 without the controllers' write cache and with 10 Gbit/s links; and the
/// preset at a quarter of its rate (seed 7) without the cache.
fn variants(args: &Fast08Args, files: &[PathBuf], dir: &Path, work: &Path) -> Result<()> {
    note(args, "seed 1 without the write cache and with 10 Gbit/s links");
    let base = Topology::msr_cambridge_text();
    let no_cache = edited(base, "write_cache_mib = 128", "write_cache_mib = 0", "no write cache")?;
    let fast_links = edited(base, "link_gbps = 1.0", "link_gbps = 10.0", "10 Gbit/s links")?;
    for label in [LEAST_IDLE, MOST_IDLE] {
        let outcome = run_files(files, Some(day(label)?), &no_cache)?;
        save_json(&dir.join(format!("seed1-{label}-no-cache.json")), outcome)?;
    }
    let outcome = run_files(files, Some(day(LEAST_IDLE)?), &fast_links)?;
    save_json(&dir.join(format!("seed1-{LEAST_IDLE}-10g.json")), outcome)?;
    note(args, "a quarter of the preset's rate, one day, seed 7, no write cache");
    let mut quarter = SyntheticConfig::preset("msr-fast08")?;
    quarter.duration_s = 86_400.0;
    quarter.mean_rate_per_s /= 4.0;
    let trace = work.join("quarter-7.bin");
    let somnus = crate::trace::OutputFormat::Somnus;
    crate::trace::run_generate(&trace, 7, &quarter, somnus, args.quiet)?;
    let outcome = run_files(std::slice::from_ref(&trace), None, &no_cache)?;
    save_json(&dir.join("quarter-seed7-no-cache.json"), outcome)?;
    std::fs::remove_file(&trace).with_context(|| format!("removing {}", trace.display()))
}

/// The built-in topology with one line changed (as docs/results/offload.md's `sed`).
fn edited(text: &str, line: &str, replacement: &str, what: &str) -> Result<Topology> {
    if !text.contains(line) {
        bail!("the built-in topology has no line {line:?} to change");
    }
    let origin = format!("built-in msr-cambridge, {what}");
    Ok(Topology::from_toml(&text.replacen(line, replacement, 1), &origin)?)
}
