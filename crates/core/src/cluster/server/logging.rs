//! The logger every storage server runs for other servers' DVLs (Sierra 3.3): it logs
//! batches of writes, fences a group's older epochs when a new primary recovers the
//! DVL (after the appends it accepted before are durable, D4), reads records back, and
//! appends deletion markers, collecting segments after them (D5).
//!
//! Its log changes one commit at a time: each is planned when the one before it is
//! done, from the log as that one left it, and handed to the shell whole
//! (`DiskOp::LogCommit`); what waits meanwhile is queued here, in arrival order. A read
//! goes to the shell at once (`DiskOp::LogRead`) and is checked when it comes back.
//!
//! What waits is bounded by what the log holds, not by how often primaries ask: a
//! primary repeats a batch of writes or markers that is not answered in time, and a
//! logger behind (a gear's up-shift sends it the markers of hundreds of thousands of
//! reclaimed writes at once) would otherwise queue every repeat, fall further behind
//! with each, and grow without end. So a repeated batch of writes joins the one
//! waiting from the same owner, every waiting marker (of any group) goes into the
//! next markers' commit as a set, and a collection is queued once.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use somnus_types::{ChunkGroupId, ServerId, Version};

use super::disk::{DiskError, DiskOp};
use super::{Broken, Io, Server, ServerAction};
use crate::cluster::logvolume::{LogPiece, LogVolume, Staged};
use crate::cluster::{Epoch, LogRecord, Message, UnstableWrite};

/// A change of the log waiting for the commit before it.
#[derive(Debug)]
enum LogJob {
    Append {
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        writes: Vec<UnstableWrite>,
    },
    Fence {
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
    },
    /// Every marker waiting ([`LoggerWork::markers`]) when it comes up.
    Markers,
    Collect,
}

/// Whose markers: a primary of a group at an epoch (each is answered its own).
type MarkersOf = (ChunkGroupId, Epoch, ServerId);

/// What the logger has under way.
#[derive(Debug, Default)]
pub(super) struct LoggerWork {
    /// Per group: appends accepted and not yet durable, the recoveries waiting for
    /// them, and a fence not yet durable.
    in_flight: BTreeMap<ChunkGroupId, u32>,
    recoveries_waiting: BTreeMap<ChunkGroupId, Vec<(ServerId, Epoch)>>,
    fencing: BTreeMap<ChunkGroupId, Epoch>,
    /// Where the log's next write goes on the disk (it is written sequentially).
    position: u64,
    /// The changes waiting for the commit on the disk, if one is.
    jobs: VecDeque<LogJob>,
    committing: bool,
    /// Markers asked for and not yet committed, a set per primary (a repeat adds
    /// nothing); `jobs` holds one `Markers` while any wait.
    markers: BTreeMap<MarkersOf, BTreeSet<LogRecord>>,
    /// A `Collect` is in `jobs`.
    collect_queued: bool,
}

impl LoggerWork {
    pub(super) fn new(position: u64) -> LoggerWork {
        LoggerWork { position, ..LoggerWork::default() }
    }
}

impl Server {
    /// The epoch the logger answers to for `group`: the fenced one, or the one a fence
    /// in flight will set.
    fn log_epoch(&self, group: ChunkGroupId) -> Epoch {
        let fencing = self.logger.fencing.get(&group).copied().unwrap_or_default();
        self.log.fence(group).max(fencing)
    }

    pub(super) fn logger_message(&mut self, primary: ServerId, message: Message) {
        let (group, epoch) = match &message {
            Message::LogAppend { group, epoch, .. }
            | Message::LogRecover { group, epoch }
            | Message::LogRead { group, epoch, .. }
            | Message::LogInvalidate { group, epoch, .. } => (*group, *epoch),
            _ => return,
        };
        let known = self.log_epoch(group);
        let unfenced = self.broken == Some(Broken::ReclaimBeforeFencing);
        if epoch < known && !matches!(message, Message::LogRead { .. }) && !unfenced {
            let refused = Message::LogRefused { group, epoch, known };
            self.answer_primary(primary, refused);
            return;
        }
        match message {
            Message::LogAppend { writes, .. } => self.queue_append(group, epoch, primary, writes),
            Message::LogRecover { .. } => self.log_recover(primary, group, epoch),
            Message::LogRead { records, .. } => {
                let (reads, plan) = self.log.stage_read(group, records);
                let bytes = reads.iter().map(|r| r.range.size_bytes()).sum();
                let (position, op) = (self.logger.position, DiskOp::LogRead { reads });
                self.disk_log(Io::LogRead { to: primary, group, epoch, plan }, op, position, bytes);
            }
            Message::LogInvalidate { records, .. } => {
                if self.logger.markers.is_empty() {
                    self.logger.jobs.push_back(LogJob::Markers);
                }
                self.logger.markers.entry((group, epoch, primary)).or_default().extend(records);
                self.next_log_commit();
            }
            _ => {}
        }
    }

    /// Queues a batch of writes, or adds the writes it lacks to the batch from the same
    /// owner still waiting (a primary repeats a batch not answered in time; each
    /// version is in the log once either way).
    fn queue_append(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        writes: Vec<UnstableWrite>,
    ) {
        let waiting = self.logger.jobs.iter_mut().find_map(|job| match job {
            LogJob::Append { group: g, epoch: e, primary: p, writes }
                if (*g, *e, *p) == (group, epoch, primary) =>
            {
                Some(writes)
            }
            _ => None,
        });
        if let Some(queued) = waiting {
            for write in writes {
                if let Err(at) = queued.binary_search_by_key(&write.version, |w| w.version) {
                    queued.insert(at, write);
                }
            }
            return;
        }
        *self.logger.in_flight.entry(group).or_default() += 1;
        let mut writes = writes;
        writes.sort_by_key(|w| w.version);
        writes.dedup_by_key(|w| w.version);
        self.log_job(LogJob::Append { group, epoch, primary, writes });
    }

    fn log_job(&mut self, job: LogJob) {
        self.logger.jobs.push_back(job);
        self.next_log_commit();
    }

    /// Plans the next change waiting, unless a commit is on the disk: from the log as
    /// every commit before left it. A change with nothing to make durable is done at
    /// once.
    fn next_log_commit(&mut self) {
        while !self.logger.committing
            && let Some(job) = self.logger.jobs.pop_front()
        {
            let (io, commit) = match job {
                LogJob::Append { group, epoch, primary, writes } => {
                    let (commit, staged) = self.log.stage_append(group, epoch, &writes);
                    (Io::LogAppend { group, epoch, primary, staged }, commit)
                }
                LogJob::Fence { group, epoch, primary } => {
                    let (commit, staged) = self.log.stage_fence(group, epoch);
                    (Io::LogFence { group, epoch, primary, staged }, commit)
                }
                LogJob::Markers => {
                    let batches: Vec<(MarkersOf, Vec<LogRecord>)> =
                        std::mem::take(&mut self.logger.markers)
                            .into_iter()
                            .map(|(of, records)| (of, records.into_iter().collect()))
                            .collect();
                    let marks: Vec<(ChunkGroupId, &[LogRecord])> = batches
                        .iter()
                        .map(|((group, ..), records)| (*group, &records[..]))
                        .collect();
                    let (commit, staged) = self.log.stage_invalidates(&marks);
                    (Io::LogInvalidate { batches, staged }, commit)
                }
                LogJob::Collect => {
                    self.logger.collect_queued = false;
                    match self.log.stage_collect() {
                        Some((commit, staged)) => (Io::LogCollect { staged }, commit),
                        None => continue,
                    }
                }
            };
            if commit.is_empty() {
                self.log_io_done(io);
                continue;
            }
            debug_assert!(!self.logger.committing, "two commits of the log at once");
            self.logger.committing = true;
            let bytes = commit.record_bytes();
            let position = self.next_log_position(bytes);
            self.disk_log(io, DiskOp::LogCommit(commit), position, bytes);
        }
    }

    /// Where the log's next `bytes` go: the log is written sequentially.
    fn next_log_position(&mut self, bytes: u64) -> u64 {
        let position = self.logger.position;
        self.logger.position += bytes;
        position
    }

    fn log_recover(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        if self.broken == Some(Broken::ReclaimBeforeFencing) {
            // The broken variant answers at once and fences nothing.
            let records = self.log.records(group);
            self.answer_primary(primary, Message::LogRecovered { group, epoch, records });
            return;
        }
        if epoch == self.log.fence(group) {
            self.recovered_when_settled(primary, group, epoch);
        } else if epoch > self.log_epoch(group) {
            // A new fence: made durable first.
            self.logger.fencing.insert(group, epoch);
            self.log_job(LogJob::Fence { group, epoch, primary });
        }
    }

    /// Answers a recovery once no append accepted before the fence is in flight.
    fn recovered_when_settled(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        if self.logger.in_flight.get(&group).copied().unwrap_or(0) > 0 {
            self.logger.recoveries_waiting.entry(group).or_default().push((primary, epoch));
            return;
        }
        // D4: a recovery is answered only once its fence is durable (applied: its
        // commit is done) and no append of an older epoch is under way.
        assert!(
            self.log.fence(group) >= epoch,
            "D4: recovery of {group:?} at {epoch:?} answered before its fence is durable"
        );
        let records = self.log.records(group);
        self.answer_primary(primary, Message::LogRecovered { group, epoch, records });
    }

    /// A logger's I/O is done: a commit is applied and answered (and the next one
    /// planned), a read's pieces checked and sent.
    pub(super) fn log_io_done(&mut self, io: Io) {
        self.log_io_finished(io, None);
    }

    /// The shell's engine read `pieces` for the read `io`.
    pub(super) fn log_read(&mut self, io: Io, pieces: Vec<Vec<LogPiece>>) {
        self.log_io_finished(io, Some(pieces));
    }

    fn log_io_finished(&mut self, io: Io, pieces: Option<Vec<Vec<LogPiece>>>) {
        match io {
            Io::LogRead { to, group, epoch, plan } => {
                let writes = self.log.read_done(plan, pieces);
                self.answer_primary(to, Message::LogData { group, epoch, writes });
                return;
            }
            Io::LogAppend { group, epoch, primary, staged } => {
                let (versions, full) = answers_of(&staged);
                self.log.committed(staged);
                self.log_append_settled(group);
                if !full.is_empty() {
                    self.answer_primary(primary, Message::LogFull { group, epoch, versions: full });
                }
                self.answer_primary(primary, Message::LogAck { group, epoch, versions });
            }
            Io::LogFence { group, epoch, primary, staged } => {
                self.log.committed(staged);
                if self.logger.fencing.get(&group).is_some_and(|e| *e <= epoch) {
                    self.logger.fencing.remove(&group);
                }
                self.recovered_when_settled(primary, group, epoch);
            }
            Io::LogInvalidate { batches, staged } => {
                self.log.committed(staged);
                if !self.logger.collect_queued {
                    self.logger.collect_queued = true;
                    self.logger.jobs.push_back(LogJob::Collect);
                }
                for ((group, epoch, primary), records) in batches {
                    self.answer_primary(primary, Message::LogInvalidated { group, epoch, records });
                }
            }
            Io::LogCollect { staged } => {
                // Background: the copies are written at the head a piece at a time,
                // so foreground I/O waits for no more than a piece (one I/O of a
                // collection's hundreds of MiB held a logger's disk for seconds).
                let copied = self.log.committed(staged);
                if copied > 0 {
                    let position = self.next_log_position(copied);
                    for offset in (0..copied).step_by(COLLECT_PIECE_BYTES as usize) {
                        let bytes = COLLECT_PIECE_BYTES.min(copied - offset);
                        let op = DiskOp::LogCopies;
                        self.disk_log_with(Io::LogCopies, op, position + offset, bytes, true);
                    }
                }
            }
            // A collection's copies: nothing waits for them.
            _ => return,
        }
        self.log_commit_ended();
    }

    /// The disk could not do the logger's `io`. A commit that found no room took no
    /// effect: its appends are refused as full, its fence or markers unanswered (the
    /// primary asks again); any other error leaves what is durable unknown, and the
    /// server halts (its restart recovers the log). A read that failed is not answered.
    pub(super) fn log_io_failed(&mut self, io: Io, error: DiskError) {
        if let Io::LogRead { .. } = io {
            // Unanswered: the primary asks another holder. A log that read back bytes
            // other than it wrote is a fault of the log; a disk that failed the read
            // is not.
            if let DiskError::Corrupt { .. } = error {
                self.log.report_fault(format!("reading the log: {error}"));
            }
            return;
        }
        if self.broken == Some(Broken::FailedLogCommitTaken) && matches!(error, DiskError::Io(_)) {
            return self.log_io_done(io);
        }
        if !matches!(error, DiskError::NoSpace) {
            let reason = format!("the disk failed a commit of the logger's log: {error}");
            self.actions.push_back(ServerAction::Halt { reason });
            return;
        }
        match io {
            Io::LogAppend { group, epoch, primary, staged } => {
                let versions = staged.repeats.clone();
                let mut full = staged.full.clone();
                full.extend(&staged.appended);
                self.log.refused(staged);
                self.log_append_settled(group);
                self.answer_primary(primary, Message::LogFull { group, epoch, versions: full });
                self.answer_primary(primary, Message::LogAck { group, epoch, versions });
            }
            Io::LogFence { group, staged, .. } => {
                self.log.refused(staged);
                self.logger.fencing.remove(&group);
            }
            Io::LogInvalidate { staged, .. } | Io::LogCollect { staged } => {
                self.log.refused(staged)
            }
            _ => return,
        }
        self.log_commit_ended();
    }

    /// An append of `group` is no longer in flight: the recoveries that waited for
    /// the group's appends are answered once none is.
    fn log_append_settled(&mut self, group: ChunkGroupId) {
        let in_flight = self.logger.in_flight.entry(group).or_default();
        *in_flight = in_flight.saturating_sub(1);
        if *in_flight == 0 {
            self.logger.in_flight.remove(&group);
            let waiting = self.logger.recoveries_waiting.remove(&group).unwrap_or_default();
            for (primary, epoch) in waiting {
                self.recovered_when_settled(primary, group, epoch);
            }
        }
    }

    fn log_commit_ended(&mut self) {
        self.logger.committing = false;
        self.next_log_commit();
    }

    /// The logger's durable state (the simulation's end checks).
    pub fn log_volume(&self) -> &LogVolume {
        &self.log
    }
}

/// What an append's commit answers once durable: the versions logged (repeats and
/// those it appended), and those refused as full.
fn answers_of(staged: &Staged) -> (Vec<Version>, Vec<Version>) {
    let mut logged = staged.repeats.clone();
    logged.extend(&staged.appended);
    logged.sort_unstable();
    (logged, staged.full.clone())
}

/// The largest write of a collection's copies.
const COLLECT_PIECE_BYTES: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use somnus_types::{ByteRange, IoId, ObjectId, VirtualInstant};

    use super::*;
    use crate::cluster::server::{Durable, ServerEvent};
    use crate::cluster::{ChunkId, ChunkIndex, ClusterConfig, Payload, Peer, ServerPlaces, Stamp};
    use crate::layout::{Layout, LayoutSpec, RackAssignment, Scheme};

    const GROUP: ChunkGroupId = ChunkGroupId(0);
    const PRIMARY: ServerId = ServerId(1);

    /// Server 0 of a three-server cluster, as a logger, and what it asked of its disk
    /// so far (the commits waiting for `DiskDone`).
    fn logger() -> Server {
        let spec = LayoutSpec {
            servers: 3,
            replicas: 3,
            racks: 3,
            chunk_groups: 3,
            scheme: Scheme::PowerAware(RackAssignment::Rotated),
            seed: 1,
        };
        let topology = Arc::new(ServerPlaces::of(&Layout::build(&spec).unwrap()));
        let config = ClusterConfig::sierra();
        let durable = Durable::new(&config);
        Server::new(ServerId(0), config, topology, durable, VirtualInstant::ZERO, None)
    }

    fn write(version: u64) -> UnstableWrite {
        let chunk = ChunkId { object: ObjectId(7), chunk: ChunkIndex(0) };
        let range = ByteRange::new(version * 4096, 4096);
        let data = Payload::new(vec![version as u8; 4096].into());
        UnstableWrite { chunk, range, version: Version(version), stamp: Stamp(version), data }
    }

    fn record(w: &UnstableWrite) -> LogRecord {
        LogRecord { owner: Epoch(1), chunk: w.chunk, range: w.range, version: w.version }
    }

    fn from_primary(logger: &mut Server, message: Message) {
        let event = ServerEvent::MessageReceived { from: Peer::Server(PRIMARY), message };
        logger.handle(VirtualInstant::ZERO, event);
    }

    /// The commits asked of the disk since the last call, and what was sent.
    fn drain(logger: &mut Server) -> (Vec<IoId>, Vec<Message>) {
        let (mut commits, mut sent) = (Vec::new(), Vec::new());
        while let Some(action) = logger.poll_action() {
            match action {
                ServerAction::Disk { io, op: DiskOp::LogCommit(_), .. } => commits.push(io),
                ServerAction::Send { to: Peer::Server(PRIMARY), message } => sent.push(message),
                _ => {}
            }
        }
        (commits, sent)
    }

    fn done(logger: &mut Server, io: IoId) {
        logger.handle(VirtualInstant::ZERO, ServerEvent::DiskDone { io });
    }

    /// A primary that repeats its batches while the logger's disk is busy costs the
    /// logger nothing more: the repeats of a batch of writes join the one waiting, and
    /// every marker waiting (repeats and all) goes into one commit, answered once.
    #[test]
    fn repeated_batches_wait_once_and_waiting_markers_go_in_one_commit() {
        let mut logger = logger();
        let epoch = Epoch(1);
        let writes: Vec<UnstableWrite> = (1..=4).map(write).collect();
        let append = |writes: &[UnstableWrite]| Message::LogAppend {
            group: GROUP,
            epoch,
            writes: writes.to_vec(),
        };
        // The first batch is committing; the second waits, repeated many times.
        from_primary(&mut logger, append(&writes[..2]));
        let (first, _) = drain(&mut logger);
        assert_eq!(first.len(), 1, "the first batch goes to the disk at once");
        for _ in 0..100 {
            from_primary(&mut logger, append(&writes[2..]));
        }
        assert_eq!(logger.logger.jobs.len(), 1, "the repeats join the batch waiting");
        done(&mut logger, first[0]);
        let (second, answers) = drain(&mut logger);
        assert_eq!(second.len(), 1);
        let acked = |m: &Message| matches!(m, Message::LogAck { versions, .. } if versions == &[Version(1), Version(2)]);
        assert!(answers.iter().any(acked), "{answers:?}");
        done(&mut logger, second[0]);
        let (_, answers) = drain(&mut logger);
        let acked = |m: &Message| matches!(m, Message::LogAck { versions, .. } if versions == &[Version(3), Version(4)]);
        assert!(answers.iter().any(acked), "the waiting batch answered once: {answers:?}");
        assert_eq!(logger.log.records(GROUP).len(), 4);

        // Markers: one commit on the disk, then every repeat of every marker waits in
        // one set.
        let invalidate =
            |records: Vec<LogRecord>| Message::LogInvalidate { group: GROUP, epoch, records };
        from_primary(&mut logger, invalidate(vec![record(&writes[0])]));
        let (busy, _) = drain(&mut logger);
        assert_eq!(busy.len(), 1);
        for _ in 0..100 {
            for w in &writes[1..] {
                from_primary(&mut logger, invalidate(vec![record(w)]));
            }
        }
        let waiting: usize = logger.logger.markers.values().map(BTreeSet::len).sum();
        assert_eq!((logger.logger.jobs.len(), waiting), (1, 3), "one job, three markers");
        done(&mut logger, busy[0]);
        let (markers, answers) = drain(&mut logger);
        assert_eq!(markers.len(), 1, "the three markers in one commit");
        done(&mut logger, markers[0]);
        let (_, more) = drain(&mut logger);
        let invalidated: Vec<&Message> = answers
            .iter()
            .chain(&more)
            .filter(|m| matches!(m, Message::LogInvalidated { .. }))
            .collect();
        assert_eq!(
            invalidated.len(),
            2,
            "the first marker's answer, then the set's: {invalidated:?}"
        );
        assert!(logger.log.records(GROUP).is_empty(), "every record hidden");
    }
}
