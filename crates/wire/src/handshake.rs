//! Mutual authentication by the cluster's secret, before any message is processed.
//!
//! Each side sends a `Hello` (its role and a fresh nonce), then, once it has the
//! other's, a `Proof`: the keyed BLAKE3 hash, under the secret, of a transcript that
//! names the sender's side and both hellos. A side accepts the other once the proof it
//! received matches the one it computes for it. The nonces make every proof good for
//! one connection only (a recorded proof cannot be replayed), and the side label
//! makes a proof useless in the other direction (a peer cannot reflect ours back).
//! The handshake authenticates a connection's start; it neither hides nor protects
//! the frames after it: the runtime runs it inside TLS (docs/format/wire.md, "TLS").

use somnus_core::cluster::Peer;

use crate::secret::ClusterSecret;
use crate::{Frame, Hello, Proof};

/// Which end of the connection a handshake runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The end that connected.
    Initiator,
    /// The end that accepted.
    Acceptor,
}

impl Side {
    fn label(self) -> u8 {
        match self {
            Side::Initiator => b'I',
            Side::Acceptor => b'A',
        }
    }

    fn other(self) -> Side {
        match self {
            Side::Initiator => Side::Acceptor,
            Side::Acceptor => Side::Initiator,
        }
    }
}

/// Why a handshake failed; the connection is closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error(
        "the peer's proof does not match this cluster's secret (another cluster's process, or a wrong secret file)"
    )]
    WrongSecret,
    #[error("expected a {expected} frame, got a {got} frame")]
    Unexpected { expected: &'static str, got: &'static str },
    #[error("the peer sent this side's own nonce back")]
    Reflected,
}

impl AuthError {
    /// A short, stable name for counters and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            AuthError::WrongSecret => "wrong_secret",
            AuthError::Unexpected { .. } => "unexpected_frame",
            AuthError::Reflected => "reflected",
        }
    }
}

/// What to do after a frame of the handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send this frame to the peer.
    Send(Frame),
    /// The peer proved it knows the secret: it speaks as this role from now on.
    Authenticated(Peer),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitProof,
    Done,
}

/// One side's handshake: feed it the peer's frames until it says `Authenticated`.
#[derive(Debug)]
pub struct Handshake {
    secret: ClusterSecret,
    side: Side,
    own: Hello,
    peer: Option<Hello>,
    state: State,
}

impl Handshake {
    /// Starts a handshake; the frame returned (our hello) goes out first.
    pub fn start(secret: ClusterSecret, side: Side, own: Hello) -> (Handshake, Frame) {
        let handshake = Handshake { secret, side, own, peer: None, state: State::AwaitHello };
        (handshake, Frame::Hello(own))
    }

    pub fn receive(&mut self, frame: Frame) -> Result<Step, AuthError> {
        match (self.state, frame) {
            (State::AwaitHello, Frame::Hello(peer)) => {
                if peer.nonce == self.own.nonce {
                    return Err(AuthError::Reflected);
                }
                self.peer = Some(peer);
                self.state = State::AwaitProof;
                let mac = self.mac(self.side, &self.own, &peer);
                Ok(Step::Send(Frame::Proof(Proof { mac })))
            }
            (State::AwaitProof, Frame::Proof(proof)) => {
                let Some(peer) = self.peer else {
                    return Err(AuthError::Unexpected { expected: "hello", got: "proof" });
                };
                let expected = blake3::Hash::from(self.mac(self.side.other(), &peer, &self.own));
                // `blake3::Hash`'s equality runs in constant time.
                if expected != blake3::Hash::from(proof.mac) {
                    return Err(AuthError::WrongSecret);
                }
                self.state = State::Done;
                Ok(Step::Authenticated(peer.peer))
            }
            (state, frame) => Err(AuthError::Unexpected {
                expected: match state {
                    State::AwaitHello => "hello",
                    State::AwaitProof => "proof",
                    State::Done => "no further handshake",
                },
                got: frame.kind(),
            }),
        }
    }

    /// The proof the `sender` side owes: its hello, then the receiver's, under the key.
    fn mac(&self, sender: Side, from: &Hello, to: &Hello) -> [u8; 32] {
        let mut transcript = Vec::with_capacity(128);
        transcript.extend_from_slice(b"somnus wire v1 proof");
        transcript.push(sender.label());
        for hello in [from, to] {
            transcript.extend_from_slice(&peer_bytes(hello.peer));
            transcript.extend_from_slice(&hello.nonce);
        }
        *blake3::keyed_hash(self.secret.key(), &transcript).as_bytes()
    }
}

/// A role as five bytes: a tag and the id.
fn peer_bytes(peer: Peer) -> [u8; 5] {
    let (tag, id) = match peer {
        Peer::Mds => (0u8, 0u32),
        Peer::Server(server) => (1, server.0),
        Peer::Client(client) => (2, client.0),
    };
    let mut bytes = [tag, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&id.to_le_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use somnus_core::cluster::ClientId;
    use somnus_types::ServerId;

    use super::*;

    fn secret(byte: u8) -> ClusterSecret {
        ClusterSecret::from_bytes([byte; 32])
    }

    fn hello(peer: Peer, nonce: u8) -> Hello {
        Hello { peer, nonce: [nonce; 32] }
    }

    /// Runs both sides to the end; what each concluded.
    fn run(
        initiator_secret: ClusterSecret,
        acceptor_secret: ClusterSecret,
    ) -> (Result<Step, AuthError>, Result<Step, AuthError>) {
        let (mut client, client_hello) = Handshake::start(
            initiator_secret,
            Side::Initiator,
            hello(Peer::Client(ClientId(7)), 1),
        );
        let (mut server, server_hello) =
            Handshake::start(acceptor_secret, Side::Acceptor, hello(Peer::Server(ServerId(3)), 2));
        let Ok(Step::Send(client_proof)) = client.receive(server_hello) else { panic!() };
        let Ok(Step::Send(server_proof)) = server.receive(client_hello) else { panic!() };
        (client.receive(server_proof), server.receive(client_proof))
    }

    #[test]
    fn two_sides_that_know_the_secret_learn_each_others_role() {
        let (client, server) = run(secret(9), secret(9));
        assert_eq!(client, Ok(Step::Authenticated(Peer::Server(ServerId(3)))));
        assert_eq!(server, Ok(Step::Authenticated(Peer::Client(ClientId(7)))));
    }

    #[test]
    fn a_wrong_secret_is_refused_at_both_ends() {
        let (client, server) = run(secret(9), secret(8));
        assert_eq!(client, Err(AuthError::WrongSecret));
        assert_eq!(server, Err(AuthError::WrongSecret));
    }

    #[test]
    fn a_message_before_the_proof_is_refused() {
        let (mut server, _) =
            Handshake::start(secret(1), Side::Acceptor, hello(Peer::Server(ServerId(0)), 2));
        let refused = server.receive(Frame::Message(somnus_core::cluster::Message::EnterStandby));
        assert_eq!(refused, Err(AuthError::Unexpected { expected: "hello", got: "message" }));
    }

    #[test]
    fn a_proof_reflected_or_replayed_does_not_authenticate() {
        // Reflection: the acceptor's own hello and proof sent back to it.
        let (mut server, server_hello) =
            Handshake::start(secret(5), Side::Acceptor, hello(Peer::Mds, 4));
        assert_eq!(server.receive(server_hello), Err(AuthError::Reflected));

        // Replay: a client's proof made for an acceptor whose nonce was 4, sent on a
        // connection whose acceptor drew 8.
        let (mut client, client_hello) =
            Handshake::start(secret(5), Side::Initiator, hello(Peer::Client(ClientId(1)), 6));
        let Ok(Step::Send(recorded)) = client.receive(Frame::Hello(hello(Peer::Mds, 4))) else {
            panic!("the client answers a hello with its proof")
        };
        let (mut second, _) = Handshake::start(secret(5), Side::Acceptor, hello(Peer::Mds, 8));
        second.receive(client_hello).unwrap();
        assert_eq!(second.receive(recorded), Err(AuthError::WrongSecret));
    }
}
