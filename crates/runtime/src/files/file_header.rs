//! The header a runtime file begins with (docs/format/): which kind of file it is and in
//! which format version, so that a build refuses a file it cannot read (a newer
//! build's, or a file of another kind at the path) instead of misreading it, and knows
//! an older one to convert.
//!
//! `magic [u8; 8] | format u32 | zero [48] | crc32c u32` (64 bytes, little-endian; the
//! CRC-32C covers bytes 0..60). Files of format 1, which builds before formats were
//! versioned wrote, have no header: they begin with a record (`files/record.rs`), whose first
//! word, a length, never reads as the magic's first bytes.

use crate::files::record::u32_at;

/// Bytes of the header.
pub const HEADER_BYTES: usize = 64;

/// The first bytes of every magic.
const MAGIC_PREFIX: &[u8] = b"SOMNUS";

/// A kind of file and the format this build writes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    pub magic: &'static [u8; 8],
    /// What the file is, for errors.
    pub what: &'static str,
    /// The format this build writes (and the newest it reads).
    pub format: u32,
}

/// A storage server's replica journal (docs/format/replicas.md).
pub const REPLICA_JOURNAL: Kind = Kind { magic: b"SOMNUSJR", what: "replica journal", format: 2 };
/// A storage server's groups' snapshot (docs/format/replicas.md).
pub const GROUPS_SNAPSHOT: Kind = Kind { magic: b"SOMNUSGS", what: "groups' snapshot", format: 2 };
/// A logger's index journal (docs/format/log.md).
pub const LOG_INDEX: Kind = Kind { magic: b"SOMNUSLX", what: "logger index journal", format: 2 };

/// What a file's first bytes say of its format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A header of this build's kind, of a format it reads.
    Format(u32),
    /// No header: format 1, an earlier build's file.
    Unversioned,
    /// The beginning of a header only, or none at all (`bytes` empty): a file made and
    /// cut short by a crash before anything went into it.
    Torn,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("its header fails its checksum")]
    Checksum,
    #[error("it is not a {expected} (its header names {found:?})")]
    OtherKind { expected: &'static str, found: String },
    #[error(
        "it is a {what} of format {found}, which a newer build wrote; this build reads \
         formats 1 to {newest}"
    )]
    Newer { what: &'static str, found: u32, newest: u32 },
    #[error("its header names format {found}, which no build writes")]
    Unknown { found: u32 },
}

/// The header of a file of `kind` in this build's format.
pub fn encode(kind: &Kind) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(kind.magic);
    header[8..12].copy_from_slice(&kind.format.to_le_bytes());
    let crc = crc32c::crc32c(&header[..60]);
    header[60..].copy_from_slice(&crc.to_le_bytes());
    header
}

/// The format of a file of `kind` that begins with `bytes`.
pub fn read(kind: &Kind, bytes: &[u8]) -> Result<Found, HeaderError> {
    let prefix = &bytes[..bytes.len().min(MAGIC_PREFIX.len())];
    if !MAGIC_PREFIX.starts_with(prefix) || bytes.is_empty() {
        return Ok(if bytes.is_empty() { Found::Torn } else { Found::Unversioned });
    }
    let Some(header) = bytes.get(..HEADER_BYTES) else { return Ok(Found::Torn) };
    if crc32c::crc32c(&header[..60]) != u32_at(header, 60) {
        return Err(HeaderError::Checksum);
    }
    if &header[..8] != kind.magic {
        let found = String::from_utf8_lossy(&header[..8]).into_owned();
        return Err(HeaderError::OtherKind { expected: kind.what, found });
    }
    match u32_at(header, 8) {
        found if found > kind.format => {
            Err(HeaderError::Newer { what: kind.what, found, newest: kind.format })
        }
        found if found < 2 => Err(HeaderError::Unknown { found }),
        found => Ok(Found::Format(found)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_names_what_is_wrong() {
        let header = encode(&REPLICA_JOURNAL);
        assert_eq!(read(&REPLICA_JOURNAL, &header), Ok(Found::Format(2)));
        assert_eq!(read(&REPLICA_JOURNAL, &header[..20]), Ok(Found::Torn));
        assert_eq!(read(&REPLICA_JOURNAL, &[]), Ok(Found::Torn));
        // A record of format 1 begins with its length.
        assert_eq!(read(&REPLICA_JOURNAL, &[40, 0, 0, 0, 1, 2]), Ok(Found::Unversioned));
        assert!(matches!(
            read(&LOG_INDEX, &header),
            Err(HeaderError::OtherKind { expected: "logger index journal", .. })
        ));
        let mut newer = Kind { format: 3, ..REPLICA_JOURNAL };
        let header3 = encode(&newer);
        assert_eq!(
            read(&REPLICA_JOURNAL, &header3),
            Err(HeaderError::Newer { what: "replica journal", found: 3, newest: 2 })
        );
        newer.format = 1;
        assert_eq!(read(&REPLICA_JOURNAL, &encode(&newer)), Err(HeaderError::Unknown { found: 1 }));
        let mut flipped = header;
        flipped[9] ^= 1;
        assert_eq!(read(&REPLICA_JOURNAL, &flipped), Err(HeaderError::Checksum));
    }
}
