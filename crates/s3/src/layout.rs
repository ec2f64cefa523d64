//! Where the gateway keeps S3's buckets and objects among the cluster's names
//! (docs/s3-compat.md, "How objects are stored"). Each record is a name's attributes
//! at the MDS; bytes are the name's data objects.
//!
//! - a bucket is a name `s3/b/<bucket>` holding its creation time, and no data;
//! - an S3 object is a name `s3/k/<bucket>/<key>` whose attributes are its record
//!   (size, ETag, time, headers) and whose data objects hold its bytes, padded to
//!   whole blocks. A PUT writes a new data object and then binds the name to it with
//!   the record, in one command, so a reader sees the old object or the new one whole;
//! - a multipart upload is a name `s3/u/<bucket>/<upload id>` (its key and headers)
//!   and per part a name `s3/p/<bucket>/<upload id>/<part number>` holding the part's
//!   data object; completing it binds the key's name to the parts' data objects in
//!   order, taking the upload's names (no byte is copied);
//! - the completion or abort that finishes an upload first takes its claim
//!   `s3/c/<bucket>/<upload id>` by an exclusive bind.
//!
//! Data no name holds any more (replaced, deleted, parts not completed) is freed by
//! the cluster a grace later. Keys are cluster object names, never paths: nothing of a
//! key reaches a filesystem.

use std::fmt::Write as _;

/// The cluster's block: record objects are whole blocks.
pub(crate) const BLOCK: u64 = somnus_runtime::client::BLOCK_BYTES;

pub(crate) fn bucket_marker(bucket: &str) -> String {
    format!("s3/b/{bucket}")
}

pub(crate) const BUCKET_MARKERS: &str = "s3/b/";

pub(crate) fn key_record(bucket: &str, key: &str) -> String {
    format!("{}{key}", key_prefix(bucket))
}

/// The prefix of every key record of `bucket`: listing it in name order lists the
/// keys in S3's order (UTF-8 bytes).
pub(crate) fn key_prefix(bucket: &str) -> String {
    format!("s3/k/{bucket}/")
}

pub(crate) fn upload_record(bucket: &str, upload: &str) -> String {
    format!("{}{upload}", upload_prefix(bucket))
}

pub(crate) fn upload_prefix(bucket: &str) -> String {
    format!("s3/u/{bucket}/")
}

pub(crate) fn part_record(bucket: &str, upload: &str, part: u32) -> String {
    // Zero-padded, so a listing of an upload's parts is in part order.
    format!("{}{part:05}", part_prefix(bucket, upload))
}

pub(crate) fn part_prefix(bucket: &str, upload: &str) -> String {
    format!("s3/p/{bucket}/{upload}/")
}

/// The claim of the completion or abort that finishes an upload.
pub(crate) fn upload_claim(bucket: &str, upload: &str) -> String {
    format!("{}{upload}", claim_prefix(bucket))
}

pub(crate) fn claim_prefix(bucket: &str) -> String {
    format!("s3/c/{bucket}/")
}

/// A fresh identifier: 128 random bits in hex.
pub(crate) fn fresh_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    let mut id = String::with_capacity(32);
    for byte in bytes {
        let _ = write!(id, "{byte:02x}");
    }
    Ok(id)
}

/// `length` rounded up to whole blocks.
pub(crate) fn padded(length: u64) -> u64 {
    length.div_ceil(BLOCK) * BLOCK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_list_in_byte_order_under_their_bucket() {
        let a = key_record("b", "a/x");
        let b = key_record("b", "a0");
        assert!(a < b, "'/' sorts before '0', as S3 orders keys");
        assert!(a.starts_with(&key_prefix("b")));
        assert!(!key_record("bb", "k").starts_with(&key_prefix("b")));
    }

    #[test]
    fn part_names_sort_in_part_order() {
        assert!(part_record("b", "u", 9) < part_record("b", "u", 10));
        assert!(part_record("b", "u", 10) < part_record("b", "u", 10000));
    }

    #[test]
    fn fresh_ids_differ() -> Result<(), getrandom::Error> {
        let (a, b) = (fresh_id()?, fresh_id()?);
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        Ok(())
    }
}
