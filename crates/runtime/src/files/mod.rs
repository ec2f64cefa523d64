//! The runtime's own files: each begins with a header naming its kind and format
//! version (`file_header`), holds checksummed records (`record`), and is made
//! durable by the steps `durable` shares; the journals and the cluster's secret.
//! docs/format/ describes each.

pub mod durable;
pub mod file_header;
pub mod journal;
pub mod open_files;
pub mod record;
pub mod secret_file;
