//! The MDS's namespace: objects by name, each chunk in a chunk group drawn at random
//! (seeded, stateless: a hash of the seed, the object and the chunk), so that every
//! group sees the same mix of load (Sierra 3.1).

use somnus_types::{ChunkGroupId, ObjectId};

use super::{Command, Mds, ObjectEntry, mix};
use crate::cluster::{ClientId, GroupView, ListedObject, Message, MetadataError, ObjectInfo, Peer};

/// The longest object name, in bytes: an S3 key (1,024 bytes) under the S3 gateway's
/// prefix and its bucket (63).
pub const NAME_BYTES_MAX: usize = 1152;
/// The most chunks one object has (64 TiB of 64 MiB chunks).
pub const OBJECT_CHUNKS_MAX: u64 = 1 << 20;
/// The most names one page of a listing holds (S3's `max-keys` limit).
pub(crate) const LIST_PAGE_MAX: u32 = 1000;
/// The most objects the MDS holds.
pub const OBJECTS_MAX: usize = 1 << 26;

impl Mds {
    pub(super) fn handle_client_message(&mut self, client: ClientId, message: Message) {
        let (request, answer) = match message {
            Message::CreateObject { request, name, size_bytes } => (
                request,
                self.create(&name, size_bytes, (client, request))
                    .map(|info| Message::ObjectFound { request, info: Box::new(info) }),
            ),
            Message::LookupObject { request, name } => (
                request,
                self.info(&name).map(|info| Message::ObjectFound { request, info: Box::new(info) }),
            ),
            Message::DeleteObject { request, name } => {
                (request, self.delete(&name).map(|()| Message::ObjectDeleted { request, name }))
            }
            Message::LookupGroup { request, group } if group.index() < self.groups.len() => {
                (request, Ok(Message::GroupFound { request, view: self.view(group) }))
            }
            Message::ListObjects { request, prefix, start_after, limit } => {
                (request, Ok(self.list(request, &prefix, start_after.as_deref(), limit)))
            }
            _ => {
                self.counters.messages_dropped += 1;
                return;
            }
        };
        let message = answer.unwrap_or_else(|error| Message::MetadataRefused { request, error });
        self.send(Peer::Client(client), message);
    }

    fn create(
        &mut self,
        name: &str,
        size_bytes: u64,
        creator: (ClientId, u64),
    ) -> Result<ObjectInfo, MetadataError> {
        check_name(name)?;
        if self.objects.get(name).is_some_and(|o| o.creator == creator) {
            return self.info(name);
        }
        if self.objects.contains_key(name) {
            return Err(MetadataError::AlreadyExists(name.to_owned()));
        }
        if self.objects.len() >= OBJECTS_MAX {
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
        self.commit(Command::CreateObject {
            name: name.to_owned(),
            object,
            size_bytes,
            chunk_groups,
            creator,
        });
        self.info(name)
    }

    fn delete(&mut self, name: &str) -> Result<(), MetadataError> {
        if !self.objects.contains_key(name) {
            return Err(MetadataError::NoSuchObject(name.to_owned()));
        }
        // TODO(issue 11): versioned deletion of the chunks at their primaries, once the
        // storage server is built; until then the name goes and the chunks stay.
        self.commit(Command::DeleteObject { name: name.to_owned() });
        Ok(())
    }

    /// What a client needs to reach `name`'s chunks.
    pub fn info(&self, name: &str) -> Result<ObjectInfo, MetadataError> {
        let entry: &ObjectEntry =
            self.objects.get(name).ok_or_else(|| MetadataError::NoSuchObject(name.to_owned()))?;
        let mut groups: Vec<ChunkGroupId> = entry.chunk_groups.clone();
        groups.sort_unstable();
        groups.dedup();
        let views: Vec<GroupView> = groups.into_iter().map(|g| self.view(g)).collect();
        Ok(ObjectInfo {
            name: name.to_owned(),
            object: entry.object,
            size_bytes: entry.size_bytes,
            chunk_size_bytes: self.config.chunk_size_bytes,
            chunk_groups: entry.chunk_groups.clone(),
            views,
        })
    }

    /// One page of the names starting with `prefix`, after `start_after`.
    fn list(&self, request: u64, prefix: &str, start_after: Option<&str>, limit: u32) -> Message {
        use std::ops::Bound;
        let from = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let limit = limit.clamp(1, LIST_PAGE_MAX) as usize;
        let mut names = self
            .objects
            .range::<str, _>((from, Bound::Unbounded))
            .take_while(|(name, _)| name.starts_with(prefix));
        let objects: Vec<ListedObject> = names
            .by_ref()
            .take(limit)
            .map(|(name, entry)| ListedObject { name: name.clone(), size_bytes: entry.size_bytes })
            .collect();
        let truncated = names.next().is_some();
        Message::ObjectsListed { request, objects, truncated }
    }

    pub fn object_count(&self) -> usize {
        self.objects.len()
    }
}

fn check_name(name: &str) -> Result<(), MetadataError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(MetadataError::BadName(name.chars().take(64).collect()));
    }
    Ok(())
}
