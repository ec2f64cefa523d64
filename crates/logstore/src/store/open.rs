//! Opening a log: the directory's lock, its identity (`meta`, written when the log is
//! created), the index recovered by `recovery`, and the writer state that follows from
//! what recovery found.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::commit::Writer;
use super::recovery::recover;
use super::{Counters, LogStore, Options, RecoveryMode, RecoveryReport, Shared, stopwatch};
use super::{system_clock_ms, write_durably};
use crate::disk::{Disk, read_all};
use crate::error::{Error, Result};
use crate::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::index::Index;
use crate::snapshot::{self, META_FILE, META_TMP_FILE};
use crate::{LogId, Lsn, SegmentId, parse_segment_file_name};

impl LogStore {
    /// Opens the log in `disk` (creating an empty one if the directory holds none),
    /// recovering its index: from the snapshot of a clean close, else by scanning every
    /// segment up to its first bad record.
    pub fn open(disk: Arc<dyn Disk>, options: Options) -> Result<LogStore> {
        let minimum = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 1;
        if options.segment_bytes < minimum {
            return Err(Error::SegmentTooSmall { segment_bytes: options.segment_bytes, minimum });
        }
        let started = stopwatch();
        let where_ = disk.describe();
        let dir_lock = disk
            .lock(!options.read_only)
            .map_err(|source| Error::io("locking", where_.clone(), source))?;
        let names = disk.list().map_err(|source| Error::io("listing", where_.clone(), source))?;
        let mut segment_ids: Vec<SegmentId> =
            names.iter().filter_map(|name| parse_segment_file_name(name)).collect();
        segment_ids.sort();
        let created = !names.iter().any(|name| name == META_FILE);
        let log = if created {
            create_log(disk.as_ref(), &options, &segment_ids)?
        } else {
            read_meta(disk.as_ref())?
        };
        if segment_ids.last().is_some_and(|id| id.0 == u64::MAX) {
            return Err(Error::NotALog {
                path: where_,
                reason: format!("{} is past the last segment id", SegmentId(u64::MAX)),
            });
        }

        let mut shared = Shared { index: Index::default(), segments: BTreeMap::new() };
        let mut report = RecoveryReport {
            mode: RecoveryMode::Created,
            duration: Duration::ZERO,
            segments: 0,
            records: 0,
            bytes_scanned: 0,
            torn_tails: Vec::new(),
            damage: Vec::new(),
            unwritten_removed: Vec::new(),
        };
        let next_lsn = if created {
            Lsn(1)
        } else {
            let recovering = (&names[..], &segment_ids[..]);
            recover(disk.as_ref(), log, recovering, options.read_only, &mut shared, &mut report)?
        };
        // Ids only grow: a segment removed as an interrupted creation keeps its id used.
        let last_used = segment_ids.last().into_iter().chain(&report.unwritten_removed).max();
        let next_segment = SegmentId(last_used.map_or(1, |id| id.0 + 1));
        report.segments = shared.segments.len() as u64;
        report.records = shared.index.records();
        report.duration = started.elapsed();
        Ok(LogStore::assemble(disk, options, log, shared, report, next_segment, next_lsn, dir_lock))
    }

    /// The store over a recovered index: the writer starts after everything present.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        disk: Arc<dyn Disk>,
        options: Options,
        log: LogId,
        shared: Shared,
        recovery: RecoveryReport,
        next_segment: SegmentId,
        next_lsn: Lsn,
        dir_lock: Box<dyn std::any::Any + Send + Sync>,
    ) -> LogStore {
        let versions = shared.index.owner_versions();
        let used_bytes = shared.segments.values().map(|segment| segment.bytes).sum();
        let damaged: BTreeSet<SegmentId> =
            recovery.damage.iter().map(|damage| damage.segment).collect();
        LogStore {
            disk,
            options,
            log,
            shared: RwLock::new(shared),
            writer: Mutex::new(Writer::new(next_segment, next_lsn, used_bytes, versions)),
            compacting: Mutex::new(()),
            counters: Counters::default(),
            damaged,
            recovery,
            _lock: dir_lock,
        }
    }
}

/// Creates the identity of a new log in a directory that holds none.
fn create_log(disk: &dyn Disk, options: &Options, segment_ids: &[SegmentId]) -> Result<LogId> {
    let where_ = disk.describe();
    if !segment_ids.is_empty() {
        return Err(Error::NotALog {
            path: where_,
            reason: format!("{} segment files but no meta file", segment_ids.len()),
        });
    }
    if options.read_only {
        return Err(Error::NoLog { path: where_ });
    }
    let log = options.new_log_id.unwrap_or_else(|| {
        LogId(system_clock_ms().rotate_left(20) ^ u64::from(std::process::id()))
    });
    write_durably(disk, META_TMP_FILE, META_FILE, &snapshot::encode_meta(log))?;
    Ok(log)
}

/// The identity of an existing log.
fn read_meta(disk: &dyn Disk) -> Result<LogId> {
    let path = format!("{}/{META_FILE}", disk.describe());
    let file =
        disk.open(META_FILE, false).map_err(|source| Error::io("opening", path.clone(), source))?;
    let bytes =
        read_all(file.as_ref()).map_err(|source| Error::io("reading", path.clone(), source))?;
    snapshot::decode_meta(&bytes).map_err(|reason| Error::NotALog { path, reason })
}
