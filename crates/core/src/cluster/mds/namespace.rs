//! The MDS's namespace: names, each holding data objects in order and attributes, and
//! the data objects, each chunk in a chunk group drawn at random (seeded, stateless: a
//! hash of the seed, the object and the chunk), so that every group sees the same mix
//! of load (Sierra 3.1).
//!
//! A data object is held by one name at most. It is made with its name
//! (`CreateObject`), or allocated alone (`AllocateObject`) and written before a bind
//! names it: a reader then sees a name's old data or its new data whole, never a mix.
//! Data no name holds any more (a name deleted or bound to other data, an allocation
//! never bound) goes to the free log (`frees.rs`): its ids are never given again.

use std::sync::Arc;

use somnus_types::{ChunkGroupId, ObjectId, VirtualInstant};

use super::frees::FreeSpec;
use super::{Command, DataEntry, Mds, NameEntry, mix};
use crate::cluster::{
    BindCondition, BindRequest, ClientId, GroupView, ListedObject, Message, MetadataError,
    ObjectInfo, ObjectRef, Peer,
};

/// The longest object name, in bytes: an S3 key (1,024 bytes) under the S3 gateway's
/// prefix and its bucket (63).
pub const NAME_BYTES_MAX: usize = 1152;
/// The most chunks one object has (64 TiB of 64 MiB chunks).
pub const OBJECT_CHUNKS_MAX: u64 = 1 << 20;
/// The most names one page of a listing holds (S3's `max-keys` limit).
pub(crate) const LIST_PAGE_MAX: u32 = 1000;
/// The most objects the MDS holds.
pub const OBJECTS_MAX: usize = 1 << 26;
/// The most bytes of attributes a name holds (an S3 record: 2 KiB of user metadata,
/// the headers, a multipart object's part sizes).
pub const ATTRS_BYTES_MAX: usize = 256 << 10;
/// The most data objects one bind names, and names it takes (S3's 10,000 parts).
pub const BIND_OBJECTS_MAX: usize = 10_000;

impl Mds {
    pub(super) fn handle_client_message(&mut self, client: ClientId, message: Message) {
        let (request, answer) = match message {
            // A create answered before, sent again (a retry, or a duplicate the network
            // held for seconds): answered as a lookup, never made again, so that it
            // cannot bring back a name deleted since.
            Message::CreateObject { request, name, .. } if self.answered.holds(client, request) => {
                (request, self.info(&name).map(found(request)))
            }
            Message::CreateObject { request, name, size_bytes } => {
                let answer = self.create(&name, size_bytes, (client, request));
                self.answer_once(client, request);
                (request, answer.map(found(request)))
            }
            Message::AllocateObject { request, size_bytes } => {
                (request, self.allocate(size_bytes, (client, request)).map(found(request)))
            }
            Message::BindObject(bind) => {
                let request = bind.request;
                (request, self.bind(*bind, client).map(found(request)))
            }
            Message::LookupObject { request, name } => {
                (request, self.info(&name).map(found(request)))
            }
            // A delete's retry (or a duplicate the network made) is answered as the
            // first was: it must not delete the name made again since.
            Message::DeleteObject { request, name } if self.answered.holds(client, request) => {
                (request, Ok(Message::ObjectDeleted { request, name }))
            }
            Message::DeleteObjects { request, .. } if self.answered.holds(client, request) => {
                (request, Ok(Message::ObjectDeleted { request, name: String::new() }))
            }
            Message::DeleteObject { request, name } => {
                let answer = self.delete(&name).map(|()| Message::ObjectDeleted { request, name });
                self.answer_once(client, request);
                (request, answer)
            }
            Message::DeleteObjects { request, names } => {
                let answer =
                    self.delete_many(names).map(|name| Message::ObjectDeleted { request, name });
                self.answer_once(client, request);
                (request, answer)
            }
            Message::ReleaseObject { request, object } => {
                self.release(object, client);
                (request, Ok(Message::ObjectDeleted { request, name: String::new() }))
            }
            Message::LookupGroup { request, group } if group.index() < self.groups.len() => {
                (request, Ok(Message::GroupFound { request, view: self.view(group) }))
            }
            Message::ListObjects { request, prefix, start_after, limit, attrs } => {
                (request, Ok(self.list(request, &prefix, start_after.as_deref(), limit, attrs)))
            }
            _ => {
                self.counters.messages_dropped += 1;
                return;
            }
        };
        let message = answer.unwrap_or_else(|error| Message::MetadataRefused { request, error });
        self.send(Peer::Client(client), message);
    }

    /// Records that `request` of `client` is answered, durably before the answer goes.
    fn answer_once(&mut self, client: ClientId, request: u64) {
        self.commit(Command::AnsweredRequests { requests: vec![(client, request)] });
    }

    fn create(
        &mut self,
        name: &str,
        size_bytes: u64,
        creator: (ClientId, u64),
    ) -> Result<ObjectInfo, MetadataError> {
        check_name(name)?;
        if self.names.get(name).is_some_and(|n| n.creator == creator) {
            return self.info(name);
        }
        if self.names.contains_key(name) {
            return Err(MetadataError::AlreadyExists(name.to_owned()));
        }
        let (object, chunk_groups) = self.new_data(size_bytes)?;
        let name = name.to_owned();
        self.commit(Command::CreateObject {
            name: name.clone(),
            object,
            size_bytes,
            chunk_groups,
            creator,
        });
        self.info(&name)
    }

    /// A data object for `creator` to write and then bind (a retry gets the same).
    fn allocate(
        &mut self,
        size_bytes: u64,
        creator: (ClientId, u64),
    ) -> Result<ObjectInfo, MetadataError> {
        if let Some(object) = self.pending_by_creator.get(&creator) {
            return Ok(self.data_info(*object));
        }
        let (object, chunk_groups) = self.new_data(size_bytes)?;
        self.commit(Command::AllocateObject { object, size_bytes, chunk_groups, creator });
        Ok(self.data_info(object))
    }

    /// A new object id and its chunks' groups, or why an object of `size_bytes` cannot be.
    fn new_data(&self, size_bytes: u64) -> Result<(ObjectId, Vec<ChunkGroupId>), MetadataError> {
        if self.data.len() >= OBJECTS_MAX || self.names.len() >= OBJECTS_MAX {
            return Err(MetadataError::Full(OBJECTS_MAX));
        }
        let chunks = size_bytes.div_ceil(self.config.chunk_size_bytes);
        if chunks > OBJECT_CHUNKS_MAX {
            return Err(MetadataError::TooLarge { size_bytes });
        }
        let object = ObjectId(self.next_object);
        let group_count = self.groups.len() as u64;
        let chunk_groups = (0..chunks)
            .map(|chunk| {
                ChunkGroupId((mix(self.config.seed ^ mix(object.0) ^ chunk) % group_count) as u32)
            })
            .collect();
        Ok((object, chunk_groups))
    }

    /// Checks a bind and commits it; a retry of one applied answers with the name.
    fn bind(&mut self, bind: BindRequest, client: ClientId) -> Result<ObjectInfo, MetadataError> {
        let creator = (client, bind.request);
        check_name(&bind.name)?;
        if self.names.get(&bind.name).is_some_and(|n| n.creator == creator) {
            return self.info(&bind.name);
        }
        if bind.attrs.len() > ATTRS_BYTES_MAX {
            return Err(MetadataError::AttrsTooLarge(bind.attrs.len()));
        }
        let most = bind.data.len().max(bind.taking.len());
        if most > BIND_OBJECTS_MAX {
            return Err(MetadataError::TooMany(most));
        }
        if let Some(required) = &bind.require
            && !self.names.contains_key(required)
        {
            return Err(MetadataError::NoSuchObject(required.clone()));
        }
        let current = self.names.get(&bind.name);
        let holds = match (bind.condition, current) {
            (BindCondition::Any, _) | (BindCondition::Absent, None) => true,
            (BindCondition::Generation(g), Some(n)) => n.generation == g,
            (BindCondition::Absent, Some(_)) | (BindCondition::Generation(_), None) => false,
        };
        if !holds {
            let (name, condition) = (bind.name, bind.condition);
            return Err(MetadataError::ConditionFailed { name, condition });
        }
        self.check_bindable(&bind)?;
        if self.names.len() >= OBJECTS_MAX && current.is_none() {
            return Err(MetadataError::Full(OBJECTS_MAX));
        }
        let BindRequest { name, data, attrs, taking, .. } = bind;
        let generation = self.next_object;
        let bound = data.clone();
        let command =
            Command::Bind { name: name.clone(), data, attrs, taking, generation, creator };
        self.commit(command);
        if self.broken == Some(crate::cluster::server::Broken::FreeNamed) {
            self.free_named(&bound);
        }
        self.info(&name)
    }

    /// Every data object a bind names is allocated and unbound, or held by its name or
    /// by a name it takes, and named once.
    fn check_bindable(&self, bind: &BindRequest) -> Result<(), MetadataError> {
        let held_by = |name: &String| self.names.get(name).map(|n| n.data.as_slice());
        let owners: Vec<&[_]> =
            std::iter::once(&bind.name).chain(&bind.taking).filter_map(held_by).collect();
        let mut seen = std::collections::BTreeSet::new();
        for object in &bind.data {
            let pending = self.data.get(object).is_some_and(|d| d.pending.is_some());
            let held = owners.iter().any(|data| data.contains(object));
            if !seen.insert(*object) || !(pending || held) {
                return Err(MetadataError::NotBindable(object.0));
            }
        }
        Ok(())
    }

    /// An allocation of `client`'s it will not bind goes at once; anything else (a
    /// bound object, another client's allocation, one gone already) stays.
    fn release(&mut self, object: ObjectId, client: ClientId) {
        let pending = self.data.get(&object).and_then(|d| d.pending);
        if pending.is_some_and(|((owner, _), _)| owner == client) {
            self.commit(Command::ExpirePending { objects: vec![object] });
        }
    }

    fn delete(&mut self, name: &str) -> Result<(), MetadataError> {
        if !self.names.contains_key(name) {
            return Err(MetadataError::NoSuchObject(name.to_owned()));
        }
        self.commit(Command::DeleteObject { name: name.to_owned() });
        Ok(())
    }

    /// Deletes those of `names` that exist; the first deleted (or none).
    fn delete_many(&mut self, names: Vec<String>) -> Result<String, MetadataError> {
        if names.len() > BIND_OBJECTS_MAX {
            return Err(MetadataError::TooMany(names.len()));
        }
        let names: Vec<String> = names.into_iter().filter(|n| self.names.contains_key(n)).collect();
        let first = names.first().cloned().unwrap_or_default();
        if !names.is_empty() {
            self.commit(Command::DeleteObjects { names });
        }
        Ok(first)
    }

    /// What a client needs to reach `name`'s data.
    pub fn info(&self, name: &str) -> Result<ObjectInfo, MetadataError> {
        let entry: &NameEntry =
            self.names.get(name).ok_or_else(|| MetadataError::NoSuchObject(name.to_owned()))?;
        let data: Vec<ObjectRef> = entry.data.iter().map(|o| self.object_ref(*o)).collect();
        let groups = self.groups_of(&entry.data);
        Ok(self.describe(name.to_owned(), data, groups, entry.attrs.clone(), entry.generation))
    }

    /// An allocated data object, described without a name.
    fn data_info(&self, object: ObjectId) -> ObjectInfo {
        let groups = self.groups_of(&[object]);
        self.describe(String::new(), vec![self.object_ref(object)], groups, Vec::new(), 0)
    }

    /// The chunk groups of `objects`, each once, in order.
    fn groups_of(&self, objects: &[ObjectId]) -> Vec<ChunkGroupId> {
        let mut groups: Vec<ChunkGroupId> = objects
            .iter()
            .filter_map(|o| self.data.get(o))
            .flat_map(|d| d.groups.clone())
            .collect();
        if objects.len() > 1 {
            groups.sort_unstable();
            groups.dedup();
        }
        groups
    }

    fn object_ref(&self, object: ObjectId) -> ObjectRef {
        let (size_bytes, chunk_groups) = match self.data.get(&object) {
            Some(entry) => (entry.size_bytes, entry.chunk_groups.clone()),
            None => unreachable!("C5: a name holds {object:?}, which is no data object"),
        };
        ObjectRef { object, size_bytes, chunk_groups }
    }

    fn describe(
        &self,
        name: String,
        data: Vec<ObjectRef>,
        groups: Vec<ChunkGroupId>,
        attrs: Vec<u8>,
        generation: u64,
    ) -> ObjectInfo {
        let views: Vec<GroupView> = groups.into_iter().map(|g| self.view(g)).collect();
        let (object, size_bytes, chunk_groups) = match data.first() {
            Some(first) => (first.object, first.size_bytes, first.chunk_groups.clone()),
            None => (ObjectId(0), 0, Arc::default()),
        };
        ObjectInfo {
            name,
            object,
            size_bytes,
            chunk_size_bytes: self.config.chunk_size_bytes,
            chunk_groups,
            views,
            data,
            attrs,
            generation,
        }
    }

    /// One page of the names starting with `prefix`, after `start_after`.
    fn list(
        &self,
        request: u64,
        prefix: &str,
        start_after: Option<&str>,
        limit: u32,
        attrs: bool,
    ) -> Message {
        use std::ops::Bound;
        let from = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let limit = limit.clamp(1, LIST_PAGE_MAX) as usize;
        let mut names = self
            .names
            .range::<str, _>((from, Bound::Unbounded))
            .take_while(|(name, _)| name.starts_with(prefix));
        let objects: Vec<ListedObject> = names
            .by_ref()
            .take(limit)
            .map(|(name, entry)| ListedObject {
                name: name.clone(),
                size_bytes: entry.data.iter().map(|o| self.data_bytes(*o)).sum(),
                attrs: if attrs { entry.attrs.clone() } else { Vec::new() },
            })
            .collect();
        let truncated = names.next().is_some();
        Message::ObjectsListed { request, objects, truncated }
    }

    fn data_bytes(&self, object: ObjectId) -> u64 {
        self.data.get(&object).map_or(0, |d| d.size_bytes)
    }

    /// Names the MDS holds.
    pub fn object_count(&self) -> usize {
        self.names.len()
    }

    /// Bytes of the data objects names hold (each once).
    pub fn bytes_named(&self) -> u64 {
        self.named_bytes
    }

    /// Whether `object` is a data object a name holds or an allocation is writing.
    pub fn is_live(&self, object: ObjectId) -> bool {
        self.data.contains_key(&object)
    }

    // ---- applying commands -------------------------------------------------------

    pub(super) fn add_data(
        &mut self,
        object: ObjectId,
        size_bytes: u64,
        chunk_groups: Vec<ChunkGroupId>,
        pending: Option<((ClientId, u64), VirtualInstant)>,
    ) {
        assert!(!self.data.contains_key(&object), "C5: data object {object:?} made twice");
        self.next_object = self.next_object.max(object.0 + 1);
        match pending {
            Some((creator, expires)) => {
                self.pending_by_creator.insert(creator, object);
                self.pending_expiry.insert((expires, object));
            }
            None => self.named_bytes += size_bytes,
        }
        let mut groups = chunk_groups.clone();
        groups.sort_unstable();
        groups.dedup();
        let chunk_groups = chunk_groups.into();
        self.data.insert(object, DataEntry { size_bytes, chunk_groups, groups, pending });
    }

    pub(super) fn apply_bind(
        &mut self,
        name: &str,
        data: &[ObjectId],
        attrs: &[u8],
        taking: &[String],
        generation: u64,
        creator: (ClientId, u64),
    ) {
        self.unname(name, data);
        for taken in taking {
            self.unname(taken, data);
        }
        for object in data {
            let Some(entry) = self.data.get_mut(object) else {
                unreachable!("C5: a bind names {object:?}, which is no data object")
            };
            if let Some((creator, expires)) = entry.pending.take() {
                self.pending_by_creator.remove(&creator);
                self.pending_expiry.remove(&(expires, *object));
                self.named_bytes += entry.size_bytes;
            }
        }
        self.next_object = self.next_object.max(generation + 1);
        let entry = NameEntry { creator, generation, data: data.to_vec(), attrs: attrs.to_vec() };
        self.names.insert(name.to_owned(), entry);
    }

    /// The name goes; the data it held is freed, except `kept`.
    pub(super) fn unname(&mut self, name: &str, kept: &[ObjectId]) {
        let Some(entry) = self.names.remove(name) else { return };
        for object in entry.data {
            if !kept.contains(&object) {
                self.free_data(object);
            }
        }
    }

    /// No name holds `object` any more: it leaves the namespace for the free log, to
    /// be freed everywhere a grace from now.
    pub(super) fn free_data(&mut self, object: ObjectId) {
        let Some(entry) = self.data.remove(&object) else { return };
        match entry.pending {
            Some((creator, expires)) => {
                self.pending_by_creator.remove(&creator);
                self.pending_expiry.remove(&(expires, object));
            }
            None => self.named_bytes -= entry.size_bytes,
        }
        let seq = self.frees.next_seq();
        let spec = FreeSpec {
            seq,
            object,
            chunk_groups: entry.chunk_groups.to_vec(),
            size_bytes: entry.size_bytes,
        };
        self.queue_free(spec);
    }
}

impl Mds {
    /// The broken variant `FreeNamed`: the data a bind just named is queued to free
    /// as if it were what the bind replaced.
    fn free_named(&mut self, bound: &[ObjectId]) {
        let next_seq = self.frees.next_seq();
        let frees: Vec<FreeSpec> = (0u64..)
            .zip(bound)
            .map(|(i, object)| FreeSpec {
                seq: next_seq + i,
                object: *object,
                chunk_groups: self.data[object].chunk_groups.to_vec(),
                size_bytes: self.data[object].size_bytes,
            })
            .collect();
        let next_seq = next_seq + frees.len() as u64;
        self.commit(Command::QueueFrees { frees, next_seq });
    }
}

/// Requests answered lately, at most [`Answered::KEPT`] (the oldest forgotten first).
#[derive(Clone, Debug, Default)]
pub(super) struct Answered {
    order: std::collections::VecDeque<(ClientId, u64)>,
    held: std::collections::BTreeSet<(ClientId, u64)>,
}

impl Answered {
    /// Every request held, oldest first (a snapshot's).
    pub(super) fn requests(&self) -> Vec<(ClientId, u64)> {
        self.order.iter().copied().collect()
    }

    /// Far more than a client's requests in flight over a retry's lifetime.
    const KEPT: usize = 1 << 16;

    pub(super) fn holds(&self, client: ClientId, request: u64) -> bool {
        self.held.contains(&(client, request))
    }

    pub(super) fn add(&mut self, client: ClientId, request: u64) {
        if self.held.insert((client, request)) {
            self.order.push_back((client, request));
        }
        while self.order.len() > Answered::KEPT {
            if let Some(old) = self.order.pop_front() {
                self.held.remove(&old);
            }
        }
    }
}

/// The answer that gives a client an object's info.
fn found(request: u64) -> impl Fn(ObjectInfo) -> Message {
    move |info| Message::ObjectFound { request, info: Box::new(info) }
}

fn check_name(name: &str) -> Result<(), MetadataError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(MetadataError::BadName(name.chars().take(64).collect()));
    }
    Ok(())
}
