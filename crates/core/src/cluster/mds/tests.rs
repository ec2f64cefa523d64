// Goal: the MDS grants each group's epochs once, never lets two leases of a group
// overlap (C1, C2), moves primaries off servers before they sleep (P1), never takes a
// sleeping server for a failed one (P2) and wakes sleeping replicas when a server fails
// (P3). Method: a small harness of well-behaved servers that heartbeat every second,
// accept grants, hand leases back when asked and sleep when told, in virtual time; a
// checker of lease overlap runs at every step.

use std::collections::BTreeMap;

use somnus_types::{ChunkGroupId, ObjectId, ServerId, VirtualDuration, VirtualInstant};

use super::*;
use crate::cluster::{
    BindCondition, BindRequest, ClientId, ClusterConfig, Epoch, HeldObject, Message, MetadataError,
    ObjectInfo, Peer, ServerPower, SpaceReport,
};
use crate::gear::{Capability, Gearing, LoadSample, Policy, SchedulerConfig};
use crate::layout::{Layout, LayoutSpec, RackAssignment, Scheme};

const SERVERS: u32 = 9;
const GROUPS: u32 = 36;

/// Nine servers in three racks, rack-aligned: rack k is gear group k.
fn layout() -> Layout {
    layout_of(RackAssignment::Aligned, 3)
}

fn layout_of(racks: RackAssignment, seed: u64) -> Layout {
    let spec = LayoutSpec {
        servers: SERVERS,
        replicas: 3,
        racks: 3,
        chunk_groups: GROUPS,
        scheme: Scheme::PowerAware(racks),
        seed,
    };
    Layout::build(&spec).unwrap()
}

/// A server as the MDS sees it from outside: what it leads and until when.
#[derive(Default)]
struct FakeServer {
    leases: BTreeMap<ChunkGroupId, (Epoch, VirtualInstant)>,
    asleep: bool,
    dead: bool,
    /// Alive and holding its leases, but its heartbeats are lost.
    partitioned: bool,
    /// The objects the MDS had it free, in order, and how far it applied the free log.
    freed: Vec<ObjectId>,
    freed_through: u64,
    /// Its process's incarnation, and when (on the harness's clock) the process
    /// started: its own clock counts from there.
    incarnation: u64,
    started: VirtualInstant,
}

impl FakeServer {
    /// `now` (the harness's clock) as this server's clock tells it.
    fn time(&self, now: VirtualInstant) -> ServerTime {
        ServerTime { incarnation: self.incarnation, at: VirtualInstant(now.0 - self.started.0) }
    }

    /// A lease counted from `from` (its clock) for `lease`, on the harness's clock, if
    /// `from` is of this run.
    fn lease_end(&self, from: ServerTime, lease: VirtualDuration) -> Option<VirtualInstant> {
        (from.incarnation == self.incarnation)
            .then(|| VirtualInstant(from.at.0 + self.started.0).saturating_add(lease))
    }

    /// The process restarts at `now`: a new incarnation, its clock at 0, its leases
    /// forgotten.
    fn restart(&mut self, now: VirtualInstant) {
        self.incarnation += 1;
        self.started = now;
        self.leases.clear();
        self.dead = false;
    }
}

struct Harness {
    mds: Mds,
    config: ClusterConfig,
    servers: Vec<FakeServer>,
    now: VirtualInstant,
    persisted: Vec<Command>,
    wakes: Vec<ServerId>,
    client_replies: Vec<Message>,
    /// Whether each grant carried a DVL handoff, in order.
    grants_with_handoff: Vec<bool>,
    /// The target of every `MigratePrimary`, in order.
    migration_targets: Vec<ServerId>,
    /// Reads per second the clients send, shared evenly by the servers awake: each
    /// reports its share of the second before in its heartbeat.
    reads_per_s: u32,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_mds_config(ClusterConfig {
            chunk_size_bytes: 1 << 20,
            ..ClusterConfig::sierra()
        })
    }

    /// A cluster whose servers have heartbeated for three seconds: every group led.
    fn started() -> Harness {
        let mut h = Harness::new();
        for _ in 0..3 {
            h.second();
        }
        h
    }

    /// The servers keep Sierra's leases; the MDS runs `mds_config` (a broken one in the
    /// checker's own test).
    fn with_mds_config(mds_config: ClusterConfig) -> Harness {
        Harness::with(mds_config, &layout())
    }

    fn with(mds_config: ClusterConfig, layout: &Layout) -> Harness {
        let config = ClusterConfig { chunk_size_bytes: 1 << 20, ..ClusterConfig::sierra() };
        let now = VirtualInstant::default();
        let mds = Mds::new(mds_config, layout, now);
        let servers = (0..SERVERS).map(|_| FakeServer::default()).collect();
        Harness {
            mds,
            config,
            servers,
            now,
            persisted: Vec::new(),
            wakes: Vec::new(),
            client_replies: Vec::new(),
            grants_with_handoff: Vec::new(),
            migration_targets: Vec::new(),
            reads_per_s: 0,
        }
    }

    fn event(&mut self, event: MdsEvent) {
        self.mds.handle(self.now, event);
        while let Some(action) = self.mds.poll_action() {
            match action {
                MdsAction::Persist(command) => self.persisted.push(command),
                MdsAction::WakeServer(server) => {
                    self.wakes.push(server);
                    let fake = &mut self.servers[server.index()];
                    if !fake.dead {
                        fake.asleep = false;
                    }
                }
                MdsAction::Send { to: Peer::Server(server), message } => {
                    self.deliver(server, message)
                }
                MdsAction::Send { to: Peer::Client(_), message } => {
                    self.client_replies.push(message)
                }
                MdsAction::Send { to: Peer::Mds, .. } => panic!("the MDS sent itself a message"),
                MdsAction::ComputeRole { .. } => panic!("no io-server controller was enabled"),
            }
        }
    }

    /// A well-behaved server's answer to each MDS message, sent back at once.
    fn deliver(&mut self, server: ServerId, message: Message) {
        let fake = &mut self.servers[server.index()];
        if fake.dead || fake.asleep {
            return;
        }
        match message {
            Message::GrantLease(grant) => {
                let LeaseGrant { view, lease_from, handoff, .. } = *grant;
                self.grants_with_handoff.push(handoff.is_some());
                if let Some(end) = fake.lease_end(lease_from, self.config.lease) {
                    fake.leases.insert(view.group, (view.epoch, end));
                }
            }
            Message::HeartbeatReply(reply) => {
                let LeaseRenewal { sent_at, renewed, revoked, frees, frees_through, .. } = *reply;
                let Some(lease_end) = fake.lease_end(sent_at, self.config.lease) else { return };
                // Freed at once, durably: reported in the next heartbeat.
                if frees_through > fake.freed_through {
                    fake.freed.extend(frees);
                    fake.freed_through = frees_through;
                }
                for (group, epoch) in renewed {
                    if let Some(lease) = fake.leases.get_mut(&group).filter(|l| l.0 == epoch) {
                        lease.1 = lease.1.max(lease_end);
                    }
                }
                for (group, epoch) in revoked {
                    if fake.leases.get(&group).is_some_and(|l| l.0 == epoch) {
                        fake.leases.remove(&group);
                    }
                }
            }
            Message::MigratePrimary { group, epoch, target } => {
                self.migration_targets.push(target);
                if fake.leases.get(&group).is_some_and(|l| l.0 == epoch) {
                    fake.leases.remove(&group);
                    let cancel =
                        Message::CancelLease { group, epoch, handoff: DvlHandoff::default() };
                    self.event(MdsEvent::MessageReceived {
                        from: Peer::Server(server),
                        message: cancel,
                    });
                }
            }
            Message::EnterStandby => {
                let sent_at = fake.time(self.now);
                self.event(MdsEvent::MessageReceived {
                    from: Peer::Server(server),
                    message: Message::Standby { sent_at },
                });
            }
            // The fake server sleeps once the MDS records it asleep.
            Message::StandbyAnswer { sleep } => self.servers[server.index()].asleep = sleep,
            other => panic!("a server got {other:?}"),
        }
    }

    /// One second: every awake server heartbeats, timers fire, leases are checked.
    fn second(&mut self) {
        self.now = self.now.saturating_add(VirtualDuration::from_secs(1));
        let awake = self.servers.iter().filter(|f| !(f.dead || f.asleep)).count().max(1);
        let share = self.reads_per_s.div_ceil(awake as u32);
        let second = self.now.as_nanos() / 1_000_000_000 - 1;
        for index in 0..self.servers.len() {
            let fake = &mut self.servers[index];
            // A lease that ran out is dropped by the server itself.
            let now = self.now;
            fake.leases.retain(|_, lease| lease.1 > now);
            if fake.dead || fake.asleep || fake.partitioned {
                continue;
            }
            let leads = fake.leases.iter().map(|(g, l)| (*g, l.0)).collect();
            let load = if share > 0 {
                let bytes = u64::from(share) * 4096;
                vec![LoadSample { second, reads: share, read_bytes: bytes, ..Default::default() }]
            } else {
                Vec::new()
            };
            let space = SpaceReport { freed_through: fake.freed_through, ..SpaceReport::default() };
            let heartbeat = Message::Heartbeat {
                sent_at: fake.time(self.now),
                power: ServerPower::On,
                leads,
                full: false,
                load,
                space: Box::new(space),
            };
            self.event(MdsEvent::MessageReceived {
                from: Peer::Server(ServerId(index as u32)),
                message: heartbeat,
            });
        }
        if self.mds.poll_timeout().is_some_and(|at| at <= self.now) {
            self.event(MdsEvent::TimerFired);
        }
        self.check_one_lease_per_group();
    }

    /// C1: no two servers hold a running lease on one group.
    fn check_one_lease_per_group(&self) {
        for group in 0..GROUPS {
            let group = ChunkGroupId(group);
            let holders: Vec<usize> = (0..self.servers.len())
                .filter(|&i| {
                    let fake = &self.servers[i];
                    !fake.dead && fake.leases.get(&group).is_some_and(|l| l.1 > self.now)
                })
                .collect();
            assert!(holders.len() <= 1, "C1: {group} leased to {holders:?} at {:?}", self.now);
        }
    }

    fn shift_to_gear_1(&mut self) {
        self.event(MdsEvent::GearSet { gear: 1 });
        self.second();
    }

    fn leaders(&self) -> Vec<usize> {
        self.servers.iter().map(|s| s.leases.len()).collect()
    }
}

#[test]
fn every_group_is_granted_once_and_primaries_are_balanced() {
    let h = Harness::started();
    let leaders = h.leaders();
    assert_eq!(leaders.iter().sum::<usize>(), GROUPS as usize, "{leaders:?}");
    // Greedy per group, each constrained to its replicas: within two of the mean 4.
    assert!(leaders.iter().all(|&n| (3..=5).contains(&n)), "36 groups over 9 servers: {leaders:?}");
    for group in 0..GROUPS {
        assert_eq!(h.mds.view(ChunkGroupId(group)).epoch, Epoch(1));
    }
    assert_eq!(h.mds.counters().view_changes, 0);
}

#[test]
fn a_silent_primarys_groups_move_after_its_lease_and_margin_never_before() {
    let mut h = Harness::started();
    let victim = ServerId(4);
    let led: Vec<ChunkGroupId> = h.servers[4].leases.keys().copied().collect();
    h.servers[4].dead = true;
    let last_heartbeat = h.now;
    let mut moved_at = None;
    for _ in 0..20 {
        h.second();
        if moved_at.is_none()
            && led.iter().all(|g| h.mds.view(*g).primary.is_some_and(|p| p != victim))
        {
            moved_at = Some(h.now);
        }
    }
    let moved_at = moved_at.expect("the groups got new primaries");
    let earliest =
        last_heartbeat.saturating_add(h.config.lease).saturating_add(h.config.lease_margin);
    assert!(moved_at >= earliest, "C2: moved at {moved_at:?}, before {earliest:?}");
    for group in &led {
        let view = h.mds.view(*group);
        assert_eq!(view.epoch, Epoch(2), "one view change");
        assert!(view.replicas.contains(&view.primary.unwrap()));
    }
    assert_eq!(h.mds.server_power(victim), ServerPower::Failed);
}

#[test]
fn a_heartbeat_that_crossed_a_grant_on_its_way_does_not_regrant_it() {
    // Goal: a grant queued behind other traffic (a rebalance's DVL handoffs) reaches its
    // server late; a heartbeat the server sent before it arrived does not list the
    // group. Received more than an interval after the grant, it must not be taken for
    // a lost grant (a re-grant throws the handoff away); one sent once the grant's
    // lease ran out is. The harness delivers at once: the grant is taken back from
    // the fake server to stand for one still on its way.
    let mut h = Harness::new();
    h.second();
    let granted_at = h.now;
    let group = ChunkGroupId(0);
    let server = h.mds.view(group).primary.unwrap();
    assert!(h.servers[server.index()].leases.remove(&group).is_some());
    let heartbeat = |h: &mut Harness, sent_at: VirtualInstant, received: VirtualInstant| {
        h.now = received;
        let leads = h.servers[server.index()].leases.iter().map(|(g, l)| (*g, l.0)).collect();
        let message = Message::Heartbeat {
            sent_at: h.servers[server.index()].time(sent_at),
            power: ServerPower::On,
            leads,
            full: false,
            load: vec![],
            space: Box::default(),
        };
        h.event(MdsEvent::MessageReceived { from: Peer::Server(server), message });
    };
    let ms = |ms: u64| VirtualDuration::from_millis(ms);
    heartbeat(&mut h, granted_at + ms(900), granted_at + ms(1_700));
    assert_eq!(h.mds.view(group).epoch, Epoch(1), "a heartbeat that crossed the grant");
    let ran_out = granted_at.saturating_add(h.config.lease);
    heartbeat(&mut h, ran_out, ran_out + ms(10));
    let view = h.mds.view(group);
    assert_eq!((view.epoch, view.primary), (Epoch(2), Some(server)), "the grant was lost");
}

#[test]
fn a_server_restarted_with_a_fresh_clock_is_heard_at_once() {
    // Goal: a server that ran ten minutes, died and restarted a second later (its
    // clock back at 0, a new incarnation) is heard at its first heartbeat: never
    // declared failed, its lost grants given again within two failure timeouts, gear 1
    // kept with nobody woken. The broken variant (the incarnation not raised: the
    // restarted clock reads as stale) is caught.
    for broken in [false, true] {
        let mut h = Harness::started();
        h.event(MdsEvent::GearSet { gear: 1 });
        for _ in 0..600 {
            h.second();
        }
        let server = 0usize;
        assert!(!h.servers[server].leases.is_empty(), "server 0 leads (gear group 0 is on)");
        h.servers[server].dead = true;
        h.second();
        let incarnation = h.servers[server].incarnation;
        h.servers[server].restart(h.now);
        if broken {
            h.servers[server].incarnation = incarnation;
        }
        let timeout = h.config.failure_timeout.as_nanos().div_ceil(1_000_000_000) as u32;
        let wakes = h.wakes.len();
        let mut regained = None;
        for elapsed in 0..2 * timeout {
            h.second();
            if regained.is_none() && !h.servers[server].leases.is_empty() {
                regained = Some(elapsed);
            }
        }
        let failed = h.mds.counters().servers_failed;
        let power = h_power(&h, server as u32);
        if broken {
            assert!(regained.is_none() && failed == 1, "the checks miss a stale restart");
            continue;
        }
        assert!(regained.is_some(), "its grants were not given again");
        assert_eq!((failed, power), (0, ServerPower::On), "the restart read as a failure");
        assert_eq!(h.wakes.len(), wakes, "a sleeper was woken");
    }
}

#[test]
fn a_gear_down_moves_every_primary_before_its_server_sleeps_and_sleep_is_not_failure() {
    let mut h = Harness::started();
    let led_by_sleepers: usize =
        h.leaders().iter().enumerate().filter(|(i, _)| i % 3 != 0).map(|(_, n)| n).sum();
    h.event(MdsEvent::GearSet { gear: 1 });
    for _ in 0..2 {
        h.second();
    }
    for (index, fake) in h.servers.iter().enumerate() {
        let server = ServerId(index as u32);
        // Rack-aligned: rack 0 is gear group 0.
        let expected = if index % 3 == 0 { ServerPower::On } else { ServerPower::Asleep };
        assert_eq!(h.mds.server_power(server), expected, "{server}");
        assert_eq!(fake.asleep, expected == ServerPower::Asleep);
        if fake.asleep {
            assert!(fake.leases.is_empty(), "P1: {server} slept leading {:?}", fake.leases);
        }
    }
    assert_eq!(h.leaders().iter().sum::<usize>(), GROUPS as usize, "every group still led");
    assert_eq!(h.mds.counters().migrations, led_by_sleepers as u64, "the sleepers' groups moved");
    // An hour of sleep: no failure, no view change beyond the migrations (P2).
    for _ in 0..3600 {
        h.second();
    }
    assert_eq!(h.mds.counters().servers_failed, 0);
    assert_eq!(h.mds.counters().view_changes, led_by_sleepers as u64);
}

/// Every server that sleeps drains before any primary moves: a gear shift from 3 to 1
/// moves each primary of a sleeper once, straight to a replica in gear group 0, never
/// to one that drains after it (then it would move twice, and the writes it adopted on
/// the way could find no logger, waking the sleepers). On rack-rotated layouts, where
/// a sleeper's groups have replicas in both gear groups that sleep.
#[test]
fn a_gear_shift_moves_each_primary_once_to_a_server_that_stays_on() {
    for seed in 0..16 {
        let layout = layout_of(RackAssignment::Rotated, seed);
        let config = ClusterConfig { chunk_size_bytes: 1 << 20, ..ClusterConfig::sierra() };
        let mut h = Harness::with(config, &layout);
        for _ in 0..3 {
            h.second();
        }
        let on = |s: usize| layout.servers()[s].gear_group == Some(GearGroupId(0));
        let led_by_sleepers: usize =
            h.leaders().iter().enumerate().filter(|(s, _)| !on(*s)).map(|(_, n)| n).sum();
        h.event(MdsEvent::GearSet { gear: 1 });
        for _ in 0..2 {
            h.second();
        }
        assert_eq!(h.mds.counters().migrations, led_by_sleepers as u64, "seed {seed}");
        let targets = &h.migration_targets;
        assert!(targets.iter().all(|t| on(t.index())), "seed {seed}: moved to {targets:?}");
        assert!(h.wakes.is_empty(), "seed {seed}: {:?} woken", h.wakes);
        for (server, n) in h.leaders().iter().enumerate() {
            assert!(on(server) || *n == 0, "seed {seed}: server {server} asleep leading {n}");
        }
    }
}

#[test]
fn a_gear_up_wakes_the_sleepers_and_gives_them_primaries_back() {
    let mut h = Harness::started();
    h.shift_to_gear_1();
    h.event(MdsEvent::GearSet { gear: 3 });
    assert_eq!(h.wakes.len(), 6, "the six sleeping servers are woken");
    for _ in 0..3 {
        h.second();
    }
    let leaders = h.leaders();
    // Each woken server took groups from replicas leading more than their share.
    assert!(leaders.iter().all(|&n| (2..=5).contains(&n)), "rebalanced: {leaders:?}");
    assert!((0..SERVERS).all(|s| h.mds.server_power(ServerId(s)) == ServerPower::On));
}

/// A woken server that missed its packet (a real NIC may, while its host suspends)
/// is sent it again every `WAKE_RESEND` until it answers, and no more after; the
/// shells send one packet per `WakeServer`.
#[test]
fn a_wake_is_sent_again_until_the_server_answers() {
    let mut h = Harness::started();
    h.shift_to_gear_1();
    let deaf = (0..SERVERS).find(|s| h.mds.server_power(ServerId(*s)) == ServerPower::Asleep);
    let deaf = ServerId(deaf.unwrap());
    h.servers[deaf.index()].dead = true;
    h.event(MdsEvent::GearSet { gear: 3 });
    assert_eq!(h.wakes.iter().filter(|s| **s == deaf).count(), 1);
    for _ in 0..6 {
        h.second();
    }
    // Sent at the shift and at 2, 4 and 6 s.
    assert_eq!(h.wakes.iter().filter(|s| **s == deaf).count(), 4, "{:?}", h.wakes);
    assert_eq!(h.mds.server_power(deaf), ServerPower::Waking);
    // It hears the next one, heartbeats, and is sent no more.
    h.servers[deaf.index()].dead = false;
    for _ in 0..6 {
        h.second();
    }
    assert_eq!(h.mds.server_power(deaf), ServerPower::On);
    assert_eq!(h.wakes.iter().filter(|s| **s == deaf).count(), 5, "{:?}", h.wakes);
    // Every other sleeper heard its first packet.
    assert_eq!(h.wakes.len(), 5 + 5);
}

#[test]
fn a_failure_in_the_lowest_gear_wakes_the_sleeping_replicas() {
    let mut h = Harness::started();
    h.shift_to_gear_1();
    assert!(h.wakes.is_empty());
    // Server 0 (gear group 0) fails: its groups' only awake replica is gone.
    h.servers[0].dead = true;
    for _ in 0..15 {
        h.second();
    }
    assert_eq!(h.mds.server_power(ServerId(0)), ServerPower::Failed);
    assert!(!h.wakes.is_empty(), "P3: sleeping replicas are woken");
    for group in 0..GROUPS {
        let view = h.mds.view(ChunkGroupId(group));
        assert_ne!(view.primary, Some(ServerId(0)), "{view:?}");
        assert!(view.primary.is_some(), "{view:?} led again once its replicas woke");
    }
}

/// P7: the primary of a group asks for the sleeping holders of writes a read awaits:
/// they wake and stay on through the gear's settling, survive a restart from the log
/// and from a snapshot, and sleep again at the next shift. An ask from a server that
/// does not lead the group, of ids the MDS does not know, or of failed servers, wakes
/// nothing and panics nothing.
#[test]
fn the_sleeping_holders_a_primary_awaits_wake_and_stay_on_until_the_next_shift() {
    let mut h = Harness::started();
    h.shift_to_gear_1();
    let asleep: Vec<ServerId> = (0..SERVERS)
        .map(ServerId)
        .filter(|s| h.mds.server_power(*s) == ServerPower::Asleep)
        .collect();
    assert_eq!(asleep.len(), 6);
    let group = ChunkGroupId(0);
    let view = h.mds.view(group);
    let primary = view.primary.unwrap();
    let ask = |h: &mut Harness, from: ServerId, epoch, servers: Vec<ServerId>| {
        let message = Message::WakeHolders { group, epoch, servers };
        h.event(MdsEvent::MessageReceived { from: Peer::Server(from), message });
    };
    let not_primary = (0..SERVERS).map(ServerId).find(|s| *s != primary).unwrap();
    ask(&mut h, not_primary, view.epoch, vec![asleep[0]]);
    ask(&mut h, primary, Epoch(view.epoch.0 + 1), vec![asleep[0]]);
    ask(&mut h, primary, view.epoch, vec![ServerId(SERVERS), ServerId(u32::MAX)]);
    assert!(h.wakes.is_empty(), "woken by an ask it must drop: {:?}", h.wakes);

    ask(&mut h, primary, view.epoch, vec![asleep[1], asleep[0], asleep[1], ServerId(99)]);
    assert_eq!(h.wakes, vec![asleep[0], asleep[1]]);
    let kept = Command::KeepHoldersOn { group, servers: vec![asleep[0], asleep[1]] };
    assert!(h.persisted.contains(&kept), "{:?}", h.persisted);
    ask(&mut h, primary, view.epoch, vec![asleep[0]]);
    assert_eq!(h.wakes.len(), 2, "asked again while kept: no second wake");
    for _ in 0..20 {
        h.second();
    }
    let power = |h: &Harness, s: ServerId| h.mds.server_power(s);
    assert_eq!((power(&h, asleep[0]), power(&h, asleep[1])), (ServerPower::On, ServerPower::On));
    assert!(asleep[2..].iter().all(|s| power(&h, *s) == ServerPower::Asleep));

    let config = h.config;
    let restore = |commands: Vec<Command>| Mds::restore(config, &layout(), h.now, commands);
    let snapshot = h.mds.snapshot(&layout());
    for restored in [restore(h.persisted.clone()), restore(snapshot)] {
        assert_eq!(restored.durable_state(), h.mds.durable_state());
        assert!(restored.keeps_on(asleep[0]) && restored.keeps_on(asleep[1]));
    }

    // The next shift releases them: back in gear 1 after gear 2, they sleep again.
    h.event(MdsEvent::GearSet { gear: 2 });
    h.event(MdsEvent::GearSet { gear: 1 });
    for _ in 0..20 {
        h.second();
    }
    assert!(asleep.iter().all(|s| power(&h, *s) == ServerPower::Asleep), "slept again");
}

#[test]
fn the_namespace_answers_each_request_with_its_id() {
    let mut h = Harness::new();
    let client = Peer::Client(ClientId(1));
    let ask =
        |h: &mut Harness, message| h.event(MdsEvent::MessageReceived { from: client, message });
    ask(&mut h, Message::CreateObject { request: 1, name: "vol0".into(), size_bytes: 10 << 20 });
    ask(&mut h, Message::CreateObject { request: 2, name: "vol0".into(), size_bytes: 1 });
    ask(&mut h, Message::LookupObject { request: 3, name: "nope".into() });
    ask(&mut h, Message::CreateObject { request: 4, name: String::new(), size_bytes: 1 });
    ask(&mut h, Message::DeleteObject { request: 5, name: "vol0".into() });
    ask(&mut h, Message::LookupObject { request: 6, name: "vol0".into() });
    let replies = std::mem::take(&mut h.client_replies);
    let Message::ObjectFound { request: 1, info } = &replies[0] else { panic!("{:?}", replies[0]) };
    assert_eq!(info.chunk_groups.len(), 10, "10 MiB in 1 MiB chunks");
    assert!(info.views.iter().all(|v| v.epoch == Epoch(1)));
    let refused = |i: usize| match &replies[i] {
        Message::MetadataRefused { request, error } => (*request, error.clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(refused(1), (2, MetadataError::AlreadyExists("vol0".into())));
    assert_eq!(refused(2), (3, MetadataError::NoSuchObject("nope".into())));
    assert!(matches!(refused(3), (4, MetadataError::BadName(_))));
    assert_eq!(replies[4], Message::ObjectDeleted { request: 5, name: "vol0".into() });
    assert_eq!(refused(5), (6, MetadataError::NoSuchObject("vol0".into())));
}

#[test]
fn a_listing_pages_through_the_names_under_a_prefix_in_order() {
    let mut h = Harness::new();
    let client = Peer::Client(ClientId(1));
    let ask =
        |h: &mut Harness, message| h.event(MdsEvent::MessageReceived { from: client, message });
    for (request, name) in ["b/2", "a", "b/1", "b/3", "c"].into_iter().enumerate() {
        let request = request as u64;
        ask(&mut h, Message::CreateObject { request, name: name.into(), size_bytes: 4096 });
    }
    h.client_replies.clear();
    let list = |request, start_after: Option<&str>, limit| Message::ListObjects {
        request,
        prefix: "b/".into(),
        start_after: start_after.map(str::to_owned),
        limit,
        attrs: false,
    };
    ask(&mut h, list(10, None, 2));
    ask(&mut h, list(11, Some("b/2"), 2));
    ask(&mut h, list(12, Some("a"), 0));
    let replies = std::mem::take(&mut h.client_replies);
    let page = |i: usize| match &replies[i] {
        Message::ObjectsListed { request, objects, truncated } => {
            let names: Vec<&str> = objects.iter().map(|o| o.name.as_str()).collect();
            (*request, names, *truncated)
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(page(0), (10, vec!["b/1", "b/2"], true));
    assert_eq!(page(1), (11, vec!["b/3"], false));
    // A start before the prefix starts at the prefix; a limit of 0 still lists one.
    assert_eq!(page(2), (12, vec!["b/1"], true));
}

#[test]
fn replaying_the_command_log_rebuilds_the_durable_state() {
    let mut h = Harness::started();
    let client = Peer::Client(ClientId(1));
    for i in 0..20 {
        let message =
            Message::CreateObject { request: i, name: format!("o{i}"), size_bytes: 5 << 20 };
        h.event(MdsEvent::MessageReceived { from: client, message });
    }
    h.event(MdsEvent::GearSet { gear: 2 });
    h.servers[0].dead = true;
    for _ in 0..20 {
        h.second();
    }
    let mut replayed = Mds::new(h.config, &layout(), VirtualInstant::default());
    for command in &h.persisted {
        replayed.apply(command);
    }
    assert_eq!(replayed.gear(), h.mds.gear());
    assert_eq!(replayed.object_count(), 20);
    for i in 0..20 {
        let (a, b) =
            (replayed.info(&format!("o{i}")).unwrap(), h.mds.info(&format!("o{i}")).unwrap());
        assert_eq!(
            (a.object, a.size_bytes, a.chunk_groups),
            (b.object, b.size_bytes, b.chunk_groups)
        );
    }
    for server in 0..SERVERS {
        assert_eq!(replayed.server_power(ServerId(server)), h.mds.server_power(ServerId(server)));
    }
    for group in 0..GROUPS {
        let (a, b) = (replayed.view(ChunkGroupId(group)), h.mds.view(ChunkGroupId(group)));
        assert_eq!(
            (a.epoch, replayed.groups[group as usize].primary),
            (b.epoch, h.mds.groups[group as usize].primary)
        );
    }
}

/// A create or delete delivered again long after it was answered (a duplicate the
/// network held, a retry) changes nothing, also once the MDS restarted from its log
/// or a snapshot between the two: it does not delete the name made again since, nor
/// make again a name deleted since.
#[test]
fn a_late_duplicate_acts_once_across_a_restart() {
    let mut h = Harness::started();
    let ask = |h: &mut Harness, client: u32, message| {
        h.event(MdsEvent::MessageReceived { from: Peer::Client(ClientId(client)), message })
    };
    let create = |request, name: &str| Message::CreateObject {
        request,
        name: name.into(),
        size_bytes: 1 << 20,
    };
    ask(&mut h, 1, create(1, "kept"));
    ask(&mut h, 1, Message::DeleteObject { request: 2, name: "kept".into() });
    ask(&mut h, 2, create(1, "kept"));
    ask(&mut h, 1, create(3, "gone"));
    ask(&mut h, 1, Message::DeleteObject { request: 4, name: "gone".into() });
    let snapshot = h.mds.snapshot(&layout());
    for commands in [h.persisted.clone(), snapshot] {
        h.mds = Mds::restore(h.config, &layout(), h.now, commands);
        ask(&mut h, 1, Message::DeleteObject { request: 2, name: "kept".into() });
        ask(&mut h, 1, create(3, "gone"));
        assert!(h.mds.info("kept").is_ok(), "a late delete removed the name made since");
        assert!(h.mds.info("gone").is_err(), "a late create made a deleted name again");
    }
}

/// A snapshot rebuilds exactly the state the whole log does, also with the log's
/// later commands applied on top; one that forgot the reserved ids would not.
#[test]
fn a_snapshot_restores_what_the_whole_command_log_does() {
    let mut h = Harness::started();
    let client = Peer::Client(ClientId(1));
    let ask =
        |h: &mut Harness, message| h.event(MdsEvent::MessageReceived { from: client, message });
    for i in 0..12 {
        ask(
            &mut h,
            Message::CreateObject { request: i, name: format!("o{i}"), size_bytes: 3 << 20 },
        );
    }
    // The newest object deleted: its id must not be given again.
    ask(&mut h, Message::DeleteObject { request: 20, name: "o11".into() });
    ask(&mut h, Message::DeleteObject { request: 21, name: "o3".into() });
    h.event(MdsEvent::GearSet { gear: 2 });
    h.servers[0].dead = true;
    for _ in 0..20 {
        h.second();
    }
    h.event(MdsEvent::DeclareLost { server: ServerId(0) });
    for _ in 0..3 {
        h.second();
    }
    let config = h.config;
    let restore = |commands: &[Command]| {
        Mds::restore(config, &layout(), VirtualInstant::default(), commands.iter().cloned())
    };
    let whole = restore(&h.persisted);
    let snapshot = h.mds.snapshot(&layout());
    assert!(snapshot.len() < h.persisted.len(), "{} vs {}", snapshot.len(), h.persisted.len());
    assert_eq!(restore(&snapshot).durable_state(), whole.durable_state());
    assert_eq!(whole.durable_state(), h.mds.durable_state());

    // A snapshot taken now, then more commands: the same as the whole log.
    let taken = h.persisted.len();
    h.event(MdsEvent::GearSet { gear: 3 });
    for i in 30..34 {
        ask(
            &mut h,
            Message::CreateObject { request: i, name: format!("n{i}"), size_bytes: 1 << 20 },
        );
    }
    for _ in 0..10 {
        h.second();
    }
    let mut later = snapshot.clone();
    later.extend(h.persisted[taken..].iter().cloned());
    assert_eq!(restore(&later).durable_state(), restore(&h.persisted).durable_state());

    // The snapshot without the one command `forgotten` picks.
    let without = |forgotten: fn(&Command) -> bool| {
        let forgetful: Vec<Command> = snapshot.iter().filter(|c| !forgotten(c)).cloned().collect();
        assert_eq!(forgetful.len(), snapshot.len() - 1);
        restore(&forgetful).durable_state()
    };
    // The broken variant: without the reserved ids, o11's id would be given again.
    let ids = without(|c| matches!(c, Command::ReserveObjectIds { .. }));
    assert_ne!(ids, whole.durable_state());
    // Nor without the requests answered: a late duplicate would act again.
    let answered = without(|c| matches!(c, Command::AnsweredRequests { .. }));
    assert_ne!(answered, whole.durable_state());
}

fn partition_a_primary(h: &mut Harness) {
    for _ in 0..3 {
        h.second();
    }
    h.servers[4].partitioned = true;
    for _ in 0..30 {
        h.second();
    }
}

#[test]
fn a_partitioned_primary_is_replaced_only_after_its_own_lease_ran_out() {
    // The partitioned server keeps serving until its lease, counted from its last
    // heartbeat's send time, runs out; the checker runs every second (C1).
    let mut h = Harness::new();
    partition_a_primary(&mut h);
    assert!(h.servers[4].leases.is_empty(), "its leases ran out");
    assert_eq!(h.mds.server_power(ServerId(4)), ServerPower::Failed);
}

#[test]
fn the_lease_checker_catches_an_mds_that_reassigns_early() {
    // Broken variant: the MDS counts leases one second shorter than the servers do.
    let broken = ClusterConfig {
        chunk_size_bytes: 1 << 20,
        lease: VirtualDuration::from_secs(3),
        lease_margin: VirtualDuration::ZERO,
        ..ClusterConfig::sierra()
    };
    let mut h = Harness::with_mds_config(broken);
    let caught =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| partition_a_primary(&mut h)));
    let message = caught.expect_err("two leases overlap");
    let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.starts_with("C1:"), "{text}");
}

/// The MDS restarts from its commands while server 4 is cut off holding leases.
fn restart_with_a_partitioned_primary(h: &mut Harness, broken: bool) {
    h.servers[4].partitioned = true;
    h.mds = Mds::restore(h.config, &layout(), h.now, h.persisted.clone());
    if broken {
        // Broken variant: the restarted MDS takes every lease as run out.
        for group in 0..GROUPS as usize {
            h.mds.groups[group].lease_expires = Some(h.now);
            h.mds.index_lease(ChunkGroupId(group as u32));
        }
    }
    h.grants_with_handoff.clear();
    for _ in 0..30 {
        h.second();
    }
}

#[test]
fn a_restarted_mds_waits_out_every_lease_and_hands_over_no_dvl() {
    let mut h = Harness::started();
    let led_by_4 = h.servers[4].leases.len();
    assert!(led_by_4 > 0);
    restart_with_a_partitioned_primary(&mut h, false);
    // The checker ran every second (C1); server 4's groups moved once its leases ran out.
    assert_eq!(h.mds.server_power(ServerId(4)), ServerPower::Failed);
    assert!(h.servers[4].leases.is_empty());
    let leased: usize = h.leaders().iter().sum();
    assert_eq!(leased, GROUPS as usize, "every group is led again");
    // Each new primary recovers its DVL from the loggers (D4): no handoff survives.
    assert!(h.grants_with_handoff.len() >= led_by_4);
    assert!(h.grants_with_handoff.iter().all(|with| !with), "a restarted MDS handed over a DVL");
}

#[test]
fn the_lease_checker_catches_a_restarted_mds_that_does_not_wait_out_leases() {
    let mut h = Harness::started();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        restart_with_a_partitioned_primary(&mut h, true)
    }));
    let message = caught.expect_err("two leases overlap");
    let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.starts_with("C1:"), "{text}");
}

/// A hybrid scheduler in the MDS: one-minute intervals, a day of an hour, each server
/// serving 10 reads per second.
fn scheduled() -> Harness {
    let mut h = Harness::started();
    let config = SchedulerConfig {
        replicas: 0,
        group_sizes: Vec::new(),
        capability: Capability {
            read_iops: 10.0,
            write_iops: 10.0,
            read_mib_s: 100.0,
            write_mib_s: 100.0,
        },
        gearing: Gearing::Fractional,
        gear_min: 0,
        policy: Policy::Hybrid,
        interval: VirtualDuration::from_secs(60),
        day: VirtualDuration::from_secs(3600),
        origin: VirtualInstant::ZERO,
        wake_lead: VirtualDuration::from_secs(5),
        report_delay: VirtualDuration::from_secs(2),
        headroom: 0.2,
        dwell: VirtualDuration::from_secs(60),
        quiet_intervals: 2,
        forecast_margin: 0.0,
    };
    h.mds.enable_scheduler(config).unwrap();
    h
}

impl Harness {
    fn servers_on(&self) -> usize {
        (0..SERVERS)
            .filter(|s| matches!(h_power(self, *s), ServerPower::On | ServerPower::Waking))
            .count()
    }

    /// Seconds until `done` holds (at most `limit`), checking P1 at every step.
    fn run_until(&mut self, limit: u32, done: impl Fn(&Harness) -> bool) -> u32 {
        for elapsed in 0..limit {
            if done(self) {
                return elapsed;
            }
            self.second();
            for fake in &self.servers {
                assert!(!fake.asleep || fake.leases.is_empty(), "P1: a sleeper leads");
            }
        }
        panic!(
            "not done in {limit} s: {} servers on, plan {:?}",
            self.servers_on(),
            self.mds.plan()
        );
    }
}

fn h_power(h: &Harness, server: u32) -> ServerPower {
    h.mds.server_power(ServerId(server))
}

#[test]
fn the_mds_gears_by_the_load_its_primaries_report() {
    // Goal: the scheduler runs inside the MDS on the heartbeats' load: a quiet load
    // puts servers to sleep after two quiet intervals (never one), a surge wakes
    // enough of them within seconds, and no sleeper ever leads (P1).
    let mut h = scheduled();
    h.reads_per_s = 90;
    // Busy until the start of interval 4 (second 240; the harness starts at 3 s).
    h.run(237);
    assert_eq!(h.servers_on(), 9, "a load of 9 servers keeps all 9 on");
    // A load of 2 servers: g_min keeps one whole gear group of 3, once two whole
    // intervals have been quiet (never after one).
    h.reads_per_s = 20;
    let fell = h.run_until(400, |h| h.servers_on() == 3);
    assert!(fell > 120, "fewer than two quiet intervals shifted down ({fell} s)");
    h.run(5);
    let asleep = (0..SERVERS).filter(|s| h_power(&h, *s) == ServerPower::Asleep).count();
    assert_eq!(asleep, 6, "the others sleep");
    assert!(h.persisted.iter().any(|c| matches!(c, Command::SetPlan { full_groups: 1, .. })));
    // A surge to 8 servers' load: woken within seconds, with headroom (all 9).
    h.reads_per_s = 80;
    let rose = h.run_until(10, |h| h.servers_on() == 9);
    assert!(rose <= 5, "the surge took {rose} s to wake servers");
    let counters = h.mds.scheduler().unwrap().counters();
    assert_eq!(counters.reactive_shifts, 1);
    assert_eq!(h.mds.counters().servers_failed, 0, "sleep is not failure (P2)");
}

#[test]
fn an_operator_holds_sets_and_gives_back_the_gear() {
    // Goal: `gear set hold` freezes the plan whatever the load, `gear set N` fixes
    // gear N, and `auto` hands control back to the scheduler.
    let mut h = scheduled();
    h.reads_per_s = 10;
    h.event(MdsEvent::GearMode { mode: GearMode::Hold });
    h.run(600);
    assert_eq!(h.servers_on(), 9, "held: nothing shifts");
    h.event(MdsEvent::GearMode { mode: GearMode::Set(2) });
    h.run_until(10, |h| h.servers_on() == 6);
    h.run(300);
    assert_eq!(h.servers_on(), 6, "set: the scheduler does not move it");
    h.event(MdsEvent::GearMode { mode: GearMode::Auto });
    h.run_until(400, |h| h.servers_on() == 3);
}

#[test]
fn a_restarted_mds_keeps_the_gear_the_operator_set() {
    // Goal: `gear set 1` and `gear set hold` survive the MDS's restart (from its whole
    // log and from a snapshot): the new scheduler keeps the plan, wakes nobody, and
    // the gear groups keep their order.
    for mode in [GearMode::Set(1), GearMode::Hold] {
        let mut h = scheduled();
        if mode == GearMode::Hold {
            // Gear 1 by the load, then held there.
            h.reads_per_s = 20;
            h.run_until(400, |h| h.servers_on() == 3);
        }
        h.event(MdsEvent::GearMode { mode });
        h.run_until(10, |h| h.servers_on() == 3);
        h.run(5);
        let (plan, order) = (h.mds.plan().0, h.mds.plan().1.to_vec());
        let scheduler = h.mds.scheduler().unwrap().config().clone();
        let snapshot = h.mds.snapshot(&layout());
        for commands in [h.persisted.clone(), snapshot] {
            let mut restarted = Mds::restore(h.config, &layout(), h.now, commands);
            restarted.enable_scheduler(scheduler.clone()).unwrap();
            assert_eq!(restarted.plan(), (plan, order.as_slice()), "{mode:?}");
            assert_eq!(restarted.planned_on_count(), 3, "{mode:?}: the restart woke servers");
            let actions = std::iter::from_fn(|| restarted.poll_action());
            let woken = actions.filter(|a| {
                matches!(a, MdsAction::WakeServer(_) | MdsAction::Persist(Command::SetPlan { .. }))
            });
            assert_eq!(woken.count(), 0, "{mode:?}");
            assert_eq!(restarted.scheduler().unwrap().mode(), mode);
        }
    }
}

#[test]
fn a_partial_group_in_a_rotated_order_keeps_exactly_its_servers_on() {
    // Goal: a plan of one whole gear group and one server of the next, in the order
    // [2, 0, 1], keeps gear group 2 and the first server of gear group 0 on.
    let mut h = Harness::started();
    h.mds.set_plan(PowerPlan { full_groups: 1, partial: 1 }, vec![2, 0, 1]);
    while let Some(MdsAction::Persist(_) | MdsAction::Send { .. } | MdsAction::WakeServer(_)) =
        h.mds.poll_action()
    {}
    let on: Vec<u32> = (0..SERVERS).filter(|s| h.mds.planned_on(ServerId(*s))).collect();
    // Rack-aligned: server s is in gear group s % 3.
    assert_eq!(on, vec![0, 2, 5, 8]);
    // An order that is not a permutation is refused: the plan keeps its order.
    h.mds.set_plan(PowerPlan { full_groups: 1, partial: 0 }, vec![2, 2, 1]);
    assert_eq!(h.mds.plan().1, &[2, 0, 1]);
}

impl Harness {
    fn run(&mut self, seconds: u32) {
        for _ in 0..seconds {
            self.second();
        }
    }
}

// ---- names, binds and the free log (docs/space.md) ------------------------------

impl Harness {
    /// A client's request and the MDS's answer to it.
    fn ask(&mut self, message: Message) -> Message {
        let from = Peer::Client(ClientId(7));
        self.event(MdsEvent::MessageReceived { from, message });
        self.client_replies.pop().unwrap_or_else(|| panic!("no answer"))
    }

    fn allocate(&mut self, request: u64, size_bytes: u64) -> ObjectInfo {
        match self.ask(Message::AllocateObject { request, size_bytes }) {
            Message::ObjectFound { info, .. } => *info,
            other => panic!("{other:?}"),
        }
    }

    fn bind(&mut self, bind: BindRequest) -> Result<ObjectInfo, MetadataError> {
        match self.ask(Message::BindObject(Box::new(bind))) {
            Message::ObjectFound { info, .. } => Ok(*info),
            Message::MetadataRefused { error, .. } => Err(error),
            other => panic!("{other:?}"),
        }
    }

    /// The objects every fake server was told to free, each once, in order.
    fn freed(&self) -> Vec<ObjectId> {
        let mut all: Vec<ObjectId> = self.servers.iter().flat_map(|s| s.freed.clone()).collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

fn bind(request: u64, name: &str, data: Vec<ObjectId>) -> BindRequest {
    BindRequest {
        request,
        name: name.into(),
        data,
        attrs: format!("attrs of {request}").into_bytes(),
        taking: Vec::new(),
        require: None,
        condition: BindCondition::Any,
    }
}

/// A short grace, so the tests see frees within seconds.
fn quick() -> Harness {
    let config = ClusterConfig {
        chunk_size_bytes: 1 << 20,
        free_grace: VirtualDuration::from_secs(5),
        pending_grace: VirtualDuration::from_secs(30),
        ..ClusterConfig::sierra()
    };
    let mut h = Harness::with_mds_config(config);
    for _ in 0..3 {
        h.second();
    }
    h
}

/// Goal: a bind names allocated data whole, a retry of it changes nothing, and the
/// data it replaces is freed on every server holding it once the grace has passed,
/// never before; the entry leaves the log once every holder applied it. Method: two
/// allocations bound in turn to one name; the fake servers free what they are told.
#[test]
fn a_bind_replaces_a_names_data_and_the_old_data_is_freed_after_the_grace() {
    let mut h = quick();
    let first = h.allocate(1, 3 << 20);
    assert!(first.name.is_empty() && first.data.len() == 1 && first.chunk_groups.len() == 3);
    assert_eq!(h.allocate(1, 3 << 20).object, first.object, "a retried allocation");
    assert_eq!(h.mds.bytes_named(), 0, "an allocation is named by nobody yet");
    let bound = h.bind(bind(2, "k", vec![first.object])).unwrap();
    assert_eq!(h.mds.bytes_named(), 3 << 20);
    assert_eq!((bound.object, bound.attrs.clone()), (first.object, b"attrs of 2".to_vec()));
    assert_eq!(h.bind(bind(2, "k", vec![first.object])).unwrap(), bound, "a retried bind");
    let second = h.allocate(3, 4096);
    let rebound = h.bind(bind(4, "k", vec![second.object])).unwrap();
    assert!(rebound.generation > bound.generation);
    assert_eq!(h.mds.bytes_named(), 4096, "the replaced data is named no more");
    assert_eq!(h.mds.frees_queued(), 1);
    let holders: Vec<ServerId> = {
        let mut all: Vec<ServerId> =
            first.chunk_groups.iter().flat_map(|g| h.mds.replicas(*g).to_vec()).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    for _ in 0..4 {
        h.second();
    }
    assert!(h.freed().is_empty(), "freed before the grace");
    for _ in 0..3 {
        h.second();
    }
    assert_eq!(h.freed(), vec![first.object]);
    for (index, server) in h.servers.iter().enumerate() {
        let told = server.freed.contains(&first.object);
        assert_eq!(told, holders.contains(&ServerId(index as u32)), "server {index}");
    }
    h.second();
    assert_eq!(h.mds.frees_queued(), 0, "every holder applied it");
    assert!(!h.mds.is_live(first.object) && h.mds.is_live(second.object));
}

/// Goal: a bind's conditions and its data are checked before it is committed, so two
/// conditional writes cannot both pass and no one binds data that is not theirs.
#[test]
fn a_bind_is_refused_when_its_condition_or_its_data_is_not_as_it_says() {
    let mut h = quick();
    let a = h.allocate(1, 4096);
    let b = h.allocate(2, 4096);
    let absent = BindRequest { condition: BindCondition::Absent, ..bind(3, "k", vec![a.object]) };
    let made = h.bind(absent.clone()).unwrap();
    let again = BindRequest { request: 4, ..absent };
    assert!(matches!(h.bind(again), Err(MetadataError::ConditionFailed { .. })));
    let stale = BindRequest {
        condition: BindCondition::Generation(made.generation + 1),
        ..bind(5, "k", vec![b.object])
    };
    assert!(matches!(h.bind(stale), Err(MetadataError::ConditionFailed { .. })));
    // Data another name holds is not the binder's to take.
    assert_eq!(
        h.bind(bind(6, "other", vec![a.object])),
        Err(MetadataError::NotBindable(a.object.0))
    );
    let required = BindRequest { require: Some("bucket".into()), ..bind(7, "x", vec![b.object]) };
    assert_eq!(h.bind(required), Err(MetadataError::NoSuchObject("bucket".into())));
    let current = BindRequest {
        condition: BindCondition::Generation(made.generation),
        ..bind(8, "k", vec![b.object])
    };
    assert_eq!(h.bind(current).unwrap().object, b.object);
    assert_eq!(h.mds.frees_queued(), 1, "a's data, replaced");
    let twice = bind(9, "y", vec![b.object, b.object]);
    assert!(matches!(h.bind(twice), Err(MetadataError::NotBindable(_))));
}

/// Goal: a completion takes the parts' data from their names in one bind: the parts'
/// names go, the data listed is the object's, the rest is freed. Method: three part
/// names, a completion that lists two of them.
#[test]
fn a_bind_takes_the_data_of_the_names_it_takes_and_frees_the_rest() {
    let mut h = quick();
    let mut parts = Vec::new();
    for n in 0..3u64 {
        let data = h.allocate(10 + n, 5 << 20);
        h.bind(bind(20 + n, &format!("p/{n}"), vec![data.object])).unwrap();
        parts.push(data.object);
    }
    let taking: Vec<String> = (0..3).map(|n| format!("p/{n}")).collect();
    let complete = BindRequest { taking, ..bind(30, "key", vec![parts[0], parts[2]]) };
    let info = h.bind(complete).unwrap();
    assert_eq!(info.data.iter().map(|d| d.object).collect::<Vec<_>>(), vec![parts[0], parts[2]]);
    assert_eq!(info.size_bytes, 5 << 20);
    assert_eq!(h.mds.object_count(), 1, "the parts' names went");
    assert_eq!(h.mds.frees_queued(), 1, "the part not listed");
    assert!(!h.mds.is_live(parts[1]));
    // Listing with attributes shows the sizes summed.
    let list = Message::ListObjects {
        request: 40,
        prefix: String::new(),
        start_after: None,
        limit: 10,
        attrs: true,
    };
    let Message::ObjectsListed { objects, .. } = h.ask(list) else { panic!() };
    assert_eq!(objects[0].size_bytes, 10 << 20);
    assert_eq!(objects[0].attrs, b"attrs of 30".to_vec());
}

/// Goal: an allocation its writer never binds is freed once its grace has passed, and
/// a bind of it after that is refused (the writer learns its data is gone).
#[test]
fn an_allocation_never_bound_expires_and_is_freed() {
    let mut h = quick();
    let lost = h.allocate(1, 4096);
    for _ in 0..31 {
        h.second();
    }
    assert!(!h.mds.is_live(lost.object));
    assert_eq!(
        h.bind(bind(2, "k", vec![lost.object])),
        Err(MetadataError::NotBindable(lost.object.0))
    );
    for _ in 0..6 {
        h.second();
    }
    assert_eq!(h.freed(), vec![lost.object]);
}

/// Goal: a sleeping server is not woken for a free; it gets its share when it wakes,
/// and the entry waits for it meanwhile. Method: gear 1 (two gear groups asleep), a
/// delete, the grace, then gear 3.
#[test]
fn a_sleeping_server_frees_its_share_when_it_wakes_without_being_woken_for_it() {
    let mut h = quick();
    let Message::ObjectFound { info, .. } =
        h.ask(Message::CreateObject { request: 1, name: "o".into(), size_bytes: 4 << 20 })
    else {
        panic!()
    };
    h.shift_to_gear_1();
    for _ in 0..5 {
        h.second();
    }
    let wakes = h.wakes.len();
    h.ask(Message::DeleteObject { request: 2, name: "o".into() });
    for _ in 0..10 {
        h.second();
    }
    assert_eq!(h.wakes.len(), wakes, "a free wakes nobody");
    let asleep: Vec<usize> = (0..h.servers.len()).filter(|i| h.servers[*i].asleep).collect();
    assert!(!asleep.is_empty());
    assert!(asleep.iter().all(|i| !h.servers[*i].freed.contains(&info.object)));
    assert_eq!(h.mds.frees_queued(), 1, "it waits for the sleepers");
    assert!(h.mds.bytes_to_free().iter().sum::<u64>() > 0);
    h.event(MdsEvent::GearSet { gear: 3 });
    for _ in 0..20 {
        h.second();
    }
    assert_eq!(h.mds.frees_queued(), 0);
    assert_eq!(h.mds.bytes_to_free().iter().sum::<u64>(), 0);
}

/// Goal: the orphan scan's reports free exactly the objects no name holds, no
/// allocation is writing and the log does not hold already; ids never given are left.
#[test]
fn an_orphan_report_frees_only_objects_nobody_holds() {
    let mut h = quick();
    let live = h.allocate(1, 4096);
    let named = h.allocate(2, 4096);
    h.bind(bind(3, "k", vec![named.object])).unwrap();
    let dead = h.allocate(4, 4096);
    h.bind(bind(5, "d", vec![dead.object])).unwrap();
    h.ask(Message::DeleteObject { request: 6, name: "d".into() });
    let held =
        |object: ObjectId| HeldObject { object, chunk_groups: vec![ChunkGroupId(0)], bytes: 4096 };
    // An id below every one given that no name holds: a leftover of a late write.
    let orphan = ObjectId(live.object.0 - 1);
    let report = Message::CheckObjects {
        objects: vec![
            held(orphan),
            held(live.object),
            held(named.object),
            held(dead.object),
            held(ObjectId(1 << 40)),
        ],
    };
    h.event(MdsEvent::MessageReceived { from: Peer::Server(ServerId(0)), message: report });
    assert_eq!(h.mds.frees_queued(), 2, "the deleted object once, and the orphan");
    assert_eq!(h.mds.counters().orphans_found, 1);
    for _ in 0..7 {
        h.second();
    }
    assert_eq!(h.freed(), vec![orphan, dead.object]);
}

/// Goal: a snapshot keeps names with their data and attributes, allocations not
/// bound, and the free log with its sequence (a restarted MDS gives no seq twice).
#[test]
fn a_snapshot_keeps_binds_allocations_and_the_free_log() {
    let mut h = quick();
    let a = h.allocate(1, 2 << 20);
    let b = h.allocate(2, 4096);
    h.bind(bind(3, "k", vec![a.object, b.object])).unwrap();
    let c = h.allocate(4, 4096);
    h.bind(bind(5, "j", vec![c.object])).unwrap();
    h.ask(Message::DeleteObject { request: 6, name: "j".into() });
    let _pending = h.allocate(7, 4096);
    h.ask(Message::CreateObject { request: 8, name: "plain".into(), size_bytes: 4096 });
    let config = h.mds.config;
    let snapshot = h.mds.snapshot(&layout());
    let restored = Mds::restore(config, &layout(), h.now, snapshot);
    assert_eq!(restored.durable_state(), h.mds.durable_state());
    assert_eq!(restored.frees.next_seq(), h.mds.frees.next_seq());
    let whole = Mds::restore(config, &layout(), h.now, h.persisted.iter().cloned());
    assert_eq!(whole.durable_state(), h.mds.durable_state());
}
