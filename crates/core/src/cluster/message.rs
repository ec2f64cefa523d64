//! The messages of the cluster protocol, one enum for every role (docs/protocol.md,
//! "Messages"), and the small types they carry.

use std::sync::Arc;

use somnus_types::{ByteRange, ChunkGroupId, ObjectId, ServerId, VirtualDuration, VirtualInstant};

use super::{Payload, ServerPower};
use crate::Version;
use crate::gear::LoadSample;

/// A chunk group's view number: it grows by one at each change of primary.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Epoch(pub u64);

impl Epoch {
    pub fn next(self) -> Epoch {
        Epoch(self.0 + 1)
    }
}

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "epoch{}", self.0)
    }
}

/// A client of the cluster.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ClientId(pub u32);

impl ClientId {
    /// The top bit of a runtime client's id: the simulator's clients count from 0
    /// below it, so the two never share an id (nor, so, a stamp).
    const DRAWN: u32 = 1 << 31;

    /// A runtime client's id, drawn from `entropy` (the shell's random bytes).
    pub fn drawn(entropy: [u8; 4]) -> ClientId {
        ClientId(u32::from_le_bytes(entropy) | ClientId::DRAWN)
    }

    /// The simulator's `n`th client.
    pub fn counted(n: u32) -> ClientId {
        ClientId(n & !ClientId::DRAWN)
    }
}

/// The index of a chunk within its object.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ChunkIndex(pub u32);

/// A chunk: an object's chunk by index, the unit replicas hold.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ChunkId {
    pub object: ObjectId,
    pub chunk: ChunkIndex,
}

impl ChunkId {
    /// The chunks `range` of an object covers, in order, each with its part of the
    /// range as offsets within the chunk.
    pub fn split(
        object: ObjectId,
        chunk_size_bytes: u64,
        range: ByteRange,
    ) -> impl Iterator<Item = (ChunkId, ByteRange)> {
        let chunks = range.start / chunk_size_bytes..range.end.div_ceil(chunk_size_bytes);
        chunks.map(move |index| {
            let base = index * chunk_size_bytes;
            let start = range.start.max(base) - base;
            let end = range.end.min(base + chunk_size_bytes) - base;
            let chunk = ChunkId { object, chunk: ChunkIndex(index as u32) };
            (chunk, ByteRange::from_bounds(start, end))
        })
    }
}

/// A moment on a storage server's clock, which starts at 0 with its process: the
/// process's incarnation (greater than every one before it on its disk, so a restart
/// is never older than the run before it) and the time since it started. Ordered by
/// incarnation first: a restarted server's heartbeats are newer than the last run's,
/// however long that ran.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct ServerTime {
    pub incarnation: u64,
    pub at: VirtualInstant,
}

impl ServerTime {
    /// Whether a lease counted from `self` has run out by `later` (a later incarnation
    /// has no lease of an earlier one: its process lost it with its memory).
    pub fn lease_ran_out(self, lease: VirtualDuration, later: ServerTime) -> bool {
        self.incarnation < later.incarnation
            || (self.incarnation == later.incarnation && self.at.saturating_add(lease) <= later.at)
    }
}

/// What a write puts in every block of its range. The simulation carries stamps
/// (which client op wrote it: the checker's ground truth) while the request's size
/// drives the disk and network models; 0 is never written (it marks unwritten space).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Stamp(pub u64);

impl Stamp {
    /// The client that minted it and its count ([`Stamps`]' layout).
    pub fn parts(self) -> (u32, u32) {
        ((self.0 >> 32) as u32, self.0 as u32)
    }
}

/// The stamps one client mints: its id in the high half, a count in the low, so no
/// two clients' writes share one; never 0 (unwritten space's).
#[derive(Clone, Debug)]
pub struct Stamps {
    client: ClientId,
    minted: u32,
}

impl Stamps {
    pub fn of(client: ClientId) -> Stamps {
        Stamps { client, minted: 0 }
    }

    /// The next stamp. After 2^32 - 1 of them the count wraps (skipping 0): a stamp
    /// names a write among those in flight and lately answered, never all time's.
    pub fn mint(&mut self) -> Stamp {
        self.minted = self.minted.checked_add(1).unwrap_or(1);
        Stamp(u64::from(self.client.0) << 32 | u64::from(self.minted))
    }
}

/// A piece of a chunk as a read returns it: its range, the version and stamp every
/// block of it holds (version 0 and stamp 0: never written), and its bytes (none in
/// the simulator; the wire carries them in the attachment).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Piece {
    pub range: ByteRange,
    pub version: Version,
    pub stamp: Stamp,
    #[serde(skip)]
    pub data: Payload,
}

impl Piece {
    /// The piece cut to `range` (within its own), its bytes sliced to match.
    pub fn cut(&self, range: ByteRange) -> Piece {
        let data = self.data.slice(range.start - self.range.start, range.size_bytes());
        Piece { range, version: self.version, stamp: self.stamp, data }
    }
}

/// A write a replica holds that it has not yet learned is on every replica: a new
/// primary collects these and writes them again everywhere (C3, C4).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnstableWrite {
    pub chunk: ChunkId,
    pub range: ByteRange,
    pub version: Version,
    pub stamp: Stamp,
    /// The write's bytes (none in the simulator; the wire carries them in the
    /// attachment).
    #[serde(skip)]
    pub data: Payload,
}

impl UnstableWrite {
    /// The write cut to `range` (within its own), its bytes sliced to match.
    pub fn cut(&self, range: ByteRange) -> UnstableWrite {
        UnstableWrite {
            range,
            data: self.data.slice(range.start - self.range.start, range.size_bytes()),
            ..self.clone()
        }
    }
}

/// Bytes of one `UnstableWrite`'s metadata on the wire (its data is charged apart).
const UNSTABLE_WRITE_WIRE_BYTES: u64 = 40;

/// Why a storage server refused a client request; the client asks the MDS for the
/// group's view and tries again.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
pub enum RequestError {
    #[error("this server does not lead the group in that epoch (it knows {known})")]
    NotPrimary { known: Epoch },
    #[error("the primary is handing the group over; retry at the next one")]
    Retry,
    #[error("the range is not inside the chunk, or not block-aligned")]
    BadRange,
    /// A replica of the group has less free disk than its reserve: the write is
    /// refused before any replica takes it (it never takes effect).
    #[error("no space: server {}'s disk has less free space than its reserve", .server.0)]
    NoSpace { server: ServerId },
    /// The chunk's object was deleted and its space freed here: nothing of it is
    /// served or stored again (its ids are never given again).
    #[error("the object was deleted and its space freed")]
    Freed,
}

/// What a storage server answers a client request with.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReplyBody {
    Written { version: Version },
    Read { pieces: Vec<Piece> },
    Refused(RequestError),
}

/// Who sent or receives a message.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Peer {
    Mds,
    Server(ServerId),
    Client(ClientId),
}

/// What a client needs to reach a chunk group.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupView {
    pub group: ChunkGroupId,
    pub epoch: Epoch,
    /// The server to send requests to, or none while a view change is under way.
    pub primary: Option<ServerId>,
    pub replicas: Vec<ServerId>,
}

/// A data object: its id, its size (whole blocks) and the group of each chunk, in
/// chunk order. A name holds data objects in order; a data object is held by one name
/// at most, or by none while it is being written (allocated, not yet bound).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectRef {
    pub object: ObjectId,
    pub size_bytes: u64,
    /// Shared, not copied: a device of a trace has a hundred thousand chunks, and
    /// every lookup and view renewal hands its list on.
    pub chunk_groups: Arc<[ChunkGroupId]>,
}

/// A name as the MDS describes it to a client: its first data object (`object`,
/// `size_bytes`, `chunk_groups`: what a write or read by name addresses; id 0, size 0
/// and no chunks for a name without data), every data object it holds in order
/// (`data`, the first included), its attributes and its generation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectInfo {
    pub name: String,
    pub object: ObjectId,
    pub size_bytes: u64,
    pub chunk_size_bytes: u64,
    /// The group of each chunk, in chunk order (shared, as [`ObjectRef`]'s).
    pub chunk_groups: Arc<[ChunkGroupId]>,
    /// The view of every group the name's data objects use, each once.
    pub views: Vec<GroupView>,
    /// Every data object the name holds, in order (the first is the one above).
    pub data: Vec<ObjectRef>,
    /// Bytes the name's binder gave it (opaque to the cluster: the S3 gateway's
    /// record of an object), at most [`crate::cluster::mds::ATTRS_BYTES_MAX`].
    pub attrs: Vec<u8>,
    /// Changes at every create or bind of the name: a conditional bind names the
    /// generation it read (`BindCondition::Generation`).
    pub generation: u64,
}

impl ObjectInfo {
    /// The first data object, if the name holds any.
    pub fn first(&self) -> Option<&ObjectRef> {
        self.data.first()
    }
}

/// What must hold of a name for a bind to replace it (checked and applied in one
/// step at the MDS, so that two conditional writes cannot both pass).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BindCondition {
    /// Whatever the name holds, or none.
    #[default]
    Any,
    /// The name does not exist.
    Absent,
    /// The name exists at this generation.
    Generation(u64),
}

/// A write a DVL logged, without its data: the owner is the epoch of the primary that
/// logged it (each epoch appends under its own owner, whose versions grow, D1).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct LogRecord {
    pub owner: Epoch,
    pub chunk: ChunkId,
    pub range: ByteRange,
    pub version: Version,
}

/// Bytes of one `LogRecord` on the wire.
const LOG_RECORD_WIRE_BYTES: u64 = 40;

/// A logged write in a DVL's map: the loggers that hold it (they acknowledged it or
/// reported it), every logger that may (each gets its deletion marker), and the
/// replicas that have it applied.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoggedExtent {
    pub record: LogRecord,
    pub holders: Vec<ServerId>,
    pub loggers: Vec<ServerId>,
    pub applied: Vec<ServerId>,
}

/// Bytes of one `LoggedExtent` on the wire (a record, r - 1 loggers, r replicas).
const LOGGED_EXTENT_WIRE_BYTES: u64 = 64;

/// A DVL's state handed from a primary that migrates to the next (Sierra 3.3.2): what
/// is logged, where, and which replicas have it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DvlHandoff {
    pub extents: Vec<LoggedExtent>,
    /// Loggers of the view a recovery has not heard from yet: the next primary asks
    /// them, so the copies they hold are found and invalidated too.
    pub unrecovered: Vec<ServerId>,
}

impl DvlHandoff {
    /// The bytes its logged extents take on the wire.
    fn wire_bytes(&self) -> u64 {
        self.extents.len() as u64 * LOGGED_EXTENT_WIRE_BYTES
    }
}

/// The MDS renewed the leases of `renewed` from `sent_at`; the server must stop
/// leading `revoked` (a view change it has not heard of).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseRenewal {
    /// The heartbeat's send time, echoed: a server drops a reply to an earlier
    /// incarnation's heartbeat.
    pub sent_at: ServerTime,
    pub renewed: Vec<(ChunkGroupId, Epoch)>,
    pub revoked: Vec<(ChunkGroupId, Epoch)>,
    /// The servers that do not serve now (asleep, waking, failed, removed): their
    /// primaries log for them (D2).
    pub down: Vec<ServerId>,
    /// The servers declared lost for good (among `down`): their log records are
    /// gone, so no deletion marker waits for them.
    pub lost: Vec<ServerId>,
    /// The servers whose last heartbeat said their disk is full: their primaries
    /// refuse new writes to the groups they hold (`RequestError::NoSpace`).
    pub full: Vec<ServerId>,
    /// The servers draining to sleep: still replicas, but never chosen as loggers (a
    /// record there would be given up when they sleep, and logged again elsewhere,
    /// behind the writes logged since).
    pub draining: Vec<ServerId>,
    /// Deleted objects whose chunks the server frees (those of the groups it holds),
    /// and the free log's sequence they reach: every free up to it that concerns
    /// the server is among them or was sent before (docs/space.md).
    pub frees: Vec<ObjectId>,
    pub frees_through: u64,
}

/// Lead `view.group` in `view.epoch`, for the lease counted from `lease_from` (the
/// send time of the server's last heartbeat the MDS received); with a handoff take
/// that DVL state, else recover the DVL from the loggers of `logger_view`, fencing
/// older epochs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseGrant {
    pub view: GroupView,
    /// The send time of the primary's heartbeat the lease counts from: a grant to an
    /// earlier incarnation is dropped.
    pub lease_from: ServerTime,
    pub logger_view: Vec<ServerId>,
    pub handoff: Option<DvlHandoff>,
    /// Replicas whose copy is being rebuilt (R1): the primary copies the group's
    /// chunks to them and reports each done.
    pub rebuilding: Vec<ServerId>,
    /// The servers that do not serve now, and those draining, as heartbeat replies
    /// carry them: a new primary starts from the MDS's view, not from one up to a
    /// heartbeat old (which right after a wake still has the woken servers down, and
    /// logs for them).
    pub down: Vec<ServerId>,
    pub draining: Vec<ServerId>,
}

/// Why the MDS refused a metadata request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum MetadataError {
    #[error("no object named {0:?}")]
    NoSuchObject(String),
    #[error("an object named {0:?} exists already")]
    AlreadyExists(String),
    #[error("object name {0:?} is empty or longer than {max} bytes", max = crate::cluster::mds::NAME_BYTES_MAX)]
    BadName(String),
    #[error("an object of {size_bytes} bytes needs more than {max} chunks", max = crate::cluster::mds::OBJECT_CHUNKS_MAX)]
    TooLarge { size_bytes: u64 },
    #[error("the metadata service holds its maximum of {0} objects")]
    Full(usize),
    /// A bind's condition did not hold (the name exists, is absent, or is at another
    /// generation than the one named).
    #[error("{name:?} is not as the bind required ({condition:?})")]
    ConditionFailed { name: String, condition: BindCondition },
    /// A bind named a data object that is neither allocated and unbound nor held by
    /// the names it replaces or takes (it expired, or was bound elsewhere).
    #[error("data object {0} is not the binder's to bind")]
    NotBindable(u64),
    #[error("attributes of {0} bytes: {max} at most", max = crate::cluster::mds::ATTRS_BYTES_MAX)]
    AttrsTooLarge(usize),
    #[error("a request names {0} objects or names, more than one request may")]
    TooMany(usize),
}

/// Every message of the protocol. Which role sends each to which, and the invariants
/// each upholds, are in docs/protocol.md.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Message {
    /// A server is alive; `leads` are the groups it serves as primary, with epochs.
    Heartbeat {
        sent_at: ServerTime,
        power: ServerPower,
        leads: Vec<(ChunkGroupId, Epoch)>,
        /// The server's disk has less free space than its reserve.
        full: bool,
        /// The requests it served as a primary, per finished second since its last
        /// heartbeat (Sierra 3.5): the gear scheduler's input.
        load: Vec<LoadSample>,
        /// Its disk, and the frees it has made durable (boxed: rare next to the data
        /// path's messages).
        space: Box<SpaceReport>,
    },
    /// The MDS's answer to a heartbeat (boxed: it is large, and rare next to the
    /// data path's messages, which every move of a `Message` copies whole).
    HeartbeatReply(Box<LeaseRenewal>),
    /// Lead a group (boxed, as `HeartbeatReply`).
    GrantLease(Box<LeaseGrant>),
    /// Hand the group over to `target` (it sleeps, or `target` woke and rebalances).
    MigratePrimary {
        group: ChunkGroupId,
        epoch: Epoch,
        target: ServerId,
    },
    /// The primary finished its requests and gives the lease back with its DVL state.
    CancelLease {
        group: ChunkGroupId,
        epoch: Epoch,
        handoff: DvlHandoff,
    },
    /// The MDS asks a server that leads nothing any more to go to standby.
    EnterStandby,
    /// A server is ready to sleep (sent once its primaries have moved, again until
    /// answered); heartbeats it sent before `sent_at` are stale from then on.
    Standby {
        sent_at: ServerTime,
    },
    /// The MDS's answer: sleep (it is recorded asleep, its peers log for it), or stay
    /// on (a gear shift back up, or a primary granted since).
    StandbyAnswer {
        sleep: bool,
    },
    /// A primary sets its DVL's logger view: before its first write to a logger, and
    /// empty once nothing is logged (D3). `seq` orders a primary's changes in its epoch.
    SetLoggerView {
        group: ChunkGroupId,
        epoch: Epoch,
        seq: u64,
        loggers: Vec<ServerId>,
    },
    LoggerViewSet {
        group: ChunkGroupId,
        epoch: Epoch,
        seq: u64,
    },
    /// Metadata requests of a client; `request` is echoed in the answer.
    CreateObject {
        request: u64,
        name: String,
        size_bytes: u64,
    },
    LookupObject {
        request: u64,
        name: String,
    },
    DeleteObject {
        request: u64,
        name: String,
    },
    LookupGroup {
        request: u64,
        group: ChunkGroupId,
    },
    /// The MDS's answers.
    ObjectFound {
        request: u64,
        info: Box<ObjectInfo>,
    },
    ObjectDeleted {
        request: u64,
        name: String,
    },
    GroupFound {
        request: u64,
        view: GroupView,
    },
    MetadataRefused {
        request: u64,
        error: MetadataError,
    },
    /// A client writes `range` of `chunk` at the group's primary (C1, C3).
    ClientWrite {
        request: u64,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
        stamp: Stamp,
        #[serde(skip)]
        data: Payload,
    },
    /// A client reads `range` of `chunk` at the group's primary (C4).
    ClientRead {
        request: u64,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
    },
    ClientReply {
        request: u64,
        body: ReplyBody,
    },
    /// The primary's write to every replica, at the version it chose; `stable` is the
    /// version up to which every write is on all replicas (C3).
    ReplicaWrite {
        group: ChunkGroupId,
        epoch: Epoch,
        write: UnstableWrite,
        stable: Version,
    },
    /// The replica made the write durable.
    ReplicaAck {
        group: ChunkGroupId,
        epoch: Epoch,
        version: Version,
    },
    /// The replica knows a different epoch for the group (older writes are fenced).
    ReplicaRefused {
        group: ChunkGroupId,
        epoch: Epoch,
        known: Epoch,
    },
    /// A new primary fences older epochs at a replica and asks for its unstable writes.
    SyncRequest {
        group: ChunkGroupId,
        epoch: Epoch,
    },
    /// The replica is fenced at `epoch` (durably) and holds these unstable writes.
    SyncReply {
        group: ChunkGroupId,
        epoch: Epoch,
        unstable: Vec<UnstableWrite>,
    },
    /// The primary found corrupt blocks in `range` and asks a replica for its copy.
    RepairRead {
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
    },
    RepairData {
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
        /// None: the replica's copy is corrupt too.
        pieces: Option<Vec<Piece>>,
    },
    /// Rebuild (R1): the primary's copy of one chunk of the group, every piece at its
    /// version, for a replica that replaces a lost one; applied where newer.
    RebuildData {
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        pieces: Vec<Piece>,
    },
    /// The new replica holds the chunk durably.
    RebuildAck {
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
    },
    /// The primary copied every chunk of the group to `server` (sent again until
    /// recorded): the group has r full copies again (R2).
    RebuildDone {
        group: ChunkGroupId,
        epoch: Epoch,
        server: ServerId,
    },
    RebuildRecorded {
        group: ChunkGroupId,
        epoch: Epoch,
        server: ServerId,
    },
    /// The primary of `epoch` has a write it can neither send to every replica nor
    /// log at r - 1 loggers that meet D2 (a logger failed in a low gear): the MDS
    /// keeps the group's replicas on and wakes those asleep (P4; sent again every
    /// retry interval while the write waits).
    WakeReplicas {
        group: ChunkGroupId,
        epoch: Epoch,
    },
    /// A primary logs writes at a logger, under the owner of its epoch, in version
    /// order; one batch in flight per group and logger (D1).
    LogAppend {
        group: ChunkGroupId,
        epoch: Epoch,
        writes: Vec<UnstableWrite>,
    },
    /// The logger made these versions durable.
    LogAck {
        group: ChunkGroupId,
        epoch: Epoch,
        versions: Vec<Version>,
    },
    /// The logger has no room for these versions now (D6: the write waits).
    LogFull {
        group: ChunkGroupId,
        epoch: Epoch,
        versions: Vec<Version>,
    },
    /// The logger is fenced at a newer epoch for the group (C1).
    LogRefused {
        group: ChunkGroupId,
        epoch: Epoch,
        known: Epoch,
    },
    /// A new primary fences older epochs at a logger and asks what it holds (D4).
    LogRecover {
        group: ChunkGroupId,
        epoch: Epoch,
    },
    LogRecovered {
        group: ChunkGroupId,
        epoch: Epoch,
        records: Vec<LogRecord>,
    },
    /// A primary reads logged writes back (to adopt them, or to reclaim them).
    LogRead {
        group: ChunkGroupId,
        epoch: Epoch,
        records: Vec<LogRecord>,
    },
    /// The writes asked for; none where no byte of the record is visible any more.
    LogData {
        group: ChunkGroupId,
        epoch: Epoch,
        writes: Vec<(LogRecord, Option<UnstableWrite>)>,
    },
    /// Versioned deletion markers for records every replica has applied (D5).
    LogInvalidate {
        group: ChunkGroupId,
        epoch: Epoch,
        records: Vec<LogRecord>,
    },
    LogInvalidated {
        group: ChunkGroupId,
        epoch: Epoch,
        records: Vec<LogRecord>,
    },
    /// A client lists the objects whose names start with `prefix`, in name order,
    /// after `start_after` (one page of at most `limit`, capped by the MDS).
    ListObjects {
        request: u64,
        prefix: String,
        start_after: Option<String>,
        limit: u32,
        /// Whether each name's attributes come with it.
        attrs: bool,
    },
    /// One page of a listing; `truncated` says more names follow the last.
    ObjectsListed {
        request: u64,
        objects: Vec<ListedObject>,
        truncated: bool,
    },
    /// A client allocates a data object to write before a bind names it (answered
    /// with `ObjectFound`, an unnamed info). Unbound past the MDS's `pending_grace`,
    /// it is freed.
    AllocateObject {
        request: u64,
        size_bytes: u64,
    },
    /// A client binds a name (answered with `ObjectFound`, or `MetadataRefused`).
    BindObject(Box<BindRequest>),
    /// A client deletes names, those that exist (answered with `ObjectDeleted` of
    /// the first, or of none).
    DeleteObjects {
        request: u64,
        names: Vec<String>,
    },
    /// A server's orphan scan: objects it holds chunks of. The MDS frees those no
    /// name holds and no allocation is writing (docs/space.md).
    CheckObjects {
        objects: Vec<HeldObject>,
    },
    /// A client gives back an allocation it will not bind (a PUT refused after its
    /// data was written): freed at once, a grace later on the servers (answered with
    /// `ObjectDeleted`, no name).
    ReleaseObject {
        request: u64,
        object: ObjectId,
    },
    /// A primary with no write pending tells its replicas that every write up to
    /// `stable` is on all of them (as the next replica write would): they forget those
    /// unstable writes, so an idle group's last writes are not kept twice.
    StableMark {
        group: ChunkGroupId,
        epoch: Epoch,
        stable: Version,
    },
    /// The primary of `epoch` has a client read awaiting logged writes whose every
    /// holder sleeps (a gear shift put its loggers to sleep after it moved here): the
    /// MDS keeps `servers` on and wakes those asleep (P7; sent again every request
    /// timeout while a read waits).
    WakeHolders {
        group: ChunkGroupId,
        epoch: Epoch,
        servers: Vec<ServerId>,
    },
    /// A resync (R4): the primary of `epoch` asks a replica for its copy of `chunks`
    /// of the group (none named: every chunk it holds), each sent as `RebuildData`.
    ResyncPull {
        group: ChunkGroupId,
        epoch: Epoch,
        chunks: Vec<ChunkId>,
    },
    /// The chunks of the group the replica holds, answering a `ResyncPull` of every
    /// chunk (their copies follow).
    ResyncHeld {
        group: ChunkGroupId,
        epoch: Epoch,
        chunks: Vec<ChunkId>,
    },
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedObject {
    pub name: String,
    /// The bytes of its data objects, summed.
    pub size_bytes: u64,
    /// Its attributes, when the listing asked for them (else empty).
    pub attrs: Vec<u8>,
}

/// What a server tells the MDS of its disk in every heartbeat: the MDS shows it for
/// the server while it sleeps too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceReport {
    /// Bytes of data its replicas hold (each block once).
    pub stored_bytes: u64,
    /// Bytes its files take on its disk, as the shell last measured them.
    pub disk_bytes: Option<u64>,
    /// Free bytes on its disk, as the shell last measured them.
    pub free_bytes: Option<u64>,
    /// The free log's sequence up to which the server has made every free it was sent
    /// durable (`LeaseRenewal::frees_through` of the replies it applied).
    pub freed_through: u64,
}

/// A bind: make `name` hold `data` (in order) with `attrs`, if `require` exists and
/// `condition` holds; the data objects the name held before, and those of the names
/// in `taking` (which go), are freed unless listed in `data`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BindRequest {
    pub request: u64,
    pub name: String,
    pub data: Vec<ObjectId>,
    pub attrs: Vec<u8>,
    pub taking: Vec<String>,
    pub require: Option<String>,
    pub condition: BindCondition,
}

/// A data object a server holds chunks of, for the orphan scan: the groups of those
/// chunks and their bytes there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldObject {
    pub object: ObjectId,
    pub chunk_groups: Vec<ChunkGroupId>,
    pub bytes: u64,
}

/// The payloads of a message, in a fixed order, by reference (`$ref` is `&` or `&mut`):
/// and the `Option` accessor to match: one body for the visitors of both kinds, so the wire's encoder and decoder agree on
/// the order by construction.
macro_rules! payloads_of {
    ($message:expr, $as_option:ident, $($ref:tt)+) => {{
        let mut out = Vec::new();
        match $message {
            Message::ClientWrite { data, .. } => out.push(data),
            Message::ClientReply { body: ReplyBody::Read { pieces }, .. }
            | Message::RebuildData { pieces, .. }
            | Message::RepairData { pieces: Some(pieces), .. } => {
                out.extend(pieces.into_iter().map(|p| $($ref)+ p.data));
            }
            Message::ReplicaWrite { write, .. } => out.push($($ref)+ write.data),
            Message::SyncReply { unstable: writes, .. } | Message::LogAppend { writes, .. } => {
                out.extend(writes.into_iter().map(|w| $($ref)+ w.data));
            }
            Message::LogData { writes, .. } => {
                let writes = writes.into_iter().filter_map(|(_, w)| w.$as_option());
                out.extend(writes.map(|w| $($ref)+ w.data));
            }
            _ => {}
        }
        out
    }};
}

impl Message {
    /// The payloads the message carries (the wire puts them in the frame's
    /// attachment; its serialized form skips them), in a fixed order.
    pub fn payloads(&self) -> Vec<&Payload> {
        payloads_of!(self, as_ref, &)
    }

    /// The payloads, to fill in from a frame's attachment, in the order of
    /// [`Message::payloads`].
    pub fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        payloads_of!(self, as_mut, &mut)
    }

    /// The bytes the message carries besides its header (the network charges them).
    pub fn payload_bytes(&self) -> u64 {
        match self {
            Message::LogAppend { writes, .. } => writes.iter().map(|w| w.range.size_bytes()).sum(),
            Message::LogData { writes, .. } => {
                writes.iter().filter_map(|(_, w)| w.as_ref().map(|w| w.range.size_bytes())).sum()
            }
            Message::LogRecovered { records, .. }
            | Message::LogRead { records, .. }
            | Message::LogInvalidate { records, .. }
            | Message::LogInvalidated { records, .. } => {
                records.len() as u64 * LOG_RECORD_WIRE_BYTES
            }
            Message::GrantLease(grant) => grant.handoff.as_ref().map_or(0, DvlHandoff::wire_bytes),
            Message::CancelLease { handoff, .. } => handoff.wire_bytes(),
            Message::ObjectFound { info, .. } => info.chunk_groups.len() as u64 * 4,
            Message::ObjectsListed { objects, .. } => {
                objects.iter().map(|o| o.name.len() as u64 + 8).sum()
            }
            Message::ClientWrite { range, .. } => range.size_bytes(),
            Message::ReplicaWrite { write, .. } => write.range.size_bytes(),
            Message::ClientReply { body: ReplyBody::Read { pieces }, .. }
            | Message::RepairData { pieces: Some(pieces), .. }
            | Message::RebuildData { pieces, .. } => {
                pieces.iter().map(|p| p.range.size_bytes()).sum()
            }
            Message::SyncReply { unstable, .. } => {
                unstable.iter().map(|w| w.range.size_bytes() + UNSTABLE_WRITE_WIRE_BYTES).sum()
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hop of a message (outbox, network, inbox) moves it whole: the large,
    /// rare ones are boxed so the data path's messages stay small.
    #[test]
    fn a_message_is_no_larger_than_a_replica_write() {
        assert!(size_of::<Message>() <= 80, "Message is {} bytes", size_of::<Message>());
    }
}
