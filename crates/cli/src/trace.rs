//! `somnus trace ...`: statistics of block I/O traces, conversion to somnus's compact
//! binary format, and synthetic traces. A thin shell over `somnus_trace`: every
//! decision about formats and numbers lives in that crate.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use somnus_trace::stats::{StatsOptions, compute_set, thousands};
use somnus_trace::synthetic::LoadSeries;
use somnus_trace::{
    BinaryWriter, DaySpec, Format, ReadOptions, Request, SyntheticConfig, SyntheticTrace, TraceSet,
    TraceSummary, VolumeTable,
};
use somnus_types::IoKind;

/// Records between two looks at the clock during a conversion.
const PROGRESS_CHECK_RECORDS: u64 = 1 << 16;
/// Seconds between two progress lines.
const PROGRESS_INTERVAL_S: f64 = 3.0;
/// Windows FILETIME ticks (100 ns) from 1601-01-01 to the Unix epoch.
const FILETIME_UNIX_EPOCH_TICKS: u64 = 116_444_736_000_000_000;
const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Work with block I/O trace files.
///
/// Input formats: msr, spc, disksim, mqsim, replayer, vscsi, cloudphysics-csv and
/// somnus (see docs/format/trace.md). Files may be gzip-compressed. Several files form
/// one trace set: they are merged in time order, and a volume name that appears in two
/// files is one volume.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum TraceCommand {
    /// Print the volume activity analysis of the Write Off-Loading paper (FAST'08,
    /// section 2): per-volume mean and peak request rates, the share of time each
    /// volume is active with all requests and with reads only, the number of
    /// concurrently active volumes (mean, median, p99, max), and a per-day table to
    /// find the least and most idle day.
    Stats {
        /// Trace files, read together as one set.
        #[arg(required = true, value_name = "FILES")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        input: InputArgs,
        /// Print the report as JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// A volume is active until this many seconds after its last request (the idle
        /// threshold); also the window of the peak request rates.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        window_s: u64,
        /// Analyse one day only: a day index N (the Nth 24-hour window from the UTC
        /// midnight at or before the first request, or from time 0 for traces with
        /// relative time) or a UTC date YYYY-MM-DD (traces with absolute time only).
        #[arg(long, value_name = "N|YYYY-MM-DD")]
        day: Option<DaySpec>,
    },
    /// Convert trace files into one somnus binary trace, which reads many times
    /// faster than CSV. Every record is validated first; progress goes to stderr.
    Convert {
        /// Trace files, merged in time order into the output.
        #[arg(required = true, value_name = "FILES")]
        files: Vec<PathBuf>,
        /// The somnus binary file to write (replaced if it exists).
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        #[command(flatten)]
        input: InputArgs,
    },
    /// Write a synthetic trace from the seeded generator (label results obtained with
    /// it as synthetic).
    Generate {
        /// The file to write (replaced if it exists).
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// The seed; the same seed and config always give the same trace.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// A TOML file of generator knobs (servers, volumes_per_server, duration_s,
        /// mean_rate_per_s, read_fraction, diurnal_amplitude, ...); missing knobs keep
        /// their defaults and unknown keys are refused.
        #[arg(long, value_name = "FILE.toml", conflicts_with = "preset")]
        config: Option<PathBuf>,
        /// A built-in generator config instead of --config. msr-fast08: the 36
        /// volumes on 13 servers traced by Write Off-Loading (FAST'08), a week from
        /// 2007-02-22 17:00 UTC calibrated to the activity its section 2 reports
        /// (`somnus show preset msr-fast08` prints its knobs).
        #[arg(long, value_name = "NAME")]
        preset: Option<String>,
        /// A load file in the format of load-timeseries/cloudphysics_30min_load.csv;
        /// its request counts per 30-minute window replace the daily cosine as the
        /// rate curve. Needs --workload.
        #[arg(long, value_name = "FILE.csv", requires = "workload")]
        load_curve: Option<PathBuf>,
        /// The workload of --load-curve to use (for example w01).
        #[arg(long, value_name = "NAME", requires = "load_curve")]
        workload: Option<String>,
        /// The output format: somnus (binary) or msr (MSR Cambridge CSV, readable by
        /// other tools; relative time is written as if it started on 1970-01-01).
        #[arg(long, value_enum, default_value_t = OutputFormat::Somnus)]
        format: OutputFormat,
    },
    /// Write a generated load series (the format of
    /// load-timeseries/cloudphysics_30min_load.csv, with byte columns) for `somnus sim
    /// gear`: workload `diurnal`, a daily curve with noise, and workload `surprise`,
    /// the same with a holiday (a third of the load) and a two-hour flash crowd at the
    /// peak's level in the night, on two different days from day 2 on. Prints which.
    GenerateLoad {
        /// The file to write (replaced if it exists).
        #[arg(long, short)]
        output: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Days of 30-minute windows (at least 4).
        #[arg(long, default_value_t = 7, value_parser = clap::value_parser!(u32).range(4..=366))]
        days: u32,
    },
}

/// How input files are read.
#[derive(Debug, clap::Args)]
pub(crate) struct InputArgs {
    /// The format of every input file: msr, spc, disksim, mqsim, replayer, vscsi,
    /// cloudphysics-csv or somnus. Without it each file's format is detected from its
    /// content (after gunzip): somnus by its magic; vscsi by a version byte of 0x01 at
    /// byte 15 of every 32-byte record (or 0x02 at byte 3 of 40-byte records);
    /// cloudphysics-csv by its header; msr by 7 comma fields with Read/Write fourth;
    /// spc by 5+ comma fields with r/w fourth; among 5-field whitespace formats mqsim
    /// if every sampled time is an integer and the largest is >= 1,000,000 (ns), else
    /// replayer if every size in the first 1000 lines is a multiple of 512 and >= 512
    /// (bytes), else disksim (sectors).
    #[arg(long, value_name = "FORMAT")]
    format: Option<Format>,
    /// Skip malformed and out-of-order records instead of stopping at the first; the
    /// number skipped and the first errors are reported per file.
    #[arg(long)]
    skip_bad: bool,
}

impl InputArgs {
    pub(crate) fn options(&self) -> ReadOptions {
        ReadOptions { format: self.format, skip_bad: self.skip_bad, ..ReadOptions::default() }
    }
}

/// The formats `generate` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// somnus compact binary.
    Somnus,
    /// MSR Cambridge CSV.
    Msr,
}

/// Runs one `trace` subcommand.
pub(crate) fn run(command: TraceCommand) -> Result<()> {
    match command {
        TraceCommand::Stats { files, input, json, window_s, day } => {
            run_stats(&files, &input, json, window_s, day)
        }
        TraceCommand::Convert { files, output, input } => run_convert(&files, &output, &input),
        TraceCommand::Generate { output, seed, config, preset, load_curve, workload, format } => {
            let config = load_config(
                config.as_deref(),
                preset.as_deref(),
                load_curve.as_deref(),
                workload.as_deref(),
            )?;
            run_generate(&output, seed, &config, format, false)
        }
        TraceCommand::GenerateLoad { output, seed, days } => run_generate_load(&output, seed, days),
    }
}

fn run_generate_load(output: &Path, seed: u64, days: u32) -> Result<()> {
    use somnus_trace::load_gen::{LoadGenSpec, generate_load, write_load};
    let spec = LoadGenSpec { days, ..LoadGenSpec::default() };
    let (series, surprises) = generate_load(&spec, seed);
    let mut text = Vec::new();
    write_load(&series, &mut text)?;
    std::fs::write(output, text).with_context(|| format!("writing {}", output.display()))?;
    let hour = |window: u32| f64::from(window) * f64::from(spec.window_s) / 3600.0;
    outln!(
        "wrote {}: {days} days of {}-minute windows; workload surprise has a holiday on day {} \
         and a flash crowd on day {} from {:.1} h for {:.1} h",
        output.display(),
        spec.window_s / 60,
        surprises.holiday,
        surprises.crowd_day,
        hour(surprises.crowd_window),
        hour(surprises.crowd_windows)
    )?;
    Ok(())
}

fn open_set(files: &[PathBuf], input: &InputArgs) -> Result<TraceSet> {
    TraceSet::open(files, &input.options()).context("reading the trace set")
}

fn run_stats(
    files: &[PathBuf],
    input: &InputArgs,
    json: bool,
    window_s: u64,
    day: Option<DaySpec>,
) -> Result<()> {
    if window_s == 0 {
        bail!("--window-s must be at least 1");
    }
    let window_ns = window_s
        .checked_mul(NANOS_PER_SECOND)
        .with_context(|| format!("--window-s {window_s} is too large"))?;
    let set = open_set(files, input)?;
    let report = compute_set(&set, day, &StatsOptions { window_ns })
        .context("computing the trace statistics")?;
    crate::output::write_with(|out| {
        if json {
            writeln!(out, "{}", stats_json(&set, day, &report)?)
        } else {
            print_files(out, set.summary())?;
            writeln!(out)?;
            write!(out, "{report}")
        }
    })
}

/// The statistics of a set as the JSON document `trace stats --json` prints: the
/// header, the files, the day asked for, then the report's own keys.
pub(crate) fn stats_json(
    set: &TraceSet,
    day: Option<DaySpec>,
    report: &somnus_trace::stats::StatsReport,
) -> serde_json::Result<String> {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        trace_files: Vec<crate::provenance::TraceFile>,
        /// `--day` as given, or null.
        day: Option<String>,
        #[serde(flatten)]
        report: &'a somnus_trace::stats::StatsReport,
    }
    let body = Body {
        trace_files: crate::provenance::trace_files(set.summary()),
        day: day.map(|day| day.to_string()),
        report,
    };
    crate::provenance::Document::new("somnus-trace-stats", body).to_json()
}

fn print_files(out: &mut impl Write, summary: &TraceSummary) -> std::io::Result<()> {
    for file in &summary.files {
        writeln!(
            out,
            "{}: {}, {} records, {} skipped{}",
            file.path.display(),
            file.format,
            thousands(file.record_count),
            thousands(file.skipped.skipped_count),
            if file.non_io_record_count > 0 {
                format!(", {} non-I/O SCSI commands ignored", thousands(file.non_io_record_count))
            } else {
                String::new()
            }
        )?;
        for error in &file.skipped.first_errors {
            writeln!(out, "  skipped: {error}")?;
        }
    }
    Ok(())
}

fn run_convert(files: &[PathBuf], output: &Path, input: &InputArgs) -> Result<()> {
    let set = open_set(files, input)?;
    let summary = set.summary();
    let total = summary.record_count;
    let (written, bytes_out) = write_atomically(output, |sink| {
        let mut writer = BinaryWriter::new(sink, set.volumes(), summary.time_base)?;
        let mut progress = Progress::new(total);
        for request in set.requests() {
            writer.write(&request?)?;
            progress.tick(writer.record_count());
        }
        let count = writer.record_count();
        writer.finish()?;
        Ok(count)
    })?;
    let bytes_in: u64 = summary.files.iter().map(|file| file.size_bytes).sum();
    noteln!(
        "converted {} requests of {} volumes from {} files: {} bytes in, {} bytes out; {} records skipped",
        thousands(written),
        thousands(summary.volume_count),
        summary.files.len(),
        thousands(bytes_in),
        thousands(bytes_out),
        thousands(summary.skipped_count),
    );
    Ok(())
}

/// Prints `converted N requests (P%)` to stderr every few seconds of a long run.
struct Progress {
    total: u64,
    last_print: std::time::Instant,
}

impl Progress {
    // Progress output needs wall-clock time; the cli crate is the shell that may read it.
    #[allow(clippy::disallowed_methods)]
    fn new(total: u64) -> Progress {
        Progress { total, last_print: std::time::Instant::now() }
    }

    #[allow(clippy::disallowed_methods)]
    fn tick(&mut self, done: u64) {
        if !done.is_multiple_of(PROGRESS_CHECK_RECORDS) {
            return;
        }
        let now = std::time::Instant::now();
        if now.duration_since(self.last_print).as_secs_f64() < PROGRESS_INTERVAL_S {
            return;
        }
        self.last_print = now;
        let percent = if self.total == 0 { 100.0 } else { 100.0 * done as f64 / self.total as f64 };
        noteln!("converted {} requests ({percent:.0}%)", thousands(done));
    }
}

/// Writes `path` through a temporary file in the same directory: the data is synced,
/// renamed into place and the directory synced, so a crash never leaves a half file
/// under the final name (STYLE.md rule 6). Whatever fails, the temporary file is
/// removed. Returns what `write` returned and the size of the file written.
fn write_atomically<T>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T>,
) -> Result<(T, u64)> {
    if path.is_dir() {
        bail!("{} is a directory; name the file to write", path.display());
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = RemoveOnDrop(PathBuf::from(partial));
    let file =
        File::create(&partial.0).with_context(|| format!("creating {}", partial.0.display()))?;
    let mut sink = BufWriter::new(file);
    let value = write(&mut sink).with_context(|| format!("writing {}", path.display()))?;
    let file = sink.into_inner().map_err(|e| e.into_error()).context("flushing the output")?;
    file.sync_all().with_context(|| format!("syncing {}", partial.0.display()))?;
    let size_bytes =
        file.metadata().with_context(|| format!("sizing {}", partial.0.display()))?.len();
    std::fs::rename(&partial.0, path)
        .with_context(|| format!("renaming {} to {}", partial.0.display(), path.display()))?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(directory)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("syncing directory {}", directory.display()))?;
    Ok((value, size_bytes))
}

/// A temporary file removed when it goes out of scope; after a successful rename there
/// is nothing left to remove.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A generator config file's knobs, as written (not yet validated).
pub(crate) fn read_generator_config(path: &Path) -> Result<SyntheticConfig> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn load_config(
    path: Option<&Path>,
    preset: Option<&str>,
    load_curve: Option<&Path>,
    workload: Option<&str>,
) -> Result<SyntheticConfig> {
    let mut config = match (path, preset) {
        (Some(path), _) => read_generator_config(path)?,
        (None, Some(name)) => SyntheticConfig::preset(name)?,
        (None, None) => SyntheticConfig::default(),
    };
    if let (Some(load_curve), Some(workload)) = (load_curve, workload) {
        let series = LoadSeries::open(load_curve)?;
        config.rate_curve = Some(series.rate_curve(workload)?);
    }
    match path {
        Some(path) => config.validate().with_context(|| format!("{}", path.display()))?,
        None => config.validate()?,
    }
    Ok(config)
}

/// Writes the synthetic trace to `output`; says what it wrote unless `quiet`.
pub(crate) fn run_generate(
    output: &Path,
    seed: u64,
    config: &SyntheticConfig,
    format: OutputFormat,
    quiet: bool,
) -> Result<()> {
    let trace = SyntheticTrace::new(config, seed)?;
    let volumes = trace.volumes().clone();
    let time_base = trace.time_base();
    let (count, bytes) = write_atomically(output, |sink| match format {
        OutputFormat::Somnus => {
            let mut writer = BinaryWriter::new(sink, &volumes, time_base)?;
            for request in trace {
                writer.write(&request)?;
            }
            let count = writer.record_count();
            writer.finish()?;
            Ok(count)
        }
        OutputFormat::Msr => write_msr(sink, &volumes, trace),
    })?;
    if quiet {
        return Ok(());
    }
    let time = match time_base {
        somnus_trace::TimeBase::UnixEpoch => "absolute time",
        somnus_trace::TimeBase::Relative => "relative time",
    };
    noteln!(
        "generated {} requests of {} volumes (seed {seed}, {time}): {} bytes in {}",
        thousands(count),
        volumes.len(),
        thousands(bytes),
        output.display()
    );
    Ok(())
}

/// Writes MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`
/// with FILETIME timestamps and a response time of 0 (the generator has none).
fn write_msr(
    sink: &mut impl Write,
    volumes: &VolumeTable,
    requests: impl Iterator<Item = Request>,
) -> Result<u64> {
    let names: Vec<(String, u32)> =
        volumes.iter().map(|(_, name)| split_volume_name(name)).collect();
    let mut count = 0_u64;
    let mut line = String::new();
    for request in requests {
        let (host, disk) = &names[request.volume.index()];
        let ticks = FILETIME_UNIX_EPOCH_TICKS + request.timestamp.0 / 100;
        let kind = if request.kind == IoKind::Read { "Read" } else { "Write" };
        line.clear();
        // Writing to a String cannot fail.
        let _ = writeln!(
            line,
            "{ticks},{host},{disk},{kind},{},{},0",
            request.offset_bytes, request.size_bytes
        );
        sink.write_all(line.as_bytes())?;
        count += 1;
    }
    Ok(count)
}

/// Splits `host_disk` at its last underscore when a number follows it, else keeps the
/// whole name as the host with disk 0.
fn split_volume_name(name: &str) -> (String, u32) {
    match name.rsplit_once('_') {
        Some((host, disk)) if !host.is_empty() => match disk.parse() {
            Ok(disk) => (host.to_owned(), disk),
            Err(_) => (name.to_owned(), 0),
        },
        _ => (name.to_owned(), 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_split_into_host_and_disk() {
        // Goal: generated names round-trip through MSR's Hostname/DiskNumber fields.
        assert_eq!(split_volume_name("s00_2"), ("s00".to_owned(), 2));
        assert_eq!(split_volume_name("odd"), ("odd".to_owned(), 0));
        assert_eq!(split_volume_name("a_b"), ("a_b".to_owned(), 0));
    }

    #[test]
    fn time_base_of_generated_msr_is_absolute() {
        // Goal: an MSR file written by `generate` reads back with the same requests.
        let config = SyntheticConfig {
            duration_s: 60.0,
            start_unix_s: Some(1_172_163_600),
            ..SyntheticConfig::default()
        };
        let trace = SyntheticTrace::new(&config, 1).unwrap();
        let volumes = trace.volumes().clone();
        let expected: Vec<Request> = SyntheticTrace::new(&config, 1).unwrap().collect();
        let mut text = Vec::new();
        write_msr(&mut text, &volumes, trace).unwrap();
        let dir = std::env::temp_dir().join(format!("somnus-cli-msr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gen.csv");
        std::fs::write(&path, &text).unwrap();
        let reader = somnus_trace::TraceReader::open(&path, None, false).unwrap();
        assert_eq!(reader.time_base(), somnus_trace::TimeBase::UnixEpoch);
        let read: Vec<Request> = reader.map(Result::unwrap).collect();
        assert_eq!(read.len(), expected.len());
        for (read, expected) in read.iter().zip(&expected) {
            assert_eq!(read.timestamp.0 / 100, expected.timestamp.0 / 100);
            assert_eq!(read.offset_bytes, expected.offset_bytes);
            assert_eq!(read.kind, expected.kind);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
