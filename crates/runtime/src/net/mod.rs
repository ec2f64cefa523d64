//! Connections between a cluster's processes: the framed, authenticated transport
//! (`transport`, over TLS by default: `tls`), a bounded queue and writer task per
//! peer (`outbox`), and the loopback ports of a local cluster (`ports`).

pub mod outbox;
pub mod ports;
pub mod tls;
pub mod transport;
