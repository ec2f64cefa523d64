//! A real cluster of processes on loopback: `somnus mds` and nine `somnus server`s
//! started from one cluster file, driven through the client library over TCP, with
//! servers killed (SIGKILL) and restarted. Every process a test starts is stopped
//! when its harness is dropped, also when the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::{ClusterFile, ClusterSection};
use somnus_runtime::secret_file;
use somnus_types::{ByteRange, ServerId};

struct Cluster {
    _dir: tempfile::TempDir,
    path: PathBuf,
    file: Arc<ClusterFile>,
    mds: Option<Child>,
    servers: Vec<Option<Child>>,
}

/// `count` loopback ports free now, all different (held open together while chosen).
fn free_ports(count: usize) -> Vec<std::net::SocketAddr> {
    let listeners: Vec<std::net::TcpListener> =
        (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap()).collect()
}

impl Cluster {
    /// Nine servers in three racks, r = 3, 1 MiB chunks, all started.
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        let cluster = ClusterSection {
            replicas: 3,
            racks: 3,
            groups_per_server: 4,
            chunk_size_bytes: 1 << 20,
            logger_capacity_bytes: 64 << 20,
            seed: 7,
            time_scale: 1.0,
            server_profile: "ecs2-storage-node".into(),
        };
        let ports = free_ports(20);
        let file = ClusterFile::on(cluster, ports[0], ports[1..10].iter().copied())
            .with_http(ports[10], ports[11..].iter().copied());
        std::fs::write(&path, file.to_toml()).unwrap();
        secret_file::create(&ClusterFile::secret_path(&path)).unwrap();
        let file = Arc::new(ClusterFile::load(&path).unwrap());
        let mut cluster = Cluster { _dir: dir, path, file, mds: None, servers: Vec::new() };
        cluster.mds = Some(cluster.spawn(&["mds"]));
        for id in 0..9 {
            let child = cluster.spawn(&["server", "--id", &id.to_string()]);
            cluster.servers.push(Some(child));
        }
        cluster
    }

    /// Starts a role; its standard error is appended to `<role>.log` beside the file.
    fn spawn(&self, args: &[&str]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path.with_file_name(format!("{}.log", args.join("-"))))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_somnus"))
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
    fn reported(&self, what: &str) -> u64 {
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

    fn client(&self) -> ClusterClient {
        let secret = secret_file::load(&ClusterFile::secret_path(&self.path)).unwrap();
        ClusterClient::start(self.file.clone(), secret).unwrap()
    }

    fn kill_server(&mut self, id: ServerId) {
        let mut child = self.servers[id.index()].take().expect("the server runs");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    fn restart_server(&mut self, id: ServerId) {
        assert!(self.servers[id.index()].is_none());
        self.servers[id.index()] = Some(self.spawn(&["server", "--id", &id.0.to_string()]));
    }

    /// SIGTERM to every process, and a wait for each to exit.
    fn stop_all(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let children = self.servers.iter_mut().chain(std::iter::once(&mut self.mds));
        for mut child in children.filter_map(Option::take) {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let status = child.wait().unwrap();
            assert!(status.success(), "a process stopped with {status}");
        }
    }

    fn restart_all(&mut self) {
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
    }
}

/// Bytes of `len` that no other call gives: a counter through a simple generator.
fn pattern(seed: u64, len: usize) -> Bytes {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_read_back_and_survive_a_restart_of_the_whole_cluster() {
    let mut cluster = Cluster::start();
    let client = cluster.client();
    let sizes = [0usize, 1, 4096, 100_000, 3 << 20];
    for (n, size) in sizes.iter().enumerate() {
        client.put(&format!("object-{n}"), pattern(n as u64, *size)).await.unwrap();
    }
    for (n, size) in sizes.iter().enumerate() {
        assert_eq!(client.get(&format!("object-{n}")).await.unwrap(), pattern(n as u64, *size));
    }
    let error = client.get("no-such-object").await.unwrap_err().to_string();
    assert!(error.contains("no-such-object"), "{error}");
    cluster.stop_all();
    cluster.restart_all();
    let client = cluster.client();
    for (n, size) in sizes.iter().enumerate() {
        assert_eq!(client.get(&format!("object-{n}")).await.unwrap(), pattern(n as u64, *size));
    }
}

/// A stream of writes to one object while `victim` (chosen from the first chunk's
/// view) is killed and later restarted; every acknowledged write must read back.
async fn writes_through_a_kill(primary: bool) {
    let mut cluster = Cluster::start();
    let client = cluster.client();
    const SIZE: u64 = 4 << 20;
    client.create("stream", SIZE).await.unwrap();
    let info = client.stat("stream").await.unwrap();
    let view = info.views.iter().find(|v| v.group == info.chunk_groups[0]).unwrap();
    let leader = view.primary.expect("the first chunk's group has a primary");
    let victim =
        if primary { leader } else { *view.replicas.iter().find(|r| **r != leader).unwrap() };
    let mut model = vec![0u8; SIZE as usize];
    let mut seed = 1000;
    let write = |seed: u64| {
        // 16 KiB writes over the whole object, each to a block-aligned offset.
        let offset = (seed * 7919 % (SIZE / 16384)) * 16384;
        (offset, pattern(seed, 16384))
    };
    for round in 0..120 {
        if round == 30 {
            cluster.kill_server(victim);
        }
        if round == 90 {
            cluster.restart_server(victim);
        }
        seed += 1;
        let (offset, data) = write(seed);
        client.write("stream", offset, data.clone()).await.unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        if (30..90).contains(&round) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let read = client.read("stream", ByteRange::new(0, SIZE)).await.unwrap();
    assert!(read[..] == model[..], "an acknowledged write is lost");
    // Once reclaim has brought the victim level, the rest of the cluster can lose
    // another replica of the group and still read everything.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let other = *view.replicas.iter().find(|r| **r != victim && **r != leader).unwrap();
    cluster.kill_server(other);
    let read = client.read("stream", ByteRange::new(0, SIZE)).await.unwrap();
    assert!(read[..] == model[..], "a write is lost after the second kill");
    cluster.stop_all();
    // The writes the killed replica missed went to the DVL and were reclaimed.
    let (logged, reclaimed) = (cluster.reported("logged"), cluster.reported("reclaimed"));
    assert!(logged > 0 && reclaimed > 0, "logged {logged}, reclaimed {reclaimed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_killed_during_writes_loses_no_acknowledged_write() {
    writes_through_a_kill(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_during_writes_loses_no_acknowledged_write() {
    writes_through_a_kill(true).await;
}
