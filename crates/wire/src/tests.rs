use bytes::BytesMut;
use proptest::prelude::*;
use somnus_core::cluster::{Message, Peer};
use somnus_types::ServerId;

use crate::samples::{VARIANTS, every_message, variant};
use crate::{
    FRAME_BYTES_MAX_DEFAULT, Frame, FrameDecoder, Guard, HEADER_BYTES, Hello, WIRE_VERSION,
    WireError, encode,
};

fn wire(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode(frame, FRAME_BYTES_MAX_DEFAULT, Guard::Checksum, &mut out).unwrap();
    out
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, WireError> {
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::from(bytes);
    let mut frames = Vec::new();
    while let Some(decoded) = decoder.decode(&mut buf)? {
        frames.push(decoded.frame);
    }
    decoder.at_end(&buf)?;
    Ok(frames)
}

#[test]
fn every_message_and_its_payloads_round_trip() {
    let samples = every_message();
    let mut seen: Vec<usize> = samples.iter().map(variant).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, (0..VARIANTS).collect::<Vec<_>>(), "a sample of every variant");

    let mut stream = Vec::new();
    for message in &samples {
        encode(
            &Frame::Message(message.clone()),
            FRAME_BYTES_MAX_DEFAULT,
            Guard::Checksum,
            &mut stream,
        )
        .unwrap();
    }
    let frames = decode_all(&stream).unwrap();
    assert_eq!(frames.len(), samples.len());
    let carried: usize = samples.iter().map(|m| m.payloads().len()).sum();
    assert!(carried >= 8, "the samples carry payloads, and a slot with none");
    for (frame, message) in frames.into_iter().zip(samples) {
        // Equal messages have equal payloads: the bytes came through the attachment.
        assert_eq!(frame, Frame::Message(message));
    }
}

#[test]
fn an_attachment_that_is_not_its_payloads_is_refused() {
    let restamp = |mut bytes: Vec<u8>| {
        let crc = crc32c::crc32c(&bytes[9..]);
        bytes[5..9].copy_from_slice(&crc.to_le_bytes());
        bytes
    };
    let relength = |mut bytes: Vec<u8>| {
        let length = (bytes.len() - 4) as u32;
        bytes[0..4].copy_from_slice(&length.to_le_bytes());
        restamp(bytes)
    };
    let write = every_message().into_iter().find(|m| matches!(m, Message::ReplicaWrite { .. }));
    let good = wire(&Frame::Message(write.unwrap()));

    let cut = relength(good[..good.len() - 1].to_vec());
    let error = decode_all(&cut).unwrap_err();
    assert_eq!(
        error.to_string(),
        "frame body is not a valid attachment: payload 0 of 8192 bytes has 8191 left"
    );
    assert_eq!(error.kind(), "malformed");

    let mut long = good.clone();
    long.extend_from_slice(b"extra");
    let error = decode_all(&relength(long)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "frame body is not a valid attachment: 5 bytes past the last payload"
    );

    let standby = wire(&Frame::Message(Message::EnterStandby));
    let mut attached = standby.clone();
    attached.extend_from_slice(b"x");
    let error = decode_all(&relength(attached)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "frame body is not a valid attachment: 1 bytes past the last payload"
    );
}

#[test]
fn a_message_encoded_by_reference_is_the_same_bytes() {
    for message in every_message() {
        let mut by_reference = Vec::new();
        crate::encode_message(
            &message,
            FRAME_BYTES_MAX_DEFAULT,
            Guard::Checksum,
            &mut by_reference,
        )
        .unwrap();
        assert_eq!(by_reference, wire(&Frame::Message(message)));
    }
}

#[test]
fn a_message_encoded_in_parts_is_the_same_bytes() {
    for message in every_message() {
        let (head, joined) = in_parts(&message, Guard::Checksum);
        let payload_bytes: usize =
            message.payloads().iter().filter_map(|p| p.bytes()).map(|b| b.len()).sum();
        let whole = wire(&Frame::Message(message));
        assert_eq!(joined.len(), whole.len());
        assert!(whole.len() - head.len() >= payload_bytes, "the payloads are not in the head");
        assert_eq!(joined, whole);
    }
}

/// `message` encoded in parts under `guard`: the head, and the head and parts joined.
fn in_parts(message: &Message, guard: Guard) -> (Vec<u8>, Vec<u8>) {
    let mut head = Vec::new();
    let parts =
        crate::encode_message_parts(message, FRAME_BYTES_MAX_DEFAULT, guard, &mut head).unwrap();
    let joined = head.iter().chain(parts.iter().flatten()).copied().collect();
    (head, joined)
}

#[test]
fn a_frame_fed_a_byte_at_a_time_comes_out_whole_once() {
    let hello = Frame::Hello(Hello { peer: Peer::Server(ServerId(4)), nonce: [3; 32] });
    let bytes = wire(&hello);
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::new();
    for (i, byte) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[*byte]);
        let decoded = decoder.decode(&mut buf).unwrap();
        if i + 1 < bytes.len() {
            assert!(decoded.is_none(), "whole only at the last byte, not at {i}");
            assert!(matches!(decoder.at_end(&buf), Err(WireError::Truncated { .. })));
        } else {
            let decoded = decoded.unwrap();
            assert_eq!(decoded.frame, hello);
            assert_eq!(decoded.wire_bytes, bytes.len());
        }
    }
    assert!(buf.is_empty());
}

#[test]
fn each_kind_of_bad_frame_is_named() {
    let good = wire(&Frame::Message(Message::EnterStandby));

    let mut oversized = BytesMut::from(&u32::MAX.to_le_bytes()[..]);
    let error = FrameDecoder::default().decode(&mut oversized).unwrap_err();
    assert_eq!(
        error,
        WireError::TooLarge { length: u32::MAX as usize, max: FRAME_BYTES_MAX_DEFAULT }
    );
    assert_eq!(
        error.to_string(),
        format!("frame of 4294967295 bytes is over the limit of {FRAME_BYTES_MAX_DEFAULT}")
    );

    let short = decode_all(&[3, 0, 0, 0, 1, 2, 3]).unwrap_err();
    assert_eq!(short, WireError::TooShort { length: 3 });

    let mut version = good.clone();
    version[4] = 9;
    assert_eq!(decode_all(&version).unwrap_err(), WireError::UnknownVersion { version: 9 });

    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x10;
    assert!(matches!(decode_all(&flipped).unwrap_err(), WireError::BadChecksum { .. }));

    let truncated = decode_all(&good[..good.len() - 1]).unwrap_err();
    assert_eq!(truncated, WireError::Truncated { have: good.len() - 1, need: good.len() });
    assert_eq!(
        truncated.to_string(),
        format!(
            "connection closed in the middle of a frame ({} of {} bytes)",
            good.len() - 1,
            good.len()
        )
    );

    // A body length past the frame, and a body that is not a frame, with valid checksums.
    let restamp = |mut bytes: Vec<u8>| {
        let crc = crc32c::crc32c(&bytes[9..]);
        bytes[5..9].copy_from_slice(&crc.to_le_bytes());
        bytes
    };
    let mut body_len = good.clone();
    body_len[9..13].copy_from_slice(&1000u32.to_le_bytes());
    assert!(matches!(
        decode_all(&restamp(body_len)).unwrap_err(),
        WireError::BadBodyLength { body: 1000, .. }
    ));
    let mut garbage = good.clone();
    garbage[HEADER_BYTES] = 0xff;
    let error = decode_all(&restamp(garbage)).unwrap_err();
    assert!(matches!(error, WireError::Malformed { .. }), "{error}");
    assert_eq!(error.kind(), "malformed");

    assert_eq!(good[4], WIRE_VERSION);
}

#[test]
fn a_range_that_ends_before_it_starts_is_refused_at_decoding() {
    // The sample's range 4096..12288, rewritten as 12288..4096 in the body.
    let message = Message::ClientRead {
        request: 1,
        group: somnus_types::ChunkGroupId(1),
        epoch: somnus_core::cluster::Epoch(1),
        chunk: somnus_core::cluster::ChunkId {
            object: somnus_types::ObjectId(1),
            chunk: somnus_core::cluster::ChunkIndex(0),
        },
        range: somnus_types::ByteRange::from_bounds(4096, 12288),
    };
    let mut bytes = wire(&Frame::Message(message));
    let body = &mut bytes[HEADER_BYTES..];
    // postcard writes u64s as varints: 4096 = [0x80, 0x20], 12288 = [0x80, 0x60].
    let at = body.windows(4).position(|w| w == [0x80, 0x20, 0x80, 0x60]).unwrap();
    body[at + 1] = 0x60;
    body[at + 3] = 0x20;
    let crc = crc32c::crc32c(&bytes[9..]);
    bytes[5..9].copy_from_slice(&crc.to_le_bytes());
    let error = decode_all(&bytes).unwrap_err();
    assert!(error.to_string().contains("a byte range ending before it starts"), "{error}");
}

#[test]
fn a_frame_over_the_senders_limit_is_not_encoded() {
    let mut out = vec![1, 2, 3];
    let write = every_message().into_iter().find(|m| matches!(m, Message::ReplicaWrite { .. }));
    let error =
        encode(&Frame::Message(write.unwrap()), 1000, Guard::Checksum, &mut out).unwrap_err();
    assert!(matches!(error, WireError::TooLarge { max: 1000, .. }));
    assert_eq!(out, [1, 2, 3], "nothing appended");
}

proptest! {
    /// Any bytes at all: frames, an error or a wait for more, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_all(&bytes);
    }

    /// A flipped bit past the length field is refused (version, checksum, or a
    /// length that no longer matches), never decoded as another frame.
    #[test]
    fn a_flipped_bit_is_never_decoded(index in 0usize..10_000, bit in 0u8..8, which in 0usize..VARIANTS) {
        let message = every_message().swap_remove(which);
        let mut bytes = wire(&Frame::Message(message.clone()));
        let index = 4 + index % (bytes.len() - 4);
        bytes[index] ^= 1 << bit;
        prop_assert!(decode_all(&bytes).is_err());
    }
}

/// The bytes of every sample message at wire version 7, kept in the repository: a
/// change to a message's fields or to the order of `Message`'s variants changes
/// them, and must come with a new wire version (docs/format/wire.md).
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/v7-messages.bin");

fn fixture_bytes() -> Vec<u8> {
    let mut stream = Vec::new();
    for message in every_message() {
        encode(&Frame::Message(message), FRAME_BYTES_MAX_DEFAULT, Guard::Checksum, &mut stream)
            .unwrap();
    }
    stream
}

#[test]
fn the_format_has_not_drifted_from_version_7() {
    let kept = std::fs::read(FIXTURE).unwrap();
    assert!(kept == fixture_bytes(), "the wire format changed: see docs/format/wire.md");
    let frames = decode_all(&kept).unwrap();
    assert_eq!(frames, every_message().into_iter().map(Frame::Message).collect::<Vec<_>>());
}

/// Writes the fixture; run once, when the wire version changes, and commit the file.
#[test]
#[ignore = "writes the fixture"]
fn write_fixture() {
    std::fs::create_dir_all(std::path::Path::new(FIXTURE).parent().unwrap()).unwrap();
    std::fs::write(FIXTURE, fixture_bytes()).unwrap();
}

#[test]
fn a_sealed_frame_carries_no_checksum_and_a_checksumming_end_refuses_it() {
    let decoder = FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT, Guard::Sealed);
    for message in every_message() {
        let frame = Frame::Message(message.clone());
        let mut sealed = Vec::new();
        encode(&frame, FRAME_BYTES_MAX_DEFAULT, Guard::Sealed, &mut sealed).unwrap();
        let checked = wire(&frame);
        assert_eq!(sealed[5..9], [0; 4], "no checksum inside TLS");
        assert_eq!((&sealed[..5], &sealed[9..]), (&checked[..5], &checked[9..]));
        assert_eq!(in_parts(&message, Guard::Sealed).1, sealed);

        // Either field decodes where TLS guards the bytes: it is not read there.
        for bytes in [&sealed, &checked] {
            let decoded = decoder.decode(&mut BytesMut::from(&bytes[..])).unwrap().unwrap();
            assert_eq!(decoded.frame, frame);
        }
        // Ends that disagree (one on TLS, one plain) are told so, never misread.
        assert!(matches!(decode_all(&sealed), Err(WireError::BadChecksum { expected: 0, .. })));
    }
}
