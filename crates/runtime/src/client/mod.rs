//! The client library: an async handle on a cluster (create, write a range, read a
//! range, delete, stat), driving the core's `Client` in one task, which keeps the
//! metadata cache and retries as the core decides (a request unanswered within the
//! request timeout asks for the view again).
//!
//! Ranges are whole 4 KiB blocks, as the core takes them; a large write or read is
//! cut into requests of at most `REQUEST_BYTES`, several in flight at once.

pub mod object_file;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use somnus_core::cluster::client::{
    Client, ClientAction, ClientError as CoreError, ClientEvent, ClientOp, ClientOutcome,
};
use somnus_core::cluster::{
    BindCondition, ChunkId, ClientId, ListedObject, ObjectInfo, ObjectRef, Payload, Peer, Piece,
    Stamp, Stamps,
};
use somnus_types::{ByteRange, ObjectId, Version};
use somnus_wire::ClusterSecret;
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::cluster_file::ClusterFile;
use crate::net::outbox::Outbox;
use crate::net::transport::{Identity, Inbound, WireCounters};

/// Bytes of one request at most (a frame carries one).
pub const REQUEST_BYTES: u64 = 1 << 20;
/// Requests of one call in flight at once.
pub const IN_FLIGHT: usize = 8;
/// Names per page of a listing (the most the MDS sends).
const LIST_PAGE: u32 = 1000;

/// Operations waiting for the client's task at most: past it, a caller waits for room
/// (its task takes them as fast as it can; a queue that grows is a task that cannot).
const SUBMIT_QUEUE: usize = 1024;
/// A block: ranges are whole blocks.
pub const BLOCK_BYTES: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Refused(#[from] somnus_core::cluster::client::ClientError),
    #[error("the client's task has stopped")]
    Stopped,
    #[error("no answer from the cluster within {0:?}")]
    TimedOut(std::time::Duration),
    #[error("cannot draw a client id: {0}")]
    Entropy(String),
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsError),
}

type Reply = oneshot::Sender<ClientOutcome>;

/// An op for the client's task and the reply's way back (the core ends an op at the
/// config's `op_deadline`: `ClientError::DeadlinePassed`).
type Submitted = (ClientOp, Reply);

/// A bind ([`ClusterClient::bind`]): make `name` hold `data`, in order, with `attrs`,
/// if `require` exists and `condition` holds; what it held before, and what the names
/// of `taking` held (they go), is freed unless listed in `data`.
#[derive(Clone, Debug, Default)]
pub struct Bind {
    pub name: String,
    pub data: Vec<ObjectId>,
    pub attrs: Vec<u8>,
    pub taking: Vec<String>,
    pub require: Option<String>,
    pub condition: BindCondition,
}

/// What a data op addresses.
#[derive(Clone, Copy)]
enum Target<'a> {
    Name(&'a str),
    Data(&'a ObjectRef),
}

/// A connection to a cluster. Cheap to clone; the task stops when every clone is gone.
#[derive(Clone)]
pub struct ClusterClient {
    submit: mpsc::Sender<Submitted>,
    id: ClientId,
    stamps: Arc<std::sync::Mutex<Stamps>>,
    chunk_size_bytes: u64,
    /// How long one operation may take (the cluster file's `op_deadline_s`, in real
    /// time): the core ends it then, and forgets it.
    deadline: std::time::Duration,
}

impl ClusterClient {
    /// A client of the cluster `file` describes, authenticated with `secret`.
    pub fn start(
        file: Arc<ClusterFile>,
        secret: ClusterSecret,
    ) -> Result<ClusterClient, ClientError> {
        let mut id = [0u8; 4];
        getrandom::fill(&mut id).map_err(|e| ClientError::Entropy(e.to_string()))?;
        let id = ClientId::drawn(id);
        let identity = Arc::new(Identity::on(file.cluster.wire, Peer::Client(id), secret)?);
        let (inbox_tx, inbox) = mpsc::channel(1024);
        let outbox =
            Outbox::new(identity, file.clone(), Arc::new(WireCounters::default()), inbox_tx);
        let clock = Clock::start(file.cluster.time_scale);
        let deadline = clock.real_of(file.config().op_deadline);
        let client = Client::new(id, file.config(), clock.now());
        let (submit, requests) = mpsc::channel(SUBMIT_QUEUE);
        tokio::spawn(drive(client, clock, outbox, inbox, requests));
        Ok(ClusterClient {
            submit,
            id,
            stamps: Arc::new(std::sync::Mutex::new(Stamps::of(id))),
            chunk_size_bytes: file.cluster.chunk_size_bytes,
            deadline,
        })
    }

    pub fn id(&self) -> ClientId {
        self.id
    }

    async fn call(&self, op: ClientOp) -> Result<ClientOutcome, ClientError> {
        let (reply, outcome) = oneshot::channel();
        // A full queue holds the caller back until the client's task takes more.
        let submitted = (op, reply);
        self.submit.send(submitted).await.map_err(|_| ClientError::Stopped)?;
        match outcome.await {
            Ok(ClientOutcome::Failed(CoreError::DeadlinePassed)) => {
                Err(ClientError::TimedOut(self.deadline))
            }
            Ok(ClientOutcome::Failed(error)) => Err(error.into()),
            Ok(outcome) => Ok(outcome),
            Err(_) => Err(ClientError::Stopped),
        }
    }

    pub async fn create(&self, name: &str, size_bytes: u64) -> Result<ObjectInfo, ClientError> {
        let op = ClientOp::Create { name: name.to_owned(), size_bytes };
        match self.call(op).await? {
            ClientOutcome::Object(info) => Ok(info),
            other => unreachable!("a create answered {other:?}"),
        }
    }

    pub async fn stat(&self, name: &str) -> Result<ObjectInfo, ClientError> {
        match self.call(ClientOp::Stat { name: name.to_owned() }).await? {
            ClientOutcome::Object(info) => Ok(info),
            other => unreachable!("a stat answered {other:?}"),
        }
    }

    /// One page of the objects whose names start with `prefix`, after `start_after`,
    /// in name order; `true` when more follow the page's last name.
    pub async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<ListedObject>, bool), ClientError> {
        self.list_page_with(prefix, start_after, limit, false).await
    }

    /// [`ClusterClient::list_page`], each name with its attributes if `attrs`.
    pub async fn list_page_with(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
        attrs: bool,
    ) -> Result<(Vec<ListedObject>, bool), ClientError> {
        let op = ClientOp::List {
            prefix: prefix.to_owned(),
            start_after: start_after.map(str::to_owned),
            limit,
            attrs,
        };
        match self.call(op).await? {
            ClientOutcome::Listed { objects, truncated } => Ok((objects, truncated)),
            other => unreachable!("a listing answered {other:?}"),
        }
    }

    /// Every object whose name starts with `prefix`, in name order, a page at a time.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, ClientError> {
        let mut all: Vec<ListedObject> = Vec::new();
        loop {
            let after = all.last().map(|o| o.name.as_str());
            let (page, truncated) = self.list_page(prefix, after, LIST_PAGE).await?;
            let empty = page.is_empty();
            all.extend(page);
            if !truncated || empty {
                return Ok(all);
            }
        }
    }

    pub async fn delete(&self, name: &str) -> Result<(), ClientError> {
        self.call(ClientOp::Delete { name: name.to_owned() }).await.map(|_| ())
    }

    /// Deletes those of `names` that exist (at most a bind's worth: 10,000), at once.
    pub async fn delete_many(&self, names: Vec<String>) -> Result<(), ClientError> {
        self.call(ClientOp::DeleteMany { names }).await.map(|_| ())
    }

    /// A data object of `size_bytes` (whole blocks) to write with [`Self::write_to`]
    /// and then name with [`Self::bind`]; unbound, it is freed after the cluster's
    /// pending grace.
    pub async fn allocate(&self, size_bytes: u64) -> Result<ObjectRef, ClientError> {
        match self.call(ClientOp::Allocate { size_bytes }).await? {
            ClientOutcome::Object(info) => info.data.into_iter().next().ok_or_else(|| {
                ClientError::Refused(somnus_core::cluster::client::ClientError::BadRange {
                    range: ByteRange::new(0, size_bytes),
                    size: 0,
                })
            }),
            other => unreachable!("an allocation answered {other:?}"),
        }
    }

    /// Gives back an allocation that will not be bound: its space is freed without
    /// waiting for the pending grace.
    pub async fn release(&self, object: ObjectId) -> Result<(), ClientError> {
        self.call(ClientOp::Release { object }).await.map(|_| ())
    }

    /// Binds a name ([`Bind`]); the name as it is then.
    pub async fn bind(&self, bind: Bind) -> Result<ObjectInfo, ClientError> {
        let Bind { name, data, attrs, taking, require, condition } = bind;
        match self.call(ClientOp::Bind { name, data, attrs, taking, require, condition }).await? {
            ClientOutcome::Object(info) => Ok(info),
            other => unreachable!("a bind answered {other:?}"),
        }
    }

    /// A stamp no other write carries (the core's [`Stamps`]).
    fn stamp(&self) -> Stamp {
        self.stamps.lock().unwrap_or_else(std::sync::PoisonError::into_inner).mint()
    }

    /// Writes `data` at `offset` (both whole blocks), acknowledged once every replica
    /// holds it durably.
    pub async fn write(&self, name: &str, offset: u64, data: Bytes) -> Result<(), ClientError> {
        self.write_target(Target::Name(name), offset, data).await
    }

    /// [`Self::write`] into a data object given whole (no lookup of a name).
    pub async fn write_to(
        &self,
        object: &ObjectRef,
        offset: u64,
        data: Bytes,
    ) -> Result<(), ClientError> {
        self.write_target(Target::Data(object), offset, data).await
    }

    async fn write_target(
        &self,
        target: Target<'_>,
        offset: u64,
        data: Bytes,
    ) -> Result<(), ClientError> {
        let ops = cut(ByteRange::new(offset, data.len() as u64)).into_iter().map(|range| {
            let at = (range.start - offset) as usize;
            let bytes = data.slice(at..at + range.size_bytes() as usize);
            let data = Payload::new(bytes);
            let stamp = self.stamp();
            match target {
                Target::Name(name) => ClientOp::Write { name: name.to_owned(), range, stamp, data },
                Target::Data(object) => {
                    ClientOp::WriteTo { object: object.clone(), range, stamp, data }
                }
            }
        });
        for result in self.run_bounded(ops.collect()).await {
            result?;
        }
        Ok(())
    }

    /// Reads `range` (whole blocks); blocks never written read as zeros.
    pub async fn read(&self, name: &str, range: ByteRange) -> Result<Bytes, ClientError> {
        self.read_target(Target::Name(name), range).await
    }

    /// [`Self::read`] of a data object given whole (no lookup of a name).
    pub async fn read_from(
        &self,
        object: &ObjectRef,
        range: ByteRange,
    ) -> Result<Bytes, ClientError> {
        self.read_target(Target::Data(object), range).await
    }

    async fn read_target(
        &self,
        target: Target<'_>,
        range: ByteRange,
    ) -> Result<Bytes, ClientError> {
        let ops = cut(range).into_iter().map(|part| match target {
            Target::Name(name) => ClientOp::Read { name: name.to_owned(), range: part },
            Target::Data(object) => ClientOp::ReadFrom { object: object.clone(), range: part },
        });
        let mut placed = Vec::new();
        for result in self.run_bounded(ops.collect()).await {
            let ClientOutcome::Read(pieces) = result? else { continue };
            for (chunk, piece) in pieces {
                let Some(bytes) = piece.data.bytes() else { continue };
                // The piece's range is within its chunk: place it in the object.
                let at = u64::from(chunk.chunk.0) * self.chunk_size_bytes + piece.range.start;
                let Some(at) = at.checked_sub(range.start) else { continue };
                placed.push((at as usize, bytes.clone()));
            }
        }
        Ok(assemble(range.size_bytes() as usize, placed))
    }

    /// One write of `range` (whole blocks, at most a request's size) carrying the
    /// caller's `stamp`, and the version each chunk's part was written at: for a
    /// history checker, which needs stamps unique across its clients.
    pub async fn write_stamped(
        &self,
        name: &str,
        range: ByteRange,
        stamp: Stamp,
        data: Bytes,
    ) -> Result<Vec<(ChunkId, ByteRange, Version)>, ClientError> {
        let data = Payload::new(data);
        match self.call(ClientOp::Write { name: name.to_owned(), range, stamp, data }).await? {
            ClientOutcome::Written(parts) => Ok(parts),
            other => unreachable!("a write answered {other:?}"),
        }
    }

    /// One read of `range` (whole blocks, at most a request's size), as the pieces
    /// each chunk returned, with their versions and stamps.
    pub async fn read_pieces(
        &self,
        name: &str,
        range: ByteRange,
    ) -> Result<Vec<(ChunkId, Piece)>, ClientError> {
        match self.call(ClientOp::Read { name: name.to_owned(), range }).await? {
            ClientOutcome::Read(pieces) => Ok(pieces),
            other => unreachable!("a read answered {other:?}"),
        }
    }

    /// Runs `ops` with at most `IN_FLIGHT` at once; their results in order.
    async fn run_bounded(&self, ops: Vec<ClientOp>) -> Vec<Result<ClientOutcome, ClientError>> {
        let count = ops.len();
        let mut results: Vec<Option<Result<ClientOutcome, ClientError>>> =
            (0..count).map(|_| None).collect();
        let mut running = tokio::task::JoinSet::new();
        let mut ops = ops.into_iter().enumerate();
        loop {
            while running.len() < IN_FLIGHT {
                let Some((index, op)) = ops.next() else { break };
                let this = self.clone();
                running.spawn(async move { (index, this.call(op).await) });
            }
            match running.join_next().await {
                Some(Ok((index, result))) => results[index] = Some(result),
                Some(Err(_)) => {}
                None => break,
            }
        }
        results.into_iter().map(|r| r.unwrap_or(Err(ClientError::Stopped))).collect()
    }
}

/// `len` bytes made of `placed` (each at its offset; zeros where none is). Pieces that
/// tile the whole are joined without zeroing first, and a single one is returned as
/// it came (a slice of the frame it arrived in): a megabyte's GET then costs no
/// memset and no copy in the gateway.
fn assemble(len: usize, mut placed: Vec<(usize, Bytes)>) -> Bytes {
    placed.sort_by_key(|(at, _)| *at);
    let mut end = 0;
    let tiled = placed.iter().all(|(at, bytes)| {
        let whole = *at == end;
        end += bytes.len();
        whole
    }) && end == len;
    if tiled {
        if let [(_, only)] = placed.as_slice() {
            return only.clone();
        }
        let mut out = BytesMut::with_capacity(len);
        for (_, bytes) in &placed {
            out.extend_from_slice(bytes);
        }
        return out.freeze();
    }
    let mut out = BytesMut::zeroed(len);
    for (at, bytes) in placed {
        let end = (at + bytes.len()).min(len);
        if at < end {
            out[at..end].copy_from_slice(&bytes[..end - at]);
        }
    }
    out.freeze()
}

/// `range` cut at request-size boundaries of the object.
pub(crate) fn cut(range: ByteRange) -> Vec<ByteRange> {
    let mut parts = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let end = ((start / REQUEST_BYTES + 1) * REQUEST_BYTES).min(range.end);
        parts.push(ByteRange::from_bounds(start, end));
        start = end;
    }
    parts
}

/// The client's task: the core's `Client`, its timers, and the calls waiting.
async fn drive(
    mut client: Client,
    clock: Clock,
    outbox: Outbox,
    mut inbox: mpsc::Receiver<Inbound>,
    mut requests: mpsc::Receiver<Submitted>,
) {
    let mut waiting: BTreeMap<u64, Reply> = BTreeMap::new();
    let mut next_tag = 0u64;
    loop {
        let event = tokio::select! {
            request = requests.recv() => match request {
                Some((op, reply)) => {
                    next_tag += 1;
                    waiting.insert(next_tag, reply);
                    // The core gives the op the config's deadline.
                    ClientEvent::Submit { tag: next_tag, op, deadline: None }
                }
                None => return,
            },
            Some(Inbound { from, message, .. }) = inbox.recv() => {
                ClientEvent::MessageReceived { from, message }
            }
            () = clock.sleep_until(client.poll_timeout()) => ClientEvent::TimerFired,
        };
        client.handle(clock.now(), event);
        while let Some(action) = client.poll_action() {
            match action {
                ClientAction::Send { to, message } => outbox.send(to, message),
                ClientAction::Done { tag, outcome } => {
                    if let Some(reply) = waiting.remove(&tag) {
                        let _ = reply.send(outcome);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(fill: u8, len: usize) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn a_single_piece_covering_the_range_is_returned_without_a_copy() {
        let only = bytes(7, 4096);
        let out = assemble(4096, vec![(0, only.clone())]);
        assert_eq!(out.as_ptr(), only.as_ptr());
        assert_eq!(out, only);
    }

    #[test]
    fn pieces_that_tile_the_range_are_joined_in_place_order() {
        let out = assemble(8192, vec![(4096, bytes(2, 4096)), (0, bytes(1, 4096))]);
        assert_eq!(&out[..4096], &[1; 4096][..]);
        assert_eq!(&out[4096..], &[2; 4096][..]);
    }

    #[test]
    fn a_range_no_piece_covers_reads_as_zeros() {
        let out = assemble(12288, vec![(8192, bytes(3, 4096)), (0, bytes(1, 4096))]);
        assert_eq!(out.len(), 12288);
        assert_eq!(&out[..4096], &[1; 4096][..]);
        assert_eq!(&out[4096..8192], &[0; 4096][..]);
        assert_eq!(&out[8192..], &[3; 4096][..]);
        assert_eq!(assemble(4096, Vec::new()), bytes(0, 4096));
    }

    #[test]
    fn a_piece_past_the_end_is_cut() {
        let out = assemble(4096, vec![(0, bytes(5, 8192))]);
        assert_eq!(out, bytes(5, 4096));
        let out = assemble(4096, vec![(2048, bytes(5, 4096))]);
        assert_eq!(&out[..2048], &[0; 2048][..]);
        assert_eq!(&out[2048..], &[5; 2048][..]);
    }
}
