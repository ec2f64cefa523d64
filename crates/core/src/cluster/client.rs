//! The client (docs/protocol.md): create, write(range), read(range), delete and stat,
//! with a cache of objects and chunk-group views. Data goes to each chunk's primary;
//! on a refusal or a timeout the client asks the MDS for the group's view and retries
//! there after a pause, so requests follow epoch and lease changes (C5: the MDS is
//! asked for metadata only).
//!
//! Call protocol as for the other roles: `handle`, then drain `poll_action`, then arm
//! a timer for `poll_timeout`. Every submitted op ends with exactly one
//! `ClientAction::Done` carrying its tag.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use somnus_types::{ByteRange, ChunkGroupId, Version, VirtualInstant};

use super::{
    BindCondition, BindRequest, ChunkId, ClientId, ClusterConfig, GroupView, ListedObject, Message,
    MetadataError, ObjectInfo, ObjectRef, Payload, Peer, Piece, ReplyBody, RequestError, Stamp,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOp {
    Create {
        name: String,
        size_bytes: u64,
    },
    /// Writes `range` of the object (whole blocks), every block carrying `stamp`,
    /// with the range's bytes (none in the simulator).
    Write {
        name: String,
        range: ByteRange,
        stamp: Stamp,
        data: Payload,
    },
    Read {
        name: String,
        range: ByteRange,
    },
    Delete {
        name: String,
    },
    Stat {
        name: String,
    },
    /// One page of the names starting with `prefix`, after `start_after` (with each
    /// name's attributes if `attrs`).
    List {
        prefix: String,
        start_after: Option<String>,
        limit: u32,
        attrs: bool,
    },
    /// A data object to write and then bind (docs/space.md).
    Allocate {
        size_bytes: u64,
    },
    /// Writes `range` of a data object given whole (no lookup of a name).
    WriteTo {
        object: ObjectRef,
        range: ByteRange,
        stamp: Stamp,
        data: Payload,
    },
    /// Reads `range` of a data object given whole.
    ReadFrom {
        object: ObjectRef,
        range: ByteRange,
    },
    /// Makes `name` hold `data` with `attrs` ([`BindRequest`]).
    Bind {
        name: String,
        data: Vec<somnus_types::ObjectId>,
        attrs: Vec<u8>,
        taking: Vec<String>,
        require: Option<String>,
        condition: BindCondition,
    },
    /// Deletes those of `names` that exist.
    DeleteMany {
        names: Vec<String>,
    },
    /// Gives back an allocation that will not be bound.
    Release {
        object: somnus_types::ObjectId,
    },
}

/// What a data op addresses: a name's first data object, or a data object itself.
enum Target<'a> {
    Name(&'a str),
    Data(&'a ObjectRef),
}

impl ClientOp {
    fn target(&self) -> Option<(Target<'_>, ByteRange)> {
        match self {
            ClientOp::Write { name, range, .. } | ClientOp::Read { name, range } => {
                Some((Target::Name(name), *range))
            }
            ClientOp::WriteTo { object, range, .. } | ClientOp::ReadFrom { object, range } => {
                Some((Target::Data(object), *range))
            }
            _ => None,
        }
    }

    fn is_write(&self) -> bool {
        matches!(self, ClientOp::Write { .. } | ClientOp::WriteTo { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOutcome {
    Object(ObjectInfo),
    /// The version each chunk's part was written at.
    Written(Vec<(ChunkId, ByteRange, Version)>),
    /// The pieces read, per chunk, in object order (ranges within the chunk).
    Read(Vec<(ChunkId, Piece)>),
    Deleted,
    /// A page of a listing; `truncated` says more names follow the last.
    Listed {
        objects: Vec<ListedObject>,
        truncated: bool,
    },
    Failed(ClientError),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("range {start}..{end} is outside the object's {size} bytes or not whole blocks", start = .range.start, end = .range.end)]
    BadRange { range: ByteRange, size: u64 },
    /// A replica's disk is below its reserve: the primary refused the write before
    /// any replica took it. Not retried: space comes back only when some is freed.
    #[error(
        "no space: server {}'s disk has less free space than the cluster's reserve, so the \
         write was refused (a write across several chunks may have written the others)",
        .server.0
    )]
    NoSpace { server: somnus_types::ServerId },
    /// The op's deadline passed before it was done (what of a write took effect is
    /// unknown: some of its parts may have been acknowledged).
    #[error("no answer from the cluster by the op's deadline")]
    DeadlinePassed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// A new op; by `deadline` (none: the config's `op_deadline` from now) it is
    /// done, or it ends `Failed(DeadlinePassed)` and the client forgets it.
    Submit {
        tag: u64,
        op: ClientOp,
        deadline: Option<VirtualInstant>,
    },
    MessageReceived {
        from: Peer,
        message: Message,
    },
    TimerFired,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAction {
    Send { to: Peer, message: Message },
    Done { tag: u64, outcome: ClientOutcome },
}

/// What a client did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    pub retries: u64,
    pub timeouts: u64,
    /// Ops that ended at their deadline.
    pub deadlines_passed: u64,
    pub lookups: u64,
}

/// One chunk's share of a data op.
#[derive(Clone, Debug)]
struct Part {
    chunk: ChunkId,
    group: ChunkGroupId,
    range: ByteRange,
    /// Where the part starts within the op's range (its bytes' offset in a write).
    offset: u64,
    state: PartState,
    /// A send of it went unanswered: a write may have been taken, so a later
    /// `NoSpace` (to a repeat) does not say it never took effect, and is retried.
    unanswered: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PartState {
    /// Sent as `request`, at `at`.
    Sent {
        request: u64,
        at: VirtualInstant,
    },
    /// Waiting to ask the MDS for the group's view at `at`.
    Backoff {
        at: VirtualInstant,
    },
    /// Asked the MDS (request `request`, at `at`); sent again when the view comes.
    Looking {
        request: u64,
        at: VirtualInstant,
    },
    Done,
}

#[derive(Clone, Debug)]
enum OpState {
    /// Waiting for the object's metadata (a lookup under way for its name).
    NeedsInfo,
    /// A metadata request to the MDS under way.
    Metadata { at: VirtualInstant, message: Message },
    Data {
        parts: Vec<Part>,
        written: Vec<(ChunkId, ByteRange, Version)>,
        read: Vec<(usize, Piece)>,
    },
}

/// What of an op a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Metadata,
    Part(usize),
}

#[derive(Clone, Debug)]
struct Op {
    op: ClientOp,
    state: OpState,
    /// When it ends if not done ([`ClientEvent::Submit`]).
    deadline: VirtualInstant,
}

pub struct Client {
    id: ClientId,
    config: ClusterConfig,
    now: VirtualInstant,
    /// Names and their info, and when each was learned: one older than the config's
    /// `view_ttl` is looked up again before a data op uses it, so a name another
    /// client deleted or bound again is seen within that time.
    objects: BTreeMap<String, (ObjectInfo, VirtualInstant)>,
    /// Each group's view and when it was learned: a view older than the config's
    /// `view_ttl` is asked for again before use, so a client never talks to a deposed
    /// primary for long even if that primary keeps answering.
    views: BTreeMap<ChunkGroupId, (GroupView, VirtualInstant)>,
    ops: BTreeMap<u64, Op>,
    /// The ops' own deadlines, earliest first (`ClientEvent::Submit`).
    op_deadlines: BTreeSet<(VirtualInstant, u64)>,
    /// Every deadline set for an op's metadata request or a part (`Slot`), earliest
    /// first, and ones since changed or gone, dropped when they come to the top: the
    /// timer and `poll_timeout` look only at the due ones, not at every op in flight
    /// (a trace replay has thousands while a gear shifts).
    deadlines: BinaryHeap<Reverse<(VirtualInstant, u64, Slot)>>,
    /// Request id → the op (and part) it belongs to.
    requests: BTreeMap<u64, (u64, Option<usize>)>,
    /// Names with a lookup under way (request, sent at), for ops that need them.
    lookups: BTreeMap<String, (u64, VirtualInstant)>,
    next_request: u64,
    actions: VecDeque<ClientAction>,
    counters: ClientCounters,
    /// The broken variant `ReadFromSecondary`: reads go to a replica that is not the
    /// primary. Never set outside the tests that show the checker catches it.
    reads_to_secondary: bool,
}

impl Client {
    pub fn new(id: ClientId, config: ClusterConfig, now: VirtualInstant) -> Client {
        Client {
            id,
            config,
            now,
            objects: BTreeMap::new(),
            views: BTreeMap::new(),
            ops: BTreeMap::new(),
            op_deadlines: BTreeSet::new(),
            deadlines: BinaryHeap::new(),
            requests: BTreeMap::new(),
            lookups: BTreeMap::new(),
            next_request: 1,
            actions: VecDeque::new(),
            counters: ClientCounters::default(),
            reads_to_secondary: false,
        }
    }

    /// Makes this client send its reads to a secondary: a deliberately wrong protocol
    /// (`Broken::ReadFromSecondary`), for showing that the checker catches it.
    pub fn send_reads_to_secondaries(&mut self) {
        self.reads_to_secondary = true;
    }

    pub fn id(&self) -> ClientId {
        self.id
    }

    pub fn counters(&self) -> ClientCounters {
        self.counters
    }

    pub fn ops_in_flight(&self) -> usize {
        self.ops.len()
    }

    pub fn handle(&mut self, now: VirtualInstant, event: ClientEvent) {
        assert!(now >= self.now, "time went back: {now:?} < {:?}", self.now);
        self.now = now;
        match event {
            ClientEvent::Submit { tag, op, deadline } => self.submit(tag, op, deadline),
            ClientEvent::MessageReceived { message, .. } => self.message(message),
            ClientEvent::TimerFired => self.timer(),
        }
        self.drop_stale_deadlines();
    }

    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<VirtualInstant> {
        let timeout = self.config.request_timeout;
        let lookups = self.lookups.values().map(|(_, at)| at.saturating_add(timeout));
        // The top deadline is one still set (`handle` dropped the stale ones above it).
        let ops = self.deadlines.peek().map(|Reverse((at, _, _))| *at);
        let ends = self.op_deadlines.first().map(|(at, _)| *at);
        ops.into_iter().chain(ends).chain(lookups).min()
    }

    /// The deadline now set for `slot` of op `tag`, if any.
    fn deadline_of(&self, tag: u64, slot: Slot) -> Option<VirtualInstant> {
        let timeout = self.config.request_timeout;
        match (&self.ops.get(&tag)?.state, slot) {
            (OpState::Metadata { at, .. }, Slot::Metadata) => Some(at.saturating_add(timeout)),
            (OpState::Data { parts, .. }, Slot::Part(index)) => parts.get(index)?.deadline(timeout),
            _ => None,
        }
    }

    fn expect(&mut self, tag: u64, slot: Slot) {
        if let Some(at) = self.deadline_of(tag, slot) {
            self.deadlines.push(Reverse((at, tag, slot)));
        }
    }

    fn drop_stale_deadlines(&mut self) {
        while let Some(&Reverse((at, tag, slot))) = self.deadlines.peek() {
            if self.deadline_of(tag, slot) == Some(at) {
                break;
            }
            self.deadlines.pop();
        }
    }

    fn request_id(&mut self, tag: u64, part: Option<usize>) -> u64 {
        let request = self.next_request;
        self.next_request += 1;
        self.requests.insert(request, (tag, part));
        request
    }

    fn finish(&mut self, tag: u64, outcome: ClientOutcome) {
        if let Some(Op { deadline, .. }) = self.ops.remove(&tag) {
            self.op_deadlines.remove(&(deadline, tag));
        }
        self.actions.push_back(ClientAction::Done { tag, outcome });
    }

    fn submit(&mut self, tag: u64, op: ClientOp, deadline: Option<VirtualInstant>) {
        assert!(!self.ops.contains_key(&tag), "op tag {tag} submitted twice");
        // Every op ends: an op no answer comes to (every holder of a block failed for
        // good) is not retried forever behind its caller's back.
        let deadline = deadline.unwrap_or(self.now.saturating_add(self.config.op_deadline));
        let metadata = match &op {
            ClientOp::Create { name, size_bytes } => Some(Message::CreateObject {
                request: 0,
                name: name.clone(),
                size_bytes: *size_bytes,
            }),
            ClientOp::Delete { name } => {
                Some(Message::DeleteObject { request: 0, name: name.clone() })
            }
            ClientOp::Stat { name } => {
                Some(Message::LookupObject { request: 0, name: name.clone() })
            }
            ClientOp::List { prefix, start_after, limit, attrs } => Some(Message::ListObjects {
                request: 0,
                prefix: prefix.clone(),
                start_after: start_after.clone(),
                limit: *limit,
                attrs: *attrs,
            }),
            ClientOp::Allocate { size_bytes } => {
                Some(Message::AllocateObject { request: 0, size_bytes: *size_bytes })
            }
            ClientOp::Bind { name, data, attrs, taking, require, condition } => {
                Some(Message::BindObject(Box::new(BindRequest {
                    request: 0,
                    name: name.clone(),
                    data: data.clone(),
                    attrs: attrs.clone(),
                    taking: taking.clone(),
                    require: require.clone(),
                    condition: *condition,
                })))
            }
            ClientOp::DeleteMany { names } => {
                Some(Message::DeleteObjects { request: 0, names: names.clone() })
            }
            ClientOp::Release { object } => {
                Some(Message::ReleaseObject { request: 0, object: *object })
            }
            ClientOp::Write { .. }
            | ClientOp::Read { .. }
            | ClientOp::WriteTo { .. }
            | ClientOp::ReadFrom { .. } => None,
        };
        self.ops.insert(tag, Op { op, state: OpState::NeedsInfo, deadline });
        self.op_deadlines.insert((deadline, tag));
        match metadata {
            Some(message) => self.send_metadata(tag, message),
            None => self.start_data(tag),
        }
    }

    fn send_metadata(&mut self, tag: u64, mut message: Message) {
        let request = self.request_id(tag, None);
        match &mut message {
            Message::CreateObject { request: r, .. }
            | Message::DeleteObject { request: r, .. }
            | Message::LookupObject { request: r, .. }
            | Message::ListObjects { request: r, .. }
            | Message::AllocateObject { request: r, .. }
            | Message::DeleteObjects { request: r, .. }
            | Message::ReleaseObject { request: r, .. } => *r = request,
            Message::BindObject(bind) => bind.request = request,
            _ => unreachable!("only object requests are sent for an op"),
        }
        if let Some(op) = self.ops.get_mut(&tag) {
            op.state = OpState::Metadata { at: self.now, message: message.clone() };
        }
        self.expect(tag, Slot::Metadata);
        self.actions.push_back(ClientAction::Send { to: Peer::Mds, message });
    }

    /// Splits a data op into its chunks' parts once the object's metadata is known.
    fn start_data(&mut self, tag: u64) {
        let Some(op) = self.ops.get(&tag) else { return };
        let Some((target, range)) = op.op.target() else { return };
        let ttl = self.config.view_ttl;
        let (object, size_bytes, chunk_groups) = match target {
            Target::Data(data) => (data.object, data.size_bytes, &data.chunk_groups),
            Target::Name(name) => match self.objects.get(name) {
                Some((info, at)) if at.saturating_add(ttl) > self.now => {
                    (info.object, info.size_bytes, &info.chunk_groups)
                }
                _ => {
                    let name = name.to_owned();
                    if !self.lookups.contains_key(&name) {
                        self.look_up_object(name);
                    }
                    return;
                }
            },
        };
        let block = super::store::BLOCK_BYTES;
        let aligned = range.start % block == 0 && range.end % block == 0;
        let chunks = size_bytes.div_ceil(self.config.chunk_size_bytes);
        if range.is_empty()
            || !aligned
            || range.end > size_bytes
            || chunk_groups.len() as u64 != chunks
        {
            let error = ClientError::BadRange { range, size: size_bytes };
            self.finish(tag, ClientOutcome::Failed(error));
            return;
        }
        let now = self.now;
        let chunk_size = self.config.chunk_size_bytes;
        let parts = ChunkId::split(object, chunk_size, range)
            .map(|(chunk, within)| Part {
                chunk,
                group: chunk_groups[chunk.chunk.0 as usize],
                range: within,
                offset: u64::from(chunk.chunk.0) * chunk_size + within.start - range.start,
                state: PartState::Backoff { at: now },
                unanswered: false,
            })
            .collect();
        if let Some(op) = self.ops.get_mut(&tag) {
            op.state = OpState::Data { parts, written: Vec::new(), read: Vec::new() };
        }
        let count = match self.ops.get(&tag).map(|o| &o.state) {
            Some(OpState::Data { parts, .. }) => parts.len(),
            _ => 0,
        };
        for index in 0..count {
            self.expect(tag, Slot::Part(index));
            self.send_part(tag, index);
        }
    }

    fn look_up_object(&mut self, name: String) {
        let request = self.next_request;
        self.next_request += 1;
        self.counters.lookups += 1;
        self.lookups.insert(name.clone(), (request, self.now));
        let message = Message::LookupObject { request, name };
        self.actions.push_back(ClientAction::Send { to: Peer::Mds, message });
    }

    /// Sends a part to its group's primary, or asks the MDS for the view if the cache
    /// has no primary for it.
    fn send_part(&mut self, tag: u64, index: usize) {
        let Some(Op { op, state: OpState::Data { parts, .. }, .. }) = self.ops.get(&tag) else {
            return;
        };
        let part = parts[index].clone();
        let fresh = |(v, at): &(GroupView, VirtualInstant)| {
            v.primary.is_some() && at.saturating_add(self.config.view_ttl) > self.now
        };
        // The view's parts a request needs, without copying its replica list.
        let view =
            self.views.get(&part.group).filter(|e| fresh(e)).map(|(v, _)| (v.epoch, v.primary));
        let Some((epoch, primary)) = view else {
            self.look_up_group(tag, index);
            return;
        };
        let write = match op {
            ClientOp::Write { stamp, data, .. } | ClientOp::WriteTo { stamp, data, .. } => {
                Some((*stamp, data.slice(part.offset, part.range.size_bytes())))
            }
            _ => None,
        };
        let request = self.request_id(tag, Some(index));
        let message = match write {
            Some((stamp, data)) => Message::ClientWrite {
                request,
                group: part.group,
                epoch,
                chunk: part.chunk,
                range: part.range,
                stamp,
                data,
            },
            None => Message::ClientRead {
                request,
                group: part.group,
                epoch,
                chunk: part.chunk,
                range: part.range,
            },
        };
        self.set_part(tag, index, PartState::Sent { request, at: self.now });
        let Some(primary) = primary else { return };
        let secondary = if matches!(message, Message::ClientRead { .. }) && self.reads_to_secondary
        {
            let replicas = self.views.get(&part.group).map_or(&[][..], |(v, _)| &v.replicas[..]);
            replicas.iter().copied().find(|r| *r != primary)
        } else {
            None
        };
        let to = secondary.unwrap_or(primary);
        self.actions.push_back(ClientAction::Send { to: Peer::Server(to), message });
    }

    fn set_part(&mut self, tag: u64, index: usize, state: PartState) {
        if let Some(Op { state: OpState::Data { parts, .. }, .. }) = self.ops.get_mut(&tag) {
            parts[index].state = state;
        }
        self.expect(tag, Slot::Part(index));
    }

    fn look_up_group(&mut self, tag: u64, index: usize) {
        let Some(Op { state: OpState::Data { parts, .. }, .. }) = self.ops.get(&tag) else {
            return;
        };
        let group = parts[index].group;
        let request = self.request_id(tag, Some(index));
        self.counters.lookups += 1;
        self.set_part(tag, index, PartState::Looking { request, at: self.now });
        let message = Message::LookupGroup { request, group };
        self.actions.push_back(ClientAction::Send { to: Peer::Mds, message });
    }

    /// A part failed or timed out: ask for the view again after a pause.
    fn back_off(&mut self, tag: u64, index: usize) {
        self.counters.retries += 1;
        let at = self.now.saturating_add(self.config.retry_interval);
        self.set_part(tag, index, PartState::Backoff { at });
    }

    fn message(&mut self, message: Message) {
        let request = match &message {
            Message::ObjectFound { request, .. }
            | Message::ObjectDeleted { request, .. }
            | Message::GroupFound { request, .. }
            | Message::MetadataRefused { request, .. }
            | Message::ObjectsListed { request, .. }
            | Message::ClientReply { request, .. } => *request,
            _ => return,
        };
        if let Some((name, _)) = self.lookups.iter().find(|(_, (r, _))| *r == request) {
            let name = name.clone();
            self.lookups.remove(&name);
            return self.lookup_answered(&name, message);
        }
        let Some((tag, part)) = self.requests.remove(&request) else { return };
        match (part, message) {
            (Some(index), Message::GroupFound { view, .. }) => {
                self.learn_view(view);
                let looking = matches!(self.part_state(tag, index), Some(PartState::Looking { request: r, .. }) if r == request);
                if looking {
                    let has_primary = self
                        .views
                        .get(&self.part_group(tag, index))
                        .is_some_and(|(v, _)| v.primary.is_some());
                    if has_primary { self.send_part(tag, index) } else { self.back_off(tag, index) }
                }
            }
            (Some(index), Message::ClientReply { body, .. }) => {
                self.part_replied(tag, index, request, body)
            }
            (None, message) => self.metadata_answered(tag, message),
            _ => {}
        }
    }

    fn part_state(&self, tag: u64, index: usize) -> Option<PartState> {
        match self.ops.get(&tag).map(|o| &o.state) {
            Some(OpState::Data { parts, .. }) => Some(parts[index].state),
            _ => None,
        }
    }

    fn part_group(&self, tag: u64, index: usize) -> ChunkGroupId {
        match self.ops.get(&tag).map(|o| &o.state) {
            Some(OpState::Data { parts, .. }) => parts[index].group,
            _ => ChunkGroupId(u32::MAX),
        }
    }

    fn learn_view(&mut self, view: GroupView) {
        let newer = self.views.get(&view.group).is_none_or(|(v, _)| v.epoch <= view.epoch);
        if newer {
            self.views.insert(view.group, (view, self.now));
        }
    }

    fn learn_object(&mut self, info: &ObjectInfo) {
        for view in &info.views {
            self.learn_view(view.clone());
        }
        // An allocation has no name: nothing to cache by.
        if !info.name.is_empty() {
            self.objects.insert(info.name.clone(), (info.clone(), self.now));
        }
    }

    fn lookup_answered(&mut self, name: &str, message: Message) {
        let waiting: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| matches!(op.state, OpState::NeedsInfo))
            .filter(|(_, op)| matches!(op.op.target(), Some((Target::Name(n), _)) if n == name))
            .map(|(tag, _)| *tag)
            .collect();
        match message {
            Message::ObjectFound { info, .. } => {
                self.learn_object(&info);
                for tag in waiting {
                    self.start_data(tag);
                }
            }
            Message::MetadataRefused { error, .. } => {
                self.objects.remove(name);
                for tag in waiting {
                    self.finish(tag, ClientOutcome::Failed(error.clone().into()));
                }
            }
            _ => {}
        }
    }

    fn metadata_answered(&mut self, tag: u64, message: Message) {
        if !self.ops.contains_key(&tag) {
            return;
        }
        let outcome = match message {
            Message::ObjectFound { info, .. } => {
                self.learn_object(&info);
                ClientOutcome::Object(*info)
            }
            Message::ObjectDeleted { name, .. } => {
                self.objects.remove(&name);
                if let Some(ClientOp::DeleteMany { names }) = self.ops.get(&tag).map(|o| &o.op) {
                    for name in names.clone() {
                        self.objects.remove(&name);
                    }
                }
                ClientOutcome::Deleted
            }
            Message::ObjectsListed { objects, truncated, .. } => {
                ClientOutcome::Listed { objects, truncated }
            }
            Message::MetadataRefused { error, .. } => ClientOutcome::Failed(error.into()),
            _ => return,
        };
        self.finish(tag, outcome);
    }

    fn part_replied(&mut self, tag: u64, index: usize, request: u64, body: ReplyBody) {
        let current = matches!(self.part_state(tag, index), Some(PartState::Sent { request: r, .. }) if r == request);
        if !current {
            return;
        }
        let Some(Op { state: OpState::Data { parts, written, read }, .. }) = self.ops.get_mut(&tag)
        else {
            return;
        };
        let part = &mut parts[index];
        match body {
            ReplyBody::Written { version } => {
                written.push((part.chunk, part.range, version));
                part.state = PartState::Done;
            }
            ReplyBody::Read { pieces } => {
                read.extend(pieces.into_iter().map(|p| (index, p)));
                part.state = PartState::Done;
            }
            // Definite only if no earlier send went unanswered (N1): a repeat of a
            // write a primary may hold (adopted, or committed with its answer lost)
            // waits for room like any retry, until the caller's deadline.
            ReplyBody::Refused(RequestError::NoSpace { server }) if !part.unanswered => {
                return self.finish(tag, ClientOutcome::Failed(ClientError::NoSpace { server }));
            }
            // The object was deleted and freed at its servers: it is gone for good.
            ReplyBody::Refused(RequestError::Freed) => {
                let chunk = part.chunk;
                let name = match self.ops.get(&tag).and_then(|o| o.op.target()) {
                    Some((Target::Name(name), _)) => name.to_owned(),
                    _ => format!("data object {}", chunk.object.0),
                };
                if let Some((info, _)) = self.objects.get(&name)
                    && info.object == chunk.object
                {
                    self.objects.remove(&name);
                }
                let error = ClientError::Metadata(MetadataError::NoSuchObject(name));
                return self.finish(tag, ClientOutcome::Failed(error));
            }
            ReplyBody::Refused(_) => return self.back_off(tag, index),
        }
        if parts.iter().all(|p| p.state == PartState::Done) {
            let outcome = if self.ops[&tag].op.is_write() {
                let Some(Op { state: OpState::Data { written, .. }, .. }) = self.ops.get_mut(&tag)
                else {
                    return;
                };
                let mut written = std::mem::take(written);
                written.sort_by_key(|(chunk, range, _)| (*chunk, range.start));
                ClientOutcome::Written(written)
            } else {
                let Some(Op { state: OpState::Data { parts, read, .. }, .. }) =
                    self.ops.get_mut(&tag)
                else {
                    return;
                };
                let mut pieces = std::mem::take(read);
                pieces.sort_by_key(|(index, piece)| (*index, piece.range.start));
                ClientOutcome::Read(pieces.into_iter().map(|(i, p)| (parts[i].chunk, p)).collect())
            };
            self.finish(tag, outcome);
        }
    }

    /// Ops past their deadline end: what they sent is forgotten (an answer that comes
    /// later finds no op), so a caller that gave up leaves nothing behind.
    fn end_ops_past_deadline(&mut self) {
        while let Some(&(at, tag)) = self.op_deadlines.first()
            && at <= self.now
        {
            self.op_deadlines.pop_first();
            if !self.ops.contains_key(&tag) {
                continue;
            }
            self.requests.retain(|_, (t, _)| *t != tag);
            self.counters.deadlines_passed += 1;
            self.finish(tag, ClientOutcome::Failed(ClientError::DeadlinePassed));
        }
    }

    /// Timeouts and back-offs that are due.
    fn timer(&mut self) {
        self.end_ops_past_deadline();
        let now = self.now;
        let timeout = self.config.request_timeout;
        let mut due = BTreeSet::new();
        while let Some(&Reverse((at, tag, slot))) = self.deadlines.peek() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            if self.deadline_of(tag, slot) == Some(at) {
                due.insert((matches!(slot, Slot::Part(_)), tag, slot));
            }
        }
        // Metadata requests first, then parts, each in tag order.
        let mut resend_metadata = Vec::new();
        let mut due_parts = Vec::new();
        for (_, tag, slot) in due {
            let Some(op) = self.ops.get(&tag) else { continue };
            match (&op.state, slot) {
                (OpState::Metadata { message, .. }, Slot::Metadata) => {
                    resend_metadata.push((tag, message.clone()));
                }
                (OpState::Data { parts, .. }, Slot::Part(index)) => {
                    due_parts.push((tag, index, parts[index].state));
                }
                _ => {}
            }
        }
        for (tag, message) in resend_metadata {
            // Sent again under the same request id: the MDS answers a create it has
            // made already with the object.
            self.counters.timeouts += 1;
            if let Some(Op { state: OpState::Metadata { at, .. }, .. }) = self.ops.get_mut(&tag) {
                *at = now;
            }
            self.expect(tag, Slot::Metadata);
            self.actions.push_back(ClientAction::Send { to: Peer::Mds, message });
        }
        for (tag, index, state) in due_parts {
            match state {
                PartState::Backoff { .. } => self.look_up_group(tag, index),
                PartState::Sent { .. } | PartState::Looking { .. } => {
                    self.counters.timeouts += 1;
                    if matches!(state, PartState::Sent { .. })
                        && let Some(Op { state: OpState::Data { parts, .. }, .. }) =
                            self.ops.get_mut(&tag)
                    {
                        parts[index].unanswered = true;
                    }
                    self.back_off(tag, index);
                }
                PartState::Done => {}
            }
        }
        // Lookups of object names whose answer was lost are asked again.
        let lost: Vec<String> = self
            .lookups
            .iter()
            .filter(|(_, (_, at))| at.saturating_add(timeout) <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in lost {
            self.counters.timeouts += 1;
            self.look_up_object(name);
        }
    }
}

impl Part {
    fn deadline(&self, timeout: somnus_types::VirtualDuration) -> Option<VirtualInstant> {
        match self.state {
            PartState::Sent { at, .. } | PartState::Looking { at, .. } => {
                Some(at.saturating_add(timeout))
            }
            PartState::Backoff { at } => Some(at),
            PartState::Done => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use somnus_types::VirtualDuration;

    use super::*;

    fn stat(client: &mut Client, tag: u64, deadline: Option<VirtualInstant>) {
        let op = ClientOp::Stat { name: "a".into() };
        client.handle(client.now, ClientEvent::Submit { tag, op, deadline });
    }

    /// Runs the client's timers until `until`, dropping what it sends (nobody answers).
    fn unanswered_until(client: &mut Client, until: VirtualInstant) -> Vec<ClientAction> {
        let mut done = Vec::new();
        while let Some(at) = client.poll_timeout().filter(|at| *at <= until) {
            client.handle(at, ClientEvent::TimerFired);
            while let Some(action) = client.poll_action() {
                if let ClientAction::Done { .. } = action {
                    done.push(action);
                }
            }
        }
        done
    }

    #[test]
    fn an_op_ends_at_its_deadline_and_is_forgotten_one_without_at_the_configs() {
        let op_deadline = VirtualDuration::from_secs(30);
        let config = ClusterConfig { op_deadline, ..ClusterConfig::sierra() };
        let mut client = Client::new(ClientId(1), config, VirtualInstant::ZERO);
        let second = VirtualDuration::from_secs(1);
        let deadline =
            VirtualInstant::ZERO.saturating_add(VirtualDuration(config.request_timeout.0 * 5));
        stat(&mut client, 1, Some(deadline));
        stat(&mut client, 2, None);
        while client.poll_action().is_some() {}
        let end = deadline.saturating_add(second);
        let done = unanswered_until(&mut client, end);
        let failed = ClientOutcome::Failed(ClientError::DeadlinePassed);
        assert_eq!(done, vec![ClientAction::Done { tag: 1, outcome: failed }]);
        assert_eq!(client.counters().deadlines_passed, 1);
        assert!(client.counters().timeouts >= 4, "retried until its deadline");
        // The op without a deadline of its own is still retried; the ended one left
        // no request.
        assert_eq!(client.ops_in_flight(), 1);
        assert!(client.requests.values().all(|(tag, _)| *tag == 2));
        let before = VirtualInstant::ZERO.saturating_add(op_deadline.saturating_sub(second));
        assert!(unanswered_until(&mut client, before).is_empty());
        assert_eq!(client.ops_in_flight(), 1);
        // It ends at the config's deadline: no op is retried forever.
        let after = VirtualInstant::ZERO.saturating_add(op_deadline).saturating_add(second);
        let failed = ClientOutcome::Failed(ClientError::DeadlinePassed);
        assert_eq!(
            unanswered_until(&mut client, after),
            vec![ClientAction::Done { tag: 2, outcome: failed }]
        );
        assert_eq!(client.ops_in_flight(), 0);
    }
}
