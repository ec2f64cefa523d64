//! `somnus bench s3`: PUT and GET of objects of given sizes against any S3 endpoint
//! (somnus's gateway or another store), by a given number of clients each with one
//! request in flight on a connection of its own, for a given time per phase; ops/s,
//! MiB/s and latency percentiles per phase.

use std::time::Duration;

use bytes::Bytes;

pub use crate::client::{BenchError, Connection, Endpoint};
use crate::sigv4::Signer;

/// What to measure.
pub struct BenchConfig {
    /// The endpoint (HTTP or HTTPS).
    pub endpoint: Endpoint,
    pub signer: Signer,
    pub bucket: String,
    pub concurrency: usize,
    pub phase: Duration,
    pub sizes: Vec<u64>,
    /// Leave the objects and the bucket in place.
    pub keep: bool,
    /// Directories whose disk use is measured before and after each PUT phase (the
    /// store's data, without its logs): the bytes on disk each stored object took.
    pub disk_dirs: Vec<std::path::PathBuf>,
}

/// One phase's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Phase {
    pub op: &'static str,
    pub size_bytes: u64,
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// A PUT phase with `disk_dirs`: the growth of their disk use (once settled) per
    /// object stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes_per_object: Option<f64>,
}

fn refused(request: String, status: u16, body: &Bytes) -> BenchError {
    let body = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    BenchError::Refused { request, status, body }
}

fn key(size: u64, client: usize, n: u64) -> String {
    format!("somnus-bench/{size}/{client}/{n}")
}

/// One client's share of a phase: its latencies in microseconds, its errors, and
/// (for a PUT phase) how many objects it stored.
async fn client_phase(
    config: &BenchConfig,
    client: usize,
    put: Option<Bytes>,
    size: u64,
    stored: u64,
    until: tokio::time::Instant,
) -> Result<(Vec<u64>, u64, u64), BenchError> {
    let mut connection = Connection::open(&config.endpoint).await?;
    let (mut latencies, mut errors, mut n) = (Vec::new(), 0u64, 0u64);
    while tokio::time::Instant::now() < until {
        let (method, body, index) = match &put {
            Some(data) => ("PUT", data.clone(), n),
            None if stored == 0 => break,
            None => ("GET", Bytes::new(), n % stored),
        };
        let path = format!("/{}/{}", config.bucket, key(size, client, index));
        let start = tokio::time::Instant::now();
        let (status, answer) = connection.send(&config.signer, method, &path, body).await?;
        let took = start.elapsed();
        if (200..300).contains(&status) && (put.is_some() || answer.len() as u64 == size) {
            latencies.push(took.as_micros() as u64);
        } else if status == 403 || status == 404 && n == 0 {
            // A key or a bucket the endpoint refuses: every request would be.
            return Err(refused(format!("{method} {path}"), status, &answer));
        } else {
            errors += 1;
        }
        n += 1;
    }
    Ok((latencies, errors, n))
}

/// The `p`th percentile (nearest rank) of microsecond latencies sorted ascending, in
/// milliseconds; 0 for none.
pub fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Runs the phases: per size, PUT for the phase's time, then GET of what was stored;
/// then deletes the objects (unless kept). `progress` hears each phase as it ends.
pub async fn run(
    config: &BenchConfig,
    mut progress: impl FnMut(&Phase),
) -> Result<Vec<Phase>, BenchError> {
    let mut admin = Connection::open(&config.endpoint).await?;
    let bucket_path = format!("/{}", config.bucket);
    let (status, answer) = admin.send(&config.signer, "PUT", &bucket_path, Bytes::new()).await?;
    let created = (200..300).contains(&status);
    if !created && status != 409 {
        return Err(refused(format!("PUT {bucket_path}"), status, &answer));
    }
    let mut phases = Vec::new();
    let mut stored: Vec<(u64, Vec<u64>)> = Vec::new();
    for &size in &config.sizes {
        let data = Bytes::from((0..size).map(|i| (i * 31 + size) as u8).collect::<Vec<u8>>());
        let mut counts = Vec::new();
        for op in ["PUT", "GET"] {
            let disk_before =
                if op == "PUT" { settled_disk(&config.disk_dirs).await? } else { None };
            let start = tokio::time::Instant::now();
            let until = start + config.phase;
            let runs = (0..config.concurrency).map(|client| {
                let put = (op == "PUT").then(|| data.clone());
                let have = counts.get(client).copied().unwrap_or(0);
                client_phase(config, client, put, size, have, until)
            });
            let results = futures::future::try_join_all(runs).await?;
            let seconds = start.elapsed().as_secs_f64();
            if op == "PUT" {
                counts = results.iter().map(|(_, _, n)| *n).collect();
            }
            let mut latencies: Vec<u64> = results.iter().flat_map(|(l, _, _)| l.clone()).collect();
            latencies.sort_unstable();
            let ops = latencies.len() as u64;
            let phase = Phase {
                op,
                size_bytes: size,
                ops,
                errors: results.iter().map(|(_, e, _)| e).sum(),
                seconds,
                ops_per_s: ops as f64 / seconds,
                mib_per_s: (ops * size) as f64 / seconds / f64::from(1 << 20),
                p50_ms: percentile(&latencies, 50.0),
                p99_ms: percentile(&latencies, 99.0),
                disk_bytes_per_object: None,
            };
            let disk_after =
                if op == "PUT" { settled_disk(&config.disk_dirs).await? } else { None };
            let grown = disk_before.zip(disk_after).map(|(b, a)| a.saturating_sub(b) as f64);
            let phase = Phase {
                disk_bytes_per_object: grown.filter(|_| ops > 0).map(|g| g / ops as f64),
                ..phase
            };
            progress(&phase);
            phases.push(phase);
        }
        stored.push((size, counts));
    }
    if !config.keep {
        cleanup(config, &stored, created).await?;
    }
    Ok(phases)
}

/// The disk use of `dirs` (as `du`) once it holds still: four measures a second apart
/// within 64 KiB of each other (a store may move what it acknowledged to its final
/// place a moment later: somnus's servers checkpoint their journals 2 s after their
/// last write), waiting at most 60 s; `None` without directories.
async fn settled_disk(dirs: &[std::path::PathBuf]) -> Result<Option<u64>, BenchError> {
    if dirs.is_empty() {
        return Ok(None);
    }
    let measure = || -> Result<u64, BenchError> {
        let mut total = 0;
        for dir in dirs {
            total += somnus_runtime::files::durable::disk_bytes(dir)
                .map_err(|error| BenchError::Disk(format!("{}: {error}", dir.display())))?;
        }
        Ok(total)
    };
    let mut recent = vec![measure()?];
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        recent.push(measure()?);
        let last = &recent[recent.len().saturating_sub(4)..];
        let (low, high) = (last.iter().min(), last.iter().max());
        if last.len() == 4 && low.zip(high).is_some_and(|(l, h)| h - l <= 64 << 10) {
            return Ok(recent.last().copied());
        }
    }
    Ok(recent.last().copied())
}

/// Deletes the objects stored, `concurrency` at once, and the bucket if it was made.
async fn cleanup(
    config: &BenchConfig,
    stored: &[(u64, Vec<u64>)],
    bucket_created: bool,
) -> Result<(), BenchError> {
    let deletes = (0..config.concurrency).map(|client| async move {
        let mut connection = Connection::open(&config.endpoint).await?;
        for (size, counts) in stored {
            for n in 0..counts.get(client).copied().unwrap_or(0) {
                let path = format!("/{}/{}", config.bucket, key(*size, client, n));
                connection.send(&config.signer, "DELETE", &path, Bytes::new()).await?;
            }
        }
        Ok::<_, BenchError>(())
    });
    futures::future::try_join_all(deletes).await?;
    if bucket_created {
        let mut admin = Connection::open(&config.endpoint).await?;
        admin.send(&config.signer, "DELETE", &format!("/{}", config.bucket), Bytes::new()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).map(|n| n * 1000).collect();
        assert_eq!(percentile(&sorted, 50.0), 50.0);
        assert_eq!(percentile(&sorted, 99.0), 99.0);
        assert_eq!(percentile(&[7000], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
