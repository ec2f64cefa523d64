//! The operator's commands, over each process's HTTP endpoint (docs/runtime.md,
//! "HTTP"): `somnus status`, `somnus gear set N`, `somnus server remove ID`. Each
//! fails fast (a few seconds) when no cluster answers.

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use somnus_runtime::cluster_file::ClusterFile;
use somnus_runtime::observe::http::{self, CallError};
use somnus_runtime::observe::status::{MdsReport, MdsServerView, ServerReport};

use crate::cluster::access::{ClusterArg, load, runtime};

#[derive(Args)]
pub(crate) struct StatusArgs {
    /// Print the MDS's and every server's report as one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(Subcommand)]
pub(crate) enum GearCommand {
    /// `N` (1 ≤ N ≤ r): serve with N gear groups, the others drain their primaries
    /// and sleep, their writes go to the DVL; a higher gear wakes them and reclaims.
    /// It stays until the next `gear set`. `hold`: the gear scheduler keeps the plan
    /// as it is. `auto`: the scheduler decides again.
    Set {
        /// N, `hold` or `auto`.
        #[arg(value_parser = parse_gear)]
        gear: String,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

/// Posts an operator command to the MDS and prints its answer.
fn command(cluster: &ClusterArg, path: String) -> Result<()> {
    let (file, secret) = load(cluster)?;
    let answer = runtime()?.block_on(http::operator(&file, &secret, &path)).map_err(no_cluster)?;
    outln!("{}", String::from_utf8_lossy(&answer).trim())?;
    Ok(())
}

fn no_cluster(error: CallError) -> anyhow::Error {
    match error {
        CallError::Refused { body, .. } => anyhow::anyhow!("the MDS refused: {body}"),
        error @ CallError::NoAddress { .. } => error.into(),
        other => anyhow::anyhow!("no cluster answers: {other}"),
    }
}

fn parse_gear(text: &str) -> Result<String, String> {
    match text {
        "auto" | "hold" => Ok(text.to_string()),
        _ => match text.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n.to_string()),
            _ => Err(format!("{text:?} is not auto, hold or a gear of 1 or more")),
        },
    }
}

pub(crate) fn gear(command: GearCommand) -> Result<()> {
    let GearCommand::Set { gear, cluster } = command;
    self::command(&cluster, format!("/gear/{gear}"))
}

pub(crate) fn remove_server(id: u32, cluster: &ClusterArg) -> Result<()> {
    command(cluster, format!("/servers/{id}/remove"))
}

pub(crate) fn status(args: StatusArgs) -> Result<()> {
    let (file, _) = load(&args.cluster)?;
    let (mds, servers) = runtime()?.block_on(async {
        let mds = http::mds_report(&file).await.map_err(no_cluster)?;
        anyhow::Ok((mds, http::server_reports(&file).await))
    })?;
    if args.json {
        let document = serde_json::json!({ "mds": mds, "servers": servers });
        outln!("{}", serde_json::to_string_pretty(&document)?)?;
        return Ok(());
    }
    print_status(&file, &mds, &servers)
}

/// Bytes for a person: B, KiB, MiB, GiB or TiB, three figures.
pub(crate) fn bytes(value: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value as f64;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < UNITS.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{value} B"),
        _ if scaled < 10.0 => format!("{scaled:.2} {}", UNITS[unit]),
        _ if scaled < 100.0 => format!("{scaled:.1} {}", UNITS[unit]),
        _ => format!("{scaled:.0} {}", UNITS[unit]),
    }
}

/// A server's free disk space, marked when it counts its disk full.
fn disk_free(view: &MdsServerView) -> String {
    let free = view.space.free_bytes.map_or("-".to_string(), bytes);
    if view.full { format!("{free} FULL") } else { free }
}

fn print_status(
    file: &ClusterFile,
    mds: &MdsReport,
    servers: &[Option<ServerReport>],
) -> Result<()> {
    if mds.servers.len() != servers.len() {
        bail!("the MDS reports {} servers, the cluster file {}", mds.servers.len(), servers.len());
    }
    outln!(
        "gear {} of {}   {} objects   {} rebuilds under way   MDS at {}   view changes {}   wakes {}",
        mds.gear,
        mds.replicas,
        mds.objects,
        mds.rebuilds_under_way,
        file.mds.address,
        mds.counters.view_changes,
        mds.counters.wakes
    )?;
    outln!(
        "{:>6}  {:>4}  {:>4}  {:<8}  {:>9}  {:>6}  {:>7}  {:>10}  {:>10}  {:>10}  {:>14}  {:>10}  {:>12}  {:>12}",
        "server",
        "rack",
        "gear",
        "power",
        "primaries",
        "groups",
        "watts",
        "DVL",
        "stored",
        "on disk",
        "free",
        "to free",
        "energy J",
        "saved J"
    )?;
    let (mut joules, mut always_on, mut answered) = (0.0, 0.0, 0);
    for (view, report) in mds.servers.iter().zip(servers) {
        let power = format!("{:?}", view.power).to_lowercase();
        let head = format!(
            "{:>6}  {:>4}  {:>4}  {:<8}  {:>9}  {:>6}",
            view.id, view.rack, view.gear_group, power, view.primaries, view.chunk_groups
        );
        // Space as the MDS last heard it (a sleeping server's from before it slept).
        let space = format!(
            "{:>10}  {:>10}  {:>14}  {:>10}",
            bytes(view.space.stored_bytes),
            view.space.disk_bytes.map_or("-".to_string(), bytes),
            disk_free(view),
            bytes(view.space.to_free_bytes)
        );
        match report {
            Some(r) => {
                let e = &r.energy;
                joules += e.joules;
                always_on += e.joules_if_always_on;
                answered += 1;
                outln!(
                    "{head}  {:>7.1}  {:>10}  {space}  {:>12.0}  {:>12.0}",
                    e.watts,
                    bytes(r.dvl_live_bytes),
                    e.joules,
                    e.joules_if_always_on - e.joules
                )?;
            }
            None => outln!(
                "{head}  {:>7}  {:>10}  {space}  {:>12}  {:>12}",
                "-",
                "no answer",
                "-",
                "-"
            )?,
        }
    }
    let full: Vec<String> =
        mds.servers.iter().filter(|s| s.full).map(|s| s.id.to_string()).collect();
    if !full.is_empty() {
        outln!(
            "disk full: server {} has less free space than the reserve ({} MiB, \
             `disk_reserve_bytes`): writes to its chunk groups are refused until space is freed",
            full.join(", "),
            file.cluster.disk_reserve_bytes >> 20
        )?;
    }
    let space = &mds.space;
    outln!(
        "space: {} stored in objects ({} with every replica), {} on disk, {} free, {} to \
         free ({} deletes waiting: freed a grace after them, by sleeping servers when they wake)",
        bytes(space.logical_bytes),
        bytes(space.stored_bytes),
        bytes(space.disk_bytes),
        bytes(space.free_bytes),
        bytes(space.to_free_bytes),
        space.frees_queued
    )?;
    let saved = always_on - joules;
    let percent = if always_on > 0.0 { 100.0 * saved / always_on } else { 0.0 };
    outln!(
        "energy (modelled, {answered} servers answering, in the cluster's clock): {joules:.0} J \
         of {always_on:.0} J had they stayed on: {saved:.0} J saved ({percent:.1} %)"
    )?;
    let rapl: Vec<f64> = servers.iter().flatten().filter_map(|r| r.energy.rapl_joules).collect();
    match (mds.rapl_joules, rapl.is_empty()) {
        (None, true) => outln!("RAPL: not exposed to these processes (see docs/runtime.md)")?,
        (mds_rapl, _) => outln!(
            "RAPL package energy (real time): MDS host {}, server hosts {:.0} J summed",
            mds_rapl.map_or("not exposed".into(), |j| format!("{j:.0} J")),
            rapl.iter().sum::<f64>()
        )?,
    }
    Ok(())
}
