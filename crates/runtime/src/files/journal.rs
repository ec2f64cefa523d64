//! A storage server's journal: every replica change ([`StoreOp`]) with its bytes,
//! appended and synced before the core is told the write is done (DESIGN.md's
//! rule: acknowledged only once durable). With the chunk files and the groups'
//! snapshot it is the replica's durable state; `ServerDisk` (`server::disk`)
//! replays it after a restart, and a checkpoint starts a new one (`server/disk/checkpoint.rs`).
//!
//! The file begins with a header block (its kind and format, `files/file_header.rs`; 4 KiB,
//! so direct batches stay aligned); a journal of format 1, which has none, is rewritten
//! with one when it is opened. Each change is one record (`files/record.rs`: length,
//! CRC-32C, postcard, payloads; docs/format/replicas.md). Appends
//! are sequential and each batch is synced before it is acknowledged, so only the last
//! record can be torn by a crash: a record cut short at the end of the file, or the
//! last one failing its checksum, is dropped (it was never acknowledged). A record
//! that fails its checksum with more after it is damage, named with its offset.
//!
//! A replica journal ([`Journal::open_direct`]) writes its batches around the page
//! cache (`O_DIRECT`): it is read only after a crash, and copying every byte of every
//! write into cached pages nobody reads cost a fifth of a loaded server's CPU. Each
//! batch is then padded to the next 4 KiB with zeros (a zero length word: skipped to
//! the next 4 KiB by the reader). A file system without `O_DIRECT` (tmpfs), or a
//! journal of an earlier build not ending on 4 KiB, is appended to through the cache.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use somnus_core::cluster::Payload;
use somnus_core::cluster::logvolume::IndexChange;
use somnus_core::cluster::store::StoreOp;

use crate::files::file_header::{self, Found};
use crate::files::{durable, record};

/// What a journal holds: a value and the payloads it carries.
pub trait Entry: Serialize + DeserializeOwned {
    /// The journal's kind and format (its header).
    const KIND: file_header::Kind;
    fn payloads(&self) -> Vec<&Payload>;
    fn payloads_mut(&mut self) -> Vec<&mut Payload>;
}

impl Entry for StoreOp {
    const KIND: file_header::Kind = file_header::REPLICA_JOURNAL;
    fn payloads(&self) -> Vec<&Payload> {
        StoreOp::payloads(self)
    }
    fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        StoreOp::payloads_mut(self)
    }
}

/// A logger's index changes carry no bytes: the log holds them.
impl Entry for IndexChange {
    const KIND: file_header::Kind = file_header::LOG_INDEX;
    fn payloads(&self) -> Vec<&Payload> {
        Vec::new()
    }
    fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        Vec::new()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("cannot use the journal {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("no room to append to the journal {path}: {source}")]
    NoSpace { path: PathBuf, source: std::io::Error },
    #[error(
        "the journal {path} is damaged at byte {offset} ({what}) with records after it; \
         the server does not start on it (its replicas hold the writes)"
    )]
    Damaged { path: PathBuf, offset: u64, what: String },
    #[error("the journal {path} cannot be read: {source}")]
    Header { path: PathBuf, source: file_header::HeaderError },
}

#[derive(Debug)]
pub struct Journal<T> {
    path: PathBuf,
    file: File,
    /// The same file opened for direct writes, when they are used.
    direct: Option<File>,
    /// The memory direct batches are encoded in, kept from one to the next (a new
    /// megabyte for each was a page fault and a page cleared per 4 KiB).
    scratch: Vec<u8>,
    bytes: u64,
    entries: std::marker::PhantomData<fn(T)>,
}

/// The alignment of direct writes: their memory, offset and length.
const DIRECT_ALIGN: usize = 4096;

/// Bytes of a journal's header block: its header (`file_header`), zeros to 4 KiB, so
/// that direct batches after it stay aligned.
const HEADER_BLOCK: usize = DIRECT_ALIGN;

fn header_block<T: Entry>() -> Vec<u8> {
    let mut block = vec![0u8; HEADER_BLOCK];
    block[..file_header::HEADER_BYTES].copy_from_slice(&file_header::encode(&T::KIND));
    block
}

/// An empty buffer with room for `bytes` after its first 4 KiB-aligned address, and
/// that address's index (zeros before it).
fn aligned(bytes: usize) -> (Vec<u8>, usize) {
    let mut buffer: Vec<u8> = Vec::with_capacity(bytes + 2 * DIRECT_ALIGN);
    let skip = buffer.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
    buffer.resize(skip, 0);
    (buffer, skip)
}

impl<T: Entry> Journal<T> {
    /// Opens the journal at `path` (empty if there is none) and returns the entries it
    /// holds, in order; a torn last record is cut off.
    pub fn open(path: &Path) -> Result<(Journal<T>, Vec<T>), JournalError> {
        let io = |source| JournalError::Io { path: path.to_owned(), source };
        let created = !path.exists();
        let file =
            durable::private_file().read(true).append(true).create(true).open(path).map_err(io)?;
        if created {
            // The new file's name made durable before anything appended to it is.
            durable::sync_dir(path.parent().unwrap_or(Path::new("."))).map_err(io)?;
        }
        let bytes = Bytes::from(std::fs::read(path).map_err(io)?);
        let header = file_header::read(&T::KIND, &bytes)
            .map_err(|source| JournalError::Header { path: path.to_owned(), source })?;
        let start = match header {
            Found::Format(_) if bytes.len() >= HEADER_BLOCK => HEADER_BLOCK,
            // Made, and cut short by a crash before its header was whole: nothing was
            // appended to it (an append follows the header's sync).
            Found::Format(_) | Found::Torn => {
                return match Journal::headed(path.to_owned(), file) {
                    Ok(journal) => Ok((journal, Vec::new())),
                    Err(source) => {
                        if created {
                            // No journal rather than one without its header.
                            let _ = std::fs::remove_file(path);
                        }
                        Err(match durable::is_no_space(&source) {
                            true => JournalError::NoSpace { path: path.to_owned(), source },
                            false => io(source),
                        })
                    }
                };
            }
            Found::Unversioned => 0,
        };
        let (ops, at) = Journal::<T>::records(path, &bytes, start)?;
        let mut journal = Journal::over(path.to_owned(), file, at as u64);
        if header == Found::Unversioned {
            // An earlier build's journal (format 1): converted, whole or not at all.
            journal.rewrite(&ops)?;
        } else if at < bytes.len() {
            journal.file.set_len(at as u64).map_err(io)?;
            journal.file.sync_all().map_err(io)?;
        }
        Ok((journal, ops))
    }

    /// An empty journal in `file`, its header written and synced.
    fn headed(path: PathBuf, file: File) -> std::io::Result<Journal<T>> {
        file.set_len(0)?;
        (&file).write_all(&header_block::<T>())?;
        file.sync_all()?;
        Ok(Journal::over(path, file, HEADER_BLOCK as u64))
    }

    /// The journal in `file`, `bytes` long, appended to through the cache.
    fn over(path: PathBuf, file: File, bytes: u64) -> Journal<T> {
        let entries = std::marker::PhantomData;
        Journal { path, file, direct: None, scratch: Vec::new(), bytes, entries }
    }

    /// The records of `bytes` from `start` on, and where the last whole one ends (a
    /// torn last record is left out).
    fn records(path: &Path, bytes: &Bytes, start: usize) -> Result<(Vec<T>, usize), JournalError> {
        let mut ops = Vec::new();
        let mut at = start;
        while at < bytes.len() {
            let rest = bytes.slice(at..);
            if rest.len() >= 4 && record::u32_at(&rest, 0) == 0 {
                // A direct batch's padding: the next batch starts on the next 4 KiB.
                at = (at / DIRECT_ALIGN + 1) * DIRECT_ALIGN;
                continue;
            }
            match record::decode(&rest, T::payloads_mut) {
                Ok(Some((op, length))) => {
                    ops.push(op);
                    at += length;
                }
                Ok(None) => break,
                Err(what) => {
                    let declared = record::u32_at(&rest, 0);
                    if at + 4 + declared as usize != bytes.len() {
                        let offset = at as u64;
                        return Err(JournalError::Damaged { path: path.to_owned(), offset, what });
                    }
                    break;
                }
            }
        }
        Ok((ops, at.min(bytes.len())))
    }

    /// [`Journal::open`], its appends then written around the page cache when the
    /// file system can and the journal ends on 4 KiB (module docs).
    pub fn open_direct(path: &Path) -> Result<(Journal<T>, Vec<T>), JournalError> {
        let (mut journal, ops) = Journal::open(path)?;
        if journal.bytes.is_multiple_of(DIRECT_ALIGN as u64) {
            journal.direct = crate::files::durable::open_direct(path);
        }
        Ok((journal, ops))
    }

    /// Appends `ops` and syncs them, as one group commit: when it returns, every one
    /// is durable. When the disk has no room, none is: what was written of them is
    /// cut off again, and the journal holds what it held before
    /// ([`JournalError::NoSpace`]).
    pub fn append(&mut self, ops: &[T]) -> Result<(), JournalError> {
        if self.direct.is_some() {
            return self.append_direct(ops);
        }
        let mut out = Vec::new();
        for op in ops {
            record::encode(op, &op.payloads(), &mut out);
        }
        let appended = self.file.write_all(&out).and_then(|()| self.file.sync_data());
        self.appended(appended, out.len())
    }

    /// `append` through the direct file: the batch encoded into memory aligned to
    /// 4 KiB, padded with zeros to a multiple of it, written at the journal's end.
    fn append_direct(&mut self, ops: &[T]) -> Result<(), JournalError> {
        let payload = |op: &T| -> usize { Payload::total_bytes(&op.payloads()) };
        let estimate = ops.iter().map(|op| payload(op) + 1024).sum::<usize>() + DIRECT_ALIGN;
        let (mut out, mut skip) = match std::mem::take(&mut self.scratch) {
            mut kept if kept.capacity() >= estimate + 2 * DIRECT_ALIGN => {
                kept.clear();
                let skip = kept.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
                kept.resize(skip, 0);
                (kept, skip)
            }
            _ => aligned(estimate),
        };
        for op in ops {
            record::encode(op, &op.payloads(), &mut out);
        }
        let length = (out.len() - skip).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        if out[skip..].as_ptr().align_offset(DIRECT_ALIGN) != 0 {
            // The batch outgrew the estimate and its buffer moved: copied once more.
            let (mut again, at) = aligned(length);
            again.extend_from_slice(&out[skip..]);
            (out, skip) = (again, at);
        }
        out.resize(skip + length, 0);
        let Some(direct) = self.direct.as_ref() else { unreachable!("append checked") };
        let appended = std::os::unix::fs::FileExt::write_all_at(direct, &out[skip..], self.bytes)
            .and_then(|()| direct.sync_data());
        // Kept unless a batch of many megabytes made it large.
        if out.capacity() <= 16 << 20 {
            self.scratch = out;
        }
        self.appended(appended, length)
    }

    /// The journal's state after an append of `length` bytes that ended in `appended`.
    fn appended(
        &mut self,
        appended: std::io::Result<()>,
        length: usize,
    ) -> Result<(), JournalError> {
        match appended {
            Ok(()) => {
                self.bytes += length as u64;
                Ok(())
            }
            Err(error) if durable::is_no_space(&error) => {
                let cut = self.file.set_len(self.bytes).and_then(|()| self.file.sync_data());
                match cut {
                    Ok(()) => Err(JournalError::NoSpace { path: self.path.clone(), source: error }),
                    Err(source) => Err(JournalError::Io { path: self.path.clone(), source }),
                }
            }
            Err(source) => Err(JournalError::Io { path: self.path.clone(), source }),
        }
    }

    /// Bytes the journal holds: a checkpoint cuts it past a bound.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Replaces every entry by `entries`, whole or not at all (a new file written,
    /// synced and renamed over the old one).
    pub fn rewrite(&mut self, entries: &[T]) -> Result<(), JournalError> {
        let io = |source| JournalError::Io { path: self.path.clone(), source };
        let mut out = header_block::<T>();
        for entry in entries {
            record::encode(entry, &entry.payloads(), &mut out);
        }
        durable::replace(&self.path, &out).map_err(io)?;
        self.file = OpenOptions::new().read(true).append(true).open(&self.path).map_err(io)?;
        // Through the cache from here on: the direct file was the replaced one.
        self.direct = None;
        self.bytes = out.len() as u64;
        Ok(())
    }
}
