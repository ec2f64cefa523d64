//! The wake channel: a Wake-on-LAN magic packet (6 x 0xFF, then the target's MAC 16
//! times: 102 bytes) sent by the MDS over UDP to the server's own address, and, for a
//! real node with a `mac`, broadcast to port 9 where its NIC listens while suspended.
//!
//! A sleeping server keeps one UDP socket on its address: the only input it answers.
//! An emulated server has no NIC, so it takes the MAC `02:73:6d` + its id (a locally
//! administered address) unless the file gives one.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use tokio::net::UdpSocket;

/// Bytes of a magic packet.
pub const MAGIC_PACKET_BYTES: usize = 102;

/// The MAC an emulated server `id` answers to.
pub fn emulated_mac(id: u32) -> [u8; 6] {
    let [_, a, b, c] = id.to_be_bytes();
    [0x02, 0x73, 0x6d, a, b, c]
}

pub fn magic_packet(mac: [u8; 6]) -> [u8; MAGIC_PACKET_BYTES] {
    let mut packet = [0xffu8; MAGIC_PACKET_BYTES];
    for copy in packet[6..].chunks_exact_mut(6) {
        copy.copy_from_slice(&mac);
    }
    packet
}

/// Whether `bytes` is a magic packet for `mac` (trailing bytes, such as a SecureOn
/// password, are allowed and ignored).
pub fn is_magic_for(bytes: &[u8], mac: [u8; 6]) -> bool {
    bytes.len() >= MAGIC_PACKET_BYTES && bytes[..MAGIC_PACKET_BYTES] == magic_packet(mac)
}

/// The MDS's side: sends magic packets.
pub struct Waker {
    socket: UdpSocket,
}

impl Waker {
    pub async fn bind() -> std::io::Result<Waker> {
        let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)).await?;
        socket.set_broadcast(true)?;
        Ok(Waker { socket })
    }

    /// Sends the packet for `mac` to `address`, and to the broadcast port 9 when the
    /// MAC is a real NIC's. An error is returned for the caller to count: the MDS
    /// sends again while the server is waking.
    pub async fn wake(
        &self,
        mac: [u8; 6],
        address: SocketAddr,
        broadcast: bool,
    ) -> std::io::Result<()> {
        let packet = magic_packet(mac);
        self.socket.send_to(&packet, address).await?;
        if broadcast {
            let port9 = SocketAddrV4::new(Ipv4Addr::BROADCAST, 9);
            self.socket.send_to(&packet, port9).await?;
        }
        Ok(())
    }
}

/// The server's side: waits for a magic packet for its MAC; anything else is dropped
/// and counted.
pub struct WakeListener {
    socket: UdpSocket,
    mac: [u8; 6],
    pub ignored: u64,
}

impl WakeListener {
    pub async fn bind(address: SocketAddr, mac: [u8; 6]) -> std::io::Result<WakeListener> {
        Ok(WakeListener { socket: UdpSocket::bind(address).await?, mac, ignored: 0 })
    }

    /// The next magic packet for this server.
    pub async fn next(&mut self) -> std::io::Result<()> {
        let mut buffer = [0u8; 512];
        loop {
            let (length, _) = self.socket.recv_from(&mut buffer).await?;
            if is_magic_for(&buffer[..length], self.mac) {
                return Ok(());
            }
            self.ignored += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_magic_packet_is_six_ff_and_the_mac_sixteen_times() {
        let mac = emulated_mac(0x0102_0304);
        assert_eq!(mac, [0x02, 0x73, 0x6d, 0x02, 0x03, 0x04]);
        let packet = magic_packet(mac);
        assert_eq!(&packet[..6], &[0xff; 6]);
        assert!(packet[6..].chunks(6).all(|c| c == mac));
        assert!(is_magic_for(&packet, mac));
        assert!(!is_magic_for(&packet, emulated_mac(5)));
        assert!(!is_magic_for(&packet[..101], mac));
    }

    #[tokio::test]
    async fn a_listener_wakes_on_its_own_packet_only() {
        let mut listener =
            WakeListener::bind("127.0.0.1:0".parse().unwrap(), emulated_mac(7)).await.unwrap();
        let address = listener.socket.local_addr().unwrap();
        let waker = Waker::bind().await.unwrap();
        waker.wake(emulated_mac(8), address, false).await.unwrap();
        waker.socket.send_to(b"garbage", address).await.unwrap();
        waker.wake(emulated_mac(7), address, false).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(5), listener.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(listener.ignored, 2);
    }
}
