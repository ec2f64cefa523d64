//! The frame decoder and the handshake on bytes a coverage-guided fuzzer chooses, as a
//! peer's socket would deliver them: cut into reads at the sizes the input's first
//! byte picks, then every decoded frame fed to an acceptor's handshake. Nothing may
//! panic; a frame that decodes must encode and decode again to the same frame.
//!
//! A checksum stops almost every mutated frame before its body is read, so when the
//! first byte's top bit is set the rest of the input is taken as one frame's body and
//! attachment, given a correct header: that mode fuzzes the body's decoding. The
//! second bit picks the decoder of a TLS connection ([`Guard::Sealed`]), which checks
//! no checksum: mutated bodies reach it directly.
//!
//! Run: `cargo +nightly fuzz run decode` in `crates/wire/fuzz` (docs/format/wire.md).
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use somnus_core::cluster::Peer;
use somnus_wire::{
    ClusterSecret, FrameDecoder, Guard, HEADER_BYTES, Handshake, Hello, Side, WIRE_VERSION,
    encode,
};

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else { return };
    let guard = if mode & 0x40 != 0 { Guard::Sealed } else { Guard::Checksum };
    if mode & 0x80 != 0 {
        let body_len = usize::from(rest.first().copied().unwrap_or(0));
        let rest = rest.get(1..).unwrap_or(&[]);
        feed(&with_header(rest, body_len.min(rest.len())), usize::MAX, guard);
    } else {
        feed(rest, usize::from((mode & 0x3f).max(1)), guard);
    }
});

/// `bytes` as a frame's body (the first `body_len`) and attachment, with a correct header.
fn with_header(bytes: &[u8], body_len: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_BYTES + bytes.len());
    frame.extend_from_slice(&((HEADER_BYTES - 4 + bytes.len()) as u32).to_le_bytes());
    frame.push(WIRE_VERSION);
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(&(body_len as u32).to_le_bytes());
    frame.extend_from_slice(bytes);
    let crc = crc32c::crc32c(&frame[9..]);
    frame[5..9].copy_from_slice(&crc.to_le_bytes());
    frame
}

/// Delivers `stream` in reads of `read_size` bytes to a decoder and a handshake.
fn feed(stream: &[u8], read_size: usize, guard: Guard) {
    // A small limit, so that the fuzzer reaches the oversized path too.
    let decoder = FrameDecoder::new(1 << 16, guard);
    let secret = ClusterSecret::from_bytes([7; 32]);
    let own = Hello { peer: Peer::Mds, nonce: [1; 32] };
    let (mut handshake, _) = Handshake::start(secret, Side::Acceptor, own);
    let mut buf = BytesMut::new();
    for read in stream.chunks(read_size) {
        buf.extend_from_slice(read);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(decoded)) => {
                    let mut again = Vec::new();
                    encode(&decoded.frame, 1 << 16, guard, &mut again)
                        .expect("a frame that decoded fits the limit it came in");
                    let mut again = BytesMut::from(&again[..]);
                    let twice = decoder.decode(&mut again).expect("an encoded frame decodes");
                    assert_eq!(twice.as_ref().map(|d| &d.frame), Some(&decoded.frame));
                    if handshake.receive(decoded.frame).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    let _ = decoder.at_end(&buf);
}
