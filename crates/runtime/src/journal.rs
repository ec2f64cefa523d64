//! A storage server's journal: every replica change ([`StoreOp`]) with its bytes,
//! appended and synced before the core is told the write is done (DESIGN.md's
//! rule: acknowledged only once durable). With the chunk files and the groups'
//! snapshot it is the replica's durable state; [`ServerDisk`](crate::server_disk)
//! replays it after a restart and cuts it at each checkpoint.
//!
//! A record: `length u32 | crc32c u32 | body_len u32 | postcard(StoreOp) | payloads`,
//! the payloads in the wire's attachment layout (docs/format/chunk-file.md). Appends
//! are sequential and each batch is synced before it is acknowledged, so only the last
//! record can be torn by a crash: a record cut short at the end of the file, or the
//! last one failing its checksum, is dropped (it was never acknowledged). A record
//! that fails its checksum with more after it is damage, named with its offset.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use somnus_core::cluster::store::StoreOp;

use crate::durable;

/// Bytes before a record's body: length, checksum, body length.
const RECORD_HEADER_BYTES: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot use the journal {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "the journal {path} is damaged at byte {offset} ({what}) with records after it; \
         the server does not start on it (its replicas hold the writes)"
    )]
    Damaged { path: PathBuf, offset: u64, what: String },
}

#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    bytes: u64,
}

/// Encodes `op` as one record, appended to `out`.
fn encode(op: &StoreOp, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    // Serializing a StoreOp into memory cannot fail: every field is plain data.
    let body = postcard::to_allocvec(op).unwrap_or_default();
    out.extend_from_slice(&body);
    somnus_wire::append_payloads(&op.payloads(), out);
    let length = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&length.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The record at the front of `bytes`: its op and its length, or why it is not one
/// (`None`: cut short).
fn decode(bytes: &Bytes) -> Result<Option<(StoreOp, usize)>, String> {
    let Some(header) = bytes.get(..RECORD_HEADER_BYTES) else { return Ok(None) };
    let field = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let length = field(0) as usize;
    let Some(record) = bytes.get(4..4 + length) else { return Ok(None) };
    if length < RECORD_HEADER_BYTES - 4 {
        return Err(format!("a record length of {length}"));
    }
    if crc32c::crc32c(&record[4..]) != field(4) {
        return Err("checksum mismatch".into());
    }
    let body_len = field(8) as usize;
    let body = record.get(8..8 + body_len).ok_or("a body past its record")?;
    let mut op: StoreOp = postcard::from_bytes(body).map_err(|e| e.to_string())?;
    let payloads = bytes.slice(RECORD_HEADER_BYTES + body_len..4 + length);
    somnus_wire::fill_payloads(op.payloads_mut(), &payloads).map_err(|e| e.to_string())?;
    Ok(Some((op, 4 + length)))
}

impl Journal {
    /// Opens the journal at `path` (empty if there is none) and returns the changes it
    /// holds, in order; a torn last record is cut off.
    pub fn open(path: &Path) -> Result<(Journal, Vec<StoreOp>), JournalError> {
        let io = |source| JournalError::Io { path: path.to_owned(), source };
        let file =
            OpenOptions::new().read(true).append(true).create(true).open(path).map_err(io)?;
        let bytes = Bytes::from(std::fs::read(path).map_err(io)?);
        let mut ops = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let rest = bytes.slice(at..);
            match decode(&rest) {
                Ok(Some((op, length))) => {
                    ops.push(op);
                    at += length;
                }
                Ok(None) => break,
                Err(what) => {
                    let declared =
                        rest.get(..4).map_or(0, |f| u32::from_le_bytes([f[0], f[1], f[2], f[3]]));
                    if at + 4 + declared as usize != bytes.len() {
                        let offset = at as u64;
                        return Err(JournalError::Damaged { path: path.to_owned(), offset, what });
                    }
                    break;
                }
            }
        }
        if at < bytes.len() {
            file.set_len(at as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        Ok((Journal { path: path.to_owned(), file, bytes: at as u64 }, ops))
    }

    /// Appends `ops` and syncs them, as one group commit: when it returns, every one
    /// is durable.
    pub fn append(&mut self, ops: &[StoreOp]) -> Result<(), JournalError> {
        let io = |source| JournalError::Io { path: self.path.clone(), source };
        let mut out = Vec::new();
        for op in ops {
            encode(op, &mut out);
        }
        self.file.write_all(&out).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.bytes += out.len() as u64;
        Ok(())
    }

    /// Bytes the journal holds: a checkpoint cuts it past a bound.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Empties the journal, durably (after a checkpoint made its changes durable
    /// elsewhere).
    pub fn cut(&mut self) -> Result<(), JournalError> {
        let io = |source| JournalError::Io { path: self.path.clone(), source };
        self.file.set_len(0).map_err(io)?;
        self.file.sync_all().map_err(io)?;
        self.bytes = 0;
        durable::sync_dir(self.path.parent().unwrap_or(Path::new("."))).map_err(io)
    }
}
