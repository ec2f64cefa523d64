//! The logger's log through the `somnus logstore` commands, with real processes and
//! real files: the SIGKILL crash campaign, and `inspect` and `verify` on healthy and
//! damaged logs.
//!
//! Method: the built binary runs as a separate process; `torture` itself runs its writer
//! as a further process and kills it with SIGKILL. `SOMNUS_TORTURE_KILLS=N` raises the
//! campaign's kills (default 200).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use somnus_logstore::{FsDisk, LogStore, ObjectId, Options, OwnerId, SegmentId, segment_file_name};
use somnus_types::{ByteRange, Version};

fn somnus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_somnus")).args(args).output().expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("somnus-logstore-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The numbers of the last line `kills=N acknowledged=A lost=L wrong=W`.
fn tally(output: &Output) -> [u64; 4] {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let numbers: Vec<u64> =
        last.split(' ').filter_map(|field| field.split_once('=')?.1.parse().ok()).collect();
    assert!(
        last.starts_with("kills="),
        "last line {last:?}; stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    numbers.try_into().unwrap()
}

#[test]
fn acknowledged_appends_survive_sigkill_at_random_moments() {
    // Goal: the crash test: at least 200 SIGKILLs of a writer process at random
    // moments (during recovery, appends, compaction and clean closes), each followed by
    // a reopen that finds every acknowledged append with its exact bytes and version
    // and nothing unacknowledged newer than it.
    let kills: u64 =
        std::env::var("SOMNUS_TORTURE_KILLS").ok().and_then(|k| k.parse().ok()).unwrap_or(200);
    let dir = scratch("torture");
    let output = somnus(&[
        "logstore",
        "torture",
        dir.to_str().unwrap(),
        "--kills",
        &kills.to_string(),
        "--seed",
        "3",
    ]);
    let [killed, acknowledged, lost, wrong] = tally(&output);
    assert!(output.status.success(), "stderr: {}", String::from_utf8_lossy(&output.stderr));
    assert_eq!((killed, lost, wrong), (kills, 0, 0));
    assert!(acknowledged > kills * 10, "only {acknowledged} acknowledged appends");
    // The campaign removes its log directory when done.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A campaign of `kills` against a writer with the deliberate fault `inject`.
fn torture_with(dir: &std::path::Path, kills: u64, inject: &str) -> Output {
    let kills = kills.to_string();
    somnus(&["logstore", "torture", dir.to_str().unwrap(), "--kills", &kills, "--inject", inject])
}

#[test]
fn the_campaign_catches_a_writer_that_acknowledges_too_early_or_writes_wrong_bytes() {
    // Goal: the checker can fail: a writer that acknowledges before writing loses
    // acknowledged appends at some kill, and one that writes bytes other than its
    // version's is caught as wrong; both exit with status 1.
    let dir = scratch("inject");
    let early = torture_with(&dir, 60, "ack-early");
    let [_, _, lost, _] = tally(&early);
    assert!(lost > 0, "early acknowledgements went unnoticed");
    assert_eq!(early.status.code(), Some(1));
    let wrong_bytes = torture_with(&dir, 10, "wrong-bytes");
    let [_, _, _, wrong] = tally(&wrong_bytes);
    assert!(wrong > 0, "wrong bytes went unnoticed");
    assert_eq!(wrong_bytes.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn make_log(dir: &std::path::Path) {
    let store = LogStore::open(Arc::new(FsDisk::new(dir).unwrap()), Options::default()).unwrap();
    for i in 0..10u64 {
        let range = ByteRange::new(i * 4096, 4096);
        store.append(OwnerId(7), ObjectId(1), range, Version(i + 1), &[i as u8; 4096]).unwrap();
    }
    store.append(OwnerId(8), ObjectId(2), ByteRange::new(0, 100), Version(1), &[1; 100]).unwrap();
    store.invalidate(OwnerId(7), ObjectId(1), ByteRange::new(0, 8192), Version(2)).unwrap();
    store.close().unwrap();
}

#[test]
fn inspect_shows_owners_and_verify_passes_a_healthy_log() {
    let dir = scratch("inspect");
    make_log(&dir);
    let output = somnus(&["logstore", "inspect", dir.to_str().unwrap(), "--segments"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("index loaded from the clean close's snapshot"), "{text}");
    // Owner 7: 8 of its 10 blocks live (two invalidated); owner 8: 100 bytes.
    let row7 = text.lines().find(|l| l.trim_start().starts_with("7 ")).unwrap();
    assert!(row7.contains("32,768"), "{row7}");
    let row8 = text.lines().find(|l| l.trim_start().starts_with("8 ")).unwrap();
    assert!(row8.contains(" 100 "), "{row8}");
    assert!(text.contains(&segment_file_name(SegmentId(1))), "{text}");

    let json = somnus(&["logstore", "inspect", dir.to_str().unwrap(), "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["live_bytes"], 32768 + 100);
    assert_eq!(value["owners"].as_array().unwrap().len(), 2);

    let verify = somnus(&["logstore", "verify", dir.to_str().unwrap()]);
    let text = String::from_utf8(verify.stdout).unwrap();
    assert!(verify.status.success(), "{text}");
    assert!(text.contains("ok: 1 segments, 12 records checked"), "{text}");
    assert!(text.contains("matches the segments"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_fails_on_a_flipped_bit_and_inspect_refuses_what_is_not_a_log() {
    let dir = scratch("damage");
    make_log(&dir);
    let segment = dir.join(segment_file_name(SegmentId(1)));
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[20_000] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let verify = somnus(&["logstore", "verify", dir.to_str().unwrap()]);
    let text = String::from_utf8(verify.stdout).unwrap();
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(text.contains("DAMAGED at byte"), "{text}");
    assert!(text.contains("checksum mismatch"), "{text}");

    let empty = scratch("not-a-log");
    let inspect = somnus(&["logstore", "inspect", empty.to_str().unwrap()]);
    assert!(!inspect.status.success());
    let stderr = String::from_utf8(inspect.stderr).unwrap();
    assert!(stderr.contains("not a somnus log") && stderr.contains("no meta file"), "{stderr}");
    let missing = somnus(&["logstore", "verify", "/nonexistent/somnus-log"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8(missing.stderr).unwrap().contains("/nonexistent/somnus-log"));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}

/// The segment files of a log directory, in id order.
fn segment_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_str().unwrap().starts_with("seg-"))
        .collect();
    files.sort();
    files
}

#[test]
fn verify_calls_a_sealed_segment_cut_short_damaged() {
    // Goal: the sequence: a kept torture log whose first sealed segment is cut
    // to 100 bytes has lost records it once wrote whole; only the last segment can be
    // torn, so verify must say DAMAGED and exit 1, as inspect reports damage.
    let dir = scratch("cut-sealed");
    let output = somnus(&["logstore", "torture", dir.to_str().unwrap(), "--kills", "5", "--keep"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let log = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let segments = segment_files(&log);
    assert!(segments.len() >= 2, "the campaign left {} segments", segments.len());
    let file = std::fs::OpenOptions::new().write(true).open(&segments[0]).unwrap();
    file.set_len(100).unwrap();
    let verify = somnus(&["logstore", "verify", log.to_str().unwrap()]);
    let text = String::from_utf8(verify.stdout).unwrap();
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(text.lines().next_back().unwrap().starts_with("DAMAGED"), "{text}");
    let first = text.lines().nth(1).unwrap();
    assert!(first.contains("DAMAGED at byte 64") && !first.contains("torn"), "{first}");
    let inspect = somnus(&["logstore", "inspect", log.to_str().unwrap()]);
    assert!(String::from_utf8(inspect.stdout).unwrap().contains("DAMAGE"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_of_the_logstore_commands_print_their_cause_once() {
    // Goal: an I/O error reaches the operator with its cause once (the variant's message
    // holds it, so it is not also the error's source, which the chain would print
    // again): here `verify` and `inspect` of a log another process holds open.
    let dir = scratch("locked");
    let store = LogStore::open(Arc::new(FsDisk::new(&dir).unwrap()), Options::default()).unwrap();
    for command in ["verify", "inspect"] {
        let output = somnus(&["logstore", command, dir.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1), "{command}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(stderr.matches("LOCK is held").count(), 1, "{command}: {stderr}");
        assert!(stderr.contains(dir.to_str().unwrap()), "{command}: {stderr}");
    }
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}
