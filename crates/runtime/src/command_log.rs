//! The MDS's durable state in redb (docs/runtime.md, "The MDS"): a snapshot, which is
//! the list of commands that rebuilds the state it was taken of, and the commands
//! persisted since, in order. Each append and each compaction is one transaction,
//! committed with redb's immediate durability (synced before `append` returns), so a
//! crash leaves either the state before or after it.

use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use somnus_core::cluster::mds::Command;

/// Commands persisted since the snapshot, by sequence number.
const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("commands");
/// The snapshot's commands, by position.
const SNAPSHOT: TableDefinition<u64, &[u8]> = TableDefinition::new("snapshot");

#[derive(Debug, thiserror::Error)]
pub enum CommandLogError {
    #[error("metadata store {path}: {source}")]
    Store { path: PathBuf, source: Box<redb::Error> },
    #[error("metadata store {path}: {table} entry {key} is not a command: {reason}")]
    Corrupt { path: PathBuf, table: &'static str, key: u64, reason: String },
    #[error("metadata store {path}: command {key} cannot be encoded: {reason}")]
    Encode { path: PathBuf, key: u64, reason: String },
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
        let mut commands = Vec::new();
        let read = log.db.begin_read().map_err(|e| store_error(e.into()))?;
        for (table, name) in [(SNAPSHOT, "snapshot"), (LOG, "commands")] {
            let table = match read.open_table(table) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => continue,
                Err(error) => return Err(store_error(error.into())),
            };
            for entry in table.iter().map_err(|e| store_error(e.into()))? {
                let (key, value) = entry.map_err(|e| store_error(e.into()))?;
                let command = postcard::from_bytes::<Command>(value.value()).map_err(|error| {
                    CommandLogError::Corrupt {
                        path: path.to_owned(),
                        table: name,
                        key: key.value(),
                        reason: error.to_string(),
                    }
                })?;
                commands.push(command);
                if name == "commands" {
                    log.next = key.value() + 1;
                    log.logged += 1;
                }
            }
        }
        Ok((log, commands))
    }

    /// Commands logged since the snapshot: compact when this grows large.
    pub fn logged(&self) -> u64 {
        self.logged
    }

    /// Appends `command`, durably.
    pub fn append(&mut self, command: &Command) -> Result<(), CommandLogError> {
        self.append_all(std::slice::from_ref(command))
    }

    /// Appends `commands` in order, durably, in one transaction (one sync): all of
    /// them or, if it fails, none.
    pub fn append_all(&mut self, commands: &[Command]) -> Result<(), CommandLogError> {
        let encoded: Vec<Vec<u8>> = commands
            .iter()
            .enumerate()
            .map(|(i, command)| {
                postcard::to_allocvec(command).map_err(|error| CommandLogError::Encode {
                    path: self.path.clone(),
                    key: self.next + i as u64,
                    reason: error.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
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
        let txn = self.db.begin_write().map_err(|e| self.store_error(e.into()))?;
        {
            txn.delete_table(SNAPSHOT).map_err(|e| self.store_error(e.into()))?;
            txn.delete_table(LOG).map_err(|e| self.store_error(e.into()))?;
            let mut table = txn.open_table(SNAPSHOT).map_err(|e| self.store_error(e.into()))?;
            for (position, command) in snapshot.iter().enumerate() {
                let bytes =
                    postcard::to_allocvec(command).map_err(|error| CommandLogError::Encode {
                        path: self.path.clone(),
                        key: position as u64,
                        reason: error.to_string(),
                    })?;
                table
                    .insert(position as u64, bytes.as_slice())
                    .map_err(|e| self.store_error(e.into()))?;
            }
        }
        txn.commit().map_err(|e| self.store_error(e.into()))?;
        self.logged = 0;
        Ok(())
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
