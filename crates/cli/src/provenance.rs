//! What produced a result: every JSON document somnus writes (`--json`, a report's
//! `summary.json`) opens with a schema name and version, the somnus version, and the
//! inputs that decide its figures (trace files with their sizes, or the synthetic
//! generator's seed; the window and warm-up; the topology), so that a reader can tell
//! what a file measured and run it again. Nothing here depends on where the output
//! goes: the same run writes the same bytes to any directory.

use somnus_sim::topology::TraceLayout;
use somnus_trace::TraceSummary;

/// The version of every JSON schema below; it grows when a key changes meaning or
/// disappears (new keys may appear without it).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The somnus that wrote a document.
pub(crate) const SOMNUS_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The header every document starts with.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Header {
    /// What the document holds: `somnus-offload`, `somnus-trace-stats`, ...
    pub(crate) schema: &'static str,
    pub(crate) schema_version: u32,
    pub(crate) somnus_version: &'static str,
}

impl Header {
    pub(crate) fn new(schema: &'static str) -> Header {
        Header { schema, schema_version: SCHEMA_VERSION, somnus_version: SOMNUS_VERSION }
    }
}

/// A document: the header, then the body's own keys (a struct or a JSON object).
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Document<T> {
    #[serde(flatten)]
    pub(crate) header: Header,
    #[serde(flatten)]
    pub(crate) body: T,
}

impl<T: serde::Serialize> Document<T> {
    pub(crate) fn new(schema: &'static str, body: T) -> Document<T> {
        Document { header: Header::new(schema), body }
    }

    /// The document as pretty-printed JSON.
    pub(crate) fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// One input trace file.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct TraceFile {
    /// As given on the command line.
    pub(crate) path: String,
    /// On disk (compressed size for gzip files).
    pub(crate) size_bytes: u64,
    pub(crate) format: &'static str,
    /// Requests in the file.
    pub(crate) records: u64,
    /// Malformed or out-of-order records skipped (`--skip-bad`; else 0).
    pub(crate) records_skipped: u64,
}

/// The trace files of a set.
pub(crate) fn trace_files(summary: &TraceSummary) -> Vec<TraceFile> {
    summary
        .files
        .iter()
        .map(|file| TraceFile {
            path: file.path.display().to_string(),
            size_bytes: file.size_bytes,
            format: file.format.name(),
            records: file.record_count,
            records_skipped: file.skipped.skipped_count,
        })
        .collect()
}

/// What was replayed: trace files, or a synthetic trace generated on the fly.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Input {
    /// Empty for a synthetic trace.
    pub(crate) trace_files: Vec<TraceFile>,
    pub(crate) synthetic: Option<Synthetic>,
}

/// A synthetic trace: the generator config, seed and length.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Synthetic {
    /// `demo` (the demo's built-in knobs) or the path of a generator config file.
    pub(crate) generator: String,
    pub(crate) seed: u64,
    pub(crate) hours: f64,
}

/// The part of the trace that was measured.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct WindowInfo {
    /// `--day` as given (`2007-02-26`, `3`), or null for the whole set.
    pub(crate) day: Option<String>,
    /// Start and end of the measured window: `YYYY-MM-DD HH:MM:SS` UTC for traces with
    /// absolute time, seconds from the trace's origin (`123.456 s`) otherwise.
    pub(crate) start: String,
    pub(crate) end: String,
    pub(crate) span_s: f64,
    /// Replayed before the window but not measured.
    pub(crate) warmup_s: f64,
    /// Requests in the measured window.
    pub(crate) requests: u64,
}

/// The cluster the trace was replayed on.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct TopologyInfo {
    /// `built-in msr-cambridge`, `built-in demo`, or the path of a topology file.
    pub(crate) source: String,
    pub(crate) racks: usize,
    pub(crate) servers: usize,
    pub(crate) volumes: usize,
    pub(crate) disks: u32,
    pub(crate) rtt_ms: f64,
    pub(crate) link_gbps: f64,
    pub(crate) vanilla_idle_s: f64,
    pub(crate) read_idle_s: f64,
    pub(crate) write_idle_s: f64,
    pub(crate) offload_limit_gib: f64,
    pub(crate) reclaim_after_idle_ms: f64,
    pub(crate) power_window_s: f64,
    /// `any` or `cheapest`.
    pub(crate) logger_host: &'static str,
}

impl TopologyInfo {
    pub(crate) fn new(source: &str, layout: &TraceLayout) -> TopologyInfo {
        let policy = &layout.policy;
        TopologyInfo {
            source: source.to_string(),
            racks: layout.racks.len(),
            servers: layout.servers.len(),
            volumes: layout.volumes.len(),
            disks: layout.volumes.iter().map(|volume| volume.disks).sum(),
            rtt_ms: layout.network.round_trip.as_secs_f64() * 1e3,
            link_gbps: layout.network.link_bytes_per_second * 8.0 / 1e9,
            vanilla_idle_s: policy.vanilla_idle.as_secs_f64(),
            read_idle_s: policy.read_idle.as_secs_f64(),
            write_idle_s: policy.write_idle.as_secs_f64(),
            offload_limit_gib: policy.offload_limit_bytes as f64 / f64::from(1u32 << 30),
            reclaim_after_idle_ms: policy.reclaim_after_idle.as_secs_f64() * 1e3,
            power_window_s: layout.power_window.as_secs_f64(),
            logger_host: match policy.logger_host {
                somnus_core::offload::LoggerHost::Any => "any",
                somnus_core::offload::LoggerHost::Cheapest => "cheapest",
            },
        }
    }
}

/// Everything that produced an off-loading result.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct OffloadProvenance {
    pub(crate) input: Input,
    pub(crate) window: WindowInfo,
    pub(crate) topology: TopologyInfo,
}
