//! The physical side of a volume: its array of disks with their queues, the array
//! controller's caches, the power state of the disks and the energy meter. It carries
//! out what a node asks (an I/O, a spin-down, a spin-up) and says when each is done;
//! it decides nothing. An I/O for disks that do not spin is a bug of the node that
//! issued it, and stops the run.

use std::collections::VecDeque;

use somnus_core::power::{EnergyMeter, PowerState, PowerTimeline};
use somnus_types::{ByteRange, VirtualDuration, VirtualInstant};

use crate::cache::BlockCache;
use crate::disk::{Access, ArrayLayout, Disk, DiskModel, DiskRequest};
use crate::topology::{TraceLayout, VolumeLayout};

/// A write that fits in the controller's cache, or a read found in it, completes after
/// this overhead plus its transfer over an Ultra320 SCSI bus.
const CACHE_HIT_OVERHEAD: VirtualDuration = VirtualDuration::from_micros(100);

/// 320 MB/s is 3.125 ns a byte: 25 ns per 8 bytes, in integers.
fn bus_transfer(size_bytes: u64) -> VirtualDuration {
    VirtualDuration::from_nanos(size_bytes * 25 / 8)
}

/// The disks' power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiskPower {
    Active,
    /// Told to spin down: the cached writes reach the disks first.
    SpinningDown,
    Standby,
    SpinningUp,
}

pub(crate) struct Volume {
    pub(crate) power: DiskPower,
    disks: Vec<Disk>,
    model: DiskModel,
    array: ArrayLayout,
    /// The write cache: capacity, bytes not yet on disk, and when each write's
    /// destage completes.
    cache_bytes: u64,
    cache_used: u64,
    /// Cached writes in arrival order with their destage completions. Destages finish
    /// nearly in order (FCFS disks), and one finishing before an earlier arrival is
    /// released with it: the occupancy errs on the full side, never the empty one.
    destages: VecDeque<(VirtualInstant, u64)>,
    /// Where the last write to the array ended: a write starting there continues a
    /// sequential run, which the write cache gathers into whole stripes.
    last_write_end: u64,
    read_cache: Option<BlockCache>,
    pub(crate) meter: EnergyMeter,
    /// Bytes the array holds (its log partition included).
    pub(crate) capacity_bytes: u64,
    /// Requests of the measured window, for reports.
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    first_ops: Vec<DiskRequest>,
    second_ops: Vec<DiskRequest>,
}

impl Volume {
    pub(crate) fn new(
        layout: &TraceLayout,
        volume: &VolumeLayout,
        start: VirtualInstant,
        timeline: PowerTimeline,
    ) -> Volume {
        let profile = &layout.profiles[volume.profile];
        // Topology validation guarantees every array profile has mechanics.
        let Some(mechanics) = &profile.mechanics else {
            panic!("profile {} is not a disk", profile.name)
        };
        let model = DiskModel::new(mechanics);
        let array = ArrayLayout {
            raid: volume.raid,
            disks: volume.disks,
            stripe_unit_bytes: volume.stripe_unit_bytes,
        };
        let capacity_bytes = array.capacity_bytes(model.capacity_bytes());
        let meter = EnergyMeter::new(profile, volume.disks, PowerState::Idle, start)
            .with_timeline(timeline);
        Volume {
            power: DiskPower::Active,
            disks: vec![Disk::default(); volume.disks as usize],
            model,
            array,
            cache_bytes: volume.write_cache_bytes,
            cache_used: 0,
            destages: VecDeque::new(),
            last_write_end: u64::MAX,
            read_cache: BlockCache::new(volume.read_cache_bytes),
            meter,
            capacity_bytes,
            reads: 0,
            writes: 0,
            first_ops: Vec::new(),
            second_ops: Vec::new(),
        }
    }

    /// Serves an I/O at `now`; returns when it completes (acknowledged by the
    /// controller's write cache, or read).
    pub(crate) fn serve(
        &mut self,
        now: VirtualInstant,
        write: bool,
        placement: ByteRange,
    ) -> VirtualInstant {
        assert_eq!(
            self.power,
            DiskPower::Active,
            "an I/O for disks that do not spin: the node must spin them up first"
        );
        let (start, end) = (placement.start, placement.end);
        if let Some(cache) = &mut self.read_cache {
            if !write && cache.hit(start, end) {
                return now + CACHE_HIT_OVERHEAD + bus_transfer(placement.size_bytes());
            }
            cache.insert(start, end);
        }
        let mut first = std::mem::take(&mut self.first_ops);
        let mut second = std::mem::take(&mut self.second_ops);
        first.clear();
        second.clear();
        // A write the cache takes is background work for the disks, gathered into
        // whole stripes if it continues the previous write; reads and writes no cache
        // takes are foreground.
        let cached = write && placement.size_bytes() <= self.cache_bytes;
        let access = match (write, cached && start == self.last_write_end) {
            (false, _) => Access::Read,
            (true, true) => Access::GatheredWrite,
            (true, false) => Access::Write,
        };
        if write {
            self.last_write_end = end;
        }
        let disks = &self.disks;
        let pick_mirror = || {
            // The mirror that can start the read soonest, then the nearer head, then
            // the lower index.
            let key = |(i, disk): (usize, &Disk)| {
                (disk.foreground_start(now), disk.head.abs_diff(start), i)
            };
            disks.iter().enumerate().min_by_key(|&entry| key(entry)).map_or(0, |(i, _)| i as u32)
        };
        self.array.plan(placement, access, pick_mirror, &mut first, &mut second);
        let foreground = !cached;
        let mut done = self.queue(&first, now, foreground);
        if !second.is_empty() {
            // The write half of a read-modify-write is queued on its disks right behind
            // the read half, as a controller holding the stripe lock does: the new
            // parity needs every old block first.
            done = self.queue(&second, done, foreground);
        }
        if write {
            done = self.cache_write(now, placement.size_bytes(), done);
        }
        self.first_ops = first;
        self.second_ops = second;
        done
    }

    /// When a write whose disk work completes at `destaged` is acknowledged: at once if
    /// the write cache has room, after enough earlier writes are destaged if it is
    /// full, and at `destaged` without a cache or for a write larger than it.
    fn cache_write(
        &mut self,
        now: VirtualInstant,
        size_bytes: u64,
        destaged: VirtualInstant,
    ) -> VirtualInstant {
        if size_bytes > self.cache_bytes {
            return destaged;
        }
        let mut room_at = now;
        while let Some(&(at, bytes)) = self.destages.front() {
            if at > now && self.cache_used + size_bytes <= self.cache_bytes {
                break;
            }
            self.destages.pop_front();
            self.cache_used -= bytes;
            room_at = room_at.max(at);
        }
        self.cache_used += size_bytes;
        self.destages.push_back((destaged, size_bytes));
        let transfer = bus_transfer(size_bytes);
        (room_at + CACHE_HIT_OVERHEAD + transfer).min(destaged.max(now + CACHE_HIT_OVERHEAD))
    }

    /// Queues operations on their disks, none before `not_before`: background ones
    /// first come first served, foreground ones ahead of queued background work (see
    /// `disk`); returns when the last one completes.
    fn queue(
        &mut self,
        ops: &[DiskRequest],
        not_before: VirtualInstant,
        foreground: bool,
    ) -> VirtualInstant {
        let mut done = not_before;
        for op in ops {
            let queued =
                self.disks[op.disk as usize].queue(&self.model, op, not_before, foreground);
            self.meter.add_busy(queued.start, queued.busy);
            done = done.max(queued.end);
        }
        done
    }

    /// Stops taking I/O; returns when the disks are idle (the cached writes on them),
    /// when the spin-down proper may start.
    pub(crate) fn begin_spin_down(&mut self, now: VirtualInstant) -> VirtualInstant {
        assert_eq!(self.power, DiskPower::Active, "O3: spin-down of disks that do not spin");
        self.power = DiskPower::SpinningDown;
        self.disks.iter().map(|disk| disk.busy_until).max().unwrap_or(now).max(now)
    }

    /// The disks are idle: the transition to standby starts; returns its end.
    pub(crate) fn start_spin_down(&mut self, now: VirtualInstant) -> VirtualInstant {
        assert_eq!(self.power, DiskPower::SpinningDown, "a spin-down lost its state");
        assert!(
            self.disks.iter().all(|disk| disk.busy_until <= now),
            "O3: the disks spin down with work left"
        );
        match self.meter.begin_transition(now, PowerState::Standby) {
            Ok(duration) => now + duration,
            Err(error) => panic!("{error}"),
        }
    }

    /// Starts a spin-up; returns its end.
    pub(crate) fn begin_spin_up(&mut self, now: VirtualInstant) -> VirtualInstant {
        assert_eq!(self.power, DiskPower::Standby, "a spin-up of disks not in standby");
        self.power = DiskPower::SpinningUp;
        match self.meter.begin_transition(now, PowerState::Idle) {
            Ok(duration) => now + duration,
            Err(error) => panic!("{error}"),
        }
    }

    /// A transition ended; returns whether the disks now spin.
    pub(crate) fn transition_done(&mut self, now: VirtualInstant) -> bool {
        self.meter.advance(now);
        self.power = match self.power {
            DiskPower::SpinningDown => DiskPower::Standby,
            DiskPower::SpinningUp => DiskPower::Active,
            DiskPower::Active | DiskPower::Standby => {
                unreachable!("power event without a transition")
            }
        };
        self.power == DiskPower::Active
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    fn volume() -> Volume {
        let layout = Topology::msr_cambridge()
            .layout(&["hm_1".to_string()])
            .unwrap_or_else(|e| panic!("{e}"));
        let timeline = PowerTimeline::new(
            VirtualInstant::ZERO,
            VirtualDuration::from_secs(60),
            VirtualDuration::from_secs(60),
        );
        Volume::new(&layout, &layout.volumes[0], VirtualInstant::ZERO, timeline)
    }

    #[test]
    #[should_panic(expected = "the node must spin them up first")]
    fn an_io_to_sleeping_disks_without_a_spin_up_is_caught() {
        // Goal: the shell refuses to serve an I/O the core sent to disks in standby
        // without asking for a spin-up first (wakes are the core's explicit actions).
        let mut volume = volume();
        let now = VirtualInstant::ZERO;
        let idle_at = volume.begin_spin_down(now);
        let standby_at = volume.start_spin_down(idle_at);
        volume.transition_done(standby_at);
        assert_eq!(volume.power, DiskPower::Standby);
        volume.serve(standby_at, false, ByteRange::new(0, 4096));
    }
}
