//! A storage server's disk worker: makes the replica changes the core issues durable
//! in the journal, many per sync (group commit), and reports each done.
//!
//! The server's task sends each write's change as the core issues it and hears back,
//! in order, the ids of the writes now durable; only then does it tell the core
//! `DiskDone` (the core applies the change and acknowledges). The journal's sync runs
//! on tokio's blocking pool, so the task goes on serving meanwhile, and changes that
//! arrive during one sync go together in the next.

use std::sync::{Arc, Mutex};

use somnus_core::cluster::store::StoreOp;
use somnus_types::IoId;
use tokio::sync::mpsc;

use crate::server_disk::{ServerDisk, ServerDiskError};

/// Changes taken into one sync at most: a bound on a batch's memory and latency.
const BATCH_MAX: usize = 256;

/// What one sync made of the writes sent, in the order they were sent.
#[derive(Debug)]
pub enum Synced {
    /// Durable.
    Durable(Vec<IoId>),
    /// Not durable, none of them: the disk had no room (said why). The worker goes
    /// on with the next writes.
    NoRoom(Vec<IoId>, String),
}

/// What the worker reports: a sync's outcome, or the error that stopped it (the
/// server stops: its disk fails, it cannot make writes durable).
pub type Durable = Result<Synced, ServerDiskError>;

/// Starts the worker on `disk`; returns where to send changes and where their
/// completions come back. The worker ends when the sender is dropped.
pub fn spawn(
    disk: Arc<Mutex<ServerDisk>>,
) -> (mpsc::UnboundedSender<(IoId, StoreOp)>, mpsc::UnboundedReceiver<Durable>) {
    let (changes, mut incoming) = mpsc::unbounded_channel::<(IoId, StoreOp)>();
    let (report, done) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(first) = incoming.recv().await {
            let mut batch = vec![first];
            while batch.len() < BATCH_MAX {
                match incoming.try_recv() {
                    Ok(change) => batch.push(change),
                    Err(_) => break,
                }
            }
            let disk = disk.clone();
            let synced = tokio::task::spawn_blocking(move || {
                let (ios, ops): (Vec<IoId>, Vec<StoreOp>) = batch.into_iter().unzip();
                let mut disk = disk
                    .lock()
                    .map_err(|_| ServerDiskError::Io("the disk's lock was poisoned".into()))?;
                match disk.make_durable(&ops) {
                    Ok(()) => Ok(Synced::Durable(ios)),
                    Err(error) if error.is_no_space() => Ok(Synced::NoRoom(ios, error.to_string())),
                    Err(error) => Err(error),
                }
            })
            .await
            .unwrap_or_else(|error| {
                Err(ServerDiskError::Io(format!("the journal's sync failed: {error}")))
            });
            let failed = synced.is_err();
            if report.send(synced).is_err() || failed {
                return;
            }
        }
    });
    (changes, done)
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::Epoch;
    use somnus_types::ChunkGroupId;

    use super::*;

    /// Every change sent comes back durable, in order, fewer syncs than changes when
    /// they come faster than a sync; and a restart finds them all in the journal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_come_back_durable_in_order_batched() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, _) = ServerDisk::open(dir.path(), 1 << 20).unwrap();
        let (changes, mut done) = spawn(Arc::new(Mutex::new(disk)));
        for n in 0..200u64 {
            let fence = StoreOp::Fence { group: ChunkGroupId(n as u32), epoch: Epoch(n + 1) };
            changes.send((IoId(n), fence)).unwrap();
        }
        let (mut back, mut reports) = (Vec::new(), 0);
        while back.len() < 200 {
            match done.recv().await.unwrap().unwrap() {
                Synced::Durable(ios) => back.extend(ios),
                Synced::NoRoom(_, why) => panic!("no room on a test's disk: {why}"),
            }
            reports += 1;
        }
        assert_eq!(back, (0..200).map(IoId).collect::<Vec<_>>());
        assert!(reports < 200, "{reports} syncs for 200 changes sent at once");
        drop(changes);
        assert!(done.recv().await.is_none(), "the worker ends with its sender");
        let (_, store) = ServerDisk::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.groups().len(), 200);
    }
}
