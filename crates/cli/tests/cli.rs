//! The `somnus` binary end to end: the demo's determinism, the documented JSON keys of
//! `sim offload`, and clear errors on bad input.
//!
//! Method: each test runs the built binary as a separate process on files in a fresh
//! scratch directory and checks its exit status, stdout and stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn somnus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_somnus")).args(args).output().expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("somnus-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    entries.sort();
    entries
}

#[test]
fn the_same_seed_gives_a_byte_identical_report() {
    // Goal: `somnus sim demo --seed N --report DIR` writes the same bytes every time (CSV,
    // JSON, text and SVG), and a different seed writes a different report.
    let dir = scratch("determinism");
    let (first, second, other) = (dir.join("a"), dir.join("b"), dir.join("c"));
    for (seed, out) in [("7", &first), ("7", &second), ("8", &other)] {
        ok(&somnus(&[
            "sim",
            "demo",
            "--seed",
            seed,
            "--hours",
            "2",
            "--quiet",
            "--report",
            out.to_str().unwrap(),
        ]));
    }
    let (a, b, c) = (files(&first), files(&second), files(&other));
    assert!(a.len() >= 12, "report files: {:?}", a.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert!(a.iter().any(|(name, _)| name.ends_with(".svg")));
    assert_eq!(a, b, "two runs of seed 7 differ");
    let summary = |files: &[(String, Vec<u8>)]| {
        files.iter().find(|f| f.0 == "summary.json").unwrap().1.clone()
    };
    assert_ne!(summary(&a), summary(&c), "seeds 7 and 8 gave the same report");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sim_offload_json_has_one_object_per_configuration_with_the_documented_keys() {
    // Goal: the JSON of `sim offload` has the keys the issue names, for each of the
    // four configurations, with the baseline at 100 %. Method: a synthetic trace
    // written as MSR CSV by `trace generate`, replayed.
    let dir = scratch("json");
    let trace = dir.join("synthetic.csv");
    let config = dir.join("generator.toml");
    std::fs::write(
        &config,
        "servers = 2\nvolumes_per_server = 2\nduration_s = 7200.0\nmean_rate_per_s = 0.5\n",
    )
    .unwrap();
    ok(&somnus(&[
        "trace",
        "generate",
        "--format",
        "msr",
        "--config",
        config.to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
    ]));
    let stdout =
        ok(&somnus(&["sim", "offload", "--trace", trace.to_str().unwrap(), "--json", "--quiet"]));
    let document: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(document["schema"], "somnus-offload");
    assert_eq!(document["schema_version"], 1);
    assert_eq!(document["somnus_version"], env!("CARGO_PKG_VERSION"));
    let file = &document["input"]["trace_files"][0];
    assert_eq!(file["path"], trace.to_str().unwrap());
    assert_eq!(file["size_bytes"], std::fs::metadata(&trace).unwrap().len());
    assert_eq!(file["format"], "msr");
    assert_eq!(document["window"]["warmup_s"], 0.0);
    assert_eq!(document["topology"]["source"], "built-in msr-cambridge");
    assert_eq!(document["topology"]["logger_host"], "any");
    let configs = document["configs"].as_array().unwrap();
    let names: Vec<&str> = configs.iter().map(|c| c["config"].as_str().unwrap()).collect();
    assert_eq!(names, ["baseline", "vanilla", "machine", "rack"]);
    for config in configs {
        for key in [
            "energy_pct",
            "mean_power_pct",
            "peak_power_pct",
            "spinup_delayed_reads_pct",
            "spinup_delayed_writes_pct",
            "writes_offloaded_pct",
            "remote_reads_pct",
            "network_bytes",
        ] {
            assert!(config[key].is_number(), "{} lacks {key}", config["config"]);
        }
        for kind in ["read_ms", "write_ms"] {
            for stat in ["p50", "mean", "p95", "p99", "max"] {
                assert!(config[kind][stat].is_number(), "{} lacks {kind}.{stat}", config["config"]);
            }
        }
    }
    assert_eq!(configs[0]["energy_pct"].as_f64(), Some(100.0));
    let only_rack = ok(&somnus(&[
        "sim",
        "offload",
        "--trace",
        trace.to_str().unwrap(),
        "--json",
        "--quiet",
        "--config",
        "rack",
    ]));
    let only_rack: serde_json::Value = serde_json::from_str(&only_rack).unwrap();
    assert_eq!(only_rack["configs"].as_array().unwrap().len(), 1);
    assert_eq!(only_rack["configs"][0], configs[3], "rack alone equals rack among all");
    assert_documented(&document, "somnus-offload");
    let stats = ok(&somnus(&["trace", "stats", trace.to_str().unwrap(), "--json"]));
    assert_documented(&serde_json::from_str(&stats).unwrap(), "somnus-trace-stats");
    let trace_arg = trace.to_str().unwrap();
    let bench = ["bench", "offload", "--trace", trace_arg, "--repeat", "1", "--json"];
    let bench = ok(&somnus(&[&bench[..], &["--records-min", "1000"]].concat()));
    assert_documented(&serde_json::from_str(&bench).unwrap(), "somnus-bench-offload");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Checks that the README's *JSON documents* section names every key of `document`.
fn assert_documented(document: &serde_json::Value, schema: &str) {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"),
    )
    .unwrap();
    let start = readme.find("## JSON documents").expect("README has a JSON documents section");
    let end = readme[start + 3..].find("\n## ").map_or(readme.len(), |at| start + 3 + at);
    // The words inside backticks: `configs[]`, `read_ms`, `topology.rtt_ms`, ...
    let words: std::collections::BTreeSet<&str> = readme[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|quoted| quoted.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .collect();
    let mut keys = Vec::new();
    all_keys(document, &mut keys);
    assert_eq!(document["schema"], schema);
    for key in keys {
        assert!(words.contains(key.as_str()), "README's JSON documents lack `{key}` of {schema}");
    }
}

fn all_keys(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map {
                out.push(key.clone());
                all_keys(inner, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|item| all_keys(item, out)),
        _ => {}
    }
}

#[test]
fn bad_input_gets_an_error_that_names_it() {
    // Goal: a missing file, a malformed line, a day outside the trace and a bad
    // topology each fail with a non-zero status and a message naming what and where.
    let dir = scratch("errors");
    let missing = dir.join("missing.csv");
    let output = somnus(&["sim", "offload", "--trace", missing.to_str().unwrap(), "--quiet"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing.csv"));

    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "128166372000000000,hm,0,Read,0,4096,1\n128166372000010000,hm,0,Write,4k,4096,1\n",
    )
    .unwrap();
    let output = somnus(&["sim", "offload", "--trace", bad.to_str().unwrap(), "--quiet"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("bad.csv:2") && stderr.contains("Offset"), "{stderr}");
    let skipped = somnus(&[
        "sim",
        "offload",
        "--trace",
        bad.to_str().unwrap(),
        "--quiet",
        "--skip-bad",
        "--config",
        "baseline",
    ]);
    assert!(skipped.status.success(), "{}", String::from_utf8_lossy(&skipped.stderr));
    let said = somnus(&["sim", "offload", "--trace", bad.to_str().unwrap(), "--skip-bad"]);
    let said = String::from_utf8_lossy(&said.stderr);
    assert!(said.contains("skipped 1 malformed or out-of-order record(s)"), "{said}");
    let json = somnus(&["trace", "stats", bad.to_str().unwrap(), "--skip-bad", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["trace_files"][0]["records_skipped"], 1);

    let generator = dir.join("absolute.toml");
    std::fs::write(
        &generator,
        "start_unix_s = 1172163600
",
    )
    .unwrap();
    let output =
        somnus(&["sim", "demo", "--generator", generator.to_str().unwrap(), "--hours", "1"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("absolute.toml: start_unix_s is set"), "{stderr}");

    let good = dir.join("good.csv");
    std::fs::write(&good, "128166372000000000,hm,0,Read,0,4096,1\n").unwrap();
    let output =
        somnus(&["sim", "offload", "--trace", good.to_str().unwrap(), "--quiet", "--day", "9"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("2007-02-22"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let topology = dir.join("topology.toml");
    std::fs::write(&topology, "[defaults]\n").unwrap();
    let output = somnus(&[
        "sim",
        "offload",
        "--trace",
        good.to_str().unwrap(),
        "--quiet",
        "--topology",
        topology.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("topology.toml"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_demo_prints_all_four_configurations() {
    let stdout = ok(&somnus(&["sim", "demo", "--hours", "1", "--quiet"]));
    for name in ["baseline", "vanilla", "machine", "rack"] {
        assert!(stdout.lines().any(|line| line.starts_with(name)), "no {name} row in:\n{stdout}");
    }
}

#[test]
fn a_converted_trace_replays_exactly_like_its_sources() {
    // Goal: `trace convert` loses nothing the simulator uses: the MSR set replayed from
    // its binary conversion gives the same JSON, byte for byte, as from the CSV files.
    let Some(dir) = somnus_testkit::traces_dir() else { return };
    let scratch = scratch("convert");
    let sources: Vec<String> =
        ["rsrch_1.csv", "hm_0.excerpt7016.csv", "hm_1.writes-excerpt13069.csv"]
            .iter()
            .map(|name| dir.join("msr-csv").join(name).to_string_lossy().into_owned())
            .collect();
    let converted = scratch.join("msr.somnus");
    let mut args = vec!["trace", "convert"];
    args.extend(sources.iter().map(String::as_str));
    args.extend(["-o", converted.to_str().unwrap()]);
    ok(&somnus(&args));
    let mut from_csv = vec!["sim", "offload", "--json", "--quiet", "--trace"];
    from_csv.extend(sources.iter().map(String::as_str));
    let from_binary =
        ["sim", "offload", "--json", "--quiet", "--trace", converted.to_str().unwrap()];
    let results = |args: &[&str]| -> serde_json::Value {
        let document: serde_json::Value = serde_json::from_str(&ok(&somnus(args))).unwrap();
        serde_json::json!({"window": document["window"], "configs": document["configs"]})
    };
    assert_eq!(results(&from_csv), results(&from_binary));
    let _ = std::fs::remove_dir_all(&scratch);
}

/// `somnus bench ec --json`: one object per measurement with the documented keys, every
/// implementation for both operations, and the XOR at ratio 1. A tiny run (4 KiB
/// shards, one round of a millisecond): this checks the output, not the speed.
#[test]
fn bench_ec_json_has_the_documented_keys_for_every_implementation() {
    let out = ok(&somnus(&[
        "bench",
        "ec",
        "--code",
        "4+2",
        "--shard-bytes",
        "4KiB",
        "--rounds",
        "1",
        "--round-ms",
        "1",
        "--json",
    ]));
    let document: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(document["schema"], "somnus-bench-ec");
    let measurements: Vec<serde_json::Value> =
        serde_json::from_value(document["measurements"].clone()).unwrap();
    let mut seen: Vec<(String, String)> = Vec::new();
    for m in measurements.iter().filter(|m| m["code"] == "3+1") {
        // r = 1: one data shard lost, a real reconstruction (not an error timed).
        assert!(m["gbps"].as_f64().unwrap() < 1000.0, "{m}");
    }
    let measurements: Vec<&serde_json::Value> =
        measurements.iter().filter(|m| m["code"] == "4+2").collect();
    for m in &measurements {
        assert_eq!(m["code"], "4+2");
        assert_eq!(m["shard_bytes"], 4096);
        assert!(m["gbps"].as_f64().unwrap() > 0.0, "{m}");
        seen.push((m["impl"].as_str().unwrap().to_owned(), m["op"].as_str().unwrap().to_owned()));
        if m["impl"] == "xor" {
            assert_eq!(m["ratio_to_xor"], 1.0);
        }
    }
    for implementation in ["somnus", "reed-solomon-erasure", "reed-solomon-simd"] {
        for op in ["encode", "reconstruct"] {
            assert!(
                seen.contains(&(implementation.to_owned(), op.to_owned())),
                "{implementation} {op}: {seen:?}"
            );
        }
    }
    assert!(seen.contains(&("xor".to_owned(), "encode".to_owned())));

    let bad = somnus(&["bench", "ec", "--code", "250+7"]);
    assert!(!bad.status.success());
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(message.contains("k + r <= 256") && message.contains("250"), "{message}");
    let bad = somnus(&["bench", "ec", "--shard-bytes", "3GiB"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unit must be B, KiB or MiB"));
}

/// `somnus bench cluster --json`: one size measured with the checker on and off, the
/// same simulated history both times and in a child process or not, the documented
/// keys; a cluster that cannot be
/// laid out is refused with the reason, not a panic. A tiny run: output, not speed.
#[test]
fn bench_cluster_measures_with_and_without_the_checker_and_refuses_bad_sizes() {
    let out = ok(&somnus(&[
        "bench",
        "cluster",
        "--servers",
        "9",
        "--virtual-secs",
        "2",
        "--repeat",
        "1",
        "--json",
    ]));
    let document: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(document["schema"], "somnus-bench-cluster");
    let sizes = document["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert_eq!(sizes[0]["history_checked"], true);
    assert_eq!(sizes[1]["history_checked"], false);
    for size in sizes {
        assert_eq!(size["servers"], 9);
        assert!(size["requests"].as_u64().unwrap() > 100, "{size}");
        assert!(size["requests_per_s"].as_f64().unwrap() > 0.0, "{size}");
        let ratio = size["requests_per_s"].as_f64().unwrap() / 300_000.0;
        assert!((size["ratio_to_target"].as_f64().unwrap() - ratio).abs() < 1e-9, "{size}");
    }
    // The checker only watches: the simulated history is the same.
    assert_eq!(sizes[0]["requests"], sizes[1]["requests"]);
    assert_eq!(sizes[0]["messages"], sizes[1]["messages"]);
    // Each seed ran in a child process; in this one, the same seed simulates the same.
    let one = ["bench", "cluster", "--servers", "9", "--virtual-secs", "2", "--repeat", "1"];
    let out = ok(&somnus(&[&one[..], &["--check", "off", "--in-process", "--json"]].concat()));
    let in_process: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(in_process["sizes"][0]["requests"], sizes[1]["requests"]);
    assert_eq!(in_process["sizes"][0]["disk_ios"], sizes[1]["disk_ios"]);
    // Too short for CPU time's 4 ms ticks: timed by the wall, and said so.
    assert!(ok(&somnus(&one)).contains("req/wall s"));
    // Replacements only when asked (their child processes are told too), and a share
    // that is not one is refused.
    assert_eq!(in_process["churn"], 0.0);
    let churn = ok(&somnus(&[&one[..], &["--check", "off", "--churn", "0.2", "--json"]].concat()));
    let churn: serde_json::Value = serde_json::from_str(&churn).unwrap();
    assert_eq!(churn["churn"], 0.2);
    assert_ne!(churn["sizes"][0]["messages"], sizes[1]["messages"], "{churn}");
    let bad = somnus(&[&one[..], &["--churn", "2"]].concat());
    let message = String::from_utf8_lossy(&bad.stderr);
    assert!(bad.status.code() == Some(2) && message.contains("not a share"), "{message}");

    for args in
        [&["bench", "cluster", "--servers", "10"][..], &["sim", "cluster", "--servers", "10"]]
    {
        let bad = somnus(args);
        assert_eq!(bad.status.code(), Some(1), "{args:?}");
        let message = String::from_utf8_lossy(&bad.stderr);
        assert!(message.contains("--servers 10") && message.contains("multiple"), "{message}");
        assert!(!message.contains("panicked"), "{message}");
    }
}

#[test]
fn bench_cluster_trace_gives_each_runs_figures_and_peak_memory() {
    // Goal: a geared trace replay's figures per checker setting, its peak resident
    // memory among them (issue 48's bound is on it). Method: a quarter hour of the
    // generator's trace, checked and not, in JSON and as text.
    let dir = scratch("bench-trace");
    let trace = dir.join("t.csv");
    ok(&somnus(&["trace", "generate", "--format", "msr", "-o", trace.to_str().unwrap()]));
    let args = ["bench", "cluster", "--trace", trace.to_str().unwrap(), "--trace-secs", "900"];
    let out = ok(&somnus(&[&args[..], &["--json"]].concat()));
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["schema"], "somnus-bench-cluster-trace", "{doc}");
    assert_eq!(doc["target_peak_resident_bytes"], 4e9);
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{doc}");
    assert_eq!(runs[0]["requests"], runs[1]["requests"]);
    for run in runs {
        assert_eq!(run["violations"], 0, "{run}");
        assert!(run["requests"].as_u64().unwrap() > 100, "{run}");
        // More than the binary's own few MB, far less than the bound for 15 minutes.
        let peak = run["peak_resident_bytes"].as_u64().unwrap();
        assert!(peak > 4 << 20 && peak < 1 << 30, "{run}");
    }
    let text = ok(&somnus(&[&args[..], &["--check", "off"]].concat()));
    assert!(text.contains("peak GB") && text.contains("within 4 GB resident"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn presets_are_listed_printed_and_generate_the_papers_volumes() {
    // Goal: `show preset` lists the built-in generator configs and prints one as TOML
    // that `trace generate --config` takes back (here cut to an hour); the volumes are
    // 004 Table 1's; an unknown preset, or a preset with --config, is refused clearly.
    let list = ok(&somnus(&["show", "preset"]));
    assert!(list.starts_with("msr-fast08 "), "{list}");
    let text = ok(&somnus(&["show", "preset", "msr-fast08"]));
    assert!(text.contains("duration_s = 604800.0"), "{text}");
    let dir = scratch("preset");
    let config = dir.join("hour.toml");
    std::fs::write(&config, text.replace("duration_s = 604800.0", "duration_s = 3600.0")).unwrap();
    let trace = dir.join("hour.bin");
    let (config, trace) = (config.to_str().unwrap(), trace.to_str().unwrap());
    ok(&somnus(&["trace", "generate", "--config", config, "--seed", "3", "-o", trace]));
    let stats = ok(&somnus(&["trace", "stats", trace]));
    assert!(stats.contains("36 volumes"), "{stats}");
    for volume in ["usr_2", "proj_4", "ts_0", "wdev_3"] {
        assert!(stats.lines().any(|line| line.starts_with(volume)), "{volume} in {stats}");
    }
    let output = somnus(&["trace", "generate", "--preset", "msr", "-o", trace]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("msr-fast08"));
    let output =
        somnus(&["trace", "generate", "--preset", "msr-fast08", "--config", config, "-o", trace]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--preset"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_day_the_trace_covers_in_part_is_measured_over_that_part() {
    // Goal: `--day` on the first day of a trace that starts at 17:00 measures from the
    // first request, says so on stderr, and shows the cut window in the heading.
    let dir = scratch("partial-day");
    let trace = dir.join("evening.csv");
    // 2007-02-22 17:00:00 and 17:06:00 UTC.
    std::fs::write(
        &trace,
        "128166372000000000,hm,0,Write,0,4096,1\n128166375600000000,hm,0,Read,0,4096,1\n",
    )
    .unwrap();
    let output = somnus(&["sim", "offload", "--trace", trace.to_str().unwrap(), "--day", "0"]);
    let (stdout, stderr) = (ok(&output), String::from_utf8_lossy(&output.stderr));
    assert!(stderr.contains("covered by the trace only in part"), "{stderr}");
    assert!(
        stdout.contains("2007-02-22 17:00:00 UTC .. 2007-02-22 17:06:00 UTC (0.10 h)"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `somnus ARGS`, reads `keep` bytes of its stdout and closes the pipe, as
/// `somnus ARGS | head -c KEEP` does; returns the exit status and stderr.
fn with_stdout_closed_after(args: &[&str], keep: usize) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_somnus"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut head = vec![0u8; keep];
    stdout.read_exact(&mut head).unwrap();
    drop(stdout);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (child.wait().unwrap(), stderr)
}

#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    // Goal: `somnus … | head` ends with status 0 and says nothing on stderr, as `cat`
    // does, instead of panicking ("failed printing to stdout") or failing. Method: each
    // command's stdout is read for a few bytes and closed before the command is done.
    let dir = scratch("pipe");
    let trace = dir.join("t.csv");
    ok(&somnus(&["trace", "generate", "--format", "msr", "-o", trace.to_str().unwrap()]));
    let trace = trace.to_str().unwrap();
    let torture = dir.join("torture");
    std::fs::create_dir(&torture).unwrap();
    ok(&somnus(&["logstore", "torture", torture.to_str().unwrap(), "--kills", "2", "--keep"]));
    let log_dir = std::fs::read_dir(&torture).unwrap().next().unwrap().unwrap().path();
    let log = log_dir.to_str().unwrap();
    let load = dir.join("load.csv");
    ok(&somnus(&["trace", "generate-load", "-o", load.to_str().unwrap()]));
    let load = load.to_str().unwrap();
    for args in [
        &["sim", "demo", "--quiet", "--hours", "2"][..],
        &["sim", "offload", "--quiet", "--trace", trace],
        &["trace", "stats", trace],
        &["trace", "stats", "--json", trace],
        &["show", "topology"],
        &["logstore", "inspect", "--segments", log],
        &["logstore", "verify", log],
        &["logstore", "verify", "--json", log],
        &["layout", "analyze", "--servers", "300"],
        &["sim", "cluster", "--seeds", "1..40"],
        &["sim", "gear", "--load", load],
        &["sim", "gear", "--load", load, "--json"],
        &["sim", "ioserver", "--nodes", "400"],
        &["sim", "sierra", "--trace", trace, "--duration", "900", "--timescale", "300"],
        &["sim", "sierra", "--trace", trace, "--duration", "900", "--json"],
        &["bench", "cluster", "--trace", trace, "--trace-secs", "900", "--check", "off"],
        &["bench", "cluster", "--trace", trace, "--trace-secs", "900", "--check", "off", "--json"],
        &["trace", "generate-load", "-o", load],
    ] {
        let (status, stderr) = with_stdout_closed_after(args, 8);
        assert!(status.success(), "{args:?}: {status}, stderr: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(!stderr.contains("error"), "{args:?} failed: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_user_error_prints_one_line_and_no_backtrace() {
    // Goal: with RUST_BACKTRACE=1 (common on developer machines) an ordinary error is
    // still one clear line: no stack backtrace, no "Caused by" list, no cause printed
    // twice. Method: an unknown profile name, and a topology file with a TOML error.
    let dir = scratch("user-error");
    let topology = dir.join("bad.toml");
    std::fs::write(&topology, "[defaults]\nstripe_unit_kib = \"x\"\n").unwrap();
    let compute = dir.join("compute.csv");
    std::fs::write(&compute, "# second,servers\n0,2\n60;1\n").unwrap();
    let compute = compute.to_str().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_somnus"))
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .output()
            .unwrap()
    };
    for (args, cause) in [
        (&["show", "profile", "nosuch"][..], "no built-in power profile named"),
        (
            &["sim", "offload", "--trace", "x.csv", "--topology", topology.to_str().unwrap()],
            "TOML parse error",
        ),
        (
            &["reproduce", "fast08", "--traces", dir.to_str().unwrap(), "-o", "unused"],
            "is not the shared trace set",
        ),
        (&["layout", "analyze", "--servers", "31"], "multiple of the replica count"),
        (&["layout", "analyze", "--servers", "9", "--racks", "2"], "2 racks cannot hold"),
        (&["sim", "cluster", "--racks", "2"], "--racks 2: 2 racks cannot hold 3 replicas"),
        (&["sim", "gear", "--load", "missing.csv"], "missing.csv"),
        (&["sim", "gear", "--load", topology.to_str().unwrap()], "expected a header starting with"),
        (&["trace", "generate-load", "-o", "/nonexistent/dir/load.csv"], "writing /nonexistent"),
        (&["sim", "sierra", "--trace", "missing.bin"], "missing.bin"),
        (&["sim", "sierra", "--trace", "missing.bin", "--timescale", "7"], "must divide a day"),
        (&["sim", "sierra", "--trace", "missing.bin", "--quiet-intervals", "1"], "at least 2"),
        (
            &["sim", "sierra", "--trace", "missing.bin", "--compute", "2"],
            "ecs2-storage-node has none",
        ),
        (
            &["sim", "sierra", "--trace", "x", "--compute", compute, "--server-profile", "obelix"],
            "compute.csv:3: expected `second,servers`",
        ),
        (&["sim", "sierra", "--trace", "x", "--compute", "nowhere.csv"], "nowhere.csv: neither"),
        (&["bench", "cluster", "--trace", "missing.bin"], "missing.bin"),
        (
            &["bench", "cluster", "--trace", "missing.bin", "--trace-secs", "0"],
            "must be a positive",
        ),
        (
            &["sim", "cluster", "--seeds", "1..1", "--broken", "ack-after-one-replica"],
            "seeds found violations",
        ),
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        assert_eq!(stderr.matches(cause).count(), 1, "{args:?}: cause not once:\n{stderr}");
        for noise in ["backtrace", "Caused by", "panicked", "  0: "] {
            assert!(!stderr.contains(noise), "{args:?} printed {noise:?}:\n{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The number before `label` in `text` ("1,234 bytes out" gives 1234).
fn count_before(text: &str, label: &str) -> u64 {
    let before = &text[..text.find(label).unwrap_or_else(|| panic!("no {label:?} in {text}"))];
    let number = before.trim_end().rsplit(' ').next().unwrap();
    number
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number before {label:?}: {text}"))
}

#[test]
fn convert_and_generate_report_the_bytes_they_wrote() {
    // Goal: the "bytes out" of `trace convert` and the bytes of `trace generate` are
    // the sizes of the files written, trailer included; and `-o` naming a directory
    // is refused up front, leaving nothing behind (no `DIR.partial`).
    let dir = scratch("bytes-out");
    for format in ["somnus", "msr"] {
        let out = dir.join(format!("g.{format}"));
        let output =
            somnus(&["trace", "generate", "--format", format, "-o", out.to_str().unwrap()]);
        ok(&output);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let size = std::fs::metadata(&out).unwrap().len();
        assert_eq!(count_before(&stderr, "bytes in"), size, "{format}: {stderr}");
    }
    let source = dir.join("g.msr");
    let converted = dir.join("c.somnus");
    let output =
        somnus(&["trace", "convert", source.to_str().unwrap(), "-o", converted.to_str().unwrap()]);
    ok(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(count_before(&stderr, "bytes out"), std::fs::metadata(&converted).unwrap().len());
    let target = dir.join("existing");
    std::fs::create_dir(&target).unwrap();
    let output =
        somnus(&["trace", "convert", source.to_str().unwrap(), "-o", target.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is a directory"));
    assert!(!dir.join("existing.partial").exists(), "a .partial file was left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_report_directory_fails_before_the_replay() {
    // Goal: `--report` naming a place that cannot be written fails at once with an
    // error naming it, before any simulation (no progress line on stderr), for `demo`
    // and `sim offload` alike. Method: a report path below a regular file.
    let dir = scratch("report-dir");
    let file = dir.join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let report = file.join("report");
    let trace = dir.join("t.csv");
    ok(&somnus(&["trace", "generate", "--format", "msr", "-o", trace.to_str().unwrap()]));
    for args in [
        &["sim", "demo", "--report", report.to_str().unwrap()][..],
        &[
            "sim",
            "offload",
            "--trace",
            trace.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ],
    ] {
        let output = somnus(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("report directory"), "{args:?}: {stderr}");
        assert!(!stderr.contains("simulating") && !stderr.contains("replaying"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn small_input_defects_get_clear_messages() {
    // Goal: an empty trace set is the same clear error in `trace stats` and in `sim
    // offload`; a topology whose rack names a server no volume is on is warned about;
    // a negative round trip is quoted as written, in its own unit; reports use the
    // documented lowercase names (raid1, not Raid1).
    let dir = scratch("small-defects");
    let empty = dir.join("empty.trace");
    std::fs::write(&empty, "").unwrap();
    let empty = empty.to_str().unwrap();
    for args in [
        &["trace", "stats", "--format", "replayer", empty][..],
        &["sim", "offload", "--format", "replayer", "--trace", empty],
    ] {
        let output = somnus(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("the trace set holds no requests"), "{args:?}: {stderr}");
    }
    let trace = dir.join("t.csv");
    let config = dir.join("g.toml");
    std::fs::write(&config, "servers = 1\nvolumes_per_server = 2\nduration_s = 600.0\n").unwrap();
    ok(&somnus(&[
        "trace",
        "generate",
        "--config",
        config.to_str().unwrap(),
        "--format",
        "msr",
        "-o",
        trace.to_str().unwrap(),
    ]));
    let topology_text = String::from_utf8(ok(&somnus(&["show", "topology"])).into_bytes()).unwrap();
    let topology = dir.join("topology.toml");
    let misspelt = topology_text.replace("\"hm\"", "\"s00\", \"hmm\"");
    std::fs::write(&topology, misspelt + "\n[[volume]]\nname = \"s00_9\"\ndisks = 6\n").unwrap();
    let report = dir.join("report");
    let output = somnus(&[
        "sim",
        "offload",
        "--quiet",
        "--trace",
        trace.to_str().unwrap(),
        "--topology",
        topology.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    ok(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("racks name servers no volume of the trace set is on"), "{stderr}");
    assert!(stderr.contains("\"hmm\" (rack1)"), "{stderr}");
    assert_eq!(stderr.matches("racks name").count(), 1, "one line for all: {stderr}");
    assert!(stderr.contains("volumes the trace set does not have, and are not used: \"s00_9\""));
    assert!(!stderr.contains("\"s00\""), "s00 has volumes: {stderr}");
    let volumes = std::fs::read_to_string(report.join("volumes.csv")).unwrap();
    assert!(volumes.contains(",raid1,") && !volumes.contains("Raid"), "{volumes}");
    let bad_rtt = dir.join("rtt.toml");
    std::fs::write(&bad_rtt, topology_text.replace("rtt_ms = 0.2", "rtt_ms = -0.2")).unwrap();
    let output = somnus(&[
        "sim",
        "offload",
        "--trace",
        trace.to_str().unwrap(),
        "--topology",
        bad_rtt.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("network.rtt_ms: must be a finite number >= 0, not -0.2"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reproduce_fast08_writes_one_report_with_the_papers_figures_beside() {
    // Goal: `reproduce fast08` on the shared traces (the synthetic seeds skipped, for
    // time) writes summary.md with each experiment next to the paper's figures, one
    // report directory per replay whose JSON says what produced it, and says nothing on
    // stderr with --quiet. Method: run it with --seeds 0.
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let dir = scratch("reproduce");
    let out = dir.join("fast08-results");
    let args = [
        "reproduce",
        "fast08",
        "--seeds",
        "0",
        "--quiet",
        "--traces",
        traces.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let output = somnus(&args);
    let stdout = ok(&output);
    assert!(stdout.contains("report written to"), "{stdout}");
    assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    for section in ["## The MSR set", "## Least and most idle day", "## The other real trace sets"]
    {
        assert!(summary.contains(section), "summary.md lacks {section}");
    }
    // The paper's least idle day energy (72 / 64 / 55 %) sits beside somnus's.
    assert!(summary.contains("| 72 |") && summary.contains("| 55 |"), "{summary}");
    assert!(!summary.contains("Seed 1's variants"), "no seeds ran: {summary}");
    let week: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("msr-week/summary.json")).unwrap())
            .unwrap();
    assert_eq!(week["schema"], "somnus-offload");
    assert_eq!(week["input"]["trace_files"].as_array().unwrap().len(), 3);
    assert!(out.join("msr-2007-02-26/fig8_read_response_time.svg").exists());
    assert!(!out.join("work").exists(), "the work directory is removed");
    // A stdout closed before the last line: the command still ends quietly with 0.
    let (status, stderr) = with_stdout_closed_after(&args, 0);
    assert!(status.success() && stderr.is_empty(), "{status}: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn layout_analyze_measures_sierra_table_1() {
    // Goal: `somnus layout analyze` reports, for every layout and gear, the servers kept
    // on as measured on the placement (equal to Sierra Table 1 where the formula holds),
    // with the documented JSON keys; the text form names whole gear groups. Method: the
    // 9- and 30-server clusters of Table 1, in JSON and text.
    for servers in ["9", "30"] {
        let json = ok(&somnus(&["layout", "analyze", "--servers", servers, "--json"]));
        let document: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_documented(&document, "somnus-layout-analysis");
        let layouts = document["layouts"].as_array().unwrap();
        assert_eq!(layouts.len(), 3);
        for layout in layouts {
            let name = layout["layout"].as_str().unwrap();
            for gear in layout["gears"].as_array().unwrap() {
                let on = gear["servers_on"].as_u64().unwrap();
                assert_eq!(gear["servers_kept_on"].as_array().unwrap().len() as u64, on);
                if name != "naive random" {
                    assert_eq!(gear["exact"], true, "{name} {gear}");
                    assert_eq!(on, gear["table1_servers_on"].as_u64().unwrap(), "{name} {gear}");
                }
            }
            assert_eq!(
                layout["rebuild"]["targets_min"], layout["rebuild"]["table1_parallelism"],
                "{name}"
            );
        }
    }
    let text = ok(&somnus(&["layout", "analyze", "--servers", "9", "--layout", "power-aware"]));
    assert!(text.contains("gear groups gg0 (3 servers)"), "{text}");
    assert!(text.contains("written to 3 servers in parallel (Table 1: 3)"), "{text}");
}

#[test]
fn sim_cluster_prints_a_line_per_seed_and_a_replay_command_for_a_failing_one() {
    // Goal: `somnus sim cluster` runs each seed of the cluster protocol under faults
    // and says so in one line each plus a summary; a broken protocol fails with the
    // command that replays the seed. Method: two clean seeds; one seed of the variant
    // that acknowledges after one replica.
    let output = somnus(&["sim", "cluster", "--seeds", "3..4"]);
    ok(&output);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("seed 3: ok:") && stdout.contains("seed 4: ok:"), "{stdout}");
    assert!(stdout.contains("2 seeds, 0 failing, 0 violations"), "{stdout}");
    // The faults injected, by kind, each seed's and summed (every kind named).
    assert!(stdout.contains("; faults injected: loss "), "{stdout}");
    let sum = stdout.lines().find(|l| l.starts_with("faults injected, by kind: "));
    let sum = sum.unwrap_or_else(|| panic!("no sum of faults: {stdout}"));
    for kind in ["loss", "duplication", "crash", "disk-error", "power-cut", "mds-crash"] {
        assert!(sum.contains(&format!("{kind} ")), "{kind} missing: {sum}");
    }
    let output = somnus(&["sim", "cluster", "--seeds", "5", "--broken", "ack-after-one-replica"]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("seed 5: FAIL") && stdout.contains("C3: write of"), "{stdout}");
    assert!(
        stdout.contains("replay: somnus sim cluster --seeds 5 --servers 9 --replicas 3")
            && stdout.contains("--broken ack-after-one-replica --trace"),
        "{stdout}"
    );
    let bad = somnus(&["sim", "cluster", "--faults", "crash,fire"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown fault \"fire\""));
    // On the core's model of a log, the replay names it; an unknown log is refused.
    let args = ["sim", "cluster", "--seeds", "5", "--broken", "ack-after-one-replica"];
    let output = somnus(&[&args[..], &["--logger", "model"]].concat());
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("--broken ack-after-one-replica --logger model --trace"), "{stdout}");
    let bad = somnus(&["sim", "cluster", "--logger", "paper"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("invalid value 'paper' for '--logger") && !stderr.contains("panicked"));
}

#[test]
fn sim_gear_studies_a_generated_load_with_documented_keys_and_names_bad_input() {
    // Goal: `trace generate-load` then `sim gear --json --report` runs end to end; every
    // JSON key is documented; the report holds Fig. 8a, 8b, 9a and the timelines;
    // a bad interval, an unknown workload and a malformed file are named.
    let dir = scratch("gear");
    let load = dir.join("load.csv");
    let load_s = load.to_str().unwrap();
    let said = ok(&somnus(&["trace", "generate-load", "-o", load_s, "--seed", "2"]));
    assert!(said.contains("holiday on day"), "{said}");
    let report = dir.join("report");
    let json = ok(&somnus(&[
        "sim",
        "gear",
        "--load",
        load_s,
        "--json",
        "--report",
        report.to_str().unwrap(),
    ]));
    let document: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_documented(&document, "somnus-gear");
    assert_eq!(document["workloads"].as_array().unwrap().len(), 2);
    let names: Vec<String> = files(&report).into_iter().map(|(name, _)| name).collect();
    for wanted in [
        "fig8a-prediction-error.svg",
        "fig8b-gear-error.csv",
        "fig9a-power.svg",
        "timeline-surprise.csv",
    ] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} missing from {names:?}");
    }
    let text = ok(&somnus(&["sim", "gear", "--load", load_s, "--workload", "diurnal"]));
    assert!(text.contains("Sierra Fig. 8a") && text.contains("diurnal"), "{text}");

    let output = somnus(&["sim", "gear", "--load", load_s, "--window-s", "3600"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("give --window-s 1800"));
    let output = somnus(&["sim", "gear", "--load", load_s, "--interval-s", "1000"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--interval-s 1000"));
    let output = somnus(&["sim", "gear", "--load", load_s, "--workload", "w99"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"w99\" is not in the load file"));
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "workload,window_index,window_end_us,block_req_count,read_block_req_count,write_block_req_count\nw1,0,1,x,0,0\n").unwrap();
    let output = somnus(&["sim", "gear", "--load", bad.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("bad.csv:2: field block_req_count"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_ioserver_prints_001_table_2() {
    // Goal: the command prints the paper's watts beside the profiles' and they agree.
    let json = ok(&somnus(&["sim", "ioserver", "--json"]));
    let document: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_documented(&document, "somnus-ioserver");
    let rows = document["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 12);
    assert!(rows.iter().all(|r| r["watts"] == r["paper_watts"]), "{rows:?}");
}

#[test]
fn sim_sierra_gears_a_trace_through_the_cluster_simulation() {
    // Goal: `sim sierra` replays a real trace all on and with the MDS's scheduler: the
    // geared run sleeps servers (less energy, shifts, primaries migrated), loses and
    // fails nothing, the checker finds nothing, every JSON key is documented and the
    // report is written; a timescale that does not divide a day is named.
    let Some(traces) = somnus_testkit::traces_dir() else { return };
    let trace = traces.join("msr-csv").join("rsrch_1.csv");
    let trace = trace.to_str().unwrap();
    let dir = scratch("sierra");
    let report = dir.join("report");
    let args = [
        "sim",
        "sierra",
        "--trace",
        trace,
        "--duration",
        "20000",
        "--timescale",
        "600",
        "--json",
        "--report",
        report.to_str().unwrap(),
    ];
    let document: serde_json::Value = serde_json::from_str(&ok(&somnus(&args))).unwrap();
    assert_documented(&document, "somnus-sierra");
    let (all_on, geared) = (&document["all_on"], &document["geared"]);
    assert_eq!(all_on["energy_share"], 1.0);
    let share = geared["energy_share"].as_f64().unwrap();
    assert!(share < 0.8, "the geared run slept too little: {share}");
    assert!(geared["shifts"].as_u64().unwrap() >= 1 && geared["migrations"].as_u64().unwrap() > 0);
    for run in [all_on, geared] {
        assert_eq!(run["errors"], 0, "{run}");
        assert_eq!(run["unfinished"], 0, "{run}");
        assert_eq!(run["servers_failed"], 0, "{run}");
        assert_eq!(run["violations"].as_array().unwrap().len(), 0, "{run}");
        assert_eq!(run["write"]["count"], all_on["write"]["count"]);
    }
    let names: Vec<String> = files(&report).into_iter().map(|(name, _)| name).collect();
    for wanted in ["runs.csv", "timeline.csv", "gears.svg", "power.svg", "latency-ccdf.svg"] {
        assert!(names.iter().any(|n| n == wanted), "{wanted} missing from {names:?}");
    }
    let output = somnus(&["sim", "sierra", "--trace", trace, "--timescale", "7"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("timescale 7 s: must divide a day"));
    std::fs::remove_dir_all(&dir).unwrap();
}
