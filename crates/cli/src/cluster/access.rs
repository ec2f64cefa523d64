//! Where a command finds the cluster it works on: the cluster file (`--cluster`,
//! `SOMNUS_CLUSTER`, or `./somnus-data/cluster.toml` as `somnus up` writes it), its
//! secret, a client of it, and the async runtime a command runs on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use somnus_runtime::client::ClusterClient;
use somnus_runtime::cluster_file::ClusterFile;
use somnus_runtime::files::secret_file;
use somnus_wire::ClusterSecret;

/// Where the client verbs and `somnus up` look for the cluster by default.
pub(crate) const DEFAULT_DIR: &str = "somnus-data";

#[derive(Args)]
pub(crate) struct ClusterArg {
    /// The cluster file (default: $SOMNUS_CLUSTER, else ./somnus-data/cluster.toml, as
    /// `somnus up` writes it).
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
}

impl ClusterArg {
    pub(crate) fn path(&self) -> PathBuf {
        self.cluster
            .clone()
            .or_else(|| std::env::var_os("SOMNUS_CLUSTER").map(PathBuf::from))
            .unwrap_or_else(|| Path::new(DEFAULT_DIR).join("cluster.toml"))
    }
}

/// A tokio runtime for one command: two workers, as the machine has two cores.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `call` with a client of the cluster at `arg`'s file, on a runtime of its own.
pub(crate) fn with_client<T, F>(
    arg: &ClusterArg,
    call: impl FnOnce(ClusterClient) -> F,
) -> Result<T>
where
    F: std::future::Future<Output = Result<T>>,
{
    runtime()?.block_on(async { call(client(arg)?).await })
}

/// A client of the cluster at `arg`'s file.
fn client(arg: &ClusterArg) -> Result<ClusterClient> {
    let (file, secret) = load(arg)?;
    Ok(ClusterClient::start(Arc::new(file), secret)?)
}

/// The cluster file at `arg`, and its secret.
pub(crate) fn load(arg: &ClusterArg) -> Result<(ClusterFile, ClusterSecret)> {
    let path = arg.path();
    let file = ClusterFile::load(&path).with_context(
        || "no cluster found: start one with `somnus up`, or name its file with --cluster",
    )?;
    let secret = secret_file::load(&ClusterFile::secret_path(&path))?;
    Ok((file, secret))
}
