//! The deterministic, sans-IO core of somnus.
//!
//! Every policy and protocol decision lives here as a state machine that takes events
//! (a request arrived, an I/O completed, a timer fired, a power state changed) and
//! returns actions (issue an I/O, change a power state, reply). The core never reads a
//! clock, a file, a socket or a random source of its own: time arrives as `now`, and
//! randomness, where a policy needs it, from a seed passed at construction. The same
//! code runs under both shells: the simulator (`somnus-sim`), in virtual time with
//! modelled disks and a fault-injecting network, and the runtime (`somnus-runtime`), as
//! real processes over sockets and files. A shell carries out actions and reports
//! their outcomes; it decides nothing of the protocol.
//!
//! Modules:
//! - [`power`]: power profiles (TOML data from the papers' tables) and the exact
//!   energy meter.
//! - [`cluster`]: the cluster protocol (docs/protocol.md): the metadata service, the
//!   storage server with its distributed virtual log and logger, the chunk store's
//!   durable state, the client, and trace replay admission.
//! - [`gear`]: the gear scheduler (Sierra 3.5): load metric, predictor, gearing.
//! - [`extent`]: a map from non-overlapping byte ranges to values, the shape of every
//!   redirect cache and log index.
//! - [`layout`]: where chunk groups live: Sierra's power-aware gear groups and the
//!   naive layouts, and the analysis of what each allows (Sierra Table 1).
//! - [`logger`]: the model of a logger's log (004 section 3.1, docs/format/log.md):
//!   versioned records, deletion markers, segments, capacity and garbage collection.
//! - [`offload`]: the write off-loading volume manager (004 section 3.1-3.2).
//! - [`node`]: one server's managers, loggers and power units as one state machine,
//!   and the plan of a cluster's nodes (the off-loading simulation's server).
//! - [`slab`]: a slab of values under stable keys, for I/Os and requests in flight.

pub mod cluster;
pub mod extent;
pub mod gear;
pub mod layout;
pub mod logger;
pub mod node;
pub mod offload;
pub mod power;
pub mod slab;

/// The version of an off-loaded write (defined in `somnus-types`, shared with the
/// logger's on-disk store).
pub use somnus_types::Version;
