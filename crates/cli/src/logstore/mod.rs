//! `somnus logstore`: operator commands for a logger's log directory.

mod bench;
mod torture;
mod work_dir;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use somnus_logstore::{FsDisk, LogStore, Options, RecoveryMode, SegmentState, VerifyReport};
use somnus_trace::stats::thousands;

#[derive(Subcommand)]
pub(crate) enum LogstoreCommand {
    /// Show what a log holds: its owners (writers) with their live bytes and the age of
    /// their oldest live record, and its segments. Opens the log read-only; a log open
    /// in another process is refused.
    Inspect(InspectArgs),
    /// Scan every segment of a log in full and check every record's checksum. Exits
    /// with status 1 if anything the log once wrote whole is damaged. A torn tail (the
    /// trace of a crash during an unacknowledged write) or an unwritten segment is not
    /// damage in the last segment, and is damage in any other, as at open.
    Verify(VerifyArgs),
    /// Crash campaign: run a writer process against a fresh log in a new subdirectory
    /// of DIR (which must exist), kill it with SIGKILL at random moments, reopen, and
    /// check that every acknowledged write reads back exactly and that nothing
    /// unacknowledged shows up as newer than it. Run it on
    /// the file system you mean to trust with a logger. (SIGKILL spares the page cache:
    /// this tests the engine's crash safety there, not the device's cache flushing, which
    /// needs a power cut.) The last line is `kills=N acknowledged=A lost=L wrong=W`; the
    /// exit status is 1 unless L and W are 0.
    Torture(torture::TortureArgs),
    /// Measure append throughput and latency (4 KiB and 64 KiB records, 1, 8 and 64
    /// concurrent appenders) against a raw write+fdatasync loop on the same device,
    /// measured in the same run, and print the ratios.
    Bench(bench::BenchArgs),
    /// The writer process of `torture` (not for direct use).
    #[command(hide = true)]
    TortureChild(torture::ChildArgs),
}

#[derive(Args)]
pub(crate) struct InspectArgs {
    /// The log directory.
    dir: PathBuf,
    /// Also list every segment.
    #[arg(long)]
    segments: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// The log directory.
    dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(command: LogstoreCommand) -> Result<()> {
    match command {
        LogstoreCommand::Inspect(args) => inspect(&args),
        LogstoreCommand::Verify(args) => verify(&args),
        LogstoreCommand::Torture(args) => torture::run(&args),
        LogstoreCommand::Bench(args) => bench::run(&args),
        LogstoreCommand::TortureChild(args) => torture::child(&args),
    }
}

fn existing_disk(dir: &Path) -> Result<Arc<FsDisk>> {
    let disk = FsDisk::existing(dir).with_context(|| format!("log directory {}", dir.display()))?;
    Ok(Arc::new(disk))
}

/// A duration in words an operator reads at a glance.
fn age(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7200 => format!("{} min", seconds / 60),
        7200..172_800 => format!("{} h", seconds / 3600),
        _ => format!("{} days", seconds / 86_400),
    }
}

fn inspect(args: &InspectArgs) -> Result<()> {
    let disk = existing_disk(&args.dir)?;
    let options = Options { read_only: true, ..Options::default() };
    let store = LogStore::open(disk, options)
        .with_context(|| format!("opening the log in {}", args.dir.display()))?;
    if args.json {
        let document =
            crate::provenance::Document::new("somnus-logstore-inspect", inspect_json(&store));
        outln!("{}", document.to_json()?)?;
    } else {
        inspect_text(&store, args)?;
    }
    Ok(())
}

/// What `inspect --json` prints; the README documents every key and value.
fn inspect_json(store: &LogStore) -> serde_json::Value {
    let now_ms = somnus_logstore::system_clock_ms();
    let stats = store.stats();
    let recovery = store.recovery();
    let owners: Vec<serde_json::Value> = store
        .owners()
        .iter()
        .map(|o| {
            serde_json::json!({
                "owner": o.owner.0,
                "objects": o.objects,
                "records": o.records,
                "live_bytes": o.live_bytes,
                "version_max": o.version_max.0,
                "oldest_live_age_ms": o.oldest_live_ms.map(|ms| now_ms.saturating_sub(ms)),
            })
        })
        .collect();
    let segment_rows: Vec<serde_json::Value> = store
        .segments()
        .iter()
        .map(|&(id, bytes, records, live)| {
            serde_json::json!({"segment": id.0, "bytes": bytes, "records": records, "live_bytes": live})
        })
        .collect();
    let snapshot_refused = match &recovery.mode {
        RecoveryMode::Scan { snapshot_refused } => snapshot_refused.clone(),
        RecoveryMode::Created | RecoveryMode::Snapshot => None,
    };
    serde_json::json!({
        "log_id": store.log_id().to_string(),
        "recovery": recovery.mode.name(),
        "snapshot_refused": snapshot_refused,
        "recovery_ms": recovery.duration.as_secs_f64() * 1e3,
        "segments": stats.segments,
        "used_bytes": stats.used_bytes,
        "live_bytes": stats.live_bytes,
        "obsolete_bytes": stats.obsolete_bytes,
        "records": stats.records,
        "torn_tails": recovery.torn_tails.len(),
        "damaged_segments": recovery.damage.iter().map(|d| d.segment.0).collect::<Vec<_>>(),
        "owners": owners,
        "segment_list": segment_rows,
    })
}

/// What `inspect` prints: a summary of the recovery, the owners, and (with
/// `--segments`) the segments.
fn inspect_text(store: &LogStore, args: &InspectArgs) -> anyhow::Result<()> {
    let stats = store.stats();
    let recovery = store.recovery();
    outln!("log {} in {}", store.log_id(), args.dir.display())?;
    let mode = match &recovery.mode {
        RecoveryMode::Created => "created".to_string(),
        RecoveryMode::Snapshot => "index loaded from the clean close's snapshot".to_string(),
        RecoveryMode::Scan { snapshot_refused: None } => {
            "index rebuilt by a scan (the log was not closed cleanly)".to_string()
        }
        RecoveryMode::Scan { snapshot_refused: Some(reason) } => {
            format!("index rebuilt by a scan (snapshot refused: {reason})")
        }
    };
    outln!("  {mode}, in {:.1} ms", recovery.duration.as_secs_f64() * 1e3)?;
    outln!(
        "  {} segments, {} bytes: {} live, {} obsolete; {} records",
        stats.segments,
        thousands(stats.used_bytes),
        thousands(stats.live_bytes),
        thousands(stats.obsolete_bytes),
        thousands(stats.records)
    )?;
    for (segment, offset) in &recovery.torn_tails {
        outln!("  torn tail: {segment} ends at byte {offset} (an interrupted write)")?;
    }
    for damage in &recovery.damage {
        outln!("  DAMAGE: {damage}")?;
    }
    outln!()?;
    print_owners(store)?;
    if args.segments {
        outln!()?;
        print_segments(store)?;
    }
    Ok(())
}

fn print_owners(store: &LogStore) -> anyhow::Result<()> {
    let now_ms = somnus_logstore::system_clock_ms();
    let owners = store.owners();
    outln!(
        "{:>20} {:>8} {:>10} {:>16} {:>20} {:>12}",
        "owner",
        "objects",
        "records",
        "live bytes",
        "newest version",
        "oldest live"
    )?;
    for owner in &owners {
        let oldest =
            owner.oldest_live_ms.map_or("-".to_string(), |ms| age(now_ms.saturating_sub(ms)));
        outln!(
            "{:>20} {:>8} {:>10} {:>16} {:>20} {:>12}",
            owner.owner.0,
            owner.objects,
            thousands(owner.records),
            thousands(owner.live_bytes),
            owner.version_max.0,
            oldest
        )?;
    }
    if owners.is_empty() {
        outln!("{:>20}", "(none)")?;
    }
    Ok(())
}

fn print_segments(store: &LogStore) -> anyhow::Result<()> {
    outln!(
        "{:>24} {:>14} {:>10} {:>14} {:>6}",
        "segment",
        "bytes",
        "records",
        "live bytes",
        "live"
    )?;
    for (id, bytes, records, live) in store.segments() {
        outln!(
            "{:>24} {:>14} {:>10} {:>14} {:>5.0}%",
            id.to_string(),
            thousands(bytes),
            thousands(records),
            thousands(live),
            100.0 * live as f64 / bytes.max(1) as f64
        )?;
    }
    Ok(())
}

fn verify(args: &VerifyArgs) -> Result<()> {
    let disk = existing_disk(&args.dir)?;
    let report = somnus_logstore::verify(disk.as_ref())
        .with_context(|| format!("verifying the log in {}", args.dir.display()))?;
    if args.json {
        let document =
            crate::provenance::Document::new("somnus-logstore-verify", verify_json(&report));
        outln!("{}", document.to_json()?)?;
    } else {
        verify_text(&report, &args.dir)?;
    }
    if report.is_damaged() {
        std::process::exit(1);
    }
    Ok(())
}

/// What `verify --json` prints; the README documents every key and value.
fn verify_json(report: &VerifyReport) -> serde_json::Value {
    let segments: Vec<serde_json::Value> = report
        .segments
        .iter()
        .map(|check| {
            let (offset, reason, records_after) = match &check.state {
                SegmentState::Clean | SegmentState::Unwritten => (None, None, None),
                SegmentState::Torn { offset, reason } => {
                    (Some(*offset), Some(reason.clone()), None)
                }
                SegmentState::Damaged { offset, reason, records_after } => {
                    (Some(*offset), Some(reason.clone()), Some(*records_after))
                }
                SegmentState::BadHeader(reason) => (None, Some(reason.clone()), None),
            };
            serde_json::json!({
                "segment": check.segment.0,
                "bytes": check.bytes,
                "records": check.records,
                "payload_bytes": check.payload_bytes,
                "state": check.state.name(),
                "offset": offset,
                "reason": reason,
                "records_after": records_after,
            })
        })
        .collect();
    serde_json::json!({
        "log_id": report.log.map(|log| log.to_string()),
        "damaged": report.is_damaged(),
        "records": report.records(),
        "segments": segments,
        "problems": report.problems,
        "notes": report.notes,
    })
}

/// What `verify` prints: a line per segment, the problems and notes, and the verdict.
fn verify_text(report: &VerifyReport, dir: &Path) -> anyhow::Result<()> {
    match report.log {
        Some(log) => outln!("log {log} in {}", dir.display())?,
        None => outln!("log in {}", dir.display())?,
    }
    for check in &report.segments {
        let state = match &check.state {
            SegmentState::Clean => "ok".to_string(),
            state if state.is_damage() => state.to_string(),
            legitimate => format!("ok, {legitimate}"),
        };
        outln!(
            "  {}: {} bytes, {} records: {state}",
            check.segment,
            thousands(check.bytes),
            thousands(check.records)
        )?;
    }
    for problem in &report.problems {
        outln!("  DAMAGED: {problem}")?;
    }
    for note in &report.notes {
        outln!("  note: {note}")?;
    }
    outln!(
        "{}: {} segments, {} records checked",
        if report.is_damaged() { "DAMAGED" } else { "ok" },
        report.segments.len(),
        thousands(report.records())
    )?;
    Ok(())
}
