//! The logger every storage server runs for other servers' DVLs (Sierra 3.3): it logs
//! batches of writes, fences a group's older epochs when a new primary recovers the
//! DVL (after the appends it accepted before are durable, D4), reads records back, and
//! appends deletion markers, collecting segments after them (D5).

use somnus_types::{ChunkGroupId, ServerId};

use super::{Broken, Io, Server};
use crate::cluster::logvolume::LogVolume;
use crate::cluster::{Epoch, LogRecord, Message, UnstableWrite};

impl Server {
    /// The epoch the logger answers to for `group`: the fenced one, or the one a fence
    /// in flight will set.
    fn log_epoch(&self, group: ChunkGroupId) -> Epoch {
        let fencing = self.log_fencing.get(&group).copied().unwrap_or_default();
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
            Message::LogAppend { writes, .. } => self.log_append(primary, group, epoch, writes),
            Message::LogRecover { .. } => self.log_recover(primary, group, epoch),
            Message::LogRead { records, .. } => {
                let writes: Vec<(LogRecord, Option<UnstableWrite>)> =
                    records.iter().map(|r| (*r, self.log.read(group, r))).collect();
                let bytes = writes
                    .iter()
                    .filter_map(|(_, w)| w.as_ref().map(|w| w.range.size_bytes()))
                    .sum();
                let position = self.log_position;
                let message = Message::LogData { group, epoch, writes };
                self.disk(Io::LogRead { to: primary, message }, false, position, bytes);
            }
            Message::LogInvalidate { records, .. } => {
                let bytes = records.len() as u64 * crate::logger::RECORD_HEADER_BYTES;
                let position = self.next_log_position(bytes);
                let io = Io::LogInvalidate { group, epoch, primary, records };
                self.disk(io, true, position, bytes);
            }
            _ => {}
        }
    }

    /// Where the log's next `bytes` go: the log is written sequentially.
    fn next_log_position(&mut self, bytes: u64) -> u64 {
        let position = self.log_position;
        self.log_position += bytes;
        position
    }

    fn log_append(
        &mut self,
        primary: ServerId,
        group: ChunkGroupId,
        epoch: Epoch,
        writes: Vec<UnstableWrite>,
    ) {
        let bytes: u64 = writes.iter().map(LogVolume::record_bytes).sum();
        *self.log_in_flight.entry(group).or_default() += 1;
        let position = self.next_log_position(bytes);
        self.disk(Io::LogAppend { group, epoch, primary, writes }, true, position, bytes);
    }

    fn log_recover(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        if self.broken == Some(Broken::ReclaimBeforeFencing) {
            // The broken variant answers at once and fences nothing.
            let records = self.log.records(group);
            self.answer_primary(primary, Message::LogRecovered { group, epoch, records });
            return;
        }
        let known = self.log_epoch(group);
        let fenced = epoch == self.log.fence(group);
        if fenced && self.log.fence_durable(group) {
            self.recovered_when_settled(primary, group, epoch);
        } else if epoch > known || (fenced && !self.log_fencing.contains_key(&group)) {
            // A new fence, or one whose flush failed: (again) made durable first.
            self.log_fencing.insert(group, epoch);
            let position = self.next_log_position(crate::logger::RECORD_HEADER_BYTES);
            let bytes = crate::logger::RECORD_HEADER_BYTES;
            self.disk(Io::LogFence { group, epoch, primary }, true, position, bytes);
        }
    }

    /// Answers a recovery once no append accepted before the fence is in flight.
    fn recovered_when_settled(&mut self, primary: ServerId, group: ChunkGroupId, epoch: Epoch) {
        if self.log_in_flight.get(&group).copied().unwrap_or(0) > 0 {
            self.log_recoveries_waiting.entry(group).or_default().push((primary, epoch));
            return;
        }
        let records = self.log.records(group);
        self.answer_primary(primary, Message::LogRecovered { group, epoch, records });
    }

    pub(super) fn log_append_done(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        writes: Vec<UnstableWrite>,
    ) {
        // Flushed with the batch if this flush fails.
        self.log.set_fence(group, epoch);
        let (versions, full) = self.log.append_batch(group, epoch, &writes);
        let in_flight = self.log_in_flight.entry(group).or_default();
        *in_flight -= 1;
        if *in_flight == 0 {
            self.log_in_flight.remove(&group);
            for (primary, epoch) in self.log_recoveries_waiting.remove(&group).unwrap_or_default() {
                self.recovered_when_settled(primary, group, epoch);
            }
        }
        if !full.is_empty() {
            self.answer_primary(primary, Message::LogFull { group, epoch, versions: full });
        }
        self.answer_primary(primary, Message::LogAck { group, epoch, versions });
    }

    pub(super) fn log_fence_done(&mut self, group: ChunkGroupId, epoch: Epoch, primary: ServerId) {
        let durable = self.log.set_fence(group, epoch);
        if self.log_fencing.get(&group).is_some_and(|e| *e <= epoch) {
            self.log_fencing.remove(&group);
        }
        // Not durable: unanswered, the primary's next `LogRecover` fences again (D4).
        if durable {
            self.recovered_when_settled(primary, group, epoch);
        }
    }

    pub(super) fn log_invalidate_done(
        &mut self,
        group: ChunkGroupId,
        epoch: Epoch,
        primary: ServerId,
        records: Vec<LogRecord>,
    ) {
        if !self.log.invalidate_batch(group, &records) {
            // Not durable: unanswered, the primary sends the markers again (D5).
            return;
        }
        // Background collection: its copies are written at the head, a piece at a
        // time, so foreground I/O waits for no more than a piece (one I/O of a
        // collection's hundreds of MiB held a logger's disk for seconds).
        let copied = self.log.collect();
        if copied > 0 {
            let position = self.next_log_position(copied);
            for offset in (0..copied).step_by(COLLECT_PIECE_BYTES as usize) {
                let bytes = COLLECT_PIECE_BYTES.min(copied - offset);
                self.disk_with(Io::LogCollect, true, position + offset, bytes, true);
            }
        }
        self.answer_primary(primary, Message::LogInvalidated { group, epoch, records });
    }

    /// The logger's durable state (the simulation's end checks).
    pub fn log_volume(&self) -> &LogVolume {
        &self.log
    }
}

/// The largest write of a collection's copies.
const COLLECT_PIECE_BYTES: u64 = 1 << 20;
