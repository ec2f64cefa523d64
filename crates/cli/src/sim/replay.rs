//! One replay of a trace set in the off-loading simulator, as `sim offload`, `sim
//! demo`, `bench offload` and `reproduce` run it: the topology loaded, the window
//! measured, the result with its provenance, printed or written as a report.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use somnus_core::power::PowerProfile;
use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{OffloadResult, run_offload};
use somnus_sim::replay::{Window, peak_loads};
use somnus_sim::topology::{Topology, TraceLayout};
use somnus_trace::{DaySpec, TraceSet};
use somnus_types::VirtualDuration;

use crate::progress::ProgressLine;
use crate::provenance::{Input, OffloadProvenance, TopologyInfo, WindowInfo, trace_files};
use crate::report;

/// The warm-up before a day: an hour settles every idle timer and logger.
const DAY_WARMUP_S: u64 = 3600;
const WARMUP_S_MAX: u64 = 7 * 24 * 3600;

/// Arrays are sized for the busiest minute of each volume (004 Fig. 1's peak rates).
pub(crate) const LOAD_WINDOW: VirtualDuration = VirtualDuration::from_secs(60);
/// Loads the topology and the extra profiles it may name.
pub(crate) fn load_topology(path: Option<&Path>, profiles: &[PathBuf]) -> Result<Topology> {
    let mut topology = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading topology {}", path.display()))?;
            Topology::from_toml(&text, &path.display().to_string())?
        }
        None => Topology::msr_cambridge(),
    };
    for path in profiles {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading power profile {}", path.display()))?;
        topology.register_profile(PowerProfile::from_toml(&text, &path.display().to_string())?);
    }
    Ok(topology)
}

/// One replay of a trace set under some configurations: what `sim offload` runs, and
/// `reproduce` runs many of.
pub(crate) struct ReplayRequest<'a> {
    pub(crate) traces: &'a [PathBuf],
    pub(crate) input: somnus_trace::ReadOptions,
    pub(crate) day: Option<DaySpec>,
    pub(crate) warmup_s: Option<u64>,
    pub(crate) kinds: Vec<ConfigKind>,
    pub(crate) quiet: bool,
}

/// A replay's result, what produced it, and the heading of its tables.
pub(crate) struct ReplayOutcome {
    pub(crate) result: OffloadResult,
    pub(crate) provenance: OffloadProvenance,
    pub(crate) heading: String,
}

/// Replays a trace set on `topology` (read from `topology_file`, if it was).
pub(crate) fn replay(
    request: &ReplayRequest<'_>,
    topology: &Topology,
    topology_file: Option<&Path>,
) -> Result<ReplayOutcome> {
    if !request.quiet {
        noteln!("reading {} trace file(s)...", request.traces.len());
    }
    let set = TraceSet::open(request.traces, &request.input)?;
    let summary = set.summary();
    if summary.skipped_count > 0 && !request.quiet {
        let first = summary.files.iter().find_map(|file| file.skipped.first_errors.first());
        noteln!(
            "skipped {} malformed or out-of-order record(s) (--skip-bad); the first: {}",
            summary.skipped_count,
            first.map_or("", String::as_str)
        );
    }
    let window = measured_window(request.day, request.warmup_s, request.quiet, summary)?;
    let names: Vec<String> = set.volumes().iter().map(|(_, name)| name.to_string()).collect();
    let loads = peak_loads(set.requests(), names.len(), LOAD_WINDOW)?;
    let layout = topology.layout_for_load(&names, &loads)?;
    if let Some(path) = topology_file {
        warn_of_unused_names(path, topology, &layout);
    }
    let in_window = count_in_window(&set, window)?;
    if !request.quiet {
        noteln!(
            "replaying {} requests of {} volumes over {:.1} h in {} configuration(s)...",
            somnus_trace::stats::thousands(in_window),
            names.len(),
            window.span().as_secs_f64() / 3600.0,
            request.kinds.len()
        );
    }
    let mut progress = ProgressLine::new(request.quiet);
    let result = run_offload(
        &layout,
        window.run_window(),
        &request.kinds,
        || Ok::<_, somnus_trace::TraceError>(window.sim_requests(set.requests())),
        &mut |p| progress.simulation(p),
    )?;
    let heading = heading(&set, window, &layout, in_window);
    let provenance = OffloadProvenance {
        input: Input { trace_files: trace_files(summary), synthetic: None },
        window: window_info(summary.time_base, window, request.day, in_window),
        topology: TopologyInfo::new(topology.origin(), &layout),
    };
    Ok(ReplayOutcome { result, provenance, heading })
}

/// The window `--day` and `--warmup-s` ask for (the whole set without `--day`).
fn measured_window(
    day: Option<DaySpec>,
    warmup_s: Option<u64>,
    quiet: bool,
    summary: &somnus_trace::TraceSummary,
) -> Result<Window> {
    let window = match day {
        Some(day) => {
            let window = Window::day(summary, day)?;
            if window.span().as_nanos() < somnus_trace::day::DAY_NS && !quiet {
                noteln!(
                    "day {day} is covered by the trace only in part: measuring the {:.2} h it covers",
                    window.span().as_secs_f64() / 3600.0
                );
            }
            window
        }
        None => Window::whole(summary).ok_or(somnus_trace::DayError::EmptySet)?,
    };
    let warmup_s = warmup_s.unwrap_or(if day.is_some() { DAY_WARMUP_S } else { 0 });
    if warmup_s > WARMUP_S_MAX {
        bail!("--warmup-s is at most {WARMUP_S_MAX} (a week), not {warmup_s}");
    }
    Ok(window.with_warmup(VirtualDuration::from_secs(warmup_s)))
}

/// In a topology written for these volumes, a rack naming a server no volume is on, or
/// a `[[volume]]` naming no volume, is most likely a misspelt name; in a copy of a
/// built-in topology replayed on part of its data center, it is normal. Say so, once
/// (the built-in topologies themselves are not checked).
fn warn_of_unused_names(path: &Path, topology: &Topology, layout: &TraceLayout) {
    let servers = topology.rack_servers_unused(layout);
    if !servers.is_empty() {
        let named: Vec<String> =
            servers.iter().map(|(rack, server)| format!("{server:?} ({rack})")).collect();
        noteln!(
            "warning: {}: racks name servers no volume of the trace set is on: {} (fine for \
             a trace set that covers part of the data center; a misspelt name otherwise)",
            path.display(),
            named.join(", ")
        );
    }
    let volumes = topology.volume_overrides_unused(layout);
    if !volumes.is_empty() {
        noteln!(
            "warning: {}: [[volume]] entries name volumes the trace set does not have, and \
             are not used: {}",
            path.display(),
            volumes.iter().map(|name| format!("{name:?}")).collect::<Vec<_>>().join(", ")
        );
    }
}

/// Prints the result and writes the report directory.
pub(crate) fn emit(
    result: &OffloadResult,
    provenance: &OffloadProvenance,
    heading: &str,
    json: bool,
    report_dir: Option<&Path>,
) -> Result<()> {
    if json {
        outln!("{}", report::json(result, provenance)?)?;
    } else {
        out!("{heading}")?;
        out!("{}", report::tables(result))?;
    }
    if let Some(dir) = report_dir {
        report::write_dir(dir, result, provenance, heading)?;
        if !json {
            outln!("\nreport written to {}", dir.display())?;
        }
    }
    Ok(())
}

/// The measured window, for the provenance of a result.
fn window_info(
    time_base: somnus_trace::TimeBase,
    window: Window,
    day: Option<DaySpec>,
    requests: u64,
) -> WindowInfo {
    WindowInfo {
        day: day.map(|day| day.to_string()),
        start: somnus_trace::stats::format_timestamp(time_base, window.start),
        end: somnus_trace::stats::format_timestamp(time_base, window.end),
        span_s: window.span().as_secs_f64(),
        warmup_s: window.warmup.as_secs_f64(),
        requests,
    }
}

fn count_in_window(set: &TraceSet, window: Window) -> Result<u64> {
    // The pre-scan counted every record; a day needs one more pass, which is cheap
    // next to the simulation.
    if Window::whole(set.summary()) == Some(window) {
        return Ok(set.summary().record_count);
    }
    let mut count = 0;
    for request in set.requests_between(window.start, window.end) {
        request?;
        count += 1;
    }
    Ok(count)
}

fn heading(set: &TraceSet, window: Window, layout: &TraceLayout, requests: u64) -> String {
    let summary = set.summary();
    let from = somnus_trace::stats::format_timestamp(summary.time_base, window.start);
    let to = somnus_trace::stats::format_timestamp(summary.time_base, window.end);
    let warmup = if window.warmup.as_nanos() > 0 {
        format!(", after a warm-up of {:.0} s", window.warmup.as_secs_f64())
    } else {
        String::new()
    };
    format!(
        "trace set: {} file(s), {} volumes, {} requests in the window {} .. {} ({:.2} h{warmup})\n\
         cluster: {} racks, {} servers, {} disks\n\n",
        summary.files.len(),
        layout.volumes.len(),
        somnus_trace::stats::thousands(requests),
        from,
        to,
        window.span().as_secs_f64() / 3600.0,
        layout.racks.len(),
        layout.servers.len(),
        layout.volumes.iter().map(|v| v.disks).sum::<u32>(),
    )
}
