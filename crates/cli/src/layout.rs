//! `somnus layout analyze`: builds Sierra's power-aware layout and the naive ones on the
//! same servers and measures, from each placement, what Sierra Table 1 states: the
//! servers each gear must keep on, rebuild parallelism and load distribution.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use somnus_core::layout::analysis::{LayoutAnalysis, analyze, groups_for_full_coverage};
use somnus_core::layout::{Layout, LayoutSpec, RackAssignment, Scheme};
use somnus_types::ServerId;

/// The longest server list printed in a table row.
const LIST_CHARS_MAX: usize = 60;

#[derive(Subcommand)]
pub(crate) enum LayoutCommand {
    /// Build each layout and measure it: for every gear g, the fewest servers that keep
    /// g replicas of every chunk group (searched on the placement and proved minimal by
    /// bounds, or given as a range), the rebuild parallelism and the replicas per
    /// server, each beside Sierra Table 1's formula.
    Analyze(AnalyzeArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutChoice {
    /// Sierra's power-aware grouping: r gear groups, one replica in each.
    PowerAware,
    /// Each chunk group on r servers drawn at random.
    NaiveRandom,
    /// Fixed replica groups of r servers.
    NaiveGrouping,
    /// All three, on the same servers.
    All,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RackChoice {
    /// All servers of a rack in one gear group: whole racks sleep (Sierra Fig. 5a).
    Aligned,
    /// Every rack holds every gear group: the servers left on are spread (Fig. 5b).
    Rotated,
}

#[derive(Args)]
pub(crate) struct AnalyzeArgs {
    /// Servers in the cluster (N). Power-aware and naive grouping need a multiple of
    /// the replica count.
    #[arg(long, value_name = "N")]
    servers: u32,
    /// Replicas of every chunk group (r), which is also the number of gear groups.
    #[arg(long, value_name = "R", default_value_t = 3)]
    replicas: u32,
    /// Racks (fault domains): server i is in rack i mod K, and no two replicas of a
    /// group share a rack. Default: every server its own rack, the setting of Sierra
    /// Table 1.
    #[arg(long, value_name = "K")]
    racks: Option<u32>,
    /// Chunk groups placed (C). Default: 64 per server, Sierra's default. Naive random
    /// meets Table 1's N - (r - g) only when every set of r - g + 1 servers holds some
    /// group, which takes far more groups (the output says how many).
    #[arg(long, value_name = "C")]
    chunk_groups: Option<u32>,
    /// Which layout to build.
    #[arg(long, value_enum, default_value = "all")]
    layout: LayoutChoice,
    /// How power-aware gear groups map onto racks.
    #[arg(long, value_enum, default_value = "aligned")]
    rack_assignment: RackChoice,
    /// Seed of the random placement and of the search's random orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON document (schema `somnus-layout-analysis`) with one entry per
    /// layout in `layouts`; the keys are listed in the README.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(command: LayoutCommand) -> Result<()> {
    match command {
        LayoutCommand::Analyze(args) => analyze_command(&args),
    }
}

fn analyze_command(args: &AnalyzeArgs) -> Result<()> {
    let assignment = match args.rack_assignment {
        RackChoice::Aligned => RackAssignment::Aligned,
        RackChoice::Rotated => RackAssignment::Rotated,
    };
    let schemes = match args.layout {
        LayoutChoice::PowerAware => vec![Scheme::PowerAware(assignment)],
        LayoutChoice::NaiveRandom => vec![Scheme::NaiveRandom],
        LayoutChoice::NaiveGrouping => vec![Scheme::NaiveGrouping],
        LayoutChoice::All => {
            vec![Scheme::PowerAware(assignment), Scheme::NaiveRandom, Scheme::NaiveGrouping]
        }
    };
    let chunk_groups = match args.chunk_groups {
        Some(count) => count,
        None => args.servers.checked_mul(64).context("--servers is too large")?,
    };
    let mut analyses = Vec::new();
    for scheme in schemes {
        let spec = LayoutSpec {
            servers: args.servers,
            replicas: args.replicas,
            racks: args.racks.unwrap_or(args.servers),
            chunk_groups,
            scheme,
            seed: args.seed,
        };
        let layout = Layout::build(&spec)?;
        let analysis = analyze(&layout, args.seed);
        analyses.push((layout, analysis));
    }
    if args.json {
        let body = serde_json::json!({
            "seed": args.seed,
            "layouts": analyses.iter().map(|(_, analysis)| analysis_json(analysis)).collect::<Vec<_>>(),
        });
        outln!("{}", crate::provenance::Document::new("somnus-layout-analysis", body).to_json()?)?;
        return Ok(());
    }
    for (index, (layout, analysis)) in analyses.iter().enumerate() {
        if index > 0 {
            outln!()?;
        }
        print_analysis(layout, analysis)?;
    }
    Ok(())
}

fn print_analysis(layout: &Layout, analysis: &LayoutAnalysis) -> Result<()> {
    let LayoutAnalysis { servers, replicas, racks, chunk_groups, .. } = *analysis;
    outln!(
        "{}: {servers} servers, {replicas} replicas, {racks} racks, {chunk_groups} chunk groups",
        analysis.scheme.name()
    )?;
    outln!("  gear  servers on  proved min  Table 1  servers kept on")?;
    for gear in &analysis.gears {
        outln!(
            "  {:>4}  {:>10}  {:>10}  {:>7}  {}",
            gear.gear,
            gear.servers_on.len(),
            gear.servers_on_min,
            gear.formula,
            describe_set(layout, &gear.servers_on),
        )?;
    }
    if let Some(gear) = analysis.gears.iter().find(|gear| !gear.exact()) {
        if racks < servers {
            outln!(
                "  (gear {}: not proved minimal; the bounds ignore racks, which make naive random sleep by whole racks)",
                gear.gear
            )?;
        } else {
            outln!(
                "  (gear {}: not proved minimal; Table 1's N - (r - g) needs every set of {} servers to hold a group: try --chunk-groups {})",
                gear.gear,
                replicas - gear.gear + 1,
                groups_for_full_coverage(servers, replicas, gear.gear),
            )?;
        }
    }
    let rebuild = &analysis.rebuild;
    outln!(
        "  rebuild: a lost server's replicas are written to {} in parallel (Table 1: {}), read from {}",
        servers_count(rebuild.targets_min, rebuild.targets_max),
        rebuild.formula,
        servers_count(rebuild.sources_min, rebuild.sources_max),
    )?;
    let load = &analysis.load;
    outln!(
        "  load: {:.1} replicas per server, min {} max {} (Table 1: rC/N = {:.1})",
        load.replicas_mean,
        load.replicas_min,
        load.replicas_max,
        load.formula
    )
}

/// "1 server", "10 servers", or a range when lost servers differ.
fn servers_count(min: u32, max: u32) -> String {
    match (min, max) {
        (1, 1) => "1 server".to_owned(),
        _ if min == max => format!("{min} servers"),
        _ => format!("{min}-{max} servers"),
    }
}

/// A set of servers as an operator reads it: whole gear groups or whole racks when it
/// is exactly that, else the shorter of the ids and "all but" the others; long lists
/// are cut (`--json` lists every server).
fn describe_set(layout: &Layout, on: &[ServerId]) -> String {
    let slots = layout.servers();
    if on.len() == slots.len() {
        return "all".to_owned();
    }
    let gear_groups: BTreeSet<_> = on.iter().filter_map(|s| slots[s.index()].gear_group).collect();
    let whole_gear_groups = layout.scheme() != Scheme::NaiveRandom
        && slots.iter().enumerate().all(|(i, slot)| {
            slot.gear_group.is_some_and(|g| gear_groups.contains(&g))
                == on.contains(&ServerId(i as u32))
        });
    if whole_gear_groups && layout.scheme() == Scheme::NaiveGrouping {
        let names: Vec<String> = gear_groups.iter().map(|g| g.0.to_string()).collect();
        return format!(
            "positions {} of every replica group ({} servers)",
            names.join(","),
            on.len()
        );
    }
    if whole_gear_groups {
        let names: Vec<String> = gear_groups.iter().map(ToString::to_string).collect();
        return format!("gear groups {} ({} servers)", names.join(","), on.len());
    }
    let racks: BTreeSet<_> = on.iter().map(|s| slots[s.index()].rack).collect();
    // With every server its own rack, "racks" would only repeat the ids.
    let whole_racks = (layout.rack_count() as usize) < slots.len()
        && slots
            .iter()
            .enumerate()
            .all(|(i, slot)| racks.contains(&slot.rack) == on.contains(&ServerId(i as u32)));
    if whole_racks {
        let names: Vec<String> = racks.iter().map(ToString::to_string).collect();
        return cut(format!("racks {} ({} servers)", names.join(","), on.len()));
    }
    let off: Vec<ServerId> =
        (0..slots.len() as u32).map(ServerId).filter(|s| !on.contains(s)).collect();
    let text =
        if off.len() < on.len() { format!("all but {}", id_ranges(&off)) } else { id_ranges(on) };
    cut(text)
}

/// At most `LIST_CHARS_MAX` characters of a list.
fn cut(text: String) -> String {
    if text.len() <= LIST_CHARS_MAX {
        return text;
    }
    let end = text[..LIST_CHARS_MAX].rfind(',').unwrap_or(LIST_CHARS_MAX);
    format!("{},... (--json lists them all)", &text[..end])
}

/// `srv0-4,7,9-11` for a sorted list of servers.
fn id_ranges(ids: &[ServerId]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut start = 0;
    while start < ids.len() {
        let mut end = start;
        while end + 1 < ids.len() && ids[end + 1].0 == ids[end].0 + 1 {
            end += 1;
        }
        parts.push(if end == start {
            ids[start].0.to_string()
        } else {
            format!("{}-{}", ids[start].0, ids[end].0)
        });
        start = end + 1;
    }
    format!("srv{}", parts.join(","))
}

fn analysis_json(analysis: &LayoutAnalysis) -> serde_json::Value {
    let gears: Vec<serde_json::Value> = analysis
        .gears
        .iter()
        .map(|gear| {
            serde_json::json!({
                "gear": gear.gear,
                "servers_on": gear.servers_on.len(),
                "servers_on_min": gear.servers_on_min,
                "exact": gear.exact(),
                "table1_servers_on": gear.formula,
                "servers_kept_on": gear.servers_on.iter().map(|s| s.0).collect::<Vec<_>>(),
            })
        })
        .collect();
    let rebuild = &analysis.rebuild;
    let load = &analysis.load;
    serde_json::json!({
        "layout": analysis.scheme.name(),
        "servers": analysis.servers,
        "replicas": analysis.replicas,
        "racks": analysis.racks,
        "chunk_groups": analysis.chunk_groups,
        "gears": gears,
        "rebuild": {
            "targets_min": rebuild.targets_min,
            "targets_max": rebuild.targets_max,
            "sources_min": rebuild.sources_min,
            "sources_max": rebuild.sources_max,
            "table1_parallelism": rebuild.formula,
        },
        "load": {
            "replicas_min": load.replicas_min,
            "replicas_max": load.replicas_max,
            "replicas_mean": load.replicas_mean,
            "table1_replicas_per_server": load.formula,
        },
    })
}
