//! `somnus demo`: somnus's main job in a few minutes. A local cluster of real
//! processes (an MDS, nine storage servers in three racks, r = 3, and the S3 gateway)
//! takes a day of S3 traffic compressed into about a minute; the MDS's gear scheduler,
//! fed only what its primaries measure, puts servers to sleep in the quiet hours and
//! wakes them for the busy ones. Each interval prints the gear, the servers asleep,
//! the DVL's bytes and the energy saved against every server on; at the end every
//! object is read back and compared, byte for byte, while the sleepers sleep.

mod load;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_core::cluster::ServerPower;
use somnus_core::gear::{Capability, Gearing, Policy};
use somnus_runtime::cluster_file::{ClusterFile, ClusterSection, GearSection};
use somnus_runtime::observe::http;
use somnus_runtime::observe::status::{MdsReport, ServerReport};
use somnus_s3::client::{Connection, Endpoint};
use somnus_s3::sigv4::Signer;
use tokio::time::Instant;

use crate::cluster::access::runtime;
use crate::cluster::up::{Running, create_cluster, start_all, start_s3, stop_all};
use load::{BUCKET, IntervalStats, Ledger, LoadConfig};

#[derive(Args)]
pub(crate) struct DemoArgs {
    /// How long the demo's day lasts, in real seconds (from 36 to 720): the cluster's
    /// clock runs 720 / this times faster than real time, so that the MDS's gear
    /// scheduler sees twelve intervals of 60 s.
    #[arg(long, default_value_t = 72.0, value_name = "SECONDS")]
    day_seconds: f64,
    /// S3 requests per real second at the day's peak (2 p.m.); the night has 1/12 of
    /// it. Half are PUTs of new objects, half GETs of stored ones.
    #[arg(long, default_value_t = 40.0, value_name = "RATE")]
    peak_rate: f64,
    /// Bytes of each object (from 1 to 16 MiB).
    #[arg(long, default_value_t = 65_536, value_name = "BYTES")]
    object_size: u64,
    /// Seed of the load: which requests are PUTs, which objects the GETs read, and
    /// the objects' bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the cluster's state and logs in this directory (new, or empty) instead of
    /// a temporary one removed at the end.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The S3 gateway's address (default: the first free port on 127.0.0.1 from 9000).
    #[arg(long, value_name = "ADDR")]
    s3: Option<SocketAddr>,
}

/// Ctrl-C.
#[derive(Debug)]
struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// The scheduler's day: twelve intervals of 60 s on the cluster's clock.
const INTERVALS: usize = 12;
const INTERVAL_S: u64 = 60;
const SERVERS: u32 = 9;
/// The servers the load's peak keeps busy, by the capability the demo declares.
const PEAK_SERVERS: f64 = 8.0;
/// How long the cluster may take to start.
const STARTUP: Duration = Duration::from_secs(60);

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    if !(36.0..=720.0).contains(&args.day_seconds) {
        bail!("--day-seconds {}: from 36 to 720", args.day_seconds);
    }
    if !(args.peak_rate.is_finite() && (1.0..=2000.0).contains(&args.peak_rate)) {
        bail!("--peak-rate {}: from 1 to 2000 requests per second", args.peak_rate);
    }
    if !(1..=16 << 20).contains(&args.object_size) {
        bail!("--object-size {}: from 1 byte to 16 MiB", args.object_size);
    }
    let (dir, temporary) = match &args.dir {
        Some(dir) => {
            let used = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
            if used {
                bail!("--dir {}: not empty (the demo starts a new cluster)", dir.display());
            }
            (dir.clone(), None)
        }
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("somnus-demo-")
                .tempdir()
                .context("cannot create a temporary directory for the demo's cluster")?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    let outcome = runtime()?.block_on(demo(&args, &dir));
    // Stopped by its user (Ctrl-C, or a reader gone: `somnus demo | head`) is no
    // failure to look into.
    let stopped = outcome.as_ref().is_err_and(|e| {
        e.is::<Interrupted>() || e.chain().any(|c| c.is::<crate::output::StdoutClosed>())
    });
    match (&outcome, temporary) {
        (Ok(()), Some(temporary)) => temporary.close().context("cannot remove the demo's data")?,
        (Err(_), Some(temporary)) if stopped => {
            let _ = temporary.close();
        }
        (Err(_), Some(temporary)) => {
            // Kept for a look at the processes' logs.
            let kept = temporary.keep();
            noteln!("somnus demo: the cluster's state and logs are kept in {}", kept.display());
        }
        (_, None) => {}
    }
    outcome
}

/// The cluster the demo starts: `up`'s defaults on a faster clock, with a gear
/// scheduler whose day is the demo's and a declared server capability that makes the
/// day's peak need about eight servers.
fn cluster(args: &DemoArgs) -> (ClusterSection, GearSection, f64) {
    let time_scale = (INTERVALS as u64 * INTERVAL_S) as f64 / args.day_seconds;
    // At the peak, per second of the cluster's clock: PUTs write a data object and a
    // record (each counted r times), GETs read both.
    let per_cluster_second = args.peak_rate / time_scale;
    let demand_per_request = 0.5 * 2.0 * 3.0 + 0.5 * 2.0;
    let iops = per_cluster_second * demand_per_request / PEAK_SERVERS;
    let capability =
        Capability { read_iops: iops, write_iops: iops, read_mib_s: 1000.0, write_mib_s: 1000.0 };
    let section = ClusterSection { time_scale, ..ClusterSection::default() };
    let gear = GearSection {
        policy: Policy::Hybrid,
        gearing: Gearing::Fractional,
        interval_s: INTERVAL_S,
        day_s: INTERVALS as u64 * INTERVAL_S,
        capability,
        ..GearSection::default()
    };
    (section, gear, iops)
}

async fn demo(args: &DemoArgs, dir: &Path) -> Result<()> {
    let (section, gear, iops) = cluster(args);
    let path = dir.join("cluster.toml");
    let file = create_cluster(&path, SERVERS, section, Some(gear))?;
    let exe = std::env::current_exe().context("cannot find the somnus binary to start")?;
    let address = match args.s3 {
        Some(address) => address,
        None => somnus_runtime::net::ports::loopback_ports(1, 9000)?[0],
    };
    let spawned = Instant::now();
    let mut children = start_all(&exe, &path, &file, &dir.join("logs"))?;
    let Some((gateway, _, _)) = start_s3(&exe, &path, address, &dir.join("logs"))? else {
        stop_all(&mut children).await;
        bail!("the S3 gateway cannot listen on {address}: pass --s3 with a free address");
    };
    children.push(gateway);
    let outcome = tokio::select! {
        outcome = drive(args, &file, &path, address, spawned, iops, &mut children) => outcome,
        _ = tokio::signal::ctrl_c() => Err(Interrupted.into()),
    };
    stop_all(&mut children).await;
    outcome
}

/// Runs the day against the started cluster and prints what it did.
async fn drive(
    args: &DemoArgs,
    file: &ClusterFile,
    path: &Path,
    address: SocketAddr,
    spawned: Instant,
    iops: f64,
    children: &mut [Running],
) -> Result<()> {
    let keys = crate::cluster::s3::credentials(None, None, path)?;
    let signer = Arc::new(Signer {
        access_key: keys.access_key.clone(),
        secret_key: keys.secret_key.clone(),
        region: "us-east-1".into(),
    });
    let day = Duration::from_secs_f64(args.day_seconds);
    let interval = day / INTERVALS as u32;
    noteln!(
        "somnus demo: a cluster of {SERVERS} servers in 3 racks (r = 3), its MDS and an S3 \
         gateway at http://{address}, starting in {}",
        path.parent().unwrap_or(Path::new(".")).display()
    );
    wait_until_ready(file, address, &signer, children).await?;
    // The day starts with one of the scheduler's intervals (its clock started with
    // the MDS, a moment after `spawned`).
    let waited = spawned.elapsed().as_secs_f64() / interval.as_secs_f64();
    let start = spawned + interval * (waited.ceil() as u32).max(1);
    print_heading(args, file, iops)?;
    let config = LoadConfig {
        address,
        signer: signer.clone(),
        seed: args.seed,
        peak_rate: args.peak_rate,
        object_size: args.object_size,
        day,
        intervals: INTERVALS,
    };
    let ledger = Arc::new(Ledger::default());
    let load = tokio::spawn(load::run_day(config.clone(), ledger.clone(), start));
    let mut seen = Seen::default();
    for index in 0..INTERVALS {
        // Sampled three quarters in, when the interval's shifts are done.
        tokio::time::sleep_until(start + interval * index as u32 + interval * 3 / 4).await;
        let sample = sample(file).await;
        tokio::time::sleep_until(start + interval * (index as u32 + 1)).await;
        let stats = ledger.intervals.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
            [index]
            .clone();
        print_row(index, &stats, interval, sample.as_ref(), &mut seen)?;
        check_children(children)?;
    }
    load.await.context("the load's task failed")?;
    let day_stats =
        ledger.intervals.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let stored = ledger.stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let objects = stored.len() as u64;
    let (good, bad) = load::read_back(&config, stored, 8).await;
    let end = sample(file).await;
    print_summary(args, &day_stats, &seen, end.as_ref(), objects, good, &bad)?;
    let errors: u64 = day_stats.iter().map(|s| s.errors).sum();
    if errors > 0 || !bad.is_empty() {
        let first = day_stats.iter().find_map(|s| s.first_error.clone());
        bail!(
            "{errors} requests failed during the day{}, {} objects did not read back{}",
            first.map_or(String::new(), |e| format!(" (first: {e})")),
            bad.len(),
            bad.first().map_or(String::new(), |e| format!(" (first: {e})"))
        );
    }
    Ok(())
}

/// Waits until every server is on, every chunk group has a primary and the gateway
/// makes the demo's bucket.
async fn wait_until_ready(
    file: &ClusterFile,
    address: SocketAddr,
    signer: &Signer,
    children: &mut [Running],
) -> Result<()> {
    let deadline = Instant::now() + STARTUP;
    loop {
        check_children(children)?;
        if Instant::now() > deadline {
            bail!("the cluster did not start within {STARTUP:?}: see its logs");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Ok(mds) = http::mds_report(file).await else { continue };
        let all_on = mds.servers.iter().all(|s| s.power == ServerPower::On);
        if !all_on || mds.groups.iter().any(|g| g.primary.is_none()) {
            continue;
        }
        let Ok(mut connection) = Connection::open(&Endpoint::http(address)).await else { continue };
        let bucket = format!("/{BUCKET}");
        match connection.send(signer, "PUT", &bucket, bytes::Bytes::new()).await {
            Ok((200, _)) => return Ok(()),
            Ok((403, body)) => bail!("the gateway refused the demo's keys: {}", lossy(&body)),
            _ => continue,
        }
    }
}

fn lossy(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

/// An error if a process of the cluster has exited.
fn check_children(children: &mut [Running]) -> Result<()> {
    for running in children.iter_mut() {
        if let Ok(Some(status)) = running.child.try_wait() {
            bail!("{} exited ({status}): see logs/{}.log", running.name, running.name);
        }
    }
    Ok(())
}

/// The cluster as the MDS and the servers report it.
struct Sample {
    mds: MdsReport,
    servers: Vec<Option<ServerReport>>,
}

impl Sample {
    fn asleep(&self) -> usize {
        self.mds.servers.iter().filter(|s| s.power == ServerPower::Asleep).count()
    }
    fn dvl_bytes(&self) -> u64 {
        self.servers.iter().flatten().map(|r| r.dvl_live_bytes).sum()
    }
    /// Modelled joules, and those had every server stayed on.
    fn energy(&self) -> (f64, f64) {
        let readings = self.servers.iter().flatten().map(|r| &r.energy);
        readings.fold((0.0, 0.0), |(j, a), e| (j + e.joules, a + e.joules_if_always_on))
    }
    fn saved_percent(&self) -> f64 {
        let (joules, always_on) = self.energy();
        if always_on > 0.0 { 100.0 * (always_on - joules) / always_on } else { 0.0 }
    }
}

async fn sample(file: &ClusterFile) -> Option<Sample> {
    let mds = http::mds_report(file).await.ok()?;
    let servers = http::server_reports(file).await;
    Some(Sample { mds, servers })
}

/// What the rows saw, for the summary.
#[derive(Default)]
struct Seen {
    most_asleep: usize,
    intervals_with_sleepers: usize,
    gears: Vec<u32>,
    dvl_peak: u64,
}

fn print_heading(args: &DemoArgs, file: &ClusterFile, iops: f64) -> Result<()> {
    outln!(
        "a day of S3 traffic in {:.0} s: up to {:.0} requests/s at 2 p.m., {:.1} at night, \
         half PUTs of {} objects, half GETs",
        args.day_seconds,
        args.peak_rate,
        args.peak_rate / 12.0,
        size_text(args.object_size)
    )?;
    outln!(
        "the cluster's clock runs {:.0}x real time; each server is declared to serve {iops:.2} \
         requests per second of it (`[gear] capability`), so the peak needs about {PEAK_SERVERS:.0} \
         of {}",
        file.cluster.time_scale,
        file.servers.len()
    )?;
    outln!(
        "the MDS's hybrid gear scheduler decides from what the primaries measure; servers \
         modelled as {} (`somnus show profile {}`)",
        file.cluster.server_profile,
        file.cluster.server_profile
    )?;
    outln!()?;
    outln!(
        "{:>11}  {:>6}  {:>6}  {:>6}  {:>6}  {:>4}  {:>3}  {:>6}  {:>8}  {:>12}",
        "hours",
        "req/s",
        "errors",
        "p50 ms",
        "p99 ms",
        "gear",
        "on",
        "asleep",
        "DVL MiB",
        "energy saved"
    )
}

fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The interval's service times, milliseconds: p50 and p99 (nearest rank).
fn percentiles(stats: &IntervalStats) -> (f64, f64) {
    let mut sorted = stats.latencies_us.clone();
    sorted.sort_unstable();
    let at = |p| somnus_s3::bench::percentile(&sorted, p);
    (at(50.0), at(99.0))
}

fn print_row(
    index: usize,
    stats: &IntervalStats,
    interval: Duration,
    sample: Option<&Sample>,
    seen: &mut Seen,
) -> Result<()> {
    let hours = 24 / INTERVALS;
    let span = format!("{:02}:00-{:02}:00", index * hours, (index + 1) * hours);
    let rate = (stats.puts + stats.gets) as f64 / interval.as_secs_f64();
    let (p50, p99) = percentiles(stats);
    let head = format!("{span:>11}  {rate:>6.1}  {:>6}  {p50:>6.1}  {p99:>6.1}", stats.errors);
    let Some(sample) = sample else {
        return outln!("{head}  (no answer from the MDS)");
    };
    let asleep = sample.asleep();
    let on = sample.mds.servers.iter().filter(|s| s.power == ServerPower::On).count();
    seen.most_asleep = seen.most_asleep.max(asleep);
    seen.intervals_with_sleepers += usize::from(asleep > 0);
    seen.gears.push(sample.mds.gear);
    seen.dvl_peak = seen.dvl_peak.max(sample.dvl_bytes());
    outln!(
        "{head}  {:>4}  {on:>3}  {asleep:>6}  {:>8.2}  {:>10.1} %",
        sample.mds.gear,
        sample.dvl_bytes() as f64 / f64::from(1 << 20),
        sample.saved_percent()
    )
}

fn print_summary(
    args: &DemoArgs,
    day: &[IntervalStats],
    seen: &Seen,
    end: Option<&Sample>,
    objects: u64,
    good: u64,
    bad: &[String],
) -> Result<()> {
    let puts: u64 = day.iter().map(|s| s.puts).sum();
    let gets: u64 = day.iter().map(|s| s.gets).sum();
    let errors: u64 = day.iter().map(|s| s.errors).sum();
    let all = IntervalStats {
        latencies_us: day.iter().flat_map(|s| s.latencies_us.iter().copied()).collect(),
        ..IntervalStats::default()
    };
    let (p50, p99) = percentiles(&all);
    outln!()?;
    outln!(
        "the day: {} S3 requests ({puts} PUTs, {gets} GETs, every GET compared with what was \
         PUT), {errors} failed; p50 {p50:.1} ms, p99 {p99:.1} ms",
        puts + gets + errors
    )?;
    outln!(
        "sleep: up to {} of {SERVERS} servers asleep, in {} of {INTERVALS} intervals; gears {}; \
         the DVL held up to {:.2} MiB of writes for sleeping replicas",
        seen.most_asleep,
        seen.intervals_with_sleepers,
        seen.gears.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
        seen.dvl_peak as f64 / f64::from(1 << 20)
    )?;
    if let Some(end) = end {
        let (joules, always_on) = end.energy();
        outln!(
            "energy (modelled, on the cluster's clock): {:.0} kJ, against {:.0} kJ with every \
             server on: {:.1} % saved",
            joules / 1000.0,
            always_on / 1000.0,
            end.saved_percent()
        )?;
    }
    let asleep = end.map_or("?".to_string(), |s| s.asleep().to_string());
    outln!(
        "read back: {good} of {objects} objects, every byte as PUT ({} servers asleep at the \
         end){}",
        asleep,
        if bad.is_empty() { String::new() } else { format!("; {} did not", bad.len()) }
    )?;
    let _ = args;
    Ok(())
}
