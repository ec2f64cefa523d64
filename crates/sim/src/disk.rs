//! Disk service times and the mapping of volume I/O onto the disks of an array.
//!
//! A disk serves its queue first come, first served. Service time is seek plus
//! rotational latency plus transfer plus a fixed controller overhead:
//! - seek over a distance of `d` bytes on a disk of capacity `C` takes
//!   `track + (full - track) * sqrt(d / C)` (the square-root curve of short seeks,
//!   Ruemmler and Wilkes 1994), and nothing when `d` is zero;
//! - a random access waits half a rotation on average, a sequential one (starting where
//!   the last ended) none, and rewriting the sectors just read (the write half of a
//!   RAID-5 read-modify-write) a full rotation;
//! - transfer is the size over the media rate.
//!
//! A disk is the time it becomes free and where its head is: an operation issued at
//! `now` starts at `max(now, busy_until)`, first come first served; except that a
//! foreground operation (a read, or a write no cache absorbs) passes the queued
//! destaging of cached writes, as an array controller serves reads first: it waits
//! only for the foreground work before it and the rest of the operation in service,
//! and pushes the background work back by its own time and a seek back.

use somnus_core::power::DiskMechanics;
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

use crate::topology::Raid;

/// Fixed-point fraction bits of the per-byte transfer time: the transfer of every
/// operation is integer arithmetic (float-to-integer conversions showed up in the
/// simulator's profile).
const FIXED_SHIFT: u32 = 32;

/// The service-time model of one disk type.
#[derive(Clone, Copy, Debug)]
pub struct DiskModel {
    capacity_bytes: u64,
    /// `1 / capacity_bytes`, so the hot path multiplies instead of dividing.
    capacity_inverse: f64,
    seek_track_ns: f64,
    seek_span_ns: f64,
    half_rotation_ns: u64,
    full_rotation_ns: u64,
    /// Transfer time per byte in 32.32 fixed-point nanoseconds.
    transfer_ns_per_byte_fixed: u64,
    overhead_ns: u64,
}

impl DiskModel {
    pub fn new(mechanics: &DiskMechanics) -> DiskModel {
        let full_rotation_ns = (60e9 / f64::from(mechanics.rpm)).round() as u64;
        assert!(full_rotation_ns > 0, "rpm out of range");
        let capacity_bytes = (mechanics.capacity_gb * 1e9) as u64;
        let fixed = (1u64 << FIXED_SHIFT) as f64;
        DiskModel {
            capacity_bytes,
            capacity_inverse: 1.0 / capacity_bytes as f64,
            seek_track_ns: mechanics.seek_track_ms * 1e6,
            seek_span_ns: (mechanics.seek_full_ms - mechanics.seek_track_ms) * 1e6,
            half_rotation_ns: full_rotation_ns / 2,
            full_rotation_ns,
            transfer_ns_per_byte_fixed: (1e9 / (mechanics.transfer_mb_s * 1e6) * fixed).round()
                as u64,
            overhead_ns: (mechanics.overhead_ms * 1e6) as u64,
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// The time to serve `op` with the head at `head`.
    pub fn service_time(&self, head: u64, op: &DiskRequest) -> VirtualDuration {
        let position = self.wrap(op.position);
        // Sizes are far below 2^32 bytes: the product fits u128 and the result u64.
        let transfer_ns = ((u128::from(op.size_bytes)
            * u128::from(self.transfer_ns_per_byte_fixed))
            >> FIXED_SHIFT) as u64;
        let positioning_ns = if op.rewrite {
            self.full_rotation_ns
        } else if position == head {
            0
        } else {
            let distance = position.abs_diff(head) as f64 * self.capacity_inverse;
            let seek = self.seek_track_ns + self.seek_span_ns * distance.sqrt();
            seek as u64 + self.half_rotation_ns
        };
        VirtualDuration::from_nanos(positioning_ns + transfer_ns + self.overhead_ns)
    }

    /// The head position after `op`.
    pub fn head_after(&self, op: &DiskRequest) -> u64 {
        self.wrap(op.position) + op.size_bytes
    }

    /// A position on the platter: offsets past the end (a trace addressing more than
    /// the modelled disk holds) wrap around, which keeps seek distances in range.
    fn wrap(&self, position: u64) -> u64 {
        if position < self.capacity_bytes { position } else { position % self.capacity_bytes }
    }
}

/// One disk's queue: when it is free and where its head is. Foreground work (reads,
/// and writes no cache absorbs) is served before background work (the destaging of
/// cached writes), without preempting the operation in service.
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk {
    /// When all queued work, foreground and background, is done.
    pub busy_until: VirtualInstant,
    /// When the queued foreground work is done.
    pub foreground_until: VirtualInstant,
    /// The service time of the last background operation queued: a foreground
    /// operation arriving while background work runs waits half of it, the expected
    /// rest of the operation in service.
    pub background_op: VirtualDuration,
    /// Where the head is after the last queued operation in queue order (the
    /// background's position while foreground work passes it).
    pub head: u64,
    /// Where the head is after the last foreground operation.
    pub foreground_head: u64,
}

impl Disk {
    /// When a foreground operation issued at `not_before` starts: right after the
    /// queued foreground work if there is some (background work waits behind it);
    /// else at once if the disk is idle; else, background work running, after half of
    /// its last operation (the expected rest of the one in service).
    pub fn foreground_start(&self, not_before: VirtualInstant) -> VirtualInstant {
        if not_before < self.foreground_until {
            return self.foreground_until;
        }
        if self.busy_until <= not_before {
            return not_before;
        }
        let half = VirtualDuration::from_nanos(self.background_op.as_nanos() / 2);
        not_before + (self.busy_until - not_before).min(half)
    }

    /// Whether a foreground operation issued at `not_before` interrupts background
    /// work (and the background must then seek back to where it was).
    fn interrupts_background(&self, not_before: VirtualInstant) -> bool {
        not_before >= self.foreground_until && self.busy_until > not_before
    }

    /// Queues `op`, issued at `not_before`, as foreground or background work; returns
    /// when it starts, the busy time to charge for it and when it completes.
    pub fn queue(
        &mut self,
        model: &DiskModel,
        op: &DiskRequest,
        not_before: VirtualInstant,
        foreground: bool,
    ) -> Queued {
        if !foreground {
            let service = model.service_time(self.head, op);
            let start = not_before.max(self.busy_until);
            self.busy_until = start + service;
            self.background_op = service;
            self.head = model.head_after(op);
            return Queued { start, busy: service, end: self.busy_until };
        }
        // Behind queued foreground work the head comes from the last of it.
        let head =
            if not_before < self.foreground_until { self.foreground_head } else { self.head };
        let service = model.service_time(head, op);
        let start = self.foreground_start(not_before);
        let end = start + service;
        let mut busy = service;
        if self.busy_until > start {
            // Background work is queued behind: it waits for this operation, and if
            // this one interrupted it, for the seek back too.
            if self.interrupts_background(not_before) {
                let back =
                    DiskRequest { position: self.head, size_bytes: 0, rewrite: false, ..*op };
                busy += model.service_time(model.head_after(op), &back);
            }
            self.busy_until += busy;
        } else {
            self.busy_until = end;
            self.head = model.head_after(op);
        }
        self.foreground_until = end;
        self.foreground_head = model.head_after(op);
        Queued { start, busy, end }
    }
}

/// Where [`Disk::queue`] put an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    pub start: VirtualInstant,
    /// The disk time it costs, the seek back to interrupted background work included.
    pub busy: VirtualDuration,
    pub end: VirtualInstant,
}

/// One operation on one disk of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskRequest {
    /// Index of the disk within its array.
    pub disk: u32,
    pub position: u64,
    pub size_bytes: u64,
    pub write: bool,
    /// The second half of a read-modify-write: the same sectors a rotation later.
    pub rewrite: bool,
}

/// What a volume I/O does on its array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    /// A write that the controller's write cache gathers with the writes before it
    /// into whole stripes, because it continues where the previous write ended: on
    /// RAID-5 its data units are written without reading anything, and a stripe's
    /// parity is written once, computed from the cached stripe, with the write that
    /// reaches the stripe's end. (A run that stops mid-stripe leaves that parity
    /// unwritten in the model: at most one unit write per run is missing.)
    GatheredWrite,
}

impl Access {
    pub fn is_write(self) -> bool {
        self != Access::Read
    }
}

/// How a volume maps onto its disks.
#[derive(Clone, Copy, Debug)]
pub struct ArrayLayout {
    pub raid: Raid,
    pub disks: u32,
    pub stripe_unit_bytes: u64,
}

impl ArrayLayout {
    /// The volume's logical size given each disk's capacity.
    pub fn capacity_bytes(&self, disk_capacity_bytes: u64) -> u64 {
        match self.raid {
            Raid::Raid1 => disk_capacity_bytes,
            Raid::Raid5 => disk_capacity_bytes * u64::from(self.disks - 1),
        }
    }

    /// Plans a volume I/O: the operations of its first phase (reads, or the writes of
    /// a RAID-1, full-stripe or gathered RAID-5 write) go to `first`, those that must
    /// wait for the first phase (the writes of a read-modify-write) to `second`. For a
    /// RAID-1 read `pick_mirror` chooses the disk.
    pub fn plan(
        &self,
        range: ByteRange,
        access: Access,
        pick_mirror: impl Fn() -> u32,
        first: &mut Vec<DiskRequest>,
        second: &mut Vec<DiskRequest>,
    ) {
        assert!(!range.is_empty(), "empty volume I/O");
        let write = access.is_write();
        match self.raid {
            Raid::Raid1 => {
                let op = |disk| DiskRequest {
                    disk,
                    position: range.start,
                    size_bytes: range.size_bytes(),
                    write,
                    rewrite: false,
                };
                if write {
                    first.extend((0..self.disks).map(op));
                } else {
                    first.push(op(pick_mirror()));
                }
            }
            Raid::Raid5 => self.plan_raid5(range, access, first, second),
        }
    }

    fn plan_raid5(
        &self,
        range: ByteRange,
        access: Access,
        first: &mut Vec<DiskRequest>,
        second: &mut Vec<DiskRequest>,
    ) {
        let write = access.is_write();
        let gathered = access == Access::GatheredWrite;
        let unit = self.stripe_unit_bytes;
        // The unit is a power of two (the topology checks it): shifts and masks, not
        // divisions, inside the loop.
        debug_assert!(unit.is_power_of_two());
        let (unit_shift, unit_mask) = (unit.trailing_zeros(), unit - 1);
        let data_disks = u64::from(self.disks - 1);
        let stripe_bytes = unit * data_disks;
        let mut stripe = range.start / stripe_bytes;
        // Bounded by the request size: one iteration per stripe touched.
        while stripe * stripe_bytes < range.end {
            let stripe_start = stripe * stripe_bytes;
            let covered = ByteRange::from_bounds(
                range.start.max(stripe_start),
                range.end.min(stripe_start + stripe_bytes),
            );
            let parity = (self.disks - 1) - (stripe % u64::from(self.disks)) as u32;
            let full_stripe = covered.size_bytes() == stripe_bytes;
            let stripe_end = covered.end == stripe_start + stripe_bytes;
            let (mut low, mut high) = (u64::MAX, 0);
            let mut offset = covered.start;
            while offset < covered.end {
                let within = offset - stripe_start;
                let data_index = (within >> unit_shift) as u32;
                let unit_offset = within & unit_mask;
                let size_bytes = (unit - unit_offset).min(covered.end - offset);
                // parity < disks and data_index < disks - 1: one subtraction wraps it.
                let mut disk = parity + 1 + data_index;
                if disk >= self.disks {
                    disk -= self.disks;
                }
                let position = stripe * unit + unit_offset;
                low = low.min(unit_offset);
                high = high.max(unit_offset + size_bytes);
                let op = DiskRequest { disk, position, size_bytes, write: false, rewrite: false };
                if !write {
                    first.push(op);
                } else if full_stripe || gathered {
                    first.push(DiskRequest { write: true, ..op });
                } else {
                    first.push(op);
                    second.push(DiskRequest { write: true, rewrite: true, ..op });
                }
                offset += size_bytes;
            }
            if gathered && !full_stripe {
                // The parity of a gathered stripe, once, with its last unit.
                if stripe_end {
                    let position = stripe * unit;
                    first.push(DiskRequest {
                        disk: parity,
                        position,
                        size_bytes: unit,
                        write: true,
                        rewrite: false,
                    });
                }
            } else if write {
                let parity_op = DiskRequest {
                    disk: parity,
                    position: stripe * unit + low,
                    size_bytes: high - low,
                    write: false,
                    rewrite: false,
                };
                if full_stripe {
                    first.push(DiskRequest { write: true, ..parity_op });
                } else {
                    first.push(parity_op);
                    second.push(DiskRequest { write: true, rewrite: true, ..parity_op });
                }
            }
            stripe += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cheetah() -> DiskModel {
        DiskModel::new(&DiskMechanics {
            capacity_gb: 146.8,
            rpm: 15000,
            seek_track_ms: 0.2,
            seek_full_ms: 7.4,
            transfer_mb_s: 75.0,
            overhead_ms: 0.1,
        })
    }

    #[test]
    fn service_times_follow_the_model() {
        // Goal: a sequential 64 KiB read costs transfer and overhead only; a full-stroke
        // random one adds the full seek and half a rotation (2 ms at 15k rpm); a rewrite
        // waits a full rotation (4 ms).
        let model = cheetah();
        let op = DiskRequest {
            disk: 0,
            position: 4096,
            size_bytes: 65536,
            write: false,
            rewrite: false,
        };
        let transfer = (65536.0 / 75e6 * 1e9) as u64;
        let near = |a: u64, b: u64| a.abs_diff(b) <= 1;
        assert!(near(model.service_time(4096, &op).as_nanos(), transfer + 100_000));
        let far = DiskRequest { position: model.capacity_bytes() - 1, ..op };
        let random = model.service_time(0, &far).as_nanos();
        let expected = 7_400_000 + 2_000_000 + transfer + 100_000;
        assert!(random.abs_diff(expected) < 1_000, "{random} vs {expected}");
        // A quarter of the stroke: track + (full - track) * sqrt(1/4) = 3.8 ms of seek.
        let quarter = DiskRequest { position: model.capacity_bytes() / 4, ..op };
        let seek = model.service_time(0, &quarter).as_nanos() - 2_000_000 - transfer - 100_000;
        assert!(seek.abs_diff(3_800_000) < 10, "quarter-stroke seek {seek} ns");
        let rewrite = DiskRequest { rewrite: true, ..op };
        assert!(near(
            model.service_time(4096, &rewrite).as_nanos(),
            4_000_000 + transfer + 100_000
        ));
        assert_eq!(model.head_after(&op), 4096 + 65536);
    }

    #[test]
    fn raid5_small_writes_read_then_write_data_and_parity() {
        // Goal: the small-write penalty: a 4 KiB write to a 4-disk RAID-5 is two reads
        // (old data, old parity) then two rewrites; a full-stripe write is four writes
        // in one phase; a read touches only the data disks it covers, skipping parity.
        let array = ArrayLayout { raid: Raid::Raid5, disks: 4, stripe_unit_bytes: 65536 };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        array.plan(ByteRange::new(70_000, 4096), Access::Write, || 0, &mut first, &mut second);
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|op| !op.write));
        assert_eq!(second.len(), 2);
        assert!(second.iter().all(|op| op.write && op.rewrite));
        // Stripe 0 has parity on disk 3; data unit 1 (offset 65536..) is on disk 1.
        assert_eq!(
            first[0],
            DiskRequest {
                disk: 1,
                position: 70_000 - 65536,
                size_bytes: 4096,
                write: false,
                rewrite: false
            }
        );
        assert_eq!(first[1].disk, 3);
        first.clear();
        second.clear();
        array.plan(
            ByteRange::new(3 * 65536, 3 * 65536),
            Access::Write,
            || 0,
            &mut first,
            &mut second,
        );
        assert_eq!((first.len(), second.len()), (4, 0));
        assert!(first.iter().all(|op| op.write && op.size_bytes == 65536));
        // Stripe 1 rotates parity to disk 2.
        assert!(first.iter().any(|op| op.disk == 2 && op.position == 65536));
        first.clear();
        array.plan(ByteRange::new(0, 3 * 65536), Access::Read, || 0, &mut first, &mut second);
        assert_eq!(first.iter().map(|op| op.disk).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn gathered_raid5_writes_read_nothing_and_write_parity_once_per_stripe() {
        // Goal: sequential writes gathered by the write cache cost one write per data
        // unit and one parity write per stripe, written with the stripe's last unit.
        // Method: the three 64 KiB units of stripe 0 of a 4-disk RAID-5, one by one.
        let array = ArrayLayout { raid: Raid::Raid5, disks: 4, stripe_unit_bytes: 65536 };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        for unit in 0..3u64 {
            first.clear();
            let range = ByteRange::new(unit * 65536, 65536);
            array.plan(range, Access::GatheredWrite, || 0, &mut first, &mut second);
            assert!(second.is_empty(), "no read-modify-write");
            assert!(first.iter().all(|op| op.write && !op.rewrite));
            let disks: Vec<u32> = first.iter().map(|op| op.disk).collect();
            // Stripe 0's parity is on disk 3; unit u's data on disk u.
            let expected = if unit == 2 { vec![2, 3] } else { vec![unit as u32] };
            assert_eq!(disks, expected, "unit {unit}");
        }
        assert_eq!(
            first[1],
            DiskRequest { disk: 3, position: 0, size_bytes: 65536, write: true, rewrite: false }
        );
        // A small gathered write in the middle of a stripe writes only its data.
        first.clear();
        array.plan(
            ByteRange::new(70_000, 4096),
            Access::GatheredWrite,
            || 0,
            &mut first,
            &mut second,
        );
        assert_eq!(first.len(), 1);
        assert!(first[0].write && first[0].disk == 1);
    }

    #[test]
    fn foreground_work_passes_background_work() {
        // Goal: a read on an idle disk starts at once; behind queued foreground work it
        // starts when that ends; with only destaging running it waits half of the last
        // background operation (the expected rest of the one in service), not for the
        // whole backlog.
        let at = |ms: u64| VirtualInstant::ZERO + VirtualDuration::from_millis(ms);
        let mut disk = Disk::default();
        assert_eq!(disk.foreground_start(at(5)), at(5));
        disk.busy_until = at(1_000);
        disk.background_op = VirtualDuration::from_millis(8);
        assert_eq!(disk.foreground_start(at(5)), at(9));
        assert!(disk.interrupts_background(at(5)));
        disk.foreground_until = at(20);
        assert_eq!(disk.foreground_start(at(5)), at(20));
        assert!(!disk.interrupts_background(at(5)));
        // Less background left than half an operation: it finishes first.
        disk.busy_until = at(22);
        assert_eq!(disk.foreground_start(at(21)), at(22));
    }

    #[test]
    fn raid1_reads_one_mirror_and_writes_all() {
        let array = ArrayLayout { raid: Raid::Raid1, disks: 2, stripe_unit_bytes: 65536 };
        let (mut first, mut second) = (Vec::new(), Vec::new());
        array.plan(ByteRange::new(0, 512), Access::Read, || 1, &mut first, &mut second);
        assert_eq!(first.iter().map(|op| op.disk).collect::<Vec<_>>(), vec![1]);
        first.clear();
        array.plan(ByteRange::new(0, 512), Access::Write, || 1, &mut first, &mut second);
        assert_eq!(first.iter().map(|op| op.disk).collect::<Vec<_>>(), vec![0, 1]);
        assert!(second.is_empty());
    }
}
