//! The somnus simulator: a discrete-event loop in virtual time that replays block
//! traces against the core's policies, with models of disks (seek, rotation, transfer,
//! FCFS queues, RAID-1 and RAID-5, spin-up delays), loggers, a network and power.
//!
//! It is one of the core's two shells: every policy decision is made by `somnus-core`
//! state machines (one `Node` per server in the off-loading engine; the cluster's MDS,
//! servers and clients in [`cluster`]); this crate supplies time, I/O, power and the
//! network, injects faults, checks, and measures.
//!
//! Modules:
//! - [`topology`]: the cluster layout (racks, servers, arrays, network, thresholds)
//!   from TOML, with the MSR Cambridge data center of 004 Table 4 built in.
//! - [`disk`]: disk service times and RAID mapping.
//! - [`engine`]: the event loop that replays a trace for one configuration: the
//!   physical volumes (disks, caches, power), the network, and the measurements.
//! - [`experiment`]: the write off-loading experiment (004 section 4) and its report.
//! - [`replay`]: turning a trace into the engine's requests, windows and days.
//! - [`cluster`]: the cluster protocol simulated whole (MDS, servers, clients) with
//!   injected faults and a checker of its invariants, and trace replay against it.
//! - [`gear_study`], [`sierra`]: the gear scheduler on a load series (Sierra 4.1-4.2)
//!   and on the cluster simulation replaying a trace (Sierra 4.3).

mod cache;
pub mod cluster;
pub mod disk;
pub mod engine;
pub mod experiment;
pub mod gear_study;
pub mod replay;
pub mod sierra;
pub mod topology;
