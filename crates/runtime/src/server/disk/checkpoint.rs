//! The generations of a storage server's replica files, and the checkpoint that
//! starts a new one (docs/format/replicas.md).
//!
//! The journal is a sequence of files, `journal-<seq>`, each begun by a checkpoint;
//! the snapshot `groups-<seq>.snap` holds every group's fence and unstable writes as
//! they were when `journal-<seq>` began, with the chunk files synced to match. The
//! state is the newest snapshot, then every journal from its sequence on, in order.
//!
//! A checkpoint is two steps, so the server's task never waits for its slow part:
//! [`ServerDisk::begin_checkpoint`](crate::server::disk::ServerDisk::begin_checkpoint)
//! switches appends to a new journal at once; [`Checkpoint::finish`], on a thread of
//! its own while writes go on into the new journal, syncs the chunk files, writes the
//! snapshot and removes what it covers. A crash before the snapshot is in place leaves
//! the old snapshot and both journals, which replay to the same state; after it, the
//! older files are leftovers, removed at the next start.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::files::durable;
use crate::server::disk::{DiskWatch, Groups, ServerDiskError, encode_snapshot};
use crate::server::packs::SharedPacks;

/// The names an earlier build gave the only journal and snapshot: generation 0.
const LEGACY_JOURNAL: &str = "journal";
const LEGACY_SNAPSHOT: &str = "groups.snap";

pub fn journal_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("journal-{seq:016x}"))
}

pub fn snapshot_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("groups-{seq:016x}.snap"))
}

/// What a file of the replica directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Journal(u64),
    Snapshot(u64),
    /// A file a crash left before its rename (`durable::replace`).
    Temporary,
}

fn kind(name: &str) -> Option<Kind> {
    if name.ends_with(".tmp") {
        return Some(Kind::Temporary);
    }
    let hex = |s: &str| (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok()).flatten();
    if let Some(seq) = name.strip_prefix("journal-").and_then(hex) {
        return Some(Kind::Journal(seq));
    }
    let snapshot = name.strip_prefix("groups-").and_then(|s| s.strip_suffix(".snap"));
    snapshot.and_then(hex).map(Kind::Snapshot)
}

/// The generations found in `dir`.
#[derive(Debug, Default)]
pub struct Found {
    /// The newest snapshot's sequence, if any.
    pub snapshot: Option<u64>,
    /// The journals from the snapshot's sequence on, oldest first.
    pub journals: Vec<u64>,
}

/// Reads the generations of `dir`: the newest snapshot and the journals from its
/// sequence on. What it covers (older snapshots and journals) and temporaries are
/// removed; an earlier build's `journal` and `groups.snap` become generation 0.
pub fn scan(dir: &Path) -> std::io::Result<Found> {
    let mut changed = false;
    for (legacy, new) in
        [(LEGACY_JOURNAL, journal_path(dir, 0)), (LEGACY_SNAPSHOT, snapshot_path(dir, 0))]
    {
        if dir.join(legacy).exists() && !new.exists() {
            std::fs::rename(dir.join(legacy), new)?;
            changed = true;
        }
    }
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(kind) = entry.file_name().to_str().and_then(kind) {
            kinds.push((kind, entry.path()));
        }
    }
    let snapshot = kinds.iter().filter_map(|(k, _)| snapshot_seq(*k)).max();
    let from = snapshot.unwrap_or(0);
    let mut journals = Vec::new();
    for (kind, path) in kinds {
        let covered = match kind {
            Kind::Journal(seq) if seq >= from => {
                journals.push(seq);
                false
            }
            Kind::Snapshot(seq) => seq < from,
            Kind::Journal(_) | Kind::Temporary => true,
        };
        if covered {
            std::fs::remove_file(path)?;
            changed = true;
        }
    }
    if changed {
        durable::sync_dir(dir)?;
    }
    journals.sort_unstable();
    Ok(Found { snapshot, journals })
}

fn snapshot_seq(kind: Kind) -> Option<u64> {
    match kind {
        Kind::Snapshot(seq) => Some(seq),
        _ => None,
    }
}

/// A checkpoint begun: appends already go to journal `seq`; what remains is to make
/// the state before it durable without the journals before it.
#[derive(Debug)]
pub struct Checkpoint {
    pub(crate) dir: PathBuf,
    pub(crate) files: SharedPacks,
    /// Every group as it was when journal `seq` began.
    pub(crate) groups: Groups,
    pub(crate) seq: u64,
    /// The journals' bytes before `seq`.
    pub(crate) covered_bytes: u64,
    pub(crate) watch: DiskWatch,
}

impl Checkpoint {
    /// Syncs the packs, writes the snapshot whole and removes the journals and
    /// snapshot it covers. Runs beside the journal's appends; with no room for the
    /// snapshot ([`ServerDiskError::is_no_space`]) everything is left as it was. An
    /// I/O error the packs met (a block's write, a free's punch, here or on the disk
    /// worker) ends it before the journals go: they hold what the packs may lack (a
    /// freed chunk's headers still on disk would bring it back at a restart).
    pub fn finish(self) -> Result<(), ServerDiskError> {
        self.files.sync().map_err(ServerDiskError::Io)?;
        let path = snapshot_path(&self.dir, self.seq);
        let snapshot = encode_snapshot(&self.groups);
        durable::replace(&path, &snapshot)
            .map_err(|source| ServerDiskError::SnapshotIo { path, source })?;
        let dir = &self.dir;
        scan(dir).map_err(|e| ServerDiskError::Io(format!("cleaning {}: {e}", dir.display())))?;
        self.watch.journal_bytes.fetch_sub(self.covered_bytes, Ordering::Relaxed);
        self.watch.snapshot_bytes.store(snapshot.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back_and_others_ignored() {
        let dir = Path::new("/d");
        let journal = journal_path(dir, 0x2a);
        assert_eq!(journal.to_str(), Some("/d/journal-000000000000002a"));
        assert_eq!(kind("journal-000000000000002a"), Some(Kind::Journal(42)));
        assert_eq!(kind("groups-0000000000000007.snap"), Some(Kind::Snapshot(7)));
        assert_eq!(kind("groups-0000000000000007.snap.tmp"), Some(Kind::Temporary));
        for other in ["journal", "journal-2a", "groups-xyz0000000000000.snap", "chunks", "index"] {
            assert_eq!(kind(other), None, "{other}");
        }
    }

    #[test]
    fn a_scan_keeps_the_newest_snapshot_and_the_journals_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let touch = |p: PathBuf| std::fs::write(p, b"x").unwrap();
        touch(dir.path().join(LEGACY_JOURNAL));
        touch(dir.path().join(LEGACY_SNAPSHOT));
        let found = scan(dir.path()).unwrap();
        assert_eq!((found.snapshot, found.journals), (Some(0), vec![0]), "generation 0");
        for seq in [1, 2, 3] {
            touch(journal_path(dir.path(), seq));
        }
        touch(snapshot_path(dir.path(), 2));
        touch(dir.path().join("groups-0000000000000003.snap.tmp"));
        let found = scan(dir.path()).unwrap();
        assert_eq!((found.snapshot, found.journals), (Some(2), vec![2, 3]));
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "groups-0000000000000002.snap",
                "journal-0000000000000002",
                "journal-0000000000000003"
            ]
        );
    }
}
