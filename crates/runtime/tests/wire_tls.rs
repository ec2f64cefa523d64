//! The cluster wire under TLS against a process that does not know the secret but
//! sits on the path: a relay that binds a peer's address and passes bytes to another
//! peer, a replay of a recorded connection, a frame altered in flight, garbage, and a
//! process that claims another role than its certificate names. Each is refused and
//! counted, and no message of theirs reaches the receiver.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use somnus_core::cluster::{ClientId, Message, Peer};
mod common;

use common::{listener, next, nothing_received, refused};
use somnus_runtime::net::transport::{self, Identity, Inbound, WireCounters};
use somnus_types::ServerId;
use somnus_wire::ClusterSecret;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};

const MDS: Peer = Peer::Mds;
const CLIENT: Peer = Peer::Client(ClientId(7));

fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes([1; 32])
}

/// A listener of `peer` (2 s to authenticate).
async fn listener_of(
    peer: Peer,
) -> (SocketAddr, Arc<WireCounters>, mpsc::Receiver<Inbound>, tokio::task::JoinHandle<()>) {
    let mut identity = Identity::new(peer, secret()).unwrap();
    identity.handshake_timeout = Duration::from_secs(2);
    listener(identity).await
}

/// This cluster's client, to dial with.
fn dialer() -> Identity {
    Identity::new(CLIENT, secret()).unwrap()
}

/// A message the receiver would act on: the operator's kind of command.
fn command() -> Message {
    Message::EnterStandby
}

/// What a relay does to the bytes the dialer sends through it.
#[derive(Clone, Default)]
struct Relay {
    /// Every byte from the dialer, as passed on.
    recorded: Arc<Mutex<Vec<u8>>>,
    /// Once set, the next bytes from the dialer have their last bit flipped.
    alter: Arc<AtomicBool>,
    /// Once set, these bytes go upstream before the dialer's next ones.
    inject: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Relay {
    /// Listens on a port of its own and passes each connection's bytes to `to`, both
    /// ways, recording and (when told) altering the dialer's.
    async fn start(&self, to: SocketAddr) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let relay = self.clone();
        tokio::spawn(async move {
            while let Ok((dialer, _)) = listener.accept().await {
                let upstream = TcpStream::connect(to).await.unwrap();
                let (mut from_dialer, mut to_dialer) = dialer.into_split();
                let (mut from_upstream, mut to_upstream) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_upstream, &mut to_dialer).await;
                });
                let relay = relay.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    while let Ok(n) = from_dialer.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let injected = relay.inject.lock().await.take();
                        if let Some(frame) = injected {
                            let _ = to_upstream.write_all(&frame).await;
                        }
                        if relay.alter.swap(false, Ordering::AcqRel) {
                            buf[n - 1] ^= 1;
                        }
                        relay.recorded.lock().await.extend_from_slice(&buf[..n]);
                        if to_upstream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }
}

/// The attack the campaign found: a process without the secret binds server 3's
/// address while it is down and relays whoever dials it to the MDS. The dialer checks
/// the answering certificate before it proves itself: it meets the MDS's, not server
/// 3's, and gives up; the MDS accepts nobody, and nothing the relay sends is taken.
#[tokio::test]
async fn a_relay_to_another_peer_is_refused_by_the_dialer_before_it_shows_itself() {
    let (mds, counters, mut received, task) = listener_of(MDS).await;
    let relay = Relay::default();
    let at_server_3 = relay.start(mds).await;
    let dialer = dialer();
    let error =
        transport::connect(at_server_3, Peer::Server(ServerId(3)), &dialer).await.unwrap_err();
    assert_eq!(error.kind(), "tls", "{error}");
    assert!(error.to_string().contains("certificate"), "{error}");
    refused(&counters, "tls", 1).await;
    assert_eq!(counters.authenticated(), 0);
    assert!(received.try_recv().is_err());
    task.abort();
}

/// A relay on the path to the right peer passes a real session through; what it
/// recorded, replayed on a connection of its own, is refused, and nothing of it
/// reaches the receiver.
#[tokio::test]
async fn a_replayed_connection_is_refused() {
    let (mds, counters, mut received, task) = listener_of(MDS).await;
    let relay = Relay::default();
    let through = relay.start(mds).await;
    let dialer = dialer();
    let mut connection = transport::connect(through, MDS, &dialer).await.unwrap();
    connection.writer.send_message(&command()).await.unwrap();
    let first = next(&mut received).await;
    assert_eq!((first.from, first.message), (CLIENT, command()));
    drop(connection);

    let recorded = relay.recorded.lock().await.clone();
    assert!(recorded.len() > 500, "recorded {} bytes", recorded.len());
    let mut replay = TcpStream::connect(mds).await.unwrap();
    let _ = replay.write_all(&recorded).await;
    refused(&counters, "tls", 1).await;
    assert_eq!(counters.authenticated(), 1, "the replay was not authenticated");
    nothing_received(&mut received, "a replayed message").await;
    task.abort();
}

/// One bit of a frame flipped in flight after the handshake: the connection ends,
/// the altered message is not received, and the dialer's next connection works.
#[tokio::test]
async fn an_altered_frame_ends_the_connection_and_is_not_received() {
    let (mds, counters, mut received, task) = listener_of(MDS).await;
    let relay = Relay::default();
    let through = relay.start(mds).await;
    let dialer = dialer();
    let mut connection = transport::connect(through, MDS, &dialer).await.unwrap();
    relay.alter.store(true, Ordering::Release);
    connection.writer.send_message(&command()).await.unwrap();
    refused(&counters, "tls", 1).await;
    nothing_received(&mut received, "an altered message").await;

    let mut again = transport::connect(through, MDS, &dialer).await.unwrap();
    again.writer.send_message(&command()).await.unwrap();
    let inbound = next(&mut received).await;
    assert_eq!(inbound.message, command());
    task.abort();
}

/// What the campaign's relay did once it was on the path: a frame of its own (a
/// DeleteObject, well formed, its checksum right) put into an authenticated
/// connection. It is not a TLS record of the session: the connection ends, and
/// neither it nor the dialer's next message is received.
#[tokio::test]
async fn a_frame_injected_by_a_relay_is_not_received() {
    let (mds, counters, mut received, task) = listener_of(MDS).await;
    let relay = Relay::default();
    let through = relay.start(mds).await;
    let dialer = dialer();
    let mut connection = transport::connect(through, MDS, &dialer).await.unwrap();
    connection.writer.send_message(&command()).await.unwrap();
    let first = next(&mut received).await;
    assert_eq!(first.message, command());
    let delete = Message::DeleteObject { request: 1, name: "precious".into() };
    let mut frame = Vec::new();
    somnus_wire::encode_message(&delete, 1 << 20, somnus_wire::Guard::Sealed, &mut frame).unwrap();
    *relay.inject.lock().await = Some(frame);
    connection.writer.send_message(&command()).await.unwrap();
    refused(&counters, "tls", 1).await;
    nothing_received(&mut received, "a relay's frame").await;
    task.abort();
}

/// Bytes that are not TLS, a process of another cluster (another CA), and a process
/// of this cluster whose certificate names a client while it claims to be the MDS:
/// each refused and counted; then a rightful peer is served.
#[tokio::test]
async fn strangers_and_impostors_are_refused_by_the_acceptor() {
    let server = Peer::Server(ServerId(2));
    let (addr, counters, mut received, task) = listener_of(server).await;
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    let _ = garbage.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    refused(&counters, "tls", 1).await;

    let stranger = Identity::new(CLIENT, ClusterSecret::from_bytes([2; 32])).unwrap();
    let error = transport::connect(addr, server, &stranger).await.unwrap_err();
    assert_eq!(error.kind(), "tls", "{error}");
    refused(&counters, "tls", 2).await;

    // Its handshake ends at its end before the acceptor has checked the name; the
    // acceptor then closes the connection unread.
    let mut impostor = Identity::new(CLIENT, secret()).unwrap();
    impostor.peer = MDS;
    if let Ok(mut connection) = transport::connect(addr, server, &impostor).await {
        let _ = connection.writer.send_message(&command()).await;
    }
    refused(&counters, "wrong_peer", 1).await;
    nothing_received(&mut received, "an impostor's message").await;

    let rightful = Identity::new(CLIENT, secret()).unwrap();
    let mut connection = transport::connect(addr, server, &rightful).await.unwrap();
    connection.writer.send_message(&command()).await.unwrap();
    let inbound = next(&mut received).await;
    assert_eq!(inbound.from, CLIENT);
    assert_eq!(counters.authenticated(), 1);
    task.abort();
}

/// A peer that drops its connection (as every process does, without TLS's closing
/// message) ends it as a close: nothing is counted as refused.
#[tokio::test]
async fn a_connection_dropped_by_its_peer_is_no_refusal() {
    let (mds, counters, mut received, task) = listener_of(MDS).await;
    let dialer = dialer();
    for _ in 0..3 {
        let mut connection = transport::connect(mds, MDS, &dialer).await.unwrap();
        connection.writer.send_message(&command()).await.unwrap();
        next(&mut received).await;
        drop(connection);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused: Vec<_> = counters.refusals().filter(|(_, n)| *n > 0).collect();
    assert!(refused.is_empty(), "clean closes counted: {refused:?}");
    assert_eq!(counters.authenticated(), 3);
    task.abort();
}
