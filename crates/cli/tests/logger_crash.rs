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
    // What it reports is in words, never a Rust debug dump.
    let stderr = String::from_utf8_lossy(&early.stderr);
    for dump in ["Some(", "None", "Append {", "Invalidate {", "DeleteAll"] {
        assert!(!stderr.contains(dump), "{dump} in {stderr}");
    }
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

/// The text of a command's stderr.
fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Whether a directory holds nothing.
fn is_empty_dir(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

#[test]
fn a_kill_before_the_log_exists_is_a_legitimate_round() {
    // Goal: the short runs: a writer killed before it created the log has
    // acknowledged nothing, so the round passes (the next one creates the log). With
    // --max-run-ms 0 every kill lands at once; with 1 ms most do, for every seed.
    let dir = scratch("short-runs");
    let output = somnus(&[
        "logstore",
        "torture",
        dir.to_str().unwrap(),
        "--kills",
        "3",
        "--max-run-ms",
        "0",
    ]);
    let [kills, _, lost, wrong] = tally(&output);
    assert!(output.status.success(), "{}", stderr_of(&output));
    assert_eq!((kills, lost, wrong), (3, 0, 0));
    assert!(stderr_of(&output).contains("before the log existed"), "{}", stderr_of(&output));
    assert!(is_empty_dir(&dir), "the campaign left its directory behind");
    for seed in 1..=6 {
        let seed = seed.to_string();
        let output = somnus(&[
            "logstore",
            "torture",
            dir.to_str().unwrap(),
            "--kills",
            "3",
            "--max-run-ms",
            "1",
            "--seed",
            &seed,
        ]);
        assert!(output.status.success(), "seed {seed}: {}", stderr_of(&output));
        assert_eq!(tally(&output)[2..], [0, 0], "seed {seed}");
        assert!(is_empty_dir(&dir), "seed {seed}: the campaign left its directory behind");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_campaign_removes_its_directory_when_it_fails_unless_kept() {
    // Goal: every exit path cleans up: a writer that fails (a deliberate fault) ends the
    // campaign with its error and status 1, and the campaign's subdirectory is gone;
    // with --keep it stays for inspection.
    let dir = scratch("failing-writer");
    // Long runs, so that the writer fails before it is killed (its failure ends the
    // round at once).
    let failing = |keep: bool| {
        let mut args = vec!["logstore", "torture", dir.to_str().unwrap(), "--kills", "50"];
        args.extend(["--max-run-ms", "60000", "--inject", "writer-fails"]);
        if keep {
            args.push("--keep");
        }
        somnus(&args)
    };
    let output = failing(false);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
    assert!(stderr_of(&output).contains("the writer failed"), "{}", stderr_of(&output));
    assert!(is_empty_dir(&dir), "the campaign left its directory behind");
    let kept = failing(true);
    assert_eq!(kept.status.code(), Some(1));
    assert!(!is_empty_dir(&dir), "--keep removed the directory");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_campaign_of_no_kills_is_refused_by_argument_parsing() {
    // Goal: `--kills 0` tests nothing: it is refused with a clear message before
    // anything is created, never answered with a debug dump and wrong=1.
    let dir = scratch("no-kills");
    let output = somnus(&["logstore", "torture", dir.to_str().unwrap(), "--kills", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr_of(&output));
    let stderr = stderr_of(&output);
    assert!(stderr.contains("--kills") && stderr.contains("at least 1"), "{stderr}");
    assert!(!stderr.contains('{'), "{stderr}");
    assert!(output.stdout.is_empty());
    assert!(is_empty_dir(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn torture_and_bench_refuse_a_directory_that_does_not_exist() {
    // Goal: DIR is where the user wants the test to run: if it is missing (or a file),
    // the command says so, naming it, and creates nothing (no parents either).
    let dir = scratch("missing-parent");
    let missing = dir.join("missing").join("deeper");
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let commands: [&[&str]; 2] = [&["torture", "--kills", "1"], &["bench", "--seconds", "0.1"]];
    for command in commands {
        for target in [&missing, &file] {
            let mut args = vec!["logstore", command[0], target.to_str().unwrap()];
            args.extend_from_slice(&command[1..]);
            let output = somnus(&args);
            assert_eq!(output.status.code(), Some(1), "{args:?}: {}", stderr_of(&output));
            let stderr = stderr_of(&output);
            assert!(stderr.contains(target.to_str().unwrap()), "{args:?}: {stderr}");
            let reason = if target == &file { "is a file" } else { "does not exist" };
            assert!(stderr.contains(reason), "{args:?}: {stderr}");
        }
    }
    assert!(!dir.join("missing").exists(), "a missing parent was created");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inspect_and_verify_of_a_file_say_it_is_a_file() {
    // Goal: a regular file given as the log directory is named as a file, not as a
    // directory that does not exist.
    let dir = scratch("file-not-dir");
    let file = dir.join("seg-0000000000000001.log");
    std::fs::write(&file, b"x").unwrap();
    for command in ["inspect", "verify"] {
        let output = somnus(&["logstore", command, file.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(1), "{command}");
        let stderr = stderr_of(&output);
        assert!(stderr.contains("is a file, not a log directory"), "{command}: {stderr}");
        assert!(!stderr.contains("no such directory"), "{command}: {stderr}");
        assert!(stderr.contains(file.to_str().unwrap()), "{command}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_help_shows_defaults_that_can_be_typed_back() {
    // Goal: the list flags' defaults are shown in the syntax the flags accept
    // (comma-separated), and that text is accepted as typed (parsing passes: the
    // command then fails on its missing directory, status 1, not a usage error, 2).
    let help = somnus(&["logstore", "bench", "--help"]);
    let text = String::from_utf8(help.stdout).unwrap();
    assert!(text.contains("[default: 4096,65536]"), "{text}");
    assert!(text.contains("[default: 1,8,64]"), "{text}");
    let output = somnus(&[
        "logstore",
        "bench",
        "/nonexistent/somnus-bench",
        "--sizes",
        "4096,65536",
        "--appenders",
        "1,8,64",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr_of(&output));
}

/// The words in backticks in the README's section on `somnus logstore COMMAND`.
fn readme_words(command: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let heading = format!("### `somnus logstore {command}");
    let start = readme.find(&heading).unwrap();
    let end = readme[start + 4..].find("\n### ").map_or(readme.len(), |at| start + 4 + at);
    let section = &readme[start..end];
    section.split('`').skip(1).step_by(2).map(|word| word.trim_matches('"').to_string()).collect()
}

/// Every key of a JSON value, at any depth.
fn keys(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                out.push(key.clone());
                keys(inner, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| keys(item, out)),
        _ => {}
    }
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let output = somnus(args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!("{args:?}: {error}: {}", String::from_utf8_lossy(&output.stdout))
    })
}

#[test]
fn json_output_uses_the_documented_lowercase_names() {
    // Goal: the JSON of `verify --json` and `inspect --json` carries the documented
    // names (`clean`, `torn`, `damaged`, `unwritten`, `bad_header`; `snapshot`, `scan`),
    // never Rust's (`Clean`, `Scan { .. }`), and the README documents every key and
    // every such value.
    let dir = scratch("json");
    let store = LogStore::open(
        Arc::new(FsDisk::new(&dir).unwrap()),
        Options { segment_bytes: 16 << 10, ..Options::default() },
    )
    .unwrap();
    for i in 0..12u64 {
        let range = ByteRange::new(i * 4096, 4096);
        store.append(OwnerId(1), ObjectId(1), range, Version(i + 1), &[i as u8; 4096]).unwrap();
    }
    drop(store); // A crash: no snapshot.
    let segments = segment_files(&dir);
    assert!(segments.len() >= 4, "{segments:?}");
    let cut = |path: &PathBuf, len: u64| {
        std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
    };
    cut(&segments[1], 30); // a sealed segment without its header: bad_header
    cut(&segments[2], 1000); // a sealed segment cut short: damaged
    let last = segments.last().unwrap();
    cut(last, 64 + 100); // the last segment's torn tail: torn
    let dir_text = dir.to_str().unwrap();
    let verify = json_of(&["logstore", "verify", dir_text, "--json"]);
    let states: Vec<&str> = verify["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states[..3], ["clean", "bad_header", "damaged"], "{verify}");
    assert_eq!(states.last(), Some(&"torn"), "{verify}");
    assert_eq!(verify["segments"][2]["offset"], 64);
    assert_eq!(verify["damaged"], true);

    let inspect = json_of(&["logstore", "inspect", dir_text, "--json"]);
    assert_eq!(inspect["recovery"], "scan", "{inspect}");
    assert_eq!(inspect["snapshot_refused"], serde_json::Value::Null);

    // An unwritten last segment, and a clean close's snapshot.
    let store = LogStore::open(Arc::new(FsDisk::new(&dir).unwrap()), Options::default());
    assert!(store.is_ok());
    drop(store);
    let next = dir.join(segment_file_name(SegmentId(1000)));
    std::fs::write(&next, [0u8; 20]).unwrap();
    let unwritten = json_of(&["logstore", "verify", dir_text, "--json"]);
    let last_state = unwritten["segments"].as_array().unwrap().last().unwrap()["state"].clone();
    assert_eq!(last_state, "unwritten", "{unwritten}");
    std::fs::remove_file(&next).unwrap();
    let healthy = scratch("json-healthy");
    make_log(&healthy);
    let snapshot = json_of(&["logstore", "inspect", healthy.to_str().unwrap(), "--json"]);
    assert_eq!(snapshot["recovery"], "snapshot", "{snapshot}");

    for (command, outputs, values) in [
        (
            "verify",
            vec![&verify, &unwritten],
            vec!["clean", "torn", "damaged", "unwritten", "bad_header"],
        ),
        ("inspect", vec![&inspect, &snapshot], vec!["created", "snapshot", "scan"]),
    ] {
        let documented = readme_words(command);
        let mut found = Vec::new();
        outputs.iter().for_each(|output| keys(output, &mut found));
        found.extend(values.iter().map(|value| value.to_string()));
        for word in found {
            assert!(documented.contains(&word), "README's {command} section lacks `{word}`");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&healthy).unwrap();
}
