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
use somnus_logstore::format::RECORD_HEADER_BYTES;
use somnus_logstore::{FsDisk, LogStore, ObjectId, Options, OwnerId, SyncMode};
use somnus_types::{ByteRange, Version};

use crate::progress::now;

#[derive(Clone, Copy, ValueEnum)]
enum Sync {
    /// fdatasync after each write (the log's default).
    Data,
    /// fsync after each write.
    All,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// A directory on the device to measure. The benchmark works in a new subdirectory
    /// of it, removed at the end.
    dir: PathBuf,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Record sizes, in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [4096u64, 65536])]
    sizes: Vec<u64>,
    /// Numbers of concurrent appender threads.
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 8, 64])]
    appenders: Vec<u64>,
    /// The sync that makes a write durable, for the log and the raw loop alike.
    #[arg(long, value_enum, default_value_t = Sync::Data)]
    sync: Sync,
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

    fn ms(&self, quantile: f64) -> f64 {
        self.latency_ns.value_at_quantile(quantile) as f64 / 1e6
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
    let results: Vec<Result<(u64, Histogram<u64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..appenders)
            .map(|t| {
                let (store, stop) = (&store, &stop);
                scope.spawn(move || -> Result<(u64, Histogram<u64>)> {
                    let payload = vec![t as u8; size as usize];
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
                            &payload,
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
    })
}

pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    if args.sizes.iter().any(|&s| s == 0) || args.appenders.iter().any(|&a| a == 0) {
        bail!("--sizes and --appenders must be positive");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.join(format!("somnus-logbench-{}", std::process::id()));
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure_all(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_all(args: &BenchArgs, dir: &Path) -> Result<()> {
    if !args.json {
        println!(
            "log appends vs raw write+{} on {} ({} s per measurement)",
            match args.sync {
                Sync::Data => "fdatasync",
                Sync::All => "fsync",
            },
            args.dir.display(),
            args.seconds
        );
        println!(
            "{:>7} {:>9} {:>10} {:>9} {:>8} {:>8} {:>11} {:>9} {:>9} {:>7} {:>11} {:>7}",
            "record",
            "appenders",
            "appends/s",
            "MB/s",
            "p50 ms",
            "p99 ms",
            "syncs/app.",
            "rec/batch",
            "raw MB/s",
            "ratio",
            "raw= MB/s",
            "ratio"
        );
    }
    for &size in &args.sizes {
        eprintln!("  raw writes of {size} bytes…");
        let reference = raw(dir, size, args.seconds, args.sync)?;
        for &appenders in &args.appenders {
            eprintln!("  {appenders} appenders of {size}-byte records…");
            let run = engine(dir, size, appenders, args.seconds, args.sync)?;
            let m = &run.measured;
            let per_batch = m.ops as f64 / run.batches.max(1) as f64;
            // The same bytes per sync as the log wrote: records with headers.
            let batch_bytes = (per_batch * (size + RECORD_HEADER_BYTES) as f64).round() as u64;
            let same_bytes = if appenders == 1 {
                None
            } else {
                eprintln!("  raw writes of {batch_bytes} bytes (the log's bytes per sync)…");
                Some(raw(dir, batch_bytes, args.seconds, args.sync)?)
            };
            // Compare like with like: the log's payload rate to the raw payload rate.
            let payload_share = size as f64 / (size + RECORD_HEADER_BYTES) as f64;
            let same_mb = same_bytes.as_ref().map_or(reference.mb_per_s(), |r| r.mb_per_s());
            let ratio_raw = m.mb_per_s() / reference.mb_per_s();
            let ratio_same =
                m.mb_per_s() / (same_mb * if same_bytes.is_some() { payload_share } else { 1.0 });
            let syncs_per_append = run.syncs as f64 / m.ops.max(1) as f64;
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({
                        "record_bytes": size,
                        "appenders": appenders,
                        "appends_per_s": m.ops as f64 / m.seconds,
                        "mb_per_s": m.mb_per_s(),
                        "p50_ms": m.ms(0.5),
                        "p99_ms": m.ms(0.99),
                        "max_ms": m.latency_ns.max() as f64 / 1e6,
                        "syncs_per_append": syncs_per_append,
                        "records_per_batch": per_batch,
                        "raw_mb_per_s": reference.mb_per_s(),
                        "raw_p50_ms": reference.ms(0.5),
                        "ratio_to_raw": ratio_raw,
                        "raw_same_bytes_per_sync_mb_per_s": same_mb,
                        "ratio_to_raw_same_bytes_per_sync": ratio_same,
                    })
                );
            } else {
                println!(
                    "{:>7} {:>9} {:>10.0} {:>9.1} {:>8.2} {:>8.2} {:>11.3} {:>9.1} {:>9.1} {:>7.2} {:>11.1} {:>7.2}",
                    size,
                    appenders,
                    m.ops as f64 / m.seconds,
                    m.mb_per_s(),
                    m.ms(0.5),
                    m.ms(0.99),
                    syncs_per_append,
                    per_batch,
                    reference.mb_per_s(),
                    ratio_raw,
                    same_mb,
                    ratio_same
                );
            }
        }
    }
    if !args.json {
        println!(
            "MB/s: payload; raw: one writer, record-sized writes; raw=: writes of the log's \
             bytes per sync (its ratio compares payload rates)"
        );
    }
    Ok(())
}
