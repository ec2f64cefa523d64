//! Sierra's cases as scripted runs of the cluster simulation (3.3, 3.4, 4.3, 4.4):
//! a secondary or a primary crashing under a write stream, a gear group going to
//! sleep under load and waking (Table 3), a failure in the lowest gear with `g_min` 1
//! and 2, and a lost server's rebuild at several cluster sizes (Fig. 12).
//!
//! Each runs the same simulation as `somnus sim cluster`, without random faults: the
//! script injects its faults at chosen times, steps the clock, and reads what the MDS
//! and the clients saw. The end checks of every run still apply.

use somnus_core::cluster::ServerPower;
use somnus_core::cluster::mds::Mds;
use somnus_core::cluster::server::Broken;
use somnus_core::gear::PowerPlan;
use somnus_types::{ChunkGroupId, ServerId, VirtualDuration, VirtualInstant};

use super::{ClusterSim, ClusterSpec, Event, FaultSet, MdsEvent, SeedReport};

/// A fault or command a script injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injection {
    Crash(u32),
    Restart(u32),
    /// The operator's (or the scheduler's) gear shift.
    Gear(u32),
    /// The scheduler's plan: the first `full_groups` gear groups of `order` on.
    Plan {
        full_groups: u32,
        order: [u32; 3],
    },
    /// A server gone for good; the operator declares it with `DeclareLost`.
    Lose(u32),
    DeclareLost(u32),
    /// Every message the server sends arrives this much later.
    Lag(u32, VirtualDuration),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
}

/// A read or write a client finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRecord {
    pub kind: OpKind,
    pub started: VirtualInstant,
    pub done: VirtualInstant,
}

impl OpRecord {
    pub fn latency(&self) -> VirtualDuration {
        self.done.duration_since(self.started)
    }
}

/// How often a script looks at the cluster while it waits for a state.
const STEP: VirtualDuration = VirtualDuration::from_millis(10);

impl ClusterSim<'_> {
    /// Keeps a record of every read and write from now on.
    pub fn record_ops(&mut self) {
        self.op_log = Some(Vec::new());
    }

    pub fn ops(&self) -> &[OpRecord] {
        self.op_log.as_deref().unwrap_or_default()
    }

    pub fn time(&self) -> VirtualInstant {
        self.now()
    }

    /// Runs the events due up to `at` (before the heal: the run's end is `run`).
    pub fn run_until(&mut self, at: VirtualInstant) {
        let at = at.min(self.heal_at());
        while let Some((_, event)) = self.events.pop_until(at) {
            self.handle(event);
        }
        self.events.advance_to(at.max(self.now()));
    }

    /// Steps the clock until `done` holds or `limit` passes; the time it held, if it did.
    pub fn run_until_true(
        &mut self,
        limit: VirtualInstant,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Option<VirtualInstant> {
        while self.now() < limit {
            if done(self) {
                return Some(self.now());
            }
            let next = self.now() + STEP;
            self.run_until(next);
        }
        done(self).then(|| self.now())
    }

    pub fn inject(&mut self, injection: Injection) {
        match injection {
            Injection::Crash(s) => self.crash_server(s),
            Injection::Restart(s) => self.restart(s),
            Injection::Gear(gear) => {
                self.report.gear_shifts += 1;
                self.trace(|| format!("gear {gear}"));
                self.feed_mds(MdsEvent::GearSet { gear });
            }
            Injection::Plan { full_groups, order } => {
                self.report.gear_shifts += 1;
                self.trace(|| format!("plan {full_groups} of {order:?}"));
                let plan = PowerPlan { full_groups, partial: 0 };
                self.feed_mds(MdsEvent::PlanSet { plan, order: order.to_vec() });
            }
            Injection::Lose(s) => self.lose_server(s),
            Injection::DeclareLost(s) => {
                self.handle(Event::DeclareLost(s));
            }
            Injection::Lag(s, lag) => self.servers[s as usize].lag = lag,
        }
    }

    /// Whether every up server's DVLs are reclaimed and its logger holds nothing.
    pub fn dvls_reclaimed(&self) -> bool {
        self.servers.iter().filter_map(|slot| slot.server.as_ref()).all(|server| {
            let log = server.log_volume();
            server.dvls_empty() && log.write_count() == 0
        })
    }

    pub fn mds(&self) -> &Mds {
        &self.mds
    }

    /// Every chunk group's primary as the MDS has it, by group id.
    pub fn primaries(&self) -> Vec<Option<ServerId>> {
        (0..self.mds.group_count()).map(|g| self.mds.view(ChunkGroupId(g as u32)).primary).collect()
    }

    /// Whether every server is on or asleep as the MDS has it: no sleep or wake under
    /// way.
    pub fn power_steady(&self) -> bool {
        (0..self.spec.servers).all(|s| {
            matches!(self.mds.server_power(ServerId(s)), ServerPower::On | ServerPower::Asleep)
        })
    }

    /// The chunk groups that hold the objects' chunks.
    pub fn groups_in_use(&self) -> Vec<ChunkGroupId> {
        let mut groups: Vec<ChunkGroupId> =
            self.chunk_groups.values().flat_map(|g| g.iter().copied()).collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Whether `group` is served: the MDS names a primary, which leads it in that epoch
    /// and is not going to sleep.
    pub fn served(&self, group: ChunkGroupId) -> bool {
        let view = self.mds.view(group);
        view.primary.is_some_and(|p| {
            let server = self.servers[p.index()].server.as_ref();
            self.mds.server_power(p) == ServerPower::On
                && server.is_some_and(|s| s.leads_at(group, view.epoch))
        })
    }

    /// How long the oldest op still under way has waited (zero when none is).
    pub fn longest_op_under_way(&self) -> VirtualDuration {
        let oldest = self.clients.iter().filter_map(|c| c.op.map(|op| op.started)).min();
        oldest.map_or(VirtualDuration::ZERO, |at| self.now().duration_since(at))
    }

    pub fn client_retries(&self) -> u64 {
        self.clients.iter().map(|c| c.client.counters().retries).sum()
    }

    pub fn rebuilt_bytes(&self) -> u64 {
        self.servers_total(|c| c.rebuilt_bytes)
    }

    pub fn writes_logged(&self) -> u64 {
        self.servers_total(|c| c.writes_logged)
    }

    /// Whether every object is created and every client sent its last fill write
    /// (`ClusterSpec::fill`).
    pub fn filled(&self) -> bool {
        self.objects_created == self.spec.objects
            && self.clients.iter().all(|c| c.fill_left.is_empty())
    }

    /// Heals what is left, lets the cluster quiesce and checks it (as `run`).
    pub fn finish_run(self) -> SeedReport {
        self.run()
    }
}

/// A scripted run's cluster: no random faults, a write-heavy load.
fn scripted(spec: ClusterSpec) -> ClusterSpec {
    ClusterSpec { faults: FaultSet::none(), ..spec }
}

/// A run of `spec` that records every read and write.
fn recorded(spec: &ClusterSpec, seed: u64) -> ClusterSim<'static> {
    let mut sim = ClusterSim::new(spec, seed, None);
    sim.record_ops();
    sim
}

fn at(secs: f64) -> VirtualInstant {
    VirtualInstant::ZERO + VirtualDuration::from_nanos((secs * 1e9) as u64)
}

/// What one scripted case measured.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub name: &'static str,
    /// The figures, name and value, in the order printed.
    pub figures: Vec<(String, f64)>,
    pub end: SeedReport,
}

impl CaseReport {
    pub fn figure(&self, name: &str) -> f64 {
        self.figures.iter().find(|(n, _)| *n == name).map_or(f64::NAN, |(_, v)| *v)
    }
}

fn ops_in(ops: &[OpRecord], kind: OpKind, from: VirtualInstant, to: VirtualInstant) -> Vec<f64> {
    let ops = ops.iter().filter(|o| o.kind == kind && o.done >= from && o.done < to);
    ops.map(|o| o.latency().as_secs_f64()).collect()
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// A secondary crashes during a write stream and returns 20 s later: writes go on
/// through the DVL, the returning replica is reclaimed level, the loggers emptied.
pub fn secondary_crash(seed: u64) -> CaseReport {
    let spec = scripted(ClusterSpec { virtual_secs: 40, ..ClusterSpec::small() });
    let mut sim = recorded(&spec, seed);
    sim.run_until(at(3.0));
    let (victim, as_secondary) = busiest_secondary(&sim);
    let (crash, restart) = (at(3.0), at(23.0));
    sim.inject(Injection::Crash(victim));
    let logged_before = sim.writes_logged();
    sim.run_until(restart);
    let logged = sim.writes_logged() - logged_before;
    sim.inject(Injection::Restart(victim));
    // Writes acknowledged once the MDS reported it down, until it returned.
    let down_at = crash + sim.config.failure_timeout;
    let during = ops_in(sim.ops(), OpKind::Write, down_at, restart);
    let before = ops_in(sim.ops(), OpKind::Write, at(1.0), crash);
    let end = sim.finish_run();
    CaseReport {
        name: "secondary crash",
        figures: vec![
            ("server".to_owned(), f64::from(victim)),
            ("groups in use where it is a secondary".to_owned(), as_secondary as f64),
            ("writes acknowledged before the crash".to_owned(), before.len() as f64),
            ("writes acknowledged while it was down".to_owned(), during.len() as f64),
            ("writes logged in the DVL".to_owned(), logged as f64),
            ("writes reclaimed (whole run)".to_owned(), end.writes_reclaimed as f64),
            ("max write latency while down (s)".to_owned(), max(&during)),
        ],
        end,
    }
}

/// The server that is a secondary of the most groups in use and primary of none, and
/// how many groups it is a secondary of.
fn busiest_secondary(sim: &ClusterSim) -> (u32, usize) {
    let groups = sim.groups_in_use();
    let of = |s: u32| {
        groups.iter().filter(|g| sim.mds.view(**g).replicas.contains(&ServerId(s))).count()
    };
    let victim = (0..sim.spec.servers)
        .filter(|s| groups.iter().all(|g| sim.mds.view(*g).primary != Some(ServerId(*s))))
        .max_by_key(|s| of(*s))
        .unwrap_or(0);
    (victim, of(victim))
}

/// A secondary crashes under a write stream for 10 s; when it returns, every other
/// server's messages arrive 150 ms late, so the loggers answer the reclaim's reads
/// after the retry interval (200 ms) and each read is asked again of the other
/// logger. The reclaim must still finish: an answer is good whichever logger asked
/// gives it.
pub fn reclaim_from_slow_loggers(seed: u64) -> CaseReport {
    let spec = scripted(ClusterSpec { virtual_secs: 60, ..ClusterSpec::small() });
    let mut sim = recorded(&spec, seed);
    sim.run_until(at(3.0));
    let (victim, _) = busiest_secondary(&sim);
    sim.inject(Injection::Crash(victim));
    sim.run_until(at(13.0));
    let logged = sim.writes_logged();
    for s in (0..spec.servers).filter(|s| *s != victim) {
        sim.inject(Injection::Lag(s, VirtualDuration::from_millis(150)));
    }
    let restart = sim.time();
    sim.inject(Injection::Restart(victim));
    let reclaimed = sim.run_until_true(at(58.0), ClusterSim::dvls_reclaimed);
    let took = reclaimed.map_or(f64::NAN, |t| t.duration_since(restart).as_secs_f64());
    let end = sim.finish_run();
    CaseReport {
        name: "reclaim from slow loggers",
        figures: vec![
            ("server".to_owned(), f64::from(victim)),
            ("writes logged while it was down".to_owned(), logged as f64),
            ("time to reclaim every DVL (s)".to_owned(), took),
            ("writes reclaimed (whole run)".to_owned(), end.writes_reclaimed as f64),
        ],
        end,
    }
}

/// The primary of the most groups in use crashes under load and stays down: each of its
/// groups changes view, the new primary recovers the DVL, and every write acknowledged
/// reads back (the end checks).
pub fn primary_crash(seed: u64) -> CaseReport {
    let spec = scripted(ClusterSpec { virtual_secs: 30, ..ClusterSpec::small() });
    let mut sim = recorded(&spec, seed);
    sim.run_until(at(3.0));
    let groups = sim.groups_in_use();
    let led_by = |sim: &ClusterSim, s: u32| -> Vec<ChunkGroupId> {
        groups.iter().copied().filter(|g| sim.mds.view(*g).primary == Some(ServerId(s))).collect()
    };
    let victim = (0..spec.servers).max_by_key(|s| led_by(&sim, *s).len()).unwrap_or(0);
    let led = led_by(&sim, victim);
    let crash = sim.time();
    sim.inject(Injection::Crash(victim));
    let taken_over = sim.run_until_true(at(25.0), |sim| {
        led.iter().all(|g| sim.mds.view(*g).primary != Some(ServerId(victim)) && sim.served(*g))
    });
    let failover = taken_over.map_or(f64::NAN, |t| t.duration_since(crash).as_secs_f64());
    sim.run_until(at(25.0));
    let after = taken_over.map_or_else(Vec::new, |t| ops_in(sim.ops(), OpKind::Write, t, at(25.0)));
    let end = sim.finish_run();
    CaseReport {
        name: "primary crash",
        figures: vec![
            ("server".to_owned(), f64::from(victim)),
            ("groups in use it led".to_owned(), led.len() as f64),
            ("time until every one is led elsewhere (s)".to_owned(), failover),
            ("writes acknowledged after the failover".to_owned(), after.len() as f64),
            ("view changes (whole run)".to_owned(), end.view_changes as f64),
        ],
        end,
    }
}

/// Sierra Table 3: a cluster of `servers` under load shifts from gear 3 to `low` (the
/// primaries of the gear groups that sleep migrate first), then back to 3 (primaries
/// rebalance). A down-shift wakes nobody: every primary moves straight to a server
/// that stays on, and every write finds loggers there.
pub fn gear_shift(seed: u64, servers: u32, low: u32) -> CaseReport {
    let spec = scripted(ClusterSpec {
        servers,
        racks: servers / 3,
        clients: 16,
        groups_per_server: 10,
        objects: servers * 5,
        virtual_secs: 50,
        ..ClusterSpec::small()
    });
    let mut sim = recorded(&spec, seed);
    let groups: Vec<ChunkGroupId> =
        (0..sim.mds.group_count()).map(|g| ChunkGroupId(g as u32)).collect();
    let mut figures = Vec::new();
    // The up-shift waits for the profile's wake (13 s) before the rebalance.
    for (label, from, gear, until) in [("down-shift", 8.0, low, 20.0), ("up-shift", 20.0, 3, 45.0)]
    {
        sim.run_until(at(from));
        let primaries = sim.primaries();
        let retries = sim.client_retries();
        let wakes = sim.mds.counters().wakes;
        let start = sim.time();
        sim.inject(Injection::Gear(gear));
        // Migrated: every group is led by a serving server, every server the gear keeps
        // on is on (an up-shift waits for the wake and the rebalance), and the
        // primaries have not changed for 2 s; the migration ended at the last step
        // that was not so.
        let mut previous = primaries.clone();
        let mut unsettled_at = start;
        let settled = sim.run_until_true(at(until), |sim| {
            let now = sim.primaries();
            if now != previous || !sim.power_steady() || !groups.iter().all(|g| sim.served(*g)) {
                previous = now;
                unsettled_at = sim.time();
            }
            sim.time().duration_since(unsettled_at) > VirtualDuration::from_secs(2)
        });
        let done = settled.map_or(at(until), |_| unsettled_at + STEP);
        let moved = groups
            .iter()
            .zip(&primaries)
            .filter(|(g, before)| sim.mds.view(**g).primary != **before)
            .count();
        sim.run_until(at(until));
        let window_end = done + VirtualDuration::from_secs(2);
        let requests = sim.ops().iter().filter(|o| o.done >= start && o.done < window_end).count();
        let mut latencies: Vec<f64> = sim
            .ops()
            .iter()
            .filter(|o| o.started >= start && o.started < done)
            .map(|o| o.latency().as_secs_f64())
            .collect();
        latencies.sort_by(f64::total_cmp);
        figures.push((format!("{label}: primaries migrated"), moved as f64));
        figures.push((
            format!("{label}: migration time (s)"),
            done.duration_since(start).as_secs_f64(),
        ));
        figures.push((format!("{label}: requests"), requests as f64));
        figures
            .push((format!("{label}: requests retried"), (sim.client_retries() - retries) as f64));
        figures.push((format!("{label}: worst request latency (s)"), max(&latencies)));
        figures
            .push((format!("{label}: servers woken"), (sim.mds.counters().wakes - wakes) as f64));
        let asleep = (0..servers)
            .filter(|s| sim.mds.server_power(ServerId(*s)) == ServerPower::Asleep)
            .count();
        figures.push((format!("{label}: servers asleep at its end"), asleep as f64));
    }
    let end = sim.finish_run();
    CaseReport { name: "gear shift under load", figures, end }
}

/// A server fails in the lowest gear (Sierra 3.4): with `gear_min` 1 the MDS must wake
/// sleeping replicas before its groups are served again; with 2 an awake one takes over.
pub fn lowest_gear_failure(seed: u64, gear_min: u32) -> CaseReport {
    let spec =
        scripted(ClusterSpec { virtual_secs: 40, gear_min, clients: 16, ..ClusterSpec::small() });
    let mut sim = recorded(&spec, seed);
    sim.run_until(at(2.0));
    sim.inject(Injection::Gear(1));
    sim.run_until(at(12.0));
    let groups = sim.groups_in_use();
    let awake = |sim: &ClusterSim, s: u32| sim.mds.server_power(ServerId(s)) == ServerPower::On;
    let asleep = (0..spec.servers).filter(|s| !awake(&sim, *s)).count();
    let led = |sim: &ClusterSim, s: u32| {
        groups.iter().filter(|g| sim.mds.view(**g).primary == Some(ServerId(s))).count()
    };
    let victim = (0..spec.servers).filter(|s| awake(&sim, *s)).max_by_key(|s| led(&sim, *s));
    let victim = victim.unwrap_or(0);
    let wakes_before = sim.mds.counters().wakes;
    let led: Vec<ChunkGroupId> = groups
        .iter()
        .copied()
        .filter(|g| sim.mds.view(*g).primary == Some(ServerId(victim)))
        .collect();
    let asleep_then: Vec<bool> = (0..spec.servers).map(|s| !awake(&sim, s)).collect();
    let crash = sim.time();
    sim.inject(Injection::Crash(victim));
    // Its groups are unavailable until each is led by a serving replica again.
    let served = sim.run_until_true(at(35.0), |sim| led.iter().all(|g| sim.served(*g)));
    let gap = served.map_or(f64::NAN, |t| t.duration_since(crash).as_secs_f64());
    let after_wake = led
        .iter()
        .filter(|g| sim.mds.view(**g).primary.is_some_and(|p| asleep_then[p.index()]))
        .count();
    sim.run_until(at(39.9));
    let issued = crash + VirtualDuration::from_secs(15);
    let reads: Vec<f64> = sim
        .ops()
        .iter()
        .filter(|o| o.kind == OpKind::Read && o.started >= crash && o.started < issued)
        .map(|o| o.latency().as_secs_f64())
        .collect();
    let wakes = sim.mds.counters().wakes - wakes_before;
    let end = sim.finish_run();
    CaseReport {
        name: if gear_min == 1 {
            "failure in gear 1, g_min 1"
        } else {
            "failure in gear 2, g_min 2"
        },
        figures: vec![
            ("servers asleep before the failure".to_owned(), asleep as f64),
            ("groups in use it led".to_owned(), led.len() as f64),
            ("time until each is served again (s)".to_owned(), gap),
            ("groups served again only by a woken replica".to_owned(), after_wake as f64),
            ("servers the MDS woke".to_owned(), wakes as f64),
            ("reads issued in the 15 s after the failure".to_owned(), reads.len() as f64),
            ("worst read latency (s)".to_owned(), max(&reads)),
        ],
        end,
    }
}

/// P7, as the scheduler's daily rotation meets it: the first gear group sleeps while
/// the other two serve (their primaries log its replicas' writes at loggers among
/// them), then the order turns to gear 1 of the first group: it wakes, takes the
/// primaries over, and the other two drain and sleep, holding what was logged before
/// it is reclaimed. Its clients' reads of those blocks wait for the holders to wake
/// (asked of the MDS), not for a shift that may never come.
pub fn sleeping_holders(seed: u64, broken: Option<Broken>) -> CaseReport {
    let spec = scripted(ClusterSpec {
        servers: 18,
        racks: 6,
        objects: 160,
        churn: 0.0,
        virtual_secs: 120,
        clients: 16,
        broken,
        ..ClusterSpec::small()
    });
    let mut sim = recorded(&spec, seed);
    sim.run_until(at(2.0));
    sim.inject(Injection::Plan { full_groups: 1, order: [1, 2, 0] });
    sim.run_until(at(30.0));
    let logged = sim.writes_logged();
    // The scheduler's turn of the order: the group to lead next wakes first (13 s),
    // then the one that led drains to it.
    sim.inject(Injection::Plan { full_groups: 2, order: [1, 0, 2] });
    sim.run_until(at(44.0));
    let turned = sim.time();
    sim.inject(Injection::Plan { full_groups: 1, order: [0, 1, 2] });
    sim.run_until(at(119.0));
    let reads: Vec<f64> = sim
        .ops()
        .iter()
        .filter(|o| o.kind == OpKind::Read && o.started >= turned)
        .map(|o| o.latency().as_secs_f64())
        .collect();
    let wakes = sim.mds.counters().wakes;
    let waiting = sim.longest_op_under_way().as_secs_f64();
    let end = sim.finish_run();
    CaseReport {
        name: "reads of writes whose holders sleep",
        figures: vec![
            ("writes logged while the first gear group slept".to_owned(), logged as f64),
            ("reads served with logged writes read back".to_owned(), end.reads_from_loggers as f64),
            ("times a primary asked to wake holders".to_owned(), end.holder_wakes_asked as f64),
            ("servers the MDS woke before the heal".to_owned(), wakes as f64),
            ("reads issued after the turn".to_owned(), reads.len() as f64),
            ("worst read latency (s)".to_owned(), max(&reads)),
            ("longest op still under way at the end (s)".to_owned(), waiting),
        ],
        end,
    }
}

/// Sierra Fig. 12: a server of a filled cluster of `servers` (3 per rack) is lost and
/// declared lost 2 s later; its replicas are copied onto its gear group's servers. The
/// rate is the bytes copied over the time from the declaration to the last
/// `RebuildDone` recorded.
pub fn rebuild(seed: u64, servers: u32) -> CaseReport {
    // The lost server holds 3 x this many groups: at least one per server of its gear
    // group, so every one of them can take a share of the copy.
    let groups_per_server = (servers / 3).max(12);
    let spec = scripted(ClusterSpec {
        servers,
        racks: servers / 3,
        clients: 32,
        groups_per_server,
        // About two 1 MiB chunks per chunk group.
        objects: servers * groups_per_server / 2,
        object_bytes: 4 << 20,
        fill: true,
        virtual_secs: 200,
        ..ClusterSpec::small()
    });
    let mut sim = ClusterSim::new(&spec, seed, None);
    let filled = sim.run_until_true(at(150.0), ClusterSim::filled);
    // The last fill writes finish.
    sim.run_until(sim.time() + VirtualDuration::from_secs(1));
    let victim = 0;
    let held = (0..sim.mds.group_count())
        .filter(|g| sim.mds.view(ChunkGroupId(*g as u32)).replicas.contains(&ServerId(victim)))
        .count();
    sim.inject(Injection::Lose(victim));
    let lose_at = sim.time() + VirtualDuration::from_secs(2);
    sim.run_until(lose_at);
    sim.inject(Injection::DeclareLost(victim));
    let copied_before = sim.rebuilt_bytes();
    let declared = sim.time();
    let done = sim.run_until_true(at(195.0), |sim| sim.mds.rebuilds_under_way() == 0);
    let copied = sim.rebuilt_bytes() - copied_before;
    let secs = done.map_or(f64::NAN, |t| t.duration_since(declared).as_secs_f64());
    let end = sim.finish_run();
    CaseReport {
        name: "rebuild",
        figures: vec![
            ("servers".to_owned(), f64::from(servers)),
            (
                "fill done at (s)".to_owned(),
                filled.map_or(f64::NAN, |t| t.duration_since(at(0.0)).as_secs_f64()),
            ),
            ("chunk groups it held".to_owned(), held as f64),
            ("bytes copied (MiB)".to_owned(), copied as f64 / f64::from(1 << 20)),
            ("rebuild time (s)".to_owned(), secs),
            ("rebuild rate (MiB/s)".to_owned(), copied as f64 / f64::from(1 << 20) / secs),
        ],
        end,
    }
}
