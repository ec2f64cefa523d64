//! Multipart uploads ([`crate::layout`]): an upload's name with its record, a name per
//! part holding the part's data object, and on completion one bind that gives the
//! key's name the parts' data objects in order and takes the upload's names. Uploads
//! left unfinished longer than a limit are aborted by a sweep (their data freed).

use bytes::Bytes;
use futures::Stream;
use md5::{Digest, Md5};
use somnus_core::cluster::BindCondition;
use somnus_runtime::client::Bind;

use crate::layout;
use crate::record::{self, Headers, ObjectRecord, UploadClaim, UploadRecord};
use crate::store::{Store, StoreError, WriteConditions, hex, now_ms};

/// The smallest part but the last (S3's limit).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// The largest part (S3's limit).
pub const PART_BYTES_MAX: u64 = 5 << 30;
/// The highest part number (S3's limit).
pub const PART_NUMBER_MAX: u32 = 10_000;

type Result<T> = std::result::Result<T, StoreError>;

/// How long after a completion took an upload an abort may take it over: a
/// completion binds within seconds, or its client gave up long before.
pub const COMPLETION_STALE_AFTER_MS: i64 = 15 * 60 * 1000;

/// A part as an upload's listing shows it.
#[derive(Debug, Clone)]
pub struct PartInfo {
    pub number: u32,
    pub record: ObjectRecord,
}

/// Whose an upload's claim is.
enum Claim {
    /// Taken by this call.
    Ours,
    /// Taken before: its record (none while its taker has not written it yet).
    Theirs(Option<UploadClaim>),
}

impl Store {
    pub async fn create_upload(&self, bucket: &str, key: &str, headers: Headers) -> Result<String> {
        crate::store::check_key(key)?;
        if headers.metadata_bytes() > 2048 {
            return Err(StoreError::MetadataTooLarge(headers.metadata_bytes()));
        }
        let upload = layout::fresh_id().map_err(|e| StoreError::Entropy(e.to_string()))?;
        let record = UploadRecord { key: key.to_owned(), created_ms: now_ms(), headers };
        let bind = Bind {
            name: layout::upload_record(bucket, &upload),
            attrs: record::to_attrs(&record),
            require: Some(layout::bucket_marker(bucket)),
            condition: BindCondition::Absent,
            ..Bind::default()
        };
        self.bind(bind, || StoreError::NoSuchBucket(bucket.to_owned())).await?;
        Ok(upload)
    }

    /// The upload's record, if it is an upload of `key`.
    pub async fn upload(&self, bucket: &str, key: &str, upload: &str) -> Result<UploadRecord> {
        let missing = || StoreError::NoSuchUpload(upload.to_owned());
        if !is_upload_id(upload) {
            return Err(missing());
        }
        match self.record::<UploadRecord>(&layout::upload_record(bucket, upload)).await? {
            Some((record, _)) if record.key == key => Ok(record),
            Some(_) => Err(missing()),
            None => {
                self.bucket(bucket).await?;
                Err(missing())
            }
        }
    }

    /// Stores part `number` of an upload (replacing an earlier one of that number, whose
    /// data the cluster frees a grace later).
    #[allow(clippy::too_many_arguments)]
    pub async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        upload: &str,
        number: u32,
        length: u64,
        body: impl Stream<Item = std::result::Result<Bytes, impl std::fmt::Display>> + Unpin,
        content_md5: Option<[u8; 16]>,
    ) -> Result<ObjectRecord> {
        let checked = async {
            if !(1..=PART_NUMBER_MAX).contains(&number) {
                return Err(StoreError::InvalidPart(format!(
                    "part number {number}: parts are numbered 1 to {PART_NUMBER_MAX}"
                )));
            }
            self.upload(bucket, key, upload).await?;
            self.refuse_if_claimed(upload, self.claim_of(bucket, upload).await?)
        };
        let body = crate::store::refuse_after_body(checked.await, body).await?;
        let (part, data) = self.store_body(length, body, content_md5, Headers::default()).await?;
        let name = layout::part_record(bucket, upload, number);
        let bind = Bind {
            name: name.clone(),
            data: data.iter().map(|d| d.object).collect(),
            attrs: record::to_attrs(&part),
            require: Some(layout::upload_record(bucket, upload)),
            ..Bind::default()
        };
        if let Err(error) = self.bind(bind, || StoreError::NoSuchUpload(upload.to_owned())).await {
            self.release(data.as_ref()).await;
            return Err(error);
        }
        // A completion or an abort that took the upload meanwhile may have listed the
        // part replaced or none: this one is refused, and goes (freed), unless the
        // completion took it already.
        if let Err(refused) = self.refuse_if_claimed(upload, self.claim_of(bucket, upload).await?) {
            self.remove(&name).await?;
            return Err(refused);
        }
        Ok(part)
    }

    /// `NoSuchUpload` if a completion or an abort has taken the upload.
    fn refuse_if_claimed(&self, upload: &str, claim: Option<Claim>) -> Result<()> {
        match claim {
            None => Ok(()),
            Some(_) => Err(StoreError::NoSuchUpload(upload.to_owned())),
        }
    }

    /// The upload's claim, if taken.
    async fn claim_of(&self, bucket: &str, upload: &str) -> Result<Option<Claim>> {
        let claim = self.record::<UploadClaim>(&layout::upload_claim(bucket, upload)).await?;
        Ok(claim.map(|(claim, _)| Claim::Theirs(Some(claim))))
    }

    /// Takes the upload's claim for `claim` by an exclusive bind, or finds whose it is.
    async fn take_claim(&self, bucket: &str, upload: &str, claim: &UploadClaim) -> Result<Claim> {
        let bind = Bind {
            name: layout::upload_claim(bucket, upload),
            attrs: record::to_attrs(claim),
            condition: BindCondition::Absent,
            ..Bind::default()
        };
        match self.bind(bind, || StoreError::NoSuchUpload(upload.to_owned())).await {
            Ok(_) => Ok(Claim::Ours),
            Err(StoreError::PreconditionFailed(_)) => {
                let theirs =
                    self.record::<UploadClaim>(&layout::upload_claim(bucket, upload)).await?;
                Ok(Claim::Theirs(theirs.map(|(claim, _)| claim)))
            }
            Err(error) => Err(error),
        }
    }

    /// The upload's parts in number order, after part `after`, at most `max`; and
    /// whether more follow.
    pub async fn parts(
        &self,
        bucket: &str,
        upload: &str,
        after: u32,
        max: usize,
    ) -> Result<(Vec<PartInfo>, bool)> {
        if max == 0 {
            // Nothing asked for: an empty page, not one truncated with no marker.
            return Ok((Vec::new(), false));
        }
        let prefix = layout::part_prefix(bucket, upload);
        let from = (after > 0).then(|| layout::part_record(bucket, upload, after));
        let want = max.clamp(1, 1000) as u32;
        let (page, more) =
            self.client().list_page_with(&prefix, from.as_deref(), want, true).await?;
        let mut parts = Vec::with_capacity(page.len());
        for object in page.iter().take(max) {
            let Some(number) = object.name.strip_prefix(&prefix).and_then(|n| n.parse().ok())
            else {
                continue;
            };
            let record = record::from_attrs(&object.attrs)
                .map_err(|error| StoreError::Record { name: object.name.clone(), error })?;
            parts.push(PartInfo { number, record });
        }
        let truncated = more || page.len() > parts.len();
        Ok((parts, truncated))
    }

    /// Every part of the upload, in number order.
    async fn all_parts(&self, bucket: &str, upload: &str) -> Result<Vec<PartInfo>> {
        let mut all: Vec<PartInfo> = Vec::new();
        loop {
            let after = all.last().map_or(0, |p| p.number);
            let (page, more) = self.parts(bucket, upload, after, 1000).await?;
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    /// Makes the parts listed (number and ETag, in ascending order) the object `key`,
    /// in one bind that takes the parts' data and the upload's names: the parts not
    /// listed are freed with them. The completion first takes the upload's claim, so
    /// that no part is replaced and no abort or sweep deletes anything of it
    /// meanwhile; a completion retried with the same parts (after a lost answer, or a
    /// gateway that stopped half way) finishes it, or answers as the first did.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload: &str,
        listed: &[(u32, String)],
        conditions: &WriteConditions,
    ) -> Result<ObjectRecord> {
        // Refused before anything is read or claimed: a list no upload can match
        // must not take the upload from a valid completion or an abort.
        if listed.len() > PART_NUMBER_MAX as usize {
            return Err(StoreError::TooManyPartsListed(listed.len()));
        }
        let listed: Vec<(u32, String)> =
            listed.iter().map(|(n, e)| (*n, e.trim_matches('"').to_owned())).collect();
        let upload_record = match self.upload(bucket, key, upload).await {
            Ok(record) => record,
            Err(StoreError::NoSuchUpload(_)) => {
                let listed = last_of_each_number(listed);
                return self.completed_before(bucket, key, upload, &listed).await;
            }
            Err(error) => return Err(error),
        };
        if listed.is_empty() {
            return Err(StoreError::NoPartsListed);
        }
        if listed.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err(StoreError::InvalidPartOrder);
        }
        let listed = last_of_each_number(listed);
        let claim = UploadClaim { completion: Some(listed.clone()), claimed_ms: now_ms() };
        match self.take_claim(bucket, upload, &claim).await? {
            Claim::Ours => {}
            Claim::Theirs(Some(theirs)) if theirs.completion == claim.completion => {}
            Claim::Theirs(_) => return Err(StoreError::UploadFinishing(upload.to_owned())),
        }
        let finished = self.finish_upload(bucket, key, upload, upload_record, &listed, conditions);
        match finished.await {
            Ok(record) => Ok(record),
            Err(error) => {
                // Nothing was bound: the upload is free again for a corrected list.
                self.remove(&layout::upload_claim(bucket, upload)).await?;
                Err(error)
            }
        }
    }

    /// The completion's bind, once it holds the upload: the key's conditions checked,
    /// the listed parts chosen, their data bound to the key with the record.
    async fn finish_upload(
        &self,
        bucket: &str,
        key: &str,
        upload: &str,
        upload_record: UploadRecord,
        listed: &[(u32, String)],
        conditions: &WriteConditions,
    ) -> Result<ObjectRecord> {
        let condition = self.check_write(bucket, key, conditions).await?;
        let parts = self.all_parts(bucket, upload).await?;
        let chosen = choose(&parts, listed)?;
        let mut data = Vec::with_capacity(chosen.len());
        for part in &chosen {
            let name = layout::part_record(bucket, upload, part.number);
            let stored = self
                .stored(&name)
                .await?
                .ok_or_else(|| StoreError::InvalidPart(format!("part {} is gone", part.number)))?;
            data.extend(stored.extents.into_iter().map(|e| (e.data.object, e.size)));
        }
        let record = ObjectRecord {
            size: data.iter().map(|(_, size)| size).sum(),
            etag: multipart_etag(listed),
            modified_ms: now_ms(),
            parts: data.iter().map(|(_, size)| *size).collect(),
            headers: upload_record.headers,
            ..ObjectRecord::default()
        };
        let mut taking: Vec<String> =
            parts.iter().map(|p| layout::part_record(bucket, upload, p.number)).collect();
        taking.push(layout::upload_record(bucket, upload));
        let bind = Bind {
            name: layout::key_record(bucket, key),
            data: data.iter().map(|(object, _)| *object).collect(),
            attrs: record::to_attrs(&record),
            taking,
            require: Some(layout::bucket_marker(bucket)),
            condition,
        };
        // The claim stays, for a retry, until the sweep.
        self.bind(bind, || StoreError::NoSuchBucket(bucket.to_owned())).await?;
        Ok(record)
    }

    /// A completion of an upload no longer in progress: the same completion retried
    /// answers as the first did, if its object is still the key's; else `NoSuchUpload`.
    async fn completed_before(
        &self,
        bucket: &str,
        key: &str,
        upload: &str,
        listed: &[(u32, String)],
    ) -> Result<ObjectRecord> {
        let missing = || StoreError::NoSuchUpload(upload.to_owned());
        if !is_upload_id(upload) {
            return Err(missing());
        }
        let claim = self.record::<UploadClaim>(&layout::upload_claim(bucket, upload)).await?;
        if claim.and_then(|(c, _)| c.completion).as_deref() != Some(listed) {
            return Err(missing());
        }
        let current = self.stored(&layout::key_record(bucket, key)).await?;
        current.map(|s| s.record).filter(|c| c.etag == multipart_etag(listed)).ok_or_else(missing)
    }

    /// Deletes the upload and every part of it; refused while a completion holds
    /// the upload, for [`COMPLETION_STALE_AFTER_MS`] at most.
    pub async fn abort_upload(&self, bucket: &str, key: &str, upload: &str) -> Result<()> {
        self.upload(bucket, key, upload).await?;
        let stale_before = now_ms() - COMPLETION_STALE_AFTER_MS;
        if !self.discard_upload(bucket, upload, stale_before).await? {
            return Err(StoreError::UploadFinishing(upload.to_owned()));
        }
        Ok(())
    }

    /// Takes the upload's claim for an abort and deletes the upload with its parts
    /// (their data freed); `false`, with nothing done, if a completion has taken it,
    /// unless it took it before `stale_before_ms`: a completion that has not bound
    /// the upload by then stopped half way (its gateway died, or it failed and could
    /// not give the claim back), and its claim goes with the upload. Were it still
    /// running, its bind, which takes the upload's names, would find them gone and
    /// change nothing.
    async fn discard_upload(
        &self,
        bucket: &str,
        upload: &str,
        stale_before_ms: i64,
    ) -> Result<bool> {
        let abort = UploadClaim { completion: None, claimed_ms: now_ms() };
        match self.take_claim(bucket, upload, &abort).await? {
            Claim::Ours | Claim::Theirs(Some(UploadClaim { completion: None, .. })) => {}
            Claim::Theirs(Some(UploadClaim { claimed_ms, .. })) if claimed_ms < stale_before_ms => {
            }
            Claim::Theirs(_) => return Ok(false),
        }
        let mut names: Vec<String> = self
            .all_parts(bucket, upload)
            .await?
            .iter()
            .map(|p| layout::part_record(bucket, upload, p.number))
            .collect();
        names.push(layout::upload_record(bucket, upload));
        for batch in names.chunks(somnus_core::cluster::mds::BIND_OBJECTS_MAX) {
            self.client().delete_many(batch.to_vec()).await?;
        }
        Ok(true)
    }

    /// The bucket's uploads in progress (upload id and record), in key order, then
    /// by upload id (the order ListMultipartUploads pages in).
    pub async fn uploads(&self, bucket: &str) -> Result<Vec<(String, UploadRecord)>> {
        self.bucket(bucket).await?;
        let prefix = layout::upload_prefix(bucket);
        let mut uploads = Vec::new();
        for object in self.list_all(&prefix).await? {
            let Some(id) = object.name.strip_prefix(&prefix) else { continue };
            let record: UploadRecord = record::from_attrs(&object.attrs)
                .map_err(|error| StoreError::Record { name: object.name.clone(), error })?;
            uploads.push((id.to_owned(), record));
        }
        uploads.sort_by(|a, b| {
            (&a.1.key, a.1.created_ms, &a.0).cmp(&(&b.1.key, b.1.created_ms, &b.0))
        });
        Ok(uploads)
    }

    /// Aborts every upload of every bucket begun more than `older_than_ms` ago;
    /// how many.
    pub async fn sweep_uploads(&self, older_than_ms: i64) -> Result<usize> {
        let mut swept = 0;
        let now = now_ms();
        for (bucket, _) in self.buckets().await? {
            for (upload, record) in self.uploads(&bucket).await? {
                // An upload a completion has taken is left to it (or its retry) for
                // as long as an upload is, then swept with it.
                if now - record.created_ms > older_than_ms
                    && self.discard_upload(&bucket, &upload, now - older_than_ms).await?
                {
                    swept += 1;
                }
            }
            self.sweep_claims(&bucket, now - older_than_ms).await?;
        }
        Ok(swept)
    }

    /// Deletes the claims of finished uploads taken before `cutoff_ms` (kept until
    /// then for a retried completion).
    async fn sweep_claims(&self, bucket: &str, cutoff_ms: i64) -> Result<()> {
        let prefix = layout::claim_prefix(bucket);
        for entry in self.list_all(&prefix).await? {
            let Some(upload) = entry.name.strip_prefix(&prefix) else { continue };
            let claim: Option<UploadClaim> = record::from_attrs(&entry.attrs).ok();
            let old = claim.is_none_or(|c| c.claimed_ms < cutoff_ms);
            if old && self.stat(&layout::upload_record(bucket, upload)).await?.is_none() {
                self.remove(&entry.name).await?;
            }
        }
        Ok(())
    }
}

/// Whether `upload` could be an upload id (hex): anything else names no upload.
fn is_upload_id(upload: &str) -> bool {
    !upload.is_empty() && upload.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A page of ListMultipartUploads.
#[derive(Debug, Default, PartialEq)]
pub struct UploadPage {
    /// Upload id and record.
    pub uploads: Vec<(String, UploadRecord)>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// The key and upload id markers of the next page, when truncated (no id when the
    /// page ended with a common prefix).
    pub next: Option<(String, Option<String>)>,
}

/// The page of `all` (sorted by key, then by when each began) after the markers:
/// uploads under
/// `prefix`, those whose key holds `delimiter` after it rolled into one common prefix
/// each, `max` entries (uploads and prefixes) at most.
pub fn page_uploads(
    all: Vec<(String, UploadRecord)>,
    prefix: &str,
    delimiter: Option<&str>,
    key_marker: &str,
    id_marker: Option<&str>,
    max: usize,
) -> UploadPage {
    let mut page = UploadPage::default();
    if max == 0 {
        return page;
    }
    // A marker that is a common prefix (a page ended with it) skips its keys.
    let rolled_marker = delimiter.is_some_and(|d| !d.is_empty() && key_marker.ends_with(d));
    // One key's uploads are in the order they began: a page goes on after the upload
    // its id marker names (or, if that one is gone, after the ids at or below it).
    let marker_at = id_marker.and_then(|marker| {
        all.iter().position(|(id, u)| u.key == key_marker && id.as_str() == marker)
    });
    let after = |index: usize, id: &str, key: &str| match id_marker {
        _ if key_marker.is_empty() => true,
        _ if rolled_marker && key.starts_with(key_marker) => false,
        _ if key != key_marker => key > key_marker,
        Some(marker) => marker_at.map_or(id > marker, |at| index > at),
        None => false,
    };
    let mut entries = 0;
    for (index, (id, upload)) in all.into_iter().enumerate() {
        if !upload.key.starts_with(prefix) || !after(index, &id, &upload.key) {
            continue;
        }
        let rolled = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
            let rest = &upload.key[prefix.len()..];
            rest.find(d).map(|at| upload.key[..prefix.len() + at + d.len()].to_owned())
        });
        if let Some(common) = &rolled
            && page.common_prefixes.last() == Some(common)
        {
            continue;
        }
        if entries == max {
            page.truncated = true;
            break;
        }
        entries += 1;
        match rolled {
            Some(common) => {
                page.next = Some((common.clone(), None));
                page.common_prefixes.push(common);
            }
            None => {
                page.next = Some((upload.key.clone(), Some(id.clone())));
                page.uploads.push((id, upload));
            }
        }
    }
    if !page.truncated {
        page.next = None;
    }
    page
}

/// The parts a completion lists, as uploaded: each must be there with its ETag, and
/// every one but the last 5 MiB or more.
fn choose<'a>(parts: &'a [PartInfo], listed: &[(u32, String)]) -> Result<Vec<&'a PartInfo>> {
    let mut chosen = Vec::with_capacity(listed.len());
    for (index, (number, etag)) in listed.iter().enumerate() {
        let part = parts
            .iter()
            .find(|p| p.number == *number && p.record.etag == *etag)
            .ok_or_else(|| {
                StoreError::InvalidPart(format!(
                    "part {number} with ETag {etag} was not uploaded to this upload"
                ))
            })?;
        if index + 1 < listed.len() && part.record.size < PART_BYTES_MIN {
            return Err(StoreError::EntityTooSmall { part: *number, size: part.record.size });
        }
        chosen.push(part);
    }
    Ok(chosen)
}

/// The list with only the last entry of each run of one part number. A part number
/// listed twice is a part uploaded twice, the second upload racing the first (as
/// ceph's s3-tests and RGW have it): the last entry names the upload that finished
/// last, which is the part's data now; the object holds it once.
fn last_of_each_number(mut listed: Vec<(u32, String)>) -> Vec<(u32, String)> {
    listed.reverse();
    listed.dedup_by_key(|(number, _)| *number);
    listed.reverse();
    listed
}

/// S3's ETag of a multipart object: the MD5 of the parts' MD5s, then `-` and their
/// number.
fn multipart_etag(listed: &[(u32, String)]) -> String {
    let mut md5s = Md5::new();
    for (_, etag) in listed {
        md5s.update(decode_hex(etag));
    }
    format!("{}-{}", hex(&md5s.finalize()), listed.len())
}

/// The bytes of a hex ETag (an MD5); a malformed one gives what parses.
fn decode_hex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uploads(keys: &[(&str, &str)]) -> Vec<(String, UploadRecord)> {
        let record = |key: &str| UploadRecord {
            key: key.to_owned(),
            created_ms: 0,
            headers: Headers::default(),
        };
        keys.iter().map(|(key, id)| (id.to_string(), record(key))).collect()
    }

    /// A page's uploads (`key#id`) and common prefixes, in key order (S3's answer
    /// holds them in two lists).
    fn listed(page: &UploadPage) -> Vec<String> {
        let uploads = page.uploads.iter().map(|(id, u)| format!("{}#{id}", u.key));
        let mut all: Vec<String> = uploads.chain(page.common_prefixes.iter().cloned()).collect();
        all.sort();
        all
    }

    /// Paging through uploads, one or two at a time, with and without a delimiter,
    /// lists each upload or common prefix once, in order.
    #[test]
    fn upload_pages_list_every_upload_once_in_order() {
        let all = uploads(&[("a", "1"), ("a", "2"), ("d/x", "3"), ("d/y", "4"), ("e", "5")]);
        for (delimiter, want) in [
            (None, vec!["a#1", "a#2", "d/x#3", "d/y#4", "e#5"]),
            (Some("/"), vec!["a#1", "a#2", "d/", "e#5"]),
        ] {
            for max in [1, 2, 1000] {
                let (mut key, mut id, mut seen) = (String::new(), None::<String>, Vec::new());
                loop {
                    let page = page_uploads(all.clone(), "", delimiter, &key, id.as_deref(), max);
                    seen.extend(listed(&page));
                    let Some((next_key, next_id)) = page.next else {
                        assert!(!page.truncated);
                        break;
                    };
                    (key, id) = (next_key, next_id);
                }
                assert_eq!(seen, want, "delimiter {delimiter:?}, max {max}");
            }
        }
        let page = page_uploads(all.clone(), "d/", Some("/"), "", None, 10);
        assert_eq!(listed(&page), vec!["d/x#3", "d/y#4"]);
        assert_eq!(page_uploads(all, "", None, "", None, 0), UploadPage::default());
    }

    /// One key's uploads page in the order they began, whatever their ids.
    #[test]
    fn one_keys_uploads_page_in_the_order_they_began() {
        // Sorted as `Store::uploads` sorts: by key, then by when each began.
        let all = uploads(&[("a", "f0"), ("a", "01"), ("a", "9c"), ("b", "00")]);
        let (mut key, mut id, mut seen) = (String::new(), None::<String>, Vec::new());
        loop {
            let page = page_uploads(all.clone(), "", None, &key, id.as_deref(), 1);
            seen.extend(listed(&page));
            let Some((next_key, next_id)) = page.next else { break };
            (key, id) = (next_key, next_id);
        }
        assert_eq!(seen, vec!["a#f0", "a#01", "a#9c", "b#00"]);
        // A marker naming an upload gone since: the ids after it.
        let page = page_uploads(all, "", None, "a", Some("50"), 10);
        assert_eq!(listed(&page), vec!["a#9c", "a#f0", "b#00"]);
    }

    #[test]
    fn a_part_listed_twice_counts_once_by_its_last_entry() {
        let list = |entries: &[(u32, &str)]| -> Vec<(u32, String)> {
            entries.iter().map(|(n, e)| (*n, e.to_string())).collect()
        };
        assert_eq!(
            last_of_each_number(list(&[(1, "b"), (1, "a"), (2, "c"), (3, "d"), (3, "e")])),
            list(&[(1, "a"), (2, "c"), (3, "e")])
        );
        assert_eq!(last_of_each_number(list(&[])), list(&[]));
    }

    #[test]
    fn a_multipart_etag_is_the_md5_of_the_parts_md5s() {
        // Two parts "a" and "b": what S3 gives (md5(md5("a") ++ md5("b")) and "-2").
        let mut md5s = Md5::new();
        md5s.update(decode_hex(&hex(&Md5::digest(b"a"))));
        md5s.update(decode_hex(&hex(&Md5::digest(b"b"))));
        let mut direct = Md5::new();
        direct.update(Md5::digest(b"a"));
        direct.update(Md5::digest(b"b"));
        assert_eq!(hex(&md5s.finalize()), hex(&direct.finalize()));
        assert_eq!(decode_hex("0aff"), vec![0x0a, 0xff]);
    }
}
