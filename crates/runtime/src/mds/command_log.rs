//! The MDS's durable state in redb (docs/runtime.md, "The MDS"; docs/format/mds.md): a
//! snapshot, which is the list of commands that rebuilds the state it was taken of, and
//! the commands persisted since, in order. Each append and each compaction is one
//! transaction, committed with redb's immediate durability (synced before `append`
//! returns), so a crash leaves either the state before or after it.
//!
//! The store names its format in a header (`file_header`, in table `format`); each
//! command is `crc32c u32 | postcard`. A store of format 1 (an earlier build's: no
//! header, bare postcard) is converted when it is opened, in one transaction.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use somnus_core::cluster::mds::Command;

use crate::files::file_header::{self, Found, HeaderError};
use crate::files::record::u32_at;

/// Commands persisted since the snapshot, by sequence number.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("commands");
/// The snapshot's commands, by position.
const SNAPSHOT: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshot");
/// The store's header, under [`HEADER_KEY`].
const FORMAT: TableDefinition<&str, &[u8]> = TableDefinition::new("format");
const HEADER_KEY: &str = "header";

/// The MDS's command store (docs/format/mds.md).
pub const KIND: file_header::Kind =
    file_header::Kind { magic: b"SOMNUSMD", what: "metadata store", format: 2 };

#[derive(Debug, thiserror::Error)]
pub enum CommandLogError {
    #[error("metadata store {path}: {source}")]
    Store { path: PathBuf, source: Box<redb::Error> },
    #[error("metadata store {path}: {table} entry {key} is not a command: {reason}")]
    Corrupt { path: PathBuf, table: &'static str, key: u64, reason: String },
    #[error("metadata store {path}: command {key} cannot be encoded: {reason}")]
    Encode { path: PathBuf, key: u64, reason: String },
    #[error("metadata store {path} cannot be read: {source}; the MDS does not start on it")]
    Format { path: PathBuf, source: HeaderError },
    /// The thread a commit ran on ended without handing the store back (a bug).
    #[error("the metadata store was lost with the thread of a commit")]
    Lost,
}

/// An open command log; one writer (redb locks the file).
#[derive(Debug)]
pub struct CommandLog {
    db: Database,
    path: PathBuf,
    /// The sequence number the next command gets.
    next: u64,
    /// Commands in the log since the snapshot.
    logged: u64,
}

/// `command` as the store keeps it: its CRC-32C, then its postcard.
fn encode(command: &Command) -> Result<Vec<u8>, postcard::Error> {
    let mut out = vec![0u8; 4];
    out = postcard::to_extend(command, out)?;
    let crc = crc32c::crc32c(&out[4..]);
    out[..4].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The command a value of a store of `format` holds.
fn decode(format: u32, value: &[u8]) -> Result<Command, String> {
    let body = match format {
        1 => value,
        _ => {
            let body = value.get(4..).ok_or("shorter than its checksum")?;
            if crc32c::crc32c(body) != u32_at(value, 0) {
                return Err("checksum mismatch".into());
            }
            body
        }
    };
    postcard::from_bytes::<Command>(body).map_err(|e| e.to_string())
}

impl CommandLog {
    /// Opens (or creates) the store at `path`; returns it and every command to apply
    /// to a new MDS, in order: the snapshot's, then the log's.
    pub fn open(path: &Path) -> Result<(CommandLog, Vec<Command>), CommandLogError> {
        let store_error = |error: redb::Error| CommandLogError::Store {
            path: path.to_owned(),
            source: Box::new(error),
        };
        let db = Database::create(path).map_err(|e| store_error(e.into()))?;
        let mut log = CommandLog { db, path: path.to_owned(), next: 0, logged: 0 };
        let read = log.db.begin_read().map_err(|e| store_error(e.into()))?;
        let header = match read.open_table(FORMAT) {
            Ok(table) => table
                .get(HEADER_KEY)
                .map_err(|e| store_error(e.into()))?
                .map(|value| value.value().to_vec()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(error) => return Err(store_error(error.into())),
        };
        let format = match header.map(|h| file_header::read(&KIND, &h)) {
            None => 1,
            Some(Ok(Found::Format(format))) => format,
            Some(Ok(Found::Torn | Found::Unversioned)) => {
                let source = HeaderError::Checksum;
                return Err(CommandLogError::Format { path: path.to_owned(), source });
            }
            Some(Err(source)) => {
                return Err(CommandLogError::Format { path: path.to_owned(), source });
            }
        };
        let mut tables: [(u64, Vec<Command>); 2] = Default::default();
        for ((table, name), (first, commands)) in
            [(SNAPSHOT, "snapshot"), (LOG, "commands")].into_iter().zip(&mut tables)
        {
            let table = match read.open_table(table) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => continue,
                Err(error) => return Err(store_error(error.into())),
            };
            for (at, entry) in table.iter().map_err(|e| store_error(e.into()))?.enumerate() {
                let (key, value) = entry.map_err(|e| store_error(e.into()))?;
                let command =
                    decode(format, value.value()).map_err(|reason| CommandLogError::Corrupt {
                        path: path.to_owned(),
                        table: name,
                        key: key.value(),
                        reason,
                    })?;
                if at == 0 {
                    *first = key.value();
                }
                commands.push(command);
            }
        }
        drop(read);
        let [(_, snapshot), (first, logged)] = tables;
        if format == 1 {
            // An earlier build's store, or a new one: written in this build's format.
            log.next = first;
            log.rewrite(&snapshot, &logged)?;
        }
        log.next = first + logged.len() as u64;
        log.logged = logged.len() as u64;
        Ok((log, snapshot.into_iter().chain(logged).collect()))
    }

    /// Commands logged since the snapshot: compact when this grows large.
    pub fn logged(&self) -> u64 {
        self.logged
    }

    /// Appends `command`, durably.
    pub fn append(&mut self, command: &Command) -> Result<(), CommandLogError> {
        self.append_all(std::slice::from_ref(command))
    }

    /// `commands` encoded, the first as the entry `first`.
    fn encoded(&self, first: u64, commands: &[Command]) -> Result<Vec<Vec<u8>>, CommandLogError> {
        let encode = |(i, command)| {
            encode(command).map_err(|error| CommandLogError::Encode {
                path: self.path.clone(),
                key: first + i as u64,
                reason: error.to_string(),
            })
        };
        commands.iter().enumerate().map(encode).collect()
    }

    /// Appends `commands` in order, durably, in one transaction (one sync): all of
    /// them or, if it fails, none.
    pub fn append_all(&mut self, commands: &[Command]) -> Result<(), CommandLogError> {
        let encoded = self.encoded(self.next, commands)?;
        let txn = self.db.begin_write().map_err(|e| self.store_error(e.into()))?;
        {
            let mut table = txn.open_table(LOG).map_err(|e| self.store_error(e.into()))?;
            for (i, bytes) in encoded.iter().enumerate() {
                let key = self.next + i as u64;
                table.insert(key, bytes.as_slice()).map_err(|e| self.store_error(e.into()))?;
            }
        }
        txn.commit().map_err(|e| self.store_error(e.into()))?;
        self.next += commands.len() as u64;
        self.logged += commands.len() as u64;
        Ok(())
    }

    /// Replaces the snapshot with `snapshot` (commands that rebuild the whole state as
    /// it is now) and empties the log, in one transaction.
    pub fn compact(&mut self, snapshot: &[Command]) -> Result<(), CommandLogError> {
        self.rewrite(snapshot, &[])?;
        self.logged = 0;
        Ok(())
    }

    /// Replaces the whole store by `snapshot` and `logged` (from entry `next` on), in
    /// this build's format with its header, in one transaction.
    fn rewrite(&mut self, snapshot: &[Command], logged: &[Command]) -> Result<(), CommandLogError> {
        let (snapshot, logged) = (self.encoded(0, snapshot)?, self.encoded(self.next, logged)?);
        let header = file_header::encode(&KIND);
        let txn = self.db.begin_write().map_err(|e| self.store_error(e.into()))?;
        {
            let error = |e: redb::TableError| self.store_error(e.into());
            txn.delete_table(SNAPSHOT).map_err(error)?;
            txn.delete_table(LOG).map_err(error)?;
            let mut table = txn.open_table(SNAPSHOT).map_err(error)?;
            for (position, bytes) in snapshot.iter().enumerate() {
                let key = position as u64;
                table.insert(key, bytes.as_slice()).map_err(|e| self.store_error(e.into()))?;
            }
            let mut table = txn.open_table(LOG).map_err(error)?;
            for (i, bytes) in logged.iter().enumerate() {
                let key = self.next + i as u64;
                table.insert(key, bytes.as_slice()).map_err(|e| self.store_error(e.into()))?;
            }
            let mut table = txn.open_table(FORMAT).map_err(error)?;
            table.insert(HEADER_KEY, header.as_slice()).map_err(|e| self.store_error(e.into()))?;
        }
        txn.commit().map_err(|e| self.store_error(e.into()))
    }

    fn store_error(&self, error: redb::Error) -> CommandLogError {
        CommandLogError::Store { path: self.path.clone(), source: Box::new(error) }
    }
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::{ClientId, Epoch};
    use somnus_types::{ChunkGroupId, ObjectId, ServerId};

    use super::*;

    fn create(name: &str, object: u64) -> Command {
        Command::CreateObject {
            name: name.into(),
            object: ObjectId(object),
            size_bytes: 4 << 20,
            chunk_groups: vec![ChunkGroupId(1), ChunkGroupId(2)],
            creator: (ClientId(1), object),
        }
    }

    #[test]
    fn commands_survive_a_reopen_and_a_compaction_replaces_them_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.redb");
        let first = [
            create("a", 1),
            Command::SetPrimary {
                group: ChunkGroupId(1),
                epoch: Epoch(2),
                server: Some(ServerId(4)),
            },
            Command::SetGear { gear: 2 },
        ];
        {
            let (mut log, replay) = CommandLog::open(&path).unwrap();
            assert!(replay.is_empty());
            for command in &first {
                log.append(command).unwrap();
            }
            // Dropped without any close: every append was committed durably.
        }
        let (mut log, replay) = CommandLog::open(&path).unwrap();
        assert_eq!(replay, first);
        assert_eq!(log.logged(), 3);

        let snapshot = [create("a", 1), Command::SetGear { gear: 2 }];
        log.compact(&snapshot).unwrap();
        log.append(&Command::DeleteObject { name: "a".into() }).unwrap();
        drop(log);
        let (log, replay) = CommandLog::open(&path).unwrap();
        assert_eq!(replay[..2], snapshot);
        assert_eq!(replay[2], Command::DeleteObject { name: "a".into() });
        assert_eq!(log.logged(), 1);
    }

    #[test]
    fn an_entry_that_is_not_a_command_is_named_by_table_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.redb");
        let (mut log, _) = CommandLog::open(&path).unwrap();
        log.append(&create("a", 1)).unwrap();
        let txn = log.db.begin_write().unwrap();
        txn.open_table(LOG).unwrap().insert(1, [0xff, 0xff, 0xff].as_slice()).unwrap();
        txn.commit().unwrap();
        drop(log);
        let error = CommandLog::open(&path).unwrap_err().to_string();
        assert!(error.contains("commands entry 1 is not a command"), "{error}");
    }

    #[test]
    fn a_store_that_is_not_redb_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mds.redb");
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        let error = CommandLog::open(&path).unwrap_err().to_string();
        assert!(error.starts_with(&format!("metadata store {}", path.display())), "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 8192], "the file is left as it was");
    }
}
