//! A real cluster of processes on loopback: `somnus mds` and nine `somnus server`s
//! started from one cluster file, driven through the client library over TCP, with
//! servers killed (SIGKILL) and restarted, gears shifted and servers removed by the
//! operator over HTTP, and bad connections sent to a running server. Every process a
//! test starts is stopped when its harness is dropped, also when the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test holds the machine's lock (`MACHINE`) for all of its awaits, on its own runtime.
#![allow(clippy::await_holding_lock)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use somnus_core::cluster::{ChunkId, ChunkIndex, Piece, ServerPower, Stamp};
use somnus_core::power::builtin_profile;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::ClusterSection;
use somnus_runtime::observe::http;
use somnus_runtime::observe::status::{MdsReport, ServerReport};
use somnus_sim::cluster::{
    ClusterSpec, GearAt, Gearing as SimGearing, ReplaceAt, Sample, TraceOp, TraceWorkload,
    replay_trace, replay_trace_with,
};
use somnus_trace::{ReadOptions, TraceSet};
use somnus_types::{ByteRange, IoKind, ServerId, Version, VirtualDuration, VirtualInstant};

mod common;

/// Tests that compare the runtime's timing with the simulator's run alone, after the
/// dirty pages of earlier tests are written back: on two cores, a sibling test's
/// cluster beside them, or the kernel flushing gigabytes another test wrote, delays
/// fsyncs and heartbeats enough to move their counts (one failed so in CI, its writes
/// 7 % over the simulator's by clients' retries). The others share the machine.
///
/// Each test holds its guard across its awaits by design: the lock is for the whole
/// test, and each test's runtime is its own (`clippy::await_holding_lock` allowed).
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    let guard = MACHINE.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    nix::unistd::sync();
    guard
}

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

use common::{Cluster, pattern};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_read_back_and_survive_a_restart_of_the_whole_cluster() {
    let _machine = shared();
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
    let mut dirs = vec![cluster.file.mds.data_dir.clone()];
    dirs.extend(cluster.file.servers.iter().map(|s| s.data_dir.clone()));
    for dir in dirs {
        only_its_owner_reads(&dir);
    }
}

/// Every directory and file under `dir`, and `dir` itself, is its owner's alone: a
/// cluster's data is no other local user's to read.
fn only_its_owner_reads(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", dir.display());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            only_its_owner_reads(&path);
        } else {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", path.display());
        }
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
    // And the loggers' space is freed: no write is left for reclaim.
    eventually!(Duration::from_secs(30), "reclaim empties every logger", {
        cluster.server_statuses().await.iter().all(|r| r.dvl_live_bytes == 0)
    });
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
    let _machine = shared();
    writes_through_a_kill(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_during_writes_loses_no_acknowledged_write() {
    let _machine = shared();
    writes_through_a_kill(true).await;
}

fn asleep(report: &MdsReport) -> usize {
    report.servers.iter().filter(|s| s.power == ServerPower::Asleep).count()
}

/// Gear 1 of 3 under a stream of writes and reads: two thirds of the servers sleep,
/// writes go on through the DVL, reads are served; gear 3 wakes them, reclaim brings
/// them level and empties the loggers; nothing acknowledged is lost, and the sleep
/// saved modelled energy. The clock runs 10x, so a wake (13 s) takes 1.3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gear_shift_down_under_load_sleeps_servers_and_back_up_reclaims() {
    let _machine = shared();
    let cluster = Cluster::start_scaled(10.0);
    let client = cluster.client();
    const SIZE: u64 = 4 << 20;
    client.create("stream", SIZE).await.unwrap();
    let mut model = vec![0u8; SIZE as usize];
    let mut seed = 0;
    let mut write_some = async |model: &mut Vec<u8>, n: u64| {
        for _ in 0..n {
            seed += 1;
            let offset = (seed * 7919 % (SIZE / 16384)) * 16384;
            let data = pattern(seed, 16384);
            client.write("stream", offset, data.clone()).await.unwrap();
            model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        }
    };
    write_some(&mut model, 20).await;
    assert_eq!(cluster.mds_status().await.gear, 3);

    let answer = cluster.operator("/gear/1").await.unwrap();
    assert_eq!(String::from_utf8_lossy(&answer).trim(), "gear set to 1");
    // Writes and reads keep being served while the servers drain and sleep.
    let limit = Duration::from_secs(30);
    let deadline = tokio::time::Instant::now() + limit;
    while asleep(&cluster.mds_status().await) < 6 {
        assert!(tokio::time::Instant::now() < deadline, "six servers not asleep in {limit:?}");
        write_some(&mut model, 2).await;
        let read = client.read("stream", ByteRange::new(0, SIZE)).await.unwrap();
        assert!(read[..] == model[..], "a read during the shift differs");
    }
    // Gear 1 is held for 40 s of the cluster's clock under writes and reads: past the
    // profile's break-even (its sleep and wake cost 603 J more than idling through
    // them, which standby's 56.4 W below idle repays in 10.7 s).
    let hold = tokio::time::Instant::now() + Duration::from_secs(4);
    while tokio::time::Instant::now() < hold {
        write_some(&mut model, 5).await;
        let read = client.read("stream", ByteRange::new(0, SIZE)).await.unwrap();
        assert!(read[..] == model[..], "a read in gear 1 differs");
    }
    let mds = cluster.mds_status().await;
    assert_eq!((mds.gear, asleep(&mds)), (1, 6));
    // The servers hear the MDS's answer to their standby a moment after it records it.
    eventually!(limit, "six servers report themselves asleep at standby watts", {
        let reports = cluster.server_statuses().await;
        let sleeping = reports.iter().filter(|r| r.power == Some(ServerPower::Asleep));
        sleeping.filter(|r| r.energy.state == "asleep" && r.energy.watts < 10.0).count() == 6
    });
    let reports = cluster.server_statuses().await;
    let logged: u64 = reports.iter().map(|r| r.dvl_live_bytes).sum();
    assert!(logged > 0, "the writes in gear 1 went to the DVL");

    cluster.operator("/gear/3").await.unwrap();
    eventually!(limit, "every server back on", {
        let mds = cluster.mds_status().await;
        mds.servers.iter().all(|s| s.power == ServerPower::On)
    });
    eventually!(limit, "reclaim empties every logger", {
        cluster.server_statuses().await.iter().all(|r| r.dvl_live_bytes == 0)
    });
    let read = client.read("stream", ByteRange::new(0, SIZE)).await.unwrap();
    assert!(read[..] == model[..], "a write is lost across the shifts");
    let reports = cluster.server_statuses().await;
    assert!(reports.iter().map(|r| r.counters.writes_reclaimed).sum::<u64>() > 0);
    let woke = reports.iter().filter(|r| r.energy.sleeps == 1 && r.energy.wakes == 1).count();
    assert_eq!(woke, 6, "six servers slept and woke once");
    let saved: f64 = reports.iter().map(|r| r.energy.joules_if_always_on - r.energy.joules).sum();
    assert!(saved > 0.0, "sleeping saved no modelled energy: {saved}");
}

/// Restarts are known for what they are: a server SIGKILLed after ten minutes of the
/// cluster's clock and restarted at once (its clock back at 0) is heard at its first
/// heartbeat: still `on`, leading again within two failure timeouts, no sleeper woken
/// for it (its heartbeats were dropped as stale for as long as it had run). And the
/// operator's `gear set 1` outlives a SIGKILL of the MDS (it was lost: gear 3, and
/// every server woken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_heard_at_once_and_the_gear_outlives_the_mds() {
    // Alone: ten minutes at 10x with failure timeouts of 0.6 s, which a sibling test's
    // load on two cores could stretch.
    let _machine = alone();
    use somnus_runtime::cluster_file::GearSection;
    const SCALE: f64 = 10.0;
    let section = ClusterSection { time_scale: SCALE, ..Cluster::section() };
    let mut cluster = Cluster::unstarted_geared(section, Some(GearSection::default()));
    cluster.start_processes();
    let started = tokio::time::Instant::now();
    let limit = Duration::from_secs(30);
    eventually!(limit, "the MDS answers", http::mds_report(&cluster.file).await.is_ok());
    cluster.operator("/gear/1").await.unwrap();
    eventually!(limit, "six servers asleep in gear 1", asleep(&cluster.mds_status().await) == 6);
    let mds = cluster.mds_status().await;
    let on: Vec<u32> =
        mds.servers.iter().filter(|s| s.power == ServerPower::On).map(|s| s.id).collect();
    assert_eq!(on.len(), 3, "{:?}", mds.servers);
    let victim = ServerId(on[0]);

    // Ten minutes of the cluster's clock, then a SIGKILL and a restart at once.
    let ten_minutes = Duration::from_secs_f64(600.0 / SCALE);
    tokio::time::sleep_until(started + ten_minutes).await;
    let failed = cluster.mds_status().await.counters.servers_failed;
    cluster.kill_server(victim);
    cluster.restart_server(victim);
    let timeout = cluster.file.config().failure_timeout.as_secs_f64() / SCALE;
    let two_timeouts = Duration::from_secs_f64(2.0 * timeout);
    let restarted = tokio::time::Instant::now();
    // Leading as the server itself reports (the MDS lists its old grants until their
    // leases run out).
    eventually!(two_timeouts + Duration::from_secs(1), "the restarted server leads again", {
        let reports = http::server_reports(&cluster.file).await;
        reports[victim.index()].as_ref().is_some_and(|report| report.leads > 0)
    });
    assert!(restarted.elapsed() <= two_timeouts, "leading again took {:?}", restarted.elapsed());
    // Past two more timeouts: never declared failed, and no sleeper woken for it.
    tokio::time::sleep(two_timeouts).await;
    let mds = cluster.mds_status().await;
    assert_eq!(mds.servers[victim.index()].power, ServerPower::On);
    assert_eq!(mds.counters.servers_failed, failed, "the restart read as a failure");
    assert_eq!((mds.gear, asleep(&mds)), (1, 6), "a sleeper was woken");

    // The MDS SIGKILLed and restarted: still gear 1, and nobody woken in 15 s of the
    // cluster's clock and more.
    cluster.kill_mds();
    cluster.restart_mds();
    eventually!(limit, "the MDS answers again", http::mds_report(&cluster.file).await.is_ok());
    let watch = tokio::time::Instant::now() + Duration::from_secs_f64(30.0 / SCALE);
    while tokio::time::Instant::now() < watch {
        let mds = cluster.mds_status().await;
        assert_eq!((mds.gear, asleep(&mds)), (1, 6), "the gear was lost with the MDS");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A SIGKILL in gear 1 fails over within the protocol's timing: the killed server's
/// groups have their other replicas asleep, and the MDS wakes them once it declares
/// the server failed; every write goes on within seconds (writes once hung 60 s and
/// were refused). When the server returns, the servers woken for it sleep again: the
/// gear comes back down (every server stayed on before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_gear_one_fails_over_in_seconds_and_the_gear_comes_back_down() {
    let _machine = alone();
    const SCALE: f64 = 10.0;
    let mut cluster = Cluster::start_scaled(SCALE);
    let client = cluster.client();
    const SIZE: u64 = 8 << 20;
    client.create("stream", SIZE).await.unwrap();
    let limit = Duration::from_secs(30);
    cluster.operator("/gear/1").await.unwrap();
    eventually!(limit, "six servers asleep in gear 1", asleep(&cluster.mds_status().await) == 6);
    let mds = cluster.mds_status().await;
    let victim = mds.servers.iter().find(|s| s.power == ServerPower::On).unwrap().id;
    let victim = ServerId(victim);
    cluster.kill_server(victim);
    // Writes over the whole object (every group), each timed from the kill.
    let killed = tokio::time::Instant::now();
    let mut slowest = Duration::ZERO;
    for seed in 0..64u64 {
        let offset = (seed * 7919 % (SIZE / 16384)) * 16384;
        let started = tokio::time::Instant::now();
        client.write("stream", offset, pattern(seed, 16384)).await.unwrap();
        slowest = slowest.max(started.elapsed());
    }
    let failover = killed.elapsed();
    eprintln!("after the kill: 64 writes in {failover:?}, the slowest {slowest:?}");
    // The MDS's failure timeout (6 s of the cluster's clock) and a sleeper's wake
    // (13 s of the built-in profile) are 1.9 s here: a few seconds, not a client's
    // deadline.
    assert!(slowest < Duration::from_secs(8), "a write took {slowest:?} after the kill");
    cluster.restart_server(victim);
    eventually!(Duration::from_secs(60), "the gear back down: six asleep again", {
        let mds = cluster.mds_status().await;
        mds.servers[victim.index()].power == ServerPower::On && asleep(&mds) == 6
    });
    let read = client.read("stream", ByteRange::new(0, 16384)).await.unwrap();
    assert_eq!(read, pattern(0, 16384));
}

/// `server remove`: the MDS rebuilds a copy of each of the server's groups on the
/// others, so every group has r copies again and a further kill loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_server_is_rebuilt_to_r_copies() {
    let _machine = shared();
    let mut cluster = Cluster::start_scaled(10.0);
    let client = cluster.client();
    let objects: Vec<Bytes> = (0..6).map(|n| pattern(500 + n, 700_000)).collect();
    for (n, data) in objects.iter().enumerate() {
        client.put(&format!("o{n}"), data.clone()).await.unwrap();
    }
    let groups = cluster.mds_status().await.servers.iter().map(|s| s.chunk_groups).sum::<usize>();
    assert_eq!(groups, 9 * 4 * 3, "36 groups of 3 replicas");
    let refused = cluster.operator("/servers/9/remove").await.unwrap_err().to_string();
    assert!(refused.contains("no server 9"), "{refused}");
    let stranger = http::call(cluster.file.mds.http.unwrap(), "POST", "/gear/1", Some("00"))
        .await
        .unwrap_err()
        .to_string();
    assert!(stranger.contains("token"), "{stranger}");

    cluster.operator("/servers/4/remove").await.unwrap();
    eventually!(Duration::from_secs(60), "the removed server's groups rebuilt", {
        let mds = cluster.mds_status().await;
        let removed = &mds.servers[4];
        let held: usize = mds.servers.iter().map(|s| s.chunk_groups).sum();
        removed.power == ServerPower::Removed
            && removed.chunk_groups == 0
            && held == 108
            && mds.rebuilds_under_way == 0
    });
    // Servers publish their counters every 500 ms.
    eventually!(Duration::from_secs(5), "the rebuilt bytes counted", {
        let reports = cluster.server_statuses().await;
        reports.iter().map(|r| r.counters.rebuilt_bytes).sum::<u64>() > 0
    });
    // The removed server is gone, and one more fails: every group still has two copies.
    cluster.kill_server(ServerId(4));
    cluster.kill_server(ServerId(0));
    for (n, data) in objects.iter().enumerate() {
        assert_eq!(&client.get(&format!("o{n}")).await.unwrap(), data, "object o{n}");
    }
}

/// A running server refuses garbage, a truncated hello, an oversized frame and a
/// process of another cluster (each meets TLS first: none is a TLS session of the
/// cluster's CA), counts them in its status, and goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_connections_against_a_running_server_are_refused_counted_and_it_serves_on() {
    let _machine = shared();
    use tokio::io::AsyncWriteExt;
    let cluster = Cluster::start();
    let client = cluster.client();
    client.put("before", pattern(1, 10_000)).await.unwrap();
    let address = cluster.file.servers[3].address;
    let send_raw = async |bytes: &[u8]| {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let _ = stream.write_all(bytes).await;
        let _ = stream.shutdown().await;
    };
    send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let version = somnus_wire::WIRE_VERSION;
    send_raw(&[20, 0, 0, 0, version, 9, 9, 9, 9, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
        .await;
    send_raw(&[40, 0, 0, 0, 1, 2, 3]).await;
    let stranger = somnus_runtime::net::transport::Identity::new(
        somnus_core::cluster::Peer::Client(somnus_core::cluster::ClientId(77)),
        somnus_wire::ClusterSecret::from_bytes([3; 32]),
    )
    .unwrap();
    let server = somnus_core::cluster::Peer::Server(ServerId(3));
    let error =
        somnus_runtime::net::transport::connect(address, server, &stranger).await.unwrap_err();
    assert_eq!(error.kind(), "tls", "{error}");
    let count = |report: &ServerReport, kind: &str| {
        report.wire.refused.iter().find(|(k, _)| k == kind).map_or(0, |(_, n)| *n)
    };
    eventually!(Duration::from_secs(10), "four refusals counted", {
        let report = cluster.server_status(3).await;
        count(&report, "tls") == 4
    });
    // Still serving: what was stored reads back, and new objects are stored.
    assert_eq!(client.get("before").await.unwrap(), pattern(1, 10_000));
    for n in 0..5 {
        client.put(&format!("after-{n}"), pattern(n, 50_000)).await.unwrap();
        assert_eq!(client.get(&format!("after-{n}")).await.unwrap(), pattern(n, 50_000));
    }
    let names: Vec<String> =
        client.list("after-").await.unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(names, ["after-0", "after-1", "after-2", "after-3", "after-4"]);
    // The CLI's views of the same cluster.
    let status = cluster.cli(&["status"]);
    assert!(status.status.success(), "{status:?}");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.starts_with("gear 3 of 3   6 objects"), "{text}");
    let power = |l: &&str| l.split_whitespace().nth(3) == Some("on");
    assert_eq!(text.lines().filter(power).count(), 9, "{text}");
    assert!(text.contains("space: "), "{text}");
    // The sizes as stored (not the blocks with `put`'s header).
    let ls = cluster.cli(&["ls", "after-"]);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(text.lines().all(|l| l.trim_start().starts_with("50000  after-")), "{text}");
}

/// With no cluster running, `status`, `gear set` and `ls` fail within seconds,
/// saying no cluster answers.
/// Resident memory of process `pid`, bytes.
fn resident_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// A figure in kB of `/proc/<pid>/status` (proc(5)), bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Strangers cannot make a process hold memory: 256 connections to the MDS and 256 to
/// a server, each sending a frame of the largest length the wire allows (16 MiB and
/// 64 KiB) without a handshake, leave both within 64 MB of what they held before
/// (64 such connections once took the MDS from 23 MB to 851 MB). It serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_frames_cost_the_receiver_no_memory() {
    let _machine = shared();
    use tokio::io::AsyncWriteExt;
    let cluster = Cluster::start();
    let client = cluster.client();
    client.put("before", pattern(1, 10_000)).await.unwrap();
    let targets = [
        (cluster.mds.as_ref().unwrap().id(), cluster.file.mds.address),
        (cluster.servers[3].as_ref().unwrap().id(), cluster.file.servers[3].address),
    ];
    let before: Vec<u64> = targets.iter().map(|(pid, _)| resident_bytes(*pid)).collect();
    let length = somnus_wire::FRAME_BYTES_MAX_DEFAULT as u32;
    let mut senders = tokio::task::JoinSet::new();
    for (_, address) in targets {
        for _ in 0..256 {
            senders.spawn(async move {
                let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
                    return None;
                };
                let junk = vec![0xA5u8; 64 << 10];
                let send = async {
                    stream.write_all(&length.to_le_bytes()).await?;
                    for _ in 0..256 {
                        stream.write_all(&junk).await?;
                    }
                    std::io::Result::Ok(())
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), send).await;
                Some(stream)
            });
        }
    }
    // Every connection held open while the memory is read.
    let mut held = Vec::new();
    while let Some(stream) = senders.join_next().await {
        held.extend(stream.unwrap());
    }
    assert!(held.len() >= 256, "only {} connections made", held.len());
    for ((pid, _), before) in targets.iter().zip(&before) {
        let after = resident_bytes(*pid);
        let grew = after.saturating_sub(*before);
        eprintln!("pid {pid}: {before} B resident before, {after} B after");
        assert!(grew < 64 << 20, "pid {pid} grew {grew} B for strangers' frames");
    }
    drop(held);
    let read = client.get("before").await.unwrap();
    assert_eq!(read, pattern(1, 10_000));
}

/// Peak resident memory of process `pid` since it started or since
/// [`reset_peak_resident`], bytes.
fn peak_resident_bytes(pid: u32) -> u64 {
    status_bytes(pid, "VmHWM:")
}

/// Starts `pid`'s peak resident memory again from what it holds now (proc(5),
/// `clear_refs`).
fn reset_peak_resident(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// What a peer that stops reading may cost a process: one peer queue's bound and room
/// for the rest of its work (the reads and writes under way, the socket's buffers).
const STOPPED_PEER_GROWTH_MAX: u64 = somnus_runtime::net::outbox::QUEUE_BYTES_MAX + (96 << 20);

/// Each process's growth in peak resident memory since `before` (what each held
/// then), printed; the names of those that grew more than `STOPPED_PEER_GROWTH_MAX`.
/// A process named `stopped` is not looked at.
fn grown_past_bound(
    pids: &[(String, u32)],
    before: &[u64],
    stopped: Option<&str>,
    what: &str,
) -> Vec<String> {
    let mut grown = Vec::new();
    let looked_at = pids.iter().zip(before).filter(|((who, _), _)| Some(who.as_str()) != stopped);
    for ((who, pid), before) in looked_at {
        let peak = peak_resident_bytes(*pid);
        let grew = peak.saturating_sub(*before);
        eprintln!("{what}: {who} held {before} B, peak {peak} B (grew {grew} B)");
        if grew >= STOPPED_PEER_GROWTH_MAX {
            grown.push(format!("{who} grew {grew} B"));
        }
    }
    grown
}

/// A peer that stops reading holds no more of another process's memory than one
/// queue's bound (`QUEUE_BYTES_MAX`, 128 MiB). A client asks a primary for 2 GiB of
/// reads (2,048 reads of a 1 MiB chunk) and never reads an answer; then a server is
/// stopped (SIGSTOP: its connections stay open and fill) while 256 MiB are written
/// to objects of its groups. In each part every process's peak resident memory stays
/// within the bound and 96 MiB of what it held before; the primary serves on, and the
/// stopped server, continued, catches up and every write reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_grows_no_other_process_memory() {
    let _machine = shared();
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let mut cluster = Cluster::start();
    let client = cluster.client();
    const CHUNK: u64 = 1 << 20;
    client.create("read-me", CHUNK).await.unwrap();
    client.write("read-me", 0, pattern(5, CHUNK as usize)).await.unwrap();
    let info = client.stat("read-me").await.unwrap();
    let view = info.views.iter().find(|v| v.group == info.chunk_groups[0]).unwrap().clone();
    let primary = view.primary.unwrap();
    let pids: Vec<(String, u32)> = std::iter::once(("mds".to_string(), cluster.mds_pid()))
        .chain((0..9).map(|id| (format!("server {id}"), cluster.server_pid(ServerId(id)))))
        .collect();
    let held = || {
        pids.iter()
            .map(|(_, pid)| {
                reset_peak_resident(*pid);
                resident_bytes(*pid)
            })
            .collect::<Vec<u64>>()
    };

    // A client that asks and never reads.
    let before = held();
    let secret = cluster.secret();
    let me = somnus_core::cluster::Peer::Client(somnus_core::cluster::ClientId(4_000_001));
    let identity =
        somnus_runtime::net::transport::Identity::on(cluster.file.cluster.wire, me, secret)
            .unwrap();
    let address = cluster.file.servers[primary.index()].address;
    let to = somnus_core::cluster::Peer::Server(primary);
    let mut connection =
        somnus_runtime::net::transport::connect(address, to, &identity).await.unwrap();
    let chunk = ChunkId { object: info.object, chunk: ChunkIndex(0) };
    let reads_before = cluster.server_status(primary.index()).await.counters.reads_served;
    for request in 0..2048 {
        let read = somnus_core::cluster::Message::ClientRead {
            request,
            group: view.group,
            epoch: view.epoch,
            chunk,
            range: ByteRange::new(0, CHUNK),
        };
        connection.writer.send_message(&read).await.unwrap();
    }
    // The memory is looked at before the reads' count: a process that holds every
    // answer may be too busy paging to serve them all in time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut served = 0;
    while served < 2048 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let counters = cluster.server_status(primary.index()).await.counters;
        served = counters.reads_served - reads_before;
    }
    let grown = grown_past_bound(&pids, &before, None, "a client that stopped reading");
    assert!(grown.is_empty(), "past the bound for a client that stopped reading: {grown:?}");
    assert!(served >= 2048, "the primary served {served} of the 2,048 reads in 60 s");
    let read = client.read("read-me", ByteRange::new(0, CHUNK)).await.unwrap();
    assert_eq!(read, pattern(5, CHUNK as usize), "the primary serves on");
    drop(connection);

    // A server stopped while its groups are written.
    let victim = *view.replicas.iter().find(|r| **r != primary).unwrap();
    let before = held();
    kill(Pid::from_raw(cluster.server_pid(victim) as i32), Signal::SIGSTOP).unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for n in 0..16u64 {
        let client = client.clone();
        writers.spawn(async move {
            let name = format!("written-{n}");
            client.create(&name, 4 * CHUNK).await.unwrap();
            for round in 0..4u64 {
                for piece in 0..4u64 {
                    let data = pattern(n * 100 + round * 10 + piece, CHUNK as usize);
                    client.write(&name, piece * CHUNK, data).await.unwrap();
                }
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let stopped = format!("server {}", victim.0);
    let grown = grown_past_bound(&pids, &before, Some(&stopped), "a server stopped");
    assert!(grown.is_empty(), "past the bound for a stopped server: {grown:?}");
    kill(Pid::from_raw(cluster.server_pid(victim) as i32), Signal::SIGCONT).unwrap();
    for n in 0..16u64 {
        let name = format!("written-{n}");
        let read = client.read(&name, ByteRange::new(0, 4 * CHUNK)).await.unwrap();
        for piece in 0..4u64 {
            let at = (piece * CHUNK) as usize..((piece + 1) * CHUNK) as usize;
            let want = pattern(n * 100 + 30 + piece, CHUNK as usize);
            assert!(read[at] == want[..], "{name}: piece {piece} is not the last written");
        }
    }
    cluster.stop_all();
}

#[test]
fn commands_fail_fast_when_no_cluster_answers() {
    let cluster = Cluster::unstarted(1.0);
    for args in [&["status"][..], &["gear", "set", "1"], &["server", "remove", "2"]] {
        let started = tokio::time::Instant::now();
        let output = cluster.cli(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("no cluster answers"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

/// A block corrupted in the primary's packs: the read is served from
/// another replica, the block is repaired with its copy, and the next read finds it
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_block_is_read_from_another_replica_and_repaired() {
    let _machine = shared();
    use std::os::unix::fs::FileExt;
    let cluster = Cluster::start();
    let client = cluster.client();
    let data = pattern(42, 200_000);
    client.put("victim", data.clone()).await.unwrap();
    let info = client.stat("victim").await.unwrap();
    let view = info.views.iter().find(|v| v.group == info.chunk_groups[0]).unwrap();
    let primary = view.primary.unwrap().index();
    // Block 1 holds the object's first bytes (block 0 is `put`'s header), in a slot of
    // the primary's packs (docs/format/replicas.md).
    let packs = cluster.path.with_file_name(format!("server-{primary}")).join("replicas/packs");
    let first = somnus_core::cluster::ChunkId {
        object: info.object,
        chunk: somnus_core::cluster::ChunkIndex(0),
    };
    let (file, block) = somnus_runtime::server::packs::locate(&packs, first, 1).unwrap().unwrap();
    let at = block + 100;
    let chunk = std::fs::OpenOptions::new().read(true).write(true).open(&file).unwrap();
    let mut byte = [0u8; 1];
    chunk.read_exact_at(&mut byte, at).unwrap();
    chunk.write_all_at(&[!byte[0]], at).unwrap();

    assert_eq!(client.get("victim").await.unwrap(), data, "the corrupt block was served");
    // A server's status is published every 500 ms.
    eventually!(Duration::from_secs(5), "the corrupt read and its repair counted", {
        let c = cluster.server_status(primary).await.counters;
        c.corrupt_reads == 1 && c.blocks_repaired >= 1
    });
    // Repaired on disk: the next read finds no corrupt block.
    assert_eq!(client.get("victim").await.unwrap(), data);
    chunk.read_exact_at(&mut byte, at).unwrap();
    assert_eq!(byte[0], data[100], "the block on disk holds the replica's copy");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = cluster.server_status(primary).await;
    assert_eq!(report.counters.corrupt_reads, 1, "{:?}", report.counters);
    assert!(report.counters.reads_served >= 2, "{:?}", report.counters);
}

/// One event of a history, in the real-time order the clients saw them.
#[derive(Clone, Debug)]
enum Event {
    Invoke { op: u64, at: u64, ranges: Vec<(ChunkId, ByteRange)>, stamp: Option<Stamp> },
    Written { op: u64, stamp: Stamp, parts: Vec<(ChunkId, ByteRange, Version)> },
    Read { op: u64, at: u64, pieces: Vec<(ChunkId, Piece)> },
}

/// Issue 6's checker over a recorded history; its violations.
fn check(history: &[Event]) -> Vec<String> {
    let mut checker = somnus_sim::cluster::Checker::new();
    let at = |nanos: u64| VirtualInstant(nanos);
    for event in history {
        match event {
            Event::Invoke { op, at: t, ranges, stamp } => {
                checker.invoke(*op, at(*t), ranges, *stamp)
            }
            Event::Written { op, stamp, parts } => checker.written(*op, *stamp, parts),
            Event::Read { op, at: t, pieces } => checker.read(*op, at(*t), pieces),
        }
    }
    checker.violations().to_vec()
}

/// Four clients write and read one 2 MiB object at once (16 KiB at a time, stamps
/// unique across them) while a secondary of its first chunk is SIGKILLed and
/// restarted; the recorded history passes issue 6's linearizability checker, and the
/// same history with one read's stamp forged fails it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_record_a_history_the_checker_accepts() {
    let _machine = shared();
    use std::sync::Mutex;
    let mut cluster = Cluster::start();
    const SIZE: u64 = 2 << 20;
    const OP: u64 = 16384;
    let setup = cluster.client();
    let info = setup.create("shared", SIZE).await.unwrap();
    let object = info.object;
    let view = info.views.iter().find(|v| v.group == info.chunk_groups[0]).unwrap();
    let leader = view.primary.unwrap();
    let victim = *view.replicas.iter().find(|r| **r != leader).unwrap();
    let history = Arc::new(Mutex::new(Vec::new()));
    let start = tokio::time::Instant::now();
    let clients: Vec<ClusterClient> = (0..4).map(|_| cluster.client()).collect();
    let mut tasks = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..60u64 {
                let n = c as u64 * 1000 + i;
                // Reads and writes over the same blocks (a multiplicative hash of n).
                let offset = ((n * 2_654_435_761) >> 8) % (SIZE / OP) * OP;
                let range = ByteRange::new(offset, OP);
                let chunk = ChunkId { object, chunk: ChunkIndex((offset >> 20) as u32) };
                let within = ByteRange::new(offset % (1 << 20), OP);
                let now = || start.elapsed().as_nanos() as u64;
                let write = n.is_multiple_of(2);
                // Stamps 1.. are unique across the clients (0 is a block never written).
                let stamp = write.then_some(Stamp(n + 1));
                let invoke =
                    Event::Invoke { op: n, at: now(), ranges: vec![(chunk, within)], stamp };
                history.lock().unwrap().push(invoke);
                let done = match stamp {
                    Some(stamp) => {
                        let data = pattern(n, OP as usize);
                        let parts =
                            client.write_stamped("shared", range, stamp, data).await.unwrap();
                        Event::Written { op: n, stamp, parts }
                    }
                    None => {
                        let pieces = client.read_pieces("shared", range).await.unwrap();
                        Event::Read { op: n, at: now(), pieces }
                    }
                };
                history.lock().unwrap().push(done);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.kill_server(victim);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart_server(victim);
    for task in tasks {
        task.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    assert_eq!(history.len(), 4 * 60 * 2);
    let violations = check(&history);
    assert!(violations.is_empty(), "{violations:#?}");

    // The broken variant: one read made to return a stamp no write made.
    let mut forged = history.clone();
    let read = forged.iter_mut().find_map(|event| match event {
        Event::Read { pieces, .. } => pieces.iter_mut().find(|(_, p)| p.stamp != Stamp(0)),
        _ => None,
    });
    read.expect("some read returned a written block").1.stamp = Stamp(999_999);
    let violations = check(&forged);
    assert!(
        violations.iter().any(|v| v.contains("which no write of that range made")),
        "{violations:?}"
    );
}

/// `somnus replay` of 20 s of an MSR trace against a cluster at 10x: every request is
/// served and counted by kind, none fails, and the energy over the span is reported,
/// in the simulator's JSON shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_replays_against_the_cluster_in_the_simulators_shape() {
    let _machine = shared();
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let trace = traces.join("msr-csv/hm_0.excerpt7016.csv");
    // MSR timestamps are in 100 ns units: the requests in the first 20 s, by kind.
    let text = std::fs::read_to_string(&trace).unwrap();
    let rows: Vec<(u64, &str)> = text
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (fields[0].parse().unwrap(), fields[3])
        })
        .collect();
    let first = rows[0].0;
    let within: Vec<&str> =
        rows.iter().filter(|(t, _)| t - first < 20 * 10_000_000).map(|(_, k)| *k).collect();
    let reads = within.iter().filter(|k| **k == "Read").count() as u64;
    let writes = within.len() as u64 - reads;

    let cluster = Cluster::start_scaled(10.0);
    let trace = trace.to_string_lossy().into_owned();
    let output = common::on_thread(|| {
        cluster.cli(&["replay", "--trace", &trace, "--duration", "20", "--json"])
    });
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let config = &report["configs"][0];
    assert_eq!(config["config"], "runtime");
    assert_eq!(config["read_ms"]["count"], reads, "{config}");
    assert_eq!(config["write_ms"]["count"], writes, "{config}");
    assert_eq!(
        (config["errors"].as_u64(), config["requests_unfinished"].as_u64()),
        (Some(0), Some(0))
    );
    for kind in ["read_ms", "write_ms"] {
        let s = &config[kind];
        let (p50, p99, max) =
            (s["p50"].as_f64().unwrap(), s["p99"].as_f64().unwrap(), s["max"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{kind}: {s}");
    }
    assert!(config["energy_j"].as_f64().unwrap() > 0.0, "{config}");
    let names = cluster.client().list("replay/").await.unwrap();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0].name, "replay/hm_0");
}

/// The simulated cluster of `cluster`'s file: its servers, layout, sizes, g_min and
/// server profile.
fn simulated_cluster(cluster: &Cluster) -> ClusterSpec {
    let c = &cluster.file.cluster;
    ClusterSpec {
        servers: cluster.file.servers.len() as u32,
        replicas: c.replicas,
        racks: c.racks,
        groups_per_server: c.groups_per_server,
        chunk_bytes: c.chunk_size_bytes,
        gear_min: cluster.file.config().gear_min,
        logger_capacity_bytes: c.logger_capacity_bytes,
        server_profile: builtin_profile(&c.server_profile).unwrap(),
        ..ClusterSpec::small()
    }
}

/// One letter per power state, for a compact timeline.
fn power_letter(power: ServerPower) -> char {
    match power {
        ServerPower::On => 'o',
        ServerPower::Draining => 'd',
        ServerPower::Asleep => 'z',
        ServerPower::Waking => 'w',
        ServerPower::Failed => 'F',
        ServerPower::Removed => 'R',
    }
}

/// Agreement of the two shells (docs/runtime.md, "Agreement of the two shells"): the
/// first 60 s of an MSR trace with gear 1 at 5 s and gear 3 at 31 s, replayed by the
/// simulator on the cluster file's layout, sizes, seed and profile, and by `somnus
/// replay` against the processes at 10x. Both make the same placement, the same
/// primaries before each shift and once the last has settled, and the same writes at
/// the same primaries. Their energy saved and DVL bytes agree within
/// `ENERGY_TOLERANCE` and `DVL_TOLERANCE`: what differs is when each step happens, by
/// the real disks' and sockets' latency and the scheduler's jitter at 10x. A simulator
/// on another seed, or with another schedule, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_and_the_runtime_agree_on_a_trace_and_a_gear_schedule() {
    let _machine = alone();
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let trace = traces.join("msr-csv/hm_0.excerpt7016.csv");
    let (seconds, schedule) = (60.0, "5:1,31:3");
    let gears = [
        GearAt { at: VirtualDuration::from_secs(5), gear: 1 },
        GearAt { at: VirtualDuration::from_secs(31), gear: 3 },
    ];
    const ENERGY_TOLERANCE: f64 = 0.10;
    const DVL_TOLERANCE: f64 = 0.30;
    const SCALE: f64 = 10.0;
    let cluster = Cluster::start_scaled(SCALE);

    // The simulator, on what the cluster file says.
    let c = &cluster.file.cluster;
    let spec = simulated_cluster(&cluster);
    let set = TraceSet::open(std::slice::from_ref(&trace), &ReadOptions::default()).unwrap();
    let workload = Arc::new(TraceWorkload::read(&set, Some(seconds)).unwrap());
    let sim = replay_trace(&spec, c.seed, workload.clone(), &gears);
    assert_eq!(sim.end.violations, Vec::<String>::new());
    assert_eq!((sim.errors, sim.unfinished), (0, 0));

    // The runtime: the replay as a process, the MDS's primaries watched meanwhile.
    let saved = |reports: &[ServerReport]| -> f64 {
        reports.iter().map(|r| r.energy.joules_if_always_on - r.energy.joules).sum()
    };
    eventually!(Duration::from_secs(20), "every server answers", {
        cluster.server_statuses().await.len() == 9
    });
    let saved_before = saved(&cluster.server_statuses().await);
    let mut replay = Command::new(env!("CARGO_BIN_EXE_somnus"))
        .args(["replay", "--trace", &trace.to_string_lossy(), "--json"])
        .args(["--duration", &seconds.to_string(), "--gear-schedule", schedule])
        .arg("--cluster")
        .arg(&cluster.path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let primaries = |report: &MdsReport| -> Vec<Option<u32>> {
        report.groups.iter().map(|g| g.primary).collect()
    };
    let (mut before_down, mut before_up) = (None, None);
    // What each poll saw, real milliseconds since the replay began: printed on a failure.
    let mut timeline = String::new();
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(60);
    while replay.try_wait().unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the replay did not end in 60 s");
        let report = http::mds_report(&cluster.file).await;
        let ms = started.elapsed().as_millis();
        match &report {
            Ok(report) => {
                let power: String = report.servers.iter().map(|s| power_letter(s.power)).collect();
                let c = &report.counters;
                timeline += &format!(
                    "{ms} ms: gear {} power {power} failed {} wakes {} {:?}\n",
                    report.gear,
                    c.servers_failed,
                    c.wakes,
                    primaries(report)
                )
            }
            Err(error) => timeline += &format!("{ms} ms: {error}\n"),
        }
        if let Ok(report) = report {
            match report.gear {
                3 if before_up.is_none() => before_down = Some(primaries(&report)),
                1 => before_up = Some(primaries(&report)),
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let output = replay.wait_with_output().unwrap();
    replay_served_everything(&output);
    // Settled as the simulator's end is: every server on (or asleep), primaries still
    // for a second (10 s of the cluster's clock).
    let mut last = Vec::new();
    // What the MDS said last: a failure names the state the cluster did not leave.
    let mut seen = String::new();
    let settles = |seen: &str| format!("the cluster settles after the schedule; last: {seen}");
    eventually!(Duration::from_secs(60), settles(&seen), {
        let report = cluster.mds_status().await;
        let steady =
            report.servers.iter().all(|s| matches!(s.power, ServerPower::On | ServerPower::Asleep));
        let now = primaries(&report);
        let power: String = report.servers.iter().map(|s| power_letter(s.power)).collect();
        // What each server says of itself: its core's power, the groups it leads, the
        // messages its core dropped (a sleeping core drops all), and its wire's frames
        // out and messages dropped (unreachable peer or full queue).
        let own: Vec<String> = cluster
            .server_statuses()
            .await
            .iter()
            .map(|s| {
                let (c, w) = (&s.counters, &s.wire);
                let letter = s.power.map_or('?', power_letter);
                format!(
                    "{letter}{} d{} o{} x{}",
                    s.leads,
                    c.messages_dropped,
                    w.frames_out,
                    w.dropped + w.queue_full
                )
            })
            .collect();
        seen.clear();
        seen.push_str(&format!(
            "gear {} power {power} primaries {now:?}; the servers say {own:?}",
            report.gear
        ));
        let settled = steady && now == last;
        last = now;
        tokio::time::sleep(Duration::from_millis(800)).await;
        settled
    });
    let report = cluster.mds_status().await;
    let servers = cluster.server_statuses().await;
    assert_eq!(servers.len(), 9);

    // The same placement: every group's replicas, every chunk's group.
    let replicas: Vec<Vec<u32>> = report.groups.iter().map(|g| g.replicas.clone()).collect();
    let sim_replicas: Vec<Vec<u32>> =
        sim.replicas.iter().map(|r| r.iter().map(|s| s.0).collect()).collect();
    assert_eq!(replicas, sim_replicas, "the groups' replicas");
    let client = cluster.client();
    for (name, groups) in &sim.placement {
        let info = client.stat(name).await.unwrap();
        assert_eq!(&info.chunk_groups[..], &groups[..], "the chunk groups of {name}");
    }
    // The same primary moves.
    let sim_map = |n: usize| -> Vec<Option<u32>> {
        sim.primaries[n].iter().map(|p| p.map(|s| s.0)).collect()
    };
    let moved =
        |a: &[Option<u32>], b: &[Option<u32>]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    let (before_down, before_up) = (before_down.unwrap(), before_up.unwrap());
    assert_eq!(before_down, sim_map(0), "the primaries before the down-shift; polls:\n{timeline}");
    assert_eq!(before_up, sim_map(1), "the primaries in gear 1; polls:\n{timeline}");
    let after = primaries(&report);
    assert_eq!(after, sim_map(2), "the primaries once the up-shift settled");
    // Energy saved and DVL bytes, within the tolerance.
    let saved_runtime = saved(&servers) - saved_before;
    let bytes_runtime: u64 = servers.iter().map(|s| s.counters.bytes_logged).sum();
    let acknowledged: Vec<u64> = servers.iter().map(|s| s.counters.writes_acknowledged).collect();
    eprintln!(
        "agreement: primaries moved down {}, up {}; energy saved {saved_runtime:.0} J (sim \
         {:.0}); DVL bytes {bytes_runtime} (sim {}); writes logged {} (sim {}); writes \
         acknowledged {} (sim {}), repeats answered again {}",
        moved(&before_down, &before_up),
        moved(&before_up, &after),
        sim.energy_saved_joules(),
        sim.bytes_logged,
        servers.iter().map(|s| s.counters.writes_logged).sum::<u64>(),
        sim.writes_logged,
        acknowledged.iter().sum::<u64>(),
        sim.acknowledged.iter().sum::<u64>(),
        servers.iter().map(|s| s.counters.repeats_answered).sum::<u64>(),
    );
    // The same writes at the same primaries, within WRITES_TOLERANCE of the simulator's
    // count: one that arrives as its group's primary migrates is acknowledged on either
    // side of the move (or, adopted, on both), and at 10x many more writes are in
    // flight across a move than in the simulator, whose moves take milliseconds. One
    // group's writes at the wrong primary (about 2 / 36 of them) would be caught.
    const WRITES_TOLERANCE: f64 = 0.03;
    let total = |counts: &[u64]| counts.iter().sum::<u64>();
    let allowed = (WRITES_TOLERANCE * total(&sim.acknowledged) as f64).ceil() as u64;
    assert!(
        total(&acknowledged).abs_diff(total(&sim.acknowledged)) <= allowed,
        "writes acknowledged: {acknowledged:?}, simulated {:?}; polls:\n{timeline}",
        sim.acknowledged
    );
    let apart: u64 = acknowledged.iter().zip(&sim.acknowledged).map(|(a, b)| a.abs_diff(*b)).sum();
    assert!(
        apart <= allowed,
        "writes by primary: {acknowledged:?}, simulated {:?}, {apart} apart, {allowed} allowed",
        sim.acknowledged
    );
    let within = |a: f64, b: f64, tolerance: f64| (a - b).abs() <= tolerance * b;
    assert!(sim.energy_saved_joules() > 0.0 && sim.bytes_logged > 0);
    assert!(within(saved_runtime, sim.energy_saved_joules(), ENERGY_TOLERANCE), "energy saved");
    assert!(within(bytes_runtime as f64, sim.bytes_logged as f64, DVL_TOLERANCE), "DVL bytes");

    // Broken variants: a simulator out of step with the cluster is caught. On another
    // seed its layout differs; with the up-shift 11 s early its servers sleep less.
    let other_seed = replay_trace(&spec, c.seed + 1, workload.clone(), &gears);
    let other_replicas: Vec<Vec<u32>> =
        other_seed.replicas.iter().map(|r| r.iter().map(|s| s.0).collect()).collect();
    assert_ne!(replicas, other_replicas, "another seed's layout passed");
    let early = [gears[0], GearAt { at: VirtualDuration::from_secs(20), gear: 3 }];
    let early = replay_trace(&spec, c.seed, workload, &early);
    eprintln!("broken variant: an up-shift at 20 s saves {:.0} J", early.energy_saved_joules());
    assert!(
        !within(saved_runtime, early.energy_saved_joules(), ENERGY_TOLERANCE),
        "an early up-shift's energy passed: {:.0} J against {saved_runtime:.0} J",
        early.energy_saved_joules()
    );
}

/// The two shells agree on the space a trace with deletes leaves: the first 60 s of
/// an MSR trace, its device replaced (deleted, made again empty) at 20 s, while gear
/// groups 2 and 3 sleep (their DVL records of the old object dropped, not
/// reclaimed), and at 45 s with every server on. Once every free is applied, each
/// server holds exactly the bytes the simulator's does, and its files take them plus
/// a bounded overhead (journal, pack headers, snapshots). A simulator that did not
/// replace the device (its old data kept) is caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_and_the_runtime_agree_on_bytes_stored_after_a_trace_with_deletes() {
    let _machine = alone();
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let trace = traces.join("msr-csv/hm_0.excerpt7016.csv");
    let (seconds, gear_schedule, replace_schedule) = (60.0, "5:1,31:3", "20:0,45:0");
    let gears = [
        GearAt { at: VirtualDuration::from_secs(5), gear: 1 },
        GearAt { at: VirtualDuration::from_secs(31), gear: 3 },
    ];
    let replaces = [
        ReplaceAt { at: VirtualDuration::from_secs(20), device: 0 },
        ReplaceAt { at: VirtualDuration::from_secs(45), device: 0 },
    ];
    let section = ClusterSection { time_scale: 10.0, free_grace_s: 2.0, ..Cluster::section() };
    let mut cluster = Cluster::unstarted_with(section);
    cluster.start_processes();

    let spec = simulated_cluster(&cluster);
    let set = TraceSet::open(std::slice::from_ref(&trace), &ReadOptions::default()).unwrap();
    let trace_only = TraceWorkload::read(&set, Some(seconds)).unwrap();
    let workload = Arc::new(trace_only.clone().with_replacements(&replaces).unwrap());
    let seed = cluster.file.cluster.seed;
    let sim = replay_trace(&spec, seed, workload, &gears);
    assert_eq!(sim.end.violations, Vec::<String>::new());
    assert_eq!((sim.errors, sim.unfinished), (0, 0));

    eventually!(Duration::from_secs(20), "every server answers", {
        cluster.server_statuses().await.len() == 9
    });
    let output = Command::new(env!("CARGO_BIN_EXE_somnus"))
        .args(["replay", "--trace", &trace.to_string_lossy(), "--json"])
        .args(["--duration", &seconds.to_string(), "--gear-schedule", gear_schedule])
        .args(["--replace-schedule", replace_schedule])
        .arg("--cluster")
        .arg(&cluster.path)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    replay_served_everything(&output);
    // Every server on, every free applied, the servers' reports steady.
    let mut last = Vec::new();
    eventually!(Duration::from_secs(90), "every free applied and the reports steady", {
        let mds = cluster.mds_status().await;
        let on = mds.servers.iter().all(|s| s.power == ServerPower::On);
        let stored: Vec<u64> =
            cluster.server_statuses().await.iter().map(|r| r.stored_bytes).collect();
        let steady = on && mds.space.frees_queued == 0 && stored == last && stored.len() == 9;
        last = stored;
        tokio::time::sleep(Duration::from_millis(500)).await;
        steady
    });
    assert_eq!(last, sim.stored_bytes, "bytes held per server: runtime, simulator");
    let reports = cluster.server_statuses().await;
    for report in &reports {
        let disk = report.disk_bytes.expect("measured");
        let overhead = disk.saturating_sub(report.stored_bytes);
        eprintln!(
            "server {}: {} B held ({} B simulated), {disk} B on disk",
            report.id, report.stored_bytes, sim.stored_bytes[report.id as usize]
        );
        assert!(
            disk >= report.stored_bytes && overhead <= report.stored_bytes / 10 + (8 << 20),
            "server {}: {disk} B on disk for {} B held",
            report.id,
            report.stored_bytes
        );
    }
    // Broken variant: the simulator without the replacements keeps the old data.
    let kept = replay_trace(&spec, seed, Arc::new(trace_only), &gears);
    assert_ne!(kept.stored_bytes, last, "a replay without deletes agreed");
    eprintln!(
        "agreement on space: {} B held in all (a replay without deletes: {} B)",
        last.iter().sum::<u64>(),
        kept.stored_bytes.iter().sum::<u64>()
    );
    cluster.stop_all();
}

/// Whether `error` is the client's refusal for lack of room on server `server`.
fn no_space_on(error: &somnus_runtime::client::object_file::ObjectError, server: u32) -> bool {
    use somnus_core::cluster::client::ClientError;
    use somnus_runtime::client::ClientError::Refused;
    use somnus_runtime::client::object_file::ObjectError::Client;
    matches!(error, Client(Refused(ClientError::NoSpace { server: s })) if s.0 == server)
}

/// Server 4 keeps its data on a 128 MiB tmpfs of its own (`unshare -rm` gives it a
/// mount namespace), filled by a ballast file to 8 MiB above the reserve. Writes go
/// on until one to a group of server 4 is refused with the "no space" error; the
/// process serves on (status, reads, writes to groups without it); every
/// acknowledged write reads back; once the ballast is removed, writes to its groups
/// are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_an_error_and_loses_nothing() {
    let _machine = shared();
    if !somnus_testkit::private_tmpfs_allowed() {
        eprintln!("SKIPPED: `unshare -rm` cannot mount a tmpfs here (no user namespaces)");
        return;
    }
    const FULL: u32 = 4;
    const RESERVE: u64 = 32 << 20;
    let section = ClusterSection { disk_reserve_bytes: RESERVE, ..Cluster::section() };
    let mut cluster = Cluster::unstarted_with(section);
    cluster.mds = Some(cluster.spawn(&["mds"]));
    let data_dir = cluster.file.servers[FULL as usize].data_dir.clone();
    std::fs::create_dir_all(&data_dir).unwrap();
    for id in 0..9 {
        let args = ["server", "--id", &id.to_string()];
        let child = if id == FULL {
            let mut unshare = Command::new("unshare");
            let mount = r#"mount -t tmpfs -o size=128m tmpfs "$1" && shift && exec "$@""#;
            unshare.args(["-rm", "sh", "-c", mount, "sh"]).arg(&data_dir);
            unshare.arg(env!("CARGO_BIN_EXE_somnus"));
            cluster.spawn_in(unshare, &args)
        } else {
            cluster.spawn(&args)
        };
        cluster.servers.push(Some(child));
    }
    let pid = cluster.servers[FULL as usize].as_ref().unwrap().id();
    // Server 4's directory as its own mount namespace sees it.
    let inside =
        PathBuf::from(format!("/proc/{pid}/root")).join(data_dir.strip_prefix("/").unwrap());
    let client = cluster.client();
    let mut acknowledged: Vec<(String, Bytes)> = Vec::new();
    for n in 0..4 {
        let (name, data) = (format!("before-{n}"), pattern(7000 + n, 2 << 20));
        client.put(&name, data.clone()).await.unwrap();
        acknowledged.push((name, data));
    }
    let free = somnus_runtime::files::durable::free_bytes(&inside).unwrap();
    assert!(free < 128 << 20, "server 4's directory is not on its tmpfs ({free} bytes free)");
    let ballast = inside.join("ballast");
    std::fs::write(&ballast, vec![0u8; (free - RESERVE - (8 << 20)) as usize]).unwrap();

    // 1 MiB objects, each in one chunk group, a third of them with server 4.
    let mut refused = None;
    for n in 0..80u64 {
        let (name, data) = (format!("fill-{n}"), pattern(8000 + n, 1 << 20));
        match client.put(&name, data.clone()).await {
            Ok(()) => acknowledged.push((name, data)),
            Err(error) if no_space_on(&error, FULL) => {
                refused = Some((name, error.to_string()));
                break;
            }
            Err(error) => panic!("{name}: {error}"),
        }
        // Paced as a client's stream: the disk's state reaches every primary by
        // the next heartbeat (1 s), before writes outrun the reserve.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (refused_name, message) = refused.expect("no write was refused for lack of room");
    assert!(message.contains("no space: server 4's disk"), "{message}");

    // The process serves on, and says why it refuses.
    assert!(cluster.servers[FULL as usize].as_mut().unwrap().try_wait().unwrap().is_none());
    // (Statuses are published at least every 500 ms: up to that old.)
    eventually!(Duration::from_secs(2), "server 4 and the MDS report it full", {
        let report = cluster.server_status(FULL as usize).await;
        report.full
            && report.free_bytes.unwrap() < RESERVE
            && cluster.mds_status().await.servers[FULL as usize].full
    });
    // Every primary hears of it in its next heartbeat's reply (one a second).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = cluster.server_status(FULL as usize).await;
    assert!(report.counters.disk_writes_failed == 0, "the reserve was overrun: {report:?}");
    let status = cluster.cli(&["status"]);
    let stdout = String::from_utf8_lossy(&status.stdout);
    assert!(stdout.contains("FULL") && stdout.contains("disk full: server 4"), "{stdout}");
    // The CLI's `put` of 16 MiB (16 chunks: one at least in a group of server 4).
    let file = cluster.path.with_file_name("sixteen.bin");
    std::fs::write(&file, pattern(9000, 16 << 20)).unwrap();
    let put = cluster.cli(&["put", file.to_str().unwrap(), "sixteen"]);
    let stderr = String::from_utf8_lossy(&put.stderr);
    assert!(!put.status.success() && stderr.contains("no space: server 4"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");

    // Writes to groups without server 4 go on; every acknowledged write reads back.
    let mut elsewhere = None;
    for (name, _) in &acknowledged {
        let info = client.stat(name).await.unwrap();
        if info.views.iter().all(|v| !v.replicas.contains(&ServerId(FULL))) {
            elsewhere = Some(name.clone());
            break;
        }
    }
    // Overwritten raw (no longer a `put`'s object: read back as a range).
    let elsewhere = elsewhere.expect("an object without server 4");
    acknowledged.retain(|(name, _)| *name != elsewhere);
    let again = pattern(9100, 1 << 20);
    client.write(&elsewhere, 0, again.clone()).await.unwrap();
    assert_eq!(client.read(&elsewhere, ByteRange::new(0, 1 << 20)).await.unwrap(), again);
    for (name, data) in &acknowledged {
        assert_eq!(client.get(name).await.unwrap(), *data, "{name}");
    }

    // Room again: the refused object is stored within a few heartbeats (put anew:
    // the refused put created it, and wrote some of its chunks maybe).
    std::fs::remove_file(&ballast).unwrap();
    let data = pattern(9200, 1 << 20);
    eventually!(Duration::from_secs(20), "a write to server 4's group taken again", {
        client.delete(&refused_name).await.unwrap();
        match client.put(&refused_name, data.clone()).await {
            Ok(()) => true,
            Err(error) if no_space_on(&error, FULL) => false,
            Err(error) => panic!("{refused_name}: {error}"),
        }
    });
    acknowledged.push((refused_name, data));
    for (name, data) in &acknowledged {
        assert_eq!(client.get(name).await.unwrap(), *data, "{name}");
    }
    eventually!(Duration::from_secs(2), "server 4's status not full", {
        !cluster.server_status(FULL as usize).await.full
    });
    cluster.stop_all();
    let log = std::fs::read_to_string(cluster.path.with_file_name("server---id-4.log")).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

/// The cluster gears by itself (issue 13): a time-scaled diurnal load (a day of six
/// one-minute intervals on the cluster's clock: busy, busy, quiet, quiet, quiet, busy)
/// through the real processes, the MDS's hybrid scheduler fed only the load its
/// primaries report in their heartbeats. On the second day, with a day of history,
/// servers sleep in the trough and are woken ahead of the peak (no server asleep when
/// it begins); every write reads back. Each server serves 1 request per second (by
/// config), so the busy load needs every server and the quiet one g_min's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_sleeps_in_the_trough_and_wakes_before_the_peak_by_itself() {
    let _machine = alone();
    use somnus_core::gear::{Capability, Gearing, Policy, SchedulerConfig};
    use somnus_runtime::cluster_file::GearSection;
    const SCALE: f64 = 10.0;
    const INTERVAL_S: f64 = 60.0;
    const DAY_S: f64 = 6.0 * INTERVAL_S;
    const BUSY: [bool; 6] = [true, true, false, false, false, true];
    // The load keeps clear of the intervals' edges by this much: the test's clock
    // starts a moment before the MDS's (its startup, times the scale), and a busy
    // second leaking into a quiet interval makes the next day's forecast for it busy.
    const EDGE_S: f64 = 5.0;
    let busy_at = |t: f64| {
        let phase = t % INTERVAL_S;
        BUSY[((t % DAY_S) / INTERVAL_S) as usize] && (EDGE_S..INTERVAL_S - EDGE_S).contains(&phase)
    };
    let gear = GearSection {
        policy: Policy::Hybrid,
        gearing: Gearing::Fractional,
        interval_s: INTERVAL_S as u64,
        day_s: DAY_S as u64,
        capability: Capability {
            read_iops: 1.0,
            write_iops: 1.0,
            read_mib_s: 100.0,
            write_mib_s: 100.0,
        },
        ..GearSection::default()
    };
    let section = ClusterSection { time_scale: SCALE, ..Cluster::section() };
    let mut cluster = Cluster::unstarted_geared(section, Some(gear));
    let started = tokio::time::Instant::now();
    cluster.start_processes();
    // The cluster's clock, as the MDS reads it (it started a moment after this).
    let clock = move || started.elapsed().as_secs_f64() * SCALE;
    let client = cluster.client();
    const SIZE: u64 = 1 << 20;
    client.create("diurnal", SIZE).await.unwrap();
    let mut model = vec![0u8; SIZE as usize];
    let mut seed = 0u64;
    // Day 2's trough and peak, on the cluster's clock.
    let (trough, peak) = (DAY_S + 2.0 * INTERVAL_S, DAY_S + 5.0 * INTERVAL_S);
    let (mut slept_in_trough, mut asleep_at_peak) = (0, None);
    // Servers not asleep at each interval's middle, for the simulator's comparison.
    let mut awake_at_middle: Vec<Option<usize>> = Vec::new();
    let mut busy_s = 0.0;
    while clock() < peak + 20.0 {
        let now = clock();
        let busy = busy_at(now);
        let interval = (now / INTERVAL_S) as usize;
        if (now % INTERVAL_S - INTERVAL_S / 2.0).abs() < 3.0
            && awake_at_middle.get(interval).is_none_or(|seen| seen.is_none())
        {
            let report = cluster.mds_status().await;
            awake_at_middle.resize(interval + 1, None);
            awake_at_middle[interval] = Some(report.servers.len() - asleep(&report));
        }
        if busy {
            // About 40 writes and reads per real second: 16 servers' worth (writes
            // count r times).
            seed += 1;
            let offset = (seed * 7919 % (SIZE / 4096)) * 4096;
            let data = pattern(seed, 4096);
            client.write("diurnal", offset, data.clone()).await.unwrap();
            model[offset as usize..offset as usize + 4096].copy_from_slice(&data);
            let read = client.read("diurnal", ByteRange::new(offset, 4096)).await.unwrap();
            assert!(read == data, "a read at {now:.0} s differs");
        }
        if (trough..peak).contains(&now) || (peak..peak + 1.0).contains(&now) {
            let sleeping = asleep(&cluster.mds_status().await);
            if now < peak {
                slept_in_trough = slept_in_trough.max(sleeping);
            } else if asleep_at_peak.is_none() {
                asleep_at_peak = Some((now, sleeping));
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        if busy {
            busy_s += clock() - now;
        }
    }
    assert_eq!(slept_in_trough, 6, "day 2's trough: g_min keeps 3 of 9 on, the rest sleep");
    let (at, sleeping) = asleep_at_peak.expect("the peak was sampled");
    assert_eq!(sleeping, 0, "{sleeping} servers still asleep {:.1} s into the peak", at - peak);
    let read = client.read("diurnal", ByteRange::new(0, SIZE)).await.unwrap();
    assert!(read[..] == model[..], "a write was lost across the day's shifts");
    let mds = cluster.mds_status().await;
    assert_eq!(mds.counters.servers_failed, 0, "a sleeping server was taken for failed");
    // Timing the busy loop's turns (a write and a read) gives the load's rate, whatever
    // the machine's speed.
    let period = busy_s / seed as f64;
    assert!(period > 0.01, "{seed} turns in {busy_s} s of busy intervals");
    cluster.stop_all();

    // The same load in the simulator, on the cluster file's layout, seed, profile and
    // scheduler: the same servers awake at the middle of every interval.
    let c = &cluster.file.cluster;
    let spec = simulated_cluster(&cluster);
    let mut ops = Vec::new();
    let mut turn = 0u64;
    let mut at = 0.0;
    while at < peak + 20.0 {
        if busy_at(at) {
            turn += 1;
            let offset = (turn * 7919 % (SIZE / 4096)) * 4096;
            let range = ByteRange::new(offset, 4096);
            for (kind, after) in [(IoKind::Write, 0.0), (IoKind::Read, period / 2.0)] {
                let at = VirtualDuration::try_from_secs_f64(at + after).unwrap();
                ops.push(TraceOp { at, device: 0, range, kind: kind.into() });
            }
        }
        at += period;
    }
    let workload = Arc::new(TraceWorkload { devices: vec![("diurnal".into(), SIZE)], ops });
    let scheduler = cluster.file.scheduler_config().unwrap().expect("the file has [gear]");
    let intervals = awake_at_middle.len();
    let simulated = |spec: &ClusterSpec, scheduler: SchedulerConfig| {
        let second = VirtualDuration::from_secs(1);
        let gearing = SimGearing::Scheduler(scheduler);
        let sim =
            replay_trace_with(spec, c.seed, workload.clone(), &gearing, None, second, &mut |_| {});
        assert_eq!(sim.end.violations, Vec::<String>::new());
        assert_eq!((sim.errors, sim.unfinished), (0, 0));
        awake_at_middles(&sim.samples, intervals, INTERVAL_S)
    };
    let sim_at_middle = simulated(&spec, scheduler.clone());
    eprintln!("servers awake at each interval's middle: runtime {awake_at_middle:?}");
    eprintln!("                                       simulator {sim_at_middle:?}");
    let seen = awake_at_middle.iter().flatten().count();
    assert!(seen >= 10, "only {seen} interval middles sampled: {awake_at_middle:?}");
    let differing = |sim: &[Option<usize>]| -> Vec<usize> {
        let pairs = awake_at_middle.iter().zip(sim).enumerate();
        pairs.filter(|(_, (awake, sim))| awake.is_some() && awake != sim).map(|(i, _)| i).collect()
    };
    assert_eq!(differing(&sim_at_middle), Vec::<usize>::new(), "intervals where the shells differ");
    // The comparison can fail: a simulator keeping two gear groups on at least (g_min 2)
    // is told apart in the trough.
    let other = ClusterSpec { gear_min: 2, ..spec };
    let other = simulated(&other, SchedulerConfig { gear_min: 2, ..scheduler });
    assert!(!differing(&other).is_empty(), "g_min 2 not told apart: {other:?}");
}

/// The servers a replay's samples had on at the middle of each of `intervals`
/// intervals of `interval_s` (none where no sample is within a second of it).
fn awake_at_middles(samples: &[Sample], intervals: usize, interval_s: f64) -> Vec<Option<usize>> {
    (0..intervals)
        .map(|interval| {
            let middle = (interval as f64 + 0.5) * interval_s;
            let distance = |s: &Sample| (s.at_s - middle).abs();
            let sample = samples.iter().min_by(|a, b| distance(a).total_cmp(&distance(b)))?;
            (distance(sample) <= 1.0).then_some(sample.servers_on as usize)
        })
        .collect()
}

/// A `somnus replay --json` that succeeded with no request failed or unfinished.
fn replay_served_everything(output: &std::process::Output) {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let config = &json["configs"][0];
    assert_eq!(
        (config["errors"].as_u64(), config["requests_unfinished"].as_u64()),
        (Some(0), Some(0))
    );
}
