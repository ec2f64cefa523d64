//! The harness of the tests that run a real cluster of processes on loopback:
//! `somnus mds` and nine `somnus server`s started from one cluster file, stopped when
//! the harness is dropped (also when a test fails, whose files and logs are kept).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

pub(crate) mod s3;

use bytes::Bytes;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::{ClusterFile, ClusterSection, GearSection};
use somnus_runtime::files::secret_file;
use somnus_runtime::observe::http;
use somnus_runtime::observe::status::{MdsReport, ServerReport};
use somnus_types::ServerId;

pub(crate) struct Cluster {
    /// Removed when the harness is dropped, unless a test failed: kept then, with the
    /// processes' logs, and named on standard error.
    pub(crate) dir: Option<tempfile::TempDir>,
    pub(crate) path: PathBuf,
    pub(crate) file: Arc<ClusterFile>,
    pub(crate) mds: Option<Child>,
    pub(crate) servers: Vec<Option<Child>>,
}

/// 20 loopback ports for one test cluster: each cluster of this test binary scans
/// from a block of its own (the tests run at once), below the ephemeral range where
/// the clients' own connections could take a port before its process binds it.
pub(crate) fn free_ports(count: usize) -> Vec<std::net::SocketAddr> {
    static NEXT_BLOCK: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let block = NEXT_BLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 100;
    // Another binary testing at once starts elsewhere (by its process id).
    let base = 10_000 + (std::process::id() % 8) as u16 * 2_500;
    somnus_runtime::net::ports::loopback_ports(count, base + block * 25).unwrap()
}

impl Cluster {
    /// Nine servers in three racks, r = 3, 1 MiB chunks, all started.
    pub(crate) fn start() -> Cluster {
        Cluster::start_scaled(1.0)
    }

    /// The same, with the cluster's clock `time_scale` times faster than real time.
    pub(crate) fn start_scaled(time_scale: f64) -> Cluster {
        let mut cluster = Cluster::unstarted(time_scale);
        cluster.start_processes();
        cluster
    }

    /// Starts the MDS and the nine servers.
    pub(crate) fn start_processes(&mut self) {
        let cluster = self;
        cluster.mds = Some(cluster.spawn(&["mds"]));
        for id in 0..9 {
            let child = cluster.spawn(&["server", "--id", &id.to_string()]);
            cluster.servers.push(Some(child));
        }
    }

    /// The cluster's file and secret, with no process started.
    pub(crate) fn unstarted(time_scale: f64) -> Cluster {
        Cluster::unstarted_with(ClusterSection { time_scale, ..Cluster::section() })
    }

    /// The tests' cluster section: 4 chunk groups per server, 64 MiB loggers, seed 7.
    pub(crate) fn section() -> ClusterSection {
        ClusterSection {
            groups_per_server: 4,
            logger_capacity_bytes: 64 << 20,
            seed: 7,
            ..ClusterSection::default()
        }
    }

    pub(crate) fn unstarted_with(cluster: ClusterSection) -> Cluster {
        Cluster::unstarted_geared(cluster, None)
    }

    /// The cluster's file (with `gear` as its `[gear]` section) and secret.
    pub(crate) fn unstarted_geared(cluster: ClusterSection, gear: Option<GearSection>) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let ports = free_ports(20);
        let mut file = ClusterFile::on(cluster, ports[0], ports[1..10].iter().copied())
            .with_http(ports[10], ports[11..].iter().copied());
        file.gear = gear;
        std::fs::write(&path, file.to_toml()).unwrap();
        secret_file::create(&ClusterFile::secret_path(&path)).unwrap();
        let file = Arc::new(ClusterFile::load(&path).unwrap());
        Cluster { dir: Some(dir), path, file, mds: None, servers: Vec::new() }
    }

    /// Runs a client command of the CLI against this cluster.
    pub(crate) fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_somnus"))
            .args(args)
            .arg("--cluster")
            .arg(&self.path)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Starts a role; its standard error is appended to `<role>.log` beside the file.
    pub(crate) fn spawn(&self, args: &[&str]) -> Child {
        self.spawn_in(Command::new(env!("CARGO_BIN_EXE_somnus")), args)
    }

    /// Starts a role by `command` (the binary, or a wrapper that runs it).
    pub(crate) fn spawn_in(&self, mut command: Command, args: &[&str]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path.with_file_name(log_name(args)))
            .unwrap();
        command
            .args(args)
            .arg("--cluster")
            .arg(&self.path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// A number every server's closing line reports, summed over the servers that
    /// stopped (by SIGTERM) so far: the word after it names it.
    pub(crate) fn reported(&self, what: &str) -> u64 {
        let mut total = 0;
        for id in 0..self.servers.len() {
            let log = self.path.with_file_name(format!("server---id-{id}.log"));
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains(" stopped: ")) {
                let words: Vec<&str> = line.split_whitespace().collect();
                for pair in words.windows(2) {
                    if pair[1].trim_matches(',') == what {
                        total += pair[0].parse::<u64>().unwrap_or(0);
                    }
                }
            }
        }
        total
    }

    pub(crate) async fn mds_status(&self) -> MdsReport {
        http::mds_report(&self.file).await.unwrap()
    }

    pub(crate) async fn server_status(&self, id: usize) -> ServerReport {
        http::server_reports(&self.file).await.swap_remove(id).expect("the server answers")
    }

    /// Every running server's report.
    pub(crate) async fn server_statuses(&self) -> Vec<ServerReport> {
        http::server_reports(&self.file).await.into_iter().flatten().collect()
    }

    /// An operator's command to the MDS, with the token from the secret.
    pub(crate) async fn operator(&self, path: &str) -> Result<Bytes, http::CallError> {
        http::operator(&self.file, &self.secret(), path).await
    }

    pub(crate) fn client(&self) -> ClusterClient {
        ClusterClient::start(self.file.clone(), self.secret()).unwrap()
    }

    /// The cluster's secret, from its file beside the cluster file.
    pub(crate) fn secret(&self) -> somnus_wire::ClusterSecret {
        secret_file::load(&ClusterFile::secret_path(&self.path)).unwrap()
    }

    pub(crate) fn kill_server(&mut self, id: ServerId) {
        let mut child = self.servers[id.index()].take().expect("the server runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub(crate) fn restart_server(&mut self, id: ServerId) {
        assert!(self.servers[id.index()].is_none());
        self.servers[id.index()] = Some(self.spawn(&["server", "--id", &id.0.to_string()]));
    }

    pub(crate) fn server_pid(&self, id: ServerId) -> u32 {
        self.servers[id.index()].as_ref().expect("the server runs").id()
    }

    pub(crate) fn mds_pid(&self) -> u32 {
        self.mds.as_ref().expect("the MDS runs").id()
    }

    pub(crate) fn kill_mds(&mut self) {
        let mut child = self.mds.take().expect("the MDS runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub(crate) fn restart_mds(&mut self) {
        assert!(self.mds.is_none());
        self.mds = Some(self.spawn(&["mds"]));
    }

    /// SIGTERM to every process, and a wait for each to exit.
    pub(crate) fn stop_all(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let logs = (0..self.servers.len()).map(|id| format!("server---id-{id}.log"));
        let logs: Vec<String> = logs.chain(["mds.log".to_string()]).collect();
        let children = self.servers.iter_mut().chain(std::iter::once(&mut self.mds));
        for (mut child, log) in children.zip(&logs).filter_map(|(c, l)| Some((c.take()?, l))) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let status = child.wait().unwrap();
            let said = std::fs::read_to_string(self.path.with_file_name(log)).unwrap_or_default();
            assert!(status.success(), "{log}: the process stopped with {status}:\n{said}");
        }
    }

    pub(crate) fn restart_all(&mut self) {
        self.mds = Some(self.spawn(&["mds"]));
        for id in 0..self.servers.len() {
            self.servers[id] = Some(self.spawn(&["server", "--id", &id.to_string()]));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let children = self.servers.iter_mut().chain(std::iter::once(&mut self.mds));
        for mut child in children.filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            eprintln!(
                "the failed test's cluster files and logs are kept in {}",
                dir.keep().display()
            );
        }
    }
}

/// Bytes of `len` that no other call gives: a counter through a simple generator.
pub(crate) fn pattern(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// Polls `check` every 200 ms until it holds, failing after `limit` with `what`.
#[macro_export]
macro_rules! eventually {
    ($limit:expr, $what:expr, $check:expr) => {{
        let deadline = tokio::time::Instant::now() + $limit;
        loop {
            if $check {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "not within {:?}: {}", $limit, $what);
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }};
}

/// The file a role's standard error goes to: its arguments joined by `-` (so
/// `server --id 3` logs to `server---id-3.log`), a path among them made one name.
fn log_name(args: &[&str]) -> String {
    let name: String = args
        .join("-")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-.:_".contains(c) { c } else { '_' })
        .take(150)
        .collect();
    format!("{name}.log")
}

/// Runs blocking `work` (an outside client: the CLI, a python suite) on a thread of its
/// own and waits for it: the test's task waits, and the runtime's other worker serves
/// the test's other tasks meanwhile.
#[allow(dead_code)]
pub(crate) fn on_thread<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(work).join() {
        Ok(done) => done,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}
