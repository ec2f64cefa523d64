//! S3's buckets and objects over the cluster's client library ([`crate::layout`]):
//! what the gateway does, apart from speaking HTTP.
//!
//! An object is a name at the MDS whose attributes are its record and whose data
//! objects hold its bytes. A PUT allocates a data object, writes the body into it a
//! request (1 MiB) at a time with a few in flight, then binds the key's name to it
//! with its record in one command: a reader sees the old object or the new one whole,
//! and the data the key held before is freed by the cluster a grace later (a GET begun
//! on it reads it whole). A PUT is answered only once the cluster acknowledged every
//! byte and then the bind: the cluster's durability is the object's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use somnus_core::cluster::client::ClientError as CoreError;
use somnus_core::cluster::{BindCondition, MetadataError, ObjectInfo, ObjectRef};
use somnus_runtime::client::{Bind, ClientError, ClusterClient, IN_FLIGHT, REQUEST_BYTES};
use somnus_types::ByteRange;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::layout::{self, BLOCK, padded};
use crate::record::{self, BucketRecord, Headers, ObjectRecord, RecordError};

/// Names read per page of a listing.
const LISTING_PAGE: u32 = 1000;
/// Requests a GET reads ahead of its client.
const READ_AHEAD: usize = 4;
/// Times an operation starts again when a concurrent one changed what it read.
const RACE_RETRIES: usize = 4;
/// How long the gateway trusts that a bucket it saw exists, before a PUT's data is
/// written (the bind that names the object checks it again, at the MDS).
const BUCKET_SEEN_FOR: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no bucket {0:?}")]
    NoSuchBucket(String),
    #[error("no key {key:?} in bucket {bucket:?}")]
    NoSuchKey { bucket: String, key: String },
    #[error("bucket {0:?} exists already")]
    BucketExists(String),
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    #[error("the body's MD5 is not the Content-MD5 sent")]
    BadDigest,
    #[error("the body was {got} bytes, not the {expected} its length said")]
    IncompleteBody { expected: u64, got: u64 },
    #[error("reading the request's body: {0}")]
    Body(String),
    #[error("a chunk of the request's aws-chunked body is not signed as its seed says")]
    ChunkSignature,
    #[error("no upload {0:?}")]
    NoSuchUpload(String),
    #[error("upload {0:?} is being finished by another completion or an abort")]
    UploadFinishing(String),
    #[error("a completion lists one part at least")]
    NoPartsListed,
    #[error("a completion lists {0} parts: an upload has 10,000 at most")]
    TooManyPartsListed(usize),
    #[error("{0}")]
    InvalidPart(String),
    #[error("parts must be listed in ascending order of their numbers")]
    InvalidPartOrder,
    #[error("part {part} is {size} bytes: every part but the last must be 5 MiB or more")]
    EntityTooSmall { part: u32, size: u64 },
    #[error("{0}")]
    PreconditionFailed(&'static str),
    #[error("a key of {0} bytes: S3 allows 1,024")]
    KeyTooLong(usize),
    #[error("user metadata of {0} bytes: S3 allows 2 KiB")]
    MetadataTooLarge(usize),
    #[error("object {name:?}: {error}")]
    Record { name: String, error: RecordError },
    #[error(transparent)]
    Cluster(#[from] ClientError),
    #[error("no randomness for an identifier: {0}")]
    Entropy(String),
}

type Result<T> = std::result::Result<T, StoreError>;

/// The object a conditional write's header names: any, or the one with this ETag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtagMatch {
    Any,
    Etag(String),
}

impl EtagMatch {
    fn matches(&self, record: &ObjectRecord) -> bool {
        match self {
            EtagMatch::Any => true,
            EtagMatch::Etag(etag) => *etag == record.etag,
        }
    }
}

/// A conditional write's `If-Match` and `If-None-Match`, on the key's object when it
/// is written (a PUT's, or a multipart completion's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteConditions {
    pub if_match: Option<EtagMatch>,
    pub if_none_match: Option<EtagMatch>,
}

impl WriteConditions {
    /// Whether a write may replace `existing` (`None`: no object): `If-None-Match`
    /// matching it, or `If-Match` not matching, is `PreconditionFailed`; `If-Match` on
    /// no object is `NoSuchKey`, as S3 answers.
    fn check(&self, bucket: &str, key: &str, existing: Option<&ObjectRecord>) -> Result<()> {
        if let (Some(condition), Some(existing)) = (&self.if_none_match, existing)
            && condition.matches(existing)
        {
            return Err(StoreError::PreconditionFailed("If-None-Match: the object exists"));
        }
        match (&self.if_match, existing) {
            (None, _) => Ok(()),
            (Some(_), None) => {
                Err(StoreError::NoSuchKey { bucket: bucket.to_owned(), key: key.to_owned() })
            }
            (Some(condition), Some(existing)) if !condition.matches(existing) => {
                Err(StoreError::PreconditionFailed("If-Match: the ETag differs"))
            }
            (Some(_), Some(_)) => Ok(()),
        }
    }
}

/// Whether the cluster answered that the object does not exist.
pub(crate) fn is_missing(error: &ClientError) -> bool {
    matches!(error, ClientError::Refused(CoreError::Metadata(MetadataError::NoSuchObject(_))))
}

/// Whether a bind was refused because its condition did not hold.
fn is_condition_failed(error: &ClientError) -> bool {
    let failed = |e: &MetadataError| matches!(e, MetadataError::ConditionFailed { .. });
    matches!(error, ClientError::Refused(CoreError::Metadata(e)) if failed(e))
}

/// The wall clock, for S3's Last-Modified: the gateway is a shell, and S3's times are
/// the real time of day.
#[allow(clippy::disallowed_methods, reason = "S3's timestamps are wall-clock times")]
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Where a stored object's bytes are: data objects, each holding `size` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) data: ObjectRef,
    pub(crate) size: u64,
}

/// An object as stored: its record, its bytes' data objects, its generation (what a
/// conditional bind names).
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub(crate) record: ObjectRecord,
    pub(crate) extents: Vec<Extent>,
    pub(crate) generation: u64,
}

impl Stored {
    /// The object a name's info describes (its attributes its record).
    fn of(info: ObjectInfo) -> std::result::Result<Stored, RecordError> {
        let record: ObjectRecord = record::from_attrs(&info.attrs)?;
        let sizes = record.sizes(info.data.len());
        let extents = info.data.into_iter().zip(sizes).map(|(data, size)| Extent { data, size });
        Ok(Stored { record, extents: extents.collect(), generation: info.generation })
    }
}

/// The gateway's view of the cluster.
#[derive(Clone)]
pub struct Store {
    client: ClusterClient,
    /// Buckets seen lately, and when.
    buckets_seen: Arc<Mutex<BTreeMap<String, Instant>>>,
}

impl Store {
    pub fn new(client: ClusterClient) -> Store {
        Store { client, buckets_seen: Arc::default() }
    }

    pub(crate) fn client(&self) -> &ClusterClient {
        &self.client
    }

    // ---- names ---------------------------------------------------------------------

    /// The name's info, or `None` if there is no such name.
    pub(crate) async fn stat(&self, name: &str) -> Result<Option<ObjectInfo>> {
        match self.client.stat(name).await {
            Ok(info) => Ok(Some(info)),
            Err(error) if is_missing(&error) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// The record `name`'s attributes hold, with the name's info.
    pub(crate) async fn record<T: for<'a> serde::Deserialize<'a>>(
        &self,
        name: &str,
    ) -> Result<Option<(T, ObjectInfo)>> {
        let Some(info) = self.stat(name).await? else { return Ok(None) };
        let record = record::from_attrs(&info.attrs)
            .map_err(|error| StoreError::Record { name: name.to_owned(), error })?;
        Ok(Some((record, info)))
    }

    /// The object `name` holds.
    pub(crate) async fn stored(&self, name: &str) -> Result<Option<Stored>> {
        let Some(info) = self.stat(name).await? else { return Ok(None) };
        Stored::of(info)
            .map(Some)
            .map_err(|error| StoreError::Record { name: name.to_owned(), error })
    }

    /// Binds `bind` (its `require`, if any, a bucket's marker or an upload's record:
    /// `missing` is the error of its absence); a condition that does not hold is
    /// `PreconditionFailed`.
    pub(crate) async fn bind(
        &self,
        bind: Bind,
        missing: impl FnOnce() -> StoreError,
    ) -> Result<ObjectInfo> {
        let required = bind.require.clone();
        match self.client.bind(bind).await {
            Ok(info) => Ok(info),
            Err(error) if is_condition_failed(&error) => {
                Err(StoreError::PreconditionFailed("the object changed or exists"))
            }
            Err(ClientError::Refused(CoreError::Metadata(MetadataError::NoSuchObject(name))))
                if Some(&name) == required.as_ref() =>
            {
                Err(missing())
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes `name`; an object already gone is no error.
    pub(crate) async fn remove(&self, name: &str) -> Result<()> {
        match self.client.delete(name).await {
            Ok(()) => Ok(()),
            Err(error) if is_missing(&error) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Every name under `prefix`, with its attributes, a page at a time.
    pub(crate) async fn list_all(
        &self,
        prefix: &str,
    ) -> Result<Vec<somnus_core::cluster::ListedObject>> {
        let mut all: Vec<somnus_core::cluster::ListedObject> = Vec::new();
        loop {
            let after = all.last().map(|o| o.name.clone());
            let (page, more) =
                self.client.list_page_with(prefix, after.as_deref(), LISTING_PAGE, true).await?;
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    // ---- buckets -------------------------------------------------------------------

    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let bind = Bind {
            name: layout::bucket_marker(bucket),
            attrs: record::to_attrs(&BucketRecord { created_ms: now_ms() }),
            condition: BindCondition::Absent,
            ..Bind::default()
        };
        match self.bind(bind, || StoreError::NoSuchBucket(bucket.to_owned())).await {
            Ok(_) => {
                self.seen(bucket);
                Ok(())
            }
            Err(StoreError::PreconditionFailed(_)) => {
                Err(StoreError::BucketExists(bucket.to_owned()))
            }
            Err(error) => Err(error),
        }
    }

    /// The bucket's record, or `NoSuchBucket`.
    pub async fn bucket(&self, bucket: &str) -> Result<BucketRecord> {
        match self.record::<BucketRecord>(&layout::bucket_marker(bucket)).await? {
            Some((record, _)) => {
                self.seen(bucket);
                Ok(record)
            }
            None => Err(StoreError::NoSuchBucket(bucket.to_owned())),
        }
    }

    /// `NoSuchBucket` unless the bucket exists (seen within a few seconds, or asked).
    async fn check_bucket(&self, bucket: &str) -> Result<()> {
        let seen =
            self.buckets_seen.lock().unwrap_or_else(PoisonError::into_inner).get(bucket).copied();
        if seen.is_some_and(|at| at.elapsed() < BUCKET_SEEN_FOR) {
            return Ok(());
        }
        self.bucket(bucket).await.map(drop)
    }

    fn seen(&self, bucket: &str) {
        let mut seen = self.buckets_seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= 4096 {
            seen.clear();
        }
        seen.insert(bucket.to_owned(), Instant::now());
    }

    pub async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        self.bucket(bucket).await?;
        for prefix in [layout::key_prefix(bucket), layout::upload_prefix(bucket)] {
            let (page, _) = self.client.list_page(&prefix, None, 1).await?;
            if !page.is_empty() {
                return Err(StoreError::BucketNotEmpty(bucket.to_owned()));
            }
        }
        self.buckets_seen.lock().unwrap_or_else(PoisonError::into_inner).remove(bucket);
        self.remove(&layout::bucket_marker(bucket)).await
    }

    /// Every bucket, in name order, with its record.
    pub async fn buckets(&self) -> Result<Vec<(String, BucketRecord)>> {
        let markers = self.list_all(layout::BUCKET_MARKERS).await?;
        let mut buckets = Vec::with_capacity(markers.len());
        for marker in markers {
            let Some(bucket) = marker.name.strip_prefix(layout::BUCKET_MARKERS) else { continue };
            let record = record::from_attrs(&marker.attrs)
                .map_err(|error| StoreError::Record { name: marker.name.clone(), error })?;
            buckets.push((bucket.to_owned(), record));
        }
        Ok(buckets)
    }

    // ---- objects -------------------------------------------------------------------

    /// The object stored under the key, or `NoSuchKey` (`NoSuchBucket` if the bucket
    /// is missing).
    pub(crate) async fn head_stored(&self, bucket: &str, key: &str) -> Result<Stored> {
        match self.stored(&layout::key_record(bucket, key)).await? {
            Some(stored) => Ok(stored),
            None => {
                self.bucket(bucket).await?;
                Err(StoreError::NoSuchKey { bucket: bucket.to_owned(), key: key.to_owned() })
            }
        }
    }

    /// The object's record, or `NoSuchKey` (`NoSuchBucket` if the bucket is missing).
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectRecord> {
        self.head_stored(bucket, key).await.map(|stored| stored.record)
    }

    /// Checks `conditions` on the key's object now, and the bind condition that makes
    /// the write's bind fail if the object changes before it (so two conditional
    /// writes cannot both pass).
    pub async fn check_write(
        &self,
        bucket: &str,
        key: &str,
        conditions: &WriteConditions,
    ) -> Result<BindCondition> {
        if *conditions == WriteConditions::default() {
            return Ok(BindCondition::Any);
        }
        let existing = match self.head_stored(bucket, key).await {
            Ok(stored) => Some(stored),
            Err(StoreError::NoSuchKey { .. }) => None,
            Err(error) => return Err(error),
        };
        conditions.check(bucket, key, existing.as_ref().map(|s| &s.record))?;
        Ok(match existing {
            Some(stored) => BindCondition::Generation(stored.generation),
            None => BindCondition::Absent,
        })
    }

    /// Stores the `length` bytes of `body` in a new data object; the data object
    /// (none when empty) and the body's MD5. Nothing of it remains if it fails.
    pub(crate) async fn put_data<S, E>(
        &self,
        length: u64,
        body: S,
    ) -> Result<(Option<ObjectRef>, [u8; 16])>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if length == 0 {
            // An empty object has no data object; its body must be empty too.
            let got = drain(body).await?;
            if got != 0 {
                return Err(StoreError::IncompleteBody { expected: 0, got });
            }
            return Ok((None, Md5::digest([]).into()));
        }
        let data = self.client.allocate(padded(length)).await?;
        match self.send_body(&data, length, body).await {
            Ok(md5) => Ok((Some(data), md5)),
            Err(error) => {
                self.release(Some(&data)).await;
                Err(error)
            }
        }
    }

    /// Gives back an allocation that will not be bound (its space freed now, not at
    /// the pending grace); a failure to is the grace's to mend.
    pub(crate) async fn release(&self, data: Option<&ObjectRef>) {
        if let Some(data) = data {
            let _ = self.client.release(data.object).await;
        }
    }

    /// Writes the body to `data` a request at a time, `IN_FLIGHT` in flight; its MD5.
    async fn send_body<S, E>(&self, data: &ObjectRef, length: u64, mut body: S) -> Result<[u8; 16]>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut md5 = Md5::new();
        let mut writing: std::collections::VecDeque<
            JoinHandle<std::result::Result<(), ClientError>>,
        > = std::collections::VecDeque::new();
        let mut piece = BytesMut::with_capacity(REQUEST_BYTES.min(padded(length)) as usize);
        let (mut offset, mut got) = (0u64, 0u64);
        let mut outcome = Ok(());
        while outcome.is_ok() {
            let next = body.next().await;
            let end = next.is_none();
            match next {
                Some(Ok(mut bytes)) => {
                    got += bytes.len() as u64;
                    if got > length {
                        outcome = Err(StoreError::IncompleteBody { expected: length, got });
                        break;
                    }
                    md5.update(&bytes);
                    while !bytes.is_empty() {
                        let take = bytes.len().min(REQUEST_BYTES as usize - piece.len());
                        piece.extend_from_slice(&bytes.split_to(take));
                        if piece.len() as u64 == REQUEST_BYTES {
                            let full = std::mem::replace(
                                &mut piece,
                                BytesMut::with_capacity(REQUEST_BYTES as usize),
                            );
                            outcome = self.send_piece(data, offset, full, &mut writing).await;
                            offset += REQUEST_BYTES;
                        }
                    }
                }
                Some(Err(error)) => outcome = Err(body_error(&error)),
                None => {}
            }
            if end {
                break;
            }
        }
        if outcome.is_ok() && got != length {
            outcome = Err(StoreError::IncompleteBody { expected: length, got });
        }
        if outcome.is_ok() && !piece.is_empty() {
            piece.resize(padded(piece.len() as u64) as usize, 0);
            outcome = self.send_piece(data, offset, piece, &mut writing).await;
        }
        // Every write waited for, also after an error: none is left in flight.
        while let Some(write) = writing.pop_front() {
            let result = finished(write).await;
            if outcome.is_ok() {
                outcome = result;
            }
        }
        outcome.map(|()| md5.finalize().into())
    }

    async fn send_piece(
        &self,
        data: &ObjectRef,
        offset: u64,
        piece: BytesMut,
        writing: &mut std::collections::VecDeque<JoinHandle<std::result::Result<(), ClientError>>>,
    ) -> Result<()> {
        if writing.len() >= IN_FLIGHT
            && let Some(oldest) = writing.pop_front()
        {
            finished(oldest).await?;
        }
        let (client, data, piece) = (self.client.clone(), data.clone(), piece.freeze());
        writing.push_back(tokio::spawn(async move { client.write_to(&data, offset, piece).await }));
        Ok(())
    }

    /// Stores a body (an object's or a part's) in a new data object; its record, not
    /// yet bound. `content_md5`, if sent, must be the body's: else nothing of it
    /// remains.
    pub(crate) async fn store_body(
        &self,
        length: u64,
        body: impl Stream<Item = std::result::Result<Bytes, impl std::fmt::Display>> + Unpin,
        content_md5: Option<[u8; 16]>,
        headers: Headers,
    ) -> Result<(ObjectRecord, Option<ObjectRef>)> {
        let (data, md5) = self.put_data(length, body).await?;
        if content_md5.is_some_and(|sent| sent != md5) {
            self.release(data.as_ref()).await;
            return Err(StoreError::BadDigest);
        }
        let record = ObjectRecord {
            size: length,
            etag: hex(&md5),
            modified_ms: now_ms(),
            headers,
            ..ObjectRecord::default()
        };
        Ok((record, data))
    }

    /// Stores an object: its bytes, then its record bound with them to the key, if
    /// the bucket exists and `conditions` hold then. `content_md5`, if sent, must be
    /// the body's.
    #[allow(clippy::too_many_arguments)]
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        length: u64,
        body: impl Stream<Item = std::result::Result<Bytes, impl std::fmt::Display>> + Unpin,
        headers: Headers,
        content_md5: Option<[u8; 16]>,
        conditions: &WriteConditions,
    ) -> Result<ObjectRecord> {
        let checked = async {
            check_key(key)?;
            if headers.metadata_bytes() > 2048 {
                return Err(StoreError::MetadataTooLarge(headers.metadata_bytes()));
            }
            self.check_bucket(bucket).await?;
            self.check_write(bucket, key, conditions).await
        };
        let (condition, body) = match checked.await {
            Ok(condition) => (condition, body),
            Err(refusal) => {
                let mut body = body;
                discard_body(&mut body).await;
                return Err(refusal);
            }
        };
        let (record, data) = self.store_body(length, body, content_md5, headers).await?;
        match self.commit(bucket, key, &record, data.iter().cloned().collect(), condition).await {
            Ok(()) => Ok(record),
            Err(error) => {
                self.release(data.as_ref()).await;
                Err(error)
            }
        }
    }

    /// Makes `record` with `data` the object `key` of `bucket` (if the bucket exists
    /// and `condition` holds): the data it held before is freed a grace later.
    pub(crate) async fn commit(
        &self,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        data: Vec<ObjectRef>,
        condition: BindCondition,
    ) -> Result<()> {
        let bind = Bind {
            name: layout::key_record(bucket, key),
            data: data.iter().map(|d| d.object).collect(),
            attrs: record::to_attrs(record),
            require: Some(layout::bucket_marker(bucket)),
            condition,
            ..Bind::default()
        };
        self.bind(bind, || StoreError::NoSuchBucket(bucket.to_owned())).await.map(drop)
    }

    /// Deletes an object; a key that does not exist is no error (as S3). Its data is
    /// freed a grace later, so that a GET begun on it reads it whole.
    pub async fn delete(&self, bucket: &str, key: &str) -> Result<()> {
        match self.client.delete(&layout::key_record(bucket, key)).await {
            Ok(()) => Ok(()),
            Err(error) if is_missing(&error) => self.bucket(bucket).await.map(drop),
            Err(error) => Err(error.into()),
        }
    }

    /// The bytes `range` of the object (`start..end`, within its size) as a stream,
    /// read a request at a time, a few ahead; with the record they were read by. A
    /// read that finds the data replaced and freed since (a GET that started long
    /// before) starts again from the new record.
    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
        mut range: impl FnMut(&ObjectRecord) -> std::result::Result<(u64, u64), StoreError>,
    ) -> Result<(ObjectRecord, (u64, u64), ByteStream)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let stored = self.head_stored(bucket, key).await?;
            let (start, end) = range(&stored.record)?;
            let mut pieces = pieces(&stored.extents, start, end).into_iter();
            let first = match pieces.next() {
                None => Bytes::new(),
                Some(piece) => match read_piece(self.client.clone(), piece).await {
                    Ok(bytes) => bytes,
                    Err(error) if is_missing(&error) && attempt < RACE_RETRIES => continue,
                    Err(error) => return Err(error.into()),
                },
            };
            // The rest is read by a task of its own, a few requests ahead of the
            // client, and handed over through a small channel: memory stays bounded
            // and the task ends when the client goes away.
            let (sender, receiver) = tokio::sync::mpsc::channel(2);
            let client = self.client.clone();
            let pieces: Vec<Piece> = pieces.collect();
            tokio::spawn(async move {
                if sender.send(Ok(first)).await.is_err() {
                    return;
                }
                let mut rest = futures::stream::iter(pieces)
                    .map(move |piece| read_piece(client.clone(), piece))
                    .buffered(READ_AHEAD);
                while let Some(bytes) = rest.next().await {
                    let failed = bytes.is_err();
                    if sender.send(bytes).await.is_err() || failed {
                        return;
                    }
                }
            });
            return Ok((stored.record, (start, end), ByteStream { receiver }));
        }
    }

    /// Keys of `bucket` starting with `prefix`, after `after`, in S3's order, with
    /// `delimiter` folding keys into common prefixes; at most `max` entries (keys and
    /// prefixes), and whether more follow. Each key's record comes with its name.
    pub async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> Result<Listing> {
        self.bucket(bucket).await?;
        let base = layout::key_prefix(bucket);
        let full_prefix = format!("{base}{prefix}");
        let mut from = after.map(|a| format!("{base}{a}"));
        let mut listing = Listing::default();
        'pages: loop {
            let want =
                (max - listing.common_prefixes.len() - listing.keys.len()).clamp(1, 1000) as u32;
            let (page, more) =
                self.client.list_page_with(&full_prefix, from.as_deref(), want, true).await?;
            if page.is_empty() {
                break;
            }
            for object in &page {
                let Some(key) = object.name.strip_prefix(&base) else { continue };
                from = Some(object.name.clone());
                let folded = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
                    key[prefix.len()..]
                        .find(d)
                        .map(|at| key[..prefix.len() + at + d.len()].to_owned())
                });
                // A common prefix at or before where the listing starts was given by
                // an earlier page (a marker may be one, as V1's NextMarker is), or by
                // this one: its keys are skipped, as S3 does.
                if let Some(common) = &folded
                    && (after.is_some_and(|a| common.as_str() <= a)
                        || listing.common_prefixes.last() == Some(common))
                {
                    if skip_past(&mut from, &base, common, &object.name) {
                        continue 'pages;
                    }
                    continue;
                }
                if listing.common_prefixes.len() + listing.keys.len() == max {
                    listing.truncated = true;
                    break 'pages;
                }
                match folded {
                    Some(common) => {
                        let jump = skip_past(&mut from, &base, &common, &object.name);
                        listing.common_prefixes.push(common);
                        if jump {
                            continue 'pages;
                        }
                    }
                    None => {
                        let record = record::from_attrs(&object.attrs).map_err(|error| {
                            StoreError::Record { name: object.name.clone(), error }
                        })?;
                        listing.keys.push((key.to_owned(), record));
                    }
                }
            }
            if !more {
                break;
            }
        }
        let keys: Vec<String> = listing.keys.iter().map(|(k, _)| k.clone()).collect();
        listing.next_after =
            listing.truncated.then(|| listing_last(&keys, &listing.common_prefixes)).flatten();
        Ok(listing)
    }
}

/// The longest key (S3's limit, in UTF-8 bytes).
pub const KEY_BYTES_MAX: usize = 1024;

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(StoreError::KeyTooLong(key.len()));
    }
    Ok(())
}

/// Moves a listing past the keys under `common` (a common prefix): to after the
/// greatest name they could have (`true`: list again from there), unless `current`
/// (a key under it holding U+10FFFF) is there already (`false`: read on).
fn skip_past(from: &mut Option<String>, base: &str, common: &str, current: &str) -> bool {
    let jump = format!("{base}{common}{}", char::MAX);
    if current >= jump.as_str() {
        return false;
    }
    *from = Some(jump);
    true
}

/// The last entry of a listing page in S3's order: where the next page starts.
fn listing_last(keys: &[String], prefixes: &[String]) -> Option<String> {
    let key = keys.last();
    let prefix = prefixes.last().map(|p| format!("{p}{}", char::MAX));
    match (key, prefix) {
        (Some(k), Some(p)) => Some(if *k > p { k.clone() } else { p }),
        (Some(k), None) => Some(k.clone()),
        (None, p) => p,
    }
}

/// A page of keys.
#[derive(Debug, Default)]
pub struct Listing {
    pub(crate) keys: Vec<(String, ObjectRecord)>,
    pub(crate) common_prefixes: Vec<String>,
    pub(crate) truncated: bool,
    /// Where the next page starts (after this), if truncated.
    pub(crate) next_after: Option<String>,
}

/// An object's bytes as a GET sends them.
pub struct ByteStream {
    receiver: tokio::sync::mpsc::Receiver<std::result::Result<Bytes, ClientError>>,
}

impl Stream for ByteStream {
    type Item = std::result::Result<Bytes, ClientError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.receiver.poll_recv(cx)
    }
}

/// One read of a GET: a request's aligned range of a data object, and the part of it
/// the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    data: ObjectRef,
    aligned: ByteRange,
    keep: std::ops::Range<usize>,
}

/// The reads that give bytes `start..end` of an object made of `extents`.
pub(crate) fn pieces(extents: &[Extent], start: u64, end: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut base = 0u64;
    for extent in extents {
        let (from, to) = (start.max(base), end.min(base + extent.size));
        let mut at = from.saturating_sub(base);
        let stop = to.saturating_sub(base);
        while from < to && at < stop {
            let piece_end = stop.min((at / REQUEST_BYTES + 1) * REQUEST_BYTES);
            let aligned = ByteRange::from_bounds(at / BLOCK * BLOCK, padded(piece_end));
            let skip = (at - aligned.start) as usize;
            out.push(Piece {
                data: extent.data.clone(),
                aligned,
                keep: skip..skip + (piece_end - at) as usize,
            });
            at = piece_end;
        }
        base += extent.size;
    }
    out
}

async fn read_piece(
    client: ClusterClient,
    piece: Piece,
) -> std::result::Result<Bytes, ClientError> {
    let bytes = client.read_from(&piece.data, piece.aligned).await?;
    Ok(bytes.slice(piece.keep))
}

async fn finished(
    write: JoinHandle<std::result::Result<(), ClientError>>,
) -> std::result::Result<(), StoreError> {
    match write.await {
        Ok(result) => Ok(result?),
        Err(_) => Err(StoreError::Cluster(ClientError::Stopped)),
    }
}

/// Bytes of a refused request's body read and thrown away before the answer.
const DISCARD_BYTES_MAX: u64 = 16 << 20;

/// `body` back if `checked` passed; else the refusal, once the body (up to 16 MiB)
/// was read: an HTTP/1.1 client still sending it would otherwise meet a closed
/// connection instead of the S3 error.
pub(crate) async fn refuse_after_body<S, E, R>(
    checked: std::result::Result<(), R>,
    mut body: S,
) -> std::result::Result<S, R>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
{
    let Err(refusal) = checked else { return Ok(body) };
    discard_body(&mut body).await;
    Err(refusal)
}

/// Reads a refused request's body (up to 16 MiB) and throws it away.
pub(crate) async fn discard_body<S, E>(body: &mut S)
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
{
    let mut discarded = 0u64;
    while discarded < DISCARD_BYTES_MAX {
        match body.next().await {
            Some(Ok(bytes)) => discarded += bytes.len() as u64,
            Some(Err(_)) | None => break,
        }
    }
}

/// Reads a body to its end; its length.
async fn drain<S, E>(mut body: S) -> Result<u64>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut got = 0;
    while let Some(bytes) = body.next().await {
        got += bytes.map_err(|e| body_error(&e))?.len() as u64;
    }
    Ok(got)
}

/// What an error of a request's body means. s3s's aws-chunked decoder reports a chunk
/// whose signature does not match only by its message (its error type is private);
/// the client suite's tampered-chunk check notices if that message changes.
fn body_error(error: &impl std::fmt::Display) -> StoreError {
    let message = error.to_string();
    if message.contains("SignatureMismatch") {
        StoreError::ChunkSignature
    } else {
        StoreError::Body(message)
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use somnus_types::{ChunkGroupId, ObjectId};

    use super::*;

    #[test]
    fn write_conditions_are_s3s() {
        let record = |etag: &str| ObjectRecord { etag: etag.to_owned(), ..Default::default() };
        let (any, a) = (Some(EtagMatch::Any), Some(EtagMatch::Etag("a".into())));
        let when = |if_match: &Option<EtagMatch>, if_none_match: &Option<EtagMatch>| {
            WriteConditions { if_match: if_match.clone(), if_none_match: if_none_match.clone() }
        };
        let check = |c: WriteConditions, existing: Option<&ObjectRecord>| match c
            .check("b", "k", existing)
        {
            Ok(()) => "ok",
            Err(StoreError::PreconditionFailed(_)) => "412",
            Err(StoreError::NoSuchKey { .. }) => "404",
            Err(other) => panic!("{other}"),
        };
        let (ra, rb) = (record("a"), record("b"));
        assert_eq!(check(when(&None, &None), None), "ok");
        assert_eq!(check(when(&None, &any), None), "ok");
        assert_eq!(check(when(&None, &any), Some(&ra)), "412");
        assert_eq!(check(when(&None, &a), Some(&rb)), "ok");
        assert_eq!(check(when(&None, &a), Some(&ra)), "412");
        assert_eq!(check(when(&any, &None), None), "404");
        assert_eq!(check(when(&a, &None), None), "404");
        assert_eq!(check(when(&a, &None), Some(&ra)), "ok");
        assert_eq!(check(when(&a, &None), Some(&rb)), "412");
        assert_eq!(check(when(&any, &None), Some(&rb)), "ok");
    }

    fn extent(object: u64, size: u64) -> Extent {
        let chunks = size.div_ceil(1 << 20) as usize;
        let data = ObjectRef {
            object: ObjectId(object),
            size_bytes: padded(size),
            chunk_groups: vec![ChunkGroupId(0); chunks].into(),
        };
        Extent { data, size }
    }

    /// The bytes the pieces give, as (object, offset in object) per byte.
    fn bytes_of(pieces: &[Piece]) -> Vec<(u64, u64)> {
        pieces
            .iter()
            .flat_map(|p| p.keep.clone().map(|i| (p.data.object.0, p.aligned.start + i as u64)))
            .collect()
    }

    #[test]
    fn pieces_cover_a_range_across_requests_and_extents() {
        let mb = REQUEST_BYTES;
        let extents = [extent(1, 2 * mb + 10), extent(2, 5)];
        for (start, end) in [(0, 2 * mb + 15), (1, 2), (mb - 3, mb + 3), (2 * mb + 8, 2 * mb + 12)]
        {
            let pieces = pieces(&extents, start, end);
            let want: Vec<(u64, u64)> = (start..end)
                .map(|at| if at < 2 * mb + 10 { (1, at) } else { (2, at - (2 * mb + 10)) })
                .collect();
            assert_eq!(bytes_of(&pieces), want, "{start}..{end}");
            for piece in &pieces {
                assert_eq!(piece.aligned.start % BLOCK, 0);
                assert_eq!(piece.aligned.end % BLOCK, 0);
                assert!(piece.aligned.size_bytes() <= REQUEST_BYTES);
                assert_eq!(
                    piece.aligned.start / REQUEST_BYTES,
                    (piece.aligned.end - 1) / REQUEST_BYTES
                );
            }
        }
        assert!(pieces(&extents, 7, 7).is_empty());
    }

    #[test]
    fn the_next_page_starts_after_the_greatest_entry() {
        let keys = ["a".to_string(), "c".to_string()];
        let prefixes = ["b/".to_string()];
        assert_eq!(listing_last(&keys, &prefixes).as_deref(), Some("c"));
        assert_eq!(listing_last(&keys[..1], &prefixes), Some(format!("b/{}", char::MAX)));
        assert_eq!(listing_last(&[], &[]), None);
    }

    /// A record's sizes name each data object's bytes: one object of the record's
    /// size, or a multipart object's parts.
    #[test]
    fn a_records_sizes_follow_its_data_objects() {
        let single = ObjectRecord { size: 7, ..Default::default() };
        assert_eq!(single.sizes(1), vec![7]);
        assert_eq!(ObjectRecord::default().sizes(0), Vec::<u64>::new());
        let parts = ObjectRecord { size: 12, parts: vec![5, 7], ..Default::default() };
        assert_eq!(parts.sizes(2), vec![5, 7]);
        let json = String::from_utf8(record::to_attrs(&single)).unwrap();
        assert!(!json.contains("parts") && !json.contains("extents"), "{json}");
    }
}
