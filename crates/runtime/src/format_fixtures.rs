//! Frozen fixtures of the runtime's durable formats (docs/format/): files an earlier
//! build wrote, which this build must read back as the values they were written from,
//! and, for the current format, write byte for byte again. A change of a format that
//! breaks either test needs a new format version and a way to read (or convert) the
//! old one, not new fixtures.
//!
//! The fixtures live in `crates/runtime/fixtures/formats/`, one per file kind and
//! format version: `journal-v<N>` (a replica journal), `groups-v<N>.snap` (the groups'
//! snapshot), `index-v<N>` (a logger's index journal), `commands-v<N>.redb` (the MDS's
//! command log and snapshot).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use somnus_core::cluster::logvolume::IndexChange;
use somnus_core::cluster::mds::{Command, FreeSpec};
use somnus_core::cluster::store::StoreOp;
use somnus_core::cluster::{
    ChunkId, ChunkIndex, ClientId, Epoch, Payload, Piece, ServerPower, ServerTime, Stamp,
    UnstableWrite,
};
use somnus_core::gear::GearMode;
use somnus_types::{ByteRange, ChunkGroupId, ObjectId, ServerId, Version, VirtualInstant};

use crate::server::disk::Groups;

pub(crate) fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/formats")
}

fn bytes(fill: u8, len: usize) -> Payload {
    Payload::new((0..len).map(|i| fill ^ (i as u8)).collect::<Vec<u8>>().into())
}

fn chunk(object: u64, index: u32) -> ChunkId {
    ChunkId { object: ObjectId(object), chunk: ChunkIndex(index) }
}

fn write(version: u64, fill: u8) -> UnstableWrite {
    UnstableWrite {
        chunk: chunk(7, 2),
        range: ByteRange::new(4096 * version, 8192),
        version: Version(version),
        stamp: Stamp(0x5eed_0000 + version),
        data: bytes(fill, 8192),
    }
}

/// One replica change of each kind, with their bytes.
pub(crate) fn store_ops() -> Vec<StoreOp> {
    let piece = |version: u64, fill: u8| Piece {
        range: ByteRange::new(0, 4096),
        version: Version(version),
        stamp: Stamp(900 + version),
        data: bytes(fill, 4096),
    };
    vec![
        StoreOp::Apply { group: ChunkGroupId(3), write: write(1, 0xa1), stable: Version(0) },
        StoreOp::Fence { group: ChunkGroupId(3), epoch: Epoch(4) },
        StoreOp::Repair {
            chunk: chunk(7, 2),
            range: ByteRange::new(0, 4096),
            pieces: vec![piece(1, 0xb2)],
        },
        StoreOp::Copy { group: ChunkGroupId(5), chunk: chunk(8, 0), pieces: vec![piece(3, 0xc3)] },
        StoreOp::Free { objects: vec![ObjectId(9), ObjectId(10)] },
    ]
}

/// Two groups, one with unstable writes (and their bytes), one fenced without.
pub(crate) fn groups() -> Groups {
    vec![
        (ChunkGroupId(3), Epoch(4), vec![write(1, 0xa1), write(2, 0xa2)]),
        (ChunkGroupId(6), Epoch(1), Vec::new()),
    ]
}

/// One logger index change of each kind.
pub(crate) fn index_changes() -> Vec<IndexChange> {
    let indexed = UnstableWrite { data: Payload::NONE, ..write(5, 0) };
    let group = ChunkGroupId(2);
    vec![
        IndexChange::Fenced { group, epoch: Epoch(3) },
        IndexChange::Logged { group, epoch: Epoch(3), write: indexed },
        IndexChange::Tombstone { group, epoch: Epoch(3), version: Version(8) },
        IndexChange::Forgotten { group, epoch: Epoch(3), version: Version(5) },
        IndexChange::Newest { group, epoch: Epoch(3), version: Version(8) },
    ]
}

/// The MDS's snapshot and log: one command of each kind.
pub(crate) fn commands() -> (Vec<Command>, Vec<Command>) {
    let creator = (ClientId(77), 12);
    let snapshot = vec![
        Command::CreateObject {
            name: "photos/cat.jpg".into(),
            object: ObjectId(1),
            size_bytes: 1 << 20,
            chunk_groups: vec![ChunkGroupId(0)],
            creator,
        },
        Command::SetPrimary { group: ChunkGroupId(0), epoch: Epoch(2), server: Some(ServerId(1)) },
        Command::SetPower { server: ServerId(2), power: ServerPower::Draining },
        Command::SetGear { gear: 2 },
        Command::SetPlan { full_groups: 1, partial: 2, order: vec![0, 2, 1] },
        Command::ReserveObjectIds { next: ObjectId(40) },
    ];
    let log = vec![
        Command::DeleteObject { name: "old".into() },
        Command::ReplaceReplica { group: ChunkGroupId(0), lost: ServerId(2), with: ServerId(3) },
        Command::RebuildDone { group: ChunkGroupId(0), server: ServerId(3) },
        Command::KeepReplicasOn { group: ChunkGroupId(1) },
        Command::SetLoggerView {
            group: ChunkGroupId(1),
            epoch: Epoch(3),
            seq: 4,
            loggers: vec![ServerId(4), ServerId(5)],
        },
        Command::AllocateObject {
            object: ObjectId(41),
            size_bytes: 4096,
            chunk_groups: vec![ChunkGroupId(1)],
            creator,
        },
        Command::Bind {
            name: "docs/a.txt".into(),
            data: vec![ObjectId(41)],
            attrs: vec![1, 2, 3],
            taking: vec!["docs/b.txt".into()],
            generation: 6,
            creator,
        },
        Command::DeleteObjects { names: vec!["docs/a.txt".into()] },
        Command::ExpirePending { objects: vec![ObjectId(42)] },
        Command::QueueFrees {
            frees: vec![FreeSpec {
                seq: 3,
                object: ObjectId(41),
                chunk_groups: vec![ChunkGroupId(1)],
                size_bytes: 4096,
            }],
            next_seq: 4,
        },
        Command::TrimFrees { seqs: vec![3] },
        Command::SetGearMode { mode: GearMode::Set(2) },
        Command::AnsweredRequests { requests: vec![creator] },
        Command::SleptAt {
            server: ServerId(4),
            sent_at: ServerTime { incarnation: 3, at: VirtualInstant(5_000_000) },
        },
        Command::ReleaseKeptOn,
    ];
    (snapshot, log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::file_header::{self, HEADER_BYTES};
    use crate::files::journal::Journal;
    use crate::mds::command_log::CommandLog;

    /// A copy of fixture `name` in a new directory (opening a file may convert it).
    fn copy(name: &str) -> (tempfile::TempDir, PathBuf) {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join(name);
        std::fs::copy(dir().join(name), &path).unwrap();
        (scratch, path)
    }

    fn snapshot(path: &Path) -> Groups {
        let dir = path.parent().unwrap();
        std::fs::rename(path, crate::server::disk::checkpoint::snapshot_path(dir, 1)).unwrap();
        crate::server::disk::read_snapshot(&crate::server::disk::checkpoint::snapshot_path(dir, 1))
            .unwrap()
            .0
    }

    fn starts_with_header(path: &Path, kind: &file_header::Kind) -> bool {
        let bytes = std::fs::read(path).unwrap();
        file_header::read(kind, &bytes) == Ok(file_header::Found::Format(kind.format))
    }

    #[test]
    fn files_of_format_1_read_as_written_and_are_converted() {
        let (_scratch, path) = copy("journal-v1");
        assert_eq!(Journal::<StoreOp>::open(&path).unwrap().1, store_ops());
        assert!(starts_with_header(&path, &file_header::REPLICA_JOURNAL));
        assert_eq!(Journal::<StoreOp>::open(&path).unwrap().1, store_ops(), "converted");

        let (_scratch, path) = copy("index-v1");
        assert_eq!(Journal::<IndexChange>::open(&path).unwrap().1, index_changes());
        assert!(starts_with_header(&path, &file_header::LOG_INDEX));
        assert_eq!(Journal::<IndexChange>::open(&path).unwrap().1, index_changes());

        let (_scratch, path) = copy("groups-v1.snap");
        assert_eq!(snapshot(&path), groups());

        let (_scratch, path) = copy("commands-v1.redb");
        let (snapshot, logged) = commands();
        let everything: Vec<Command> = snapshot.into_iter().chain(logged.clone()).collect();
        let (mut log, read) = CommandLog::open(&path).unwrap();
        assert_eq!(read, everything);
        assert_eq!(log.logged(), logged.len() as u64);
        log.append(&Command::ReleaseKeptOn).unwrap();
        drop(log);
        let (_, again) = CommandLog::open(&path).unwrap();
        assert_eq!(again[..everything.len()], everything[..], "converted");
        assert_eq!(again.len(), everything.len() + 1);
    }

    #[test]
    fn files_of_format_2_read_as_written_and_this_build_writes_them_byte_for_byte() {
        let written = tempfile::tempdir().unwrap();
        write_fixtures(written.path());
        for name in ["journal-v2", "index-v2", "groups-v2.snap"] {
            let now = std::fs::read(written.path().join(name.replace("-v2", ""))).unwrap();
            assert!(now == std::fs::read(dir().join(name)).unwrap(), "{name} is written anew");
        }
        let (_scratch, path) = copy("journal-v2");
        assert_eq!(Journal::<StoreOp>::open(&path).unwrap().1, store_ops());
        let (_scratch, path) = copy("index-v2");
        assert_eq!(Journal::<IndexChange>::open(&path).unwrap().1, index_changes());
        let (_scratch, path) = copy("groups-v2.snap");
        assert_eq!(snapshot(&path), groups());
        let (_scratch, path) = copy("commands-v2.redb");
        let (snapshot, logged) = commands();
        let read = CommandLog::open(&path).unwrap().1;
        assert_eq!(read, snapshot.into_iter().chain(logged).collect::<Vec<_>>());
    }

    /// The fixture `name` of format 2 with its header saying format 3.
    fn newer(name: &str, kind: &file_header::Kind) -> (tempfile::TempDir, PathBuf) {
        let (scratch, path) = copy(name);
        let mut bytes = std::fs::read(&path).unwrap();
        let header = file_header::encode(&file_header::Kind { format: 3, ..*kind });
        bytes[..HEADER_BYTES].copy_from_slice(&header);
        std::fs::write(&path, bytes).unwrap();
        (scratch, path)
    }

    #[test]
    fn a_file_of_a_newer_format_is_refused_by_name_and_left_as_it_is() {
        let newer_build = "of format 3, which a newer build wrote; this build reads formats 1 to 2";
        for (name, kind) in
            [("journal-v2", file_header::REPLICA_JOURNAL), ("index-v2", file_header::LOG_INDEX)]
        {
            let (_scratch, path) = newer(name, &kind);
            let before = std::fs::read(&path).unwrap();
            let error = match kind.magic {
                b"SOMNUSJR" => Journal::<StoreOp>::open(&path).map(|_| ()).unwrap_err(),
                _ => Journal::<IndexChange>::open(&path).map(|_| ()).unwrap_err(),
            };
            assert!(error.to_string().contains(newer_build), "{error}");
            assert!(error.to_string().contains(&path.display().to_string()), "{error}");
            assert!(std::fs::read(&path).unwrap() == before, "{name} left as it was");
        }
        let (_scratch, path) = newer("groups-v2.snap", &file_header::GROUPS_SNAPSHOT);
        let error = crate::server::disk::read_snapshot(&path).unwrap_err().to_string();
        assert!(error.contains(newer_build), "{error}");

        // A replica journal where an index journal is looked for.
        let (_scratch, path) = copy("journal-v2");
        let error = Journal::<IndexChange>::open(&path).map(|_| ()).unwrap_err().to_string();
        assert!(error.contains("not a logger index journal"), "{error}");

        // The command store's header is an entry of its own.
        let (_scratch, path) = copy("commands-v2.redb");
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            let format: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("format");
            let header = file_header::encode(&file_header::Kind {
                format: 3,
                ..crate::mds::command_log::KIND
            });
            txn.open_table(format).unwrap().insert("header", header.as_slice()).unwrap();
            txn.commit().unwrap();
        }
        let error = CommandLog::open(&path).unwrap_err().to_string();
        assert!(error.contains("metadata store of format 3, which a newer build"), "{error}");
        assert!(CommandLog::open(&path).is_err(), "still refused");
    }

    /// Writes this build's files of every fixture's values into `to`.
    fn write_fixtures(to: &Path) {
        let (mut journal, _) = Journal::<StoreOp>::open(&to.join("journal")).unwrap();
        journal.append(&store_ops()[..2]).unwrap();
        journal.append(&store_ops()[2..]).unwrap();
        std::fs::write(to.join("groups.snap"), crate::server::disk::encode_snapshot(&groups()))
            .unwrap();
        let (mut index, _) = Journal::<IndexChange>::open(&to.join("index")).unwrap();
        index.append(&index_changes()).unwrap();
        let (mut log, _) = CommandLog::open(&to.join("commands.redb")).unwrap();
        let (snapshot, commands) = commands();
        log.compact(&snapshot).unwrap();
        log.append_all(&commands).unwrap();
    }

    /// Writes the fixtures of the format this build writes into a directory (run by
    /// hand, once, when a format version is added: `SOMNUS_WRITE_FIXTURES=<dir>`).
    #[test]
    fn write_fixtures_when_asked() {
        let Ok(to) = std::env::var("SOMNUS_WRITE_FIXTURES") else { return };
        std::fs::create_dir_all(&to).unwrap();
        write_fixtures(Path::new(&to));
    }
}
