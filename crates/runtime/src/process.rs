//! Starting a role as a process: `somnus mds` and `somnus server` read the cluster
//! file and its secret, listen on their address (and serve HTTP where the file says),
//! and run their tasks until a signal (SIGINT or SIGTERM) or a fatal error: the MDS
//! its core and the waker of sleeping servers; a server its core and its power task.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use somnus_core::cluster::{Peer, ServerPower};
use somnus_types::ServerId;
use somnus_wire::ClusterSecret;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::cluster_file::ClusterFile;
use crate::files::secret_file;
use crate::mds::task as mds_task;
use crate::mds::task::MdsStatus;
use crate::net::outbox::{Outbox, listen};
use crate::net::transport::{Identity, WireCounters};
use crate::observe::http::{Endpoint, Operator};
use crate::observe::status::{
    ClusterSpace, MdsReport, MdsServerView, ServerReport, ServerSpace, WireReport,
};
use crate::observe::{http, metrics};
use crate::power::{NodeMeter, PowerDriver, Rapl, WakeListener, Waker};
use crate::server::task as server_task;

/// Operator commands waiting for the MDS at most: past it, a command is answered 503
/// (a person or a script sends them, a few a minute at most).
const OPERATOR_QUEUE: usize = 64;

/// Why a role could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    File(#[from] crate::cluster_file::ClusterFileError),
    #[error(transparent)]
    Secret(#[from] secret_file::SecretFileError),
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsError),
    #[error("cannot listen on {address}: {source}")]
    Listen { address: std::net::SocketAddr, source: std::io::Error },
    #[error("the cluster file has no server {0}")]
    NoSuchServer(u32),
    #[error("the cluster file gives {0:?} no address")]
    NoAddress(Peer),
    #[error("{0}")]
    Layout(#[from] somnus_core::layout::LayoutError),
    #[error(transparent)]
    CommandLog(#[from] crate::mds::command_log::CommandLogError),
    #[error(transparent)]
    ServerStart(#[from] server_task::ServerNodeError),
    #[error(transparent)]
    ServerDisk(#[from] crate::server::disk::ServerDiskError),
    #[error("cannot wait for signals: {0}")]
    Signals(std::io::Error),
    #[error("cannot open the wake channel on {address}: {source}")]
    Wake { address: std::net::SocketAddr, source: std::io::Error },
    #[error("{0}")]
    Profile(String),
}

/// The role's shared pieces: its outbox, inbox, listener and transport counters.
struct Wiring {
    outbox: Outbox,
    inbox: mpsc::Receiver<crate::net::transport::Inbound>,
    listener: tokio::task::JoinHandle<()>,
    counters: Arc<WireCounters>,
}

async fn wire(
    file: &Arc<ClusterFile>,
    secret: ClusterSecret,
    peer: Peer,
) -> Result<Wiring, ProcessError> {
    let identity = Arc::new(Identity::on(file.cluster.wire, peer, secret)?);
    let counters = Arc::new(WireCounters::default());
    let (inbox_tx, inbox) = mpsc::channel(4096);
    let outbox = Outbox::new(identity.clone(), file.clone(), counters.clone(), inbox_tx.clone());
    let address = file.address(peer).ok_or(ProcessError::NoAddress(peer))?;
    let socket = TcpListener::bind(address)
        .await
        .map_err(|source| ProcessError::Listen { address, source })?;
    let listener = listen(socket, identity, counters.clone(), outbox.clone(), inbox_tx);
    Ok(Wiring { outbox, inbox, listener, counters })
}

/// Serves `endpoint` at `address`, if the file gives one.
async fn serve_http(
    address: Option<SocketAddr>,
    endpoint: Endpoint,
) -> Result<Option<tokio::task::JoinHandle<()>>, ProcessError> {
    let Some(address) = address else { return Ok(None) };
    let socket = TcpListener::bind(address)
        .await
        .map_err(|source| ProcessError::Listen { address, source })?;
    Ok(Some(http::serve(socket, endpoint)))
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
    crate::files::open_files::raise_limit_and_say("mds");
    let file = Arc::new(ClusterFile::load(path)?);
    let layout = file.layout()?;
    let clock = Clock::start(file.cluster.time_scale);
    let (log, mut mds) = mds_task::open(&file.mds.data_dir, file.config(), &layout, &clock)?;
    // A restarted MDS starts its scheduler again: with the operator's override if
    // one was set (the gear set or held stays), else with every server on (it kept no
    // history of the load).
    if let Some(config) = file.scheduler_config().map_err(ProcessError::Profile)? {
        mds.enable_scheduler(config).map_err(ProcessError::Profile)?;
    }
    let secret = secret_file::load(&ClusterFile::secret_path(path))?;
    let wiring = wire(&file, secret.clone(), Peer::Mds).await?;
    let (operator_tx, operator) = mpsc::channel(OPERATOR_QUEUE);
    let shutdown = on_signal()?;
    let inputs = mds_task::MdsInputs { inbox: wiring.inbox, operator, shutdown };
    let (status, status_rx) = watch::channel(MdsStatus::default());
    let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
    let waker = Waker::bind()
        .await
        .map_err(|source| ProcessError::Wake { address: unspecified, source })?;
    let wake = wake_servers(file.clone(), Arc::new(waker));
    let report = mds_report(&file, status_rx, wiring.counters.clone())?;
    let operator = Operator {
        secret,
        events: operator_tx,
        servers: file.servers.len() as u32,
        replicas: file.cluster.replicas,
        scheduled: file.gear.is_some(),
    };
    let endpoint = Endpoint { report, metrics: metrics::install(), operator: Some(operator) };
    let http = serve_http(file.mds.http, endpoint).await?;
    let result = mds_task::run(mds, log, layout, clock, wiring.outbox, wake, inputs, status).await;
    wiring.listener.abort();
    if let Some(http) = http {
        http.abort();
    }
    Ok(result?)
}

/// The MDS's `WakeServer`: a magic packet to the server's wake channel (the MDS sends
/// it again while it waits for the server: `WAKE_RESEND`).
fn wake_servers(file: Arc<ClusterFile>, waker: Arc<Waker>) -> Arc<dyn Fn(ServerId) + Send + Sync> {
    Arc::new(move |server: ServerId| {
        let Some(section) = file.servers.get(server.index()) else { return };
        let mac = section.power.wake_mac(server.0);
        let broadcast = section.power.mac.is_some();
        let address = section.address;
        let waker = waker.clone();
        tokio::spawn(async move {
            if let Err(error) = waker.wake(mac, address, broadcast).await {
                eprintln!("mds: cannot send the wake packet of server {}: {error}", server.0);
            }
        });
    })
}

type Report = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// The MDS's `/status`: its view of every server, with the layout's racks and gear
/// groups; each call also sets the metrics' gauges.
fn mds_report(
    file: &ClusterFile,
    status: watch::Receiver<MdsStatus>,
    counters: Arc<WireCounters>,
) -> Result<Report, ProcessError> {
    let topology = file.topology()?;
    let servers = file.servers.len();
    let replicas = file.cluster.replicas;
    let rapl = Mutex::new(Rapl::open(Path::new(crate::power::RAPL_ROOT)));
    Ok(Arc::new(move || {
        let now = status.borrow().clone();
        let servers = (0..servers)
            .map(|index| {
                let server = ServerId(index as u32);
                MdsServerView {
                    id: server.0,
                    rack: topology.rack(server).0,
                    gear_group: topology.gear_group(server).0,
                    power: now.power.get(index).copied().unwrap_or(ServerPower::On),
                    primaries: now.groups_led.get(index).copied().unwrap_or(0),
                    chunk_groups: now.groups_held.get(index).copied().unwrap_or(0),
                    full: now.full.contains(&server),
                    space: {
                        let told = now.space.get(index).copied().unwrap_or_default();
                        ServerSpace {
                            stored_bytes: told.stored_bytes,
                            disk_bytes: told.disk_bytes,
                            free_bytes: told.free_bytes,
                            to_free_bytes: now.to_free.get(index).copied().unwrap_or(0),
                        }
                    },
                }
            })
            .collect::<Vec<MdsServerView>>();
        let space = ClusterSpace {
            logical_bytes: now.logical_bytes,
            stored_bytes: servers.iter().map(|s| s.space.stored_bytes).sum(),
            disk_bytes: servers.iter().filter_map(|s| s.space.disk_bytes).sum(),
            free_bytes: servers.iter().filter_map(|s| s.space.free_bytes).sum(),
            to_free_bytes: servers.iter().map(|s| s.space.to_free_bytes).sum(),
            frees_queued: now.frees_queued,
        };
        let rapl_joules =
            rapl.lock().unwrap_or_else(PoisonError::into_inner).as_mut().map(Rapl::joules);
        let report = MdsReport {
            gear: now.gear,
            replicas,
            objects: now.objects,
            rebuilds_under_way: now.rebuilds_under_way,
            servers,
            groups: now.groups,
            counters: now.counters,
            space,
            rapl_joules,
            wire: WireReport::of(&counters),
        };
        metrics::record_mds(&report);
        serde_json::to_value(&report).unwrap_or_default()
    }))
}

/// Runs server `id` of the cluster file at `path` until a signal.
pub async fn run_server(path: &Path, id: u32) -> Result<(), ProcessError> {
    crate::files::open_files::raise_limit_and_say(&format!("server {id}"));
    let file = Arc::new(ClusterFile::load(path)?);
    let section = file.servers.get(id as usize).ok_or(ProcessError::NoSuchServer(id))?.clone();
    let config = file.config();
    let topology = Arc::new(file.topology()?);
    let profile = file.server_profile().map_err(ProcessError::Profile)?;
    let server = ServerId(id);
    let (files, durable) = server_task::open_durable(&section.data_dir, server, &config)?;
    let secret = secret_file::load(&ClusterFile::secret_path(path))?;
    let wiring = wire(&file, secret, Peer::Server(server)).await?;
    let clock = Clock::start(file.cluster.time_scale);
    let shutdown = on_signal()?;
    // The power task: the actuators, the meter and the wake channel.
    let listener = WakeListener::bind(section.address, section.power.wake_mac(id))
        .await
        .map_err(|source| ProcessError::Wake { address: section.address, source })?;
    let meter = Arc::new(Mutex::new(NodeMeter::new(profile, clock.now())));
    let (sleeps_tx, sleeps) = mpsc::channel(1);
    let (woken, wake) = mpsc::channel(1);
    let power = PowerDriver {
        server: id,
        actuators: section.power.actuators(),
        emulated: section.power.emulated(),
        meter: meter.clone(),
        listener,
        clock,
        sleeps,
        woken,
        shutdown: shutdown.clone(),
    };
    let power = tokio::spawn(power.run());
    let (status, last) = watch::channel(server_task::ServerStatus::default());
    let report = server_report(id, last.clone(), meter, clock, wiring.counters.clone());
    let endpoint = Endpoint { report, metrics: metrics::install(), operator: None };
    let http = serve_http(section.http, endpoint).await?;
    let disk_dir = section.data_dir.clone();
    let inputs = server_task::ServerInputs { inbox: wiring.inbox, wake, shutdown, disk_dir };
    let outputs = server_task::ServerOutputs { outbox: wiring.outbox, status, sleeps: sleeps_tx };
    let result =
        server_task::run(server, config, topology, files, durable, clock, inputs, outputs).await;
    wiring.listener.abort();
    power.abort();
    if let Some(http) = http {
        http.abort();
    }
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

/// A server's `/status`; each call also sets the metrics' gauges.
fn server_report(
    id: u32,
    status: watch::Receiver<server_task::ServerStatus>,
    meter: Arc<Mutex<NodeMeter>>,
    clock: Clock,
    counters: Arc<WireCounters>,
) -> Report {
    Arc::new(move || {
        let now = status.borrow().clone();
        let energy = meter.lock().unwrap_or_else(PoisonError::into_inner).reading(clock.now());
        let report = ServerReport {
            id,
            power: now.power,
            leads: now.leads,
            free_bytes: now.free_bytes,
            full: now.full,
            dvl_live_bytes: now.log_live_bytes,
            dvl_used_bytes: now.log_used_bytes,
            stored_bytes: now.stored_bytes,
            disk_bytes: now.disk_bytes,
            slots_used: now.packs.slots_used,
            slots_reserved: now.packs.slots_reserved,
            journal_bytes: now.journal_bytes,
            counters: now.counters,
            energy,
            wire: WireReport::of(&counters),
        };
        metrics::record_server(&report);
        serde_json::to_value(&report).unwrap_or_default()
    })
}
