//! `somnus bench offload`: end-to-end simulated requests per second of the rack-level
//! off-load configuration, and trace parse throughput beside `wc -l`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_sim::engine::{ConfigKind, Engine};
use somnus_sim::replay::{Window, peak_loads};
use somnus_trace::{ReadOptions, TraceReader, TraceSet};

use super::stats::time;
use crate::sim::replay::{LOAD_WINDOW, load_topology};

#[derive(Args)]
pub(crate) struct BenchOffloadArgs {
    /// The trace file: an MSR Cambridge CSV (plain, not gzip).
    #[arg(long = "trace", value_name = "FILE")]
    trace: PathBuf,
    /// The real files are small (thousands of lines), which would time process start-up
    /// and set-up rather than throughput; so the file is looped, each copy shifted in
    /// time past the previous one, into a temporary file of at least this many records,
    /// and every measurement runs on that one file.
    #[arg(long, default_value_t = 1_000_000)]
    records_min: u64,
    /// Runs of each measurement; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Writes `copies` of an MSR CSV back to back, each shifted in time to start a second
/// after the previous one ended, so that the result is one valid, time-ordered trace.
fn loop_msr(source: &Path, target: &Path, copies: u64) -> Result<u64> {
    let text =
        std::fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    let stamp = |line: &str| -> Result<u64> {
        let field = line.split(',').next().unwrap_or("");
        field
            .parse::<u64>()
            .with_context(|| format!("{}: not MSR CSV (timestamp {field:?})", source.display()))
    };
    let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
        bail!("{} is empty", source.display())
    };
    // FILETIME ticks are 100 ns: a copy follows the previous one a second later.
    let period = stamp(last)? - stamp(first)? + 10_000_000;
    let mut out = std::io::BufWriter::new(std::fs::File::create(target)?);
    for copy in 0..copies {
        for line in &lines {
            let (time, rest) = line.split_once(',').unwrap_or((line, ""));
            let time: u64 = time.parse()?;
            writeln!(out, "{},{rest}", time + copy * period)?;
        }
    }
    out.flush()?;
    Ok(copies * lines.len() as u64)
}

pub(crate) fn run(args: &BenchOffloadArgs) -> Result<()> {
    if args.repeat == 0 || args.repeat > 1000 {
        bail!("--repeat must be between 1 and 1000");
    }
    if args.records_min > 100_000_000 {
        bail!("--records-min is at most 100,000,000");
    }
    let source_lines = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading {}", args.trace.display()))?
        .lines()
        .filter(|line| !line.trim().is_empty())
        .count() as u64;
    let copies = args.records_min.div_ceil(source_lines.max(1)).max(1);
    let dir = std::env::temp_dir().join(format!("somnus-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let looped = dir.join("looped.csv");
    let result =
        loop_msr(&args.trace, &looped, copies).and_then(|_| measure(args, &looped, copies));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(args: &BenchOffloadArgs, path: &Path, copies: u64) -> Result<()> {
    let lines = count_lines(path)?;
    let wc = time(args.repeat, || {
        let status =
            Command::new("wc").arg("-l").arg(path).stdout(std::process::Stdio::null()).status()?;
        if status.success() { Ok(()) } else { bail!("wc -l failed") }
    })?;
    let mut records = 0u64;
    let parse = time(args.repeat, || {
        records = 0;
        for request in TraceReader::open(path, None, false)? {
            request?;
            records += 1;
        }
        Ok(())
    })?;
    let topology = load_topology(None, &[])?;
    let mut simulated = 0u64;
    let end_to_end = time(args.repeat, || {
        simulated = replay_rack(&topology, path)?;
        Ok(())
    })?;
    let rate = |count: u64, d: Duration| count as f64 / d.as_secs_f64().max(1e-9);
    // wc runs in a child process: only its wall time is known.
    let figures = Figures {
        copies,
        records,
        wc_lines_per_s: rate(lines.max(1), wc.0),
        parse: (rate(records, parse.0), parse.1.map(|d| rate(records, d))),
        end_to_end: (rate(simulated, end_to_end.0), end_to_end.1.map(|d| rate(simulated, d))),
    };
    print_figures(args, &figures)
}

/// `wc -l` of a file: the reference the parser is measured against.
fn count_lines(path: &Path) -> Result<u64> {
    let output = Command::new("wc").arg("-l").arg(path).output().context("running wc -l")?;
    if !output.status.success() {
        bail!("wc -l {} failed: {}", path.display(), String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).split_whitespace().next().unwrap_or("0").parse()?)
}

/// Replays a trace file whole under rack-level off-load (open, pre-scan, size arrays,
/// replay); returns the requests simulated.
fn replay_rack(topology: &somnus_sim::topology::Topology, path: &Path) -> Result<u64> {
    let set = TraceSet::open(&[path.to_path_buf()], &ReadOptions::default())?;
    let Some(window) = Window::whole(set.summary()) else {
        bail!("{} has no requests", path.display())
    };
    let names: Vec<String> = set.volumes().iter().map(|(_, n)| n.to_string()).collect();
    let loads = peak_loads(set.requests(), names.len(), LOAD_WINDOW)?;
    let layout = topology.layout_for_load(&names, &loads)?;
    let mut failure = None;
    let requests =
        window.sim_requests(set.requests()).map_while(|r| r.map_err(|e| failure = Some(e)).ok());
    let measured =
        Engine::new(&layout, ConfigKind::Rack, window.run_window()).run(requests, &mut |_| {})?;
    if let Some(error) = failure {
        return Err(error.into());
    }
    Ok(measured.read_latency_ns.len() + measured.write_latency_ns.len())
}

/// What one benchmark run measured: rates per wall second and, where known, per CPU
/// second.
struct Figures {
    copies: u64,
    records: u64,
    wc_lines_per_s: f64,
    parse: (f64, Option<f64>),
    end_to_end: (f64, Option<f64>),
}

fn print_figures(args: &BenchOffloadArgs, f: &Figures) -> Result<()> {
    let ((parse_wall, parse_cpu), (e2e_wall, e2e_cpu)) = (f.parse, f.end_to_end);
    if args.json {
        let figures = serde_json::json!({
            "trace": args.trace.display().to_string(),
            "copies": f.copies,
            "records": f.records,
            "repeat": args.repeat,
            "wc_lines_per_s": f.wc_lines_per_s,
            "parse_records_per_s": parse_wall,
            "parse_records_per_cpu_s": parse_cpu,
            "parse_to_wc_ratio": parse_wall / f.wc_lines_per_s,
            "rack_end_to_end_requests_per_s": e2e_wall,
            "rack_end_to_end_requests_per_cpu_s": e2e_cpu,
        });
        let document = crate::provenance::Document::new("somnus-bench-offload", figures);
        return outln!("{}", document.to_json()?);
    }
    let cpu = |rate: Option<f64>| rate.map_or_else(|| "n/a".to_string(), |r| format!("{r:.0}"));
    outln!(
        "trace {} looped {} times into one file of {} records; median of {} runs, one core",
        args.trace.display(),
        f.copies,
        f.records,
        args.repeat
    )?;
    outln!("{:<28} {:>14} {:>14}", "", "per wall s", "per CPU s")?;
    outln!("{:<28} {:>14.0} {:>14}   (lines)", "wc -l", f.wc_lines_per_s, "")?;
    outln!(
        "{:<28} {:>14.0} {:>14}   (records; {:.2}x wc -l)",
        "parse",
        parse_wall,
        cpu(parse_cpu),
        parse_wall / f.wc_lines_per_s
    )?;
    outln!(
        "{:<28} {:>14.0} {:>14}   (requests; target >= 2,000,000)",
        "rack off-load, end to end",
        e2e_wall,
        cpu(e2e_cpu)
    )
}
