//! `somnus bench cluster`: simulated client requests per second of the deterministic
//! cluster simulation (issue 11), every message and disk I/O modelled, on one core:
//! with the history checker on (every op checked, as `somnus sim cluster` runs) and
//! off (a replay that measures energy and latency, not correctness), in the same run.
//!
//! Each seed runs in a process of its own, as a replay would: run one after another in
//! one process, a seed inherits the allocator's state from the seeds before it (memory
//! they freed is returned to the kernel lazily, while it runs, and faulted in again),
//! which measured up to 5 % slower than the same seed alone (about 1 % since a
//! chunk's blocks are allocated whole at its first write).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use somnus_sim::cluster::{ClusterSim, ClusterSpec, FaultSet};

use super::stats::{median, thread_cpu_time};
use crate::progress::now;

/// The target: a week of a busy data center replays in minutes.
const TARGET_PER_S: f64 = 300_000.0;

#[derive(Args)]
pub(crate) struct BenchClusterArgs {
    /// Cluster sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "9,300")]
    servers: Vec<u32>,
    /// Clients per server, each with one request in flight (2 ms mean think time
    /// between requests), reading and writing 1 to 16 blocks of 4 KiB at random.
    #[arg(long, default_value_t = 2)]
    clients_per_server: u32,
    /// Virtual seconds of workload per run [default: 1800 / servers, at least 20: 200
    /// for 9 servers, 20 for 300, so that each run simulates 100,000 requests or more
    /// and set-up (building the cluster, creating the objects) is a small part of it:
    /// about 1% at 300 servers].
    #[arg(long)]
    virtual_secs: Option<u64>,
    /// Fault kinds injected (as `somnus sim cluster --faults`): `none` measures the
    /// protocol's steady state, `all` every recovery path too.
    #[arg(long, default_value = "none", value_parser = parse_faults)]
    faults: FaultSet,
    /// Runs of each size, seeds 1..=REPEAT; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: u32,
    /// Let every client read and write any object, instead of only its own two (more
    /// metadata lookups, and clients contend for blocks).
    #[arg(long)]
    shared_objects: bool,
    /// The share of the random ops that replace an object (as `somnus sim cluster
    /// --churn`: a new data object written and bound to its name, or the name deleted
    /// and made again, what it replaced freed on every server holding it a grace
    /// later), 0 to 1. The default 0 measures reads and writes alone, the steady state
    /// of block volumes; each replacement costs a few metadata commands and a free
    /// on the servers of its groups.
    #[arg(long, default_value_t = 0.0, value_parser = crate::sim::cluster::parse_share)]
    churn: f64,
    /// Measure only with the history checker on (`on`), only off (`off`), or both.
    #[arg(long, default_value = "both", value_parser = ["both", "on", "off"])]
    check: String,
    /// Run every seed in this process, one after another, instead of each in a child
    /// process of its own, as a replay runs. In one process a seed inherits the
    /// allocator's state from the seeds before it (the memory they freed is handed
    /// back to the kernel while it runs, and faulted in again): up to 5 % slower here.
    #[arg(long)]
    in_process: bool,
    /// Print the figures as one JSON document (schema `somnus-bench-cluster`, or
    /// `somnus-bench-cluster-trace` with `--trace`).
    #[arg(long)]
    json: bool,
    /// Instead of the random workload: replay these block traces (any format `somnus
    /// trace stats` reads) on `--trace-servers` servers, the metadata service's hybrid
    /// scheduler gearing them (fractional, 1-hour timescale), once per `--check`
    /// setting, timed on one core, with each run's peak resident memory. The target is
    /// a week of `somnus trace generate --preset msr-fast08` (20.4 M requests) on 30
    /// servers in 2 minutes within 4 GB resident.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    trace: Vec<PathBuf>,
    /// With `--trace`: the servers of the cluster.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(3..=3000))]
    trace_servers: u32,
    /// With `--trace`: replay only the first SECONDS of the traces.
    #[arg(long, value_name = "SECONDS")]
    trace_secs: Option<f64>,
    /// Run only this seed of the one size and checker setting given, and print its
    /// figures as one JSON line: what each child process of the benchmark does.
    #[arg(long, hide = true)]
    child_seed: Option<u64>,
}

fn parse_faults(text: &str) -> Result<FaultSet, String> {
    FaultSet::parse(text).map_err(|error| error.to_string())
}

/// The cluster measured for `servers` servers: ten servers to a rack (at least r
/// racks), four chunk groups per server, and per client two objects of two 1 MiB
/// chunks that only it reads and writes (as a VM its volumes).
fn spec(args: &BenchClusterArgs, servers: u32, check_history: bool) -> ClusterSpec {
    let small = ClusterSpec::small();
    let clients = servers * args.clients_per_server;
    ClusterSpec {
        servers,
        racks: servers.div_ceil(10).max(small.replicas),
        clients,
        objects: clients * 2,
        virtual_secs: virtual_secs(args, servers),
        faults: args.faults,
        private_objects: !args.shared_objects,
        check_history,
        churn: args.churn,
        ..small
    }
}

fn virtual_secs(args: &BenchClusterArgs, servers: u32) -> u64 {
    args.virtual_secs.unwrap_or((1800 / u64::from(servers)).max(20))
}

/// One size's figures: the run of median time (what it simulated), and the median wall
/// and CPU times.
struct Measured {
    servers: u32,
    spec: ClusterSpec,
    run: SeedRun,
    wall: Duration,
    cpu: Option<Duration>,
}

impl Measured {
    /// Requests per second: per CPU second where known, else per wall second.
    fn rate(&self, count: u64) -> f64 {
        count as f64 / self.cpu.unwrap_or(self.wall).as_secs_f64().max(1e-9)
    }
}

pub(crate) fn run(args: &BenchClusterArgs) -> Result<()> {
    if let Some(seed) = args.child_seed {
        return run_child(args, seed);
    }
    let checks = match args.check.as_str() {
        "on" => &[true][..],
        "off" => &[false][..],
        _ => &[true, false][..],
    };
    if !args.trace.is_empty() {
        let (servers, secs) = (args.trace_servers, args.trace_secs);
        return super::cluster_trace::run(&args.trace, secs, servers, checks, args.json);
    }
    if args.repeat == 0 || args.repeat > 100 {
        bail!("--repeat must be between 1 and 100");
    }
    if args.virtual_secs.is_some_and(|s| s == 0 || s > 3600) {
        bail!("--virtual-secs must be between 1 and 3600");
    }
    if args.clients_per_server == 0 || args.clients_per_server > 64 {
        bail!("--clients-per-server must be between 1 and 64");
    }
    let mut measured = Vec::new();
    for &servers in &args.servers {
        if !(3..=3000).contains(&servers) {
            bail!("--servers {servers}: a cluster here has 3 to 3000 servers");
        }
        for &check in checks {
            measured.push(measure(args, servers, check)?);
        }
    }
    print(args, &measured)
}

fn measure(args: &BenchClusterArgs, servers: u32, check: bool) -> Result<Measured> {
    let spec = spec(args, servers, check);
    if let Err(error) = spec.validate(1) {
        bail!("--servers {servers}: {error}");
    }
    let mut runs = Vec::new();
    for seed in 1..=u64::from(args.repeat) {
        let run = if args.in_process {
            SeedRun::measure(&spec, seed)?
        } else {
            SeedRun::in_child(args, &spec, seed)?
        };
        runs.push(run);
    }
    let wall = median(runs.iter().map(|r| r.wall()).collect());
    let cpu = runs.iter().map(SeedRun::cpu).collect::<Option<Vec<_>>>().map(median);
    // The report shown is the run whose CPU (or wall) time is the median.
    runs.sort_by_key(|r| r.cpu().unwrap_or(r.wall()));
    let run = runs.swap_remove(runs.len() / 2);
    Ok(Measured { servers, spec, run, wall, cpu })
}

/// The shortest run timed by CPU time rather than wall time.
const CPU_TIMED_MIN: Duration = Duration::from_millis(100);

/// One seed's run: what it simulated and the time it took (from building the cluster
/// to the end checks), as a child process reports it to the benchmark.
#[derive(Debug, Serialize, Deserialize)]
struct SeedRun {
    seed: u64,
    ops: u64,
    messages: u64,
    disk_ios: u64,
    virtual_nanos: u64,
    wall_nanos: u64,
    cpu_nanos: Option<u64>,
}

impl SeedRun {
    /// Runs `seed` of `spec` in this process.
    fn measure(spec: &ClusterSpec, seed: u64) -> Result<SeedRun> {
        let (start, cpu_start) = (now(), thread_cpu_time());
        let report = ClusterSim::new(spec, seed, None).run();
        let wall = start.elapsed();
        let cpu = cpu_start.zip(thread_cpu_time()).map(|(a, b)| b.saturating_sub(a));
        // The kernel's count of a running thread's CPU time moves in scheduler ticks
        // (4 ms here): too coarse for a short run, which is then timed by the wall.
        let cpu = cpu.filter(|_| wall >= CPU_TIMED_MIN);
        if report.violation_count > 0 {
            bail!(
                "{} servers, seed {seed}: the checker found {} violations, first: {}",
                spec.servers,
                report.violation_count,
                report.violations.first().map_or("", String::as_str)
            );
        }
        Ok(SeedRun {
            seed,
            ops: report.ops,
            messages: report.messages,
            disk_ios: report.disk_ios,
            virtual_nanos: report.virtual_nanos,
            wall_nanos: wall.as_nanos() as u64,
            cpu_nanos: cpu.map(|d| d.as_nanos() as u64),
        })
    }

    /// Runs `seed` of `spec` in a child process of this binary (`--child-seed`).
    fn in_child(args: &BenchClusterArgs, spec: &ClusterSpec, seed: u64) -> Result<SeedRun> {
        let exe = std::env::current_exe().context("finding the somnus binary")?;
        let mut command = Command::new(&exe);
        command.args(["bench", "cluster", "--child-seed", &seed.to_string()]);
        command.args(["--servers", &spec.servers.to_string()]);
        command.args(["--check", if spec.check_history { "on" } else { "off" }]);
        command.args(["--clients-per-server", &args.clients_per_server.to_string()]);
        command.args(["--virtual-secs", &spec.virtual_secs.to_string()]);
        command.args(["--faults", &spec.faults.to_string()]);
        command.args(["--churn", &spec.churn.to_string()]);
        if args.shared_objects {
            command.arg("--shared-objects");
        }
        let output = command.output().with_context(|| {
            format!("running seed {seed} in a child process ({})", exe.display())
        })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr.trim().strip_prefix("error: ").unwrap_or(stderr.trim());
            if reason.is_empty() {
                bail!("seed {seed}'s child process ended with {} and no message", output.status);
            }
            bail!("{reason}");
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str(stdout.trim()).with_context(|| {
            format!("reading the figures of seed {seed} from its child process: {stdout:?}")
        })
    }

    fn wall(&self) -> Duration {
        Duration::from_nanos(self.wall_nanos)
    }

    fn cpu(&self) -> Option<Duration> {
        self.cpu_nanos.map(Duration::from_nanos)
    }
}

/// `--child-seed`: one seed of the one size and checker setting given, its figures
/// printed as one JSON line.
fn run_child(args: &BenchClusterArgs, seed: u64) -> Result<()> {
    let (&[servers], "on" | "off") = (args.servers.as_slice(), args.check.as_str()) else {
        bail!("--child-seed takes one --servers size and --check on or off");
    };
    let spec = spec(args, servers, args.check == "on");
    if let Err(error) = spec.validate(seed) {
        bail!("--servers {servers}: {error}");
    }
    let run = SeedRun::measure(&spec, seed)?;
    outln!("{}", serde_json::to_string(&run)?)
}

fn print(args: &BenchClusterArgs, measured: &[Measured]) -> Result<()> {
    if args.json {
        let sizes: Vec<_> = measured
            .iter()
            .map(|m| {
                serde_json::json!({
                    "servers": m.servers,
                    "racks": m.spec.racks,
                    "clients": m.spec.clients,
                    "history_checked": m.spec.check_history,
                    "chunk_groups": m.spec.servers * m.spec.groups_per_server,
                    "requests": m.run.ops,
                    "messages": m.run.messages,
                    "disk_ios": m.run.disk_ios,
                    "workload_virtual_secs": m.spec.virtual_secs,
                    "virtual_secs": m.run.virtual_nanos as f64 / 1e9,
                    "wall_secs": m.wall.as_secs_f64(),
                    "cpu_secs": m.cpu.map(|d| d.as_secs_f64()),
                    "requests_per_s": m.rate(m.run.ops),
                    "ratio_to_target": m.rate(m.run.ops) / TARGET_PER_S,
                })
            })
            .collect();
        let figures = serde_json::json!({
            "faults": args.faults.to_string(),
            "churn": args.churn,
            "repeat": args.repeat,
            "target_requests_per_s": TARGET_PER_S,
            "sizes": sizes,
        });
        let document = crate::provenance::Document::new("somnus-bench-cluster", figures);
        return outln!("{}", document.to_json()?);
    }
    let per = if measured.iter().all(|m| m.cpu.is_some()) { "CPU" } else { "wall" };
    outln!(
        "cluster simulation, faults {}, churn {}, median of seeds 1..{} on one core (every \
         message and disk I/O modelled; checked: C1, C3, C4 on every op)",
        args.faults,
        args.churn,
        args.repeat
    )?;
    outln!(
        "{:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>10} {:>8} {:>13} {:>13} {:>11}",
        "servers",
        "clients",
        "virt s",
        "checked",
        "requests",
        "messages",
        "disk I/Os",
        "wall s",
        format!("req/{per} s"),
        format!("msg/{per} s"),
        "of target"
    )?;
    for m in measured {
        let rate = m.rate(m.run.ops);
        outln!(
            "{:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>10} {:>8.2} {:>13.0} {:>13.0} {:>10.2}x",
            m.servers,
            m.spec.clients,
            m.spec.virtual_secs,
            if m.spec.check_history { "yes" } else { "no" },
            m.run.ops,
            m.run.messages,
            m.run.disk_ios,
            m.wall.as_secs_f64(),
            rate,
            m.rate(m.run.messages),
            rate / TARGET_PER_S
        )?;
    }
    outln!("target: {TARGET_PER_S:.0} requests per second of one core")
}
