//! What the benches share: medians, and the CPU time of this thread.

use std::time::Duration;

use anyhow::Result;

use crate::progress::now;

/// The median of `values` (the mean of the middle two of an even count; 0 of none).
pub(crate) fn median_f64(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

pub(crate) fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median wall time and the median on-CPU time of this thread over `repeat` runs.
/// The CPU time leaves out what other tenants of a shared machine take; it is what
/// "per second on one core" means. It is `None` where Linux's per-thread scheduler
/// statistics are not available.
pub(crate) fn time(
    repeat: u32,
    mut work: impl FnMut() -> Result<()>,
) -> Result<(Duration, Option<Duration>)> {
    let mut wall = Vec::with_capacity(repeat as usize);
    let mut cpu = Vec::with_capacity(repeat as usize);
    for _ in 0..repeat {
        let (start, cpu_start) = (now(), thread_cpu_time());
        work()?;
        wall.push(start.elapsed());
        if let (Some(before), Some(after)) = (cpu_start, thread_cpu_time()) {
            cpu.push(after.saturating_sub(before));
        }
    }
    let cpu = (cpu.len() == wall.len()).then(|| median(cpu));
    Ok((median(wall), cpu))
}

/// Time this thread has spent on a CPU, from /proc/thread-self/schedstat (its first
/// field, in nanoseconds).
pub(crate) fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = text.split_whitespace().next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Resets this process's peak resident memory to what it holds now (Linux's
/// `/proc/self/clear_refs` with 5), so that the next [`peak_resident_bytes`] is the
/// peak of what runs after; false where it cannot be reset.
pub(crate) fn reset_peak_resident() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// This process's peak resident memory (`VmHWM`) since it started or the last
/// [`reset_peak_resident`]; none where /proc does not say.
pub(crate) fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
