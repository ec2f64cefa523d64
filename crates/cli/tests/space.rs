//! Space follows what is stored (issue 46), through boto3 against `somnus s3` in front
//! of a real cluster of processes: overwrites and deletes give their bytes back on
//! every replica (a sleeping one once it wakes, without being woken for it), a full
//! cluster refuses writes and takes them again once deletes made room, and the data
//! no name holds (a lost race, a gateway killed mid-PUT, an upload nobody completes)
//! goes too. The graces are seconds here (`free_grace_s`, `pending_grace_s`).
//!
//! boto3 comes from PyPI (as `.ci/run` installs it); without it the tests say so and
//! pass, except under CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Processes are waited for in real time.
#![allow(clippy::disallowed_methods)]
// A test holds ONE_AT_A_TIME for all of its awaits, on its own runtime.
#![allow(clippy::await_holding_lock)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

mod common;

use common::Cluster;
use common::s3::{Gateway, clients_installed, start_gateway};
use somnus_core::cluster::ServerPower;
use somnus_runtime::cluster_file::ClusterSection;
use somnus_runtime::observe::status::MdsReport;

/// Each test runs a cluster and a gateway writing hundreds of MiB: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const MIB: u64 = 1 << 20;
const REPLICAS: u64 = 3;
/// The load's bytes as stored (s3_space.py's fill).
const FILLED: u64 = 2000 * 4096 + 20 * (8 << 20);

/// The tests' cluster with graces of seconds. A PUT's allocation must outlive its
/// data's write: at 4 s, an 8 MiB PUT on a CI machine busy with other tests outlasted
/// it once (its bind refused: the data object was no longer the binder's).
fn section() -> ClusterSection {
    ClusterSection { free_grace_s: 2.0, pending_grace_s: 15.0, ..Cluster::section() }
}

/// Bytes the cluster's directory takes on its disk (as `du`).
fn disk_bytes(dir: &Path) -> u64 {
    somnus_runtime::files::durable::disk_bytes(dir).unwrap()
}

fn cluster_dir(cluster: &Cluster) -> &Path {
    cluster.path.parent().unwrap()
}

/// Waits until every server's files are checkpointed (a server idle for 2 s
/// checkpoints its journal): the directory's size then, once four measures a second
/// apart agree within 64 KiB.
async fn settled_disk(cluster: &Cluster) -> u64 {
    let mut recent = Vec::new();
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        recent.push(disk_bytes(cluster_dir(cluster)));
        let last = &recent[recent.len().saturating_sub(4)..];
        let (low, high) = (last.iter().min().unwrap(), last.iter().max().unwrap());
        if last.len() == 4 && high - low <= 64 << 10 {
            return *high;
        }
    }
    panic!("the cluster's directory never settled: {recent:?}");
}

/// The bytes on disk of each entry of the cluster's directory, and of each file of
/// its MDS's and its servers' directories, largest first: where a residue is.
fn where_it_is(cluster: &Cluster) -> String {
    let mut sizes = Vec::new();
    let dir = cluster_dir(cluster);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let inner = std::fs::read_dir(&path).into_iter().flatten().flatten();
        if name == "mds" || name.starts_with("server-") {
            for file in inner {
                let file_name = file.file_name().to_string_lossy().into_owned();
                sizes.push((format!("{name}/{file_name}"), bytes_of(&file.path())));
            }
        } else {
            sizes.push((name, bytes_of(&path)));
        }
    }
    sizes.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    let largest = sizes.iter().take(12).map(|(name, bytes)| format!("{name} {bytes} B"));
    largest.collect::<Vec<_>>().join(", ")
}

/// The bytes on disk of a file or a directory's tree; 0 for one gone meanwhile.
fn bytes_of(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => disk_bytes(path),
        Ok(metadata) => metadata.blocks() * 512,
        Err(_) => 0,
    }
}

/// Every byte any server held for deleted data is freed: each server holds r copies'
/// share of what the names hold, the free log is empty.
fn freed_everything(mds: &MdsReport) -> bool {
    mds.space.frees_queued == 0 && mds.space.stored_bytes == REPLICAS * mds.space.logical_bytes
}

/// Whether `du` of the cluster's directory is back within 5 % (or 64 MiB) of `fresh`.
fn back_to_fresh(now: u64, fresh: u64) -> bool {
    now.abs_diff(fresh) <= (fresh / 20).max(64 * MIB)
}

fn run(gateway: &Gateway, phase: &str, bucket: &str, env: &[(&str, &str)]) -> String {
    let out = common::on_thread(|| gateway.python("s3_space.py", &[phase, bucket], env));
    eprint!("{out}");
    out
}

/// The issue's first test: 2,000 objects of 4 KiB and 20 of 8 MiB stored, each small
/// one overwritten twice, everything deleted: the directory is back to a fresh
/// cluster's. Then once more with gear groups 2 and 3 asleep during the deletes:
/// nothing wakes them, the awake servers free their share, and the sleepers free
/// theirs once geared up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_overwrites_give_the_space_back_also_on_sleepers() {
    if !clients_installed() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cluster = Cluster::unstarted_with(section());
    cluster.start_processes();
    let fresh = settled_disk(&cluster).await;
    let gateway = start_gateway(&cluster, &[]);

    run(&gateway, "fill", "space-1", &[]);
    let filled = settled_disk(&cluster).await - fresh;
    let ratio = filled as f64 / (REPLICAS * FILLED) as f64;
    eprintln!("fresh {fresh} B; filled: {filled} B on disk for {FILLED} B stored, {ratio:.3} r");
    assert!(ratio < 1.1, "{ratio:.3} r on disk");

    run(&gateway, "overwrite", "space-1", &[]);
    run(&gateway, "verify", "space-1", &[("S3_ROUND", "2")]);
    eventually!(Duration::from_secs(60), "the overwritten data freed", {
        freed_everything(&cluster.mds_status().await)
    });
    let overwritten = settled_disk(&cluster).await - fresh;
    eprintln!("after two overwrites and the grace: {overwritten} B on disk");
    assert!(overwritten <= filled + filled / 20, "{overwritten} B after overwrites");

    run(&gateway, "delete", "space-1", &[]);
    eventually!(Duration::from_secs(60), "the deleted data freed", {
        let mds = cluster.mds_status().await;
        freed_everything(&mds) && mds.space.stored_bytes == 0
    });
    let deleted = settled_disk(&cluster).await;
    eprintln!("after the deletes and the grace: {deleted} B on disk (fresh {fresh} B)");
    assert!(back_to_fresh(deleted, fresh), "{deleted} B on disk, fresh {fresh} B");

    // Again, gear groups 2 and 3 asleep while everything is deleted.
    run(&gateway, "fill", "space-2", &[]);
    cluster.operator("/gear/1").await.unwrap();
    eventually!(Duration::from_secs(120), "six servers asleep", {
        asleep(&cluster.mds_status().await).len() == 6
    });
    let sleepers = asleep(&cluster.mds_status().await);
    let wakes = cluster.mds_status().await.counters.wakes;
    run(&gateway, "delete", "space-2", &[]);
    // The awake servers free their share; the sleepers are not woken for theirs.
    eventually!(Duration::from_secs(60), "the awake servers' share freed", {
        let mds = cluster.mds_status().await;
        let awake_hold: u64 = mds
            .servers
            .iter()
            .filter(|s| !sleepers.contains(&s.id))
            .map(|s| s.space.stored_bytes)
            .sum();
        assert_eq!(asleep(&mds), sleepers, "a sleeper changed state");
        assert_eq!(mds.counters.wakes, wakes, "a sleeper was woken");
        awake_hold == 0
    });
    let mds = cluster.mds_status().await;
    let waiting: u64 = mds.servers.iter().map(|s| s.space.to_free_bytes).sum();
    assert!(waiting >= 2 * FILLED, "the sleepers' share waits to be freed: {waiting} B");
    let status = cluster.cli(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("to free"), "{text}");
    eprintln!("with gear groups 2 and 3 asleep, {waiting} B wait to be freed on them");

    cluster.operator("/gear/3").await.unwrap();
    eventually!(Duration::from_secs(120), "the sleepers woken and their share freed", {
        let mds = cluster.mds_status().await;
        asleep(&mds).is_empty() && freed_everything(&mds) && mds.space.stored_bytes == 0
    });
    let woken = settled_disk(&cluster).await;
    eprintln!("after waking them: {woken} B on disk (fresh {fresh} B): {}", where_it_is(&cluster));
    assert!(back_to_fresh(woken, fresh), "{woken} B on disk, fresh {fresh} B");
    drop(gateway);
    cluster.stop_all();
}

fn asleep(mds: &MdsReport) -> Vec<u32> {
    mds.servers.iter().filter(|s| s.power == ServerPower::Asleep).map(|s| s.id).collect()
}

/// Data no name holds, of each kind: the loser of two PUTs of one key at once, a PUT
/// whose gateway was killed between its data and its record, the parts of an upload
/// nobody completes. Each is freed: every server ends up holding r copies of what
/// the names hold, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_every_kind_are_found_and_freed() {
    if !clients_installed() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cluster = Cluster::unstarted_with(section());
    cluster.start_processes();
    // Uploads unfinished for 4 s are abandoned (swept every second).
    let gateway = start_gateway(&cluster, &["--abandoned-after", "0.0011"]);
    run(&gateway, "orphans", "orphans", &[]);

    // A PUT of 64 MiB that sends half and stalls, its gateway killed once some of it
    // is written: the object is never whole, however fast the machine.
    let mut doomed = start_gateway(&cluster, &[]);
    let before = cluster.mds_status().await.space.stored_bytes;
    let mut put = doomed
        .python_command("s3_space.py", &["put-large", "orphans"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually!(Duration::from_secs(60), "a part of the doomed PUT written", {
        cluster.mds_status().await.space.stored_bytes >= before + REPLICAS * 8 * MIB
    });
    doomed.kill();
    let _ = put.kill();
    let _ = put.wait();

    // The upload is swept (its parts are named until then), then every orphan freed.
    eventually!(Duration::from_secs(60), "the abandoned upload swept", {
        let uploads =
            common::on_thread(|| gateway.python("s3_space.py", &["uploads", "orphans"], &[]));
        uploads.contains("uploads: 0")
    });
    eventually!(Duration::from_secs(60), "every orphan freed", {
        freed_everything(&cluster.mds_status().await)
    });
    let mds = cluster.mds_status().await;
    let space = mds.space;
    eprintln!("orphans freed: {} B held for {} B named", space.stored_bytes, space.logical_bytes);
    // What the names hold: the 20 race winners of 1 MiB and nothing else.
    assert_eq!(space.logical_bytes, 20 * MIB, "{space:?}");
    drop(gateway);
    cluster.stop_all();
}

/// Every server keeps its data on a 96 MiB tmpfs of its own (`unshare -rm`); 1 MiB
/// objects are stored through S3 until the gateway answers 503 "no space". What was
/// stored before reads back whole; every other operation's answer on the full cluster
/// says what it did; once those objects are deleted (and the grace passed) PUTs are
/// taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_cluster_refuses_puts_and_deleting_makes_room() {
    if !clients_installed() {
        return;
    }
    if !somnus_testkit::private_tmpfs_allowed() {
        eprintln!("SKIPPED: `unshare -rm` cannot mount a tmpfs here (no user namespaces)");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let section = ClusterSection { disk_reserve_bytes: 32 * MIB, ..section() };
    let mut cluster = Cluster::unstarted_with(section);
    cluster.mds = Some(cluster.spawn(&["mds"]));
    for id in 0..9 {
        let data_dir = cluster.file.servers[id].data_dir.clone();
        std::fs::create_dir_all(&data_dir).unwrap();
        let mut unshare = Command::new("unshare");
        let mount = r#"mount -t tmpfs -o size=96m tmpfs "$1" && shift && exec "$@""#;
        unshare.args(["-rm", "sh", "-c", mount, "sh"]).arg(&data_dir);
        unshare.arg(env!("CARGO_BIN_EXE_somnus"));
        let child = cluster.spawn_in(unshare, &["server", "--id", &id.to_string()]);
        cluster.servers.push(Some(child));
    }
    let gateway = start_gateway(&cluster, &[]);
    let small = [("S3_SMALL_COUNT", "200"), ("S3_LARGE_COUNT", "2")];
    run(&gateway, "fill", "kept", &small);

    let full = run(&gateway, "fill-until-full", "filler", &[]);
    let stored = full.lines().find_map(|l| l.strip_prefix("stored ")).unwrap().trim().to_owned();
    assert!(stored.parse::<u64>().unwrap() > 10, "{full}");
    // At once: a full server that checkpoints its journal (idle for 2 s) or frees
    // the refused PUT's allocation has room again, and says so.
    let text = String::from_utf8_lossy(&cluster.cli(&["status"]).stdout).into_owned();
    assert!(text.contains("FULL"), "no server says it is full: {text}");
    run(&gateway, "verify", "kept", &small);
    run(&gateway, "verify-full", "filler", &[("S3_STORED", &stored)]);
    // Every operation on the full cluster: its answer says what it did (a DELETE and
    // a CreateBucket were once refused 503 and took effect all the same).
    let answers = run(&gateway, "refusals", "filler", &[("S3_STORED", &stored)]);
    eprintln!("{answers}");
    assert!(answers.contains("refusals: DELETE: ok"), "deleting must work on a full disk");

    run(&gateway, "delete", "filler", &[]);
    eventually!(Duration::from_secs(60), "the deleted objects freed and no server full", {
        let mds = cluster.mds_status().await;
        freed_everything(&mds) && mds.servers.iter().all(|s| !s.full)
    });
    run(&gateway, "fill", "again", &small);
    run(&gateway, "verify", "again", &small);
    run(&gateway, "verify", "kept", &small);
    for report in cluster.server_statuses().await {
        assert_eq!(report.counters.disk_writes_failed, 0, "server {} met a full disk", report.id);
    }
    drop(gateway);
    cluster.stop_all();
}
