//! `somnus replay`: a block trace replayed open-loop against the running cluster, as
//! the papers' testbeds did (Sierra 4.3): each block device becomes an object of the
//! cluster (`replay/<volume>`, 1 MiB chunks), each request is issued at its trace time
//! divided by the time scale and let go by the core's `ReplayAdmission` (requests
//! that overlap one still in flight on the same device wait for it, in arrival order;
//! at most 4096 in flight), and the read and write latencies, errors and energy are
//! reported in the simulator's shape (`somnus sim replay --json`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Args;
use hdrhistogram::Histogram;
use somnus_core::cluster::replay::{IN_FLIGHT_MAX, ReplayAdmission};
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::ClusterFile;
use somnus_runtime::observe::http;
use somnus_runtime::observe::status::ServerReport;
use somnus_sim::cluster::{GearAt, ReplaceAt, ReplayKind, TraceOp, TraceWorkload};
use somnus_trace::TraceSet;
use somnus_types::VirtualDuration;
use somnus_wire::ClusterSecret;
use tokio::time::Instant;

use crate::cluster::access::{ClusterArg, load, runtime};
use crate::trace::InputArgs;

/// Later than this past its time, a request counts as issued late.
const LATE: Duration = Duration::from_millis(100);

#[derive(Args)]
pub(crate) struct ReplayArgs {
    /// The trace files (any format `somnus trace stats` reads).
    #[arg(long = "trace", required = true, num_args = 1.., value_name = "FILE")]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
    /// How many times faster than the trace to replay (default: the cluster's own
    /// time_scale, so the cluster's clock and the trace's run together and the
    /// modelled energy covers the trace's span).
    #[arg(long, value_name = "X")]
    time_scale: Option<f64>,
    /// Replay only the first SECONDS of the trace (trace time).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Gear shifts during the replay, at trace times: `SECONDS:GEAR,...` (as
    /// `somnus gear set` would, each at its time; the simulator's agreement test
    /// replays the same schedule).
    #[arg(long, value_name = "SECONDS:GEAR,...", value_parser = parse_gear_schedule)]
    gear_schedule: Option<GearSchedule>,
    /// Devices replaced during the replay, at trace times: `SECONDS:DEVICE,...` (the
    /// device's index among the trace's, from 0). Its object is deleted and made again
    /// empty, after the requests before it and before those after it, as a volume is
    /// discarded: the data it held is freed a grace later (`free_grace_s`).
    #[arg(long, value_name = "SECONDS:DEVICE,...", value_parser = parse_replace_schedule)]
    replace_schedule: Option<ReplaceSchedule>,
    /// Print the report as JSON (the simulator's shape) instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// Gear shifts at trace times.
#[derive(Clone, Debug)]
struct GearSchedule(Vec<GearAt>);

fn parse_gear_schedule(text: &str) -> Result<GearSchedule, String> {
    let mut shifts = Vec::new();
    for item in text.split(',') {
        let (at, gear) = item
            .split_once(':')
            .ok_or_else(|| format!("{item:?} is not SECONDS:GEAR (as in 10:1,40:3)"))?;
        let at: f64 =
            at.trim().parse().map_err(|_| format!("{at:?} is not a number of seconds"))?;
        if !(at.is_finite() && at >= 0.0) {
            return Err(format!("{at} is not a time from the trace's start"));
        }
        let gear: u32 = gear.trim().parse().map_err(|_| format!("{gear:?} is not a gear"))?;
        shifts.push(GearAt { at: VirtualDuration::from_nanos((at * 1e9) as u64), gear });
    }
    if shifts.windows(2).any(|pair| pair[0].at > pair[1].at) {
        return Err("the shifts must be in time order".into());
    }
    Ok(GearSchedule(shifts))
}

/// Devices replaced at trace times.
#[derive(Clone, Debug)]
struct ReplaceSchedule(Vec<ReplaceAt>);

fn parse_replace_schedule(text: &str) -> Result<ReplaceSchedule, String> {
    let mut replaces = Vec::new();
    for item in text.split(',') {
        let (at, device) = item
            .split_once(':')
            .ok_or_else(|| format!("{item:?} is not SECONDS:DEVICE (as in 20:0,40:1)"))?;
        let at: f64 =
            at.trim().parse().map_err(|_| format!("{at:?} is not a number of seconds"))?;
        if !(at.is_finite() && at >= 0.0) {
            return Err(format!("{at} is not a time from the trace's start"));
        }
        let device: u32 =
            device.trim().parse().map_err(|_| format!("{device:?} is not a device index"))?;
        replaces.push(ReplaceAt { at: VirtualDuration::from_nanos((at * 1e9) as u64), device });
    }
    Ok(ReplaceSchedule(replaces))
}

/// Latency in the simulator's shape (milliseconds).
#[derive(serde::Serialize)]
struct LatencySummary {
    count: u64,
    p50: f64,
    mean: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

/// Latencies from 1 µs to an hour, to three significant digits (a longer one is
/// counted as an hour).
pub(crate) fn latency_histogram() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).ok()
}

fn summary(histogram: &Histogram<u64>) -> LatencySummary {
    let ms = |micros: u64| micros as f64 / 1000.0;
    LatencySummary {
        count: histogram.len(),
        p50: ms(histogram.value_at_quantile(0.5)),
        mean: histogram.mean() / 1000.0,
        p95: ms(histogram.value_at_quantile(0.95)),
        p99: ms(histogram.value_at_quantile(0.99)),
        max: ms(histogram.max()),
    }
}

/// The report: the fields of the simulator's configuration report that a live run
/// measures, under the same names.
#[derive(serde::Serialize)]
struct ConfigReport {
    config: &'static str,
    energy_pct: Option<f64>,
    mean_power_pct: Option<f64>,
    read_ms: LatencySummary,
    write_ms: LatencySummary,
    energy_j: Option<f64>,
    mean_power_w: Option<f64>,
    requests_unfinished: u64,
    errors: u64,
    late_requests: u64,
}

#[derive(Default)]
struct Tally {
    read: Option<Histogram<u64>>,
    write: Option<Histogram<u64>>,
    errors: u64,
    first_error: Option<String>,
    done: u64,
}

pub(crate) fn run(args: ReplayArgs) -> Result<()> {
    let (file, secret) = load(&args.cluster)?;
    let scale = args.time_scale.unwrap_or(file.cluster.time_scale);
    if !(scale.is_finite() && scale > 0.0) {
        bail!("--time-scale must be above 0, not {scale}");
    }
    let set = TraceSet::open(&args.traces, &args.input.options())?;
    let workload = TraceWorkload::read(&set, args.duration)?;
    if workload.ops.is_empty() {
        bail!("the traces hold no request to replay");
    }
    let replaces = args.replace_schedule.map(|s| s.0).unwrap_or_default();
    let workload = workload
        .with_replacements(&replaces)
        .map_err(|error| anyhow::anyhow!("--replace-schedule: {error}"))?;
    let gears = args.gear_schedule.map(|s| s.0).unwrap_or_default();
    if let Some(shift) = gears.iter().find(|s| s.gear == 0 || s.gear > file.cluster.replicas) {
        bail!(
            "--gear-schedule: gear {} is not one of 1..={} (the cluster's replicas)",
            shift.gear,
            file.cluster.replicas
        );
    }
    let span = workload.span().as_secs_f64();
    noteln!(
        "replaying {} requests of {} devices over {span:.1} s of trace in {:.1} s",
        workload.ops.len(),
        workload.devices.len(),
        span / scale
    );
    let file = Arc::new(file);
    runtime()?.block_on(async move {
        let client = ClusterClient::start(file.clone(), secret.clone())?;
        prepare(&client, &workload.devices).await?;
        let before = energy_once_all_answer(&file).await;
        let start = Instant::now();
        let shifts = tokio::spawn(shift_gears(file.clone(), secret, gears, scale, start));
        let (tally, late, unfinished) = replay(client, workload, scale, start).await;
        let after = energy(&file).await;
        if let Ok(Err(error)) = shifts.await {
            bail!("the gear schedule stopped: {error}");
        }
        report(&tally, late, unfinished, before.zip(after), span, args.json)
    })
}

/// Creates each device's object, or checks the one there is large enough.
async fn prepare(client: &ClusterClient, devices: &[(String, u64)]) -> Result<()> {
    for (name, size) in devices {
        let size = *size;
        match client.stat(name).await {
            Ok(info) if info.size_bytes >= size => continue,
            Ok(info) => bail!(
                "object {name:?} holds {} bytes, the trace addresses {size}: remove it with \
                 `somnus rm {name}`",
                info.size_bytes
            ),
            Err(_) => {
                client.create(name, size).await.with_context(|| format!("creating {name:?}"))?;
            }
        }
    }
    Ok(())
}

/// The servers' modelled energy and what it would be always on, summed; `None`
/// unless every server answers.
async fn energy(file: &ClusterFile) -> Option<(f64, f64)> {
    let reports: Option<Vec<ServerReport>> = http::server_reports(file).await.into_iter().collect();
    let energy = reports?.into_iter().map(|r| (r.energy.joules, r.energy.joules_if_always_on));
    Some(energy.fold((0.0, 0.0), |(j, a), (rj, ra)| (j + rj, a + ra)))
}

/// `energy`, once every server answers: a cluster just started may take a few seconds
/// to serve its status. `None` if one still does not after 10 s (the replay runs, its
/// energy unreported).
async fn energy_once_all_answer(file: &ClusterFile) -> Option<(f64, f64)> {
    let start = Instant::now();
    loop {
        let energy = energy(file).await;
        if energy.is_some() || start.elapsed() > Duration::from_secs(10) {
            return energy;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends each gear shift of the schedule at its time (trace time over `scale` from
/// `start`), as `somnus gear set` does.
async fn shift_gears(
    file: Arc<ClusterFile>,
    secret: ClusterSecret,
    gears: Vec<GearAt>,
    scale: f64,
    start: Instant,
) -> Result<()> {
    for shift in gears {
        tokio::time::sleep_until(start + Duration::from_secs_f64(shift.at.as_secs_f64() / scale))
            .await;
        http::operator(&file, &secret, &format!("/gear/{}", shift.gear))
            .await
            .with_context(|| format!("gear {} at {:.1} s", shift.gear, shift.at.as_secs_f64()))?;
        noteln!("  gear {} at {:.1} s of trace", shift.gear, shift.at.as_secs_f64());
    }
    Ok(())
}

/// Issues every request at its time (trace time over `scale` from `start`) as the
/// core's [`ReplayAdmission`] lets it go; returns the tally, the requests that went
/// over 100 ms late (the replay fell behind, or the request queued for a place), and
/// those not finished.
async fn replay(
    client: ClusterClient,
    workload: TraceWorkload,
    scale: f64,
    start: Instant,
) -> (Tally, u64, u64) {
    let client = Arc::new(client);
    let names: Arc<Vec<String>> =
        Arc::new(workload.devices.iter().map(|(name, _)| name.clone()).collect());
    let ops = Arc::new(workload.ops);
    let tally = Arc::new(Mutex::new(Tally {
        read: latency_histogram(),
        write: latency_histogram(),
        ..Tally::default()
    }));
    let mut admission = ReplayAdmission::new(names.len(), IN_FLIGHT_MAX);
    // Bounded by the requests issued at once: a send never waits.
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<u64>(IN_FLIGHT_MAX);
    let arrival = |n: usize| start + Duration::from_secs_f64(ops[n].at.as_secs_f64() / scale);
    let (mut late, total) = (0u64, ops.len() as u64);
    let mut next = 0;
    let mut next_note = start + Duration::from_secs(10);
    loop {
        let ready = if next < ops.len() {
            let at = arrival(next);
            tokio::select! {
                biased;
                Some(done) = done_rx.recv() => admission.done(done),
                () = tokio::time::sleep_until(at) => {
                    if at.elapsed() > LATE {
                        late += 1;
                    }
                    let op = &ops[next];
                    let queued = admission.queued();
                    let ready = admission.arrive(next as u64, op.device, op.range);
                    late += (admission.queued() > queued) as u64;
                    next += 1;
                    ready
                }
            }
        } else if admission.in_flight() > 0 {
            match done_rx.recv().await {
                Some(done) => admission.done(done),
                None => break,
            }
        } else {
            break;
        };
        let ready = match ready {
            Ok(ready) => ready,
            Err(error) => unreachable!("the replay named a request wrongly: {error}"),
        };
        for n in ready {
            let (client, tally, names, ops) =
                (client.clone(), tally.clone(), names.clone(), ops.clone());
            let (done, arrived) = (done_tx.clone(), arrival(n as usize));
            tokio::spawn(async move {
                issue(&client, &names, &ops, n as usize, arrived, &tally).await;
                let _ = done.send(n).await;
            });
        }
        if Instant::now() >= next_note {
            next_note += Duration::from_secs(10);
            let done = tally.lock().unwrap_or_else(PoisonError::into_inner).done;
            noteln!("  {done} of {total} requests done, {next} issued");
        }
    }
    let tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    let unfinished = total - tally.done;
    (tally, late, unfinished)
}

/// Request `n` of the trace, issued; its outcome tallied (latency from `arrived`).
async fn issue(
    client: &ClusterClient,
    names: &[String],
    ops: &[TraceOp],
    n: usize,
    arrived: Instant,
    tally: &Mutex<Tally>,
) {
    let op = ops[n];
    let name = &names[op.device as usize];
    let result = match op.kind {
        ReplayKind::Read => client.read(name, op.range).await.map(drop),
        ReplayKind::Write => {
            let data = Bytes::from(vec![(n % 251) as u8; op.range.size_bytes() as usize]);
            client.write(name, op.range.start, data).await
        }
        ReplayKind::Replace => match client.delete(name).await {
            Ok(()) => client.create(name, op.range.end).await.map(drop),
            Err(error) => Err(error),
        },
    };
    let micros = arrived.elapsed().as_micros() as u64;
    let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
    tally.done += 1;
    match result {
        Ok(()) => {
            let histogram = match op.kind {
                ReplayKind::Read => tally.read.as_mut(),
                ReplayKind::Write => tally.write.as_mut(),
                ReplayKind::Replace => None,
            };
            if let Some(h) = histogram {
                h.saturating_record(micros.max(1));
            }
        }
        Err(error) => {
            tally.errors += 1;
            tally.first_error.get_or_insert_with(|| format!("{name}: {error}"));
        }
    }
}

fn report(
    tally: &Tally,
    late: u64,
    unfinished: u64,
    energy: Option<((f64, f64), (f64, f64))>,
    span_s: f64,
    json: bool,
) -> Result<()> {
    let empty = latency_histogram;
    let read = tally.read.clone().or_else(empty).map(|h| summary(&h));
    let write = tally.write.clone().or_else(empty).map(|h| summary(&h));
    let (Some(read_ms), Some(write_ms)) = (read, write) else {
        bail!("cannot make a latency histogram");
    };
    let used = energy.map(|((j0, a0), (j1, a1))| (j1 - j0, a1 - a0));
    let energy_pct = used.map(|(j, a)| if a > 0.0 { 100.0 * j / a } else { 100.0 });
    let report = ConfigReport {
        config: "runtime",
        energy_pct,
        mean_power_pct: energy_pct,
        read_ms,
        write_ms,
        energy_j: used.map(|(j, _)| j),
        mean_power_w: used.map(|(j, _)| j / span_s.max(1e-9)),
        requests_unfinished: unfinished,
        errors: tally.errors,
        late_requests: late,
    };
    if json {
        let document = serde_json::json!({ "span_s": span_s, "configs": [report] });
        outln!("{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        outln!(
            "{:<6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "",
            "count",
            "p50 ms",
            "mean ms",
            "p95 ms",
            "p99 ms",
            "max ms"
        )?;
        for (kind, s) in [("read", &report.read_ms), ("write", &report.write_ms)] {
            outln!(
                "{kind:<6} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                s.count,
                s.p50,
                s.mean,
                s.p95,
                s.p99,
                s.max
            )?;
        }
        match (report.energy_j, report.energy_pct) {
            (Some(j), Some(pct)) => outln!(
                "energy (modelled, over {span_s:.1} s of the cluster's clock): {j:.0} J, {pct:.1} % of always on"
            )?,
            _ => outln!("energy: not every server answered its status")?,
        }
        outln!(
            "errors {}   unfinished {}   issued over 100 ms late {}",
            report.errors,
            unfinished,
            late
        )?;
    }
    if let Some(error) = &tally.first_error {
        noteln!("the first error: {error}");
    }
    Ok(())
}
