//! A storage server's disk worker: makes the replica changes the core issues durable
//! in the journal, many per sync (group commit), reports each done, and runs the
//! checkpoints the server's task asks for.
//!
//! The server's task sends each write's change as the core issues it and hears back,
//! in order, the ids of the writes now durable; only then does it tell the core
//! `DiskDone` (the core records the change and acknowledges). The journal's sync, and
//! then the writes of the runs of blocks each change lands on, run on tokio's blocking
//! pool, so the task goes on serving meanwhile, and changes that arrive during one
//! sync go together in the next. A checkpoint, in order with the changes, starts a new
//! journal, then finishes on a thread of its own while the changes after it go on into
//! the new journal (`server/disk/checkpoint.rs`). After a free, it punches out the slots of the
//! freed chunks, a batch between syncs, off the server's task.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use somnus_core::cluster::store::{BlockRun, StoreOp};
use somnus_types::IoId;
use tokio::sync::mpsc;

use crate::server::disk::{Groups, ServerDisk, ServerDiskError};
use crate::server::packs::SharedPacks;

/// Changes taken into one sync at most: a bound on a batch's memory and latency.
const BATCH_MAX: usize = 256;

/// Jobs waiting for the worker at most. The server's task sends no more changes than
/// it counts in flight (`CHANGES_IN_FLIGHT_MAX` in `server::task`), and a
/// checkpoint only with none in flight, so a send never finds the queue full.
pub const JOBS_MAX: usize = 1025;

/// What the server's task asks of the worker, in order.
#[derive(Debug)]
pub enum Job {
    /// Make this replica change durable, then write the runs it lands on.
    Change(IoId, StoreOp, Vec<BlockRun>),
    /// Checkpoint: `groups` are the store's, every change sent before applied.
    Checkpoint(Groups),
}

/// What one sync made of the writes sent, in the order they were sent, or how a
/// checkpoint ended.
#[derive(Debug)]
pub enum Synced {
    /// Durable.
    Durable(Vec<IoId>),
    /// Not durable, none of them: the disk had no room (said why). The worker goes
    /// on with the next writes.
    NoRoom(Vec<IoId>, String),
    /// The disk failed them (said how): what of them is durable is unknown.
    Failed(Vec<IoId>, String),
    /// The checkpoint is done, in this long (begun to finished).
    Checkpointed(Duration),
    /// The checkpoint found no room (said why): the journals stay, the next one
    /// covers them too.
    CheckpointNoRoom(String),
}

/// What the worker reports: a sync's outcome, or the error that stopped it (the
/// server stops: its disk fails, it cannot make writes durable).
pub type Durable = Result<Synced, ServerDiskError>;

/// Starts the worker on `disk`; returns where to send jobs and where their outcomes
/// come back (a report per batch of jobs, so no more than [`JOBS_MAX`] of them wait
/// for the server's task, which always takes them). The worker ends when the sender
/// is dropped.
pub fn spawn(disk: Arc<Mutex<ServerDisk>>) -> (mpsc::Sender<Job>, mpsc::Receiver<Durable>) {
    let (jobs, mut incoming) = mpsc::channel::<Job>(JOBS_MAX);
    let (report, done) = mpsc::channel(JOBS_MAX + 1);
    let packs = disk.lock().map(|disk| disk.packs()).ok();
    tokio::spawn(async move {
        let mut next = None;
        let mut punching = false;
        loop {
            // A batch of punches between jobs, so a stream of changes never starves them.
            if punching {
                punching = match &packs {
                    Some(packs) => match punch(packs).await {
                        Ok(more) => more,
                        // A freed chunk's headers may stay on disk: the server stops
                        // (its restart replays the journal that frees it).
                        Err(error) => {
                            let _ = report.send(Err(ServerDiskError::Io(error))).await;
                            return;
                        }
                    },
                    None => false,
                };
            }
            let job = match next.take() {
                Some(job) => job,
                None if punching => match incoming.try_recv() {
                    Ok(job) => job,
                    Err(mpsc::error::TryRecvError::Empty) => continue,
                    Err(mpsc::error::TryRecvError::Disconnected) => return,
                },
                None => match incoming.recv().await {
                    Some(job) => job,
                    None => return,
                },
            };
            let outcome = match job {
                Job::Checkpoint(groups) => begin_checkpoint(&disk, groups, &report).await,
                Job::Change(io, op, runs) => {
                    let mut batch = vec![(io, op, runs)];
                    while batch.len() < BATCH_MAX {
                        match incoming.try_recv() {
                            Ok(Job::Change(io, op, runs)) => batch.push((io, op, runs)),
                            Ok(checkpoint) => {
                                next = Some(checkpoint);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    // A free's slots are released with it: punched out between jobs.
                    punching |= batch.iter().any(|(_, op, _)| matches!(op, StoreOp::Free { .. }));
                    Some(sync(&disk, batch).await)
                }
            };
            let Some(outcome) = outcome else { continue };
            let failed = outcome.is_err();
            if report.send(outcome).await.is_err() || failed {
                return;
            }
        }
    });
    (jobs, done)
}

/// Appends `batch` to the journal, syncs it, and writes the runs of its changes.
async fn sync(
    disk: &Arc<Mutex<ServerDisk>>,
    batch: Vec<(IoId, StoreOp, Vec<BlockRun>)>,
) -> Durable {
    let disk = disk.clone();
    tokio::task::spawn_blocking(move || {
        let mut ios = Vec::with_capacity(batch.len());
        let mut ops = Vec::with_capacity(batch.len());
        let mut runs = Vec::with_capacity(batch.len());
        for (io, op, run) in batch {
            ios.push(io);
            ops.push(op);
            runs.push(run);
        }
        let mut disk = lock(&disk)?;
        match disk.make_durable(&ops, &runs) {
            Ok(()) => Ok(Synced::Durable(ios)),
            Err(error) if error.is_no_space() => Ok(Synced::NoRoom(ios, error.to_string())),
            Err(error) => Ok(Synced::Failed(ios, error.to_string())),
        }
    })
    .await
    .unwrap_or_else(|error| Err(ServerDiskError::Io(format!("the journal's sync failed: {error}"))))
}

/// Punches out a batch of freed slots; whether any are left.
async fn punch(packs: &SharedPacks) -> Result<bool, String> {
    let packs = packs.clone();
    match tokio::task::spawn_blocking(move || packs.punch_released()).await {
        Ok(punched) => punched.map_err(|error| error.to_string()),
        Err(error) => Err(format!("punching freed slots: {error}")),
    }
}

/// Starts a new journal at once, and finishes the checkpoint on a thread of its own,
/// which reports how it ended. Reports here only a failure to begin.
async fn begin_checkpoint(
    disk: &Arc<Mutex<ServerDisk>>,
    groups: Groups,
    report: &mpsc::Sender<Durable>,
) -> Option<Durable> {
    let started = Instant::now();
    let disk = disk.clone();
    let begun = tokio::task::spawn_blocking(move || lock(&disk)?.begin_checkpoint(groups)).await;
    let checkpoint = match begun {
        Ok(Ok(checkpoint)) => checkpoint,
        Ok(Err(error)) if error.is_no_space() => {
            return Some(Ok(Synced::CheckpointNoRoom(error.to_string())));
        }
        Ok(Err(error)) => return Some(Err(error)),
        Err(error) => {
            return Some(Err(ServerDiskError::Io(format!("the checkpoint failed: {error}"))));
        }
    };
    let report = report.clone();
    tokio::task::spawn_blocking(move || {
        let outcome = match checkpoint.finish() {
            Ok(()) => Ok(Synced::Checkpointed(started.elapsed())),
            Err(error) if error.is_no_space() => Ok(Synced::CheckpointNoRoom(error.to_string())),
            Err(error) => Err(error),
        };
        let _ = report.blocking_send(outcome);
    });
    None
}

fn lock(
    disk: &Mutex<ServerDisk>,
) -> Result<std::sync::MutexGuard<'_, ServerDisk>, ServerDiskError> {
    disk.lock().map_err(|_| ServerDiskError::Io("the disk's lock was poisoned".into()))
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::Epoch;
    use somnus_types::ChunkGroupId;

    use super::*;

    /// Every change sent comes back durable, in order, fewer syncs than changes when
    /// they come faster than a sync; a checkpoint between them lets the changes after
    /// it go on; and a restart finds them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_come_back_durable_in_order_batched_around_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, mut store) = ServerDisk::open(dir.path(), 1 << 20).unwrap();
        let (jobs, mut done) = spawn(Arc::new(Mutex::new(disk)));
        let fence = |n: u64| StoreOp::Fence { group: ChunkGroupId(n as u32), epoch: Epoch(n + 1) };
        let (mut back, mut syncs, mut checkpointed) = (Vec::new(), 0, false);
        for n in 0..100u64 {
            jobs.send(Job::Change(IoId(n), fence(n), Vec::new())).await.unwrap();
        }
        while back.len() < 200 || !checkpointed {
            match done.recv().await.unwrap().unwrap() {
                Synced::Durable(ios) => {
                    // Applied as the server's task would, in order.
                    for io in &ios {
                        store.redo(fence(io.0));
                    }
                    back.extend(ios);
                    syncs += 1;
                    if back.len() == 100 {
                        // Every change sent applied: checkpoint, then write on.
                        jobs.send(Job::Checkpoint(store.groups())).await.unwrap();
                        for n in 100..200u64 {
                            jobs.send(Job::Change(IoId(n), fence(n), Vec::new())).await.unwrap();
                        }
                    }
                }
                Synced::Checkpointed(_) => checkpointed = true,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(back, (0..200).map(IoId).collect::<Vec<_>>());
        assert!(syncs < 200, "{syncs} syncs for 200 changes sent in two bursts");
        drop(jobs);
        assert!(done.recv().await.is_none(), "the worker ends with its sender");
        let (_, store) = ServerDisk::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.groups().len(), 200);
        assert!(
            dir.path().join("groups-0000000000000001.snap").exists(),
            "the checkpoint's snapshot"
        );
    }
}
