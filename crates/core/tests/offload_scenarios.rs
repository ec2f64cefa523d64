//! Hand-written timelines for the write off-loading manager: regressions found in
//! review, each replayed step by step against a scripted logger probe.
//!
//! Method: the test plays the shell: it feeds one event, collects the actions,
//! completes the I/Os it chooses, and flips logger availability by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.
use somnus_core::Version;
use somnus_core::offload::*;
use somnus_types::*;

struct S {
    avail: [LoggerAvailability; 3],
}
impl LoggerStatuses for S {
    fn status(&self, l: LoggerId) -> LoggerStatus {
        LoggerStatus { availability: self.avail[l.index()], queue_length: 0, free_bytes: 1 << 40 }
    }
}
use LoggerAvailability::*;

fn t(s: u64) -> VirtualInstant {
    VirtualInstant::ZERO + VirtualDuration::from_secs(s)
}

fn config(limit: u64) -> ManagerConfig {
    let view = (0..3u32)
        .map(|i| ViewEntry {
            logger: LoggerId(i),
            remote: false,
            shares_home_disks: i == 0,
            host_idle_power: Power::ZERO,
        })
        .collect();
    ManagerConfig::new(
        VolumeId(0),
        PowerPolicy::Offload {
            read_idle: VirtualDuration::from_secs(60),
            write_idle: VirtualDuration::from_secs(10),
            offload_limit_bytes: limit,
        },
        view,
    )
}

fn feed(m: &mut VolumeManager, now: VirtualInstant, e: ManagerEvent, s: &S) -> Vec<ManagerAction> {
    m.handle(now, e, s);
    let mut out = Vec::new();
    while let Some(a) = m.poll_action() {
        out.push(a);
    }
    out
}

fn io_of(a: &ManagerAction) -> IoId {
    match *a {
        ManagerAction::ReadHome { io, .. }
        | ManagerAction::WriteHome { io, .. }
        | ManagerAction::ReadLog { io, .. }
        | ManagerAction::WriteLog { io, .. }
        | ManagerAction::Invalidate { io, .. } => io,
        _ => panic!("{a:?}"),
    }
}

fn ok(io: IoId) -> ManagerEvent {
    ManagerEvent::IoCompleted { io, result: Ok(()) }
}

#[test]
fn garbage_on_the_own_logger_is_invalidated_once_the_volume_spins_again() {
    // Goal: a version queued for invalidation on the logger that shares the home disks
    // (L0) goes out as soon as the home volume spins again, although the shell sends
    // the owner no LoggersChanged for its own logger. Method: recover with an older
    // version on L1 (asleep) and a newer one on L0; reclaim the newer, which must wait
    // for the older; sleep; wake L1 so the older is invalidated; wake the home for a
    // read: the newer must be invalidated before the next spin-down.
    let b = ByteRange::new(0, 4096);
    let mut m = VolumeManager::recover(
        config(1 << 30),
        t(0),
        HomePower::Standby,
        [(LoggerId(1), b, Version(1)), (LoggerId(0), b, Version(2))],
    );
    let mut s = S { avail: [Asleep, Asleep, Awake] };
    s.avail[0] = Awake;
    let a = feed(&mut m, t(1), ManagerEvent::HomePowerChanged { power: HomePower::Active }, &s);
    assert!(matches!(a[..], [ManagerAction::ReadLog { .. }]));
    let a = feed(&mut m, t(1), ok(io_of(&a[0])), &s);
    assert!(matches!(a[..], [ManagerAction::WriteHome { .. }]));
    let a = feed(&mut m, t(1), ok(io_of(&a[0])), &s);
    assert!(a.is_empty(), "V2 waits for V1 (L1 asleep)");
    let a = feed(&mut m, t(60), ManagerEvent::TimerFired, &s);
    assert_eq!(a, vec![ManagerAction::SpinDown]);
    s.avail[0] = Asleep;
    feed(&mut m, t(61), ManagerEvent::HomePowerChanged { power: HomePower::Standby }, &s);
    s.avail[1] = Awake;
    let a = feed(&mut m, t(100), ManagerEvent::LoggersChanged, &s);
    assert!(matches!(a[..], [ManagerAction::Invalidate { logger: LoggerId(1), .. }]));
    let a = feed(&mut m, t(100), ok(io_of(&a[0])), &s);
    assert!(a.is_empty());
    // A read of a home block spins the volume up; its own logger L0 is awake again.
    let c = ByteRange::new(8192, 4096);
    let a = feed(
        &mut m,
        t(200),
        ManagerEvent::RequestArrived { request: RequestId(7), kind: IoKind::Read, range: c },
        &s,
    );
    assert_eq!(a, vec![ManagerAction::SpinUp]);
    s.avail[0] = Awake;
    let mut all =
        feed(&mut m, t(210), ManagerEvent::HomePowerChanged { power: HomePower::Active }, &s);
    let read = all.iter().find(|a| matches!(a, ManagerAction::ReadHome { .. })).copied().unwrap();
    all.extend(feed(&mut m, t(210), ok(io_of(&read)), &s));
    let deadline = m.poll_timeout().unwrap();
    all.extend(feed(&mut m, deadline, ManagerEvent::TimerFired, &s));
    assert!(
        all.iter().any(|a| matches!(a, ManagerAction::Invalidate { .. })),
        "L0 was awake from 210 s to the spin-down, yet V2 ({} garbage entries) was never invalidated",
        m.garbage_entries()
    );
}

#[test]
fn the_offload_limit_drains_a_sleeping_logger_instead_of_spinning_up_per_write() {
    // Goal: when the data over the off-load limit sits on a sleeping logger, the woken
    // home volume reads it back (waking that logger) until it is under the limit,
    // instead of sleeping again at once and waking for every next write. Method: five
    // rounds of a logged write, a spin-up and quiescence; at most one spin-up.
    let mut m = VolumeManager::recover(
        config(8192),
        t(0),
        HomePower::Standby,
        [(LoggerId(1), ByteRange::new(0, 8192), Version(1))],
    );
    let s_down = S { avail: [Asleep, Asleep, Awake] };
    let s_up = S { avail: [Awake, Asleep, Awake] };
    let mut now = 1;
    for round in 0..6u64 {
        let w = ByteRange::new((1 << 20) + round * 4096, 4096);
        let a = feed(
            &mut m,
            t(now),
            ManagerEvent::RequestArrived {
                request: RequestId(round),
                kind: IoKind::Write,
                range: w,
            },
            &s_down,
        );
        let a = feed(&mut m, t(now), ok(io_of(&a[0])), &s_down);
        if !a.contains(&ManagerAction::SpinUp) {
            assert!(m.logged_bytes() < 8192, "over the limit without a spin-up");
            now += 30;
            continue;
        }
        now += 10;
        let mut a = feed(
            &mut m,
            t(now),
            ManagerEvent::HomePowerChanged { power: HomePower::Active },
            &s_up,
        );
        // Run to quiescence: complete every I/O (the sleeping logger's too: the shell
        // would wake it), fire timers, until the volume asks to sleep.
        loop {
            if let Some(i) = a
                .iter()
                .position(|x| !matches!(x, ManagerAction::SpinDown | ManagerAction::Reply { .. }))
            {
                let io = io_of(&a.remove(i));
                a.extend(feed(&mut m, t(now), ok(io), &s_up));
                continue;
            }
            if a.contains(&ManagerAction::SpinDown) {
                break;
            }
            let d = m.poll_timeout().unwrap();
            now = d.as_nanos().div_ceil(1_000_000_000);
            a = feed(&mut m, d, ManagerEvent::TimerFired, &s_up);
        }
        assert!(
            m.logged_bytes() < 8192,
            "slept again with {} bytes over the limit",
            m.logged_bytes()
        );
        now += 1;
        feed(&mut m, t(now), ManagerEvent::HomePowerChanged { power: HomePower::Standby }, &s_down);
        now += 30;
    }
    // The first write finds 8 KiB logged; afterwards the log refills every other write.
    assert!(
        m.counters().spin_ups_requested <= 3,
        "{} spin-ups for 6 writes",
        m.counters().spin_ups_requested
    );
}
