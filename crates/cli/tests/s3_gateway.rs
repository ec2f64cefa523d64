//! The S3 gateway driven by real S3 clients: `somnus s3` in front of a cluster of
//! real processes on loopback, and `crates/s3/tests/s3_clients.py` (boto3 and the AWS
//! CLI) run against it, once with every server on and once more (a quicker suite)
//! with two of the three gear groups asleep.
//!
//! The clients come from PyPI (`python3 -m pip install boto3 awscli`, as `.ci/run`
//! does). Without them the test says so and passes, except under CI (`CI` set),
//! where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Processes are waited for in real time.
#![allow(clippy::disallowed_methods)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::s3::{ACCESS_KEY, Gateway, SECRET_KEY, clients_installed, start_gateway};
use common::{Cluster, free_ports, pattern};
use somnus_core::cluster::ServerPower;

/// Runs the client suite (`full` or `quick`) against `gateway`; its output.
fn run_suite(gateway: &Gateway, suite: &str) -> String {
    gateway.python("s3_clients.py", &[], &[("S3_SUITE", suite)])
}

/// After the client suite: the gateway's metrics count its requests by operation,
/// its errors by code and their latency, and its access log has a line for each
/// request with the fields docs/s3-compat.md names.
fn the_gateway_can_be_operated(http: &str, access_log: &std::path::Path) {
    use std::io::{Read, Write};
    let mut connection = std::net::TcpStream::connect(http).unwrap();
    connection.write_all(b"GET /metrics HTTP/1.0\r\nHost: gateway\r\n\r\n").unwrap();
    let mut metrics = String::new();
    connection.read_to_string(&mut metrics).unwrap();
    let count = |prefix: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(prefix));
        let value = line.and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok());
        value.unwrap_or_else(|| panic!("no {prefix} in the metrics:\n{metrics}"))
    };
    assert!(count("somnus_s3_requests_total{op=\"PutObject\"}") >= 100.0);
    assert!(count("somnus_s3_errors_total{op=\"GetObject\",code=\"NoSuchKey\"}") >= 1.0);
    assert!(count("somnus_s3_request_seconds_count{op=\"GetObject\"}") >= 50.0);
    // Lines are written by a task of their own: the last ones a moment later.
    std::thread::sleep(Duration::from_millis(500));
    let log = std::fs::read_to_string(access_log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.len() >= 500, "{} lines in the access log", lines.len());
    let put = lines.iter().find(|l| l.contains(" PutObject ")).expect("a PutObject line");
    let fields: Vec<&str> = put.split(' ').collect();
    assert_eq!(fields.len(), 9, "time id operation bucket key status in out seconds: {put}");
    assert!(fields[0].ends_with('Z') && fields[1].len() == 16 && fields[5] == "200", "{put}");
    assert!(fields[8].parse::<f64>().is_ok(), "{put}");
}

/// The gateway's resident-set peak so far (its `VmHWM`).
fn peak_bytes(gateway: &Gateway) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", gateway.child.id())).unwrap();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
    kib.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() << 10
}

/// `aws s3api` against the gateway; its standard output.
fn aws(gateway: &Gateway, args: &[&str]) -> String {
    let output = Command::new("aws")
        .args(["--endpoint-url", &format!("http://{}", gateway.address), "s3api"])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "aws s3api {args:?}: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// An object of 300 MiB in one PUT and one GET (no multipart): the gateway streams
/// it a request at a time, so its memory stays far below the object's size.
fn a_large_object_streams_in_bounded_memory(gateway: &Gateway, dir: &std::path::Path) {
    const SIZE: usize = 300 << 20;
    let data = common::pattern(91, SIZE);
    let file = dir.join("large.bin");
    std::fs::write(&file, &data).unwrap();
    let file = file.to_str().unwrap();
    aws(gateway, &["create-bucket", "--bucket", "large"]);
    aws(gateway, &["put-object", "--bucket", "large", "--key", "l", "--body", file]);
    let back = dir.join("large.back");
    aws(gateway, &["get-object", "--bucket", "large", "--key", "l", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "the large object read back differs");
    aws(gateway, &["delete-object", "--bucket", "large", "--key", "l"]);
    aws(gateway, &["delete-bucket", "--bucket", "large"]);
    let peak = peak_bytes(gateway);
    eprintln!("300 MiB PUT and GET: the gateway peaked at {} MiB", peak >> 20);
    assert!(peak < 160 << 20, "the gateway peaked at {} MiB", peak >> 20);
}

fn body(bytes: Vec<u8>) -> impl futures::Stream<Item = Result<bytes::Bytes, String>> + Unpin {
    futures::stream::iter(vec![Ok(bytes::Bytes::from(bytes))])
}

/// The store under the gateway, where requests race: a GET begun before an overwrite
/// and a delete reads the old object whole (its data is freed by the cluster a grace
/// later); a multipart completion takes the upload, so that a part, an abort or the
/// sweep after it touches nothing of the object, a retried completion answers as the
/// first, and an empty one is refused. Run before the real clients, on their cluster.
async fn races_leave_every_object_whole(cluster: &Cluster) {
    use futures::StreamExt;
    use somnus_s3::StoreError;
    let store = somnus_s3::Store::new(cluster.client());
    store.create_bucket("races").await.unwrap();
    // Twice the gateway's read-ahead (4 requests of 1 MiB): most of the GET is read after.
    let (old, new) = (pattern(1, 8 << 20).to_vec(), pattern(2, 8 << 20).to_vec());
    let len = old.len() as u64;
    let any = somnus_s3::WriteConditions::default();
    store
        .put("races", "big", len, body(old.clone()), Default::default(), None, &any)
        .await
        .unwrap();
    let (_, _, mut stream) = store.get("races", "big", |r| Ok((0, r.size))).await.unwrap();
    let mut read = stream.next().await.unwrap().unwrap().to_vec();
    assert!(read.len() < old.len(), "the GET is still under way");
    store.put("races", "big", len, body(new), Default::default(), None, &any).await.unwrap();
    store.delete("races", "big").await.unwrap();
    while let Some(piece) = stream.next().await {
        read.extend_from_slice(&piece.expect("a GET begun before an overwrite and a delete"));
    }
    assert!(read == old, "a GET begun before an overwrite and a delete was not read whole");
    // Both data objects wait in the free log, for their grace (15 minutes here).
    let space = cluster.mds_status().await.space;
    assert_eq!(space.frees_queued, 2, "{space:?}");

    let upload = store.create_upload("races", "mp", Default::default()).await.unwrap();
    let (one, two) = (pattern(3, 5 << 20).to_vec(), pattern(4, 1000).to_vec());
    let mut listed = Vec::new();
    for (number, part) in [(1, &one), (2, &two)] {
        let length = part.len() as u64;
        let put = store.put_part("races", "mp", &upload, number, length, body(part.clone()), None);
        listed.push((number, put.await.unwrap().etag));
    }
    // The first completion makes the key: `If-None-Match: *` holds, and a retry of it,
    // which finds that object, is not refused for it.
    let none = somnus_s3::WriteConditions::default();
    let once = somnus_s3::WriteConditions {
        if_none_match: Some(somnus_s3::EtagMatch::Any),
        ..Default::default()
    };
    let empty = store.complete_upload("races", "mp", &upload, &[], &none).await;
    assert!(matches!(empty, Err(StoreError::NoPartsListed)), "{empty:?}");
    let done = store.complete_upload("races", "mp", &upload, &listed, &once).await.unwrap();
    let again = store.complete_upload("races", "mp", &upload, &listed, &once).await.unwrap();
    assert_eq!((again.etag.clone(), again.parts), (done.etag.clone(), done.parts.clone()));
    let other = store.complete_upload("races", "mp", &upload, &listed[..1], &none).await;
    assert!(matches!(other, Err(StoreError::NoSuchUpload(_))), "{other:?}");
    let late = store.put_part("races", "mp", &upload, 3, 1, body(vec![7]), None).await;
    assert!(matches!(late, Err(StoreError::NoSuchUpload(_))), "{late:?}");
    let abort = store.abort_upload("races", "mp", &upload).await;
    assert!(matches!(abort, Err(StoreError::NoSuchUpload(_))), "{abort:?}");
    assert_eq!(store.sweep_uploads(0).await.unwrap(), 0);
    let (record, _, stream) = store.get("races", "mp", |r| Ok((0, r.size))).await.unwrap();
    let whole: Vec<u8> = stream.map(|p| p.unwrap().to_vec()).concat().await;
    assert_eq!(record.etag, done.etag);
    assert!(whole == [one, two].concat(), "the completed object changed");
    // The claim kept for a retry is swept with the upload gone: a retry is refused.
    let retry = store.complete_upload("races", "mp", &upload, &listed, &none).await;
    assert!(matches!(retry, Err(StoreError::NoSuchUpload(_))), "{retry:?}");
    a_completion_stopped_half_way_is_swept(cluster, &store).await;
}

/// A completion that stops once it holds its upload (its gateway died) keeps other
/// completions and aborts off it while its claim is fresh; the sweep then takes the
/// upload with its claim, so that nothing stays that nothing can release.
async fn a_completion_stopped_half_way_is_swept(cluster: &Cluster, store: &somnus_s3::Store) {
    use somnus_s3::StoreError;
    let upload = store.create_upload("races", "stopped", Default::default()).await.unwrap();
    let part = pattern(5, 1000).to_vec();
    let put = store.put_part("races", "stopped", &upload, 1, 1000, body(part), None);
    let listed = vec![(1, put.await.unwrap().etag)];
    let none = somnus_s3::WriteConditions::default();
    // Polled a step at a time until its claim is there, then dropped.
    let claim = format!("s3/c/races/{upload}");
    let client = cluster.client();
    let mut completion =
        Box::pin(store.complete_upload("races", "stopped", &upload, &listed, &none));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while client.stat(&claim).await.is_err() {
        let step = futures::FutureExt::now_or_never(completion.as_mut());
        assert!(step.is_none(), "the completion finished before it was stopped: {step:?}");
        assert!(tokio::time::Instant::now() < deadline, "no claim in 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(completion);
    let wrong = [(1, "0123456789abcdef0123456789abcdef".to_owned())];
    let other = store.complete_upload("races", "stopped", &upload, &wrong, &none).await;
    assert!(matches!(other, Err(StoreError::UploadFinishing(_))), "{other:?}");
    let abort = store.abort_upload("races", "stopped", &upload).await;
    assert!(matches!(abort, Err(StoreError::UploadFinishing(_))), "a fresh claim holds: {abort:?}");
    assert_eq!(store.sweep_uploads(0).await.unwrap(), 1, "the stopped completion's upload swept");
    assert!(client.stat(&claim).await.is_err(), "its claim went with it");
    let abort = store.abort_upload("races", "stopped", &upload).await;
    assert!(matches!(abort, Err(StoreError::NoSuchUpload(_))), "{abort:?}");
    let retry = store.complete_upload("races", "stopped", &upload, &listed, &none).await;
    assert!(matches!(retry, Err(StoreError::NoSuchUpload(_))), "{retry:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_s3_clients_store_and_read_objects_also_while_gear_groups_sleep() {
    if !clients_installed() {
        return;
    }
    // Real time: a faster clock shortens the heartbeat timeouts in wall time too, and
    // on a loaded machine (CI) a late heartbeat of a server on had the MDS wake every
    // sleeper to find its groups a primary, in the middle of the suite.
    let cluster = Cluster::start();
    races_leave_every_object_whole(&cluster).await;
    let http = free_ports(1)[0].to_string();
    let access_log = cluster.path.with_file_name("s3-access.log");
    let log_arg = access_log.to_string_lossy().into_owned();
    let gateway = start_gateway(&cluster, &["--http", &http, "--access-log", &log_arg]);

    let full = common::on_thread(|| run_suite(&gateway, "full"));
    eprintln!("{full}");
    common::on_thread(|| the_gateway_can_be_operated(&http, &access_log));
    let dir = cluster.path.parent().unwrap().to_owned();
    common::on_thread(|| a_large_object_streams_in_bounded_memory(&gateway, &dir));

    cluster.operator("/gear/1").await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mds = cluster.mds_status().await;
        if mds.servers.iter().filter(|s| s.power == ServerPower::Asleep).count() == 6 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "six servers not asleep in 120 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let quick = common::on_thread(|| run_suite(&gateway, "quick"));
    eprintln!("with gear groups 2 and 3 asleep:\n{quick}");
    let mds = cluster.mds_status().await;
    let asleep = mds.servers.iter().filter(|s| s.power == ServerPower::Asleep).count();
    let states: Vec<_> = mds.servers.iter().map(|s| s.power).collect();
    assert_eq!((mds.gear, asleep), (1, 6), "the suite ran with two gear groups asleep: {states:?}");
}

/// `somnus demo` (README's first command), on a slower clock than its default for a
/// debug build beside the other test: it starts a cluster and its gateway, drives a
/// day of S3 traffic through them, prints twelve intervals in which servers sleep in
/// the night and save energy, reads every object back, and leaves no process behind.
#[test]
fn the_demo_stores_through_s3_sleeps_at_night_and_reads_everything_back() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("demo");
    let s3 = free_ports(1)[0].to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_somnus"))
        .args(["demo", "--day-seconds", "144", "--peak-rate", "20", "--s3", &s3, "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(started.elapsed() < Duration::from_secs(400), "{:?}", started.elapsed());
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(":00-")).collect();
    assert_eq!(rows.len(), 12, "{stdout}");
    let figure = |after: &str| -> f64 {
        let line = stdout.lines().find(|l| l.contains(after)).unwrap_or_else(|| panic!("{stdout}"));
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest.split_whitespace().next().unwrap().trim_end_matches(',').parse().unwrap()
    };
    assert!(figure("up to ") >= 3.0, "no night's sleep: {stdout}");
    assert!(figure("with every server on: ") > 0.0, "no energy saved: {stdout}");
    assert!(stdout.contains("), 0 failed;"), "{stdout}");
    let read_back = stdout.lines().find(|l| l.starts_with("read back: ")).unwrap();
    let words: Vec<&str> = read_back.split_whitespace().collect();
    let (good, stored): (u64, u64) = (words[2].parse().unwrap(), words[4].parse().unwrap());
    assert!(good > 100 && good == stored, "{stdout}");
    // Its cluster is stopped, its directory kept (`--dir`) with the processes' logs.
    let cluster = dir.join("cluster.toml");
    let needle = cluster.to_string_lossy().into_owned();
    let left: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(&needle))
        .collect();
    assert!(left.is_empty(), "{} processes of the demo left", left.len());
    assert!(dir.join("logs/mds.log").exists());
}

/// How long until the gateway closes `connection` (reads end), at most `limit`.
fn closed_within(connection: &mut std::net::TcpStream, limit: Duration) -> Option<Duration> {
    use std::io::Read;
    let started = Instant::now();
    connection.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < limit {
        match connection.read(&mut buffer) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// An unsigned request's answer on `connection` (the gateway refuses it 403 without
/// asking the cluster), read up to its end; keeps the connection open.
fn unsigned_request(connection: &mut std::net::TcpStream) -> String {
    use std::io::{Read, Write};
    connection.write_all(b"GET /bucket HTTP/1.1\r\nHost: gateway\r\n\r\n").unwrap();
    connection.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("</Error>") {
        let n = connection.read(&mut buffer).unwrap();
        assert!(n > 0, "closed before its answer: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// CPU seconds process `pid` has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// The gateway's bounds on connections (no cluster needed: unsigned requests are
/// refused at the gateway). A slowloris is closed after the header timeout, an idle
/// keep-alive connection after the idle timeout and not before; past the cap a
/// connection is answered 503 SlowDown and closed, and served again once others close;
/// a refusal given before its request's body was read says the connection closes;
/// and out of file descriptors the accept loop backs off instead of spinning (it
/// took 55-93 % of a core while new clients timed out), serving again once they are
/// back.
#[test]
fn the_gateway_bounds_its_connections() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    let cluster = Cluster::unstarted(1.0);
    let limits = ["--max-connections", "8", "--header-timeout-s", "1", "--idle-timeout-s", "2"];
    let gateway = start_gateway(&cluster, &limits);

    // A slowloris: the headers begun, a byte every 200 ms, never finished.
    let mut slow = TcpStream::connect(gateway.address).unwrap();
    slow.write_all(b"GET /bucket HTTP/1.1\r\nHost: gateway\r\n").unwrap();
    let started = Instant::now();
    let mut closed = None;
    while started.elapsed() < Duration::from_secs(10) {
        if slow.write_all(b"X").is_err() {
            closed = Some(started.elapsed());
            break;
        }
        if let Some(after) = closed_within(&mut slow, Duration::from_millis(200)) {
            closed = Some(started.elapsed().max(after));
            break;
        }
    }
    let closed = closed.expect("a slowloris held its connection 10 s");
    assert!(closed < Duration::from_secs(4), "the slowloris was closed after {closed:?}");

    // Idle after a request: closed after about 2 s, not before.
    let mut idle = TcpStream::connect(gateway.address).unwrap();
    let answer = unsigned_request(&mut idle);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let after = closed_within(&mut idle, Duration::from_secs(10)).expect("idle held 10 s");
    assert!(after >= Duration::from_millis(1_500), "closed after {after:?}, idle 2 s");
    assert!(after < Duration::from_secs(5), "closed after {after:?}, idle 2 s");
    assert!(!answer.to_lowercase().contains("connection: close"), "{answer}");

    // A refusal given before its body was read (a PUT whose client waits for 100
    // Continue) says `Connection: close`, as the connection then closes: a client that
    // reused it (boto3 did, under load) saw it closed under its next request.
    let mut expecting = TcpStream::connect(gateway.address).unwrap();
    expecting
        .write_all(b"PUT /bucket/key HTTP/1.1\r\nHost: gateway\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    expecting.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut refusal = String::new();
    expecting.read_to_string(&mut refusal).unwrap();
    assert!(refusal.starts_with("HTTP/1.1 403"), "{refusal}");
    assert!(refusal.to_lowercase().contains("connection: close"), "{refusal}");

    // The cap: eight open, the ninth refused with S3's SlowDown; served again after.
    let mut open: Vec<TcpStream> =
        (0..8).map(|_| TcpStream::connect(gateway.address).unwrap()).collect();
    for connection in &mut open {
        assert!(unsigned_request(connection).starts_with("HTTP/1.1 403"));
    }
    let mut ninth = TcpStream::connect(gateway.address).unwrap();
    ninth.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut refusal = String::new();
    ninth.read_to_string(&mut refusal).unwrap();
    assert!(refusal.starts_with("HTTP/1.1 503") && refusal.contains("<Code>SlowDown</Code>"));
    assert!(refusal.contains("8 connections"), "{refusal}");
    drop(open);
    let served = Instant::now();
    loop {
        let mut again = TcpStream::connect(gateway.address).unwrap();
        let mut first = [0u8; 12];
        again.write_all(b"GET /bucket HTTP/1.1\r\nHost: gateway\r\n\r\n").unwrap();
        again.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        again.read_exact(&mut first).unwrap();
        if &first == b"HTTP/1.1 403" {
            break;
        }
        assert!(served.elapsed() < Duration::from_secs(5), "not served again once others closed");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(gateway);

    // Out of descriptors: 64 at most (soft and hard), 120 clients connected.
    let mut limited = Command::new("sh");
    limited.args(["-c", r#"ulimit -n 64 && exec "$0" "$@""#, env!("CARGO_BIN_EXE_somnus")]);
    let gateway = common::s3::start_gateway_by(&cluster, limited, &[]);
    let flood: Vec<TcpStream> =
        (0..120).filter_map(|_| TcpStream::connect(gateway.address).ok()).collect();
    assert!(flood.len() > 64, "only {} clients connected", flood.len());
    std::thread::sleep(Duration::from_millis(500));
    let (cpu, wall) = (cpu_seconds(gateway.child.id()), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let share = (cpu_seconds(gateway.child.id()) - cpu) / wall.elapsed().as_secs_f64();
    assert!(share < 0.2, "out of descriptors the gateway used {:.0} % of a core", share * 100.0);
    drop(flood);
    let mut back = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while back.is_none() && Instant::now() < deadline {
        if let Ok(mut connection) = TcpStream::connect(gateway.address) {
            connection.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let sent = connection.write_all(b"GET /bucket HTTP/1.1\r\nHost: gateway\r\n\r\n");
            let mut first = [0u8; 12];
            if sent.is_ok() && connection.read_exact(&mut first).is_ok() {
                back = Some(first);
            }
        }
    }
    assert_eq!(back.as_ref().map(|b| &b[..]), Some(&b"HTTP/1.1 403"[..]), "not served again");
}

/// A self-signed certificate for `localhost` and 127.0.0.1 and its key, as PEM files
/// in `dir`.
fn self_signed(dir: &std::path::Path, name: &str) -> (String, String) {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names).unwrap();
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (cert.to_string_lossy().into_owned(), key.to_string_lossy().into_owned())
}

/// `somnus s3 --tls-cert --tls-key` serves HTTPS: boto3 and the AWS CLI (the quick
/// suite, trusting the certificate through AWS_CA_BUNDLE) and `somnus bench s3`
/// (`--ca-cert`) store and read over it; a client that does not trust the
/// certificate is refused by its own TLS, a plain HTTP request gets no S3 answer, a
/// client of TLS 1.2 is served too, and the gateway serves on. A key others can read
/// is refused at start.
#[test]
fn real_s3_clients_speak_https_to_the_gateway() {
    if !clients_installed() {
        return;
    }
    let cluster = Cluster::start();
    let dir = cluster.path.parent().unwrap().to_owned();
    let (cert, key) = self_signed(&dir, "gateway");
    let (_, exposed) = self_signed(&dir, "exposed");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused =
        cluster.cli(&["s3", "--listen", "127.0.0.1:0", "--tls-cert", &cert, "--tls-key", &exposed]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("chmod 600"), "{stderr}");

    let mut gateway = start_gateway(&cluster, &["--tls-cert", &cert, "--tls-key", &key]);
    gateway.endpoint = format!("https://localhost:{}", gateway.address.port());

    let quick =
        gateway.python("s3_clients.py", &[], &[("S3_SUITE", "quick"), ("AWS_CA_BUNDLE", &cert)]);
    eprintln!("over HTTPS:\n{quick}");

    let bench = |ca: &str| {
        let output = cluster.cli(&[
            "bench",
            "s3",
            "--endpoint",
            &gateway.endpoint,
            "--ca-cert",
            ca,
            "--seconds",
            "1",
            "--sizes",
            "4096",
            "--concurrency",
            "2",
            "--access-key",
            ACCESS_KEY,
            "--secret-key",
            SECRET_KEY,
            "--bucket",
            "https-bench",
        ]);
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let (ok, text) = bench(&cert);
    assert!(ok, "{text}");
    let get = text.lines().find(|l| l.trim_start().starts_with("GET")).expect("a GET row");
    let ops: u64 = get.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(ops > 0, "{text}");

    let (stranger, _) = self_signed(&dir, "stranger");
    let (ok, text) = bench(&stranger);
    assert!(!ok && text.contains("certificate"), "{text}");

    use std::io::{Read, Write};
    let mut plain = std::net::TcpStream::connect(gateway.address).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "{}", String::from_utf8_lossy(&answer));

    let tls12 = format!(
        "import socket, ssl; c = ssl.create_default_context(cafile={cert:?}); \
         c.maximum_version = ssl.TLSVersion.TLSv1_2; \
         s = c.wrap_socket(socket.create_connection(('localhost', {})), server_hostname='localhost'); \
         s.sendall(b'GET / HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n'); \
         print(s.version(), s.recv(12).decode())",
        gateway.address.port()
    );
    let output = Command::new("python3").args(["-c", &tls12]).output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(said.trim(), "TLSv1.2 HTTP/1.1 403", "{}", String::from_utf8_lossy(&output.stderr));

    let (ok, text) = bench(&cert);
    assert!(ok, "not served after the refusals: {text}");
    drop(gateway);
}
