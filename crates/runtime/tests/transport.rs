//! The transport over real loopback sockets: an authenticated peer's messages arrive;
//! garbage, truncated, oversized, unauthenticated and wrong-secret connections are
//! refused and counted by kind, and the listener goes on serving. Frames meet the
//! decoder first on the plain wire; on TLS (the default) garbage meets TLS first
//! (`wire_tls.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers may panic.

use std::sync::Arc;
use std::time::Duration;

use somnus_core::cluster::{ChunkId, ChunkIndex, ClientId, Epoch, Message, Payload, Peer, Stamp};
mod common;

use common::{PATIENCE, listener, refused};
use somnus_runtime::cluster_file::Wire;
use somnus_runtime::net::transport::{self, Identity, Inbound};
use somnus_types::{ByteRange, ChunkGroupId, ObjectId, ServerId};
use somnus_wire::{ClusterSecret, Frame, Hello};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

fn secret(byte: u8) -> ClusterSecret {
    ClusterSecret::from_bytes([byte; 32])
}

fn server_identity(wire: Wire) -> Identity {
    let mut identity = Identity::on(wire, Peer::Server(ServerId(2)), secret(1)).unwrap();
    identity.frame_bytes_max = 1 << 20;
    identity.handshake_timeout = Duration::from_millis(500);
    identity
}

const SERVER: Peer = Peer::Server(ServerId(2));

/// A client's write of `data`: a message with a payload.
fn write_of(request: u64, data: Vec<u8>) -> Message {
    let chunk = ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) };
    Message::ClientWrite {
        request,
        group: ChunkGroupId(0),
        epoch: Epoch(1),
        chunk,
        range: ByteRange::new(0, data.len() as u64),
        stamp: Stamp(request),
        data: Payload::new(data.into()),
    }
}

/// Connects as a client, sends one message with a payload, and checks it arrives.
async fn round_trip(
    wire: Wire,
    addr: std::net::SocketAddr,
    received: &mut mpsc::Receiver<Inbound>,
    n: u32,
) {
    let identity = Identity::on(wire, Peer::Client(ClientId(n)), secret(1)).unwrap();
    let mut connection = transport::connect(addr, SERVER, &identity).await.unwrap();
    assert_eq!(connection.peer, Peer::Server(ServerId(2)));
    let message = write_of(n.into(), vec![n as u8; 4096]);
    connection.writer.send_message(&message).await.unwrap();
    let inbound = tokio::time::timeout(PATIENCE, received.recv()).await.unwrap().unwrap();
    assert_eq!(inbound.from, Peer::Client(ClientId(n)));
    // Equal messages carry equal payloads: the bytes came through the attachment.
    assert_eq!(inbound.message, message);
}

/// A raw connection that writes `bytes` and then closes its sending side.
async fn send_raw(addr: std::net::SocketAddr, bytes: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The listener may refuse and close before every byte is written.
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
}

fn frame(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    somnus_wire::encode(frame, 1 << 20, somnus_wire::Guard::Checksum, &mut out).unwrap();
    out
}

#[tokio::test]
async fn bad_connections_are_refused_and_counted_and_the_listener_keeps_serving() {
    let plain = Wire::Plain;
    let (addr, counters, mut received, task) = listener(server_identity(plain)).await;
    round_trip(plain, addr, &mut received, 1).await;

    // An HTTP request: its first four bytes read as a length of half a gigabyte.
    send_raw(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    refused(&counters, "oversized", 1).await;
    round_trip(plain, addr, &mut received, 2).await;

    // A plausible length, then bytes whose checksum does not match.
    send_raw(
        addr,
        &[
            20,
            0,
            0,
            0,
            somnus_wire::WIRE_VERSION,
            9,
            9,
            9,
            9,
            0,
            0,
            0,
            0,
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            10,
            11,
        ],
    )
    .await;
    refused(&counters, "bad_checksum", 1).await;

    // A length shorter than a header.
    send_raw(addr, &[2, 0, 0, 0, 1, 2]).await;
    refused(&counters, "malformed", 1).await;

    // A hello cut short by the connection's end.
    let hello = frame(&Frame::Hello(Hello { peer: Peer::Client(ClientId(9)), nonce: [4; 32] }));
    send_raw(addr, &hello[..hello.len() - 3]).await;
    refused(&counters, "truncated", 1).await;

    // A message before any handshake.
    send_raw(addr, &frame(&Frame::Message(Message::EnterStandby))).await;
    refused(&counters, "unexpected_frame", 1).await;

    // A process of another cluster: it fails at its end too.
    let stranger = Identity::on(plain, Peer::Client(ClientId(5)), secret(2)).unwrap();
    let error = transport::connect(addr, SERVER, &stranger).await.unwrap_err();
    assert_eq!(error.kind(), "wrong_secret", "{error}");
    refused(&counters, "wrong_secret", 1).await;

    // A connection that says nothing: refused when its time to authenticate is up.
    let silent = TcpStream::connect(addr).await.unwrap();
    refused(&counters, "handshake_timeout", 1).await;
    drop(silent);

    // After all of it, still serving; no refused peer's message reached the inbox.
    round_trip(plain, addr, &mut received, 3).await;
    assert_eq!(counters.authenticated(), 3);
    assert!(received.try_recv().is_err());
    task.abort();
}

#[tokio::test]
async fn a_frame_over_the_limit_after_the_handshake_ends_the_connection() {
    let (addr, counters, mut received, task) = listener(server_identity(Wire::Tls)).await;
    let identity = Identity::new(Peer::Client(ClientId(1)), secret(1)).unwrap();
    let mut connection = transport::connect(addr, SERVER, &identity).await.unwrap();
    // The client's own limit (16 MiB) lets it send what the server's (1 MiB) refuses.
    connection.writer.send_message(&write_of(1, vec![7u8; 2 << 20])).await.ok();
    refused(&counters, "oversized", 1).await;
    assert!(received.try_recv().is_err());
    round_trip(Wire::Tls, addr, &mut received, 2).await;
    task.abort();
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_and_counted() {
    let mut identity = server_identity(Wire::Tls);
    identity.connections_max = 2;
    identity.handshake_timeout = Duration::from_secs(5);
    let (addr, counters, _received, task) = listener(identity).await;
    // Two silent connections hold both slots while they handshake.
    let _held = [TcpStream::connect(addr).await.unwrap(), TcpStream::connect(addr).await.unwrap()];
    let _third = TcpStream::connect(addr).await.unwrap();
    refused(&counters, "too_many", 1).await;
    task.abort();
}

/// Before the handshake a stranger gets room for one handshake frame: a length over
/// it is refused as oversized before any of the frame is read, however much the
/// authenticated limit allows.
#[tokio::test]
async fn a_stranger_cannot_make_the_receiver_buffer_a_large_frame() {
    let plain = Wire::Plain;
    let (addr, counters, mut received, task) = listener(server_identity(plain)).await;
    // A length within the authenticated limit (1 MiB), never within a handshake's.
    let mut bytes = ((1u32 << 20) - 64).to_le_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 64 << 10));
    send_raw(addr, &bytes).await;
    refused(&counters, "oversized", 1).await;
    round_trip(plain, addr, &mut received, 1).await;
    task.abort();
}

/// After the handshake, large frames are read only within the process's inbound
/// room: with room for 2 MiB, a third 900 KiB write is not read off the socket until
/// the receiver takes one of the first two.
#[tokio::test]
async fn large_frames_wait_for_room_until_the_receiver_takes_one() {
    let mut identity = server_identity(Wire::Tls);
    identity.inbound_room = Arc::new(tokio::sync::Semaphore::new(2 << 10));
    let (addr, _counters, mut received, task) = listener(identity).await;
    let client = Identity::new(Peer::Client(ClientId(7)), secret(1)).unwrap();
    let mut connection = transport::connect(addr, SERVER, &client).await.unwrap();
    let writer = tokio::spawn(async move {
        for request in 1..=3u64 {
            let message = write_of(request, vec![request as u8; 900 << 10]);
            connection.writer.send_message(&message).await.unwrap();
        }
        connection
    });
    // The first two arrive; the third waits for room, however long.
    let mut first = Vec::new();
    for _ in 0..2 {
        first.push(tokio::time::timeout(PATIENCE, received.recv()).await.unwrap().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(received.try_recv().is_err(), "a third large frame was read without room");
    // Taken apart, the first gives its room back: the third is read.
    let Inbound { message, .. } = first.remove(0);
    drop(message);
    let third = tokio::time::timeout(PATIENCE, received.recv()).await.unwrap().unwrap();
    assert!(matches!(third.message, Message::ClientWrite { request: 3, .. }));
    let _connection = writer.await.unwrap();
    task.abort();
}
