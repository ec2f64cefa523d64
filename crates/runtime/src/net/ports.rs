//! Choosing the loopback ports of a local cluster.
//!
//! A port the kernel hands out for `bind(0)` comes from the ephemeral range (32768 and
//! up on Linux), where any outgoing connection may take it a moment later: a cluster
//! file that names one may find it taken when its process starts, or at the next
//! `somnus up`. Ports are chosen below that range instead, scanning up from a base,
//! each checked free for both TCP (peers, HTTP) and UDP (a server's wake packet).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};

/// The first port `somnus up` tries: the MDS at 7400, servers from 7401, HTTP after.
pub const DEFAULT_BASE: u16 = 7400;

/// The first port of the ephemeral range on Linux: scanning stops below it.
const EPHEMERAL_START: u16 = 32768;

#[derive(Debug, thiserror::Error)]
#[error("no {count} free loopback ports between {from} and {EPHEMERAL_START}")]
pub struct NoFreePorts {
    count: usize,
    from: u16,
}

/// `count` distinct loopback ports from `from` up, each free now for TCP and UDP
/// (all held open together while chosen), in increasing order.
pub fn loopback_ports(count: usize, from: u16) -> Result<Vec<SocketAddr>, NoFreePorts> {
    let mut held = Vec::with_capacity(count);
    for port in from..EPHEMERAL_START {
        if held.len() == count {
            break;
        }
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        if let (Ok(tcp), Ok(udp)) = (TcpListener::bind(address), UdpSocket::bind(address)) {
            held.push((address, tcp, udp));
        }
    }
    if held.len() < count {
        return Err(NoFreePorts { count, from });
    }
    Ok(held.into_iter().map(|(address, _, _)| address).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_skip_one_in_use() {
        let taken = loopback_ports(1, 23000).unwrap()[0];
        let _hold = TcpListener::bind(taken).unwrap();
        let ports = loopback_ports(5, taken.port()).unwrap();
        assert_eq!(ports.len(), 5);
        assert!(!ports.contains(&taken), "{ports:?} includes {taken}, which is in use");
        assert!(ports.windows(2).all(|w| w[0].port() < w[1].port()));
        assert!(ports.iter().all(|p| p.port() < EPHEMERAL_START && p.ip().is_loopback()));
        assert!(loopback_ports(10, EPHEMERAL_START - 5).is_err());
    }
}
