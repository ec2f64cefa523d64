//! The runtime: the tokio shell that runs the core's state machines as real
//! processes, over TCP between them and files on their disks (DESIGN.md, "One core,
//! two shells"). It turns the core's actions into I/O and I/O into the core's events,
//! and decides nothing of the protocol itself.

pub mod block_reader;
pub mod checkpoint;
pub mod client;
pub mod clock;
pub mod cluster_file;
pub mod command_log;
pub mod disk_worker;
pub mod durable;
pub mod file_header;
pub mod file_log;
#[cfg(test)]
mod format_fixtures;
pub mod http;
pub mod incarnation;
pub mod journal;
pub mod legacy_chunks;
pub mod mds_node;
pub mod metrics;
pub mod net;
pub mod object_file;
pub mod open_files;
pub mod packs;
pub mod ports;
pub mod power;
pub mod process;
pub mod record;
pub mod secret_file;
pub mod server_disk;
pub mod server_node;
pub mod status;
pub mod tls;
pub mod transport;
