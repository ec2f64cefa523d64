//! `verify`: a full checksum scan of a log that is not open, independent of the index
//! and of the snapshot, for operators (`somnus logstore verify`).

use crate::disk::{Disk, read_all};
use crate::error::{Error, Result};
use crate::scan::{SegmentState, judge_segment};
use crate::snapshot::{META_FILE, SNAPSHOT_FILE, decode_meta, decode_snapshot};
use crate::{LogId, SegmentId, parse_segment_file_name, segment_file_name};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentCheck {
    pub segment: SegmentId,
    pub bytes: u64,
    pub records: u64,
    pub payload_bytes: u64,
    pub state: SegmentState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    pub log: Option<LogId>,
    pub segments: Vec<SegmentCheck>,
    /// Problems outside segments (the meta file); damage.
    pub problems: Vec<String>,
    /// Remarks that are not damage (a stale or unreadable snapshot, which open ignores).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// Whether anything the log once wrote whole is damaged.
    pub fn is_damaged(&self) -> bool {
        !self.problems.is_empty() || self.segments.iter().any(|check| check.state.is_damage())
    }

    pub fn records(&self) -> u64 {
        self.segments.iter().map(|check| check.records).sum()
    }
}

/// Scans every segment of the log in `disk` in full. Takes the directory's shared lock:
/// a log open for writing is refused (its head may be mid-write).
pub fn verify(disk: &dyn Disk) -> Result<VerifyReport> {
    let where_ = disk.describe();
    let _lock = disk.lock(false).map_err(|source| Error::io("locking", where_.clone(), source))?;
    let names = disk.list().map_err(|source| Error::io("listing", where_.clone(), source))?;
    let mut report =
        VerifyReport { log: None, segments: Vec::new(), problems: Vec::new(), notes: Vec::new() };
    if names.iter().any(|name| name == META_FILE) {
        let file = disk
            .open(META_FILE, false)
            .map_err(|source| Error::io("opening", format!("{where_}/{META_FILE}"), source))?;
        let bytes = read_all(file.as_ref())
            .map_err(|source| Error::io("reading", format!("{where_}/{META_FILE}"), source))?;
        match decode_meta(&bytes) {
            Ok(log) => report.log = Some(log),
            Err(reason) => report.problems.push(format!("{META_FILE}: {reason}")),
        }
    } else {
        report
            .problems
            .push(format!("no {META_FILE} file: not a somnus log, or its identity is lost"));
    }
    let mut ids: Vec<SegmentId> = names.iter().filter_map(|n| parse_segment_file_name(n)).collect();
    ids.sort();
    for id in &ids {
        let last = Some(id) == ids.last();
        report.segments.push(check_segment(disk, *id, report.log, last)?);
    }
    if names.iter().any(|name| name == SNAPSHOT_FILE) {
        let snapshot = disk
            .open(SNAPSHOT_FILE, false)
            .and_then(|file| read_all(file.as_ref()))
            .map_err(|error| error.to_string())
            .and_then(|bytes| decode_snapshot(&bytes));
        match snapshot {
            Err(reason) => report
                .notes
                .push(format!("{SNAPSHOT_FILE} unusable ({reason}): the next open scans")),
            Ok(snapshot) => {
                let present: Vec<(SegmentId, u64)> =
                    report.segments.iter().map(|c| (c.segment, c.bytes)).collect();
                if snapshot.segments != present || Some(snapshot.log) != report.log {
                    report.notes.push(format!(
                        "{SNAPSHOT_FILE} does not match the segments: the next open scans"
                    ));
                } else {
                    report.notes.push(format!(
                        "{SNAPSHOT_FILE} matches the segments: the next open loads it"
                    ));
                }
            }
        }
    }
    Ok(report)
}

/// Reads one segment file whole and judges it by the rules recovery applies.
fn check_segment(
    disk: &dyn Disk,
    id: SegmentId,
    log: Option<LogId>,
    last: bool,
) -> Result<SegmentCheck> {
    let name = segment_file_name(id);
    let path = format!("{}/{name}", disk.describe());
    let file =
        disk.open(&name, false).map_err(|source| Error::io("opening", path.clone(), source))?;
    let bytes = read_all(file.as_ref()).map_err(|source| Error::io("reading", path, source))?;
    let (state, scan) = judge_segment(id, log, &bytes, last);
    let records = scan.as_ref().map_or(&[][..], |scan| &scan.records[..]);
    Ok(SegmentCheck {
        segment: id,
        bytes: bytes.len() as u64,
        records: records.len() as u64,
        payload_bytes: records.iter().map(|record| record.header.payload_bytes()).sum(),
        state,
    })
}
