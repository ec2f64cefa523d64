//! S3's buckets and objects over the cluster's client library ([`crate::layout`]):
//! what the gateway does, apart from speaking HTTP.
//!
//! Bytes go in and out a request (1 MiB) at a time with a few in flight, so a 5 GiB
//! object is stored and read in bounded memory. A PUT is answered only once the
//! cluster acknowledged every byte and then the record: the cluster's durability is
//! the object's.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use somnus_core::cluster::MetadataError;
use somnus_core::cluster::client::ClientError as CoreError;
use somnus_runtime::client::{ClientError, ClusterClient, IN_FLIGHT, REQUEST_BYTES};
use somnus_types::ByteRange;
use tokio::task::JoinHandle;

use crate::layout::{self, BLOCK, padded};
use crate::record::{
    self, BucketRecord, Extent, Headers, ObjectRecord, RECORD_BYTES, RECORD_MAX, RecordError,
    RetiredRecord,
};

/// Records read at once by a listing.
const LISTING_READS: usize = 16;
/// Requests a GET reads ahead of its client.
const READ_AHEAD: usize = 4;
/// Times an operation starts again when a concurrent one changed what it read.
const RACE_RETRIES: usize = 4;
/// How long data no record names any more is kept for the reads begun on it.
pub const RETIRE_GRACE_MS: i64 = 15 * 60 * 1000;

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

pub(crate) fn is_existing(error: &ClientError) -> bool {
    matches!(error, ClientError::Refused(CoreError::Metadata(MetadataError::AlreadyExists(_))))
}

/// The wall clock, for S3's Last-Modified: the gateway is a shell, and S3's times are
/// the real time of day.
#[allow(clippy::disallowed_methods, reason = "S3's timestamps are wall-clock times")]
pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The gateway's view of the cluster.
#[derive(Clone)]
pub struct Store {
    client: ClusterClient,
}

impl Store {
    pub fn new(client: ClusterClient) -> Store {
        Store { client }
    }

    pub(crate) fn client(&self) -> &ClusterClient {
        &self.client
    }

    // ---- records -------------------------------------------------------------------

    /// The record `name` holds; `None` if there is no such object, or it was created
    /// and its record not written yet (a PUT under way).
    pub(crate) async fn read_record<T: for<'a> serde::Deserialize<'a>>(
        &self,
        name: &str,
    ) -> Result<Option<T>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.read_record_once(name).await {
                // A record longer than its first read, rewritten between that read and
                // the next, reads torn: read it again.
                Err(StoreError::Record {
                    error: RecordError::Checksum | RecordError::Truncated(_),
                    ..
                }) if attempt < RACE_RETRIES => continue,
                outcome => return outcome,
            }
        }
    }

    async fn read_record_once<T: for<'a> serde::Deserialize<'a>>(
        &self,
        name: &str,
    ) -> Result<Option<T>> {
        let head = match self.client.read(name, ByteRange::new(0, RECORD_BYTES)).await {
            Ok(head) => head,
            Err(error) if is_missing(&error) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        let whole = match record::needs(&head) {
            None => head,
            Some(length) => match self.client.read(name, ByteRange::new(0, length)).await {
                Ok(whole) => whole,
                Err(error) if is_missing(&error) => return Ok(None),
                Err(error) => return Err(error.into()),
            },
        };
        match record::decode(&whole) {
            Ok(record) => Ok(Some(record)),
            Err(RecordError::NoMagic) if whole.iter().all(|&b| b == 0) => Ok(None),
            Err(error) => Err(StoreError::Record { name: name.to_owned(), error }),
        }
    }

    pub(crate) async fn write_record<T: serde::Serialize>(
        &self,
        name: &str,
        record: &T,
    ) -> Result<()> {
        let bytes = record::encode(record).map_err(|e| StoreError::Record {
            name: name.to_owned(),
            error: RecordError::Parse(e),
        })?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.client.create(name, RECORD_MAX).await {
                Ok(_) => {}
                Err(error) if is_existing(&error) => {}
                Err(error) => return Err(error.into()),
            }
            match self.client.write(name, 0, bytes.clone()).await {
                Ok(()) => return Ok(()),
                // Deleted between the create and the write: create it again.
                Err(error) if is_missing(&error) && attempt < RACE_RETRIES => continue,
                Err(error) => return Err(error.into()),
            }
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

    // ---- buckets -------------------------------------------------------------------

    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let name = layout::bucket_marker(bucket);
        match self.client.create(&name, BLOCK * 3).await {
            Ok(_) => {}
            Err(error) if is_existing(&error) => {
                return Err(StoreError::BucketExists(bucket.to_owned()));
            }
            Err(error) => return Err(error.into()),
        }
        self.write_record(&name, &BucketRecord { created_ms: now_ms() }).await
    }

    /// The bucket's record, or `NoSuchBucket`.
    pub async fn bucket(&self, bucket: &str) -> Result<BucketRecord> {
        match self.client.stat(&layout::bucket_marker(bucket)).await {
            Ok(_) => {}
            Err(error) if is_missing(&error) => {
                return Err(StoreError::NoSuchBucket(bucket.to_owned()));
            }
            Err(error) => return Err(error.into()),
        }
        let record = self.read_record(&layout::bucket_marker(bucket)).await?;
        // A bucket whose record is not written yet was created just now.
        Ok(record.unwrap_or(BucketRecord { created_ms: now_ms() }))
    }

    pub async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        self.bucket(bucket).await?;
        for prefix in [layout::key_prefix(bucket), layout::upload_prefix(bucket)] {
            let (page, _) = self.client.list_page(&prefix, None, 1).await?;
            if !page.is_empty() {
                return Err(StoreError::BucketNotEmpty(bucket.to_owned()));
            }
        }
        self.remove(&layout::bucket_marker(bucket)).await
    }

    /// Every bucket, in name order, with its record.
    pub async fn buckets(&self) -> Result<Vec<(String, BucketRecord)>> {
        let markers = self.client.list(layout::BUCKET_MARKERS).await?;
        let names: Vec<String> = markers
            .into_iter()
            .filter_map(|o| o.name.strip_prefix(layout::BUCKET_MARKERS).map(str::to_owned))
            .collect();
        futures::stream::iter(names)
            .map(|bucket| async move {
                let record = self.read_record(&layout::bucket_marker(&bucket)).await?;
                Ok((bucket, record.unwrap_or(BucketRecord { created_ms: now_ms() })))
            })
            .buffered(LISTING_READS)
            .try_collect()
            .await
    }

    // ---- objects -------------------------------------------------------------------

    /// The object's record, or `NoSuchKey` (`NoSuchBucket` if the bucket is missing).
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectRecord> {
        match self.read_record(&layout::key_record(bucket, key)).await? {
            Some(record) => Ok(record),
            None => {
                self.bucket(bucket).await?;
                Err(StoreError::NoSuchKey { bucket: bucket.to_owned(), key: key.to_owned() })
            }
        }
    }

    /// Checks `conditions` on the key's object now. The check and the write that
    /// follows are two steps: two writes at one moment may both pass it.
    pub async fn check_write(
        &self,
        bucket: &str,
        key: &str,
        conditions: &WriteConditions,
    ) -> Result<()> {
        if *conditions == WriteConditions::default() {
            return Ok(());
        }
        let existing = match self.head(bucket, key).await {
            Ok(record) => Some(record),
            Err(StoreError::NoSuchKey { .. }) => None,
            Err(error) => return Err(error),
        };
        conditions.check(bucket, key, existing.as_ref())
    }

    /// Stores the `length` bytes of `body` in a new data object of `bucket`; the
    /// extent and the body's MD5. Nothing of it remains if it fails.
    pub(crate) async fn put_data<S, E>(
        &self,
        name_of: impl FnOnce(&str) -> String,
        length: u64,
        body: S,
    ) -> Result<(Option<Extent>, [u8; 16])>
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
        let id = layout::fresh_id().map_err(|e| StoreError::Entropy(e.to_string()))?;
        let name = name_of(&id);
        self.client.create(&name, padded(length)).await?;
        match self.send_body(&name, length, body).await {
            Ok(md5) => Ok((Some(Extent { object: name, size: length }), md5)),
            Err(error) => {
                let _ = self.remove(&name).await;
                Err(error)
            }
        }
    }

    /// Writes the body to `name` a request at a time, `IN_FLIGHT` in flight; its MD5.
    async fn send_body<S, E>(&self, name: &str, length: u64, mut body: S) -> Result<[u8; 16]>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut md5 = Md5::new();
        let mut writing: VecDeque<JoinHandle<std::result::Result<(), ClientError>>> =
            VecDeque::new();
        let mut piece = BytesMut::with_capacity(REQUEST_BYTES as usize);
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
                            outcome = self.send_piece(name, offset, full, &mut writing).await;
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
            outcome = self.send_piece(name, offset, piece, &mut writing).await;
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
        name: &str,
        offset: u64,
        piece: BytesMut,
        writing: &mut VecDeque<JoinHandle<std::result::Result<(), ClientError>>>,
    ) -> Result<()> {
        if writing.len() >= IN_FLIGHT
            && let Some(oldest) = writing.pop_front()
        {
            finished(oldest).await?;
        }
        let (client, name, piece) = (self.client.clone(), name.to_owned(), piece.freeze());
        writing.push_back(tokio::spawn(async move { client.write(&name, offset, piece).await }));
        Ok(())
    }

    /// Stores a body (an object's or a part's) in a new data object of `bucket`; the
    /// record that names it, not yet written. `content_md5`, if sent, must be the
    /// body's: else nothing of it remains.
    pub(crate) async fn store_body(
        &self,
        bucket: &str,
        length: u64,
        body: impl Stream<Item = std::result::Result<Bytes, impl std::fmt::Display>> + Unpin,
        content_md5: Option<[u8; 16]>,
        headers: Headers,
    ) -> Result<ObjectRecord> {
        let data_name = |id: &str| layout::data_object(bucket, id);
        let (extent, md5) = self.put_data(data_name, length, body).await?;
        if content_md5.is_some_and(|sent| sent != md5) {
            if let Some(extent) = &extent {
                self.remove(&extent.object).await?;
            }
            return Err(StoreError::BadDigest);
        }
        Ok(ObjectRecord {
            size: length,
            etag: hex(&md5),
            modified_ms: now_ms(),
            extents: extent.into_iter().collect(),
            headers,
        })
    }

    /// Makes `record` the object `key` of `bucket`, and deletes the data of the object
    /// it replaced.
    pub(crate) async fn commit(
        &self,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
    ) -> Result<()> {
        self.replace(&layout::key_record(bucket, key), record).await
    }

    /// Writes `record` at `name` (a key's or a part's), and retires the data of the
    /// record it replaced.
    pub(crate) async fn replace(&self, name: &str, record: &ObjectRecord) -> Result<()> {
        let old = self.replace_keeping(name, record).await?;
        self.retire(old).await
    }

    /// Writes `record` at `name`; the data objects of the record it replaced that
    /// `record` does not name, left in place.
    pub(crate) async fn replace_keeping(
        &self,
        name: &str,
        record: &ObjectRecord,
    ) -> Result<Vec<String>> {
        let old: Option<ObjectRecord> = self.read_record(name).await.unwrap_or(None);
        self.write_record(name, record).await?;
        let old = old.map(|old| old.extents).unwrap_or_default();
        let unnamed = old.into_iter().filter(|e| !record.extents.contains(e));
        Ok(unnamed.map(|e| e.object).collect())
    }

    /// Data objects no record names any more: deleted by [`Store::sweep_retired`] after
    /// [`RETIRE_GRACE_MS`], so that a GET or a copy begun on them (and reading them a
    /// request at a time) reads them whole.
    pub(crate) async fn retire(&self, objects: Vec<String>) -> Result<()> {
        if objects.is_empty() {
            return Ok(());
        }
        let id = layout::fresh_id().map_err(|e| StoreError::Entropy(e.to_string()))?;
        self.write_record(&layout::retired(now_ms(), &id), &RetiredRecord { objects }).await
    }

    /// Deletes the data objects retired more than `grace_ms` ago; how many.
    pub async fn sweep_retired(&self, grace_ms: i64) -> Result<usize> {
        let cutoff = now_ms() - grace_ms;
        let mut deleted = 0;
        for entry in self.client.list(layout::RETIRED).await? {
            // In time order: the first too young ends the sweep.
            match layout::retired_ms(&entry.name) {
                Some(ms) if ms > cutoff => break,
                Some(_) => {}
                None => continue,
            }
            if let Some(retired) = self.read_record::<RetiredRecord>(&entry.name).await? {
                for object in &retired.objects {
                    self.remove(object).await?;
                }
                deleted += retired.objects.len();
            }
            self.remove(&entry.name).await?;
        }
        Ok(deleted)
    }

    /// Stores an object: its bytes, then its record. `content_md5`, if sent, must be
    /// the body's.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        length: u64,
        body: impl Stream<Item = std::result::Result<Bytes, impl std::fmt::Display>> + Unpin,
        headers: Headers,
        content_md5: Option<[u8; 16]>,
    ) -> Result<ObjectRecord> {
        let checked = async {
            check_key(key)?;
            if headers.metadata_bytes() > 2048 {
                return Err(StoreError::MetadataTooLarge(headers.metadata_bytes()));
            }
            self.bucket(bucket).await.map(drop)
        };
        let body = refuse_after_body(checked.await, body).await?;
        let record = self.store_body(bucket, length, body, content_md5, headers).await?;
        self.commit(bucket, key, &record).await?;
        Ok(record)
    }

    /// Deletes an object; a key that does not exist is no error (as S3).
    pub async fn delete(&self, bucket: &str, key: &str) -> Result<()> {
        let name = layout::key_record(bucket, key);
        let Some(record) = self.read_record::<ObjectRecord>(&name).await? else {
            self.bucket(bucket).await?;
            return Ok(());
        };
        self.remove(&name).await?;
        self.retire(record.extents.into_iter().map(|e| e.object).collect()).await
    }

    /// The bytes `range` of the object (`start..end`, within its size) as a stream,
    /// read a request at a time, a few ahead; with the record they were read by. A
    /// read that finds the data replaced by a concurrent PUT starts again from the
    /// new record.
    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
        mut range: impl FnMut(&ObjectRecord) -> std::result::Result<(u64, u64), StoreError>,
    ) -> Result<(ObjectRecord, (u64, u64), ByteStream)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let record = self.head(bucket, key).await?;
            let (start, end) = range(&record)?;
            let mut pieces = pieces(&record.extents, start, end).into_iter();
            // The first piece read here: a data object already gone means the object
            // was replaced meanwhile.
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
            return Ok((record, (start, end), ByteStream { receiver }));
        }
    }

    /// Keys of `bucket` starting with `prefix`, after `after`, in S3's order, with
    /// `delimiter` folding keys into common prefixes; at most `max` entries (keys and
    /// prefixes), and whether more follow.
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
        let mut keys: Vec<String> = Vec::new();
        'pages: loop {
            let want = (max - listing.common_prefixes.len() - keys.len()).clamp(1, 1000) as u32;
            let (page, more) = self.client.list_page(&full_prefix, from.as_deref(), want).await?;
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
                if listing.common_prefixes.len() + keys.len() == max {
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
                    None => keys.push(key.to_owned()),
                }
            }
            if !more {
                break;
            }
        }
        listing.next_after =
            listing.truncated.then(|| listing_last(&keys, &listing.common_prefixes)).flatten();
        listing.keys = futures::stream::iter(keys)
            .map(|key| async move {
                let record =
                    self.read_record::<ObjectRecord>(&layout::key_record(bucket, &key)).await?;
                Ok::<_, StoreError>(record.map(|r| (key, r)))
            })
            .buffered(LISTING_READS)
            .try_filter_map(|entry| async move { Ok(entry) })
            .try_collect()
            .await?;
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
    object: String,
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
                object: extent.object.clone(),
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
    let bytes = client.read(&piece.object, piece.aligned).await?;
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
    use super::*;

    #[test]
    fn write_conditions_are_s3s() {
        let record = |etag: &str| ObjectRecord {
            size: 0,
            etag: etag.to_owned(),
            modified_ms: 0,
            extents: Vec::new(),
            headers: Default::default(),
        };
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

    fn extent(name: &str, size: u64) -> Extent {
        Extent { object: name.into(), size }
    }

    /// The bytes the pieces give, as (object, offset in object) per byte.
    fn bytes_of(pieces: &[Piece]) -> Vec<(String, u64)> {
        pieces
            .iter()
            .flat_map(|p| p.keep.clone().map(|i| (p.object.clone(), p.aligned.start + i as u64)))
            .collect()
    }

    #[test]
    fn pieces_cover_a_range_across_requests_and_extents() {
        let mb = REQUEST_BYTES;
        let extents = [extent("a", 2 * mb + 10), extent("b", 5)];
        for (start, end) in [(0, 2 * mb + 15), (1, 2), (mb - 3, mb + 3), (2 * mb + 8, 2 * mb + 12)]
        {
            let pieces = pieces(&extents, start, end);
            let want: Vec<(String, u64)> = (start..end)
                .map(|at| {
                    if at < 2 * mb + 10 {
                        ("a".into(), at)
                    } else {
                        ("b".into(), at - (2 * mb + 10))
                    }
                })
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
}
