//! The metadata service as a process: the core's `Mds` driven by one task, its
//! commands persisted in the command log (redb) before any action after them is
//! carried out (DESIGN.md: a view change is durable before it is announced).
//!
//! At start the MDS is rebuilt from the log by `Mds::restore`: every lease granted
//! before is waited out, and every next primary recovers its DVL from the loggers.

use std::path::Path;
use std::sync::Arc;

use somnus_core::cluster::mds::{Mds, MdsAction, MdsCounters, MdsEvent};
use somnus_core::cluster::{ClusterConfig, ServerPower};
use somnus_core::layout::Layout;
use somnus_types::{ChunkGroupId, ServerId};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::mds::command_log::{CommandLog, CommandLogError};
use crate::net::outbox::Outbox;
use crate::net::transport::Inbound;
use crate::observe::status::GroupReport;

/// What the MDS's task publishes for status and metrics.
#[derive(Clone, Debug, Default)]
pub struct MdsStatus {
    pub gear: u32,
    pub power: Vec<somnus_core::cluster::ServerPower>,
    pub groups_led: Vec<usize>,
    pub groups_held: Vec<usize>,
    /// Each chunk group's replicas and its primary (granted).
    pub groups: Vec<GroupReport>,
    pub rebuilds_under_way: usize,
    pub objects: usize,
    pub counters: MdsCounters,
    /// The servers whose last heartbeat said their disk is full.
    pub full: Vec<ServerId>,
    /// Each server's last report of its disk, and the bytes to free there.
    pub space: Vec<somnus_core::cluster::SpaceReport>,
    pub to_free: Vec<u64>,
    /// Bytes the names hold, and entries of the free log.
    pub logical_bytes: u64,
    pub frees_queued: usize,
}

/// Commands logged since the snapshot past which the log is compacted: a restart
/// then replays the snapshot (a command per object and per changed group) and at most
/// this many more.
pub const COMPACT_AFTER: u64 = 10_000;

/// The MDS's inputs.
pub struct MdsInputs {
    pub inbox: mpsc::Receiver<Inbound>,
    /// The operator's commands (`somnus gear set`, `somnus server remove`).
    pub operator: mpsc::Receiver<MdsEvent>,
    pub shutdown: watch::Receiver<bool>,
}

/// Opens the command log in `dir` and rebuilds the MDS from it.
pub fn open(
    dir: &Path,
    config: ClusterConfig,
    layout: &Layout,
    clock: &Clock,
) -> Result<(CommandLog, Mds), CommandLogError> {
    // A directory that cannot be made shows as the store's error, which names the path.
    let _ = crate::files::durable::create_private_dir_all(dir);
    let path = dir.join("commands.redb");
    let (log, commands) = CommandLog::open(&path)?;
    // redb creates its file as the umask allows: the names and records are the
    // users', for its owner alone, as every data file of the cluster is.
    let _ = std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600));
    let mds = Mds::restore(config, layout, clock.now(), commands);
    Ok((log, mds))
}

/// Runs the MDS until shutdown, or until its command log fails (then the error is
/// returned: an MDS that cannot persist stops).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    mut mds: Mds,
    log: CommandLog,
    layout: Layout,
    clock: Clock,
    outbox: Outbox,
    wake: Arc<dyn Fn(ServerId) + Send + Sync>,
    mut inputs: MdsInputs,
    status: watch::Sender<MdsStatus>,
) -> Result<(), CommandLogError> {
    let mut log = Some(log);
    carry_out(&mut mds, &mut log, &outbox, wake.as_ref()).await?;
    compact_if_due(&mds, &mut log, &layout).await?;
    publish(&mds, &status);
    // The MDS's own timers may be seconds apart: counters are caught up on this tick.
    let mut status_tick = tokio::time::interval(STATUS_INTERVAL);
    loop {
        let event = tokio::select! {
            inbound = inputs.inbox.recv() => match inbound {
                Some(Inbound { from, message, .. }) => MdsEvent::MessageReceived { from, message },
                None => break,
            },
            Some(event) = inputs.operator.recv() => event,
            () = clock.sleep_until(mds.poll_timeout()) => MdsEvent::TimerFired,
            _ = status_tick.tick() => {
                publish(&mds, &status);
                continue;
            }
            _ = inputs.shutdown.changed() => break,
        };
        let timer = matches!(event, MdsEvent::TimerFired);
        let full_before = mds.full_servers().to_vec();
        let failed_before = mds.counters().servers_failed;
        if timer {
            // What came before the timer was due is heard before it: an MDS held up (a
            // commit's sync on a loaded disk) must not fail a server whose heartbeat
            // waits in its inbox.
            hear_waiting(&mut mds, &mut inputs.inbox, &clock, GROUP_EVENTS_MAX);
        }
        // Only a timer fails servers: their power before it, to log those it fails.
        let power_before: Vec<ServerPower> = match timer {
            true => (0..mds.server_count()).map(|s| mds.server_power(ServerId(s as u32))).collect(),
            false => Vec::new(),
        };
        mds.handle(clock.now(), event);
        if mds.counters().servers_failed > failed_before {
            tell_failures(&mds, &clock, &power_before);
        }
        // Group commit: the messages already waiting are handled as well, and the
        // commands of them all made durable in one transaction (one sync) before any
        // of their answers goes out. Under many clients at once, a command waits for
        // one sync instead of one per command before it.
        hear_waiting(&mut mds, &mut inputs.inbox, &clock, GROUP_EVENTS_MAX - 1);
        let changed = carry_out(&mut mds, &mut log, &outbox, wake.as_ref()).await?;
        compact_if_due(&mds, &mut log, &layout).await?;
        // What status shows changes by a command (a client's `put` then `status` sees
        // the object) or by a heartbeat that says a disk filled or has room again;
        // counters such as drops are caught up at each timer and tick: the heartbeats
        // that change nothing publish nothing.
        if changed || timer || mds.full_servers() != full_before {
            publish(&mds, &status);
        }
    }
    publish(&mds, &status);
    Ok(())
}

/// Logs each server failed by the event just handled, with how long it was silent:
/// an operator (and a soak) can tell a dead server from a busy one.
fn tell_failures(mds: &Mds, clock: &Clock, before: &[ServerPower]) {
    let now = clock.now();
    for (index, was) in before.iter().enumerate() {
        let server = ServerId(index as u32);
        if *was == ServerPower::Failed || mds.server_power(server) != ServerPower::Failed {
            continue;
        }
        let silent = now.saturating_duration_since(mds.heard_from(server));
        eprintln!(
            "mds: server {index} failed: no heartbeat for {:.1} s of cluster time ({:.2} s real)",
            silent.as_secs_f64(),
            clock.real_of(silent).as_secs_f64()
        );
    }
}

/// Hands `mds` the messages waiting in `inbox`, `max` at most.
fn hear_waiting(mds: &mut Mds, inbox: &mut mpsc::Receiver<Inbound>, clock: &Clock, max: usize) {
    for _ in 0..max {
        let Ok(Inbound { from, message, .. }) = inbox.try_recv() else { break };
        mds.handle(clock.now(), MdsEvent::MessageReceived { from, message });
    }
}

/// Events handled at most before their commands are made durable together.
const GROUP_EVENTS_MAX: usize = 256;

/// How often the MDS publishes its status at the least (real time).
const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Publishes the MDS's state (after each event that committed a command or changed
/// the full servers, at each timer and tick, and when it stops).
fn publish(mds: &Mds, status: &watch::Sender<MdsStatus>) {
    let servers = (0..mds.server_count()).map(|s| ServerId(s as u32));
    let _ = status.send(MdsStatus {
        gear: mds.gear(),
        power: servers.clone().map(|s| mds.server_power(s)).collect(),
        groups_led: servers.clone().map(|s| mds.groups_led(s)).collect(),
        groups_held: mds.groups_held(),
        groups: (0..mds.group_count())
            .map(|g| {
                let view = mds.view(ChunkGroupId(g as u32));
                GroupReport {
                    id: g as u32,
                    replicas: view.replicas.iter().map(|s| s.0).collect(),
                    primary: view.primary.map(|p| p.0),
                }
            })
            .collect(),
        rebuilds_under_way: mds.rebuilds_under_way(),
        objects: mds.object_count(),
        counters: mds.counters(),
        full: mds.full_servers().to_vec(),
        space: servers.clone().map(|s| mds.space_of(s)).collect(),
        to_free: mds.bytes_to_free(),
        logical_bytes: mds.bytes_named(),
        frees_queued: mds.frees_queued(),
    });
}

/// Replaces the log with a snapshot once it has grown past `COMPACT_AFTER`. Called
/// with every action carried out, so every command the MDS applied is in the log and
/// the snapshot covers exactly them.
async fn compact_if_due(
    mds: &Mds,
    log: &mut Option<CommandLog>,
    layout: &Layout,
) -> Result<(), CommandLogError> {
    if log.as_ref().is_none_or(|log| log.logged() < COMPACT_AFTER) {
        return Ok(());
    }
    let snapshot = mds.snapshot(layout);
    off_task(log, move |log| log.compact(&snapshot)).await
}

/// Runs `work` on the command log on a blocking thread, the log moved there and
/// back: the MDS's task waits for it (its answers go out only once their commands
/// are durable) without holding a worker of the runtime, whose other tasks go on.
async fn off_task(
    log: &mut Option<CommandLog>,
    work: impl FnOnce(&mut CommandLog) -> Result<(), CommandLogError> + Send + 'static,
) -> Result<(), CommandLogError> {
    let Some(mut taken) = log.take() else { return Err(CommandLogError::Lost) };
    let (taken, done) = tokio::task::spawn_blocking(move || {
        let done = work(&mut taken);
        (taken, done)
    })
    .await
    .map_err(|_| CommandLogError::Lost)?;
    *log = Some(taken);
    done
}

/// Carries out the MDS's actions: every command persisted first, in one transaction,
/// then the others in order (so each after the commands before it); whether any
/// command was persisted.
async fn carry_out(
    mds: &mut Mds,
    log: &mut Option<CommandLog>,
    outbox: &Outbox,
    wake: &(dyn Fn(ServerId) + Send + Sync),
) -> Result<bool, CommandLogError> {
    let mut commands = Vec::new();
    let mut others = Vec::new();
    while let Some(action) = mds.poll_action() {
        match action {
            MdsAction::Persist(command) => commands.push(command),
            other => others.push(other),
        }
    }
    let persisted = !commands.is_empty();
    if persisted {
        off_task(log, move |log| log.append_all(&commands)).await?;
    }
    for action in others {
        match action {
            MdsAction::Send { to, message } => outbox.send(to, message),
            MdsAction::WakeServer(server) => wake(server),
            // Never enabled here (docs/gear-scheduler.md, "io-server"): no compute
            // load reaches the runtime's MDS, and no node has an io-server actuator.
            MdsAction::ComputeRole { .. } | MdsAction::Persist(_) => {}
        }
    }
    Ok(persisted)
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::mds::MdsAction;
    use somnus_core::cluster::{ClientId, Message, Peer};
    use somnus_types::VirtualInstant;

    use super::*;
    use crate::cluster_file::test_file;

    /// Asks the MDS, persisting what it commits as the node does.
    fn ask(mds: &mut Mds, log: &mut CommandLog, message: Message) {
        let from = Peer::Client(ClientId(1));
        mds.handle(VirtualInstant::ZERO, MdsEvent::MessageReceived { from, message });
        while let Some(action) = mds.poll_action() {
            if let MdsAction::Persist(command) = action {
                log.append(&command).unwrap();
            }
        }
    }

    /// No addresses: what the MDS sends is dropped.
    struct Nowhere;

    impl crate::net::outbox::AddressBook for Nowhere {
        fn address(&self, _: Peer) -> Option<std::net::SocketAddr> {
            None
        }
    }

    /// An MDS held up past the failure timeout (a slow commit) finds its timer due and
    /// every server's heartbeat waiting in its inbox: it hears them first and fails
    /// nobody. Eight times over: were the two taken in any order (tokio's `select!`
    /// picks at random among ready branches), one of the eight would fail servers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heartbeats_waiting_when_the_failure_timer_is_due_are_heard_first() {
        use somnus_core::cluster::{ServerPower, ServerTime};
        use somnus_types::ServerId;
        let (file, layout) = (test_file(), test_file().layout().unwrap());
        for round in 0..8 {
            let dir = tempfile::tempdir().unwrap();
            // 20 times real time: the 6 s failure timeout is 300 ms.
            let clock = Clock::start(20.0);
            let mds = Mds::new(file.config(), &layout, clock.now());
            let (log, _) = CommandLog::open(&dir.path().join("commands.redb")).unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            let (inbox_tx, inbox) = mpsc::channel(1024);
            for server in 0..file.servers.len() as u32 {
                let heartbeat = Message::Heartbeat {
                    sent_at: ServerTime { incarnation: 1, at: clock.now() },
                    power: ServerPower::On,
                    leads: Vec::new(),
                    full: false,
                    load: Vec::new(),
                    space: Box::default(),
                };
                let from = Peer::Server(ServerId(server));
                let inbound = Inbound { from, message: heartbeat, room: Default::default() };
                inbox_tx.send(inbound).await.unwrap();
            }
            let secret = somnus_wire::ClusterSecret::from_bytes([1; 32]);
            let identity = crate::net::transport::Identity::on(
                crate::cluster_file::Wire::Plain,
                Peer::Mds,
                secret,
            )
            .unwrap();
            let counters = Arc::new(crate::net::transport::WireCounters::default());
            let (replies, _) = mpsc::channel(16);
            let outbox = Outbox::new(Arc::new(identity), Arc::new(Nowhere), counters, replies);
            let (_operator_tx, operator) = mpsc::channel(1);
            let (stop, shutdown) = watch::channel(false);
            let inputs = MdsInputs { inbox, operator, shutdown };
            let (status, mut seen) = watch::channel(MdsStatus::default());
            let wake: Arc<dyn Fn(ServerId) + Send + Sync> = Arc::new(|_| {});
            let task =
                tokio::spawn(run(mds, log, layout.clone(), clock, outbox, wake, inputs, status));
            // Heard (published) within 100 ms: well inside the next 300 ms timeout.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let failed = seen.borrow_and_update().counters.servers_failed;
            stop.send(true).unwrap();
            task.await.unwrap().unwrap();
            assert_eq!(failed, 0, "round {round}: servers failed with heartbeats waiting");
        }
    }

    /// The log is compacted once past its bound, the next commands go on after the
    /// snapshot, and a restart from the store holds every object as it was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_command_log_compacts_into_a_snapshot_a_restart_restores() {
        let dir = tempfile::tempdir().unwrap();
        let (file, layout) = (test_file(), test_file().layout().unwrap());
        let path = dir.path().join("commands.redb");
        let (mut log, _) = CommandLog::open(&path).unwrap();
        let mut mds = Mds::new(file.config(), &layout, VirtualInstant::ZERO);
        let create = |request: u64| Message::CreateObject {
            request,
            name: format!("o{request}"),
            size_bytes: 4 << 20,
        };
        for request in 0..25 {
            ask(&mut mds, &mut log, create(request));
            if log.logged() >= 20 {
                log.compact(&mds.snapshot(&layout)).unwrap();
            }
        }
        // Each create is two commands: the object, and its request answered.
        assert_eq!(log.logged(), 10, "compacted at 20, five creates since");
        ask(&mut mds, &mut log, Message::DeleteObject { request: 90, name: "o24".into() });
        drop(log);
        let (reopened, commands) = CommandLog::open(&path).unwrap();
        assert_eq!(reopened.logged(), 12, "five creates and a delete after the snapshot");
        // The snapshot: the gear, the 20 objects then, the free log, the reserved ids,
        // the requests answered.
        assert_eq!(commands.len(), 24 + 12);
        let restored = Mds::restore(file.config(), &layout, VirtualInstant::ZERO, commands);
        assert_eq!(restored.object_count(), 24);
        for request in 0..24 {
            let name = format!("o{request}");
            let (a, b) = (restored.info(&name).unwrap(), mds.info(&name).unwrap());
            assert_eq!((a.object, a.chunk_groups), (b.object, b.chunk_groups), "{name}");
        }
        assert_eq!(mds.snapshot(&layout), restored.snapshot(&layout));
    }
}
