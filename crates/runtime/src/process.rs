//! Starting a role as a process: `somnus mds` and `somnus server` read the cluster
//! file and its secret, listen on their address, and run their task until a signal
//! (SIGINT or SIGTERM) or a fatal error.

use std::path::Path;
use std::sync::Arc;

use somnus_core::cluster::Peer;
use somnus_types::ServerId;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::cluster_file::ClusterFile;
use crate::net::{Outbox, listen};
use crate::transport::{Identity, WireCounters};
use crate::{mds_node, secret_file, server_node};

/// Why a role could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    File(#[from] crate::cluster_file::ClusterFileError),
    #[error(transparent)]
    Secret(#[from] secret_file::SecretFileError),
    #[error("cannot listen on {address}: {source}")]
    Listen { address: std::net::SocketAddr, source: std::io::Error },
    #[error("the cluster file has no server {0}")]
    NoSuchServer(u32),
    #[error("the cluster file gives {0:?} no address")]
    NoAddress(Peer),
    #[error("{0}")]
    Layout(#[from] somnus_core::layout::LayoutError),
    #[error(transparent)]
    CommandLog(#[from] crate::command_log::CommandLogError),
    #[error(transparent)]
    ServerStart(#[from] server_node::ServerNodeError),
    #[error(transparent)]
    ServerDisk(#[from] crate::server_disk::ServerDiskError),
    #[error("cannot wait for signals: {0}")]
    Signals(std::io::Error),
}

/// The role's shared pieces: its outbox, inbox and listener.
struct Wiring {
    outbox: Outbox,
    inbox: mpsc::Receiver<crate::transport::Inbound>,
    listener: tokio::task::JoinHandle<()>,
}

async fn wire(file: &Arc<ClusterFile>, path: &Path, peer: Peer) -> Result<Wiring, ProcessError> {
    let secret = secret_file::load(&ClusterFile::secret_path(path))?;
    let identity = Arc::new(Identity::new(peer, secret));
    let counters = Arc::new(WireCounters::default());
    let (inbox_tx, inbox) = mpsc::channel(4096);
    let outbox = Outbox::new(identity.clone(), file.clone(), counters.clone(), inbox_tx.clone());
    let address = file.address(peer).ok_or(ProcessError::NoAddress(peer))?;
    let socket = TcpListener::bind(address)
        .await
        .map_err(|source| ProcessError::Listen { address, source })?;
    let listener = listen(socket, identity, counters.clone(), outbox.clone(), inbox_tx);
    Ok(Wiring { outbox, inbox, listener })
}

/// A watch that turns true on SIGINT or SIGTERM.
fn on_signal() -> Result<watch::Receiver<bool>, ProcessError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ProcessError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(ProcessError::Signals)?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Runs the MDS of the cluster file at `path` until a signal.
pub async fn run_mds(path: &Path) -> Result<(), ProcessError> {
    let file = Arc::new(ClusterFile::load(path)?);
    let layout = file.layout()?;
    let clock = Clock::start(file.cluster.time_scale);
    let (log, mds) = mds_node::open(&file.mds.data_dir, file.config(), &layout, &clock)?;
    let wiring = wire(&file, path, Peer::Mds).await?;
    let (_operator_tx, operator) = mpsc::unbounded_channel();
    let inputs = mds_node::MdsInputs { inbox: wiring.inbox, operator, shutdown: on_signal()? };
    let (status, _) = watch::channel(mds_node::MdsStatus::default());
    // Emulated wake: servers wake on their own wake channel (to come: Wake-on-LAN).
    let wake = Arc::new(|_server: ServerId| {});
    let result = mds_node::run(mds, log, clock, wiring.outbox, wake, inputs, status).await;
    wiring.listener.abort();
    Ok(result?)
}

/// Runs server `id` of the cluster file at `path` until a signal.
pub async fn run_server(path: &Path, id: u32) -> Result<(), ProcessError> {
    let file = Arc::new(ClusterFile::load(path)?);
    let section = file.servers.get(id as usize).ok_or(ProcessError::NoSuchServer(id))?;
    let config = file.config();
    let topology = Arc::new(file.topology()?);
    let server = ServerId(id);
    let (disk, durable) = server_node::open_durable(&section.data_dir, server, &config)?;
    let wiring = wire(&file, path, Peer::Server(server)).await?;
    let clock = Clock::start(file.cluster.time_scale);
    let (_wake_tx, wake) = mpsc::unbounded_channel();
    let inputs = server_node::ServerInputs { inbox: wiring.inbox, wake, shutdown: on_signal()? };
    let (status, last) = watch::channel(server_node::ServerStatus::default());
    let result = server_node::run(
        server,
        config,
        topology,
        disk,
        durable,
        clock,
        wiring.outbox,
        inputs,
        status,
    )
    .await;
    wiring.listener.abort();
    let c = last.borrow().counters;
    eprintln!(
        "server {id} stopped: {} writes acknowledged as primary, {} logged for sleeping or \
         failed replicas, {} reclaimed, {} reads served ({} from loggers), {} blocks repaired",
        c.writes_acknowledged,
        c.writes_logged,
        c.writes_reclaimed,
        c.reads_served,
        c.reads_from_loggers,
        c.blocks_repaired
    );
    Ok(result?)
}
