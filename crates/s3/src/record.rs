//! The records the gateway keeps: an object's size, ETag, time, headers and the sizes
//! of its parts; a bucket's creation time; an upload's key. Each is the JSON of a
//! name's attributes at the MDS ([`to_attrs`]), bound in one step with the name's data
//! (docs/s3-compat.md, "How objects are stored").
//!
//! Builds before issue 46 kept records in record objects, `magic "SOMNUSR1" | length
//! u32 | crc32c u32 | JSON`, zeros to the end of their blocks, naming data objects by
//! name ([`decode`], for the gateway's move of such a cluster's records,
//! `legacy.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::layout::{BLOCK, padded};

const MAGIC: &[u8; 8] = b"SOMNUSR1";
const HEADER: usize = 16;
/// The bytes a record takes at least, and what a reader fetches first: room for S3's
/// 2 KiB of user metadata and the headers. A multipart object's record names its parts
/// and may take more, in whole blocks, up to `RECORD_MAX`.
pub(crate) const RECORD_BYTES: u64 = 3 * BLOCK;
/// The size of a record object (sparse: only the blocks written take space), so that
/// a record of 10,000 parts fits, written by one request.
pub(crate) const RECORD_MAX: u64 = 1 << 20;

/// Where a legacy record's bytes are: data objects by name, in order, each holding
/// `size` bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    pub object: String,
    pub size: u64,
}

/// An S3 object (or a part of an upload): what its name's attributes hold. Its bytes
/// are the name's data objects, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub size: u64,
    /// The ETag without quotes: the MD5 in hex, or for a multipart object the MD5 of
    /// the parts' MD5s and `-N`.
    pub etag: String,
    /// Milliseconds since the Unix epoch.
    pub modified_ms: i64,
    /// The bytes of each data object, in order, for a multipart object (its parts'
    /// sizes); empty for one data object holding `size` bytes (or none, when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<u64>,
    /// A legacy record's data objects by name (never written now).
    #[serde(default, with = "compact_extents", skip_serializing_if = "Vec::is_empty")]
    pub extents: Vec<Extent>,
    #[serde(default, skip_serializing_if = "Headers::is_empty")]
    pub headers: Headers,
}

impl ObjectRecord {
    /// The bytes each of the object's `count` data objects holds, in order.
    pub fn sizes(&self, count: usize) -> Vec<u64> {
        if !self.parts.is_empty() {
            return self.parts.clone();
        }
        match count {
            0 => Vec::new(),
            _ => vec![self.size],
        }
    }
}

/// Extents as a record holds them: the data objects' common folder once, then per
/// extent its name in it and its size, so that a record of 10,000 parts fits in
/// `RECORD_MAX` whatever the bucket's name (about 48 bytes a part). Records written
/// with each extent whole (`[{"object", "size"}]`) read as well.
mod compact_extents {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Extent;

    #[derive(Serialize, Deserialize)]
    struct Compact {
        folder: String,
        parts: Vec<(String, u64)>,
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Compact(Compact),
        Whole(Vec<Extent>),
    }

    pub(super) fn serialize<S: Serializer>(extents: &[Extent], s: S) -> Result<S::Ok, S::Error> {
        let folder = extents
            .first()
            .and_then(|e| e.object.rfind('/').map(|slash| &e.object[..=slash]))
            .unwrap_or("");
        if !extents.iter().all(|e| e.object.starts_with(folder)) {
            return extents.serialize(s);
        }
        let parts = extents.iter().map(|e| (e.object[folder.len()..].to_owned(), e.size));
        Compact { folder: folder.to_owned(), parts: parts.collect() }.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Extent>, D::Error> {
        Ok(match Either::deserialize(d)? {
            Either::Whole(extents) => extents,
            Either::Compact(Compact { folder, parts }) => parts
                .into_iter()
                .map(|(name, size)| Extent { object: format!("{folder}{name}"), size })
                .collect(),
        })
    }
}

/// The headers an object keeps from its PUT and returns with every GET and HEAD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// `Expires`, in seconds since the epoch (HTTP dates have whole seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_s: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

impl Headers {
    fn is_empty(&self) -> bool {
        *self == Headers::default()
    }

    /// The bytes S3 counts against its 2 KiB limit of user metadata.
    pub(crate) fn metadata_bytes(&self) -> usize {
        self.metadata.iter().map(|(k, v)| k.len() + v.len()).sum()
    }
}

/// A bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub created_ms: i64,
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    pub key: String,
    pub created_ms: i64,
    #[serde(default)]
    pub headers: Headers,
}

/// Who took an upload to finish it: a completion (with the parts it listed, so that a
/// retry of the same completion can be told from another) or an abort. Taken by an
/// exclusive create, so that one of them finishes the upload and no part is replaced
/// once it has begun.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadClaim {
    /// The parts (number, ETag) a completion listed; `None` for an abort.
    pub completion: Option<Vec<(u32, String)>>,
    pub claimed_ms: i64,
}

/// Data objects no record names any more, deleted by the gateway's sweep once a
/// grace period has passed, so that a GET or copy begun on them reads them whole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredRecord {
    pub objects: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a record (no magic)")]
    NoMagic,
    #[error("a record of {0} bytes does not fit its object")]
    Truncated(usize),
    #[error("the record's checksum does not match its bytes")]
    Checksum,
    #[error("the record does not parse: {0}")]
    Parse(#[from] serde_json::Error),
}

/// `record` as a name's attributes.
pub(crate) fn to_attrs<T: Serialize>(record: &T) -> Vec<u8> {
    // Serializing the gateway's plain-data records into memory cannot fail.
    serde_json::to_vec(record).unwrap_or_default()
}

/// The record a name's attributes hold.
pub(crate) fn from_attrs<T: for<'a> Deserialize<'a>>(attrs: &[u8]) -> Result<T, RecordError> {
    Ok(serde_json::from_slice(attrs)?)
}

/// `record` as the blocks of a record object: at least `RECORD_BYTES` (as an earlier
/// build wrote them; the tests of the move of such records write them now).
#[cfg(test)]
pub(crate) fn encode<T: Serialize>(record: &T) -> Result<bytes::Bytes, serde_json::Error> {
    let json = serde_json::to_vec(record)?;
    if (HEADER + json.len()) as u64 > RECORD_MAX {
        let message = format!("a record of {} bytes: {RECORD_MAX} at most", json.len());
        return Err(<serde_json::Error as serde::ser::Error>::custom(message));
    }
    let size = padded((HEADER + json.len()) as u64).max(RECORD_BYTES) as usize;
    let mut out = bytes::BytesMut::zeroed(size);
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&(json.len() as u32).to_le_bytes());
    out[12..16].copy_from_slice(&crc32c::crc32c(&json).to_le_bytes());
    out[HEADER..HEADER + json.len()].copy_from_slice(&json);
    Ok(out.freeze())
}

/// The bytes of the record whose first blocks are `head`: `None` if they are all
/// there, else the whole record's length in bytes (whole blocks).
pub(crate) fn needs(head: &[u8]) -> Option<u64> {
    let length = head.get(8..12).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes)?;
    let whole = padded(HEADER as u64 + u64::from(length));
    (whole > head.len() as u64 && whole <= RECORD_MAX).then_some(whole)
}

/// The record `bytes` hold.
pub(crate) fn decode<T: for<'a> Deserialize<'a>>(bytes: &[u8]) -> Result<T, RecordError> {
    if bytes.get(..8) != Some(&MAGIC[..]) {
        return Err(RecordError::NoMagic);
    }
    let word =
        |at: usize| bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let (Some(length), Some(crc)) = (word(8), word(12)) else {
        return Err(RecordError::Truncated(bytes.len()));
    };
    let json = bytes
        .get(HEADER..HEADER + length as usize)
        .ok_or(RecordError::Truncated(length as usize))?;
    if crc32c::crc32c(json) != crc {
        return Err(RecordError::Checksum);
    }
    Ok(serde_json::from_slice(json)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> ObjectRecord {
        let mut headers = Headers { content_type: Some("text/plain".into()), ..Headers::default() };
        headers.metadata.insert("colour".into(), "blue".into());
        ObjectRecord {
            size: 5,
            etag: "5d41402abc4b2a76b9719d911017c592".into(),
            modified_ms: 1_700_000_000_000,
            parts: Vec::new(),
            extents: vec![Extent { object: "s3/d/b/0".into(), size: 5 }],
            headers,
        }
    }

    #[test]
    fn a_record_round_trips_in_whole_blocks() -> Result<(), RecordError> {
        let bytes = encode(&object())?;
        assert_eq!(bytes.len() as u64, RECORD_BYTES);
        assert_eq!(decode::<ObjectRecord>(&bytes)?, object());
        Ok(())
    }

    #[test]
    fn a_large_record_takes_more_blocks() -> Result<(), RecordError> {
        let mut record = object();
        record.extents = (0..1000)
            .map(|n| Extent { object: format!("s3/p/b/{n:032}/{n:05}"), size: 5 << 20 })
            .collect();
        let bytes = encode(&record)?;
        assert!(bytes.len() as u64 > RECORD_BYTES && (bytes.len() as u64).is_multiple_of(BLOCK));
        assert_eq!(decode::<ObjectRecord>(&bytes)?, record);
        Ok(())
    }

    #[test]
    fn damage_and_foreign_bytes_are_refused() -> Result<(), RecordError> {
        let mut bytes = encode(&object())?.to_vec();
        bytes[20] ^= 1;
        assert!(matches!(decode::<ObjectRecord>(&bytes), Err(RecordError::Checksum)));
        assert!(matches!(decode::<ObjectRecord>(&[0; 4096]), Err(RecordError::NoMagic)));
        let mut long = encode(&object())?.to_vec();
        long[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode::<ObjectRecord>(&long), Err(RecordError::Truncated(_))));
        Ok(())
    }

    /// The largest completion S3 allows fits in a name's attributes, with 2 KiB of
    /// user metadata; an earlier build's record of it fitted its record object; and a
    /// record written with whole extents still reads.
    #[test]
    fn ten_thousand_parts_fit_in_a_record() -> Result<(), Box<dyn std::error::Error>> {
        let mut record = object();
        record.extents.clear();
        record.parts = vec![5 << 30; 10_000];
        record.headers.metadata.insert("m".into(), "x".repeat(2047));
        let attrs = to_attrs(&record);
        assert!(attrs.len() <= somnus_core::cluster::mds::ATTRS_BYTES_MAX, "{}", attrs.len());
        assert_eq!(from_attrs::<ObjectRecord>(&attrs)?, record);
        let bucket = "b".repeat(63);
        let extents: Vec<Extent> = (0..10_000)
            .map(|n| Extent { object: format!("s3/d/{bucket}/{n:032x}"), size: 5 << 30 })
            .collect();
        let record = ObjectRecord { extents, ..object() };
        let bytes = encode(&record)?;
        assert!(bytes.len() as u64 <= RECORD_MAX, "{} bytes", bytes.len());
        assert_eq!(decode::<ObjectRecord>(&bytes)?, record);
        let whole =
            r#"{"size":3,"etag":"e","modified_ms":1,"extents":[{"object":"s3/d/b/x","size":3}]}"#;
        let old: ObjectRecord = serde_json::from_str(whole)?;
        assert_eq!(old.extents, vec![Extent { object: "s3/d/b/x".into(), size: 3 }]);
        Ok(())
    }
}
