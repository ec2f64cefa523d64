//! A storage server as a process: the core's `Server` driven by one task (`task`),
//! over the disk it owns: the replicas in packs with a journal and checkpoints
//! (`disk`, `packs`, `legacy_chunks` for the files of older builds), made durable by
//! the disk worker (`disk_worker`), read by the reader thread (`block_reader`); its
//! logger on files (`file_log`), whose operations its own thread carries out
//! (`log_worker`); and its incarnation (`incarnation`).

pub mod block_reader;
pub mod disk;
pub mod disk_worker;
pub mod file_log;
pub mod incarnation;
pub mod legacy_chunks;
pub mod log_worker;
pub mod packs;
pub mod task;
