//! A local cluster of processes for the runtime benches to measure (`bench runtime`,
//! its `--compare-wire`), the directory it runs in, and the closed loop of client
//! requests they time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::{ClusterFile, ClusterSection, Wire};
use somnus_runtime::files::secret_file;
use somnus_runtime::net::ports::{self, loopback_ports};
use somnus_runtime::observe::http;
use somnus_runtime::observe::status::{MdsReport, ServerReport};
use somnus_types::ByteRange;
use tokio::time::Instant;

use crate::cluster::replay::latency_histogram;
use crate::cluster::up::{Running, start_all, stop_all};

/// Where a bench runs: `dir` if given, else a temporary directory in the current one
/// (removed when the guard returned with it drops).
pub(crate) fn bench_dir(dir: Option<&Path>) -> Result<(Option<tempfile::TempDir>, PathBuf)> {
    let (scratch, dir) = match dir {
        Some(dir) => (None, dir.to_owned()),
        None => {
            let scratch = tempfile::Builder::new().prefix("somnus-bench-").tempdir_in(".")?;
            let path = scratch.path().to_owned();
            (Some(scratch), path)
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok((scratch, dir))
}

/// One measurement: throughput and latency.
pub(crate) struct Figure {
    pub(crate) mib_s: f64,
    pub(crate) ops_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
}

pub(crate) fn figure(histogram: &Histogram<u64>, bytes: u64, elapsed: Duration) -> Figure {
    let secs = elapsed.as_secs_f64().max(1e-9);
    Figure {
        mib_s: bytes as f64 / secs / f64::from(1 << 20),
        ops_s: histogram.len() as f64 / secs,
        p50_ms: histogram.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
    }
}

pub(crate) fn histogram() -> Result<Histogram<u64>> {
    latency_histogram().context("a latency histogram")
}

/// `in_flight` tasks writing (or reading) `size` at rotating offsets of `object`.
pub(crate) async fn closed_loop(
    client: &ClusterClient,
    object: &str,
    size: u64,
    span: u64,
    in_flight: usize,
    seconds: Duration,
    write: bool,
) -> Result<Figure> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..in_flight as u64 {
        let (client, object) = (client.clone(), object.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut latency = histogram()?;
            let data = Bytes::from(vec![worker as u8; size as usize]);
            let mut n = worker;
            while start.elapsed() < seconds {
                let offset = (n * size) % span;
                let t = Instant::now();
                if write {
                    client.write(&object, offset, data.clone()).await?;
                } else {
                    client.read(&object, ByteRange::new(offset, size)).await?;
                }
                latency.saturating_record(t.elapsed().as_micros() as u64);
                n += in_flight as u64;
            }
            anyhow::Ok(latency)
        }));
    }
    let mut all = histogram()?;
    for task in tasks {
        all.add(task.await??).context("merging histograms")?;
    }
    let elapsed = start.elapsed();
    Ok(figure(&all, all.len() * size, elapsed))
}

/// A 9-server cluster of child processes in `dir/<name>`, started as `somnus up`
/// starts its own.
pub(crate) struct LocalCluster {
    path: PathBuf,
    file: Arc<ClusterFile>,
    children: Vec<Running>,
}

impl LocalCluster {
    pub(crate) async fn start(
        dir: &Path,
        groups_per_server: u32,
        wire: Wire,
        name: &str,
    ) -> Result<LocalCluster> {
        let base = dir.join(name);
        std::fs::create_dir_all(&base)?;
        let path = base.join("cluster.toml");
        let ports = loopback_ports(20, ports::DEFAULT_BASE)?;
        let cluster = ClusterSection {
            groups_per_server,
            logger_capacity_bytes: 1 << 30,
            wire,
            ..ClusterSection::default()
        };
        let file = ClusterFile::on(cluster, ports[0], ports[1..10].iter().copied())
            .with_http(ports[10], ports[11..].iter().copied());
        std::fs::write(&path, file.to_toml())?;
        secret_file::create(&ClusterFile::secret_path(&path))?;
        let file = Arc::new(ClusterFile::load(&path)?);
        let exe = std::env::current_exe().context("cannot find the somnus binary")?;
        let children = start_all(&exe, &path, &file, &base.join("logs"))?;
        let cluster = LocalCluster { path, file, children };
        let start = Instant::now();
        while cluster.mds().await.is_err() || cluster.servers().await.len() < 9 {
            if start.elapsed() > Duration::from_secs(30) {
                bail!("the cluster did not start in 30 s (logs in {})", base.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(cluster)
    }

    pub(crate) fn client(&self) -> Result<ClusterClient> {
        let secret = secret_file::load(&ClusterFile::secret_path(&self.path))?;
        Ok(ClusterClient::start(self.file.clone(), secret)?)
    }

    pub(crate) async fn mds(&self) -> Result<MdsReport> {
        Ok(http::mds_report(&self.file).await?)
    }

    /// The reports of the servers that answer.
    pub(crate) async fn servers(&self) -> Vec<ServerReport> {
        http::server_reports(&self.file).await.into_iter().flatten().collect()
    }

    pub(crate) async fn operator(&self, path: &str) -> Result<()> {
        let secret = secret_file::load(&ClusterFile::secret_path(&self.path))?;
        http::operator(&self.file, &secret, path).await?;
        Ok(())
    }

    pub(crate) async fn stop(mut self) {
        stop_all(&mut self.children).await;
    }
}
