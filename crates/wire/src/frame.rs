//! Frames: a fixed header, the body in postcard, then the attachment's raw bytes.
//!
//! ```text
//! offset  bytes  field
//! 0       4      length     u32 LE: bytes after this field (at least 9)
//! 4       1      version    WIRE_VERSION
//! 5       4      crc32c     u32 LE: of every byte after this field
//! 9       4      body_len   u32 LE: bytes of the body
//! 13      body   body       postcard encoding of a `Frame`
//! 13+b    rest   attachment the message's payloads (a write's or a read's data)
//! ```
//!
//! The attachment holds, for each payload the message carries in the order of
//! `Message::payloads`, a u32 LE length (`u32::MAX`: no payload) and that many raw
//! bytes; a hello or a proof has none. The body's postcard skips the payloads, so
//! data is never copied through the serializer.
//!
//! The length comes first so a reader knows how much to wait for, and is checked
//! against the limit before anything is buffered: a peer cannot make a process hold
//! more than one frame's limit. The checksum covers the body and the attachment, so
//! a flipped bit anywhere past the header is refused rather than decoded. Inside TLS
//! ([`Guard::Sealed`]) every record already carries AES-GCM's tag, which refuses any
//! altered byte with a far stronger check: the field is then 0 and not checked, as
//! Ceph's msgr2 drops its CRCs in its secure mode.

use bytes::{Buf, Bytes, BytesMut};

use somnus_core::cluster::{Message, Payload};

use crate::Frame;
use crate::handshake::AuthError;

/// The version this build writes and the only one it reads.
pub const WIRE_VERSION: u8 = 7;

/// Bytes of the header: length, version, checksum, body length.
pub const HEADER_BYTES: usize = 13;

/// The bytes the length field counts that are header, not body or attachment.
const COUNTED_HEADER_BYTES: usize = HEADER_BYTES - 4;

/// Default bound on a frame's length: a 16 MiB attachment and its message.
pub const FRAME_BYTES_MAX_DEFAULT: usize = (16 << 20) + (64 << 10);

/// Why bytes from a peer are not a frame. The connection that sent them is closed:
/// after a bad frame nothing says where the next one starts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame of {length} bytes is over the limit of {max}")]
    TooLarge { length: usize, max: usize },
    #[error("frame length {length} is shorter than its header ({COUNTED_HEADER_BYTES} bytes)")]
    TooShort { length: usize },
    #[error("wire version {version} is not spoken here (this build speaks {WIRE_VERSION})")]
    UnknownVersion { version: u8 },
    #[error("frame checksum mismatch: header says {expected:#010x}, bytes give {actual:#010x}")]
    BadChecksum { expected: u32, actual: u32 },
    #[error("frame body of {body} bytes does not fit in its frame of {length}")]
    BadBodyLength { body: usize, length: usize },
    #[error("frame body is not a valid {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error("connection closed in the middle of a frame ({have} of {need} bytes)")]
    Truncated { have: usize, need: usize },
    #[error("{0}")]
    Auth(#[from] AuthError),
}

impl WireError {
    /// A short, stable name for counters and metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::TooLarge { .. } => "oversized",
            WireError::TooShort { .. }
            | WireError::BadBodyLength { .. }
            | WireError::Malformed { .. } => "malformed",
            WireError::UnknownVersion { .. } => "unknown_version",
            WireError::BadChecksum { .. } => "bad_checksum",
            WireError::Truncated { .. } => "truncated",
            WireError::Auth(error) => error.kind(),
        }
    }
}

/// What guards a frame's bytes on their way between two processes; both ends of a
/// connection use the same (the cluster's `wire`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The frame's CRC-32C, written by the sender and checked by the receiver: the
    /// plain wire.
    Checksum,
    /// The connection's authenticated encryption (TLS 1.3): the checksum field is
    /// written 0 and not checked, which spares two passes over every byte sent.
    Sealed,
}

/// Appends `frame` (with a message's payloads as its attachment) to `out` as one wire
/// frame. Fails only when the frame would be over `max` bytes (the receiver would
/// refuse it).
pub fn encode(frame: &Frame, max: usize, guard: Guard, out: &mut Vec<u8>) -> Result<(), WireError> {
    match frame {
        Frame::Message(message) => encode_message(message, max, guard, out),
        other => encode_body(other, &[], max, guard, out, Attach::Copied),
    }
}

/// As [`encode`] for `Frame::Message(message)`, without moving the message into one.
pub fn encode_message(
    message: &Message,
    max: usize,
    guard: Guard,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let payloads = message.payloads();
    let slots = slots_of(&payloads);
    let parts: Vec<&[u8]> = slots.iter().flat_map(|(length, bytes)| [&length[..], bytes]).collect();
    encode_body(&MessageFrame::Message(message), &parts, max, guard, out, Attach::Copied)
}

/// As [`encode_message`], without copying the payloads' bytes: `out` gets the
/// frame's header and body, and the rest of the frame is returned as parts (each
/// payload's length, then its bytes, sharing the message's) to send after `out` in
/// order, with one vectored write. A megabyte's copy is then the socket's alone.
pub fn encode_message_parts(
    message: &Message,
    max: usize,
    guard: Guard,
    out: &mut Vec<u8>,
) -> Result<Vec<Bytes>, WireError> {
    let payloads = message.payloads();
    let slots = slots_of(&payloads);
    let parts: Vec<&[u8]> = slots.iter().flat_map(|(length, bytes)| [&length[..], bytes]).collect();
    encode_body(&MessageFrame::Message(message), &parts, max, guard, out, Attach::Apart)?;
    // The same slots as parts of their own: each length field, then the payload's
    // bytes shared (no copy).
    Ok(payloads
        .iter()
        .flat_map(|p| {
            let length = Bytes::copy_from_slice(&slot_length(p).to_le_bytes());
            std::iter::once(length).chain(p.bytes().cloned())
        })
        .collect())
}

/// The attachment's slots of `payloads`: each one's length field and its bytes (none
/// for a slot without a payload).
fn slots_of<'a>(payloads: &[&'a Payload]) -> Vec<([u8; 4], &'a [u8])> {
    payloads
        .iter()
        .map(|p| (slot_length(p).to_le_bytes(), p.bytes().map_or(&[][..], |b| &b[..])))
        .collect()
}

/// Appends `payloads` to `out` in the attachment's layout (each a length, then its
/// bytes): what a file that keeps payloads beside a serialized value writes too.
pub fn append_payloads(payloads: &[&Payload], out: &mut Vec<u8>) {
    for payload in payloads {
        let length = slot_length(payload);
        out.extend_from_slice(&length.to_le_bytes());
        out.extend(payload.bytes().map(|b| &b[..]).unwrap_or_default());
    }
}

/// Fills `slots` from `bytes` in the attachment's layout, which must hold exactly
/// them; the payloads share `bytes` (no copy).
pub fn fill_payloads(slots: Vec<&mut Payload>, bytes: &bytes::Bytes) -> Result<(), WireError> {
    let layout = payload_layout(slots.len(), bytes)?;
    for (payload, range) in slots.into_iter().zip(layout) {
        if let Some(range) = range {
            *payload = Payload::new(bytes.slice(range));
        }
    }
    Ok(())
}

/// The length an attachment gives a payload slot that holds none.
const NO_PAYLOAD: u32 = u32::MAX;

/// The length field of a payload's slot.
fn slot_length(payload: &Payload) -> u32 {
    payload.bytes().map_or(NO_PAYLOAD, |b| b.len() as u32)
}

/// `Frame` by reference: serde encodes a reference as what it points to, so with the
/// same variant order this writes the same bytes as `Frame` (a test checks it).
#[derive(serde::Serialize)]
enum MessageFrame<'a> {
    #[allow(dead_code)]
    Hello(()),
    #[allow(dead_code)]
    Proof(()),
    Message(&'a Message),
}

/// Whether [`encode_body`] copies the attachment after the body or leaves it to be
/// sent apart (the checksum covers it either way).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attach {
    Copied,
    Apart,
}

fn encode_body(
    frame: &impl serde::Serialize,
    attachment: &[&[u8]],
    max: usize,
    guard: Guard,
    out: &mut Vec<u8>,
    attach: Attach,
) -> Result<(), WireError> {
    let body = postcard::to_allocvec(frame).map_err(|error| WireError::Malformed {
        what: "frame to encode",
        reason: error.to_string(),
    })?;
    let attached: usize = attachment.iter().map(|a| a.len()).sum();
    let length = COUNTED_HEADER_BYTES + body.len() + attached;
    if length > max {
        return Err(WireError::TooLarge { length, max });
    }
    let start = out.len();
    let copied = if attach == Attach::Copied { attached } else { 0 };
    out.reserve(HEADER_BYTES + body.len() + copied);
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.extend_from_slice(&body);
    if attach == Attach::Copied {
        for part in attachment {
            out.extend_from_slice(part);
        }
    }
    let body_len = body.len();
    let header = &mut out[start..start + HEADER_BYTES];
    header[0..4].copy_from_slice(&(length as u32).to_le_bytes());
    header[4] = WIRE_VERSION;
    header[9..13].copy_from_slice(&(body_len as u32).to_le_bytes());
    if guard == Guard::Checksum {
        let mut crc = crc32c::crc32c(&out[start + 9..]);
        if attach == Attach::Apart {
            crc = attachment.iter().fold(crc, |crc, part| crc32c::crc32c_append(crc, part));
        }
        out[start + 5..start + 9].copy_from_slice(&crc.to_le_bytes());
    }
    Ok(())
}

/// A frame read off the wire, with its attachment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// A message's payloads filled in from the attachment.
    pub frame: Frame,
    /// Bytes the frame took on the wire, header included.
    pub wire_bytes: usize,
}

/// Cuts frames out of a stream of bytes.
#[derive(Clone, Copy, Debug)]
pub struct FrameDecoder {
    max: usize,
    guard: Guard,
}

impl Default for FrameDecoder {
    fn default() -> FrameDecoder {
        FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT, Guard::Checksum)
    }
}

impl FrameDecoder {
    /// A decoder that refuses frames whose length field is over `max`, and, under
    /// [`Guard::Checksum`], frames whose checksum does not match their bytes.
    pub fn new(max: usize, guard: Guard) -> FrameDecoder {
        FrameDecoder { max, guard }
    }

    /// The next whole frame at the front of `buf`, consumed from it; `None` while
    /// the frame is not all there yet. An error leaves `buf` as it was.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Decoded>, WireError> {
        let Some(length) = self.length(buf)? else { return Ok(None) };
        if buf.len() < 4 + length {
            // Room for the rest now, so the reader fills it without regrowing.
            buf.reserve(4 + length - buf.len());
            return Ok(None);
        }
        let frame_bytes = &buf[4..4 + length];
        let version = frame_bytes[0];
        if version != WIRE_VERSION {
            return Err(WireError::UnknownVersion { version });
        }
        if self.guard == Guard::Checksum {
            let expected = u32::from_le_bytes([
                frame_bytes[1],
                frame_bytes[2],
                frame_bytes[3],
                frame_bytes[4],
            ]);
            let actual = crc32c::crc32c(&frame_bytes[5..]);
            if expected != actual {
                return Err(WireError::BadChecksum { expected, actual });
            }
        }
        let body_len =
            u32::from_le_bytes([frame_bytes[5], frame_bytes[6], frame_bytes[7], frame_bytes[8]])
                as usize;
        if body_len > length - COUNTED_HEADER_BYTES {
            return Err(WireError::BadBodyLength { body: body_len, length });
        }
        let mut frame =
            decode_body(&frame_bytes[COUNTED_HEADER_BYTES..COUNTED_HEADER_BYTES + body_len])?;
        let attachment = &frame_bytes[COUNTED_HEADER_BYTES + body_len..];
        let slots = match &mut frame {
            Frame::Message(message) => message.payloads_mut().len(),
            _ => 0,
        };
        let layout = payload_layout(slots, attachment)?;
        // Checked: the frame is consumed, its payloads share its buffer (no copy).
        let mut whole = buf.split_to(4 + length);
        whole.advance(HEADER_BYTES + body_len);
        let whole = whole.freeze();
        if let Frame::Message(message) = &mut frame {
            for (payload, range) in message.payloads_mut().into_iter().zip(layout) {
                if let Some(range) = range {
                    *payload = Payload::new(whole.slice(range));
                }
            }
        }

        Ok(Some(Decoded { frame, wire_bytes: 4 + length }))
    }

    /// The whole length (its field included) of the frame at the front of `buf`,
    /// once its length field is there and checked; nothing is reserved for it.
    pub fn pending_bytes(&self, buf: &BytesMut) -> Result<Option<usize>, WireError> {
        Ok(self.length(buf)?.map(|length| 4 + length))
    }

    /// The length field at the front of `buf`, once it is there and checked.
    fn length(&self, buf: &BytesMut) -> Result<Option<usize>, WireError> {
        let Some(field) = buf.get(0..4) else { return Ok(None) };
        let length = u32::from_le_bytes([field[0], field[1], field[2], field[3]]) as usize;
        if length > self.max {
            return Err(WireError::TooLarge { length, max: self.max });
        }
        if length < COUNTED_HEADER_BYTES {
            return Err(WireError::TooShort { length });
        }
        Ok(Some(length))
    }

    /// What to say when the stream ended with `buf` left over: nothing if it ended
    /// between frames, else what the unfinished frame was.
    pub fn at_end(&self, buf: &BytesMut) -> Result<(), WireError> {
        if buf.is_empty() {
            return Ok(());
        }
        let need = match self.length(buf)? {
            Some(length) => 4 + length,
            None => 4,
        };
        Err(WireError::Truncated { have: buf.len(), need })
    }
}

/// Where each of a frame's `slots` payloads lies in its attachment (none: the slot
/// holds no payload); the attachment must be exactly its payloads.
fn payload_layout(
    slots: usize,
    attachment: &[u8],
) -> Result<Vec<Option<std::ops::Range<usize>>>, WireError> {
    let malformed = |reason: String| WireError::Malformed { what: "attachment", reason };
    let mut layout = Vec::with_capacity(slots);
    let mut at = 0;
    for slot in 0..slots {
        let Some(field) = attachment.get(at..at + 4) else {
            return Err(malformed(format!("payload {slot}'s length is missing")));
        };
        at += 4;
        let length = u32::from_le_bytes([field[0], field[1], field[2], field[3]]);
        if length == NO_PAYLOAD {
            layout.push(None);
            continue;
        }
        let left = attachment.len() - at;
        if left < length as usize {
            return Err(malformed(format!("payload {slot} of {length} bytes has {left} left")));
        }
        layout.push(Some(at..at + length as usize));
        at += length as usize;
    }
    if at != attachment.len() {
        return Err(malformed(format!("{} bytes past the last payload", attachment.len() - at)));
    }
    Ok(layout)
}

/// A body is exactly one `Frame`: trailing bytes inside the body are refused too.
fn decode_body(body: &[u8]) -> Result<Frame, WireError> {
    let malformed = |reason: String| WireError::Malformed { what: "frame body", reason };
    let (frame, rest) = postcard::take_from_bytes::<Frame>(body).map_err(|error| match error {
        // postcard drops the text of a type's own check; the types that check are these.
        postcard::Error::SerdeDeCustom => malformed(
            "a field fails its type's check (a byte range ending before it starts)".into(),
        ),
        error => malformed(error.to_string()),
    })?;
    if !rest.is_empty() {
        return Err(malformed(format!("{} bytes left after the frame", rest.len())));
    }
    Ok(frame)
}
