//! A checksummed record of a value and its payloads, the unit of the runtime's own
//! files (the journal's records, the groups' snapshot; docs/format/replicas.md):
//!
//! `length u32 | crc32c u32 | body_len u32 | postcard(value) | payloads`
//!
//! `length` counts the bytes after it, the CRC-32C covers the bytes after itself, and
//! the payloads follow the wire's attachment layout (each a length, then its bytes).

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use somnus_core::cluster::Payload;

/// Bytes before a record's body: length, checksum, body length.
pub const HEADER_BYTES: usize = 12;

/// The little-endian u32 at `at` of `bytes` (which the caller has checked holds it).
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Appends `value` and its `payloads` to `out` as one record.
pub fn encode<T: Serialize>(value: &T, payloads: &[&Payload], out: &mut Vec<u8>) {
    let start = out.len();
    // Serializing the runtime's plain-data values into memory cannot fail.
    let body = postcard::to_allocvec(value).unwrap_or_default();
    // Room for the whole record at once: a journal batch or a snapshot of megabytes
    // grown step by step would copy itself over and over into fresh pages.
    let attached = 4 * payloads.len() + Payload::total_bytes(payloads);
    out.reserve(HEADER_BYTES + body.len() + attached);
    out.extend_from_slice(&[0; HEADER_BYTES]);
    out.extend_from_slice(&body);
    somnus_wire::append_payloads(payloads, out);
    let length = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&length.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The record at the front of `bytes`: its value, with the payloads `slots` names
/// filled in (sharing `bytes`), and the bytes it took; `None` when it is cut short,
/// or why it is not a record.
pub fn decode<T: DeserializeOwned>(
    bytes: &Bytes,
    slots: impl FnOnce(&mut T) -> Vec<&mut Payload>,
) -> Result<Option<(T, usize)>, String> {
    let Some(header) = bytes.get(..HEADER_BYTES) else { return Ok(None) };
    let length = u32_at(header, 0) as usize;
    let Some(record) = bytes.get(4..4 + length) else { return Ok(None) };
    if length < HEADER_BYTES - 4 {
        return Err(format!("a record length of {length}"));
    }
    if crc32c::crc32c(&record[4..]) != u32_at(header, 4) {
        return Err("checksum mismatch".into());
    }
    let body_len = u32_at(header, 8) as usize;
    let body = record.get(8..8 + body_len).ok_or("a body past its record")?;
    let mut value: T = postcard::from_bytes(body).map_err(|e| e.to_string())?;
    let payloads = bytes.slice(HEADER_BYTES + body_len..4 + length);
    somnus_wire::fill_payloads(slots(&mut value), &payloads).map_err(|e| e.to_string())?;
    Ok(Some((value, 4 + length)))
}
