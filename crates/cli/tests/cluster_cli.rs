//! The command line against a real cluster of processes on loopback: `somnus put` and
//! `somnus get` of files larger than their memory, and `somnus up` started, used,
//! stopped by SIGTERM and by Ctrl-C, and started again on the state it kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Processes are waited for in real time, and watched from a thread of the test's own.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{Cluster, pattern};

const SOMNUS: &str = env!("CARGO_BIN_EXE_somnus");

/// The resident-set peak of `child` (its `VmHWM`, a high-water mark), read until it
/// exits; then its output, as `wait_with_output` gives it.
fn peak_and_output(child: Child) -> (u64, std::process::Output) {
    let status = format!("/proc/{}/status", child.id());
    let watcher = std::thread::spawn(move || {
        let mut peak = 0;
        while let Ok(text) = std::fs::read_to_string(&status) {
            let kib = text.lines().find_map(|l| l.strip_prefix("VmHWM:"));
            match kib.and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()) {
                Some(kib) => peak = peak.max(kib << 10),
                None => break, // a zombie: its memory is gone
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    });
    let output = child.wait_with_output().unwrap();
    (watcher.join().unwrap(), output)
}

fn run(cluster: &Cluster, args: &[&str]) -> Child {
    Command::new(SOMNUS)
        .args(args)
        .arg("--cluster")
        .arg(&cluster.path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn said(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A 160 MiB file goes in and comes back through the CLI in well under its size of
/// memory (the whole file in memory, twice, was 320 MiB); a failed `get` leaves an
/// earlier file whole and no part of a new one; `get` to a closed pipe ends quietly;
/// `put` from standard input works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_stream_files_in_bounded_memory() {
    const BOUND: u64 = 128 << 20;
    let cluster = Cluster::start();
    let dir = cluster.path.parent().unwrap().to_owned();
    let data = pattern(77, (160 << 20) + 1234);
    let file = dir.join("big.bin");
    std::fs::write(&file, &data).unwrap();

    let (put_peak, put) = peak_and_output(run(&cluster, &["put", file.to_str().unwrap(), "big"]));
    assert!(put.status.success(), "{}", said(&put));
    assert!(put_peak > 0 && put_peak < BOUND, "put peaked at {} MiB", put_peak >> 20);
    let back = dir.join("back.bin");
    let (peak, get) = peak_and_output(run(&cluster, &["get", "big", back.to_str().unwrap()]));
    assert!(get.status.success(), "{}", said(&get));
    assert!(peak > 0 && peak < BOUND, "get peaked at {} MiB", peak >> 20);
    assert!(std::fs::read(&back).unwrap() == data, "the file read back differs");
    eprintln!("160 MiB: put peaked at {} MiB, get at {} MiB", put_peak >> 20, peak >> 20);

    // A get that fails: the earlier file stays, no part file is left.
    let get = cluster.cli(&["get", "no-such-key", back.to_str().unwrap()]);
    assert!(!get.status.success() && said(&get).contains("no-such-key"), "{}", said(&get));
    assert!(std::fs::read(&back).unwrap() == data, "a failed get changed the file");
    assert!(!dir.join("back.bin.somnus-part").exists(), "a part file was left");

    // To a pipe its reader closes after 100 bytes: a quiet end.
    let mut get = run(&cluster, &["get", "big", "-"]);
    let mut first = [0u8; 100];
    get.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let get = get.wait_with_output().unwrap();
    assert_eq!(&first[..], &data[..100]);
    assert!(get.status.success(), "{}", said(&get));
    assert!(!said(&get).contains("panicked") && !said(&get).contains("rror"), "{}", said(&get));

    // From standard input.
    let mut put = Command::new(SOMNUS)
        .args(["put", "-", "small", "--cluster"])
        .arg(&cluster.path)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut put.stdin.take().unwrap(), &data[..5000]).unwrap();
    assert!(put.wait().unwrap().success());
    let get = cluster.cli(&["get", "small", "-"]);
    assert!(get.status.success() && get.stdout == data[..5000], "{}", said(&get));
}

/// Every process whose command line names `cluster` (the file `somnus up` wrote).
fn processes_of(cluster: &Path) -> Vec<String> {
    let needle = cluster.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(cmdline);
        }
    }
    found
}

/// The process id of the one process whose command line names `cluster` and `role`
/// (`server --id 4`), if there is one.
fn pid_of(cluster: &Path, role: &str) -> Option<i32> {
    let needle = cluster.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && cmdline.contains(role) {
            return entry.file_name().to_str()?.parse().ok();
        }
    }
    None
}

/// Waits up to 20 s until `count` processes name `cluster` (a child just forked
/// shows its parent's command line until it executes its own).
fn wait_for_processes(cluster: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_of(cluster).len() != count {
        assert!(Instant::now() < deadline, "not {count} processes: {:?}", processes_of(cluster));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `somnus up` in `dir` (its S3 gateway on a free port) and waits for its
/// banner; what it printed.
fn up(dir: &Path) -> (Child, String) {
    let s3 = common::free_ports(1)[0].to_string();
    let mut up = Command::new(SOMNUS)
        .args(["up", "--s3", &s3, "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    let mut lines = BufReader::new(up.stderr.take().unwrap()).lines();
    while !banner.contains("Ctrl-C") {
        let line = lines.next().expect("somnus up ended before its banner").unwrap();
        banner += &line;
        banner.push('\n');
    }
    // The rest of its standard error, drained so it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (up, banner)
}

/// Waits up to `limit` for `child` to exit; its status.
fn exited_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("not exited within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Retries a CLI command until it succeeds (the cluster just started), up to 30 s.
fn until_it_succeeds(args: &[&str], cluster: &Path) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = Command::new(SOMNUS)
            .args(args)
            .arg("--cluster")
            .arg(cluster)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if output.status.success() || Instant::now() > deadline {
            return output;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `somnus up` starts eleven processes (an MDS, nine servers and the S3 gateway) and
/// says how to reach them; SIGTERM stops them
/// all (exit 0); a second `up` on the same directory serves what the first stored,
/// starts a SIGKILLed server again (its log appended to, not truncated); Ctrl-C
/// (SIGINT) stops that one too; and a third, SIGKILLed, leaves none behind (its
/// children stop with it).
#[test]
fn up_starts_a_cluster_keeps_its_state_and_stops_everything_on_a_signal() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("somnus-data");
    let cluster = data_dir.join("cluster.toml");
    let (mut first, banner) = up(&data_dir);
    assert!(banner.contains("9 servers in 3 racks (r = 3) is up; MDS at 127.0.0.1:"), "{banner}");
    assert!(banner.contains(&cluster.display().to_string()), "{banner}");
    assert!(
        banner.contains("S3 at http://127.0.0.1:") && banner.contains("access key"),
        "{banner}"
    );
    wait_for_processes(&cluster, 11);
    let input = dir.path().join("in.bin");
    std::fs::write(&input, pattern(5, 300_000)).unwrap();
    let put = until_it_succeeds(&["put", input.to_str().unwrap(), "kept"], &cluster);
    assert!(put.status.success(), "{}", said(&put));
    let status = until_it_succeeds(&["status"], &cluster);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && text.matches(" on ").count() >= 9, "{text}");

    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).unwrap();
    assert!(exited_within(&mut first, Duration::from_secs(30)).success());
    wait_for_processes(&cluster, 0);

    let (mut second, _) = up(&data_dir);
    let output = dir.path().join("out.bin");
    let get = until_it_succeeds(&["get", "kept", output.to_str().unwrap()], &cluster);
    assert!(get.status.success(), "{}", said(&get));
    assert!(std::fs::read(&output).unwrap() == pattern(5, 300_000));
    // A server that dies is started again (its log keeps what it said before).
    let role = "server --id 4 ";
    let victim = pid_of(&cluster, role).expect("server 4 runs");
    kill(Pid::from_raw(victim), Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while pid_of(&cluster, role).is_none_or(|pid| pid == victim) {
        assert!(Instant::now() < deadline, "server 4 was not started again");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(data_dir.join("logs/server-4.log")).unwrap();
    let starts = log.lines().filter(|l| l.starts_with("somnus up: started server-4")).count();
    assert_eq!(starts, 3, "two runs of up and a restart, in one log:\n{log}");
    assert!(log.contains("server-4 exited (signal: 9") && log.contains("starting it again in"));
    let get = until_it_succeeds(&["get", "kept", output.to_str().unwrap()], &cluster);
    assert!(get.status.success(), "{}", said(&get));
    kill(Pid::from_raw(second.id() as i32), Signal::SIGINT).unwrap();
    assert!(exited_within(&mut second, Duration::from_secs(30)).success());
    wait_for_processes(&cluster, 0);

    let (mut third, _) = up(&data_dir);
    wait_for_processes(&cluster, 11);
    third.kill().unwrap();
    third.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_of(&cluster).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left after up was killed: {:?}",
            processes_of(&cluster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
