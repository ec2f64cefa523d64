//! `somnus bench runtime`: the real cluster of processes on this machine's disk.
//!
//! - Writes and reads of 4 KiB and 1 MiB through the client library on a 9-server
//!   local cluster (r = 3), throughput and p50/p99, beside a raw loop of write +
//!   fdatasync of the same sizes in the same directory, measured in the same run: the
//!   ratio is the figure (with r = 3 on one disk, a third of raw is the ceiling).
//! - The rebuild rate: a server removed, the bytes rebuilt over the time until every
//!   group has r copies again.
//! - The time to gear down: gear 3 to 1, until no server outside gear group 0 leads a
//!   chunk group (Sierra: 98 primaries in 1.3 s).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use bytes::Bytes;
use clap::Args;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::Wire;
use somnus_runtime::observe::status::{MdsReport, ServerReport};
use tokio::time::Instant;

use super::local::{Figure, LocalCluster, bench_dir, closed_loop, figure, histogram};
use crate::cluster::access::runtime;

#[derive(Args)]
pub(crate) struct BenchRuntimeArgs {
    /// Where the cluster and the raw loop write (default: a temporary directory in
    /// the current one, removed after).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Seconds each client measurement runs.
    #[arg(long, default_value_t = 10)]
    pub(crate) seconds: u64,
    /// Requests in flight through the client.
    #[arg(long, default_value_t = 8)]
    pub(crate) in_flight: usize,
    /// Chunk groups per server (9 servers; 12 makes 108 groups, 72 of whose
    /// primaries move at a gear-down from 3 to 1; 16 makes 96 of 144).
    #[arg(long, default_value_t = 16)]
    pub(crate) groups_per_server: u32,
    /// Instead: the cost of the cluster wire's TLS. Two clusters, one with
    /// `wire = "plain"`, one with TLS (the default), measured in alternating rounds;
    /// medians and their ratios.
    #[arg(long)]
    pub(crate) compare_wire: bool,
    /// Rounds of `--compare-wire`.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) rounds: u32,
}

pub(crate) fn run(args: &BenchRuntimeArgs) -> Result<()> {
    let (_scratch, dir) = bench_dir(args.dir.as_deref())?;
    runtime()?.block_on(bench(args, &dir))
}

async fn bench(args: &BenchRuntimeArgs, dir: &Path) -> Result<()> {
    let seconds = Duration::from_secs(args.seconds);
    noteln!("raw write + fdatasync loop in {} ...", dir.display());
    let raw_small = off_task(dir, 4096, seconds).await?;
    let raw_large = off_task(dir, 1 << 20, seconds).await?;
    let cluster = LocalCluster::start(dir, args.groups_per_server, Wire::Tls, "cluster").await?;
    let client = cluster.client()?;
    let mut rows = Vec::new();
    for (size, label, raw) in [(4096u64, "4 KiB", raw_small), (1 << 20, "1 MiB", raw_large)] {
        let object = format!("bench-{size}");
        let span = 256u64 << 20;
        client.create(&object, span).await?;
        noteln!("client writes and reads of {label}, {} in flight ...", args.in_flight);
        let write =
            closed_loop(&client, &object, size, span, args.in_flight, seconds, true).await?;
        let read =
            closed_loop(&client, &object, size, span, args.in_flight, seconds, false).await?;
        let ratio = write.mib_s / raw.mib_s.max(1e-9);
        rows.push((format!("raw write+fsync {label}"), raw, None));
        rows.push((format!("client write {label}"), write, Some(ratio)));
        rows.push((format!("client read {label}"), read, None));
    }
    outln!(
        "{:<24} {:>10} {:>10} {:>9} {:>9} {:>12}",
        "",
        "MiB/s",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "write / raw"
    )?;
    for (name, f, ratio) in &rows {
        let ratio = ratio.map_or(String::new(), |r| format!("{r:.3}"));
        outln!(
            "{name:<24} {:>10.2} {:>10.0} {:>9.2} {:>9.2} {:>12}",
            f.mib_s,
            f.ops_s,
            f.p50_ms,
            f.p99_ms,
            ratio
        )?;
    }
    let (moved, took) = gear_down(&cluster).await?;
    outln!(
        "gear down 3 -> 1: {moved} primaries moved off gear groups 1 and 2 in {:.2} s (Sierra: 98 in 1.3 s)",
        took.as_secs_f64()
    )?;
    cluster.operator("/gear/3").await?;
    wait_all_on(&cluster).await?;
    let (bytes, took) = rebuild(&cluster, &client).await?;
    outln!(
        "rebuild of server 4: {:.1} MiB in {:.2} s: {:.1} MiB/s",
        bytes as f64 / f64::from(1 << 20),
        took.as_secs_f64(),
        bytes as f64 / f64::from(1 << 20) / took.as_secs_f64().max(1e-9)
    )?;
    cluster.stop().await;
    Ok(())
}

/// [`raw_fsync`] on a blocking thread.
async fn off_task(dir: &Path, size: u64, seconds: Duration) -> Result<Figure> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || raw_fsync(&dir, size, seconds)).await?
}

/// Writes of `size` at rotating offsets of one file, each followed by fdatasync, for
/// `seconds`.
fn raw_fsync(dir: &Path, size: u64, seconds: Duration) -> Result<Figure> {
    let path = dir.join("raw-fsync.bench");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let data = vec![0x5au8; size as usize];
    let mut latency = histogram()?;
    let span = 256u64 << 20;
    let start = Instant::now();
    let mut offset = 0;
    let mut bytes = 0;
    while start.elapsed() < seconds {
        let t = Instant::now();
        file.write_all_at(&data, offset)?;
        file.sync_data()?;
        latency.saturating_record(t.elapsed().as_micros() as u64);
        bytes += size;
        offset = (offset + size) % span;
    }
    let elapsed = start.elapsed();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(figure(&latency, bytes, elapsed))
}

/// Gear 3 to 1; how many primaries left gear groups 1 and 2, and how long until none
/// is left there.
async fn gear_down(cluster: &LocalCluster) -> Result<(usize, Duration)> {
    let before = cluster.mds().await?;
    let outside = |r: &MdsReport| -> usize {
        r.servers.iter().filter(|s| s.gear_group != 0).map(|s| s.primaries).sum()
    };
    let moved = outside(&before);
    let start = Instant::now();
    cluster.operator("/gear/1").await?;
    while outside(&cluster.mds().await?) > 0 {
        if start.elapsed() > Duration::from_secs(120) {
            bail!("the gear-down did not finish in 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((moved, start.elapsed()))
}

async fn wait_all_on(cluster: &LocalCluster) -> Result<()> {
    let start = Instant::now();
    loop {
        let mds = cluster.mds().await?;
        let on = mds.servers.iter().all(|s| s.power == somnus_core::cluster::ServerPower::On);
        let servers = cluster.servers().await;
        if on && servers.iter().all(|s| s.dvl_live_bytes == 0) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(300) {
            bail!("the servers did not all wake and reclaim in 300 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Removes server 4 and waits until every group has r copies again; the bytes the
/// rebuild copied and the time it took.
async fn rebuild(cluster: &LocalCluster, client: &ClusterClient) -> Result<(u64, Duration)> {
    // Data to rebuild: the benchmark objects are there already; add 256 MiB more.
    let data = Bytes::from(vec![7u8; 1 << 20]);
    client.create("bench-rebuild", 256 << 20).await?;
    for mib in 0..256u64 {
        client.write("bench-rebuild", mib << 20, data.clone()).await?;
    }
    let rebuilt = |servers: &[ServerReport]| -> u64 {
        servers.iter().map(|s| s.counters.rebuilt_bytes).sum()
    };
    let before = rebuilt(&cluster.servers().await);
    let mds = cluster.mds().await?;
    let copies: usize = mds.servers.iter().map(|s| s.chunk_groups).sum();
    let start = Instant::now();
    cluster.operator("/servers/4/remove").await?;
    loop {
        let mds = cluster.mds().await?;
        let held: usize = mds.servers.iter().map(|s| s.chunk_groups).sum();
        // Replicas are reassigned at once; each copy is done when its primary says so.
        if mds.servers[4].chunk_groups == 0 && held == copies && mds.rebuilds_under_way == 0 {
            break;
        }
        if start.elapsed() > Duration::from_secs(600) {
            bail!("the rebuild did not finish in 600 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    // Servers publish their counters every 500 ms.
    tokio::time::sleep(Duration::from_millis(700)).await;
    Ok((rebuilt(&cluster.servers().await) - before, took))
}
