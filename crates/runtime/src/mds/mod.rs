//! The metadata service as a process: the core's `Mds` driven by one task (`task`),
//! its commands made durable in a log with snapshots (`command_log`).

pub mod command_log;
pub mod task;
