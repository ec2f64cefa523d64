//! `somnus sim scenarios`: Sierra's cases as scripted cluster simulations (issue 11),
//! each with its figures and the end checks of `somnus sim cluster`.

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use somnus_sim::cluster::scenario::{self, CaseReport};

use crate::output::note;

#[derive(Args, Debug)]
pub(crate) struct ScenarioArgs {
    /// The case to run, or all of them.
    #[arg(long, value_enum, default_value = "all")]
    case: CaseChoice,
    /// Seed of the runs (layout, workload, the MDS's choices).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Servers of the gear-shift case (a multiple of 3, 3 per rack).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(9..=900))]
    gear_servers: u32,
    /// Cluster sizes of the rebuild case, comma-separated (multiples of 3, 3 per rack).
    #[arg(long, default_value = "9,30,90", value_delimiter = ',')]
    rebuild_servers: Vec<u32>,
    /// Print the figures as JSON (an array of cases).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CaseChoice {
    /// Every case below, in this order.
    All,
    /// A secondary crashes under a write stream and returns 20 s later.
    SecondaryCrash,
    /// A secondary crashes for 10 s; its reclaim reads are answered after the
    /// retry interval (every other server's messages 150 ms late).
    SlowLoggers,
    /// The primary of the most groups crashes and stays down.
    PrimaryCrash,
    /// Gear 3 to 2 and back under load: primaries migrated, time, retries (Table 3).
    GearShift,
    /// A server fails in gear 1 with g_min 1, and in gear 2 with g_min 2.
    LowestGear,
    /// A server is lost for good and rebuilt, at each cluster size (Fig. 12).
    Rebuild,
    /// The order of gear groups turns: reads of writes whose holders sleep wake them (P7).
    SleepingHolders,
}

pub(crate) fn run(args: &ScenarioArgs) -> Result<()> {
    if !args.gear_servers.is_multiple_of(3) {
        bail!("--gear-servers {}: not a multiple of 3 (3 servers per rack)", args.gear_servers);
    }
    if let Some(bad) =
        args.rebuild_servers.iter().find(|n| !n.is_multiple_of(3) || **n < 9 || **n > 900)
    {
        bail!("--rebuild-servers: {bad} is not a multiple of 3 between 9 and 900");
    }
    let wants = |case: CaseChoice| args.case == CaseChoice::All || args.case == case;
    let seed = args.seed;
    let mut runs: Vec<Box<dyn Fn() -> CaseReport>> = Vec::new();
    if wants(CaseChoice::SecondaryCrash) {
        runs.push(Box::new(move || scenario::secondary_crash(seed)));
    }
    if wants(CaseChoice::SlowLoggers) {
        runs.push(Box::new(move || scenario::reclaim_from_slow_loggers(seed)));
    }
    if wants(CaseChoice::PrimaryCrash) {
        runs.push(Box::new(move || scenario::primary_crash(seed)));
    }
    if wants(CaseChoice::GearShift) {
        let servers = args.gear_servers;
        runs.push(Box::new(move || scenario::gear_shift(seed, servers, 2)));
    }
    if wants(CaseChoice::LowestGear) {
        runs.push(Box::new(move || scenario::lowest_gear_failure(seed, 1)));
        runs.push(Box::new(move || scenario::lowest_gear_failure(seed, 2)));
    }
    if wants(CaseChoice::Rebuild) {
        for servers in args.rebuild_servers.clone() {
            runs.push(Box::new(move || scenario::rebuild(seed, servers)));
        }
    }
    if wants(CaseChoice::SleepingHolders) {
        runs.push(Box::new(move || scenario::sleeping_holders(seed, None)));
    }
    let mut reports = Vec::new();
    let mut failed = 0;
    for (index, run) in runs.iter().enumerate() {
        note(format_args!("running case {} of {}", index + 1, runs.len()));
        let report = run();
        failed += usize::from(!report.end.violations.is_empty());
        if !args.json {
            print_case(&report)?;
        }
        reports.push(report);
    }
    if args.json {
        let cases: Vec<_> = reports.iter().map(case_json).collect();
        outln!("{}", serde_json::to_string_pretty(&cases)?)?;
    }
    if failed > 0 {
        bail!("{failed} of {} cases found violations", reports.len());
    }
    Ok(())
}

fn print_case(report: &CaseReport) -> Result<()> {
    let verdict = if report.end.violations.is_empty() { "ok" } else { "FAIL" };
    outln!("{} (seed {}): {verdict}", report.name, report.end.seed)?;
    for (name, value) in &report.figures {
        outln!("  {name:<48} {}", figure(*value))?;
    }
    for violation in report.end.violations.iter().take(5) {
        outln!("  {violation}")?;
    }
    outln!()
}

fn figure(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

fn case_json(report: &CaseReport) -> serde_json::Value {
    let figures: serde_json::Map<String, serde_json::Value> =
        report.figures.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect();
    serde_json::json!({
        "case": report.name,
        "seed": report.end.seed,
        "figures": figures,
        "violations": report.end.violations,
    })
}
