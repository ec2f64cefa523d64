//! Recovery at open: the index from the snapshot of a clean close if it describes
//! exactly the segment files present, else from a scan of every segment
//! (docs/format/log.md, "Recovery").

use super::insert_header;
use super::{RecoveryMode, RecoveryReport, Segment, SegmentDamage, SegmentFiles, Shared};
use crate::disk::{Disk, read_all};
use crate::error::{Error, Result};
use crate::format::SEGMENT_HEADER_BYTES;
use crate::scan::{SegmentState, judge_segment};
use crate::snapshot::{self, META_TMP_FILE, SNAPSHOT_FILE, SNAPSHOT_TMP_FILE, Snapshot};
use crate::{LogId, Lsn, SegmentId, segment_file_name};

/// Rebuilds the index of an existing log into `shared` (from the snapshot if it is
/// usable, else by a scan), records what it found in `report`, and removes the files a
/// writer must not find (the snapshot, temporary files). Returns the next LSN.
/// `listing` is the directory's file names and the segment ids among them, sorted.
pub(super) fn recover(
    disk: &dyn Disk,
    log: LogId,
    listing: (&[String], &[SegmentId]),
    read_only: bool,
    shared: &mut Shared,
    report: &mut RecoveryReport,
) -> Result<Lsn> {
    let (names, segment_ids) = listing;
    let has = |name: &str| names.iter().any(|n| n == name);
    let loaded = if has(SNAPSHOT_FILE) {
        load_snapshot(disk, log, segment_ids).map(|(snapshot, files)| {
            use_snapshot(&snapshot, files, shared);
            snapshot.next_lsn
        })
    } else {
        Err("no snapshot (the log was not closed cleanly)".to_string())
    };
    let next_lsn = match loaded {
        Ok(next_lsn) => {
            report.mode = RecoveryMode::Snapshot;
            next_lsn
        }
        Err(reason) => {
            report.mode =
                RecoveryMode::Scan { snapshot_refused: has(SNAPSHOT_FILE).then_some(reason) };
            scan_segments(disk, log, segment_ids, read_only, shared, report)?
        }
    };
    if !read_only {
        remove_leftovers(disk, &has)?;
    }
    Ok(next_lsn)
}

/// Fills the index and the segment table from a snapshot that checked out.
fn use_snapshot(snapshot: &Snapshot, files: SegmentFiles, shared: &mut Shared) {
    for (id, file) in files {
        shared.index.add_segment(id);
        let bytes = snapshot.segments.iter().find(|(s, _)| *s == id).map_or(0, |(_, len)| *len);
        shared.segments.insert(id, Segment { file, bytes });
    }
    for record in &snapshot.records {
        insert_header(&mut shared.index, &record.header, record.segment, record.offset);
    }
}

/// Deletes the snapshot and temporary files before the first write, so that no later
/// open can take a snapshot for a description of a log that changed since (and syncs
/// the directory if it removed any).
fn remove_leftovers(disk: &dyn Disk, has: &dyn Fn(&str) -> bool) -> Result<()> {
    let mut removed = false;
    for name in [SNAPSHOT_FILE, SNAPSHOT_TMP_FILE, META_TMP_FILE] {
        if has(name) {
            let path = format!("{}/{name}", disk.describe());
            disk.remove(name).map_err(|source| Error::io("removing", path, source))?;
            removed = true;
        }
    }
    if removed {
        disk.sync_dir().map_err(|source| Error::io("syncing", disk.describe(), source))?;
    }
    Ok(())
}

/// Loads the snapshot if it describes exactly the segment files present.
fn load_snapshot(
    disk: &dyn Disk,
    log: LogId,
    segment_ids: &[SegmentId],
) -> std::result::Result<(Snapshot, SegmentFiles), String> {
    let file = disk.open(SNAPSHOT_FILE, false).map_err(|error| error.to_string())?;
    let bytes = read_all(file.as_ref()).map_err(|error| error.to_string())?;
    let snapshot = snapshot::decode_snapshot(&bytes)?;
    if snapshot.log != log {
        return Err("the snapshot is of another log".into());
    }
    let listed: Vec<SegmentId> = snapshot.segments.iter().map(|(id, _)| *id).collect();
    if listed != segment_ids {
        return Err("the segment files changed since the snapshot".into());
    }
    let mut files = Vec::with_capacity(listed.len());
    for &(id, len) in &snapshot.segments {
        let file = disk.open(&segment_file_name(id), false).map_err(|error| error.to_string())?;
        if file.len().map_err(|error| error.to_string())? != len {
            return Err(format!("{id} changed length since the snapshot"));
        }
        files.push((id, file));
    }
    // The checksum vouches for the bytes, not for the code that wrote them: check that
    // every record is one the format allows, inside its segment.
    for record in &snapshot.records {
        let header = &record.header;
        let Ok(at) = snapshot.segments.binary_search_by_key(&record.segment, |(id, _)| *id) else {
            return Err(format!("a record in unknown {}", record.segment));
        };
        let segment_len = snapshot.segments[at].1;
        let inside = record.offset >= SEGMENT_HEADER_BYTES
            && record
                .offset
                .checked_add(header.encoded_bytes())
                .is_some_and(|end| end <= segment_len);
        if header.check().is_err() || !inside || header.lsn >= snapshot.next_lsn {
            return Err(format!(
                "an impossible record in {} at byte {}",
                record.segment, record.offset
            ));
        }
    }
    Ok((snapshot, files))
}

/// Rebuilds the index from every segment; returns the next LSN.
fn scan_segments(
    disk: &dyn Disk,
    log: LogId,
    segment_ids: &[SegmentId],
    read_only: bool,
    shared: &mut Shared,
    report: &mut RecoveryReport,
) -> Result<Lsn> {
    let mut lsn_max = Lsn(0);
    for &id in segment_ids {
        let last = Some(&id) == segment_ids.last();
        if let Some(lsn) = recover_segment(disk, log, id, last, read_only, shared, report)? {
            lsn_max = lsn_max.max(lsn);
        }
    }
    lsn_max.0.checked_add(1).map(Lsn).ok_or_else(|| Error::NotALog {
        path: disk.describe(),
        reason: "a record carries the largest possible LSN".into(),
    })
}

/// Scans one segment into the index, applying the rule `judge_segment` states: the last
/// segment's torn tail is cut away and its interrupted creation removed (unless
/// `read_only`); damage is reported and the file kept as found. Returns the highest LSN
/// found.
#[allow(clippy::too_many_arguments)]
fn recover_segment(
    disk: &dyn Disk,
    log: LogId,
    id: SegmentId,
    last: bool,
    read_only: bool,
    shared: &mut Shared,
    report: &mut RecoveryReport,
) -> Result<Option<Lsn>> {
    let name = segment_file_name(id);
    let path = format!("{}/{name}", disk.describe());
    let file = disk
        .open(&name, !read_only)
        .map_err(|source| Error::io("opening", path.clone(), source))?;
    let bytes =
        read_all(file.as_ref()).map_err(|source| Error::io("reading", path.clone(), source))?;
    report.bytes_scanned += bytes.len() as u64;
    let damage = |offset: u64, reason: String, records_after: u64| SegmentDamage {
        segment: id,
        offset,
        reason,
        records_after,
    };
    let mut file_bytes = bytes.len() as u64;
    let (state, scan) = judge_segment(id, Some(log), &bytes, last);
    match state {
        SegmentState::Clean => {}
        SegmentState::Unwritten => {
            if !read_only {
                disk.remove(&name).map_err(|source| Error::io("removing", path, source))?;
                disk.sync_dir().map_err(|source| Error::io("syncing", disk.describe(), source))?;
            }
            report.unwritten_removed.push(id);
            return Ok(None);
        }
        // Records the log cannot trust to be its own: the file is kept as evidence and
        // its bytes counted, but none of its records is returned.
        SegmentState::BadHeader(problem) => {
            report.damage.push(damage(0, format!("segment header: {problem}"), 0));
        }
        SegmentState::Torn { .. } => {
            let valid_end = scan.as_ref().map_or(file_bytes, |scan| scan.valid_end);
            report.torn_tails.push((id, valid_end));
            if !read_only {
                file.truncate(valid_end)
                    .and_then(|()| file.sync_all())
                    .map_err(|source| Error::io("truncating", path.clone(), source))?;
                file_bytes = valid_end;
            }
        }
        SegmentState::Damaged { offset, reason, records_after } => {
            report.damage.push(damage(offset, reason, records_after));
        }
    }
    shared.index.add_segment(id);
    let mut lsn_max = None;
    let valid_end = scan.as_ref().map_or(0, |scan| scan.valid_end);
    for record in scan.iter().flat_map(|scan| &scan.records) {
        let end = record.offset + record.header.encoded_bytes();
        assert!(end <= valid_end, "L4: {id}: a record past the segment's first bad byte");
        lsn_max = lsn_max.max(Some(record.header.lsn));
        insert_header(&mut shared.index, &record.header, id, record.offset);
    }
    shared.segments.insert(id, Segment { file, bytes: file_bytes });
    Ok(lsn_max)
}
