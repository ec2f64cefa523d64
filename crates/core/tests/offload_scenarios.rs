//! Hand-written timelines for the write off-loading manager: regressions found in
//! review and the protocol points of the core (events, deadlines, admission), each
//! replayed step by step.
//!
//! Method: the test plays the shell. It feeds one event, collects the actions, answers
//! the ones it chooses (a logger's answer carries the status the test gives that
//! logger), reports logger availability by hand, and checks what the manager did.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.
use somnus_core::Version;
use somnus_core::offload::*;
use somnus_types::*;

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

fn status(availability: LoggerAvailability) -> LoggerStatus {
    // Every status newer than the last: the test plays the logger's numbering.
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sequence = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    LoggerStatus {
        availability,
        queue_length: 0,
        free_bytes: 1 << 40,
        hosting_until: VirtualInstant::ZERO,
        sequence,
    }
}

/// The loggers' availability as the test plays them.
struct Loggers([LoggerAvailability; 3]);

impl Loggers {
    fn reply(&self, logger: LoggerId, result: Result<(), LogFailure>) -> LoggerReply {
        LoggerReply { result, status: status(self.0[logger.index()]), waited_for_spin_up: false }
    }
}

fn feed(m: &mut VolumeManager, now: VirtualInstant, e: ManagerEvent) -> Vec<ManagerAction> {
    m.handle(now, e);
    let mut out = Vec::new();
    while let Some(a) = m.poll_action() {
        out.push(a);
    }
    out
}

/// Tells the manager every logger's availability, as the loggers would push it.
fn report_all(m: &mut VolumeManager, now: VirtualInstant, loggers: &Loggers) -> Vec<ManagerAction> {
    let mut out = Vec::new();
    for (i, &availability) in loggers.0.iter().enumerate() {
        let event = ManagerEvent::LoggerReported {
            logger: LoggerId(i as u32),
            status: status(availability),
        };
        out.extend(feed(m, now, event));
    }
    out
}

/// The answer to an action that succeeded: a home completion or a logger's reply.
fn answer(action: &ManagerAction, loggers: &Loggers) -> ManagerEvent {
    match *action {
        ManagerAction::ReadHome { io, .. } | ManagerAction::WriteHome { io, .. } => {
            ManagerEvent::HomeIoCompleted { io, result: Ok(()) }
        }
        ManagerAction::ReadLog { io, logger, .. }
        | ManagerAction::WriteLog { io, logger, .. }
        | ManagerAction::Invalidate { io, logger, .. }
        | ManagerAction::Reserve { io, logger, .. }
        | ManagerAction::ProbeLogger { io, logger } => {
            ManagerEvent::LoggerReplied { io, reply: loggers.reply(logger, Ok(())) }
        }
        _ => panic!("nothing to answer in {action:?}"),
    }
}

/// Answers every action but spin-downs and replies until none is left; returns those.
fn run_out(
    m: &mut VolumeManager,
    now: VirtualInstant,
    mut actions: Vec<ManagerAction>,
    loggers: &Loggers,
) -> Vec<ManagerAction> {
    let mut kept = Vec::new();
    for _ in 0..1000 {
        let Some(action) = actions.pop() else { return kept };
        match action {
            ManagerAction::SpinDown | ManagerAction::SpinUp | ManagerAction::Reply { .. } => {
                kept.push(action)
            }
            other => actions.extend(feed(m, now, answer(&other, loggers))),
        }
    }
    panic!("no end to the actions");
}

#[test]
fn garbage_on_the_own_logger_is_invalidated_once_the_volume_spins_again() {
    // Goal: a version queued for invalidation on the logger that shares the home disks
    // (L0) goes out as soon as the home volume spins again, although the shell sends
    // the owner no report of its own logger. Method: recover with an older version on
    // L1 (asleep) and a newer one on L0; reclaim the newer, which must wait for the
    // older; sleep (after a reservation on L2); wake L1 so the older is invalidated;
    // wake the home for a read: the newer must be invalidated before the next spin-down.
    let b = ByteRange::new(0, 4096);
    let mut m = VolumeManager::recover(
        config(1 << 30),
        t(0),
        SteadyPower::Standby,
        [(LoggerId(1), b, Version(1)), (LoggerId(0), b, Version(2))],
    );
    let mut loggers = Loggers([Awake, Asleep, Awake]);
    assert!(report_all(&mut m, t(0), &loggers).is_empty());
    let a = feed(&mut m, t(1), ManagerEvent::HomePowerChanged { power: SteadyPower::Active });
    assert!(matches!(a[..], [ManagerAction::ReadLog { .. }]));
    let a = feed(&mut m, t(1), answer(&a[0], &loggers));
    assert!(matches!(a[..], [ManagerAction::WriteHome { .. }]));
    let a = feed(&mut m, t(1), answer(&a[0], &loggers));
    assert!(a.is_empty(), "V2 waits for V1 (L1 asleep)");
    let a = feed(&mut m, t(60), ManagerEvent::TimerFired);
    assert!(matches!(a[..], [ManagerAction::Reserve { logger: LoggerId(2), .. }]), "{a:?}");
    let a = feed(&mut m, t(60), answer(&a[0], &loggers));
    assert_eq!(a, vec![ManagerAction::SpinDown], "O3: sleeps once L2 reserved room");
    feed(&mut m, t(61), ManagerEvent::HomePowerChanged { power: SteadyPower::Standby });
    loggers.0[1] = Awake;
    let a = feed(
        &mut m,
        t(100),
        ManagerEvent::LoggerReported { logger: LoggerId(1), status: status(Awake) },
    );
    assert!(matches!(a[..], [ManagerAction::Invalidate { logger: LoggerId(1), .. }]));
    let a = feed(&mut m, t(100), answer(&a[0], &loggers));
    assert!(a.is_empty());
    // A read of a home block spins the volume up; its own logger L0 is awake again.
    let c = ByteRange::new(8192, 4096);
    let a = feed(
        &mut m,
        t(200),
        ManagerEvent::RequestArrived { request: RequestId(7), kind: IoKind::Read, range: c },
    );
    assert_eq!(a, vec![ManagerAction::SpinUp]);
    let mut all =
        feed(&mut m, t(210), ManagerEvent::HomePowerChanged { power: SteadyPower::Active });
    let read = all.iter().find(|a| matches!(a, ManagerAction::ReadHome { .. })).copied().unwrap();
    all.extend(feed(&mut m, t(210), answer(&read, &loggers)));
    let deadline = m.poll_timeout().unwrap();
    all.extend(feed(&mut m, deadline, ManagerEvent::TimerFired));
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
    // instead of sleeping again at once and waking for every next write. Method: six
    // rounds of a logged write, a spin-up and quiescence; at most three spin-ups.
    let mut m = VolumeManager::recover(
        config(8192),
        t(0),
        SteadyPower::Standby,
        [(LoggerId(1), ByteRange::new(0, 8192), Version(1))],
    );
    let loggers = Loggers([Awake, Asleep, Awake]);
    report_all(&mut m, t(0), &loggers);
    let mut now = 1;
    for round in 0..6u64 {
        let w = ByteRange::new((1 << 20) + round * 4096, 4096);
        let request = ManagerEvent::RequestArrived {
            request: RequestId(round),
            kind: IoKind::Write,
            range: w,
        };
        let a = feed(&mut m, t(now), request);
        let a = run_out(&mut m, t(now), a, &loggers);
        if !a.contains(&ManagerAction::SpinUp) {
            assert!(m.logged_bytes() < 8192, "over the limit without a spin-up");
            now += 30;
            continue;
        }
        now += 10;
        let mut a =
            feed(&mut m, t(now), ManagerEvent::HomePowerChanged { power: SteadyPower::Active });
        // Run to quiescence: answer every I/O (the sleeping logger's too: its node
        // would wake it), fire timers, until the volume asks to sleep.
        loop {
            let kept = run_out(&mut m, t(now), std::mem::take(&mut a), &loggers);
            if kept.contains(&ManagerAction::SpinDown) {
                break;
            }
            let d = m.poll_timeout().unwrap();
            now = d.as_nanos().div_ceil(1_000_000_000);
            a = feed(&mut m, d, ManagerEvent::TimerFired);
        }
        assert!(
            m.logged_bytes() < 8192,
            "slept again with {} bytes over the limit",
            m.logged_bytes()
        );
        now += 1;
        feed(&mut m, t(now), ManagerEvent::HomePowerChanged { power: SteadyPower::Standby });
        now += 30;
    }
    // The first write finds 8 KiB logged; afterwards the log refills every other write.
    assert!(
        m.counters().spin_ups_requested <= 3,
        "{} spin-ups for 6 writes",
        m.counters().spin_ups_requested
    );
}

#[test]
fn a_lost_logger_reply_is_handled_by_the_deadline() {
    // Goal: a logger that never answers a write is not waited on forever: at the
    // write's deadline the manager marks it unreachable, counts the miss, treats the
    // record as possibly landed (garbage to invalidate when it returns), and writes
    // elsewhere; the client gets one reply; the late reply, when it comes, is dropped.
    // Method: a sleeping home, L1 and L2 awake; the first write goes to L1, whose reply
    // is lost.
    let mut m = VolumeManager::new(config(1 << 30), t(0), SteadyPower::Standby);
    let loggers = Loggers([Asleep, Awake, Awake]);
    report_all(&mut m, t(0), &loggers);
    let w = ByteRange::new(0, 4096);
    let a = feed(
        &mut m,
        t(1),
        ManagerEvent::RequestArrived { request: RequestId(1), kind: IoKind::Write, range: w },
    );
    let [ManagerAction::WriteLog { io: lost, logger: first, .. }] = a[..] else { panic!("{a:?}") };
    let deadline = m.poll_timeout().unwrap();
    assert_eq!(
        deadline,
        t(1) + m.config().io_deadline,
        "the deadline is armed through poll_timeout"
    );
    let a = feed(&mut m, deadline, ManagerEvent::TimerFired);
    let [ManagerAction::WriteLog { io: retry, logger: second, .. }] = a[..] else {
        panic!("{a:?}")
    };
    assert_ne!(first, second, "retried on another logger");
    assert_eq!(m.counters().deadlines_missed, 1);
    assert_eq!(m.garbage_entries(), 1, "the lost write may have landed: garbage");
    let a = feed(
        &mut m,
        deadline,
        ManagerEvent::LoggerReplied { io: retry, reply: loggers.reply(second, Ok(())) },
    );
    assert!(matches!(a[..], [ManagerAction::Reply { request: RequestId(1), .. }]), "{a:?}");
    let late = ManagerEvent::LoggerReplied { io: lost, reply: loggers.reply(first, Ok(())) };
    assert!(feed(&mut m, deadline, late).is_empty());
    assert_eq!(m.counters().replies_dropped, 1, "the late reply is dropped");
    assert_eq!(m.logged_version(w).map(|(logger, _)| logger), Some(second));
    // The unreachable logger is probed, and invalidated once it answers.
    let probe_at = m.poll_timeout().unwrap();
    let a = feed(&mut m, probe_at, ManagerEvent::TimerFired);
    let probe = a.iter().find(|a| matches!(a, ManagerAction::ProbeLogger { .. })).copied().unwrap();
    let a = feed(&mut m, probe_at, answer(&probe, &loggers));
    assert!(
        a.iter().any(|a| matches!(a, ManagerAction::Invalidate { logger, .. } if *logger == first)),
        "{a:?}"
    );
}

#[test]
fn overlapping_writes_are_served_in_arrival_order_and_the_newest_stays_mapped() {
    // Goal: two overlapping writes are never in service at once (the second waits for
    // the first), so however the shell orders completions the newest version ends up
    // mapped; a repeated reply of the first changes nothing. Method: a sleeping home;
    // W1 and W2 to the same block arrive together; the shell answers what it can in
    // reverse order, twice.
    let mut m = VolumeManager::new(config(1 << 30), t(0), SteadyPower::Standby);
    let loggers = Loggers([Asleep, Awake, Awake]);
    report_all(&mut m, t(0), &loggers);
    let w = ByteRange::new(0, 4096);
    let mut pending = Vec::new();
    for request in [1, 2] {
        let event = ManagerEvent::RequestArrived {
            request: RequestId(request),
            kind: IoKind::Write,
            range: w,
        };
        pending.extend(feed(&mut m, t(1), event));
    }
    assert_eq!(pending.len(), 1, "W2 waits for W1: {pending:?}");
    let first = pending[0];
    let mut replies = Vec::new();
    let mut versions = Vec::new();
    let mut answered = 0;
    while let Some(action) = pending.pop() {
        answered += 1;
        if let ManagerAction::WriteLog { version, .. } = action {
            versions.push(version);
        }
        let event = answer(&action, &loggers);
        for _ in 0..2 {
            // Each answer delivered twice, the second time after the later request.
            let out = feed(&mut m, t(2), event);
            replies
                .extend(out.iter().filter(|a| matches!(a, ManagerAction::Reply { .. })).copied());
            pending.extend(out.into_iter().filter(|a| !matches!(a, ManagerAction::Reply { .. })));
        }
    }
    assert_eq!(replies.len(), 2, "one reply per request: {replies:?}");
    assert!(matches!(replies[0], ManagerAction::Reply { request: RequestId(1), .. }));
    assert_eq!(versions.len(), 2);
    assert!(versions[0] < versions[1]);
    assert_eq!(
        m.logged_version(w).map(|(_, version)| version),
        Some(versions[1]),
        "the newest is mapped"
    );
    assert_eq!(answered, 3, "two writes and the invalidation of W1's displaced version");
    assert_eq!(m.counters().replies_dropped, answered, "each repeat dropped: {first:?}");
}

#[test]
fn answers_that_name_nothing_or_the_wrong_kind_are_dropped() {
    // Goal: input from a disk or a peer never panics the manager: a completion of an
    // unknown I/O, a disk completion naming a logger request and a logger reply naming
    // a home I/O are each dropped and counted, and the real answers still complete
    // their requests. Method: one logged write and one home read in flight.
    let mut m = VolumeManager::new(config(1 << 30), t(0), SteadyPower::Active);
    let loggers = Loggers([Awake, Awake, Awake]);
    report_all(&mut m, t(0), &loggers);
    let b = ByteRange::new(0, 4096);
    let write =
        ManagerEvent::RequestArrived { request: RequestId(1), kind: IoKind::Write, range: b };
    let home = feed(&mut m, t(1), write);
    let [ManagerAction::WriteHome { io: home_io, .. }] = home[..] else { panic!("{home:?}") };
    let unknown = ManagerEvent::HomeIoCompleted { io: IoId(987_654_321), result: Ok(()) };
    assert!(feed(&mut m, t(1), unknown).is_empty());
    let wrong =
        ManagerEvent::LoggerReplied { io: home_io, reply: loggers.reply(LoggerId(1), Ok(())) };
    assert!(feed(&mut m, t(1), wrong).is_empty());
    assert_eq!(m.counters().replies_dropped, 2);
    let done = feed(&mut m, t(1), ManagerEvent::HomeIoCompleted { io: home_io, result: Ok(()) });
    assert!(matches!(
        done[..],
        [ManagerAction::Reply { request: RequestId(1), outcome: ReplyOutcome::Home, .. }]
    ));
    // A failed home write is tried again, then the request fails: never a panic.
    let again =
        ManagerEvent::RequestArrived { request: RequestId(2), kind: IoKind::Write, range: b };
    let mut actions = feed(&mut m, t(2), again);
    let mut attempts = 0;
    while let [ManagerAction::WriteHome { io, .. }] = actions[..] {
        attempts += 1;
        actions = feed(
            &mut m,
            t(2),
            ManagerEvent::HomeIoCompleted { io, result: Err(HomeIoError::Device) },
        );
    }
    assert_eq!(attempts, m.config().home_io_attempts_max);
    assert!(matches!(
        actions[..],
        [ManagerAction::Reply { request: RequestId(2), outcome: ReplyOutcome::Failed, .. }]
    ));
}
