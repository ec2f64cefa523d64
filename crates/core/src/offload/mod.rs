//! Write off-loading (Narayanan et al., FAST'08): the per-volume manager that spins its
//! home volume down when idle, redirects writes to loggers elsewhere while it sleeps,
//! and reclaims the off-loaded blocks in the background.
//!
//! The manager is a sans-IO state machine. Its shell (a [`crate::node::Node`], or a
//! test harness) feeds it [`ManagerEvent`]s with the current time, then drains
//! [`VolumeManager::poll_action`] and arms a timer for [`VolumeManager::poll_timeout`].
//! What the manager knows of its loggers it was told, as events (reports a logger
//! pushed, the status each reply carries), and keeps in its own view, which may be
//! stale: it never asks its shell a question in the middle of a decision, since a
//! logger on another machine cannot be asked that way.

mod admission;
mod garbage;
mod manager;
mod view;

pub use manager::{ManagerCounters, VolumeManager};

use somnus_types::{
    ByteRange, IoId, IoKind, LoggerId, Power, RequestId, VirtualDuration, VirtualInstant, VolumeId,
};

use crate::Version;

/// How a manager manages the power of its home volume: the configurations of 004
/// section 4.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerPolicy {
    /// `baseline`: the volume never spins down.
    AlwaysOn,
    /// `vanilla`: spin down after `idle` without any request; the next request, read or
    /// write, waits for the spin-up.
    SpinDownWhenIdle { idle: VirtualDuration },
    /// Machine- or rack-level off-load: spin down after `read_idle` without reads and
    /// `write_idle` without writes; while down, writes go to loggers. Reaching
    /// `offload_limit_bytes` of off-loaded data spins the volume up in the background.
    Offload { read_idle: VirtualDuration, write_idle: VirtualDuration, offload_limit_bytes: u64 },
}

impl PowerPolicy {
    /// The paper's vanilla configuration: 60 s idle.
    pub fn vanilla() -> PowerPolicy {
        PowerPolicy::SpinDownWhenIdle { idle: VirtualDuration::from_secs(60) }
    }

    /// The paper's off-load configurations: 60 s without reads, 10 s without writes,
    /// 1 GiB off-load limit.
    pub fn offload() -> PowerPolicy {
        PowerPolicy::Offload {
            read_idle: VirtualDuration::from_secs(60),
            write_idle: VirtualDuration::from_secs(10),
            offload_limit_bytes: 1 << 30,
        }
    }
}

/// The thresholds every manager of a cluster shares (004 section 4.1), as an operator
/// sets them (the simulator reads them from a topology's `[policy]` table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyParams {
    pub vanilla_idle: VirtualDuration,
    pub read_idle: VirtualDuration,
    pub write_idle: VirtualDuration,
    pub offload_limit_bytes: u64,
    pub reclaim_after_idle: VirtualDuration,
    pub logger_host: LoggerHost,
}

impl Default for PolicyParams {
    /// The paper's figures: 60 s vanilla idle, 60 s / 10 s without reads / writes, a
    /// 1 GiB off-load limit; reclaim after 100 ms of quiet; any volume hosts loggers.
    fn default() -> PolicyParams {
        PolicyParams {
            vanilla_idle: VirtualDuration::from_secs(60),
            read_idle: VirtualDuration::from_secs(60),
            write_idle: VirtualDuration::from_secs(10),
            offload_limit_bytes: 1 << 30,
            reclaim_after_idle: VirtualDuration::from_millis(100),
            logger_host: LoggerHost::Any,
        }
    }
}

/// The four configurations of 004 section 4.1: how volumes manage their power, and
/// which loggers each may off-load to.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ConfigKind {
    /// Volumes never spin down.
    Baseline,
    /// Spin down after 60 s idle; every request waits for a spin-up.
    Vanilla,
    /// Off-load writes to loggers on the same server only.
    Machine,
    /// Off-load writes to any logger in the rack.
    Rack,
}

impl ConfigKind {
    pub const ALL: [ConfigKind; 4] =
        [ConfigKind::Baseline, ConfigKind::Vanilla, ConfigKind::Machine, ConfigKind::Rack];

    pub fn name(self) -> &'static str {
        match self {
            ConfigKind::Baseline => "baseline",
            ConfigKind::Vanilla => "vanilla",
            ConfigKind::Machine => "machine",
            ConfigKind::Rack => "rack",
        }
    }

    /// The power policy of every manager under this configuration.
    pub fn power_policy(self, params: &PolicyParams) -> PowerPolicy {
        match self {
            ConfigKind::Baseline => PowerPolicy::AlwaysOn,
            ConfigKind::Vanilla => PowerPolicy::SpinDownWhenIdle { idle: params.vanilla_idle },
            ConfigKind::Machine | ConfigKind::Rack => PowerPolicy::Offload {
                read_idle: params.read_idle,
                write_idle: params.write_idle,
                offload_limit_bytes: params.offload_limit_bytes,
            },
        }
    }
}

/// One logger of a manager's logger view, with what the manager knows statically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewEntry {
    pub logger: LoggerId,
    /// Reached over the network (another server).
    pub remote: bool,
    /// Lives on the home volume's own disks: useless while the home volume sleeps.
    pub shares_home_disks: bool,
    /// What the logger's volume draws while it spins (its disks at idle): the cost of
    /// keeping it awake as the group's logger host.
    pub host_idle_power: Power,
}

/// Which volume of a logger group stays awake to take the others' writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoggerHost {
    /// Whichever goes idle last, as in 004 3.1: a volume sleeps whenever some other
    /// logger is awake.
    #[default]
    Any,
    /// The one that draws least: a volume sleeps only while an awake logger elsewhere
    /// draws no more than it does, so a cheap volume stays up for an expensive one
    /// and not the other way round.
    Cheapest,
}

/// A manager's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagerConfig {
    pub volume: VolumeId,
    pub policy: PowerPolicy,
    /// The loggers this manager may off-load to, in a fixed order (ties in the ranking
    /// go to the earlier one).
    pub logger_view: Vec<ViewEntry>,
    /// Background reclaim starts once the home volume has had no foreground I/O for
    /// this long, so that it does not queue ahead of a burst.
    pub reclaim_after_idle: VirtualDuration,
    /// How often a manager looks again when its view offers no awake logger to sleep
    /// on, and how long it waits before it probes a logger that stopped answering.
    /// Changes of availability also arrive as reports, so this is a backstop.
    pub probe_interval: VirtualDuration,
    /// How long any I/O or logger request may go unanswered: past it, a logger is
    /// marked unreachable and the work goes elsewhere or waits for it, and a home I/O
    /// is retried.
    pub io_deadline: VirtualDuration,
    /// Attempts at a home I/O (the first included) before its request fails.
    pub home_io_attempts_max: u32,
    /// Client requests held at once, waiting or in service; past it a request is
    /// refused (backpressure).
    pub requests_max: usize,
    /// I/Os and logger requests outstanding at once.
    pub ios_max: usize,
    /// Invalidations in flight at once.
    pub invalidations_in_flight_max: usize,
    /// Which volume of the group stays awake as the logger host.
    pub logger_host: LoggerHost,
    /// The room an awake logger elsewhere must reserve for the home volume to sleep on
    /// it: room for a burst of writes, not just one.
    pub logger_room_min_bytes: u64,
    /// The bytes a logger charges a record beyond its data (its header), for the room
    /// a write needs (docs/format/log.md: 88).
    pub log_record_header_bytes: u64,
    /// What the home volume draws while it spins (its disks at idle).
    pub home_idle_power: Power,
}

impl ManagerConfig {
    pub fn new(
        volume: VolumeId,
        policy: PowerPolicy,
        logger_view: Vec<ViewEntry>,
    ) -> ManagerConfig {
        ManagerConfig {
            volume,
            policy,
            logger_view,
            reclaim_after_idle: VirtualDuration::from_millis(100),
            probe_interval: VirtualDuration::from_secs(60),
            io_deadline: VirtualDuration::from_secs(120),
            home_io_attempts_max: 3,
            requests_max: 1 << 20,
            ios_max: 1 << 22,
            invalidations_in_flight_max: 16,
            logger_host: LoggerHost::Any,
            logger_room_min_bytes: 1 << 20,
            log_record_header_bytes: crate::logger::RECORD_HEADER_BYTES,
            home_idle_power: Power::ZERO,
        }
    }
}

/// The home volume's power as the manager sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomePower {
    /// Spinning: I/O is served at once.
    Active,
    SpinningDown,
    Standby,
    SpinningUp,
}

/// A power state a unit rests in: the end of a transition, which is all a shell ever
/// reports (a transition under way is the state machine's own knowledge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SteadyPower {
    Active,
    Standby,
}

impl From<SteadyPower> for HomePower {
    fn from(power: SteadyPower) -> HomePower {
        match power {
            SteadyPower::Active => HomePower::Active,
            SteadyPower::Standby => HomePower::Standby,
        }
    }
}

/// What a logger says of itself, or what a manager concluded of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoggerAvailability {
    /// Its disks spin: a write is served at once.
    Awake,
    /// Its disks are spinning down, asleep or waking: a write would wait.
    Asleep,
    /// Failed (crashed or unreachable): nothing it holds can be read until it returns.
    Failed,
}

/// A logger's state as it reports it (004 section 3.1: "power state of the logger's
/// volume, its queue length, the amount of available space").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggerStatus {
    pub availability: LoggerAvailability,
    pub queue_length: u32,
    /// Room for new records, net of what it reserved for other managers.
    pub free_bytes: u64,
    /// Until when the logger holds room it reserved for other managers, which sleep on
    /// it (ZERO: none). Its own volume stays up till then: it is their logger host.
    pub hosting_until: VirtualInstant,
    /// Grows with every status the logger gives: a status older than one already seen
    /// (a late or repeated reply) is ignored, so the view never goes back in time.
    pub sequence: u64,
}

/// Why a logger refused or failed a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFailure {
    /// The logger failed or became unreachable before the request was durable; a
    /// write may or may not have reached its log.
    Unavailable,
    /// No room for the record.
    Full,
    /// The logger sleeps and does not wake for background work (an invalidation).
    Asleep,
    /// A reservation the logger cannot grant (asleep, or short of room).
    Refused,
    /// A read of a version the log does not hold over the whole range.
    Missing,
}

/// A logger's answer to one request. Every answer carries the logger's status, so a
/// manager's view of a logger it works with stays fresh without extra messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggerReply {
    pub result: Result<(), LogFailure>,
    pub status: LoggerStatus,
    /// The request waited for the logger's disks to spin up.
    pub waited_for_spin_up: bool,
}

/// Why a home I/O failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeIoError {
    /// The device reported an error; nothing is in flight.
    Device,
}

/// Where the bytes of a home write come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSource {
    /// The client request's own data.
    Request(RequestId),
    /// A version read back from a logger (reclaim).
    Log { logger: LoggerId, version: Version },
}

/// Inputs, as facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagerEvent {
    /// A client request for the home volume. Requests that overlap one still pending
    /// wait for it: overlapping requests are served one at a time, in arrival order.
    RequestArrived {
        request: RequestId,
        kind: IoKind,
        range: ByteRange,
    },
    /// A home read or write finished.
    HomeIoCompleted {
        io: IoId,
        result: Result<(), HomeIoError>,
    },
    /// A logger answered a request (a log write, read, invalidation, reservation or
    /// probe). A reply to a request no longer outstanding (late, repeated, unknown) is
    /// dropped and counted.
    LoggerReplied {
        io: IoId,
        reply: LoggerReply,
    },
    /// The home volume came to rest, whether the manager asked for it or its disks
    /// were woken for a logger's I/O.
    HomePowerChanged {
        power: SteadyPower,
    },
    /// A logger pushed its status (its availability changed, or it is known again).
    LoggerReported {
        logger: LoggerId,
        status: LoggerStatus,
    },
    /// The logger on this manager's own disks served an I/O for some manager: the disks
    /// were busy, so the write idle time starts again (the disks must not spin down
    /// under log traffic they are serving).
    LoggerIoServed,
    /// An operator asked to restore the volume as if no off-loading had happened
    /// (004 3.1, maintenance): spin up and stay up until every logged block is home and
    /// every logged version invalidated.
    DrainRequested,
    TimerFired,
}

/// Outputs, as commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagerAction {
    ReadHome {
        io: IoId,
        request: Option<RequestId>,
        range: ByteRange,
    },
    WriteHome {
        io: IoId,
        range: ByteRange,
        source: DataSource,
    },
    ReadLog {
        io: IoId,
        request: Option<RequestId>,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    WriteLog {
        io: IoId,
        request: RequestId,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    /// Hide `version` and every older version of `range` on the logger.
    Invalidate {
        io: IoId,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    /// Ask the logger to set `bytes` aside for this manager before the home volume
    /// sleeps (O3).
    Reserve {
        io: IoId,
        logger: LoggerId,
        bytes: u64,
    },
    /// Ask a logger that stopped answering how it is.
    ProbeLogger {
        io: IoId,
        logger: LoggerId,
    },
    SpinDown,
    SpinUp,
    /// The request is done: durable (a write) or read, refused, or failed.
    Reply {
        request: RequestId,
        kind: IoKind,
        outcome: ReplyOutcome,
        /// A spin-up lengthened its response: some part of it waited for a spin-up, or
        /// it was held behind an overlapping request that did.
        waited_for_spin_up: bool,
    },
}

/// How a request was served, for the shell's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyOutcome {
    /// Served by the home volume only.
    Home,
    /// A write stored on a logger, or a read that needed one.
    Logged { remote: bool },
    /// Refused: the manager holds `requests_max` requests already.
    Busy,
    /// A home I/O failed on every attempt: the request's data is not known to be
    /// written (a write) or was not read.
    Failed,
}
