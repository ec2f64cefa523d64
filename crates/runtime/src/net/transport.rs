//! Connections between somnus processes: TCP streams of wire frames
//! (docs/format/wire.md) inside TLS 1.3 (`tls`), each end proving by certificate that
//! it is the peer it says, then by the handshake of frames that it knows the cluster's
//! secret, before a message passes. A connection that sends anything else is refused,
//! counted by why, and closed; the listener goes on serving the others.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use somnus_core::cluster::{Message, Payload, Peer};
use somnus_wire::{
    ClusterSecret, Decoded, FRAME_BYTES_MAX_DEFAULT, Frame, FrameDecoder, Guard,
    HANDSHAKE_FRAME_BYTES_MAX, Handshake, Hello, NONCE_BYTES, Side, Step, WireError,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::cluster_file::Wire;
use crate::net::tls::{self, TlsError, WireTls};

/// Who this process is on the wire, and the limits it holds its peers to.
#[derive(Clone, Debug)]
pub struct Identity {
    pub peer: Peer,
    pub secret: ClusterSecret,
    /// Frames over this many bytes are refused (and never sent).
    pub frame_bytes_max: usize,
    /// Time a peer has to connect and finish the handshake.
    pub handshake_timeout: Duration,
    /// Connections served at once; more are closed at once and counted.
    pub connections_max: usize,
    /// Room for the frames of authenticated peers received and not yet taken by the
    /// state machine, in KiB, shared by every connection of the process: a reader
    /// waits for room before it reads a large frame (TCP then slows its sender).
    pub inbound_room: Arc<Semaphore>,
    /// TLS on every connection; `None` on a cluster whose file says `wire = "plain"`.
    pub tls: Option<Arc<WireTls>>,
}

/// The process's room for inbound frames by default (in KiB: 256 MiB).
pub const INBOUND_ROOM_KIB: usize = 256 << 10;

/// Frames up to this size are read without waiting for room (a heartbeat, a request
/// without data): a reader holds at most one at a time.
const ROOM_FREE_BYTES: usize = 64 << 10;

impl Identity {
    /// What guards frames on this process's connections: TLS's records when it has
    /// TLS (their AEAD tags make a frame checksum redundant), else the checksum.
    pub fn guard(&self) -> Guard {
        if self.tls.is_some() { Guard::Sealed } else { Guard::Checksum }
    }

    /// The defaults: TLS, 16 MiB frames, 5 s to authenticate, 4096 connections.
    pub fn new(peer: Peer, secret: ClusterSecret) -> Result<Identity, TlsError> {
        Identity::on(Wire::Tls, peer, secret)
    }

    /// The defaults on `wire`.
    pub fn on(wire: Wire, peer: Peer, secret: ClusterSecret) -> Result<Identity, TlsError> {
        let tls = match wire {
            Wire::Tls => Some(Arc::new(WireTls::new(&secret, peer)?)),
            Wire::Plain => None,
        };
        Ok(Identity {
            peer,
            secret,
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            handshake_timeout: Duration::from_secs(5),
            connections_max: 4096,
            inbound_room: Arc::new(Semaphore::new(INBOUND_ROOM_KIB)),
            tls,
        })
    }
}

/// Why a connection ended or was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the peer did not finish the handshake within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("the peer closed the connection before the handshake finished")]
    ClosedEarly,
    #[error("{limit} connections are open already")]
    TooMany { limit: usize },
    #[error("no fresh nonce from the operating system: {0}")]
    Entropy(String),
    #[error("TLS: {0}")]
    Tls(std::io::Error),
    #[error("the peer is {got:?}, not {expected:?} (its certificate or its handshake says so)")]
    WrongPeer { expected: Option<Peer>, got: Peer },
}

/// Every kind of refusal a listener counts, as `ConnError::kind` names them.
pub const REFUSAL_KINDS: [&str; 15] = [
    "oversized",
    "malformed",
    "unknown_version",
    "bad_checksum",
    "truncated",
    "wrong_secret",
    "unexpected_frame",
    "reflected",
    "handshake_timeout",
    "closed_early",
    "too_many",
    "io",
    "entropy",
    "tls",
    "wrong_peer",
];

impl ConnError {
    /// A read's error: TLS's (a record that does not decrypt: altered, replayed or
    /// not TLS) or the socket's.
    fn from_read(error: std::io::Error) -> ConnError {
        if error.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
            ConnError::Tls(error)
        } else {
            ConnError::Io(error)
        }
    }

    /// A short, stable name for counters and metrics labels: one of `REFUSAL_KINDS`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnError::Wire(error) => error.kind(),
            ConnError::Io(_) => "io",
            ConnError::HandshakeTimeout(_) => "handshake_timeout",
            ConnError::ClosedEarly => "closed_early",
            ConnError::TooMany { .. } => "too_many",
            ConnError::Entropy(_) => "entropy",
            ConnError::Tls(_) => "tls",
            ConnError::WrongPeer { .. } => "wrong_peer",
        }
    }
}

/// What a listener saw: connections authenticated, and refusals by kind.
#[derive(Debug, Default)]
pub struct WireCounters {
    authenticated: AtomicU64,
    refused: [AtomicU64; REFUSAL_KINDS.len()],
    frames_in: AtomicU64,
    bytes_in: AtomicU64,
    /// Frames sent on authenticated connections.
    pub frames_out: AtomicU64,
    /// Messages dropped because their peer could not be reached.
    dropped: AtomicU64,
    /// Messages dropped because their peer's queue was full (`net::QUEUE_BYTES_MAX`).
    queue_full: AtomicU64,
}

impl WireCounters {
    pub fn count_refused(&self, error: &ConnError) {
        let kind = error.kind();
        if let Some(at) = REFUSAL_KINDS.iter().position(|k| *k == kind) {
            self.refused[at].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages dropped because their peer could not be reached.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn count_queue_full(&self) {
        self.queue_full.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages dropped because their peer's queue was full.
    pub fn queue_full(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
    }

    pub fn authenticated(&self) -> u64 {
        self.authenticated.load(Ordering::Relaxed)
    }

    /// Refusals of `kind` so far.
    pub fn refused(&self, kind: &str) -> u64 {
        REFUSAL_KINDS
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |at| self.refused[at].load(Ordering::Relaxed))
    }

    /// Every kind with its count, in `REFUSAL_KINDS` order.
    pub fn refusals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        REFUSAL_KINDS.iter().zip(&self.refused).map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
    }

    /// Frames and their bytes received on authenticated connections.
    pub fn frames_in(&self) -> (u64, u64) {
        (self.frames_in.load(Ordering::Relaxed), self.bytes_in.load(Ordering::Relaxed))
    }
}

/// The reading half of a connection: whole frames out of the byte stream. Before
/// the peer is authenticated it buffers one handshake frame at most
/// (`HANDSHAKE_FRAME_BYTES_MAX`); after, a frame over `ROOM_FREE_BYTES` is read once
/// the process's inbound room has its size, held until the state machine takes it.
pub struct FrameReader {
    read: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
    decoder: FrameDecoder,
    /// None before authentication.
    room: Option<Arc<Semaphore>>,
    held: Option<OwnedSemaphorePermit>,
}

impl FrameReader {
    /// The next frame; `None` when the peer closed the connection between frames.
    pub async fn next(&mut self) -> Result<Option<Decoded>, ConnError> {
        loop {
            if let (Some(room), None) = (&self.room, &self.held)
                && let Some(bytes) = self.decoder.pending_bytes(&self.buf)?
                && bytes > ROOM_FREE_BYTES
            {
                let kib = bytes.div_ceil(1024).min(INBOUND_ROOM_KIB) as u32;
                let permit = room.clone().acquire_many_owned(kib).await;
                self.held = Some(permit.map_err(|_| ConnError::ClosedEarly)?);
            }
            if let Some(decoded) = self.decoder.decode(&mut self.buf)? {
                return Ok(Some(decoded));
            }
            if self.buf.capacity() == self.buf.len() {
                let step = if self.room.is_some() { 64 << 10 } else { HANDSHAKE_FRAME_BYTES_MAX };
                self.buf.reserve(step);
            }
            let read = match self.read.read_buf(&mut self.buf).await {
                Ok(read) => read,
                // A peer that closes its end without TLS's closing message (every
                // process, when it drops a connection) ends it as a close would.
                Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => 0,
                Err(error) => return Err(ConnError::from_read(error)),
            };
            if read == 0 {
                self.decoder.at_end(&self.buf)?;
                return Ok(None);
            }
        }
    }

    /// The room the last frame took, given with it to whoever holds the frame.
    pub fn take_room(&mut self) -> Option<OwnedSemaphorePermit> {
        self.held.take()
    }

    /// The peer is authenticated: frames up to `frame_bytes_max`, within `room`.
    fn authenticated(&mut self, frame_bytes_max: usize, guard: Guard, room: Arc<Semaphore>) {
        self.decoder = FrameDecoder::new(frame_bytes_max, guard);
        self.room = Some(room);
    }
}

impl std::fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameReader").field("buffered", &self.buf.len()).finish_non_exhaustive()
    }
}

/// Payload bytes from which a message's payloads are written from where they are
/// rather than copied into the frame's buffer first.
const SEND_APART_FROM_BYTES: usize = 64 << 10;

/// The writing half of a connection.
pub struct FrameWriter {
    write: Box<dyn AsyncWrite + Send + Unpin>,
    out: Vec<u8>,
    max: usize,
    guard: Guard,
}

impl FrameWriter {
    pub async fn send(&mut self, frame: &Frame) -> Result<(), ConnError> {
        self.out.clear();
        somnus_wire::encode(frame, self.max, self.guard, &mut self.out)?;
        self.flush_out().await
    }

    /// Sends `message`, its payloads as the frame's attachment: copied after the
    /// body when small (one write), sent from where they are when large (one
    /// vectored write, no copy of a megabyte).
    pub async fn send_message(&mut self, message: &Message) -> Result<(), ConnError> {
        self.out.clear();
        let attached: usize = Payload::total_bytes(&message.payloads());
        if attached < SEND_APART_FROM_BYTES {
            somnus_wire::encode_message(message, self.max, self.guard, &mut self.out)?;
            return self.flush_out().await;
        }
        let parts =
            somnus_wire::encode_message_parts(message, self.max, self.guard, &mut self.out)?;
        let mut slices: Vec<IoSlice<'_>> = std::iter::once(&self.out[..])
            .chain(parts.iter().map(|part| &part[..]))
            .map(IoSlice::new)
            .collect();
        let mut slices = &mut slices[..];
        while !slices.is_empty() {
            let written = self.write.write_vectored(slices).await?;
            if written == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
            }
            IoSlice::advance_slices(&mut slices, written);
        }
        // TLS holds records until flushed.
        self.write.flush().await?;
        Ok(())
    }

    /// Writes the frame encoded in `out`.
    async fn flush_out(&mut self) -> Result<(), ConnError> {
        self.write.write_all(&self.out).await?;
        self.write.flush().await?;
        Ok(())
    }
}

impl std::fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameWriter").field("max", &self.max).finish_non_exhaustive()
    }
}

/// An authenticated connection: the peer proved it knows the cluster's secret.
#[derive(Debug)]
pub struct Connection {
    pub peer: Peer,
    pub reader: FrameReader,
    pub writer: FrameWriter,
}

/// A message received from an authenticated peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbound {
    pub from: Peer,
    /// With its payloads, from the frame's attachment.
    pub message: Message,
    /// The inbound room its frame took, given back when the receiver takes it apart.
    pub room: Room,
}

/// Room held in the process's inbound budget (none for a small frame).
#[derive(Debug, Default)]
pub struct Room(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Clone for Room {
    /// A copy holds no room (tests clone what they received).
    fn clone(&self) -> Room {
        Room(None)
    }
}

impl PartialEq for Room {
    fn eq(&self, _: &Room) -> bool {
        true
    }
}

impl Eq for Room {}

/// Connects to `peer` at `addr` and authenticates both ways, all within the
/// handshake timeout; an answer from any other peer is refused before this side shows
/// who it is.
pub async fn connect(
    addr: SocketAddr,
    peer: Peer,
    identity: &Identity,
) -> Result<Connection, ConnError> {
    let attempt = async {
        let stream = TcpStream::connect(addr).await?;
        handshake(stream, identity, Some(peer)).await
    };
    tokio::time::timeout(identity.handshake_timeout, attempt)
        .await
        .map_err(|_| ConnError::HandshakeTimeout(identity.handshake_timeout))?
}

/// Authenticates a connection a listener accepted, within the handshake timeout.
pub async fn accept(stream: TcpStream, identity: &Identity) -> Result<Connection, ConnError> {
    tokio::time::timeout(identity.handshake_timeout, handshake(stream, identity, None))
        .await
        .map_err(|_| ConnError::HandshakeTimeout(identity.handshake_timeout))?
}

/// Authenticates a connection: as the dialer of `dialed`, or as the acceptor (`None`).
async fn handshake(
    stream: TcpStream,
    identity: &Identity,
    dialed: Option<Peer>,
) -> Result<Connection, ConnError> {
    stream.set_nodelay(true)?;
    let side = if dialed.is_some() { Side::Initiator } else { Side::Acceptor };
    let (read, write, certificate) = secure(stream, identity, dialed).await?;
    // A stranger gets room for one handshake frame, nothing more.
    let mut reader = FrameReader {
        read,
        buf: BytesMut::with_capacity(HANDSHAKE_FRAME_BYTES_MAX),
        decoder: FrameDecoder::new(HANDSHAKE_FRAME_BYTES_MAX, identity.guard()),
        room: None,
        held: None,
    };
    let mut writer = FrameWriter {
        write,
        out: Vec::new(),
        max: identity.frame_bytes_max,
        guard: identity.guard(),
    };
    let own = Hello { peer: identity.peer, nonce: fresh_nonce()? };
    let (mut handshake, hello) = Handshake::start(identity.secret.clone(), side, own);
    writer.send(&hello).await?;
    loop {
        let Some(decoded) = reader.next().await? else { return Err(ConnError::ClosedEarly) };
        match handshake.receive(decoded.frame).map_err(WireError::from)? {
            Step::Send(frame) => writer.send(&frame).await?,
            Step::Authenticated(peer) => {
                let named = certificate.as_ref().is_none_or(|c| tls::names(c, peer));
                if dialed.is_some_and(|dialed| dialed != peer) || !named {
                    return Err(ConnError::WrongPeer { expected: dialed, got: peer });
                }
                let room = identity.inbound_room.clone();
                reader.authenticated(identity.frame_bytes_max, identity.guard(), room);
                return Ok(Connection { peer, reader, writer });
            }
        }
    }
}

type Halves = (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
    Option<rustls::pki_types::CertificateDer<'static>>,
);

/// The connection's TLS session, if the identity has TLS: as the dialer, with the
/// answering end's certificate checked to name `dialed`; as the acceptor, with the
/// dialer's certificate (checked to be the cluster CA's) returned to be checked
/// against the peer it then claims.
async fn secure(
    stream: TcpStream,
    identity: &Identity,
    dialed: Option<Peer>,
) -> Result<Halves, ConnError> {
    let Some(tls) = &identity.tls else {
        let (read, write) = stream.into_split();
        return Ok((Box::new(read), Box::new(write), None));
    };
    match dialed {
        Some(peer) => {
            let connector = tokio_rustls::TlsConnector::from(tls.client.clone());
            let name =
                tls::peer_name(peer).map_err(|e| ConnError::Tls(std::io::Error::other(e)))?;
            let stream = connector.connect(name, stream).await.map_err(ConnError::Tls)?;
            let (read, write) = tokio::io::split(stream);
            Ok((Box::new(read), Box::new(write), None))
        }
        None => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.server.clone());
            let stream = acceptor.accept(stream).await.map_err(ConnError::Tls)?;
            let certificate = stream.get_ref().1.peer_certificates().and_then(|c| c.first());
            let certificate = certificate.map(|c| c.clone().into_owned());
            if certificate.is_none() {
                let refused = std::io::Error::other("the peer showed no certificate");
                return Err(ConnError::Tls(refused));
            }
            let (read, write) = tokio::io::split(stream);
            Ok((Box::new(read), Box::new(write), certificate))
        }
    }
}

fn fresh_nonce() -> Result<[u8; NONCE_BYTES], ConnError> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|error| ConnError::Entropy(error.to_string()))?;
    Ok(nonce)
}

/// Accepts connections on `listener` until the task is dropped, authenticates each,
/// and hands the authenticated ones to `on_connection`; refusals are counted.
pub async fn serve<F>(
    listener: TcpListener,
    identity: Arc<Identity>,
    counters: Arc<WireCounters>,
    on_connection: F,
) where
    F: Fn(Connection) + Send + Sync + 'static,
{
    let on_connection = Arc::new(on_connection);
    let slots = Arc::new(Semaphore::new(identity.connections_max));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, most likely: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            counters.count_refused(&ConnError::TooMany { limit: identity.connections_max });
            drop(stream);
            continue;
        };
        let (identity, counters, on_connection) =
            (identity.clone(), counters.clone(), on_connection.clone());
        tokio::spawn(async move {
            match accept(stream, &identity).await {
                Ok(connection) => {
                    counters.authenticated.fetch_add(1, Ordering::Relaxed);
                    on_connection(connection);
                }
                Err(error) => counters.count_refused(&error),
            }
            drop(slot);
        });
    }
}

/// Reads `reader`'s frames into `inbox` until the peer closes the connection, sends
/// a bad frame, or the inbox is gone; how it ended is counted.
pub async fn pump(
    mut reader: FrameReader,
    from: Peer,
    inbox: mpsc::Sender<Inbound>,
    counters: Arc<WireCounters>,
) {
    loop {
        let decoded = match reader.next().await {
            Ok(Some(decoded)) => decoded,
            Ok(None) => return,
            Err(error) => return counters.count_refused(&error),
        };
        counters.frames_in.fetch_add(1, Ordering::Relaxed);
        counters.bytes_in.fetch_add(decoded.wire_bytes as u64, Ordering::Relaxed);
        let Frame::Message(message) = decoded.frame else {
            let unexpected = WireError::Auth(somnus_wire::AuthError::Unexpected {
                expected: "message",
                got: decoded.frame.kind(),
            });
            return counters.count_refused(&ConnError::Wire(unexpected));
        };
        let inbound = Inbound { from, message, room: Room(reader.take_room()) };
        if inbox.send(inbound).await.is_err() {
            return;
        }
    }
}
