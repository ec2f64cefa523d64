//! A primary's distributed virtual log (Sierra 3.3, docs/protocol.md "The DVL").
//!
//! While a replica of the group is down (asleep or failed, as the MDS reports), a
//! write goes to the primary's own replica and to r - 1 loggers in distinct racks,
//! away from the primary's rack and from the down replicas' gear groups, chosen in
//! 3.3.1's order (a replica's server, a replica's rack, the rest; least loaded first).
//! It is durable when the own copy and r - 1 log records are (C3). The DVL's map holds
//! every logged write until every replica has it applied (reclaim, background and
//! rate-limited, data read back from a logger) and every logger that may hold it has
//! appended its deletion marker (D5).
//!
//! A primary granted the group without a handoff recovers the map first: it fences
//! the old epoch at the loggers of the view and waits for L - r_L + 1 of them (D4),
//! then reads every record back and writes it again as its own, durably, before it
//! serves (the same adoption as a replica's unstable writes).

mod extents;
mod reads;

use std::collections::{BTreeMap, BTreeSet};

use somnus_types::{ChunkGroupId, ServerId, Version, VirtualDuration, VirtualInstant};

use super::primary::Led;
use super::resync::Resync;
use super::{Broken, Server};
use crate::cluster::mds::mix;
use crate::cluster::{
    ChunkId, DvlHandoff, Epoch, LogRecord, LoggedExtent, Message, Peer, UnstableWrite,
};
use extents::{Extent, Extents, Servers, first_record_of};
use reads::Reads;

/// One logger as a primary sees it: writes queued, one batch in flight (so the logger
/// appends the owner's versions in order, D1), and the newest version queued.
#[derive(Clone, Debug, Default)]
struct Link {
    queue: Vec<UnstableWrite>,
    in_flight: Vec<UnstableWrite>,
    sent_at: Option<VirtualInstant>,
    newest: Version,
    /// It answered full: not chosen again before this time.
    full_until: Option<VirtualInstant>,
}

impl Link {
    fn load_bytes(&self) -> u64 {
        self.queue.iter().chain(&self.in_flight).map(|w| w.range.size_bytes()).sum()
    }

    /// The logger answered for `versions` (appended, or full): they leave the batch in
    /// flight, and an emptied batch is due no retransmission.
    fn answered(&mut self, versions: &[Version]) {
        self.in_flight.retain(|w| !versions.contains(&w.version));
        if self.in_flight.is_empty() {
            self.sent_at = None;
        }
    }
}

/// Why a logged record is being read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// Recovered: write it again as this primary's own before serving.
    Adopt,
    /// Apply it to the replicas that lack it.
    Reclaim,
}

#[derive(Clone, Debug)]
struct Read {
    purpose: Purpose,
    /// The loggers asked so far: the answer of any is taken. A logger whose disk is
    /// slower than the retry interval still answers; taking only the last one asked
    /// would throw every answer away while reads alternate between two slow loggers.
    asked: Vec<ServerId>,
    /// The loggers that answered that no byte of the record is visible there.
    empty_at: Vec<ServerId>,
    /// When it counts as sent: a repeat's is moved later ([`backoff`]).
    sent_at: VirtualInstant,
    /// Times it was sent.
    sends: u32,
    /// No logger could be asked (every holder down, or up and answered empty): it
    /// waits, out of the reads due, until the lists of down or lost servers change.
    parked: bool,
}

impl Read {
    fn new(purpose: Purpose, now: VirtualInstant) -> Read {
        let (asked, empty_at) = (Vec::new(), Vec::new());
        Read { purpose, asked, empty_at, sent_at: now, sends: 0, parked: false }
    }
}

/// When a message sent at `now` for the `sends`-th time counts as sent, so that it is
/// late only after 2^sends retry intervals (at most 32): the n-th repeat to a logger
/// whose disk is slower than the retry interval waits twice as long as the one before.
/// Repeating at every interval instead queues more copies than the logger can
/// answer, each copy makes the queue longer, and the queue grows without end.
pub(super) fn backoff(now: VirtualInstant, retry: VirtualDuration, sends: u32) -> VirtualInstant {
    let intervals = (1u64 << sends.min(5)) - 1;
    now.saturating_add(VirtualDuration::from_nanos(retry.as_nanos().saturating_mul(intervals)))
}

/// A recovery from the loggers of the view: complete at L - r_L + 1 answers; the
/// later answers still name copies to invalidate (and writes never acknowledged).
#[derive(Clone, Debug)]
struct Recovery {
    complete: bool,
    need: usize,
    /// The loggers it recovers from: the view at the grant (the view may grow while
    /// the recovery runs, with loggers that hold none of the old epochs' records).
    from: Vec<ServerId>,
    answered: Vec<ServerId>,
    found: BTreeMap<LogRecord, Vec<ServerId>>,
    sent_at: VirtualInstant,
}

impl Recovery {
    fn unanswered(&self) -> Vec<ServerId> {
        self.from.iter().copied().filter(|l| !self.answered.contains(l)).collect()
    }

    /// Answers a recovery waits for; the broken variant stops one short of L - r_L + 1.
    fn need(&self, broken: Option<Broken>) -> usize {
        match broken {
            Some(Broken::TooFewLoggers) => self.need.saturating_sub(1),
            _ => self.need,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(super) struct Dvl {
    /// The logger view the MDS holds, and a change of it in flight.
    view: Vec<ServerId>,
    view_seq: u64,
    view_change: Option<(u64, Vec<ServerId>, VirtualInstant)>,
    recovery: Option<Recovery>,
    reads: Reads,
    extents: Extents,
    links: BTreeMap<ServerId, Link>,
    /// When the MDS was last asked to wake the replicas: a write found no loggers (P4).
    wake_asked_at: Option<VirtualInstant>,
    /// When the reads were last looked over for holders to wake (P7).
    holders_asked_at: Option<VirtualInstant>,
    /// Copies of a chunk from this primary's own replica to a replica that lacks
    /// records whose every log holder is lost (R3), by chunk and replica: when the
    /// copy was read, and the records its answer applies.
    own_copies: BTreeMap<(ChunkId, ServerId), (VirtualInstant, Vec<LogRecord>)>,
    /// The replicas are made equal before serving: the map was recovered without a
    /// lost logger's records (R4, `server/resync.rs`).
    pub(super) resync: Option<Resync>,
    /// Timer visits in a row that found nothing to do, and the time before which the
    /// work left needs no visit ([`Dvl::idle_visit`]).
    idle_visits: u32,
    work_not_before: VirtualInstant,
}

impl Dvl {
    /// The DVL of a new primary: the handed-off map, or one to recover from the view.
    pub(super) fn new(view: Vec<ServerId>, handoff: Option<DvlHandoff>, r_l: usize) -> Dvl {
        let mut dvl = Dvl { view, ..Dvl::default() };
        match handoff {
            Some(handoff) => {
                if !handoff.unrecovered.is_empty() {
                    dvl.recovery = Some(Recovery {
                        complete: true,
                        need: 0,
                        from: handoff.unrecovered,
                        answered: Vec::new(),
                        found: BTreeMap::new(),
                        sent_at: VirtualInstant::ZERO,
                    });
                }
                for e in handoff.extents {
                    let extent = dvl.extents.entry(e.record);
                    extent.holders = Servers::from_vec(e.holders);
                    extent.loggers = Servers::from_vec(e.loggers);
                    extent.applied = Servers::from_vec(e.applied);
                }
            }
            None if !dvl.view.is_empty() => {
                // Any r_L loggers of the view meet any L - r_L + 1 of them (D4).
                let l = dvl.view.len();
                let need = (l + 1).saturating_sub(r_l).clamp(1, l);
                dvl.recovery = Some(Recovery {
                    complete: false,
                    need,
                    from: dvl.view.clone(),
                    answered: Vec::new(),
                    found: BTreeMap::new(),
                    sent_at: VirtualInstant::ZERO,
                });
            }
            None => {}
        }
        dvl
    }

    /// Recovered and every recovered record read back: the primary may serve.
    pub(super) fn ready(&self) -> bool {
        self.recovery.as_ref().is_none_or(|r| r.complete)
            && self.reads.count(Purpose::Adopt) == 0
            && self.resync.as_ref().is_none_or(Resync::pulled)
    }

    /// Nothing logged, nothing under way: the simulation's end check.
    pub(super) fn is_empty(&self) -> bool {
        self.extents.is_empty()
            && self.reads.is_empty()
            && self.recovery.is_none()
            && self.resync.is_none()
    }

    /// What is left, in a line: the first extent, reads, the recovery.
    pub(super) fn describe(&self) -> String {
        let first = self.extents.iter().next().map(|(record, e)| {
            format!(
                "{record:?} holders {:?} loggers {:?} applied {:?} invalidated {:?}",
                e.holders, e.loggers, e.applied, e.invalidated
            )
        });
        let recovery =
            self.recovery.as_ref().map(|r| (r.complete, r.from.clone(), r.answered.clone()));
        format!(
            "{} extents (first {first:?}), {} reads, recovery {recovery:?}",
            self.extents.len(),
            self.reads.len()
        )
    }

    /// Whether a read of `range` of `chunk` must wait: the own replica lacks a logged
    /// write over it (it was down when the write was logged).
    pub(super) fn hides(
        &self,
        own: ServerId,
        chunk: crate::cluster::ChunkId,
        range: somnus_types::ByteRange,
    ) -> bool {
        self.lacking(own, chunk, range).next().is_some()
    }

    /// The logged writes over `range` of `chunk` that `own` lacks.
    fn lacking(
        &self,
        own: ServerId,
        chunk: crate::cluster::ChunkId,
        range: somnus_types::ByteRange,
    ) -> impl Iterator<Item = (&LogRecord, &Extent)> {
        self.extents
            .of_chunk_over(chunk, range)
            .filter(move |(_, extent)| !extent.applied.contains(&own))
    }

    /// Notes the copies from the own replica that `wanted` asks for, each record as sent
    /// back (reclaim reads it again if no answer comes), and returns the chunks to
    /// read: one copy per chunk and replica at a time, another once it is late.
    fn start_own_copies(
        &mut self,
        wanted: BTreeMap<(ChunkId, ServerId), Vec<LogRecord>>,
        now: VirtualInstant,
        retry: VirtualDuration,
    ) -> Vec<(ChunkId, ServerId)> {
        let mut reads = Vec::new();
        for (key, records) in wanted {
            for record in &records {
                self.extents.reclaim_sent(record, now);
            }
            // One under way read the chunk before these records were due: they wait
            // for the next.
            if self.own_copies.get(&key).is_some_and(|(at, _)| at.saturating_add(retry) > now) {
                continue;
            }
            self.own_copies.insert(key, (now, records));
            reads.push(key);
        }
        reads
    }

    /// Whether a replica of `replicas` lacks a write that only `own`'s replica holds
    /// any more (every logger of it lost).
    pub(super) fn lacks_own_copies(
        &self,
        own: ServerId,
        lost: &BTreeSet<ServerId>,
        replicas: &[ServerId],
    ) -> bool {
        self.extents.iter().any(|(_, e)| {
            e.applied.contains(&own)
                && !e.holders.is_empty()
                && e.holders.iter().all(|l| lost.contains(l))
                && replicas.iter().any(|r| !e.applied.contains(r))
        })
    }

    /// The records a copy of `chunk` from the own replica to `replica` was for, once
    /// `replica` holds it.
    pub(super) fn own_copy_done(&mut self, chunk: ChunkId, replica: ServerId) -> Vec<LogRecord> {
        self.own_copies.remove(&(chunk, replica)).map(|(_, records)| records).unwrap_or_default()
    }

    /// Every parked read due again (the servers down or lost changed).
    pub(super) fn unpark_reads(&mut self) {
        self.reads.unpark_all();
        self.end_backoff();
    }

    /// The records over `range` of `chunk` the own replica lacks, each now read back
    /// (a read of the reclaim's, started at once if none is under way, past the
    /// reclaim's limit: a client waits for it).
    pub(super) fn read_back_lacking(
        &mut self,
        own: ServerId,
        chunk: crate::cluster::ChunkId,
        range: somnus_types::ByteRange,
        now: VirtualInstant,
    ) -> Vec<LogRecord> {
        let lacking: Vec<LogRecord> =
            self.lacking(own, chunk, range).map(|(record, _)| *record).collect();
        for record in &lacking {
            self.reads.start(*record, Purpose::Reclaim, now);
        }
        lacking
    }

    /// The records whose reads ended since the last call (and are not read again):
    /// a demand read awaiting none of them has nothing new.
    pub(super) fn take_ended_reads(&mut self) -> std::collections::BTreeSet<LogRecord> {
        self.reads.take_ended()
    }

    /// The state handed to the next primary with the lease (Sierra 3.3.2).
    pub(super) fn handoff(&self) -> DvlHandoff {
        let extents = self.extents.iter().map(|(record, extent)| LoggedExtent {
            record: *record,
            holders: extent.holders.to_vec(),
            loggers: extent.loggers.to_vec(),
            applied: extent.applied.to_vec(),
        });
        let unrecovered = self.recovery.as_ref().map_or_else(Vec::new, Recovery::unanswered);
        DvlHandoff { extents: extents.collect(), unrecovered }
    }

    /// The earliest time a message of the DVL is due again, or none.
    pub(super) fn oldest_sent(&self) -> Option<VirtualInstant> {
        let links = self.links.values().filter_map(|l| l.sent_at);
        let reads = self.reads.oldest_sent();
        let invalidations = self.extents.oldest_invalidation_sent();
        let view = self.view_change.iter().map(|(_, _, at)| *at);
        let recovery = self.recovery.iter().map(|r| r.sent_at);
        links.chain(reads).chain(invalidations).chain(view).chain(recovery).min()
    }

    /// Drops the logged writes of `objects` (freed): no replica needs them any more,
    /// so they go straight to their deletion markers (D5) instead of being read back
    /// and reclaimed. How many.
    pub(super) fn drop_objects(
        &mut self,
        objects: &[somnus_types::ObjectId],
        replicas: &[ServerId],
    ) -> usize {
        let objects: std::collections::BTreeSet<_> = objects.iter().copied().collect();
        let dropped: Vec<LogRecord> = self
            .extents
            .iter()
            .filter(|(record, e)| {
                objects.contains(&record.chunk.object) && e.applied.as_slice() != replicas
            })
            .map(|(record, _)| *record)
            .collect();
        for record in &dropped {
            if let Some(extent) = self.extents.get_mut(record) {
                extent.applied = Servers::from_slice(replicas);
            }
            self.reads.remove(record);
        }
        dropped.len()
    }

    /// Whether work waits on a retry without a message in flight (reclaim to do, a
    /// resync under way).
    pub(super) fn has_work(&self) -> bool {
        !self.extents.is_empty()
            || self.links.values().any(|l| !l.queue.is_empty())
            || self.resync.is_some()
    }

    /// The earliest time the timer need look at the work again: while replicas sleep,
    /// a group's logged writes wait for hours, and a visit every retry interval that
    /// finds nothing to do (each awake primary's timer over every group it leads,
    /// five times a second) was about twenty group visits per request of a geared
    /// replay.
    pub(super) fn work_not_before(&self) -> VirtualInstant {
        self.work_not_before
    }

    /// A timer visit at `now` did nothing (`idle`) or something: an idle one puts the
    /// next off by [`backoff`] (1, 3, 7, ... up to 31 retry intervals), one that did
    /// something ends the backoff. Work an event makes possible (a reply, a replica
    /// back) is done in its handler; what only time frees (a logger that answered
    /// full, a late copy) waits at most the longest backoff.
    pub(super) fn idle_visit(&mut self, now: VirtualInstant, retry: VirtualDuration, idle: bool) {
        if idle {
            self.idle_visits = self.idle_visits.saturating_add(1);
            self.work_not_before = backoff(now, retry, self.idle_visits);
        } else {
            self.end_backoff();
        }
    }

    /// What the work waits for changed (a replica synced again, the servers down or
    /// lost): the next timer looks at it a retry interval from now.
    pub(super) fn end_backoff(&mut self) {
        self.idle_visits = 0;
        self.work_not_before = VirtualInstant::ZERO;
    }
}

impl Server {
    fn r_l(&self) -> usize {
        self.config.replicas as usize - 1
    }

    /// Sends recovery requests to the loggers of the view that have not answered.
    pub(super) fn send_recovery(&mut self, group: ChunkGroupId) {
        let (now, broken) = (self.now, self.broken);
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let Some(recovery) = led.dvl.recovery.as_mut() else { return };
        if !recovery.complete && recovery.need(broken) == 0 {
            // Only the broken variant gets here: it trusts an empty answer.
            led.dvl.recovery = None;
            return;
        }
        // A lost logger never answers. A write whose r_L loggers were all lost has no
        // copy in the log left to find, so with k lost the recovery needs to meet only
        // the other acknowledgement sets: L - r_L + 1 - (k - r_L + 1) answers once k
        // reaches r_L, which is every logger left (with r = 2, one logger each write,
        // waiting for the lost one's answer would wait for ever). Such a write's only
        // copy is then on the replicas that applied it (its old primary's own): nothing
        // here finds it, and the resync below brings it to the others (R4).
        let lost = &self.lost;
        // R4: a logger lost before it answered took with it what it alone knew of
        // the replicas' writes: they are made equal before this primary serves.
        if recovery.from.iter().any(|l| lost.contains(l) && !recovery.answered.contains(l))
            && broken != Some(Broken::SkipResync)
        {
            led.dvl.resync.get_or_insert_with(Resync::default);
        }
        let Some(recovery) = led.dvl.recovery.as_mut() else { return };
        recovery.from.retain(|l| !lost.contains(l));
        recovery.need = recovery.need.min(recovery.from.len());
        if !recovery.complete && recovery.answered.len() >= recovery.need(broken) {
            self.complete_recovery(group);
            return self.send_recovery(group);
        }
        if recovery.complete && recovery.unanswered().is_empty() {
            led.dvl.recovery = None;
            return;
        }
        recovery.sent_at = now;
        let asked = recovery.unanswered();
        for logger in asked {
            self.send_logger(logger, Message::LogRecover { group, epoch });
        }
    }

    fn send_logger(&mut self, logger: ServerId, message: Message) {
        if logger == self.id {
            self.logger_message(self.id, message);
        } else {
            self.send(Peer::Server(logger), message);
        }
    }

    /// Answers of loggers to this server's primaries.
    pub(super) fn dvl_message(&mut self, logger: ServerId, message: Message) {
        let (group, epoch) = match &message {
            Message::LogAck { group, epoch, .. }
            | Message::LogFull { group, epoch, .. }
            | Message::LogRefused { group, epoch, .. }
            | Message::LogRecovered { group, epoch, .. }
            | Message::LogData { group, epoch, .. }
            | Message::LogInvalidated { group, epoch, .. } => (*group, *epoch),
            _ => return,
        };
        if self.led.get(&group).is_none_or(|led| led.epoch != epoch) {
            return;
        }
        match message {
            Message::LogAck { versions, .. } => self.log_acked(group, logger, &versions),
            Message::LogFull { versions, .. } => self.log_full(group, logger, &versions),
            // A newer primary fenced this logger: this one is deposed.
            Message::LogRefused { known, .. }
                if known > epoch && self.broken != Some(Broken::SkipEpochCheck) =>
            {
                self.step_down(group);
            }
            Message::LogRecovered { records, .. } => self.log_recovered(group, logger, records),
            Message::LogData { writes, .. } => self.log_data(group, logger, writes),
            Message::LogInvalidated { records, .. } => {
                self.log_invalidated(group, logger, &records)
            }
            _ => {}
        }
    }

    fn log_recovered(&mut self, group: ChunkGroupId, logger: ServerId, records: Vec<LogRecord>) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let Some(recovery) = led.dvl.recovery.as_mut() else { return };
        if !recovery.from.contains(&logger) || recovery.answered.contains(&logger) {
            return;
        }
        recovery.answered.push(logger);
        if recovery.complete {
            // A late answer: its copies are invalidated with the rest; a write only it
            // holds was never acknowledged, and is reclaimed like any other.
            let epoch = led.epoch;
            for record in records.into_iter().filter(|r| r.owner != epoch) {
                let extent = led.dvl.extents.entry(record);
                add(&mut extent.holders, [logger]);
                add(&mut extent.loggers, [logger]);
            }
            if recovery.unanswered().is_empty() {
                led.dvl.recovery = None;
            }
            return;
        }
        for record in records {
            recovery.found.entry(record).or_default().push(logger);
        }
        self.complete_recovery(group);
    }

    /// Completes the recovery of `group` once it has the answers it needs: the records
    /// found are read back and adopted.
    fn complete_recovery(&mut self, group: ChunkGroupId) {
        let (broken, now) = (self.broken, self.now);
        let Some(led) = self.led.get_mut(&group) else { return };
        let Some(recovery) = led.dvl.recovery.as_mut() else { return };
        let need = recovery.need(broken);
        if recovery.complete || recovery.answered.len() < need {
            return;
        }
        recovery.complete = true;
        let found = std::mem::take(&mut recovery.found);
        // The broken variant asks no one more once it has its (too few) answers.
        if recovery.unanswered().is_empty() || broken == Some(Broken::TooFewLoggers) {
            led.dvl.recovery = None;
        }
        let epoch = led.epoch;
        for (record, loggers) in found {
            // This primary's own records (logged while the recovery ran) are known.
            if record.owner == epoch {
                continue;
            }
            let extent = led.dvl.extents.entry(record);
            add(&mut extent.holders, loggers.iter().copied());
            add(&mut extent.loggers, loggers);
            led.dvl.reads.restart(record, Purpose::Adopt, now);
        }
        self.send_reads(group, false);
        self.admit(group);
    }

    /// Asks the next logger of each read not yet asked (or whose logger is late).
    pub(super) fn send_reads(&mut self, group: ChunkGroupId, late_only: bool) {
        let (now, retry, own, broken) =
            (self.now, self.config.retry_interval, self.id, self.broken);
        let (down, lost) = (&self.down, &self.lost);
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let replicas = &led.replicas;
        let mut batches: BTreeMap<ServerId, Vec<LogRecord>> = BTreeMap::new();
        let mut gone = Vec::new();
        let mut own_copies: BTreeMap<(ChunkId, ServerId), Vec<LogRecord>> = BTreeMap::new();
        // The reads not sent yet, or (on the timer) those late: never every read.
        let candidates =
            if late_only { led.dvl.reads.late(now, retry) } else { led.dvl.reads.unsent() };
        for record in candidates {
            let Some(extent) = led.dvl.extents.get(&record) else {
                gone.push(record);
                continue;
            };
            let Some(read) = led.dvl.reads.get(&record) else { continue };
            if extent.holders.iter().all(|l| lost.contains(l) || read.empty_at.contains(l)) {
                gone.push(record);
                if read.purpose == Purpose::Reclaim
                    && extent.applied.contains(&own)
                    && extent.holders.iter().all(|l| lost.contains(l))
                {
                    // R3: every copy in the log is gone with its logger, but this
                    // primary's own replica holds the write: the replicas that lack it
                    // get it from there (with r = 2 the own copy and one logger's
                    // were all there was).
                    for (i, replica) in replicas.iter().enumerate() {
                        if led.synced[i] && !extent.applied.contains(replica) {
                            own_copies.entry((record.chunk, *replica)).or_default().push(record);
                        }
                    }
                    continue;
                }
                // R3: every copy in the log is gone with its logger, or shows no byte
                // (a holder declared lost after the others answered empty counts
                // here, not only at an answer); as when no holder shows a byte, the
                // record is done with (the replicas decide). A recovered record lost
                // so may be on some replicas alone: they are made equal (R4).
                if read.purpose == Purpose::Adopt
                    && extent.holders.iter().all(|l| lost.contains(l))
                    && broken != Some(Broken::SkipResync)
                {
                    led.dvl.resync.get_or_insert_with(Resync::default);
                }
                led.dvl.extents.done_with(&record, replicas);
                continue;
            }
            let up: Vec<ServerId> =
                extent.holders.iter().copied().filter(|l| *l == own || !down.contains(l)).collect();
            // One not asked yet, else the one asked longest ago that may still
            // answer (`asked` is kept in the order of the last asks).
            let next = up.iter().find(|l| !read.asked.contains(l)).copied();
            let may_answer = |l: &&ServerId| up.contains(l) && !read.empty_at.contains(l);
            let next = next.or_else(|| read.asked.iter().find(may_answer).copied());
            let Some(logger) = next else {
                // Every holder is down, or up and answered empty: nothing changes that
                // until the lists of down or lost servers do (`unpark_reads`). Parked,
                // it leaves the reads every admitted request and timer walk: while a
                // gear sleeps, a group has hundreds of thousands.
                led.dvl.reads.update(&record, |read| read.parked = true);
                continue;
            };
            led.dvl.reads.update(&record, |read| {
                read.asked.retain(|l| *l != logger);
                read.asked.push(logger);
                read.sent_at = backoff(now, retry, read.sends);
                read.sends += 1;
            });
            batches.entry(logger).or_default().push(record);
        }
        for record in gone {
            led.dvl.reads.remove(&record);
        }
        let copies = led.dvl.start_own_copies(own_copies, now, retry);
        for (logger, records) in batches {
            self.send_logger(logger, Message::LogRead { group, epoch, records });
        }
        for (chunk, replica) in copies {
            self.rebuild_read(replica, group, epoch, chunk);
        }
        self.wake_holders(group);
        // Records done with here (superseded, or their holders lost) leave demand
        // reads to start again.
        self.serve_demand_reads(group, false);
    }

    /// P7: a client read awaiting a record no holder of which is up to ask (they
    /// sleep: the gear shifted down after this primary took over from the replica
    /// that had the write) would wait for the next up-shift, hours away: the MDS is
    /// asked to wake the holders that sleep, again each request timeout while reads
    /// wait (the demand reads are refused and come back at that pace); the reads are
    /// looked over at that pace too, not at each admitted request. Reclaim alone
    /// waits for a gear that wakes them (the loggers keep the write).
    fn wake_holders(&mut self, group: ChunkGroupId) {
        let (now, retry, own) = (self.now, self.config.request_timeout, self.id);
        if self.broken == Some(Broken::NeverWakeHolders) {
            return;
        }
        let Some(led) = self.led.get_mut(&group) else { return };
        let dvl = &led.dvl;
        if led.demand.is_empty()
            || !dvl.reads.any_parked()
            || dvl.holders_asked_at.is_some_and(|at| at.saturating_add(retry) > now)
        {
            return;
        }
        led.dvl.holders_asked_at = Some(now);
        let dvl = &led.dvl;
        let mut asleep = Vec::new();
        for record in led.demand.iter().flat_map(|d| &d.awaiting) {
            if !dvl.reads.get(record).is_some_and(|read| read.parked) {
                continue;
            }
            let Some(extent) = dvl.extents.get(record) else { continue };
            let sleeping = extent
                .holders
                .iter()
                .copied()
                .filter(|l| *l != own && self.down.contains(l) && !self.lost.contains(l));
            add(&mut asleep, sleeping);
        }
        if asleep.is_empty() {
            return;
        }
        asleep.sort_unstable();
        let epoch = led.epoch;
        self.counters.holder_wakes_asked += 1;
        self.send(Peer::Mds, Message::WakeHolders { group, epoch, servers: asleep });
    }

    fn log_data(
        &mut self,
        group: ChunkGroupId,
        logger: ServerId,
        writes: Vec<(LogRecord, Option<UnstableWrite>)>,
    ) {
        let replicas = match self.led.get(&group) {
            Some(led) => led.replicas.clone(),
            None => return,
        };
        let lost = self.lost.clone();
        for (record, write) in writes {
            let Some(led) = self.led.get_mut(&group) else { return };
            let Some(read) = led.dvl.reads.get(&record) else { continue };
            if !read.asked.contains(&logger) {
                continue;
            }
            let purpose = read.purpose;
            let Some(write) = write else {
                // No byte of it is visible at this holder: ask the next one; when no
                // holder shows a byte, newer writes the same primary logged over all of it
                // were applied everywhere and invalidated (it is superseded).
                let extents = &led.dvl.extents;
                let tried_all = led.dvl.reads.update(&record, |read| {
                    add(&mut read.empty_at, [logger]);
                    let tried_all = extents.get(&record).is_none_or(|e| {
                        // A lost holder's copy is gone: the others decide.
                        e.holders.iter().all(|l| read.empty_at.contains(l) || lost.contains(l))
                    });
                    if !tried_all {
                        read.sent_at = VirtualInstant::ZERO;
                    }
                    tried_all
                });
                if tried_all == Some(true) {
                    led.dvl.reads.remove(&record);
                    led.dvl.extents.done_with(&record, &replicas);
                }
                continue;
            };
            led.dvl.reads.remove(&record);
            self.demand_found(group, &record, &write);
            match purpose {
                Purpose::Adopt => self.adopt_logged(group, write),
                Purpose::Reclaim => self.reclaim_write(group, &record, write),
            }
        }
        self.send_reads(group, true);
        self.admit(group);
    }

    /// Writes again, under this epoch, a write recovered from the loggers; its old
    /// records are invalidated once the new copies are durable.
    fn adopt_logged(&mut self, group: ChunkGroupId, write: UnstableWrite) {
        let now = self.now;
        let Some(led) = self.led.get_mut(&group) else { return };
        if led.pending.contains_key(&write.version) {
            return;
        }
        let version = write.version;
        led.last_version = led.last_version.max(version);
        led.insert_adopted(write, now);
        self.counters.writes_adopted += 1;
        self.send_write(group, version, super::primary::Targets::All);
        self.log_pending(group);
    }

    /// Sends a logged write read back to every replica that lacks it.
    fn reclaim_write(&mut self, group: ChunkGroupId, record: &LogRecord, write: UnstableWrite) {
        let now = self.now;
        let Some(led) = self.led.get_mut(&group) else { return };
        let (epoch, stable) = (led.epoch, led.stable());
        if !led.dvl.extents.reclaim_sent(record, now) {
            return;
        }
        let Some(extent) = led.dvl.extents.get(record) else { return };
        let targets: Vec<ServerId> = led
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| led.synced[*i] && !extent.applied.contains(r))
            .map(|(_, r)| *r)
            .collect();
        self.write_to(targets, group, epoch, write, stable);
    }

    /// A replica acknowledged a version no write pends at: a reclaimed one.
    pub(super) fn reclaim_acked(
        &mut self,
        group: ChunkGroupId,
        replica: ServerId,
        version: Version,
    ) {
        let Some(led) = self.led.get(&group) else { return };
        let records = led.dvl.extents.of_version(version);
        self.applied_at(group, replica, records);
    }

    /// `replica` holds the chunk this primary's own replica copied to it (R3): the
    /// records the copy was for are applied there.
    pub(super) fn own_copy_acked(
        &mut self,
        group: ChunkGroupId,
        replica: ServerId,
        chunk: ChunkId,
    ) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let records = led.dvl.own_copy_done(chunk, replica);
        if !records.is_empty() {
            self.applied_at(group, replica, records);
        }
    }

    /// `replica` has applied `records`: a record on every ready replica needs no more
    /// copies, and one on every replica gets its deletion markers.
    fn applied_at(&mut self, group: ChunkGroupId, replica: ServerId, records: Vec<LogRecord>) {
        let down = &self.down;
        let Some(led) = self.led.get_mut(&group) else { return };
        let mut ready = None;
        for record in records {
            let Some(extent) = led.dvl.extents.get(&record) else { continue };
            if extent.applied.contains(&replica) {
                continue;
            }
            let ready = ready.get_or_insert_with(|| led.ready_replicas(down));
            let Some(extent) = led.dvl.extents.get_mut(&record) else { continue };
            extent.applied.push(replica);
            if led.replicas.iter().all(|r| extent.applied.contains(r)) {
                // On every replica now: counted once, however many copies it took.
                self.counters.writes_reclaimed += 1;
            }
            if ready.iter().all(|r| extent.applied.contains(r)) {
                led.dvl.extents.reclaim_done(&record);
            }
        }
        self.send_invalidations(group);
        // A place freed: the next record is read back now, not at the next timer.
        self.reclaim(group);
    }

    /// A write of this primary that is durable: if it was logged, it joins the map;
    /// if it was adopted from the log, its old records are superseded.
    pub(super) fn logged_write_done(
        &mut self,
        group: ChunkGroupId,
        write: UnstableWrite,
        holders: Vec<ServerId>,
        loggers: Vec<ServerId>,
        applied: Vec<ServerId>,
    ) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let replicas = led.replicas.clone();
        // Durable already: copies not yet sent are not needed.
        for link in led.dvl.links.values_mut() {
            link.queue.retain(|w| w.version != write.version);
        }
        // An older epoch's record of an adopted write: the new copies replace it.
        let this_epoch = first_record_of(epoch);
        for record in led.dvl.extents.of_version(write.version) {
            if record < this_epoch {
                led.dvl.extents.done_with(&record, &replicas);
            }
        }
        if !loggers.is_empty() {
            let record = LogRecord {
                owner: epoch,
                chunk: write.chunk,
                range: write.range,
                version: write.version,
            };
            // The same write adopted twice (from two replicas) is logged twice: one
            // extent names every copy.
            let extent = led.dvl.extents.entry(record);
            add(&mut extent.holders, holders);
            add(&mut extent.loggers, loggers.iter().copied());
            add(&mut extent.applied, applied.iter().copied());
        }
        // It reaches every replica (applied everywhere, or logged and so reclaimed):
        // the older logged writes it covers whole are stale (Sierra 3.3.3).
        if !loggers.is_empty() || replicas.iter().all(|r| applied.contains(r)) {
            self.supersede(group, &write);
        }
        self.send_invalidations(group);
    }

    /// The logged writes older than `write` that it covers whole are done with: no
    /// replica needs them (each byte's newest version is `write`'s, which reaches
    /// every replica), so they are neither read back nor reclaimed, and their
    /// deletion markers are due. Without this a hot block's DVL keeps every version
    /// written while a gear slept (thousands), and a read of it back from the loggers
    /// waits for all of them (Sierra 3.3.3: the older version becomes stale).
    fn supersede(&mut self, group: ChunkGroupId, write: &UnstableWrite) {
        let overlapped_will_do = self.broken == Some(Broken::SupersedeOverlapped);
        let Some(led) = self.led.get_mut(&group) else { return };
        let covers = |r: &LogRecord| write.range.contains(r.range) || overlapped_will_do;
        let lacked = |e: &Extent| led.replicas.iter().any(|r| !e.applied.contains(r));
        let stale: Vec<LogRecord> = led
            .dvl
            .extents
            .of_chunk_over(write.chunk, write.range)
            .filter(|(r, e)| r.version < write.version && covers(r) && lacked(e))
            .map(|(record, _)| *record)
            .collect();
        for record in stale {
            led.dvl.extents.done_with(&record, &led.replicas);
            led.dvl.extents.reclaim_done(&record);
            led.dvl.reads.remove(&record);
            self.counters.logged_writes_superseded += 1;
        }
    }

    fn log_acked(&mut self, group: ChunkGroupId, logger: ServerId, versions: &[Version]) {
        let Some(led) = self.led.get_mut(&group) else { return };
        if let Some(link) = led.dvl.links.get_mut(&logger) {
            link.answered(versions);
        }
        for version in versions {
            if let Some(pending) = led.pending.get_mut(version) {
                for (l, acked) in pending.logged.iter_mut() {
                    if *l == logger {
                        *acked = true;
                    }
                }
            }
        }
        self.flush_link(group, logger);
        for version in versions {
            self.try_complete(group, *version);
        }
    }

    fn log_full(&mut self, group: ChunkGroupId, logger: ServerId, versions: &[Version]) {
        let until = self.now.saturating_add(self.config.retry_interval);
        let Some(led) = self.led.get_mut(&group) else { return };
        if let Some(link) = led.dvl.links.get_mut(&logger) {
            link.full_until = Some(until);
            link.answered(versions);
        }
        for version in versions {
            if let Some(pending) = led.pending.get_mut(version) {
                pending.abandon(logger);
            }
        }
        self.log_pending(group);
    }

    /// Sends the logger's queued writes as one batch if none is in flight.
    fn flush_link(&mut self, group: ChunkGroupId, logger: ServerId) {
        let now = self.now;
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let Some(link) = led.dvl.links.get_mut(&logger) else { return };
        if !link.in_flight.is_empty() || link.queue.is_empty() {
            return;
        }
        link.in_flight = std::mem::take(&mut link.queue);
        link.sent_at = Some(now);
        let writes = link.in_flight.clone();
        self.send_logger(logger, Message::LogAppend { group, epoch, writes });
    }

    /// Gives every pending write that a down replica cannot take r - 1 loggers (D2), in
    /// version order. One that waits for the view to name its loggers holds back the
    /// later ones (the view change is bounded: the MDS applies the primary's, and it is
    /// sent again); one that finds no loggers does not, as a write whose loggers all
    /// took newer versions can never find one (D1), and the group would stop.
    pub(super) fn log_pending(&mut self, group: ChunkGroupId) {
        let r_l = self.r_l();
        let Some(led) = self.led.get(&group) else { return };
        if !led.logging(&self.down) {
            return;
        }
        let short: Vec<Version> = led
            .pending
            .iter()
            .filter(|(_, p)| p.logged.len() < r_l && !led.durable(p, self.id, r_l))
            .map(|(v, _)| *v)
            .collect();
        let mut wanted_view = Vec::new();
        for version in short {
            let Some(led) = self.led.get(&group) else { return };
            let Some(pending) = led.pending.get(&version) else { continue };
            let chosen = self.choose_loggers(group, led, pending.write.version, &pending.logged);
            let Some(chosen) = chosen else {
                self.ask_wake(group);
                continue;
            };
            // A logger must be in the view the MDS holds and in any view it is about to
            // hold: a write logged under a shrink still in flight would be orphaned (D3).
            let pending_view = led.dvl.view_change.as_ref().map(|(_, view, _)| view);
            if chosen
                .iter()
                .any(|l| !led.dvl.view.contains(l) || pending_view.is_some_and(|v| !v.contains(l)))
            {
                wanted_view.extend(chosen.iter().copied());
                break;
            }
            let Some(led) = self.led.get_mut(&group) else { return };
            let Some(pending) = led.pending.get_mut(&version) else { continue };
            let write = &pending.write;
            if pending.logged.is_empty() {
                self.counters.writes_logged += 1;
                self.counters.bytes_logged += write.range.size_bytes();
            }
            for logger in &chosen {
                pending.logged.push((*logger, false));
                let link = led.dvl.links.entry(*logger).or_default();
                link.queue.push(write.clone());
                link.newest = link.newest.max(write.version);
            }
            for logger in chosen {
                self.flush_link(group, logger);
            }
        }
        if !wanted_view.is_empty() {
            self.extend_view(group, wanted_view);
        }
    }

    /// No r - 1 loggers meet D2 for a write: the replicas must serve it (P4). Asked once
    /// per retry interval while writes wait.
    pub(super) fn ask_wake(&mut self, group: ChunkGroupId) {
        let (now, retry) = (self.now, self.config.retry_interval);
        let Some(led) = self.led.get_mut(&group) else { return };
        if led.dvl.wake_asked_at.is_some_and(|at| at.saturating_add(retry) > now) {
            return;
        }
        led.dvl.wake_asked_at = Some(now);
        let epoch = led.epoch;
        self.send(Peer::Mds, Message::WakeReplicas { group, epoch });
    }

    /// Asks the MDS to add loggers to the view before any write goes to them (D3).
    fn extend_view(&mut self, group: ChunkGroupId, loggers: Vec<ServerId>) {
        let Some(led) = self.led.get_mut(&group) else { return };
        if led.dvl.view_change.is_some() {
            return;
        }
        let mut view = led.dvl.view.clone();
        for logger in loggers {
            if !view.contains(&logger) {
                view.push(logger);
            }
        }
        self.set_view(group, view);
    }

    fn set_view(&mut self, group: ChunkGroupId, loggers: Vec<ServerId>) {
        let now = self.now;
        let Some(led) = self.led.get_mut(&group) else { return };
        led.dvl.view_seq += 1;
        let (epoch, seq) = (led.epoch, led.dvl.view_seq);
        led.dvl.view_change = Some((seq, loggers.clone(), now));
        self.send(Peer::Mds, Message::SetLoggerView { group, epoch, seq, loggers });
    }

    pub(super) fn logger_view_set(&mut self, group: ChunkGroupId, epoch: Epoch, seq: u64) {
        let Some(led) = self.led.get_mut(&group).filter(|led| led.epoch == epoch) else { return };
        let Some((pending_seq, loggers, _)) = led.dvl.view_change.take() else { return };
        if pending_seq != seq {
            led.dvl.view_change = Some((pending_seq, loggers, self.now));
            return;
        }
        led.dvl.view = loggers;
        self.log_pending(group);
    }

    /// Up to r - 1 loggers for a write of `version`, in 3.3.1's order, or none if the
    /// constraints cannot be met now.
    fn choose_loggers(
        &self,
        group: ChunkGroupId,
        led: &Led,
        version: Version,
        already: &[(ServerId, bool)],
    ) -> Option<Vec<ServerId>> {
        let topology = &self.topology;
        let own_rack = topology.rack(self.id);
        let down_gears: Vec<_> = led
            .replicas
            .iter()
            .filter(|r| self.down.contains(r))
            .map(|r| topology.gear_group(*r))
            .collect();
        let replica_racks: Vec<_> = led.replicas.iter().map(|r| topology.rack(*r)).collect();
        let mut candidates: Vec<(u8, u64, u64, ServerId)> = topology
            .servers()
            .filter(|s| *s != self.id && !self.down.contains(s) && !self.draining.contains(s))
            .filter(|s| !already.iter().any(|(l, _)| l == s))
            .filter(|s| topology.rack(*s) != own_rack)
            .filter(|s| !down_gears.contains(&topology.gear_group(*s)))
            .filter_map(|s| {
                let link = led.dvl.links.get(&s);
                let full = link.and_then(|l| l.full_until).is_some_and(|t| t > self.now);
                let ordered = link.is_none_or(|l| l.newest < version);
                (!full && ordered).then(|| {
                    let class = if led.replicas.contains(&s) {
                        0
                    } else if replica_racks.contains(&topology.rack(s)) {
                        1
                    } else {
                        2
                    };
                    // Loggers equally near and loaded are taken in an order of the
                    // group's own: the lowest ids would otherwise log every group.
                    let spread = mix(u64::from(group.0) << 32 | u64::from(s.0));
                    (class, link.map_or(0, Link::load_bytes), spread, s)
                })
            })
            .collect();
        candidates.sort();
        let mut racks: Vec<_> = already.iter().map(|(l, _)| topology.rack(*l)).collect();
        let mut chosen = Vec::new();
        let wanted = self.r_l() - already.len();
        for (_, _, _, server) in candidates {
            if chosen.len() == wanted {
                break;
            }
            let rack = topology.rack(server);
            if !racks.contains(&rack) {
                racks.push(rack);
                chosen.push(server);
            }
        }
        (chosen.len() == wanted).then_some(chosen)
    }

    /// Reads back logged writes for the replicas that lack them and are up to take
    /// them, at-risk ones (a logger down) first, a few at a time (D5).
    fn reclaim(&mut self, group: ChunkGroupId) {
        let (now, max) = (self.now, self.config.reclaim_reads_max as usize);
        let down = &self.down_list;
        let timeout = self.config.request_timeout;
        let Some(led) = self.led.get_mut(&group) else { return };
        let ready = led.ready_replicas(&self.down);
        // Nothing a ready replica lacks: nothing to read back; the reads under way go
        // on as after any reclaim.
        if led.dvl.extents.lacking(&ready, down).next().is_none() {
            self.send_reads(group, false);
            return;
        }
        let reclaiming = led.dvl.reads.count(Purpose::Reclaim)
            + led.dvl.extents.reclaims_in_flight(now, timeout);
        if reclaiming >= max || !led.dvl.ready() {
            return;
        }
        let writing =
            |e: &Extent| e.reclaim_sent_at().is_some_and(|at| at.saturating_add(timeout) > now);
        let (reads, pending) = (&led.dvl.reads, &led.pending);
        let wanted: Vec<LogRecord> = led
            .dvl
            .extents
            .lacking(&ready, down)
            .filter(|(record, _)| !reads.contains(record))
            .filter(|(record, _)| !pending.contains_key(&record.version))
            .filter(|(_, e)| !writing(e))
            .map(|(record, _)| *record)
            .take(max - reclaiming)
            .collect();
        for record in wanted {
            led.dvl.reads.start(record, Purpose::Reclaim, now);
        }
        self.send_reads(group, false);
    }

    /// Appends deletion markers for the records every replica has.
    fn send_invalidations(&mut self, group: ChunkGroupId) {
        let (now, retry, own) = (self.now, self.config.retry_interval, self.id);
        let (down, lost) = (&self.down_list, &self.lost_list);
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let dvl = &mut led.dvl;
        let mut batches: BTreeMap<ServerId, Vec<LogRecord>> = BTreeMap::new();
        for record in dvl.extents.markers_due((&led.replicas, down, lost), now, retry) {
            let Some(extent) = dvl.extents.get(&record) else { continue };
            // A lost logger's records are gone with it: a record every replica has and
            // every other logger hid is finished.
            let hidden = |l: &ServerId| extent.invalidated.contains(l) || lost.contains(l);
            if extent.loggers.iter().all(hidden) {
                dvl.extents.remove(&record);
                continue;
            }
            let due = extent.invalidate_sent_at().is_none_or(|at| at.saturating_add(retry) <= now);
            if !due {
                continue;
            }
            // D5: markers only once every replica has the write (the index of due
            // markers is kept as writes come and go: checked against the extent).
            assert!(
                led.replicas.iter().all(|r| extent.applied.contains(r)),
                "D5: markers due for {record:?} before every replica of {:?} applied it: {extent:?}",
                led.replicas
            );
            let mut sent = false;
            for logger in &extent.loggers {
                // A marker must not overtake the append it hides (it would hide nothing).
                let appending = dvl.links.get(logger).is_some_and(|link| {
                    link.queue.iter().chain(&link.in_flight).any(|w| w.version == record.version)
                });
                let up = *logger == own || !down.contains(logger);
                if !extent.invalidated.contains(logger) && up && !appending {
                    batches.entry(*logger).or_default().push(record);
                    sent = true;
                }
            }
            dvl.extents.invalidation_sent(&record, now, retry, sent);
        }
        for (logger, records) in batches {
            self.send_logger(logger, Message::LogInvalidate { group, epoch, records });
        }
    }

    fn log_invalidated(&mut self, group: ChunkGroupId, logger: ServerId, records: &[LogRecord]) {
        let Some(led) = self.led.get_mut(&group) else { return };
        for record in records {
            let Some(extent) = led.dvl.extents.get_mut(record) else { continue };
            if !extent.invalidated.contains(&logger) {
                extent.invalidated.push(logger);
            }
            if extent.loggers.iter().all(|l| extent.invalidated.contains(l)) {
                led.dvl.extents.remove(record);
            }
        }
    }

    /// Retransmissions and background work of the DVL, at each timer.
    pub(super) fn dvl_timer(&mut self, group: ChunkGroupId) {
        let (now, retry) = (self.now, self.config.retry_interval);
        // A look that sends and asks nothing puts the next one off.
        let before = self.actions.len();
        self.dvl_look(group);
        let idle = self.actions.len() == before;
        if let Some(led) = self.led.get_mut(&group) {
            led.dvl.idle_visit(now, retry, idle);
        }
    }

    fn dvl_look(&mut self, group: ChunkGroupId) {
        let (now, retry) = (self.now, self.config.retry_interval);
        let Some(led) = self.led.get_mut(&group) else { return };
        if led.dvl.recovery.as_ref().is_some_and(|r| r.sent_at.saturating_add(retry) <= now) {
            self.send_recovery(group);
        }
        let Some(led) = self.led.get_mut(&group) else { return };
        if let Some((seq, loggers, at)) = led.dvl.view_change.clone()
            && at.saturating_add(retry) <= now
        {
            led.dvl.view_change = Some((seq, loggers.clone(), now));
            let epoch = led.epoch;
            self.send(Peer::Mds, Message::SetLoggerView { group, epoch, seq, loggers });
        }
        self.resend_links(group);
        self.send_reads(group, true);
        self.log_pending(group);
        self.reclaim(group);
        self.send_invalidations(group);
        self.shrink_view(group);
        #[cfg(feature = "expensive-checks")]
        if let Some(led) = self.led.get(&group) {
            led.dvl.extents.check_indexes();
            led.dvl.reads.check_indexes();
        }
    }

    /// Batches not acknowledged in time are sent again; a logger that went down is
    /// given up and its writes logged elsewhere.
    fn resend_links(&mut self, group: ChunkGroupId) {
        let (now, retry) = (self.now, self.config.retry_interval);
        let down = &self.down;
        let Some(led) = self.led.get_mut(&group) else { return };
        let epoch = led.epoch;
        let late: Vec<ServerId> = led
            .dvl
            .links
            .iter()
            .filter(|(_, l)| l.sent_at.is_some_and(|at| at.saturating_add(retry) <= now))
            .map(|(s, _)| *s)
            .collect();
        let mut resend = Vec::new();
        for logger in late {
            if down.contains(&logger) {
                // The link stays, with its newest version: the logger takes only newer
                // ones from this owner (it counts older ones as repeats).
                let Some(link) = led.dvl.links.get_mut(&logger) else { continue };
                let link = std::mem::replace(
                    link,
                    Link { newest: link.newest, full_until: link.full_until, ..Link::default() },
                );
                for write in link.queue.iter().chain(&link.in_flight) {
                    if let Some(pending) = led.pending.get_mut(&write.version) {
                        pending.abandon(logger);
                    }
                }
                continue;
            }
            let Some(link) = led.dvl.links.get_mut(&logger) else { continue };
            link.sent_at = Some(now);
            resend.push((logger, link.in_flight.clone()));
        }
        self.counters.retransmits += resend.len() as u64;
        for (logger, writes) in resend {
            self.send_logger(logger, Message::LogAppend { group, epoch, writes });
        }
    }

    /// Once nothing is logged, the view is emptied, so a later recovery asks no one.
    fn shrink_view(&mut self, group: ChunkGroupId) {
        let Some(led) = self.led.get(&group) else { return };
        let idle_links =
            led.dvl.links.values().all(|l| l.queue.is_empty() && l.in_flight.is_empty());
        // A logger given up on may still append a write sent before: it stays in the
        // view until the write's markers are appended.
        let logging = led.pending.values().any(|p| p.may_be_logged());
        if led.dvl.view.is_empty()
            || led.dvl.view_change.is_some()
            || !led.dvl.is_empty()
            || !idle_links
            || logging
        {
            return;
        }
        self.set_view(group, Vec::new());
    }
}

/// Adds the servers not in `to` yet (a `Vec` or the map's inline [`Servers`]).
pub(super) fn add<L>(to: &mut L, servers: impl IntoIterator<Item = ServerId>)
where
    L: std::ops::Deref<Target = [ServerId]> + Extend<ServerId>,
{
    for server in servers {
        if !to.contains(&server) {
            to.extend([server]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_counts_as_sent_later_each_time_up_to_31_intervals() {
        let now = VirtualInstant::ZERO + VirtualDuration::from_secs(100);
        let retry = VirtualDuration::from_secs(1);
        let after = |sends| backoff(now, retry, sends).duration_since(now).as_secs_f64();
        let waits: Vec<f64> = (0..8).map(after).collect();
        assert_eq!(waits, [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 31.0, 31.0]);
        assert_eq!(backoff(VirtualInstant::MAX, retry, 3), VirtualInstant::MAX, "saturates");
    }

    /// Idle timer visits put the next one off by 1, 3, 7, 15, then 31 retry intervals;
    /// a visit that did something ends the backoff.
    #[test]
    fn idle_visits_back_off_and_a_busy_one_ends_the_backoff() {
        let retry = VirtualDuration::from_millis(200);
        let at = |ms| VirtualInstant::ZERO + VirtualDuration::from_millis(ms);
        let mut dvl = Dvl::new(Vec::new(), None, 2);
        assert_eq!(dvl.work_not_before(), VirtualInstant::ZERO, "no backoff before a visit");
        let mut waits = Vec::new();
        for _ in 0..7 {
            dvl.idle_visit(at(1_000), retry, true);
            waits.push(dvl.work_not_before().duration_since(at(1_000)).as_nanos() / 1_000_000);
        }
        assert_eq!(waits, [200, 600, 1_400, 3_000, 6_200, 6_200, 6_200]);
        dvl.idle_visit(at(2_000), retry, false);
        assert_eq!(dvl.work_not_before(), VirtualInstant::ZERO, "a busy visit ends it");
        dvl.idle_visit(at(3_000), retry, true);
        assert_eq!(dvl.work_not_before(), at(3_200), "and an idle one starts it again");
        dvl.unpark_reads();
        assert_eq!(dvl.work_not_before(), VirtualInstant::ZERO, "the servers down changed");
    }

    #[test]
    fn a_recovery_needs_l_minus_r_l_plus_one_answers_and_the_broken_variant_one_fewer() {
        let view = vec![ServerId(1), ServerId(2), ServerId(3), ServerId(4)];
        let dvl = Dvl::new(view.clone(), None, 2);
        let recovery = dvl.recovery.as_ref().expect("no handoff: the map is recovered");
        assert_eq!(recovery.need(None), view.len() - 2 + 1);
        assert_eq!(recovery.need(Some(Broken::TooFewLoggers)), view.len() - 2);
        assert_eq!(recovery.unanswered(), view);
        assert!(!dvl.ready(), "a DVL serves only once recovered");
    }
}
