//! `somnus logstore bench`: append throughput and latency against the device's raw
//! sequential write with the same sync policy, measured in the same run.
//!
//! The raw reference is a write+fdatasync (or fsync) loop on one file in the same
//! directory, twice: with the record size (what `dd oflag=dsync bs=SIZE` measures), and
//! with the bytes the log wrote per sync (its records and headers per group commit), so
//! that the ratio to the second isolates the engine's own overhead from batching.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use somnus_logstore::format::{PAYLOAD_BYTES_MAX, RECORD_HEADER_BYTES};
use somnus_logstore::{FsDisk, LogStore, ObjectId, Options, OwnerId, SyncMode};
use somnus_types::{ByteRange, Version};

use crate::progress::now;

/// The most appender threads one configuration runs.
const APPENDERS_MAX: u64 = 1024;
/// The largest recovery log measured (1 TiB).
const RECOVERY_MIB_MAX: u64 = 1 << 20;
/// The longest a configuration is measured.
const SECONDS_MAX: f64 = 3600.0;

/// `--seconds`: a finite time, more than nothing.
fn parse_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|error| format!("{error}"))?;
    if !(seconds > 0.0 && seconds <= SECONDS_MAX) {
        return Err(format!("must be more than 0 and at most {SECONDS_MAX}"));
    }
    Ok(seconds)
}

/// A `--sizes` entry: a record size the log accepts.
fn parse_size(text: &str) -> Result<u64, String> {
    let size: u64 = text.parse().map_err(|error| format!("{error}"))?;
    if size == 0 || size > PAYLOAD_BYTES_MAX {
        return Err(format!("a record size must be 1 to {PAYLOAD_BYTES_MAX} bytes"));
    }
    Ok(size)
}

#[derive(Clone, Copy, ValueEnum)]
enum Sync {
    /// fdatasync after each write (the log's default).
    Data,
    /// fsync after each write.
    All,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// An existing directory on the device to measure. The benchmark works in a new
    /// subdirectory of it, removed at the end.
    dir: PathBuf,
    /// Seconds per configuration and per reference, split over the rounds (more than 0,
    /// at most 3600).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Rounds: each measures the log and then its raw references back to back, so that
    /// the device's drift affects both alike; figures are medians over rounds (1 to
    /// 1000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,
    /// Record sizes, in bytes, separated by commas (1 to 16777216 each).
    #[arg(long, value_delimiter = ',', default_value = "4096,65536", value_parser = parse_size)]
    sizes: Vec<u64>,
    /// Numbers of concurrent appender threads, separated by commas (1 to 1024 each).
    #[arg(long, value_delimiter = ',', default_value = "1,8,64", value_parser = clap::value_parser!(u64).range(1..=APPENDERS_MAX))]
    appenders: Vec<u64>,
    /// The sync that makes a write durable, for the log and the raw loop alike.
    #[arg(long, value_enum, default_value_t = Sync::Data)]
    sync: Sync,
    /// Size of the log whose recovery is timed at the end (after a crash: a scan of
    /// every segment; after a clean close: the snapshot), in MiB (at most 1048576);
    /// 0 skips it.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(0..=RECOVERY_MIB_MAX))]
    recovery_mib: u64,
    /// Print one JSON object per measurement instead of the table.
    #[arg(long)]
    json: bool,
}

struct Measured {
    ops: u64,
    bytes: u64,
    seconds: f64,
    latency_ns: Histogram<u64>,
}

impl Measured {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }
}

fn histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1_000, 600_000_000_000, 3)?)
}

/// The raw reference: sequential writes of `write_bytes`, each followed by a sync.
fn raw(dir: &Path, write_bytes: u64, seconds: f64, sync: Sync) -> Result<Measured> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("raw.dat");
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let buffer: Vec<u8> = (0..write_bytes).map(|i| (i * 31 % 251) as u8).collect();
    let mut latency_ns = histogram()?;
    let started = now();
    let deadline = Duration::from_secs_f64(seconds);
    let mut offset = 0;
    let mut ops = 0;
    while started.elapsed() < deadline {
        let t = now();
        file.write_all_at(&buffer, offset)?;
        match sync {
            Sync::Data => file.sync_data()?,
            Sync::All => file.sync_all()?,
        }
        latency_ns.saturating_record(t.elapsed().as_nanos() as u64);
        offset += write_bytes;
        ops += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(Measured { ops, bytes: offset, seconds, latency_ns })
}

struct EngineRun {
    measured: Measured,
    syncs: u64,
    batches: u64,
    flush_seconds: f64,
}

fn engine(dir: &Path, size: u64, appenders: u64, seconds: f64, sync: Sync) -> Result<EngineRun> {
    let log_dir = dir.join(format!("log-{size}-{appenders}"));
    let disk = Arc::new(FsDisk::new(&log_dir)?);
    let options = Options {
        capacity_bytes: 1 << 40,
        sync: match sync {
            Sync::Data => SyncMode::Data,
            Sync::All => SyncMode::All,
        },
        ..Options::default()
    };
    let store = LogStore::open(disk, options)?;
    let stop = AtomicBool::new(false);
    let deadline = Duration::from_secs_f64(seconds);
    let started = now();
    // One payload for all appenders: the bytes are never read back, and a copy per
    // thread would cost up to 1024 times the largest record.
    let payload = vec![0x5a_u8; size as usize];
    let results: Vec<Result<(u64, Histogram<u64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..appenders)
            .map(|t| {
                let (store, stop, payload) = (&store, &stop, &payload);
                scope.spawn(move || -> Result<(u64, Histogram<u64>)> {
                    let mut latency_ns = histogram()?;
                    let mut count = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        // Sixteen objects' worth of ranges, overwritten in turn.
                        let range = ByteRange::new((count % 4096) * size, size);
                        let t0 = now();
                        store.append(
                            OwnerId(t + 1),
                            ObjectId(0),
                            range,
                            Version(count + 1),
                            payload,
                        )?;
                        latency_ns.saturating_record(t0.elapsed().as_nanos() as u64);
                        count += 1;
                    }
                    Ok((count, latency_ns))
                })
            })
            .collect();
        std::thread::sleep(deadline);
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| bail!("appender panicked")))
            .collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut latency_ns = histogram()?;
    let mut ops = 0;
    for result in results {
        let (count, histogram) = result?;
        ops += count;
        latency_ns.add(histogram)?;
    }
    let stats = store.stats();
    drop(store);
    std::fs::remove_dir_all(&log_dir)?;
    Ok(EngineRun {
        measured: Measured { ops, bytes: ops * size, seconds, latency_ns },
        syncs: stats.syncs,
        batches: stats.batches,
        flush_seconds: stats.flush_time.as_secs_f64(),
    })
}

pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    super::work_dir::existing_dir(&args.dir)?;
    let dir = args.dir.join(format!("somnus-logbench-{}", std::process::id()));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure_all(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

use crate::bench::stats::median_f64 as median;

/// One configuration measured over all rounds.
#[derive(Default)]
struct Rounds {
    appends_per_s: Vec<f64>,
    mb_per_s: Vec<f64>,
    syncs_per_append: Vec<f64>,
    records_per_batch: Vec<f64>,
    device_busy: Vec<f64>,
    raw_mb_per_s: Vec<f64>,
    same_mb_per_s: Vec<f64>,
    ratio_raw: Vec<f64>,
    ratio_same: Vec<f64>,
    latency_ns: Option<Histogram<u64>>,
}

fn measure_all(args: &BenchArgs, dir: &Path) -> Result<()> {
    let slice = args.seconds / args.rounds as f64;
    if !args.json {
        print_header(args, slice)?;
    }
    for &size in &args.sizes {
        for &appenders in &args.appenders {
            noteln!("  {appenders} appenders of {size}-byte records…");
            let rounds = measure(args, dir, size, appenders, slice)?;
            print_row(args, size, appenders, rounds)?;
        }
    }
    if args.recovery_mib > 0 {
        recovery(args, dir)?;
    }
    if !args.json {
        outln!(
            "MB/s: payload. busy: share of the time a write+sync of the log was under way. raw: one writer, record-sized writes (dd oflag=dsync bs=record). \
             raw=: one writer, writes of the log's bytes per sync, payload share. ratio: \
             median over rounds of log/raw in the same round"
        )?;
    }
    Ok(())
}

fn print_header(args: &BenchArgs, slice: f64) -> anyhow::Result<()> {
    outln!(
        "log appends vs raw write+{} on {}: medians of {} rounds of {:.2} s, each round \
         measuring the log and its raw references back to back",
        match args.sync {
            Sync::Data => "fdatasync",
            Sync::All => "fsync",
        },
        args.dir.display(),
        args.rounds,
        slice
    )?;
    outln!(
        "{:>7} {:>9} {:>10} {:>8} {:>7} {:>7} {:>10} {:>9} {:>6} {:>8} {:>6} {:>9} {:>6}",
        "record",
        "appenders",
        "appends/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "syncs/app",
        "rec/batch",
        "busy",
        "raw MB/s",
        "ratio",
        "raw= MB/s",
        "ratio"
    )?;
    Ok(())
}

/// One configuration over all rounds: the log, then its raw references, back to back.
fn measure(args: &BenchArgs, dir: &Path, size: u64, appenders: u64, slice: f64) -> Result<Rounds> {
    let mut rounds = Rounds::default();
    let payload_share = size as f64 / (size + RECORD_HEADER_BYTES) as f64;
    for _ in 0..args.rounds {
        let run = engine(dir, size, appenders, slice, args.sync)?;
        let m = &run.measured;
        let per_batch = m.ops as f64 / run.batches.max(1) as f64;
        let reference = raw(dir, size, slice, args.sync)?;
        // The same bytes per sync as the log wrote (records with headers), compared on
        // payload.
        let batch_bytes = (per_batch * (size + RECORD_HEADER_BYTES) as f64).round() as u64;
        let same = raw(dir, batch_bytes.max(1), slice, args.sync)?.mb_per_s() * payload_share;
        rounds.appends_per_s.push(m.ops as f64 / m.seconds);
        rounds.mb_per_s.push(m.mb_per_s());
        rounds.syncs_per_append.push(run.syncs as f64 / m.ops.max(1) as f64);
        rounds.records_per_batch.push(per_batch);
        rounds.device_busy.push(run.flush_seconds / m.seconds);
        rounds.raw_mb_per_s.push(reference.mb_per_s());
        rounds.same_mb_per_s.push(same);
        rounds.ratio_raw.push(m.mb_per_s() / reference.mb_per_s());
        rounds.ratio_same.push(m.mb_per_s() / same);
        match &mut rounds.latency_ns {
            Some(all) => all.add(&m.latency_ns)?,
            None => rounds.latency_ns = Some(m.latency_ns.clone()),
        }
    }
    Ok(rounds)
}

/// One configuration's figures: a JSON object or a table row.
fn print_row(args: &BenchArgs, size: u64, appenders: u64, mut rounds: Rounds) -> Result<()> {
    let latency = match rounds.latency_ns.take() {
        Some(latency) => latency,
        None => histogram()?,
    };
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1e6;
    if args.json {
        outln!(
            "{}",
            json_line(serde_json::json!({
                "record_bytes": size,
                "appenders": appenders,
                "rounds": args.rounds,
                "appends_per_s": median(rounds.appends_per_s),
                "mb_per_s": median(rounds.mb_per_s),
                "p50_ms": ms(0.5),
                "p99_ms": ms(0.99),
                "max_ms": latency.max() as f64 / 1e6,
                "syncs_per_append": median(rounds.syncs_per_append),
                "records_per_batch": median(rounds.records_per_batch),
                "flushing_share": median(rounds.device_busy.clone()),
                "raw_mb_per_s": median(rounds.raw_mb_per_s),
                "ratio_to_raw": median(rounds.ratio_raw),
                "raw_same_bytes_per_sync_mb_per_s": median(rounds.same_mb_per_s),
                "ratio_to_raw_same_bytes_per_sync": median(rounds.ratio_same),
            }))?
        )?;
    } else {
        outln!(
            "{:>7} {:>9} {:>10.0} {:>8.1} {:>7.2} {:>7.2} {:>10.3} {:>9.1} {:>5.0}% {:>8.1} {:>6.2} {:>9.1} {:>6.2}",
            size,
            appenders,
            median(rounds.appends_per_s),
            median(rounds.mb_per_s),
            ms(0.5),
            ms(0.99),
            median(rounds.syncs_per_append),
            median(rounds.records_per_batch),
            100.0 * median(rounds.device_busy),
            median(rounds.raw_mb_per_s),
            median(rounds.ratio_raw),
            median(rounds.same_mb_per_s),
            median(rounds.ratio_same)
        )?;
    }
    Ok(())
}

/// Times opening a log of `--recovery-mib` of 4 KiB records: by a scan after a crash,
/// then from the snapshot of a clean close.
fn recovery(args: &BenchArgs, dir: &Path) -> Result<()> {
    const RECORD: u64 = 4096;
    const WRITERS: u64 = 8;
    let log_dir = dir.join("recovery");
    let options = Options { capacity_bytes: 1 << 40, ..Options::default() };
    let records = (args.recovery_mib << 20) / RECORD;
    noteln!("  writing {records} records of {RECORD} bytes for the recovery measurement…");
    {
        let store = LogStore::open(Arc::new(FsDisk::new(&log_dir)?), options.clone())?;
        let payload = vec![7u8; RECORD as usize];
        std::thread::scope(|scope| -> Result<()> {
            let handles: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (store, payload) = (&store, &payload);
                    scope.spawn(move || -> Result<()> {
                        for i in 0..records / WRITERS {
                            // Objects of 64 MiB, so the index holds many small extents.
                            let range = ByteRange::new((i % 16384) * RECORD, RECORD);
                            let object = ObjectId(i / 16384);
                            store.append(OwnerId(w + 1), object, range, Version(i + 1), payload)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for handle in handles {
                handle.join().unwrap_or_else(|_| bail!("writer panicked"))?;
            }
            Ok(())
        })?;
        // Dropped without close: what a crash leaves.
    }
    let scan_started = now();
    let store = LogStore::open(Arc::new(FsDisk::new(&log_dir)?), options.clone())?;
    let scan = scan_started.elapsed();
    let report = store.recovery().clone();
    store.close()?;
    drop(store);
    let snapshot_started = now();
    let store = LogStore::open(Arc::new(FsDisk::new(&log_dir)?), options)?;
    let snapshot = snapshot_started.elapsed();
    let snapshot_report = store.recovery().clone();
    drop(store);
    std::fs::remove_dir_all(&log_dir)?;
    if args.json {
        outln!(
            "{}",
            json_line(serde_json::json!({
                "recovery_records": report.records,
                "recovery_bytes": report.bytes_scanned,
                "scan_ms": scan.as_secs_f64() * 1e3,
                "scan_reported_ms": report.duration.as_secs_f64() * 1e3,
                "snapshot_ms": snapshot.as_secs_f64() * 1e3,
                "snapshot_reported_ms": snapshot_report.duration.as_secs_f64() * 1e3,
            }))?
        )?;
    } else {
        outln!(
            "recovery of {} records ({:.0} MB): after a crash, scan {:.0} ms ({:.0} MB/s); \
             after a clean close, snapshot {:.0} ms",
            report.records,
            report.bytes_scanned as f64 / 1e6,
            scan.as_secs_f64() * 1e3,
            report.bytes_scanned as f64 / 1e6 / scan.as_secs_f64(),
            snapshot.as_secs_f64() * 1e3
        )?;
    }
    Ok(())
}

/// One measurement as a line of JSON, with the document header (schema, versions).
fn json_line(body: serde_json::Value) -> serde_json::Result<String> {
    serde_json::to_string(&crate::provenance::Document::new("somnus-logstore-bench", body))
}
