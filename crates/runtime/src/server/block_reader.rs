//! A storage server's reader of blocks: a thread of its own that reads the blocks the
//! core asks for (`DiskOp::Read`) from the packs, off the server's task, and sends each
//! outcome back to it: the reads that must wait for the disk, and the long ones (the
//! server's task serves the short reads the page cache holds at once). Reads asked
//! while it reads are taken together when it is done: under load one wake serves many.
//! The server's task asks no more than [`READS_MAX`] at once, so neither queue grows
//! past it.

use std::ops::Range;
use std::sync::mpsc as std_mpsc;

use somnus_core::cluster::ChunkId;
use somnus_core::cluster::store::BlocksRead;
use somnus_types::IoId;
use tokio::sync::mpsc;

use crate::server::packs::SharedPacks;

/// What a read of blocks found: the blocks, those that fail their checksum, or an I/O
/// error.
pub type ReadOutcome = std::io::Result<Result<BlocksRead, Vec<u64>>>;

/// Reads asked and not yet answered at most (the server's task holds back the rest).
pub const READS_MAX: usize = 256;

/// Where the server's task asks for reads; dropping it ends the thread.
#[derive(Debug)]
pub struct BlockReader {
    asks: std_mpsc::SyncSender<(IoId, ChunkId, Range<u64>)>,
}

impl BlockReader {
    /// Starts the reader of `packs` for server `server`; the outcomes come back on
    /// the receiver, each with its io.
    pub fn spawn(
        packs: SharedPacks,
        server: u32,
    ) -> std::io::Result<(BlockReader, mpsc::Receiver<(IoId, ReadOutcome)>)> {
        let (asks, incoming) = std_mpsc::sync_channel::<(IoId, ChunkId, Range<u64>)>(READS_MAX);
        let (found, outcomes) = mpsc::channel(READS_MAX);
        let reader = BlockReader { asks };
        std::thread::Builder::new().name(format!("server-{server}-reads")).spawn(move || {
            while let Ok(first) = incoming.recv() {
                let more = std::iter::from_fn(|| incoming.try_recv().ok());
                for (io, chunk, blocks) in std::iter::once(first).chain(more) {
                    if found.blocking_send((io, packs.read_blocks(chunk, blocks))).is_err() {
                        return;
                    }
                }
            }
        })?;
        Ok((reader, outcomes))
    }

    /// Asks for `blocks` of `chunk`, read for `io` (one of at most [`READS_MAX`]
    /// unanswered: the caller counts them). A reader that stopped (its server is
    /// stopping) reads nothing more.
    pub fn read(&self, io: IoId, chunk: ChunkId, blocks: Range<u64>) -> Result<(), String> {
        match self.asks.try_send((io, chunk, blocks)) {
            Ok(()) | Err(std_mpsc::TrySendError::Disconnected(_)) => Ok(()),
            Err(std_mpsc::TrySendError::Full(_)) => {
                Err(format!("more than {READS_MAX} reads of blocks asked at once"))
            }
        }
    }
}
