//! Multipart uploads ([`crate::layout`]): an upload record, a record per part naming
//! its data object, and on completion a key record naming the parts' data objects in
//! order. Uploads left unfinished longer than a limit are aborted by a sweep.

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use md5::{Digest, Md5};

use crate::layout;
use crate::record::{Headers, ObjectRecord, UploadRecord};
use crate::store::{Store, StoreError, hex, now_ms};

/// The smallest part but the last (S3's limit).
pub const PART_BYTES_MIN: u64 = 5 << 20;
/// The largest part (S3's limit).
pub const PART_BYTES_MAX: u64 = 5 << 30;
/// The highest part number (S3's limit).
pub const PART_NUMBER_MAX: u32 = 10_000;

type Result<T> = std::result::Result<T, StoreError>;

/// A part as an upload's listing shows it.
#[derive(Debug, Clone)]
pub struct PartInfo {
    pub number: u32,
    pub record: ObjectRecord,
}

impl Store {
    pub async fn create_upload(&self, bucket: &str, key: &str, headers: Headers) -> Result<String> {
        crate::store::check_key(key)?;
        if headers.metadata_bytes() > 2048 {
            return Err(StoreError::MetadataTooLarge(headers.metadata_bytes()));
        }
        self.bucket(bucket).await?;
        let upload = layout::fresh_id().map_err(|e| StoreError::Entropy(e.to_string()))?;
        let record = UploadRecord { key: key.to_owned(), created_ms: now_ms(), headers };
        self.write_record(&layout::upload_record(bucket, &upload), &record).await?;
        Ok(upload)
    }

    /// The upload's record, if it is an upload of `key`.
    pub async fn upload(&self, bucket: &str, key: &str, upload: &str) -> Result<UploadRecord> {
        let missing = || StoreError::NoSuchUpload(upload.to_owned());
        if upload.is_empty() || !upload.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(missing());
        }
        match self.read_record::<UploadRecord>(&layout::upload_record(bucket, upload)).await? {
            Some(record) if record.key == key => Ok(record),
            Some(_) => Err(missing()),
            None => {
                self.bucket(bucket).await?;
                Err(missing())
            }
        }
    }

    /// Stores part `number` of an upload (replacing an earlier one of that number).
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
            self.upload(bucket, key, upload).await.map(drop)
        };
        let body = crate::store::refuse_after_body(checked.await, body).await?;
        let record = self.store_body(bucket, length, body, content_md5, Headers::default()).await?;
        self.replace(&layout::part_record(bucket, upload, number), &record).await?;
        Ok(record)
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
        let prefix = layout::part_prefix(bucket, upload);
        let from = (after > 0).then(|| layout::part_record(bucket, upload, after));
        let want = max.clamp(1, 1000) as u32;
        let (page, more) = self.client().list_page(&prefix, from.as_deref(), want).await?;
        let numbers: Vec<u32> = page
            .iter()
            .filter_map(|o| o.name.strip_prefix(&prefix)?.parse().ok())
            .take(max)
            .collect();
        let truncated = more || page.len() > numbers.len();
        let parts: Vec<PartInfo> = futures::stream::iter(numbers)
            .map(|number| async move {
                let name = layout::part_record(bucket, upload, number);
                let record = self.read_record::<ObjectRecord>(&name).await?;
                Ok::<_, StoreError>(record.map(|record| PartInfo { number, record }))
            })
            .buffered(16)
            .try_filter_map(|part| async move { Ok(part) })
            .try_collect()
            .await?;
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

    /// Makes the parts listed (number and ETag, in ascending order) the object `key`;
    /// the parts not listed are deleted with the upload.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload: &str,
        listed: &[(u32, String)],
    ) -> Result<ObjectRecord> {
        let upload_record = self.upload(bucket, key, upload).await?;
        if listed.is_empty() {
            return Err(StoreError::InvalidPart("a completion lists one part at least".into()));
        }
        if listed.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(StoreError::InvalidPartOrder);
        }
        let parts = self.all_parts(bucket, upload).await?;
        let mut chosen = Vec::with_capacity(listed.len());
        for (index, (number, etag)) in listed.iter().enumerate() {
            let part = parts
                .iter()
                .find(|p| p.number == *number && p.record.etag == etag.trim_matches('"'))
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
        let mut md5s = Md5::new();
        for part in &chosen {
            md5s.update(decode_hex(&part.record.etag));
        }
        let record = ObjectRecord {
            size: chosen.iter().map(|p| p.record.size).sum(),
            etag: format!("{}-{}", hex(&md5s.finalize()), chosen.len()),
            modified_ms: now_ms(),
            extents: chosen.iter().flat_map(|p| p.record.extents.clone()).collect(),
            headers: upload_record.headers,
        };
        self.commit(bucket, key, &record).await?;
        // The parts' records go, and the data of parts not chosen; the chosen data is
        // the object's now.
        for part in &parts {
            self.remove(&layout::part_record(bucket, upload, part.number)).await?;
            if !chosen.iter().any(|c| c.number == part.number) {
                for extent in &part.record.extents {
                    self.remove(&extent.object).await?;
                }
            }
        }
        self.remove(&layout::upload_record(bucket, upload)).await?;
        Ok(record)
    }

    /// Deletes the upload and every part of it.
    pub async fn abort_upload(&self, bucket: &str, key: &str, upload: &str) -> Result<()> {
        self.upload(bucket, key, upload).await?;
        self.discard_upload(bucket, upload).await
    }

    async fn discard_upload(&self, bucket: &str, upload: &str) -> Result<()> {
        for part in self.all_parts(bucket, upload).await? {
            self.remove(&layout::part_record(bucket, upload, part.number)).await?;
            for extent in &part.record.extents {
                self.remove(&extent.object).await?;
            }
        }
        self.remove(&layout::upload_record(bucket, upload)).await
    }

    /// The bucket's uploads in progress (upload id and record), in key order, then
    /// by creation; at most 10,000.
    pub async fn uploads(&self, bucket: &str) -> Result<Vec<(String, UploadRecord)>> {
        self.bucket(bucket).await?;
        let prefix = layout::upload_prefix(bucket);
        let names = self.client().list(&prefix).await?;
        let ids: Vec<String> = names
            .iter()
            .filter_map(|o| o.name.strip_prefix(&prefix).map(str::to_owned))
            .take(10_000)
            .collect();
        let mut uploads: Vec<(String, UploadRecord)> = futures::stream::iter(ids)
            .map(|id| async move {
                let record =
                    self.read_record::<UploadRecord>(&layout::upload_record(bucket, &id)).await?;
                Ok::<_, StoreError>(record.map(|r| (id, r)))
            })
            .buffered(16)
            .try_filter_map(|u| async move { Ok(u) })
            .try_collect()
            .await?;
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
                if now - record.created_ms > older_than_ms {
                    self.discard_upload(&bucket, &upload).await?;
                    swept += 1;
                }
            }
        }
        Ok(swept)
    }
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
