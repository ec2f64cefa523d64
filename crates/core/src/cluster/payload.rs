//! The bytes a write or a read carries, beside its stamp.
//!
//! The core never looks inside a payload: it slices one when a write or a read is cut
//! to a range, and hands it on. The simulator carries none (its stamps are the data,
//! and the request's size drives its models); the runtime carries the bytes, which the
//! wire puts in a frame's attachment (docs/format/wire.md), not in the message's
//! serialized form.

use std::sync::Arc;

use bytes::Bytes;

/// The bytes of a range, or none (the simulator). One pointer wide, so the messages
/// of the data path stay small; cloning it is a reference count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload(Option<Arc<Bytes>>);

impl Payload {
    /// No bytes: what the simulator carries.
    pub const NONE: Payload = Payload(None);

    pub fn new(bytes: Bytes) -> Payload {
        Payload(Some(Arc::new(bytes)))
    }

    pub fn bytes(&self) -> Option<&Bytes> {
        self.0.as_deref()
    }

    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Bytes it carries (none: 0).
    pub fn size_bytes(&self) -> usize {
        self.bytes().map_or(0, Bytes::len)
    }

    /// Bytes `payloads` carry together.
    pub fn total_bytes(payloads: &[&Payload]) -> usize {
        payloads.iter().map(|p| p.size_bytes()).sum()
    }

    /// The part of the payload `offset..offset + len` covers (a payload of a range
    /// starting at `base` cut to a range starting at `base + offset`); none stays
    /// none. A part past the end is cut at it: only a bug asks for one.
    pub fn slice(&self, offset: u64, len: u64) -> Payload {
        match self.bytes() {
            None => Payload::NONE,
            Some(bytes) => Payload::new(bytes.slice(Self::within(bytes, offset, len))),
        }
    }

    /// The bytes `offset..offset + len` covers, borrowed (as [`Payload::slice`], without
    /// making a payload of them).
    pub fn bytes_at(&self, offset: u64, len: u64) -> Option<&[u8]> {
        self.bytes().map(|bytes| &bytes[Self::within(bytes, offset, len)])
    }

    /// `offset..offset + len`, cut at the end of `bytes`.
    fn within(bytes: &Bytes, offset: u64, len: u64) -> std::ops::Range<usize> {
        let start = (offset as usize).min(bytes.len());
        start..(offset.saturating_add(len) as usize).min(bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_cuts_the_bytes_and_none_stays_none() {
        let payload = Payload::new(Bytes::from_static(b"abcdefgh"));
        assert_eq!(payload.slice(2, 3).bytes().map(|b| &b[..]), Some(&b"cde"[..]));
        assert_eq!(payload.slice(6, 10).bytes().map(|b| &b[..]), Some(&b"gh"[..]));
        assert!(Payload::NONE.slice(0, 4).is_none());
        assert_eq!(payload.bytes_at(2, 3), Some(&b"cde"[..]));
        assert_eq!(Payload::NONE.bytes_at(0, 4), None);
        assert_eq!(size_of::<Payload>(), size_of::<usize>());
    }
}
