//! The metadata service as a process: the core's `Mds` driven by one task, its
//! commands persisted in the command log (redb) before any action after them is
//! carried out (DESIGN.md: a view change is durable before it is announced).
//!
//! At start the MDS is rebuilt from the log by `Mds::restore`: every lease granted
//! before is waited out, and every next primary recovers its DVL from the loggers.

use std::path::Path;
use std::sync::Arc;

use somnus_core::cluster::ClusterConfig;
use somnus_core::cluster::mds::{Mds, MdsAction, MdsCounters, MdsEvent};
use somnus_core::layout::Layout;
use somnus_types::ServerId;
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::command_log::{CommandLog, CommandLogError};
use crate::net::Outbox;
use crate::transport::Inbound;

/// What the MDS's task publishes for status and metrics.
#[derive(Clone, Debug, Default)]
pub struct MdsStatus {
    pub gear: u32,
    pub power: Vec<somnus_core::cluster::ServerPower>,
    pub groups_led: Vec<usize>,
    pub groups_held: Vec<usize>,
    pub rebuilds_under_way: usize,
    pub objects: usize,
    pub counters: MdsCounters,
}

/// The MDS's inputs.
pub struct MdsInputs {
    pub inbox: mpsc::Receiver<Inbound>,
    /// The operator's commands (`somnus gear set`, `somnus server remove`).
    pub operator: mpsc::UnboundedReceiver<MdsEvent>,
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
    let _ = std::fs::create_dir_all(dir);
    let (log, commands) = CommandLog::open(&dir.join("commands.redb"))?;
    let mds = Mds::restore(config, layout, clock.now(), commands);
    Ok((log, mds))
}

/// Runs the MDS until shutdown, or until its command log fails (then the error is
/// returned: an MDS that cannot persist stops).
pub async fn run(
    mut mds: Mds,
    mut log: CommandLog,
    clock: Clock,
    outbox: Outbox,
    wake: Arc<dyn Fn(ServerId) + Send + Sync>,
    mut inputs: MdsInputs,
    status: watch::Sender<MdsStatus>,
) -> Result<(), CommandLogError> {
    carry_out(&mut mds, &mut log, &outbox, wake.as_ref())?;
    publish(&mds, &status);
    loop {
        let event = tokio::select! {
            inbound = inputs.inbox.recv() => match inbound {
                Some(Inbound { from, message }) => MdsEvent::MessageReceived { from, message },
                None => break,
            },
            Some(event) = inputs.operator.recv() => event,
            () = clock.sleep_until(mds.poll_timeout()) => MdsEvent::TimerFired,
            _ = inputs.shutdown.changed() => break,
        };
        mds.handle(clock.now(), event);
        carry_out(&mut mds, &mut log, &outbox, wake.as_ref())?;
        // Status follows every event (a client's `put` then `status` sees the object);
        // an MDS's events are heartbeats and metadata, never the data path.
        publish(&mds, &status);
    }
    publish(&mds, &status);
    Ok(())
}

/// Publishes the MDS's state (after each event, and when it stops).
fn publish(mds: &Mds, status: &watch::Sender<MdsStatus>) {
    let servers = (0..mds.server_count()).map(|s| ServerId(s as u32));
    let _ = status.send(MdsStatus {
        gear: mds.gear(),
        power: servers.clone().map(|s| mds.server_power(s)).collect(),
        groups_led: servers.clone().map(|s| mds.groups_led(s)).collect(),
        groups_held: mds.groups_held(),
        rebuilds_under_way: mds.rebuilds_under_way(),
        objects: mds.object_count(),
        counters: mds.counters(),
    });
}

fn carry_out(
    mds: &mut Mds,
    log: &mut CommandLog,
    outbox: &Outbox,
    wake: &(dyn Fn(ServerId) + Send + Sync),
) -> Result<(), CommandLogError> {
    while let Some(action) = mds.poll_action() {
        match action {
            MdsAction::Persist(command) => tokio::task::block_in_place(|| log.append(&command))?,
            MdsAction::Send { to, message } => outbox.send(to, message),
            MdsAction::WakeServer(server) => wake(server),
        }
    }
    Ok(())
}
