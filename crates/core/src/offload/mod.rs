//! Write off-loading (Narayanan et al., FAST'08): the per-volume manager that spins its
//! home volume down when idle, redirects writes to loggers elsewhere while it sleeps,
//! and reclaims the off-loaded blocks in the background.
//!
//! The manager is a sans-IO state machine. Its shell (the simulator or the runtime)
//! feeds it [`ManagerEvent`]s with the current time and a [`LoggerStatuses`] probe, then
//! drains [`VolumeManager::poll_action`] and arms a timer for
//! [`VolumeManager::poll_timeout`].

mod garbage;
mod manager;

pub use manager::{ManagerCounters, VolumeManager};

use somnus_types::{
    ByteRange, IoId, IoKind, LoggerId, Power, RequestId, VirtualDuration, VolumeId,
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
    /// How often a manager that could not spin down for want of an awake logger looks
    /// again (the paper's periodic probe). Changes of availability also arrive as
    /// `LoggersChanged`, so the probe is a backstop and can be slow.
    pub probe_interval: VirtualDuration,
    /// Client requests held at once; past it a request is refused (backpressure).
    pub requests_max: usize,
    /// I/Os outstanding at once (foreground parts, reclaim, invalidations).
    pub ios_max: usize,
    /// Invalidations in flight at once.
    pub invalidations_in_flight_max: usize,
    /// Which volume of the group stays awake as the logger host.
    pub logger_host: LoggerHost,
    /// The free space an awake logger elsewhere must have for the home volume to
    /// sleep on it: room for a burst of writes, not just one.
    pub logger_room_min_bytes: u64,
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
            requests_max: 1 << 20,
            ios_max: 1 << 22,
            invalidations_in_flight_max: 16,
            logger_host: LoggerHost::Any,
            logger_room_min_bytes: 1 << 20,
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

/// What a probe says of a logger right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoggerAvailability {
    /// Its disks spin: a write is served at once.
    Awake,
    /// Its disks are spinning down, asleep or waking: a write would wait.
    Asleep,
    /// Failed (crashed or unreachable): nothing it holds can be read until it returns.
    Failed,
}

/// A logger's answer to a manager's probe (004 section 3.1: "power state of the
/// logger's volume, its queue length, the amount of available space").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggerStatus {
    pub availability: LoggerAvailability,
    pub queue_length: u32,
    pub free_bytes: u64,
}

/// The probe: the shell answers for any logger in the view.
pub trait LoggerStatuses {
    fn status(&self, logger: LoggerId) -> LoggerStatus;
}

/// Why an I/O failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoFailure {
    /// The logger failed or became unreachable before the I/O was durable; a write may
    /// or may not have reached its log.
    LoggerUnavailable,
    /// The logger had no room.
    LoggerFull,
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
    RequestArrived {
        request: RequestId,
        kind: IoKind,
        range: ByteRange,
    },
    IoCompleted {
        io: IoId,
        result: Result<(), IoFailure>,
    },
    /// The home volume finished a transition (to `Active` or `Standby`), whether the
    /// manager asked for it or the shell woke the volume for a logger's I/O.
    HomePowerChanged {
        power: HomePower,
    },
    /// Some logger's availability changed: waits on loggers may end.
    LoggersChanged,
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
    Invalidate {
        io: IoId,
        logger: LoggerId,
        range: ByteRange,
        version: Version,
    },
    SpinDown,
    SpinUp,
    /// The request is done: durable (a write) or read.
    Reply {
        request: RequestId,
        kind: IoKind,
        outcome: ReplyOutcome,
        /// Some part of it waited for the home volume to spin up.
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
}
