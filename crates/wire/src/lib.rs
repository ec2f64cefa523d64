//! The cluster protocol on the wire (docs/format/wire.md): the core's [`Message`] in
//! versioned, length-prefixed, checksummed frames, each with an optional attachment of
//! raw bytes (a write's or a read's data), and the handshake by which two processes
//! prove to each other that they know the cluster's secret before either processes a
//! message.
//!
//! This crate is sans-IO, like the core: it turns frames into bytes and bytes into
//! frames, and steps a handshake on the frames it is given; the runtime owns the
//! sockets. Bytes from a peer are untrusted: every malformed, oversized, truncated or
//! tampered frame is a [`WireError`] that names what is wrong, never a panic
//! (`fuzz/` drives the decoder with arbitrary bytes).

mod frame;
mod handshake;
mod secret;

pub use frame::{
    Decoded, FRAME_BYTES_MAX_DEFAULT, FrameDecoder, Guard, HEADER_BYTES, WIRE_VERSION, WireError,
    append_payloads, encode, encode_message, encode_message_parts, fill_payloads,
};
pub use handshake::{AuthError, Handshake, Side, Step};
pub use secret::{ClusterSecret, SECRET_BYTES, SecretError};

use somnus_core::cluster::{Message, Peer};

/// What a frame carries.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Frame {
    /// The first frame each side sends: who it is, and a fresh nonce the other side's
    /// proof must cover.
    Hello(Hello),
    /// The second: proof that the sender knows the cluster's secret.
    Proof(Proof),
    /// A protocol message, once both sides are authenticated.
    Message(Message),
}

impl Frame {
    /// The frame's kind, for errors and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "hello",
            Frame::Proof(_) => "proof",
            Frame::Message(_) => "message",
        }
    }
}

/// Bytes of a handshake nonce.
pub const NONCE_BYTES: usize = 32;

/// The largest frame a peer may send before it is authenticated: a `Hello` or a
/// `Proof` takes well under this, so a stranger makes the receiver buffer no more.
pub const HANDSHAKE_FRAME_BYTES_MAX: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    /// The role and id the sender speaks as.
    pub peer: Peer,
    /// Drawn at random for this connection, by the shell (the crate draws nothing).
    pub nonce: [u8; NONCE_BYTES],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Proof {
    /// The keyed hash of the handshake's transcript under the cluster's secret.
    pub mac: [u8; 32],
}

#[cfg(any(test, feature = "samples"))]
pub mod samples;

#[cfg(test)]
mod tests;
