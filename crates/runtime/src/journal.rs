//! A storage server's journal: every replica change ([`StoreOp`]) with its bytes,
//! appended and synced before the core is told the write is done (DESIGN.md's
//! rule: acknowledged only once durable). With the chunk files and the groups'
//! snapshot it is the replica's durable state; [`ServerDisk`](crate::server_disk)
//! replays it after a restart, and a checkpoint starts a new one (`checkpoint.rs`).
//!
//! Each change is one record (`record.rs`: length, CRC-32C, postcard, payloads;
//! docs/format/replicas.md). Appends
//! are sequential and each batch is synced before it is acknowledged, so only the last
//! record can be torn by a crash: a record cut short at the end of the file, or the
//! last one failing its checksum, is dropped (it was never acknowledged). A record
//! that fails its checksum with more after it is damage, named with its offset.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use somnus_core::cluster::Payload;
use somnus_core::cluster::logvolume::IndexChange;
use somnus_core::cluster::store::StoreOp;

use crate::{durable, record};

/// What a journal holds: a value and the payloads it carries.
pub trait Entry: Serialize + DeserializeOwned {
    fn payloads(&self) -> Vec<&Payload>;
    fn payloads_mut(&mut self) -> Vec<&mut Payload>;
}

impl Entry for StoreOp {
    fn payloads(&self) -> Vec<&Payload> {
        StoreOp::payloads(self)
    }
    fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        StoreOp::payloads_mut(self)
    }
}

/// A logger's index changes carry no bytes: the log holds them.
impl Entry for IndexChange {
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
}

#[derive(Debug)]
pub struct Journal<T> {
    path: PathBuf,
    file: File,
    bytes: u64,
    entries: std::marker::PhantomData<fn(T)>,
}

impl<T: Entry> Journal<T> {
    /// Opens the journal at `path` (empty if there is none) and returns the entries it
    /// holds, in order; a torn last record is cut off.
    pub fn open(path: &Path) -> Result<(Journal<T>, Vec<T>), JournalError> {
        let io = |source| JournalError::Io { path: path.to_owned(), source };
        let created = !path.exists();
        let file =
            OpenOptions::new().read(true).append(true).create(true).open(path).map_err(io)?;
        if created {
            // The new file's name made durable before anything appended to it is.
            durable::sync_dir(path.parent().unwrap_or(Path::new("."))).map_err(io)?;
        }
        let bytes = Bytes::from(std::fs::read(path).map_err(io)?);
        let mut ops = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let rest = bytes.slice(at..);
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
        if at < bytes.len() {
            file.set_len(at as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        let journal = Journal {
            path: path.to_owned(),
            file,
            bytes: at as u64,
            entries: std::marker::PhantomData,
        };
        Ok((journal, ops))
    }

    /// Appends `ops` and syncs them, as one group commit: when it returns, every one
    /// is durable. When the disk has no room, none is: what was written of them is
    /// cut off again, and the journal holds what it held before
    /// ([`JournalError::NoSpace`]).
    pub fn append(&mut self, ops: &[T]) -> Result<(), JournalError> {
        let mut out = Vec::new();
        for op in ops {
            record::encode(op, &op.payloads(), &mut out);
        }
        let appended = self.file.write_all(&out).and_then(|()| self.file.sync_data());
        match appended {
            Ok(()) => {
                self.bytes += out.len() as u64;
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
        let mut out = Vec::new();
        for entry in entries {
            record::encode(entry, &entry.payloads(), &mut out);
        }
        durable::replace(&self.path, &out).map_err(io)?;
        self.file = OpenOptions::new().read(true).append(true).open(&self.path).map_err(io)?;
        self.bytes = out.len() as u64;
        Ok(())
    }
}
