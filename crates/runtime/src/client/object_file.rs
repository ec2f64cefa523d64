//! Files stored as objects (`somnus put` and `somnus get`): a header block, then the
//! file's bytes padded to whole blocks (docs/runtime.md, "Objects stored by put").
//!
//! The header is `magic "SOMNUSO1" | length u64 | crc32c u32` (the CRC-32C of the
//! bytes), zeros to the end of its block. A file goes in and out a request at a time
//! (1 MiB, cut at the object's chunk boundaries), 8 requests in flight, in order, so
//! memory stays bounded whatever the file's size; the header is written last, so an
//! object reads as a file only once every byte of it was acknowledged.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use somnus_types::ByteRange;
use tokio::task::JoinHandle;

use crate::client::{BLOCK_BYTES, ClientError, ClusterClient, IN_FLIGHT, cut};

const OBJECT_MAGIC: &[u8; 8] = b"SOMNUSO1";

/// Why a file could not be stored or given back.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("object {name:?} was not stored by `somnus put` (no header in its first block)")]
    NotAFile { name: String },
    #[error("object {name:?} reads back {length} bytes whose checksum is not the stored one")]
    Checksum { name: String, length: u64 },
    #[error("reading the data to store: {0}")]
    Source(std::io::Error),
    #[error(
        "the data to store is not the {length} bytes it had at the start: it changed meanwhile"
    )]
    SourceChanged { length: u64 },
    #[error("writing the object's bytes out: {0}")]
    Sink(std::io::Error),
}

fn header(length: u64, crc: u32) -> Bytes {
    let mut block = BytesMut::zeroed(BLOCK_BYTES as usize);
    block[..8].copy_from_slice(OBJECT_MAGIC);
    block[8..16].copy_from_slice(&length.to_le_bytes());
    block[16..20].copy_from_slice(&crc.to_le_bytes());
    block.freeze()
}

/// The length and CRC a header block holds, if it is one.
fn parse_header(block: &[u8]) -> Option<(u64, u32)> {
    if block.get(..8)? != OBJECT_MAGIC {
        return None;
    }
    let length = u64::from_le_bytes(block.get(8..16)?.try_into().ok()?);
    let crc = u32::from_le_bytes(block.get(16..20)?.try_into().ok()?);
    Some((length, crc))
}

fn padded(length: u64) -> u64 {
    length.div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

impl ClusterClient {
    /// Stores `data` as the object `name` (`put_from` on bytes in memory).
    pub async fn put(&self, name: &str, data: Bytes) -> Result<(), ObjectError> {
        self.put_from(name, data.len() as u64, &mut &data[..]).await
    }

    /// Stores the `length` bytes `source` gives as the object `name`, a request at a
    /// time (blocking reads of `source`), acknowledged once every replica holds every
    /// block durably. A source that gives fewer or more bytes is refused
    /// ([`ObjectError::SourceChanged`]) before the header is written. When it returns,
    /// also with an error, no write of it is still in flight.
    pub async fn put_from(
        &self,
        name: &str,
        length: u64,
        source: &mut (dyn std::io::Read + Send),
    ) -> Result<(), ObjectError> {
        let body = padded(length);
        let made = self.create(name, BLOCK_BYTES + body).await?;
        let mut writing = VecDeque::new();
        let mut outcome = self.send_body(name, length, source, &mut writing).await;
        while let Some(write) = writing.pop_front() {
            // Every write waited for; the first error is the put's.
            if let (Ok(_), Err(error)) = (&outcome, finished(write).await) {
                outcome = Err(error.into());
            }
        }
        let crc = outcome?;
        match source.read(&mut [0u8; 1]) {
            Ok(0) => {}
            Ok(_) => return Err(ObjectError::SourceChanged { length }),
            Err(error) => return Err(ObjectError::Source(error)),
        }
        self.write(name, 0, header(length, crc)).await?;
        // The size as stored, for listings (`somnus ls`) that read no header.
        let bind = crate::client::Bind {
            name: name.to_owned(),
            data: made.data.iter().map(|d| d.object).collect(),
            attrs: serde_json::to_vec(&serde_json::json!({ "size": length })).unwrap_or_default(),
            condition: somnus_core::cluster::BindCondition::Generation(made.generation),
            ..crate::client::Bind::default()
        };
        self.bind(bind).await?;
        Ok(())
    }

    /// Reads the body from `source` and sends it a request at a time, `IN_FLIGHT` at
    /// once (those still running left in `writing`); the CRC-32C of the bytes.
    async fn send_body(
        &self,
        name: &str,
        length: u64,
        source: &mut (dyn std::io::Read + Send),
        writing: &mut VecDeque<JoinHandle<Result<(), ClientError>>>,
    ) -> Result<u32, ObjectError> {
        let mut crc = 0u32;
        for range in cut(ByteRange::new(BLOCK_BYTES, padded(length))) {
            let offset = range.start - BLOCK_BYTES;
            let mut piece = BytesMut::zeroed(range.size_bytes() as usize);
            let bytes = &mut piece[..(length - offset).min(range.size_bytes()) as usize];
            source.read_exact(bytes).map_err(|error| match error.kind() {
                std::io::ErrorKind::UnexpectedEof => ObjectError::SourceChanged { length },
                _ => ObjectError::Source(error),
            })?;
            crc = crc32c::crc32c_append(crc, bytes);
            if writing.len() == IN_FLIGHT
                && let Some(oldest) = writing.pop_front()
            {
                finished(oldest).await?;
            }
            let (client, name, piece) = (self.clone(), name.to_owned(), piece.freeze());
            writing.push_back(tokio::spawn(async move {
                client.write(&name, range.start, piece).await
            }));
        }
        Ok(crc)
    }

    /// The bytes `put` stored as `name`, checked against the stored checksum.
    pub async fn get(&self, name: &str) -> Result<Bytes, ObjectError> {
        let mut out = Vec::new();
        self.get_into(name, &mut out).await?;
        Ok(out.into())
    }

    /// Writes the bytes `put` stored as `name` to `sink` (blocking writes), a request
    /// at a time, `IN_FLIGHT` read ahead; their length. The checksum is checked at the
    /// end: on [`ObjectError::Checksum`] the sink holds bytes that are not the stored
    /// ones, and the caller must discard them. On any error the reads ahead are
    /// stopped.
    pub async fn get_into(
        &self,
        name: &str,
        sink: &mut (dyn std::io::Write + Send),
    ) -> Result<u64, ObjectError> {
        let info = self.stat(name).await?;
        let not_a_file = || ObjectError::NotAFile { name: name.to_owned() };
        let first = self.read(name, ByteRange::new(0, BLOCK_BYTES)).await?;
        let (length, crc) = parse_header(&first).ok_or_else(not_a_file)?;
        let body = padded(length);
        if BLOCK_BYTES.checked_add(body).is_none_or(|end| end > info.size_bytes) {
            return Err(not_a_file());
        }
        let mut ranges = cut(ByteRange::new(BLOCK_BYTES, body)).into_iter();
        let mut next_read = || {
            let (client, name) = (self.clone(), name.to_owned());
            let range = ranges.next()?;
            Some(tokio::spawn(async move { client.read(&name, range).await }))
        };
        let mut reading = ReadsAhead(std::iter::from_fn(&mut next_read).take(IN_FLIGHT).collect());
        let (mut offset, mut got) = (0, 0u32);
        while let Some(read) = reading.0.pop_front() {
            let piece = finished(read).await?;
            reading.0.extend(next_read());
            let bytes = &piece[..(length - offset).min(piece.len() as u64) as usize];
            got = crc32c::crc32c_append(got, bytes);
            sink.write_all(bytes).map_err(ObjectError::Sink)?;
            offset += piece.len() as u64;
        }
        sink.flush().map_err(ObjectError::Sink)?;
        if got != crc {
            return Err(ObjectError::Checksum { name: name.to_owned(), length });
        }
        Ok(length)
    }
}

/// Reads spawned ahead of the one being written out: stopped if the get ends first.
struct ReadsAhead(VecDeque<JoinHandle<Result<Bytes, ClientError>>>);

impl Drop for ReadsAhead {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

/// The outcome of a spawned request.
async fn finished<T>(task: JoinHandle<Result<T, ClientError>>) -> Result<T, ClientError> {
    task.await.map_err(|_| ClientError::Stopped)?
}
