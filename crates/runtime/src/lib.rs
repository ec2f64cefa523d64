//! The runtime: the tokio shell that runs the core's state machines as real
//! processes, over TCP between them and files on their disks (DESIGN.md, "One core,
//! two shells"). It turns the core's actions into I/O and I/O into the core's events,
//! and decides nothing of the protocol itself.
//!
//! Its rooms, each depending only on those listed before it:
//! - `clock`: a process's clock as the core sees it;
//! - `power`: the actuators and meters that put a server's units to sleep;
//! - `cluster_file`: the cluster file a process starts from;
//! - `files`: the runtime's own files (headers, checksummed records, journals, the
//!   cluster's secret) and the durable-file steps they share;
//! - `net`: connections between processes (framing, TLS, queues per peer, ports);
//! - `observe`: what a process reports (status, metrics, its HTTP endpoint);
//! - `client`: the client library, and the files `somnus put` stores as objects;
//! - `server`, `mds`: the task of each role and the disk it owns;
//! - `process`: a role started as a process.
//!
//! `format_fixtures` (tests only) reads the frozen files of every format.

pub mod client;
pub mod clock;
pub mod cluster_file;
pub mod files;
pub mod mds;
pub mod net;
pub mod observe;
pub mod power;
pub mod process;
pub mod server;

#[cfg(test)]
mod format_fixtures;
