//! A chunk group's primary (docs/protocol.md): it serves only in the epoch the MDS
//! granted and while its lease runs (C1, C2); before serving it fences every replica
//! and writes again everywhere the writes they hold unstable (so a read never returns
//! a write that a later primary could lack, C4); it orders block-overlapping
//! requests, gives each write a version `epoch << 40 | sequence`, sends it to every
//! replica and acknowledges it when all r copies are durable (C3).

use std::collections::{BTreeSet, VecDeque};

use somnus_types::{ByteRange, ChunkGroupId, ServerId, Version, VirtualDuration, VirtualInstant};

use super::answered::{ANSWERED_KEEP_TIMEOUTS, Answered, WriteName};
use super::dvl::Dvl;
use super::led_groups::Summary;
use super::pending::{Pending, PendingWrites};
use super::rebuild::Rebuild;
use super::{Broken, Io, Server, disk_position};
use crate::cluster::store::BLOCK_BYTES;
use crate::cluster::{
    ChunkId, DvlHandoff, Epoch, GroupView, LogRecord, Message, Payload, Peer, Piece, ReplyBody,
    RequestError, ServerTime, Stamp, UnstableWrite,
};

/// Bits of a version below the epoch: 2^40 writes per epoch.
const SEQUENCE_BITS: u32 = 40;

/// Which replicas a pending write is sent to.
#[derive(Clone, Copy, Debug)]
pub(super) enum Targets {
    All,
    Only(ServerId),
}

impl Targets {
    fn includes(self, replica: ServerId) -> bool {
        match self {
            Targets::All => true,
            Targets::Only(only) => replica == only,
        }
    }
}

/// A client request the primary has not started: it waits for the primary's own
/// replica to be synced and for overlapping writes before it to commit.
#[derive(Clone, Debug)]
struct Waiting {
    client: Peer,
    request: u64,
    chunk: ChunkId,
    range: ByteRange,
    /// Some: a write of this stamp; none: a read.
    stamp: Option<Stamp>,
    /// A write's bytes (none for a read, and in the simulator).
    data: Payload,
}

/// A client's read, as a disk read of it remembers it (to serve it, or to take it again
/// from the queue).
#[derive(Clone, Copy, Debug)]
pub(super) struct ReadRequest {
    pub(super) client: Peer,
    pub(super) request: u64,
    pub(super) chunk: ChunkId,
    pub(super) range: ByteRange,
}

impl ReadRequest {
    fn waiting(self) -> Waiting {
        let ReadRequest { client, request, chunk, range } = self;
        Waiting { client, request, chunk, range, stamp: None, data: Payload::NONE }
    }
}

/// A read of a range the own replica lacks logged writes over (it was down when they
/// were logged): served from the own copy and the writes read back from the loggers
/// (Sierra 3.3: reads return the latest data, local, else the loggers).
#[derive(Clone, Debug)]
pub(super) struct DemandRead {
    read: Waiting,
    /// The own copy when the read was admitted (no write over it pending then): the
    /// writes read back are laid over it, so a write admitted later, and not yet
    /// acknowledged, is never returned.
    own: Vec<Piece>,
    /// The records still being read back (each a read of the DVL's).
    pub(super) awaiting: Vec<LogRecord>,
    /// The writes read back so far.
    found: Vec<UnstableWrite>,
    /// Refused with `Retry` past the request timeout (every holder may be down).
    started: VirtualInstant,
}

/// A read held while a replica is asked for a copy of its corrupt blocks.
#[derive(Clone, Debug)]
struct Repairing {
    read: Waiting,
    /// The replicas asked so far, the last one now.
    asked: Vec<ServerId>,
    sent_at: VirtualInstant,
}

/// A group this server leads.
#[derive(Clone, Debug)]
pub(super) struct Led {
    pub(super) epoch: Epoch,
    pub(super) replicas: Vec<ServerId>,
    lease_until: VirtualInstant,
    next_sequence: u64,
    /// The highest version written or adopted (the stable mark when nothing pends).
    pub(super) last_version: Version,
    /// The stable mark last sent on its own (`StableMark`), with nothing pending.
    stable_sent: Version,
    /// The MDS asked for the group back: new requests are refused with `Retry`.
    pub(super) migrating: bool,
    /// Per replica: fenced at this epoch with its unstable writes adopted.
    pub(super) synced: Vec<bool>,
    sync_sent_at: Vec<Option<VirtualInstant>>,
    pub(super) pending: PendingWrites,
    pub(super) dvl: Dvl,
    waiting: VecDeque<Waiting>,
    /// Reads held while corrupt blocks are repaired, with the replicas asked so far.
    repairing: Vec<Repairing>,
    /// Reads waiting for logged writes the own replica lacks, read back on demand.
    pub(super) demand: Vec<DemandRead>,
    /// Replicas replacing a lost one, and the copy to each (R1).
    pub(super) rebuilds: Vec<Rebuild>,
    /// The writes answered lately, for their clients' repeats (S1).
    answered: Answered,
}

/// What a primary makes of a client's write or read.
enum Repeat {
    /// A new request: queued.
    New,
    /// A repeat of a write still waiting or under way: that one answers it.
    UnderWay,
    /// A repeat of a write answered lately: answered again, as written at this version.
    Answered(Version),
}

impl Led {
    /// A group just granted: nothing synced or pending yet.
    pub(super) fn new(
        view: GroupView,
        lease_until: VirtualInstant,
        dvl: Dvl,
        rebuilding: Vec<ServerId>,
    ) -> Led {
        let replicas = view.replicas.len();
        Led {
            epoch: view.epoch,
            replicas: view.replicas,
            lease_until,
            next_sequence: 1,
            last_version: Version(0),
            stable_sent: Version(0),
            migrating: false,
            synced: vec![false; replicas],
            sync_sent_at: vec![None; replicas],
            pending: PendingWrites::default(),
            dvl,
            waiting: VecDeque::new(),
            repairing: Vec::new(),
            demand: Vec::new(),
            rebuilds: rebuilding.into_iter().map(Rebuild::new).collect(),
            answered: Answered::default(),
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
            && self.waiting.is_empty()
            && self.repairing.is_empty()
            && self.demand.is_empty()
            && self.dvl.ready()
    }

    /// The DVL, for the simulation's end checks.
    pub(super) fn dvl(&self) -> &Dvl {
        &self.dvl
    }

    /// A replica is down: writes go to the own replica and the DVL (D2).
    pub(super) fn logging(&self, down: &std::collections::BTreeSet<ServerId>) -> bool {
        self.replicas.iter().any(|r| down.contains(r))
    }

    /// C3: every replica has the write, or the own replica and r - 1 loggers do.
    pub(super) fn durable(&self, pending: &Pending, own: ServerId, r_l: usize) -> bool {
        if pending.all_acked() {
            return true;
        }
        let own_acked = self.index_of(own).is_some_and(|i| pending.acked(i));
        own_acked && pending.logged.iter().filter(|(_, acked)| *acked).count() >= r_l
    }

    /// Replicas now down are no longer synced: back, they are fenced again.
    pub(super) fn forget_down(&mut self, down: &std::collections::BTreeSet<ServerId>) {
        for (index, replica) in self.replicas.iter().enumerate() {
            if down.contains(replica) {
                self.synced[index] = false;
                self.sync_sent_at[index] = None;
            }
        }
    }

    /// A write recovered from a replica or the log, written again everywhere.
    pub(super) fn insert_adopted(&mut self, write: UnstableWrite, now: VirtualInstant) {
        self.pending.insert(Pending::new(write, self.replicas.len(), now, None));
    }

    /// What the server's index of led groups keeps of this one.
    pub(super) fn summary(&self) -> Summary {
        let syncs = self
            .sync_sent_at
            .iter()
            .zip(&self.synced)
            .filter(|(_, synced)| !**synced)
            .filter_map(|(at, _)| *at);
        let writes = self.pending.values().map(|p| p.sent_at);
        let repairs = self.repairing.iter().map(|r| r.sent_at);
        let dvl = self.dvl.oldest_sent();
        let rebuilds = self.rebuilds.iter().filter_map(Rebuild::oldest_sent);
        Summary {
            oldest_sent: syncs.chain(writes).chain(repairs).chain(dvl).chain(rebuilds).min(),
            work: self.dvl.has_work().then(|| self.dvl.work_not_before()),
            lease_until: self.lease_until,
            migrating: self.migrating,
        }
    }

    /// A client's repeat of a write still waiting, under way or answered lately (its
    /// answer was slow, not lost; the stamp names the client's write): the one under
    /// way answers the repeat, and one answered answers it again, instead of a second
    /// copy being written. Without this, clients that time out under overload
    /// multiply the disk work until nothing finishes (S1). Reads carry no such name
    /// (two equal reads may be two ops) and are queued again.
    fn answer_repeat(&mut self, repeat: &Waiting) -> Repeat {
        let Some(stamp) = repeat.stamp else { return Repeat::New };
        let same = |w: &Waiting| {
            w.client == repeat.client
                && w.chunk == repeat.chunk
                && w.range == repeat.range
                && w.stamp == repeat.stamp
        };
        if let Some(waiting) = self.waiting.iter_mut().find(|w| same(w)) {
            waiting.request = repeat.request;
            return Repeat::UnderWay;
        }
        let pending = self.pending.values_mut().find(|p| {
            p.write.stamp == stamp
                && p.write.chunk == repeat.chunk
                && p.write.range == repeat.range
                && p.client.is_some_and(|(c, _)| c == repeat.client)
        });
        if let Some(pending) = pending {
            pending.client = Some((repeat.client, repeat.request));
            return Repeat::UnderWay;
        }
        let name =
            WriteName { client: repeat.client, stamp, chunk: repeat.chunk, range: repeat.range };
        match self.answered.version_of(&name) {
            Some(version) => Repeat::Answered(version),
            None => Repeat::New,
        }
    }

    /// Every write up to this version is durable on all replicas.
    pub(super) fn stable(&self) -> Version {
        match self.pending.keys().next() {
            Some(first) => Version(first.0.saturating_sub(1)),
            None => self.last_version,
        }
    }

    /// Whether `replica` is fenced at this epoch and holds every committed write.
    pub(super) fn synced_at(&self, replica: ServerId) -> bool {
        self.index_of(replica).is_some_and(|i| self.synced[i])
    }

    fn index_of(&self, replica: ServerId) -> Option<usize> {
        self.replicas.iter().position(|r| *r == replica)
    }

    /// The synced replicas other than `own`: they hold every committed write.
    pub(super) fn synced_others(&self, own: ServerId) -> Vec<ServerId> {
        let synced = self.replicas.iter().zip(&self.synced).filter(|(r, s)| **r != own && **s);
        let synced = synced.filter(|(r, _)| !self.rebuilding(**r));
        synced.map(|(r, _)| *r).collect()
    }

    /// The synced replicas not in `down`: those a reclaim brings up to date.
    pub(super) fn ready_replicas(&self, down: &BTreeSet<ServerId>) -> Vec<ServerId> {
        let ready =
            self.replicas.iter().zip(&self.synced).filter(|(r, s)| **s && !down.contains(r));
        ready.map(|(r, _)| *r).collect()
    }

    fn overlaps_pending(&self, chunk: ChunkId, range: ByteRange) -> bool {
        self.pending.values().any(|p| p.write.chunk == chunk && p.write.range.overlaps(range))
    }
}

impl Server {
    /// The MDS made this server primary of `view.group` in `view.epoch`.
    /// Whether a grant of `view` with a lease from `lease_from` is taken: its lease
    /// still runs, its epoch is newer than the one this server leads, and the view
    /// names this server (a late or repeated grant is dropped).
    /// A grant to an earlier run of this server is not (its lease counts on that run's
    /// clock).
    pub(super) fn grant_is_new(&self, view: &GroupView, lease_from: ServerTime) -> bool {
        let Some(lease_from) = self.own_time(lease_from) else { return false };
        let lease_until = lease_from.saturating_add(self.config.lease);
        let known = self.led.get(&view.group).map(|led| led.epoch);
        lease_until > self.now
            && known.is_none_or(|e| e < view.epoch)
            && view.replicas.contains(&self.id)
    }

    pub(super) fn granted(
        &mut self,
        view: GroupView,
        lease_from: ServerTime,
        logger_view: Vec<ServerId>,
        handoff: Option<DvlHandoff>,
        rebuilding: Vec<ServerId>,
    ) {
        if !self.grant_is_new(&view, lease_from) {
            self.counters.messages_dropped += 1;
            return;
        }
        let lease_until = lease_from.at.saturating_add(self.config.lease);
        self.replicas_of.insert(view.group, view.replicas.clone());
        self.step_down(view.group);
        let group = view.group;
        let dvl = Dvl::new(logger_view, handoff, self.config.replicas as usize - 1);
        self.led.insert(group, Led::new(view, lease_until, dvl, rebuilding));
        self.send_syncs(group);
        self.send_recovery(group);
    }

    /// Sends a `SyncRequest` to every replica not yet synced whose last one is due.
    fn send_syncs(&mut self, group: ChunkGroupId) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let (epoch, now, retry) = (led.epoch, self.now, self.config.retry_interval);
        let mut targets = Vec::new();
        for (index, replica) in led.replicas.iter().enumerate() {
            let due = led.sync_sent_at[index].is_none_or(|at| at.saturating_add(retry) <= now);
            if !led.synced[index] && due && !self.down.contains(replica) {
                led.sync_sent_at[index] = Some(now);
                targets.push(*replica);
            }
        }
        for replica in targets {
            if replica == self.id {
                self.sync_request(self.id, group, epoch);
            } else {
                self.send(Peer::Server(replica), Message::SyncRequest { group, epoch });
            }
        }
    }

    /// Stops leading `group`: requests not started are refused; writes under way are
    /// left to the next primary (their clients time out and retry).
    pub(super) fn step_down(&mut self, group: ChunkGroupId) {
        let Some(led) = self.led.remove(&group) else { return };
        let known = led.epoch;
        let held = led.repairing.into_iter().map(|r| r.read);
        let refused =
            led.waiting.into_iter().chain(held).chain(led.demand.into_iter().map(|d| d.read));
        for waiting in refused {
            self.refuse(waiting.client, waiting.request, RequestError::NotPrimary { known });
        }
    }

    fn refuse(&mut self, client: Peer, request: u64, error: RequestError) {
        self.counters.requests_refused += 1;
        self.send(client, Message::ClientReply { request, body: ReplyBody::Refused(error) });
    }

    pub(super) fn leases_renewed(
        &mut self,
        sent_at: VirtualInstant,
        renewed: &[(ChunkGroupId, Epoch)],
        revoked: &[(ChunkGroupId, Epoch)],
    ) {
        let lease_until = sent_at.saturating_add(self.config.lease);
        for (group, epoch) in renewed {
            if let Some(led) = self.led.get_mut(group).filter(|led| led.epoch == *epoch) {
                led.lease_until = led.lease_until.max(lease_until);
            }
        }
        for (group, epoch) in revoked {
            let current = self.led.get(group).is_some_and(|led| led.epoch == *epoch);
            if current && self.broken != Some(Broken::SkipEpochCheck) {
                self.step_down(*group);
            }
        }
    }

    /// P1: the MDS wants the group on another server; finish what is under way, then
    /// give the lease back.
    pub(super) fn migrate(&mut self, group: ChunkGroupId, epoch: Epoch) {
        let Some(led) = self.led.get_mut(&group).filter(|led| led.epoch == epoch) else {
            self.counters.messages_dropped += 1;
            return;
        };
        led.migrating = true;
        let demand = led.demand.drain(..).map(|d| d.read);
        let waiting: Vec<Waiting> = led.waiting.drain(..).chain(demand).collect();
        for w in waiting {
            self.refuse(w.client, w.request, RequestError::Retry);
        }
        self.cancel_if_drained(group);
    }

    pub(super) fn cancel_if_drained(&mut self, group: ChunkGroupId) {
        let (own, lost) = (self.id, &self.lost);
        // R3: a write whose loggers are all lost is on this primary's own replica
        // alone until the replicas get it from there; handed off before, it would be
        // on none the new primary could copy it from (with r = 2, the new primary is
        // the replica that lacks it).
        let drained = self.led.get(&group).is_some_and(|led| {
            led.migrating
                && led.is_idle()
                && !led.dvl.lacks_own_copies(own, lost, &led.replicas)
                && led.dvl.resync.is_none()
        });
        if drained {
            let Some(led) = self.led.remove(&group) else { return };
            let handoff = led.dvl.handoff();
            self.send(Peer::Mds, Message::CancelLease { group, epoch: led.epoch, handoff });
        }
    }

    pub(super) fn client_message(&mut self, client: Peer, message: Message) {
        let (request, group, epoch, chunk, range, stamp, data) = match message {
            Message::ClientWrite { request, group, epoch, chunk, range, stamp, data } => {
                (request, group, epoch, chunk, range, Some(stamp), data)
            }
            Message::ClientRead { request, group, epoch, chunk, range } => {
                (request, group, epoch, chunk, range, None, Payload::NONE)
            }
            _ => {
                self.counters.messages_dropped += 1;
                return;
            }
        };
        let aligned = range.start % BLOCK_BYTES == 0 && range.end % BLOCK_BYTES == 0;
        if range.is_empty() || !aligned || range.end > self.config.chunk_size_bytes {
            self.refuse(client, request, RequestError::BadRange);
            return;
        }
        let (now, broken) = (self.now, self.broken);
        let led = self.led.get(&group);
        let serving = led.is_some_and(|led| {
            broken == Some(Broken::SkipEpochCheck) || (led.epoch == epoch && now < led.lease_until)
        });
        match led {
            Some(led) if serving && led.migrating => {
                self.refuse(client, request, RequestError::Retry);
            }
            Some(_) if serving => {
                let waiting = Waiting { client, request, chunk, range, stamp, data };
                let full = stamp.and_then(|_| self.full_replica(group));
                let Some(led) = self.led.get_mut(&group) else { return };
                match led.answer_repeat(&waiting) {
                    Repeat::New => {
                        if let Some(server) = full {
                            // Refused before any replica takes it: it never takes effect.
                            self.counters.writes_refused_no_space += 1;
                            self.refuse(client, request, RequestError::NoSpace { server });
                            return;
                        }
                        led.waiting.push_back(waiting);
                        self.load.record(now, stamp.is_some(), range.size_bytes());
                    }
                    Repeat::UnderWay => {}
                    Repeat::Answered(version) => {
                        self.counters.repeats_answered += 1;
                        let body = ReplyBody::Written { version };
                        self.send(client, Message::ClientReply { request, body });
                        return;
                    }
                }
                self.admit(group);
            }
            None if stamp.is_none() && broken == Some(Broken::ReadFromSecondary) => {
                let read = Waiting { client, request, chunk, range, stamp, data };
                self.read_as_secondary(group, read);
            }
            _ => {
                let known = led.map_or(self.store.epoch(group), |led| led.epoch);
                self.refuse(client, request, RequestError::NotPrimary { known });
            }
        }
    }

    /// The broken variant `ReadFromSecondary`: answers from the own copy, whatever
    /// the primary has logged for it.
    fn read_as_secondary(&mut self, group: ChunkGroupId, w: Waiting) {
        if let Err(w) = self.read_own_copy(group, w) {
            self.refuse(w.client, w.request, RequestError::Retry);
        }
    }

    /// Reads the own copy of a read's range from disk, or gives the read back if a
    /// block of it is corrupt.
    fn read_own_copy(&mut self, group: ChunkGroupId, w: Waiting) -> Result<(), Waiting> {
        let Ok(pieces) = self.store.read(w.chunk, w.range) else { return Err(w) };
        self.read_for_client(group, w, pieces, Vec::new());
        Ok(())
    }

    /// Reads the own copy's blocks of `w`, which hold `pieces` now, to serve with
    /// `found` (writes read back from the loggers) laid over them.
    fn read_for_client(
        &mut self,
        group: ChunkGroupId,
        w: Waiting,
        pieces: Vec<Piece>,
        found: Vec<UnstableWrite>,
    ) {
        let position = disk_position(w.chunk, w.range);
        let read =
            ReadRequest { client: w.client, request: w.request, chunk: w.chunk, range: w.range };
        let io = Io::ClientRead { group, read, pieces, found };
        self.disk(io, position, w.range.size_bytes());
    }

    /// A client's read whose blocks changed while it was under way goes back to the
    /// front of the queue (refused with `Retry` if this server leads the group no
    /// more).
    pub(super) fn requeue_read(&mut self, group: ChunkGroupId, read: ReadRequest) {
        let Some(led) = self.led.get_mut(&group) else {
            return self.refuse(read.client, read.request, RequestError::Retry);
        };
        led.waiting.push_front(read.waiting());
        self.admit(group);
    }

    /// A client's read found its blocks corrupt on the disk: a replica is asked for
    /// a copy, then the read is served again.
    pub(super) fn repair_for_read(&mut self, group: ChunkGroupId, read: ReadRequest) {
        let w = read.waiting();
        self.ask_for_repair(group, w, Vec::new());
    }

    /// Starts every waiting request that no write before it overlaps, in order.
    pub(super) fn admit(&mut self, group: ChunkGroupId) {
        self.serve_demand_reads(group, true);
        let now = self.now;
        let Some(led) = self.led.get_mut(&group) else { return };
        let own = led.index_of(self.id).is_some_and(|i| led.synced[i]);
        if !own || !led.dvl.ready() {
            return;
        }
        let mut demanded = false;
        let mut blocked: Vec<(ChunkId, ByteRange)> = Vec::new();
        let mut ready = Vec::new();
        let mut gone = Vec::new();
        let mut kept = VecDeque::new();
        let waiting = std::mem::take(&mut led.waiting);
        for w in waiting {
            if self.store.is_freed(w.chunk.object) {
                // Deleted and freed here: nothing of it is served or stored again.
                gone.push(w);
                continue;
            }
            let behind = blocked.iter().any(|(c, r)| *c == w.chunk && r.overlaps(w.range));
            if behind || led.overlaps_pending(w.chunk, w.range) {
                blocked.push((w.chunk, w.range));
                kept.push_back(w);
            } else if w.stamp.is_none()
                && self.broken != Some(Broken::ReadWithoutLoggers)
                && led.dvl.hides(self.id, w.chunk, w.range)
                && let Ok(own) = self.store.read(w.chunk, w.range)
            {
                // The own replica lacks logged writes over it: read them back first.
                // (A corrupt own copy goes the way of any read: repaired, then again.)
                let awaiting = led.dvl.read_back_lacking(self.id, w.chunk, w.range, now);
                let found = Vec::new();
                led.demand.push(DemandRead { read: w, own, awaiting, found, started: now });
                demanded = true;
            } else {
                if w.stamp.is_some() {
                    // Later requests to these blocks wait for this write.
                    blocked.push((w.chunk, w.range));
                }
                ready.push(w);
            }
        }
        led.waiting = kept;
        for w in gone {
            self.refuse(w.client, w.request, RequestError::Freed);
        }
        for w in ready {
            match w.stamp {
                Some(stamp) => self.start_write(group, w, stamp),
                None => self.start_read(group, w),
            }
        }
        if demanded {
            self.send_reads(group, false);
        }
    }

    /// A logged write read back from a logger: the demand reads awaiting it take it.
    pub(super) fn demand_found(
        &mut self,
        group: ChunkGroupId,
        record: &LogRecord,
        write: &UnstableWrite,
    ) {
        let Some(led) = self.led.get_mut(&group) else { return };
        for demand in led.demand.iter_mut().filter(|d| d.awaiting.contains(record)) {
            demand.awaiting.retain(|r| r != record);
            demand.found.push(write.clone());
        }
    }

    /// Serves every demand read whose records are all read back, and refuses with
    /// `Retry` those waiting past the request timeout. A read one of whose records was
    /// done with otherwise (applied to the own replica by another way, superseded, or
    /// its holders lost, R3) starts again from the queue, with a new look at the own
    /// copy: the one it took may lack that write. `admitting`: called by `admit`,
    /// which takes the queue next; otherwise this admits them.
    pub(super) fn serve_demand_reads(&mut self, group: ChunkGroupId, admitting: bool) {
        let (now, timeout) = (self.now, self.config.request_timeout);
        let Some(led) = self.led.get_mut(&group) else { return };
        // Only the records whose reads ended since the last look can move a demand
        // read: while a gear's replicas are back and lacking, hundreds of demand
        // reads await thousands of records, and this runs at every answer.
        let ended = led.dvl.take_ended_reads();
        if led.demand.is_empty() {
            return;
        }
        let mut again = Vec::new();
        if !ended.is_empty() {
            for (i, demand) in led.demand.iter_mut().enumerate() {
                let before = demand.awaiting.len();
                demand.awaiting.retain(|record| !ended.contains(record));
                if demand.awaiting.len() < before {
                    again.push(i);
                }
            }
        }
        for i in again.iter().rev() {
            let demand = led.demand.swap_remove(*i);
            led.waiting.push_front(demand.read);
        }
        if !again.is_empty() && !admitting {
            self.admit(group);
            return;
        }
        let Some(led) = self.led.get_mut(&group) else { return };
        let (late, demand): (Vec<DemandRead>, Vec<DemandRead>) = std::mem::take(&mut led.demand)
            .into_iter()
            .partition(|d| !d.awaiting.is_empty() && d.started.saturating_add(timeout) <= now);
        let (done, awaiting): (Vec<DemandRead>, Vec<DemandRead>) =
            demand.into_iter().partition(|d| d.awaiting.is_empty());
        led.demand = awaiting;
        for demand in late {
            self.refuse(demand.read.client, demand.read.request, RequestError::Retry);
        }
        for demand in done {
            let mut found = demand.found;
            found.sort_by_key(|write| write.version);
            self.counters.reads_from_loggers += 1;
            self.read_for_client(group, demand.read, demand.own, found);
        }
    }

    fn start_write(&mut self, group: ChunkGroupId, w: Waiting, stamp: Stamp) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let version = Version(led.epoch.0 << SEQUENCE_BITS | led.next_sequence);
        led.next_sequence += 1;
        led.last_version = led.last_version.max(version);
        let write = UnstableWrite { chunk: w.chunk, range: w.range, version, stamp, data: w.data };
        let client = Some((w.client, w.request));
        led.pending.insert(Pending::new(write, led.replicas.len(), self.now, client));
        self.send_write(group, version, Targets::All);
        self.log_pending(group);
    }

    /// Sends the pending write `version` to the synced `targets` that have not acked it.
    pub(super) fn send_write(&mut self, group: ChunkGroupId, version: Version, targets: Targets) {
        let own = self.id;
        let Some(led) = self.led.get_mut(&group) else { return };
        // While a replica is down only the own replica takes writes; the DVL the rest.
        let targets = if led.logging(&self.down) { Targets::Only(own) } else { targets };
        let stable = led.stable();
        let epoch = led.epoch;
        let Some(pending) = led.pending.get_mut(&version) else { return };
        pending.sent_at = self.now;
        let write = pending.write.clone();
        let targets: Vec<ServerId> = led
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| led.synced[*i] && !pending.acked(*i) && targets.includes(**r))
            .map(|(_, r)| *r)
            .collect();
        self.write_to(targets, group, epoch, write, stable);
    }

    /// Sends `write` to each of `replicas`: this server's own through its disk queue.
    pub(super) fn write_to(
        &mut self,
        replicas: Vec<ServerId>,
        group: ChunkGroupId,
        epoch: Epoch,
        write: UnstableWrite,
        stable: Version,
    ) {
        for replica in replicas {
            let write = write.clone();
            if replica == self.id {
                self.replica_write(self.id, group, epoch, write, stable);
            } else {
                let message = Message::ReplicaWrite { group, epoch, write, stable };
                self.send(Peer::Server(replica), message);
            }
        }
    }

    fn start_read(&mut self, group: ChunkGroupId, w: Waiting) {
        if let Err(w) = self.read_own_copy(group, w) {
            self.counters.corrupt_reads += 1;
            self.ask_for_repair(group, w, Vec::new());
        }
    }

    /// Asks the next replica not yet asked for its copy of a read's range.
    fn ask_for_repair(&mut self, group: ChunkGroupId, w: Waiting, mut asked: Vec<ServerId>) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let source = led
            .replicas
            .iter()
            .enumerate()
            .find(|(i, r)| {
                **r != self.id && led.synced[*i] && !asked.contains(r) && !led.rebuilding(**r)
            })
            .map(|(_, r)| *r);
        let Some(source) = source else {
            // No intact copy reachable now: the client retries (the read stays unserved
            // rather than returning corrupt data).
            self.refuse(w.client, w.request, RequestError::Retry);
            return;
        };
        asked.push(source);
        let message =
            Message::RepairRead { group, epoch: led.epoch, chunk: w.chunk, range: w.range };
        led.repairing.push(Repairing { read: w, asked, sent_at: self.now });
        self.send(Peer::Server(source), message);
    }

    pub(super) fn read_done(
        &mut self,
        group: ChunkGroupId,
        client: Peer,
        request: u64,
        pieces: Vec<Piece>,
        found: Vec<UnstableWrite>,
    ) {
        let pieces = found.iter().fold(pieces, overlay);
        self.counters.reads_served += 1;
        self.send(client, Message::ClientReply { request, body: ReplyBody::Read { pieces } });
        self.cancel_if_drained(group);
    }

    /// Acknowledgements, refusals, sync replies and repair data from replicas.
    pub(super) fn replica_message(&mut self, replica: ServerId, message: Message) {
        match message {
            Message::ReplicaAck { group, epoch, version } => {
                self.acked(replica, group, epoch, version)
            }
            Message::ReplicaRefused { group, epoch, known } => {
                let Some(led) = self.led.get_mut(&group).filter(|l| l.epoch == epoch) else {
                    return;
                };
                if known > epoch {
                    // A newer primary fenced this replica: this one is deposed.
                    if self.broken != Some(Broken::SkipEpochCheck) {
                        self.step_down(group);
                    }
                } else if let Some(i) = led.index_of(replica) {
                    // The replica lost its fence (it never made it durable): sync again.
                    led.synced[i] = false;
                    led.sync_sent_at[i] = None;
                    self.send_syncs(group);
                }
            }
            Message::SyncReply { group, epoch, unstable } => {
                self.synced(replica, group, epoch, unstable)
            }
            Message::RepairData { group, epoch, chunk, range, pieces } => {
                self.repair_data(replica, group, epoch, chunk, range, pieces);
            }
            Message::RebuildAck { group, epoch, chunk } => {
                self.rebuild_acked(replica, group, epoch, chunk);
            }
            Message::ResyncHeld { group, epoch, chunks } => {
                self.resync_held(replica, group, epoch, chunks);
            }
            message @ (Message::LogAck { .. }
            | Message::LogFull { .. }
            | Message::LogRefused { .. }
            | Message::LogRecovered { .. }
            | Message::LogData { .. }
            | Message::LogInvalidated { .. }) => self.dvl_message(replica, message),
            _ => self.counters.messages_dropped += 1,
        }
    }

    fn acked(&mut self, replica: ServerId, group: ChunkGroupId, epoch: Epoch, version: Version) {
        let broken = self.broken;
        let own = self.id;
        let Some(led) = self.led.get_mut(&group).filter(|l| l.epoch == epoch) else { return };
        let Some(index) = led.index_of(replica) else { return };
        let Some(pending) = led.pending.get_mut(&version) else {
            self.reclaim_acked(group, replica, version);
            return;
        };
        pending.ack(index);
        let early = if broken == Some(Broken::AckAfterOneReplica) && replica == own {
            // The broken variant answers the client once its own copy is durable.
            pending.client.take()
        } else {
            None
        };
        if let Some((client, request)) = early {
            self.counters.writes_acknowledged += 1;
            self.send(
                client,
                Message::ClientReply { request, body: ReplyBody::Written { version } },
            );
        }
        self.try_complete(group, version);
    }

    /// Answers a pending write once it is durable (C3) and starts what waited for it.
    pub(super) fn try_complete(&mut self, group: ChunkGroupId, version: Version) {
        let (own, r_l, now) = (self.id, self.config.replicas as usize - 1, self.now);
        let keep = self.config.request_timeout.0.saturating_mul(ANSWERED_KEEP_TIMEOUTS);
        let Some(led) = self.led.get_mut(&group) else { return };
        let Some(pending) = led.pending.get(&version) else { return };
        if !led.durable(pending, own, r_l) {
            return;
        }
        let Some(pending) = led.pending.remove(&version) else { return };
        let applied: Vec<ServerId> = led
            .replicas
            .iter()
            .enumerate()
            .filter(|(i, _)| pending.acked(*i))
            .map(|(_, r)| *r)
            .collect();
        let (holders, loggers) = (pending.holders(), pending.loggers());
        if let Some((client, request)) = pending.client {
            let write = &pending.write;
            let name =
                WriteName { client, stamp: write.stamp, chunk: write.chunk, range: write.range };
            led.answered.record(name, version, now, VirtualDuration(keep));
            self.counters.writes_acknowledged += 1;
            self.send(
                client,
                Message::ClientReply { request, body: ReplyBody::Written { version } },
            );
        }
        self.logged_write_done(group, pending.write, holders, loggers, applied);
        self.admit(group);
        self.cancel_if_drained(group);
    }

    /// A replica is fenced at this epoch: adopt its unstable writes (written again to
    /// every replica at their versions) and send it every write under way.
    fn synced(
        &mut self,
        replica: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        unstable: Vec<UnstableWrite>,
    ) {
        let now = self.now;
        let Some(led) = self.led.get_mut(&group).filter(|l| l.epoch == epoch) else { return };
        let Some(index) = led.index_of(replica) else { return };
        if led.synced[index] {
            return;
        }
        led.synced[index] = true;
        // A replica back may lack logged writes: reclaim looks at once, not after a backoff.
        led.dvl.end_backoff();
        let mut adopted = Vec::new();
        for write in unstable {
            if led.pending.contains_key(&write.version)
                || write.version.0 >> SEQUENCE_BITS >= epoch.0
            {
                continue;
            }
            let version = write.version;
            led.last_version = led.last_version.max(version);
            led.insert_adopted(write, now);
            adopted.push(version);
        }
        self.counters.writes_adopted += adopted.len() as u64;
        let under_way: Vec<Version> = led.pending.keys().copied().collect();
        for version in under_way {
            let targets =
                if adopted.contains(&version) { Targets::All } else { Targets::Only(replica) };
            self.send_write(group, version, targets);
        }
        self.log_pending(group);
        self.admit(group);
    }

    fn repair_data(
        &mut self,
        replica: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        chunk: ChunkId,
        range: ByteRange,
        pieces: Option<Vec<Piece>>,
    ) {
        // A copy is used only if it repairs every corrupt block at its version.
        let pieces = pieces.filter(|p| self.store.repairable(chunk, range, p));
        let led = self.led.get_mut(&group).filter(|l| l.epoch == epoch);
        let found = led.as_ref().and_then(|led| {
            led.repairing.iter().position(|r| {
                r.read.chunk == chunk && r.read.range == range && r.asked.last() == Some(&replica)
            })
        });
        let repair = |pieces| Io::Repair { group, chunk, range, pieces };
        let (position, bytes) = (disk_position(chunk, range), range.size_bytes());
        let (Some(led), Some(index)) = (led, found) else {
            // A scrub's answer (a useless one waits for the next scrub).
            if let Some(pieces) = pieces {
                self.disk(repair(pieces), position, bytes);
            }
            return;
        };
        let Repairing { read: waiting, asked, .. } = led.repairing.swap_remove(index);
        match pieces {
            Some(pieces) => {
                // Write the repaired blocks, then serve the read again from the start.
                led.waiting.push_front(waiting);
                self.disk(repair(pieces), position, bytes);
            }
            None => self.ask_for_repair(group, waiting, asked),
        }
    }

    /// The write of repaired blocks found no room: the read waiting for it is
    /// refused with `Retry` (its client asks again; a scrub repairs the blocks once
    /// there is room), rather than asking the replicas again at once.
    pub(super) fn repair_failed(&mut self, group: ChunkGroupId, chunk: ChunkId, range: ByteRange) {
        let Some(led) = self.led.get_mut(&group) else { return };
        let read = |w: &Waiting| w.stamp.is_none() && w.chunk == chunk && w.range == range;
        let Some(at) = led.waiting.iter().position(read) else { return };
        let Some(w) = led.waiting.remove(at) else { return };
        self.refuse(w.client, w.request, RequestError::Retry);
    }

    /// Lease ends and retransmissions.
    pub(super) fn primaries_timer(&mut self) {
        let groups: Vec<ChunkGroupId> = self.led.keys().copied().collect();
        for group in groups {
            let Some(led) = self.led.get(&group) else { continue };
            if led.lease_until <= self.now && self.broken != Some(Broken::SkipEpochCheck) {
                self.step_down(group);
                continue;
            }
            self.send_syncs(group);
            let retry = self.config.retry_interval;
            let now = self.now;
            let Some(led) = self.led.get(&group) else { continue };
            let due: Vec<Version> = led
                .pending
                .iter()
                .filter(|(_, p)| p.sent_at.saturating_add(retry) <= now)
                .map(|(v, _)| *v)
                .collect();
            self.counters.retransmits += due.len() as u64;
            for version in due {
                self.resend(group, version);
            }
            self.send_stable_mark(group);
            self.repairs_timed_out(group);
            self.dvl_timer(group);
            self.serve_demand_reads(group, false);
            self.resync_timer(group);
            self.rebuild_timer(group);
        }
    }

    /// With no write pending, tells the synced replicas (this server's own too) the
    /// stable mark the next write would carry, so that they keep no idle group's last
    /// writes as unstable (a checkpoint would hold their bytes twice).
    fn send_stable_mark(&mut self, group: ChunkGroupId) {
        let own = self.id;
        let Some(led) = self.led.get_mut(&group) else { return };
        if !led.pending.is_empty() || led.last_version <= led.stable_sent {
            return;
        }
        let stable = led.stable();
        led.stable_sent = stable;
        let epoch = led.epoch;
        let synced: Vec<ServerId> = led
            .replicas
            .iter()
            .zip(&led.synced)
            .filter(|(_, synced)| **synced)
            .map(|(replica, _)| *replica)
            .collect();
        for replica in synced {
            if replica == own {
                self.stable_mark(group, epoch, stable);
            } else {
                self.send(Peer::Server(replica), Message::StableMark { group, epoch, stable });
            }
        }
    }

    /// A replica's side of a `StableMark`: of the epoch it is fenced at only.
    pub(super) fn stable_mark(&mut self, group: ChunkGroupId, epoch: Epoch, stable: Version) {
        if epoch == self.known_epoch(group) {
            self.store.forget_stable(group, stable);
        }
    }

    /// A replica asked for a copy that has not answered (it is down, or the message
    /// was lost): the read asks the next one.
    fn repairs_timed_out(&mut self, group: ChunkGroupId) {
        let (now, retry) = (self.now, self.config.retry_interval);
        let Some(led) = self.led.get_mut(&group) else { return };
        let (late, waiting): (Vec<Repairing>, Vec<Repairing>) = std::mem::take(&mut led.repairing)
            .into_iter()
            .partition(|r| r.sent_at.saturating_add(retry) <= now);
        led.repairing = waiting;
        for repairing in late {
            self.ask_for_repair(group, repairing.read, repairing.asked);
        }
    }

    /// Sends a pending write again to the synced replicas that have not acked it: the
    /// own one too, whose copy is in flight (then `queued` makes it a no-op) or found
    /// no room on the disk (then it is written again).
    fn resend(&mut self, group: ChunkGroupId, version: Version) {
        self.send_write(group, version, Targets::All);
    }
}

/// `pieces` (a read's answer, in order, covering its range) with `write` over the bytes
/// where it is newer than what they hold.
fn overlay(pieces: Vec<Piece>, write: &UnstableWrite) -> Vec<Piece> {
    let mut out = Vec::with_capacity(pieces.len() + 2);
    for piece in pieces {
        let (start, end) =
            (piece.range.start.max(write.range.start), piece.range.end.min(write.range.end));
        if start >= end || piece.version >= write.version {
            out.push(piece);
            continue;
        }
        if piece.range.start < start {
            out.push(piece.cut(ByteRange::from_bounds(piece.range.start, start)));
        }
        let range = ByteRange::from_bounds(start, end);
        let data = write.cut(range).data;
        out.push(Piece { range, version: write.version, stamp: write.stamp, data });
        if end < piece.range.end {
            out.push(piece.cut(ByteRange::from_bounds(end, piece.range.end)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use somnus_types::ObjectId;

    use super::*;
    use crate::cluster::ChunkIndex;

    fn piece(start: u64, end: u64, version: u64) -> Piece {
        Piece {
            range: ByteRange::from_bounds(start, end),
            version: Version(version),
            stamp: Stamp(version),
            data: Payload::NONE,
        }
    }

    #[test]
    fn a_logged_write_wins_only_where_it_is_newer() {
        let own = vec![piece(0, 4096, 5), piece(4096, 12288, 9), piece(12288, 16384, 0)];
        let write = UnstableWrite {
            chunk: ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) },
            range: ByteRange::from_bounds(2048, 14336),
            version: Version(7),
            stamp: Stamp(7),
            data: Payload::NONE,
        };
        let expected = vec![
            piece(0, 2048, 5),
            piece(2048, 4096, 7),
            piece(4096, 12288, 9),
            piece(12288, 14336, 7),
            piece(14336, 16384, 0),
        ];
        assert_eq!(overlay(own, &write), expected);
    }
}
