//! Throughput measurements, ignored by default because they time real work:
//! `cargo test -p somnus-trace --release --test throughput -- --ignored --nocapture`.
//! They print lines (requests) per second; they assert only that the counts are right.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Timing needs the real clock, which the library never reads.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use somnus_trace::{
    BinaryWriter, ReadOptions, SyntheticConfig, SyntheticTrace, TraceReader, TraceSet,
};

/// Copies of rsrch_1 laid end to end (each shifted past the previous one).
const COPIES: u64 = 100;

fn looped_msr_file() -> Option<(PathBuf, u64)> {
    let dir = somnus_testkit::traces_dir()?;
    let text = std::fs::read_to_string(dir.join("msr-csv/rsrch_1.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let first: u64 = lines[0].split(',').next().unwrap().parse().unwrap();
    let last: u64 = lines[lines.len() - 1].split(',').next().unwrap().parse().unwrap();
    let path = std::env::temp_dir().join(format!("somnus-throughput-{}.csv", std::process::id()));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for copy in 0..COPIES {
        for line in &lines {
            let (time, rest) = line.split_once(',').unwrap();
            let time: u64 = time.parse().unwrap();
            writeln!(out, "{},{rest}", time + copy * (last - first + 1)).unwrap();
        }
    }
    out.flush().unwrap();
    Some((path, COPIES * lines.len() as u64))
}

#[test]
#[ignore = "timing; run with --ignored --release"]
fn parse_throughput() {
    // Goal: measure MSR CSV, merged-set and binary read rates and the generator rate.
    // Method: time each over the same 1.4 M requests (rsrch_1 looped 100 times).
    let Some((csv, lines)) = looped_msr_file() else { return };
    let started = Instant::now();
    let count =
        TraceReader::open(&csv, None, false).unwrap().inspect(|r| assert!(r.is_ok())).count()
            as u64;
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(count, lines);
    println!(
        "msr csv reader: {lines} lines in {seconds:.3} s = {:.2} M lines/s",
        lines as f64 / seconds / 1e6
    );

    let set = TraceSet::open(std::slice::from_ref(&csv), &ReadOptions::default()).unwrap();
    let started = Instant::now();
    let count = set.requests().inspect(|r| assert!(r.is_ok())).count() as u64;
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(count, lines);
    println!("msr csv trace set requests(): {:.2} M requests/s", lines as f64 / seconds / 1e6);

    let binary = csv.with_extension("somnus");
    let file = std::io::BufWriter::new(std::fs::File::create(&binary).unwrap());
    let mut writer = BinaryWriter::new(file, set.volumes(), set.summary().time_base).unwrap();
    for request in set.requests() {
        writer.write(&request.unwrap()).unwrap();
    }
    let bytes = writer.bytes_written();
    writer.finish().unwrap();
    let started = Instant::now();
    let count =
        TraceReader::open(&binary, None, false).unwrap().inspect(|r| assert!(r.is_ok())).count()
            as u64;
    let seconds = started.elapsed().as_secs_f64();
    assert_eq!(count, lines);
    println!(
        "somnus binary reader: {:.2} M requests/s ({:.1} bytes/request; csv {:.1})",
        lines as f64 / seconds / 1e6,
        bytes as f64 / lines as f64,
        std::fs::metadata(&csv).unwrap().len() as f64 / lines as f64
    );
    std::fs::remove_file(&csv).unwrap();
    std::fs::remove_file(&binary).unwrap();

    let config = SyntheticConfig { mean_rate_per_s: 20.0, ..SyntheticConfig::default() };
    let started = Instant::now();
    let generated = SyntheticTrace::new(&config, 7).unwrap().count();
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "synthetic generator: {generated} requests, {:.2} M requests/s",
        generated as f64 / seconds / 1e6
    );
}
