//! A storage node driven end to end on hand-made timelines.
//!
//! Goal: what the node decides on its own holds: background work — reclaim,
//! invalidations, probes, garbage of a sleeping logger — never wakes a sleeping disk,
//! only a client's request does; the shell only ever sees I/O for disks that spin.
//! Method: the test is a small shell around one `Node` (three volumes of one server,
//! machine-level off-load): disk I/O completes 5 ms after it is issued, a spin-up
//! takes 10 s and a spin-down is immediate; it records every action.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use somnus_core::node::{ClusterMap, Node, NodeAction, NodeEvent, VolumePlacement, plan_cluster};
use somnus_core::offload::{ConfigKind, PolicyParams, SteadyPower};
use somnus_types::{
    ByteRange, IoId, IoKind, Power, RackId, RequestId, ServerId, VirtualDuration, VirtualInstant,
    VolumeId,
};

const DISK_IO: VirtualDuration = VirtualDuration::from_millis(5);
const SPIN_UP: VirtualDuration = VirtualDuration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    Disk(u64),
    PowerUp(u32),
    PowerDown(u32),
    Timer,
}

struct Shell {
    node: Node,
    now: VirtualInstant,
    sequence: u64,
    due: BinaryHeap<Reverse<(VirtualInstant, u64, Due)>>,
    spinning: Vec<bool>,
    spin_ups: Vec<(VirtualInstant, VolumeId)>,
    replies: u64,
    next_request: u64,
    timer: Option<VirtualInstant>,
}

impl Shell {
    fn new(volumes: u32) -> Shell {
        let placements = (0..volumes)
            .map(|v| VolumePlacement {
                volume: VolumeId(v),
                server: ServerId(0),
                rack: RackId(0),
                idle_power: Power::try_from_watts(24.0).unwrap(),
                log_offset_bytes: 1 << 40,
                log_bytes: 4 << 30,
            })
            .collect();
        let map = ClusterMap { volumes: placements };
        let mut configs = plan_cluster(&map, ConfigKind::Machine, &PolicyParams::default());
        assert_eq!(configs.len(), 1);
        let node = Node::new(configs.remove(0), VirtualInstant::ZERO, SteadyPower::Active);
        let mut shell = Shell {
            node,
            now: VirtualInstant::ZERO,
            sequence: 0,
            due: BinaryHeap::new(),
            spinning: vec![true; volumes as usize],
            spin_ups: Vec::new(),
            replies: 0,
            next_request: 0,
            timer: None,
        };
        shell.drain();
        shell
    }

    fn at(&mut self, delay: VirtualDuration, due: Due) {
        self.sequence += 1;
        self.due.push(Reverse((self.now + delay, self.sequence, due)));
    }

    fn drain(&mut self) {
        while let Some(action) = self.node.poll_action() {
            match action {
                NodeAction::DiskIo { io, volume, .. } => {
                    assert!(self.spinning[volume.index()], "I/O for {volume}, which does not spin");
                    self.at(DISK_IO, Due::Disk(io.0));
                }
                NodeAction::SpinUp { volume } => {
                    assert!(!self.spinning[volume.index()]);
                    self.spin_ups.push((self.now, volume));
                    self.at(SPIN_UP, Due::PowerUp(volume.0));
                }
                NodeAction::SpinDown { volume } => {
                    assert!(self.spinning[volume.index()]);
                    self.spinning[volume.index()] = false;
                    self.at(VirtualDuration::ZERO, Due::PowerDown(volume.0));
                }
                NodeAction::Send { to, .. } => panic!("a message to {to} on a one-server cluster"),
                NodeAction::Reply { .. } => self.replies += 1,
            }
        }
        if let Some(at) = self.node.poll_timeout()
            && self.timer.is_none_or(|armed| at < armed)
        {
            self.timer = Some(at);
            self.sequence += 1;
            self.due.push(Reverse((at, self.sequence, Due::Timer)));
        }
    }

    fn run_until(&mut self, until: VirtualInstant) {
        while let Some(&Reverse((at, _, due))) = self.due.peek() {
            if at > until {
                break;
            }
            self.due.pop();
            self.now = at;
            let event = match due {
                Due::Disk(io) => NodeEvent::DiskIoCompleted { io: IoId(io), result: Ok(()) },
                Due::PowerUp(volume) => {
                    self.spinning[volume as usize] = true;
                    NodeEvent::PowerChanged { volume: VolumeId(volume), power: SteadyPower::Active }
                }
                Due::PowerDown(volume) => NodeEvent::PowerChanged {
                    volume: VolumeId(volume),
                    power: SteadyPower::Standby,
                },
                Due::Timer if self.timer == Some(at) => {
                    self.timer = None;
                    NodeEvent::TimerFired
                }
                Due::Timer => continue,
            };
            self.node.handle(self.now, event);
            self.drain();
        }
        self.now = until;
    }

    fn request(&mut self, at_s: f64, volume: u32, offset: u64, kind: IoKind) {
        self.run_until(VirtualInstant::ZERO + VirtualDuration::try_from_secs_f64(at_s).unwrap());
        self.next_request += 1;
        let request = RequestId(self.next_request);
        let range = ByteRange::new(offset, 4096);
        self.node.handle(
            self.now,
            NodeEvent::RequestArrived { volume: VolumeId(volume), request, kind, range },
        );
        self.drain();
    }
}

#[test]
fn background_work_never_wakes_a_sleeping_disk() {
    // Goal: with data of A logged on B and C, garbage of A on C (asleep), A asleep
    // with reclaim to do, an hour passes: neither A nor C is woken; then a read of A's
    // home wakes A, and nothing else wakes C. Method: B is read every 5 s (it stays
    // awake as the logger host); A is written while it sleeps, some writes landing on C
    // while B is busy; C then sleeps; A's blocks are written again (their old versions
    // on C become garbage); an hour of quiet; a read of a home block of A.
    let (a, b, c) = (0, 1, 2);
    let mut shell = Shell::new(3);
    for i in 0..12 * 60u32 {
        let at = 0.5 + f64::from(i) * 5.0;
        shell.request(at, b, (u64::from(i) % 16) * 65536, IoKind::Read);
        if i < 40 {
            // C is read until 200 s, so it is awake while A's first writes come.
            shell.request(at, c, (u64::from(i) % 16) * 65536, IoKind::Read);
        }
        if (15..40).contains(&i) || (80..100).contains(&i) {
            // A is asleep from about 60 s: these writes are off-loaded; while C is
            // awake, to C (B is busy with its read); after C sleeps, to B.
            shell.request(at + 0.001, a, (u64::from(i) % 6) * 4096, IoKind::Write);
        }
    }
    let logger_c = shell.node.logger(VolumeId(c)).unwrap();
    assert!(logger_c.record_count() > 0, "some of A's writes landed on C");
    assert!(!shell.spinning[c as usize] && !shell.spinning[a as usize], "A and C sleep");
    let manager_a = shell.node.manager(VolumeId(a)).unwrap();
    assert!(
        manager_a.logged_bytes() > 0 && manager_a.garbage_entries() > 0,
        "reclaim and garbage to do"
    );
    let spin_ups_before = shell.spin_ups.len();
    shell.run_until(shell.now + VirtualDuration::from_secs(3600));
    assert_eq!(
        shell.spin_ups.len(),
        spin_ups_before,
        "background work woke a disk: {:?}",
        shell.spin_ups
    );
    assert!(!shell.spinning[c as usize] && !shell.spinning[a as usize]);
    // A client's read of a block of A that is at home wakes A, and only A.
    let at = shell.now.as_secs_f64() + 1.0;
    shell.request(at, a, 1 << 30, IoKind::Read);
    shell.run_until(shell.now + VirtualDuration::from_secs(600));
    let woken: Vec<VolumeId> = shell.spin_ups[spin_ups_before..].iter().map(|(_, v)| *v).collect();
    assert_eq!(woken, vec![VolumeId(a)], "only the read's volume wakes");
    assert!(!shell.spinning[c as usize], "C's garbage never woke it");
    assert!(shell.replies > 0);
}
