//! `somnus up`: a complete local cluster as child processes on loopback — one MDS and
//! the storage servers, each started from the same cluster file as `somnus mds` and
//! `somnus server` would be on many machines. The first run writes the cluster file
//! and its secret into the data directory; later runs start the same cluster on the
//! same state. Ctrl-C or SIGTERM stops every child (SIGTERM, then SIGKILL after a
//! grace period).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use somnus_core::gear::Policy;
use somnus_runtime::cluster_file::{ClusterFile, ClusterSection, GearSection, Wire};
use somnus_runtime::files::secret_file;
use somnus_runtime::net::ports::{self, loopback_ports};

use crate::cluster::access::{DEFAULT_DIR, runtime};

#[derive(Args)]
pub(crate) struct UpArgs {
    /// Where the cluster keeps its state, its file and its processes' logs.
    #[arg(long, default_value = DEFAULT_DIR)]
    dir: PathBuf,
    /// Storage servers (first run only: later runs use the cluster file's).
    #[arg(long, default_value_t = 9)]
    servers: u32,
    /// Racks the servers are spread over (first run only).
    #[arg(long, default_value_t = 3)]
    racks: u32,
    /// Replicas of every chunk (first run only).
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// How much faster than real time the cluster's clock runs (first run only).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Who shifts the gear (first run only): the MDS's `hybrid` scheduler (the
    /// default: the cluster gears by itself, from the load its primaries report), the
    /// `predictor` alone, or `none` (only `somnus gear set N`).
    #[arg(long, value_enum, default_value = "hybrid")]
    gear_scheduler: SchedulerChoice,
    /// The scheduler's gearing interval in seconds of the cluster's clock (first run
    /// only); it must divide a day. With `--time-scale 60`, the default hour is one
    /// minute and a day 24 minutes.
    #[arg(long, default_value_t = 3600)]
    gear_interval_s: u64,
    /// How the cluster's processes speak (first run only): `tls` (TLS 1.3, each
    /// process with a certificate of the cluster's CA, derived from its secret) or
    /// `plain` (frames in the clear, authenticated only when a connection starts: for
    /// a network nobody else can reach, and to measure what TLS costs).
    #[arg(long, default_value = "tls")]
    wire: WireChoice,
    /// The address of the S3 gateway `up` starts beside the cluster (`somnus s3`),
    /// with the keys of `s3-credentials` in the data directory, printed at start.
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    s3: std::net::SocketAddr,
    /// Start no S3 gateway.
    #[arg(long)]
    no_s3: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SchedulerChoice {
    Hybrid,
    Predictor,
    None,
}

/// Seconds each child has to stop after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(10);

pub(crate) fn run(args: UpArgs) -> Result<()> {
    let path = args.dir.join("cluster.toml");
    let file = if path.exists() { ClusterFile::load(&path)? } else { first_run(&args, &path)? };
    let exe = std::env::current_exe().context("cannot find the somnus binary to start")?;
    let s3 = (!args.no_s3).then_some(args.s3);
    runtime()?.block_on(supervise(&exe, &path, &file, s3))
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum WireChoice {
    Tls,
    Plain,
}

/// Writes a new cluster's file and secret into the data directory.
fn first_run(args: &UpArgs, path: &Path) -> Result<ClusterFile> {
    let cluster = ClusterSection {
        replicas: args.replicas,
        racks: args.racks,
        time_scale: args.time_scale,
        wire: match args.wire {
            WireChoice::Tls => Wire::Tls,
            WireChoice::Plain => Wire::Plain,
        },
        ..ClusterSection::default()
    };
    let policy = match args.gear_scheduler {
        SchedulerChoice::Hybrid => Some(Policy::Hybrid),
        SchedulerChoice::Predictor => Some(Policy::Predictor),
        SchedulerChoice::None => None,
    };
    let gear = policy.map(|policy| GearSection {
        policy,
        interval_s: args.gear_interval_s,
        ..GearSection::default()
    });
    create_cluster(path, args.servers, cluster, gear)
}

/// Writes the file (at `path`) and secret of a new cluster of `servers` on loopback
/// ports from [`ports::DEFAULT_BASE`], checked whole before anything is written.
pub(crate) fn create_cluster(
    path: &Path,
    servers: u32,
    cluster: ClusterSection,
    gear: Option<GearSection>,
) -> Result<ClusterFile> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Each process: one port for its peers (and its wake packet), one for HTTP.
    let roles = servers as usize + 1;
    let ports = loopback_ports(2 * roles, ports::DEFAULT_BASE)?;
    let (peers, http) = ports.split_at(roles);
    let mut file = ClusterFile::on(cluster, peers[0], peers[1..].iter().copied())
        .with_http(http[0], http[1..].iter().copied());
    file.gear = gear;
    file.scheduler_config().map_err(anyhow::Error::msg)?;
    // Checked before anything is written: a bad shape is refused whole.
    file.layout().context("these servers, racks and replicas make no layout")?;
    secret_file::create(&ClusterFile::secret_path(path))?;
    somnus_runtime::files::durable::replace(path, file.to_toml().as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    ClusterFile::load(path).map_err(Into::into)
}

pub(crate) use crate::cluster::children::Running;
use crate::cluster::children::Spec;

async fn supervise(
    exe: &Path,
    path: &Path,
    file: &ClusterFile,
    s3: Option<std::net::SocketAddr>,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut children = start_all(exe, path, file, &dir.join("logs"))?;
    let gateway = match s3 {
        Some(address) => start_s3(exe, path, address, &dir.join("logs"))?,
        None => None,
    };
    let gateway_started = gateway.is_some();
    let gateway_http = gateway.as_ref().and_then(|(_, _, http)| *http);
    children.extend(gateway.map(|(running, _, _)| running));
    noteln!(
        "somnus: a cluster of {} servers in {} racks (r = {}) is up; MDS at {}",
        file.servers.len(),
        file.cluster.racks,
        file.cluster.replicas,
        file.mds.address
    );
    noteln!("  state and logs in {}", dir.display());
    noteln!("  try: somnus put FILE KEY; somnus get KEY FILE  (they find this cluster themselves");
    noteln!("       from ./{DEFAULT_DIR}; elsewhere pass --cluster {})", path.display());
    if let Some(mds) = file.mds.http {
        noteln!("  status: somnus status (or http://{mds}/status); metrics http://{mds}/metrics");
    }
    if gateway_started && let Some(address) = s3 {
        let keys = crate::cluster::s3::credentials(None, None, path)?;
        noteln!("  S3 at http://{address} (region us-east-1), path-style:");
        noteln!("       access key {}  secret key {}", keys.access_key, keys.secret_key);
        noteln!(
            "       try: AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url http://{address} s3 ls",
            keys.access_key,
            keys.secret_key
        );
        if let Some(http) = gateway_http {
            noteln!("       its metrics http://{http}/metrics, status http://{http}/status");
        }
        noteln!("       its access log {}", dir.join("logs/s3-access.log").display());
    }
    noteln!("  Ctrl-C stops it; its state is kept for the next `somnus up`.");
    wait_for_stop(&mut children).await?;
    stop_all(&mut children).await;
    Ok(())
}

/// Starts the MDS and every server of the cluster file at `path` as children of this
/// process (killed if it ends first), each logging to `logs/<role>.log`.
pub(crate) fn start_all(
    exe: &Path,
    path: &Path,
    file: &ClusterFile,
    logs: &Path,
) -> Result<Vec<Running>> {
    std::fs::create_dir_all(logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let cluster = path.as_os_str().to_owned();
    let mut roles =
        vec![("mds".to_owned(), vec!["mds".into(), "--cluster".into(), cluster.clone()])];
    for server in &file.servers {
        let id = server.id.to_string();
        let args =
            vec!["server".into(), "--id".into(), id.into(), "--cluster".into(), cluster.clone()];
        roles.push((format!("server-{}", server.id), args));
    }
    let mut children = Vec::new();
    for (name, args) in roles {
        let log = logs.join(format!("{name}.log"));
        children.push(Running::start(Spec { name, program: exe.to_owned(), args, log })?);
    }
    Ok(children)
}

/// Starts the S3 gateway (`somnus s3`) on `address` as a child, logging to
/// `logs/s3.log` and each request to `logs/s3-access.log`, its status and metrics on
/// the next free port; `None`, said, if the address is taken: the cluster runs
/// without it.
pub(crate) fn start_s3(
    exe: &Path,
    path: &Path,
    address: std::net::SocketAddr,
    logs: &Path,
) -> Result<Option<(Running, std::net::SocketAddr, Option<std::net::SocketAddr>)>> {
    // The keys are made here, before the gateway starts, so that they can be printed.
    crate::cluster::s3::credentials(None, None, path)?;
    if let Err(error) = std::net::TcpListener::bind(address) {
        noteln!(
            "somnus: no S3 gateway: cannot listen on {address} ({error}); pass --s3 ADDR, or --no-s3"
        );
        return Ok(None);
    }
    let http = loopback_ports(1, address.port().saturating_add(1)).ok().map(|ports| ports[0]);
    let mut args: Vec<std::ffi::OsString> = vec!["s3".into(), "--listen".into()];
    args.push(address.to_string().into());
    args.push("--access-log".into());
    args.push(logs.join("s3-access.log").into());
    if let Some(http) = http {
        args.push("--http".into());
        args.push(http.to_string().into());
    }
    args.push("--cluster".into());
    args.push(path.as_os_str().to_owned());
    // The gateway prints its secret key: its log, as every child's, is its owner's only.
    let spec = Spec { name: "s3".into(), program: exe.to_owned(), args, log: logs.join("s3.log") };
    let running = Running::start(spec).context("cannot start the S3 gateway")?;
    Ok(Some((running, address, http)))
}

/// Returns on SIGINT or SIGTERM; a child that exits meanwhile is said and started
/// again after a backoff (1 s, doubling at each exit in a row, at most 60 s).
async fn wait_for_stop(children: &mut [Running]) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        for running in children.iter_mut() {
            running.supervise()?;
        }
    }
}

/// SIGTERM to every child still running, then SIGKILL to those not gone in time.
pub(crate) async fn stop_all(children: &mut [Running]) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    for running in children.iter() {
        if let Some(pid) = running.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for running in children.iter_mut() {
        if tokio::time::timeout(GRACE, running.child.wait()).await.is_err() {
            noteln!("somnus: {} did not stop within {GRACE:?}; killed", running.name);
            let _ = running.child.kill().await;
        }
    }
    noteln!("somnus: the cluster is stopped");
}
