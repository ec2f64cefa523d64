//! Hand parsers for the text formats. They work on byte slices of one line, split
//! fields with `memchr`, parse integers by hand and allocate only to report an error:
//! this is the hot path of every replay (STYLE.md; target >= 5 M MSR lines/s).

use memchr::memchr;
use somnus_types::IoKind;

use crate::Format;
use crate::error::{FieldError, quote};
use crate::format::trim_spaces;

/// Bytes per sector in every sector-addressed format.
pub(crate) const SECTOR_BYTES: u64 = 512;
/// Windows FILETIME ticks (100 ns) from 1601-01-01 to 1970-01-01 UTC.
pub(crate) const FILETIME_UNIX_EPOCH_TICKS: u64 = 116_444_736_000_000_000;
/// Nanoseconds per FILETIME tick.
pub(crate) const NANOS_PER_FILETIME_TICK: u64 = 100;

const MSR_FIELDS: [&str; 7] =
    ["Timestamp", "Hostname", "DiskNumber", "Type", "Offset", "Size", "ResponseTime"];
const SPC_FIELDS: [&str; 5] = ["ASU", "LBA", "Size", "Opcode", "Timestamp"];
const DISKSIM_FIELDS: [&str; 5] = ["ArrivalTime", "DeviceNumber", "StartLBA", "Size", "Type"];
const REPLAYER_FIELDS: [&str; 5] = ["Timestamp", "DeviceID", "Offset", "Size", "Type"];
const CLOUDPHYSICS_FIELDS: [&str; 4] = ["timestamp_us", "op", "lbn_512B", "size_bytes"];

/// One parsed line, before its volume name is resolved to an id.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ParsedLine<'a> {
    pub(crate) timestamp_ns: u64,
    /// The volume name's prefix: MSR's hostname; empty for the formats whose volume
    /// names start with the file stem.
    pub(crate) host: &'a [u8],
    /// The volume number (disk, ASU, device) that follows the prefix in the name.
    pub(crate) number: u64,
    /// The field the number came from, for errors about the volume.
    pub(crate) number_field: &'static str,
    pub(crate) offset_bytes: u64,
    pub(crate) size_bytes: u32,
    pub(crate) kind: IoKind,
}

/// Parses one non-blank data line of a text `format`.
pub(crate) fn parse_line(format: Format, line: &[u8]) -> Result<ParsedLine<'_>, FieldError> {
    match format {
        Format::Msr => parse_msr(line),
        Format::Spc => parse_spc(line),
        Format::Disksim => parse_sector_ascii(line, TimeUnit::Millis),
        Format::Mqsim => parse_sector_ascii(line, TimeUnit::Nanos),
        Format::Replayer => parse_replayer(line),
        Format::CloudphysicsCsv => parse_cloudphysics(line),
        Format::Vscsi | Format::Somnus => {
            unreachable!("binary format {format} has no text parser")
        }
    }
}

fn parse_msr(line: &[u8]) -> Result<ParsedLine<'_>, FieldError> {
    if let Some(parsed) = parse_msr_fast(line) {
        return Ok(parsed);
    }
    let [time, host, disk, kind, offset, size, response] = split_comma(line, &MSR_FIELDS, false)?;
    let ticks = parse_u64("Timestamp", time)?;
    let timestamp_ns = filetime_to_unix_ns(ticks).map_err(|m| FieldError::new("Timestamp", m))?;
    if host.is_empty() {
        return Err(FieldError::new("Hostname", "is empty"));
    }
    let number = u64::from(parse_u32("DiskNumber", disk)?);
    let kind = match kind {
        b"Read" => IoKind::Read,
        b"Write" => IoKind::Write,
        _ if kind.eq_ignore_ascii_case(b"read") => IoKind::Read,
        _ if kind.eq_ignore_ascii_case(b"write") => IoKind::Write,
        _ => return Err(FieldError::new("Type", format!("{} is not Read or Write", quote(kind)))),
    };
    let size_bytes = parse_size_bytes("Size", size)?;
    let offset_bytes = parse_offset("Offset", offset, 1, size_bytes)?;
    parse_u64("ResponseTime", response)?;
    Ok(msr_line(timestamp_ns, host, number, offset_bytes, size_bytes, kind))
}

/// An MSR line's request: the volume is `{Hostname}_{DiskNumber}`.
fn msr_line(
    timestamp_ns: u64,
    host: &[u8],
    number: u64,
    offset_bytes: u64,
    size_bytes: u32,
    kind: IoKind,
) -> ParsedLine<'_> {
    ParsedLine {
        timestamp_ns,
        host,
        number,
        number_field: "DiskNumber",
        offset_bytes,
        size_bytes,
        kind,
    }
}

/// The common MSR line in one pass: digits accumulate as the bytes go by, with no
/// separate split. Anything unusual (spaces, a lower-case type, an empty or
/// over-long field, a value out of range, a wrong field count) returns `None`, and the
/// validating parser above then either accepts the line or names what is wrong; so
/// this path can only make parsing faster, never different (a property test checks
/// that it agrees with the validating parser).
fn parse_msr_fast(line: &[u8]) -> Option<ParsedLine<'_>> {
    let (ticks, rest) = filetime_field(line)?;
    let comma = rest.iter().position(|&b| b == b',')?;
    let (host, rest) = (&rest[..comma], &rest[comma + 1..]);
    if host.is_empty()
        || host.first() == Some(&b' ')
        || host.last() == Some(&b' ')
        || host.contains(&b'\t')
    {
        return None;
    }
    let (number, rest) = leading_number(rest)?;
    let (kind, rest) = if let Some(rest) = rest.strip_prefix(b"Read,") {
        (IoKind::Read, rest)
    } else {
        (IoKind::Write, rest.strip_prefix(b"Write,")?)
    };
    let (offset_bytes, rest) = leading_number(rest)?;
    let (size, rest) = leading_number(rest)?;
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) || rest.len() > 19 {
        return None;
    }
    let size_bytes = u32::try_from(size).ok().filter(|size| *size > 0)?;
    offset_bytes.checked_add(u64::from(size_bytes))?;
    u32::try_from(number).ok()?;
    let timestamp_ns = filetime_to_unix_ns(ticks).ok()?;
    Some(msr_line(timestamp_ns, host, number, offset_bytes, size_bytes, kind))
}

/// The leading timestamp field: an MSR FILETIME has 18 digits from 1973 to 2318, so
/// that common width is read sixteen digits at a time; any other goes digit by digit.
fn filetime_field(line: &[u8]) -> Option<(u64, &[u8])> {
    if let Some((digits, rest)) = line.split_at_checked(18)
        && let Some(rest) = rest.strip_prefix(b",")
    {
        let high = eight_digits(&digits[..8])?;
        let middle = eight_digits(&digits[8..16])?;
        let (tens, ones) = (digits[16].wrapping_sub(b'0'), digits[17].wrapping_sub(b'0'));
        if tens > 9 || ones > 9 {
            return None;
        }
        let low = u64::from(tens) * 10 + u64::from(ones);
        return Some(((high * 100_000_000 + middle) * 100 + low, rest));
    }
    leading_number(line)
}

/// A decimal field of 1 to 19 digits followed by a comma: its value and what follows.
fn leading_number(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0_u64;
    for (index, &byte) in bytes.iter().enumerate().take(20) {
        let digit = byte.wrapping_sub(b'0');
        if digit <= 9 && index < 19 {
            // 19 digits cannot overflow u64.
            value = value * 10 + u64::from(digit);
            continue;
        }
        return (byte == b',' && index > 0).then(|| (value, &bytes[index + 1..]));
    }
    None
}

fn parse_spc(line: &[u8]) -> Result<ParsedLine<'_>, FieldError> {
    let [asu, lba, size, opcode, time] = split_comma(line, &SPC_FIELDS, true)?;
    let number = u64::from(parse_u32("ASU", asu)?);
    let size_bytes = parse_size_bytes("Size", size)?;
    let offset_bytes = parse_offset("LBA", lba, SECTOR_BYTES, size_bytes)?;
    let kind = match opcode {
        b"r" | b"R" => IoKind::Read,
        b"w" | b"W" => IoKind::Write,
        _ => return Err(FieldError::new("Opcode", format!("{} is not r or w", quote(opcode)))),
    };
    let timestamp_ns = parse_decimal("Timestamp", time, TimeUnit::Seconds)?;
    Ok(ParsedLine {
        timestamp_ns,
        host: b"",
        number,
        number_field: "ASU",
        offset_bytes,
        size_bytes,
        kind,
    })
}

fn parse_sector_ascii(line: &[u8], unit: TimeUnit) -> Result<ParsedLine<'_>, FieldError> {
    let [time, device, lba, size, kind] = split_whitespace(line, &DISKSIM_FIELDS)?;
    let timestamp_ns = match unit {
        TimeUnit::Nanos => parse_u64("ArrivalTime", time)?,
        _ => parse_decimal("ArrivalTime", time, unit)?,
    };
    let number = u64::from(parse_u32("DeviceNumber", device)?);
    let sectors = parse_u64("Size", size)?;
    let size_bytes = sectors_to_size_bytes(sectors)?;
    let offset_bytes = parse_offset("StartLBA", lba, SECTOR_BYTES, size_bytes)?;
    let kind = parse_binary_kind(kind)?;
    Ok(ParsedLine {
        timestamp_ns,
        host: b"",
        number,
        number_field: "DeviceNumber",
        offset_bytes,
        size_bytes,
        kind,
    })
}

fn parse_replayer(line: &[u8]) -> Result<ParsedLine<'_>, FieldError> {
    let [time, device, offset, size, kind] = split_whitespace(line, &REPLAYER_FIELDS)?;
    let timestamp_ns = parse_decimal("Timestamp", time, TimeUnit::Millis)?;
    let number = u64::from(parse_u32("DeviceID", device)?);
    let size_bytes = parse_size_bytes("Size", size)?;
    let offset_bytes = parse_offset("Offset", offset, 1, size_bytes)?;
    let kind = parse_binary_kind(kind)?;
    Ok(ParsedLine {
        timestamp_ns,
        host: b"",
        number,
        number_field: "DeviceID",
        offset_bytes,
        size_bytes,
        kind,
    })
}

fn parse_cloudphysics(line: &[u8]) -> Result<ParsedLine<'_>, FieldError> {
    let [time, op, lbn, size] = split_comma(line, &CLOUDPHYSICS_FIELDS, false)?;
    let micros = parse_u64("timestamp_us", time)?;
    let timestamp_ns = micros
        .checked_mul(1_000)
        .ok_or_else(|| FieldError::new("timestamp_us", format!("{micros} us overflows u64 ns")))?;
    let kind = match op {
        b"R" | b"r" => IoKind::Read,
        b"W" | b"w" => IoKind::Write,
        _ => return Err(FieldError::new("op", format!("{} is not R or W", quote(op)))),
    };
    let size_bytes = parse_size_bytes("size_bytes", size)?;
    let offset_bytes = parse_offset("lbn_512B", lbn, SECTOR_BYTES, size_bytes)?;
    Ok(ParsedLine {
        timestamp_ns,
        host: b"",
        number: 0,
        number_field: "op",
        offset_bytes,
        size_bytes,
        kind,
    })
}

/// Converts Windows FILETIME ticks to nanoseconds since the Unix epoch.
pub(crate) fn filetime_to_unix_ns(ticks: u64) -> Result<u64, String> {
    let since_epoch = ticks
        .checked_sub(FILETIME_UNIX_EPOCH_TICKS)
        .ok_or_else(|| format!("FILETIME {ticks} is before 1970-01-01"))?;
    since_epoch
        .checked_mul(NANOS_PER_FILETIME_TICK)
        .ok_or_else(|| format!("FILETIME {ticks} is too far in the future for u64 ns"))
}

/// Splits a comma-separated line into exactly `N` fields (or `N` and ignored extras),
/// trimming spaces; a missing or unexpected field is an error naming it.
fn split_comma<'a, const N: usize>(
    line: &'a [u8],
    names: &[&'static str; N],
    allow_extra: bool,
) -> Result<[&'a [u8]; N], FieldError> {
    // A plain byte loop: trace fields are a few bytes long, too short for memchr's
    // vector set-up to pay (it cost a third of the parse time).
    let mut fields: [&[u8]; N] = [&[]; N];
    let mut count = 0;
    let mut start = 0;
    for (position, &byte) in line.iter().enumerate() {
        if byte != b',' {
            continue;
        }
        if count + 1 == N {
            if allow_extra {
                fields[count] = trim_spaces(&line[start..position]);
                return Ok(fields);
            }
            let extra = 1 + line[position + 1..].iter().filter(|&&b| b == b',').count();
            return Err(too_many(names[count], extra, N));
        }
        fields[count] = trim_spaces(&line[start..position]);
        count += 1;
        start = position + 1;
    }
    if count + 1 < N {
        return Err(missing(names[count + 1], count + 1, N));
    }
    fields[count] = trim_spaces(&line[start..]);
    Ok(fields)
}

/// Splits a line at runs of spaces and tabs into exactly `N` fields.
fn split_whitespace<'a, const N: usize>(
    line: &'a [u8],
    names: &[&'static str; N],
) -> Result<[&'a [u8]; N], FieldError> {
    let mut fields: [&[u8]; N] = [&[]; N];
    let mut count = 0_usize;
    let mut rest = trim_spaces(line);
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b' ' || b == b'\t').unwrap_or(rest.len());
        if count == N {
            let extra = rest.split(|&b| b == b' ' || b == b'\t').filter(|f| !f.is_empty()).count();
            return Err(too_many(names[N - 1], extra, N));
        }
        fields[count] = &rest[..end];
        count += 1;
        rest = trim_spaces(&rest[end..]);
    }
    if count < N {
        return Err(missing(names[count], count, N));
    }
    Ok(fields)
}

fn missing(field: &'static str, count: usize, expected: usize) -> FieldError {
    FieldError::new(field, format!("missing: the line has {count} of {expected} fields"))
}

fn too_many(field: &'static str, extra: usize, expected: usize) -> FieldError {
    FieldError::new(field, format!("followed by {extra} extra field(s); the format has {expected}"))
}

/// Parses a decimal unsigned integer with no sign, spaces or exponent.
pub(crate) fn parse_u64(field: &'static str, bytes: &[u8]) -> Result<u64, FieldError> {
    // Up to 19 digits cannot overflow u64 (10^19 - 1 < 2^64), so skip the checks.
    const UNCHECKED_DIGITS_MAX: usize = 19;
    if bytes.is_empty() {
        return Err(FieldError::new(field, "is empty"));
    }
    let mut value = 0_u64;
    if bytes.len() <= UNCHECKED_DIGITS_MAX {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let Some(eight) = eight_digits(chunk) else { return Err(not_integer(field, bytes)) };
            value = value * 100_000_000 + eight;
        }
        for &byte in chunks.remainder() {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return Err(not_integer(field, bytes));
            }
            value = value * 10 + u64::from(digit);
        }
        return Ok(value);
    }
    for &byte in bytes {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return Err(not_integer(field, bytes));
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit)))
            .ok_or_else(|| FieldError::new(field, format!("{} overflows u64", quote(bytes))))?;
    }
    Ok(value)
}

/// The value of eight ASCII digits, or `None` if any byte is not a digit; eight at a
/// time in one register (the check is simdjson's, the combination Lemire's), since
/// the timestamps and offsets of MSR lines are long.
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = chunk.try_into().ok()?;
    let word = u64::from_le_bytes(bytes);
    let high = word & 0xF0F0_F0F0_F0F0_F0F0;
    let carried = (word.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4;
    if high | carried != 0x3333_3333_3333_3333 {
        return None;
    }
    let mut value = word - 0x3030_3030_3030_3030;
    value = (value * 10 + (value >> 8)) & 0x00FF_00FF_00FF_00FF;
    value = (value * 100 + (value >> 16)) & 0x0000_FFFF_0000_FFFF;
    value = (value * 10_000 + (value >> 32)) & 0x0000_0000_FFFF_FFFF;
    Some(value)
}

fn not_integer(field: &'static str, bytes: &[u8]) -> FieldError {
    FieldError::new(field, format!("{} is not an unsigned integer", quote(bytes)))
}

fn parse_u32(field: &'static str, bytes: &[u8]) -> Result<u32, FieldError> {
    let value = parse_u64(field, bytes)?;
    u32::try_from(value)
        .map_err(|_| FieldError::new(field, format!("{value} exceeds {}", u32::MAX)))
}

/// A request size in bytes: not zero and at most `u32::MAX`.
fn parse_size_bytes(field: &'static str, bytes: &[u8]) -> Result<u32, FieldError> {
    let size = parse_u64(field, bytes)?;
    if size == 0 {
        return Err(FieldError::new(field, "is zero"));
    }
    u32::try_from(size)
        .map_err(|_| FieldError::new(field, format!("{size} bytes exceeds {} bytes", u32::MAX)))
}

fn sectors_to_size_bytes(sectors: u64) -> Result<u32, FieldError> {
    if sectors == 0 {
        return Err(FieldError::new("Size", "is zero"));
    }
    sectors.checked_mul(SECTOR_BYTES).and_then(|bytes| u32::try_from(bytes).ok()).ok_or_else(|| {
        FieldError::new("Size", format!("{sectors} sectors exceeds {} bytes", u32::MAX))
    })
}

/// An offset of `unit_bytes`-sized units, checked so that offset + size fits `u64`.
fn parse_offset(
    field: &'static str,
    bytes: &[u8],
    unit_bytes: u64,
    size_bytes: u32,
) -> Result<u64, FieldError> {
    let units = parse_u64(field, bytes)?;
    units
        .checked_mul(unit_bytes)
        .filter(|offset| offset.checked_add(u64::from(size_bytes)).is_some())
        .ok_or_else(|| {
            FieldError::new(
                field,
                format!("{units} (x{unit_bytes} bytes) + size {size_bytes} overflows u64"),
            )
        })
}

fn parse_binary_kind(bytes: &[u8]) -> Result<IoKind, FieldError> {
    match bytes {
        b"1" => Ok(IoKind::Read),
        b"0" => Ok(IoKind::Write),
        _ => Err(FieldError::new("Type", format!("{} is not 1 (read) or 0 (write)", quote(bytes)))),
    }
}

/// The unit of a decimal time field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Nanos,
    Millis,
    Seconds,
}

impl TimeUnit {
    /// The number of decimal digits from this unit down to nanoseconds.
    fn fraction_digits(self) -> u32 {
        match self {
            TimeUnit::Nanos => 0,
            TimeUnit::Millis => 6,
            TimeUnit::Seconds => 9,
        }
    }
}

/// Parses a non-negative decimal time such as `223.412` into nanoseconds. Digits
/// below a nanosecond are truncated; signs, exponents and empty parts are refused.
pub(crate) fn parse_decimal(
    field: &'static str,
    bytes: &[u8],
    unit: TimeUnit,
) -> Result<u64, FieldError> {
    let digits = unit.fraction_digits();
    let (whole, fraction) = match memchr(b'.', bytes) {
        Some(dot) => (&bytes[..dot], &bytes[dot + 1..]),
        None => (bytes, &bytes[..0]),
    };
    let bad =
        || FieldError::new(field, format!("{} is not a non-negative decimal number", quote(bytes)));
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let whole_value =
        if whole.is_empty() { 0 } else { parse_u64(field, whole).map_err(|_| bad())? };
    let mut fraction_value = 0_u64;
    for (index, &byte) in fraction.iter().enumerate() {
        if !byte.is_ascii_digit() {
            return Err(bad());
        }
        if (index as u32) < digits {
            fraction_value = fraction_value * 10 + u64::from(byte - b'0');
        }
    }
    let used = (fraction.len() as u64).min(u64::from(digits)) as u32;
    fraction_value *= 10_u64.pow(digits - used);
    whole_value
        .checked_mul(10_u64.pow(digits))
        .and_then(|ns| ns.checked_add(fraction_value))
        .ok_or_else(|| {
            FieldError::new(field, format!("{} overflows u64 nanoseconds", quote(bytes)))
        })
}

#[cfg(test)]
mod tests {
    use rand::{RngCore, SeedableRng};
    use rand_pcg::Pcg64;

    use super::*;

    #[test]
    fn the_msr_fast_path_agrees_with_the_validating_parser() {
        // Goal: on valid lines and on every kind of damage, the one-pass MSR parser
        // either declines (None) or returns exactly what the validating parser returns.
        // Method: lines built from random fields, some valid, some mutated.
        let mut rng = Pcg64::seed_from_u64(0x9E37_79B9_7F4A_7C15);
        let mut next = move || rng.next_u64();
        let pieces: [&[u8]; 12] = [
            b"",
            b" ",
            b"-",
            b"0",
            b"99999999999999999999",
            b"Read",
            b"write",
            b"4k",
            b",",
            b"\t",
            b"18446744073709551615",
            b"x",
        ];
        let mut fast_taken = 0;
        for _ in 0..20_000 {
            let mut fields: Vec<Vec<u8>> = vec![
                (128_166_372_000_000_000 + next() % 1_000_000_000).to_string().into_bytes(),
                b"hm".to_vec(),
                (next() % 5).to_string().into_bytes(),
                if next() % 2 == 0 { b"Read".to_vec() } else { b"Write".to_vec() },
                (next() % (1 << 40)).to_string().into_bytes(),
                (next() % 70_000).to_string().into_bytes(),
                (next() % 100_000).to_string().into_bytes(),
            ];
            if next() % 3 == 0 {
                let field = (next() % 7) as usize;
                let piece = pieces[(next() % pieces.len() as u64) as usize];
                match next() % 3 {
                    0 => fields[field] = piece.to_vec(),
                    1 => fields[field].extend_from_slice(piece),
                    _ => fields[field].splice(0..0, piece.iter().copied()).for_each(drop),
                }
            }
            let line = fields.join(&b","[..]);
            let slow = {
                let [time, host, disk, kind, offset, size, response] =
                    match split_comma(&line, &MSR_FIELDS, false) {
                        Ok(fields) => fields,
                        Err(_) => {
                            assert!(
                                parse_msr_fast(&line).is_none(),
                                "fast path took {:?}",
                                String::from_utf8_lossy(&line)
                            );
                            continue;
                        }
                    };
                let _ = (time, host, disk, kind, offset, size, response);
                parse_msr(&line).ok().map(|p| {
                    (
                        p.timestamp_ns,
                        p.host.to_vec(),
                        p.number,
                        p.offset_bytes,
                        p.size_bytes,
                        p.kind,
                    )
                })
            };
            if let Some(fast) = parse_msr_fast(&line) {
                fast_taken += 1;
                let fast = (
                    fast.timestamp_ns,
                    fast.host.to_vec(),
                    fast.number,
                    fast.offset_bytes,
                    fast.size_bytes,
                    fast.kind,
                );
                assert_eq!(Some(fast), slow, "line {:?}", String::from_utf8_lossy(&line));
            }
        }
        assert!(fast_taken > 10_000, "the fast path took only {fast_taken} lines");
    }

    #[test]
    fn eight_digits_agrees_with_a_plain_loop() {
        // Goal: the eight-at-a-time path parses exactly what a digit loop does and
        // refuses every non-digit byte in any position, including bytes just outside
        // the digit range and bytes whose +6 would carry.
        for text in
            ["00000000", "12345678", "99999999", "128166372000000000", "9", "1234567890123456789"]
        {
            assert_eq!(
                parse_u64("F", text.as_bytes()).unwrap(),
                text.parse::<u64>().unwrap(),
                "{text}"
            );
        }
        for bad in [b'/', b':', b'a', b' ', 0xFA, 0xFF, 0x00, b'0' + 10] {
            for position in 0..8 {
                let mut text = *b"12345678";
                text[position] = bad;
                assert!(eight_digits(&text).is_none(), "{text:?} accepted");
                assert!(parse_u64("F", &text).is_err());
            }
        }
    }

    #[test]
    fn integers_parse_exactly_and_refuse_junk() {
        // Goal: the hand integer parser agrees with std on valid input and names the
        // field on junk, overflow and emptiness.
        for text in ["0", "7", "18446744073709551615", "0000000000000000000042"] {
            assert_eq!(parse_u64("F", text.as_bytes()), Ok(text.parse::<u64>().unwrap()));
        }
        assert_eq!(
            parse_u64("Size", b"4k").unwrap_err().message,
            "\"4k\" is not an unsigned integer"
        );
        assert!(parse_u64("F", b"18446744073709551616").unwrap_err().message.contains("overflows"));
        assert!(parse_u64("F", b"-1").is_err());
        assert_eq!(parse_u64("F", b"").unwrap_err().message, "is empty");
    }

    #[test]
    fn decimals_become_nanoseconds() {
        // Goal: decimal times in ms and s convert exactly, sub-ns digits are dropped,
        // and malformed numbers are refused.
        assert_eq!(parse_decimal("T", b"223.412", TimeUnit::Millis), Ok(223_412_000));
        assert_eq!(parse_decimal("T", b"0.000", TimeUnit::Millis), Ok(0));
        assert_eq!(parse_decimal("T", b"12", TimeUnit::Millis), Ok(12_000_000));
        assert_eq!(parse_decimal("T", b"0.551706", TimeUnit::Seconds), Ok(551_706_000));
        assert_eq!(parse_decimal("T", b"1.0000000019", TimeUnit::Seconds), Ok(1_000_000_001));
        assert_eq!(parse_decimal("T", b".5", TimeUnit::Seconds), Ok(500_000_000));
        for junk in [&b"."[..], b"1e3", b"-1.0", b"1.2.3", b"", b"1.x"] {
            assert!(parse_decimal("T", junk, TimeUnit::Millis).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn filetime_converts_to_unix_ns() {
        // Goal: the MSR trace start 128166372000000000 is 2007-02-22 17:00 UTC
        // (1172163600 s since the Unix epoch).
        assert_eq!(filetime_to_unix_ns(128_166_372_000_000_000), Ok(1_172_163_600_000_000_000));
        assert!(filetime_to_unix_ns(5).is_err());
        assert!(filetime_to_unix_ns(u64::MAX).is_err());
    }

    #[test]
    fn the_eighteen_digit_timestamp_path_refuses_every_bad_digit() {
        // Goal: a non-digit in any of the 18 positions the timestamp fast path reads
        // sixteen at a time sends the line to the validating parser, which names the
        // field; a good line gives the same value either way. Method: each position.
        let good = b"128166386783630075,hm,0,Write,3164164096,40960,2896";
        assert_eq!(filetime_field(good).unwrap().0, 128_166_386_783_630_075);
        assert_eq!(filetime_field(good), leading_number(good));
        for position in 0..18 {
            for bad in [b'/', b':', b' ', 0xFA] {
                let mut line = *good;
                line[position] = bad;
                assert!(filetime_field(&line).is_none(), "position {position} byte {bad}");
                assert_eq!(parse_line(Format::Msr, &line).unwrap_err().field, "Timestamp");
            }
        }
        // Other widths take the digit-by-digit path.
        assert_eq!(filetime_field(b"1281663867836300751,hm").unwrap().0, 1_281_663_867_836_300_751);
        assert_eq!(filetime_field(b"12816638678363007,hm").unwrap().0, 12_816_638_678_363_007);
    }

    #[test]
    fn msr_line_parses() {
        // Goal: a real MSR line parses into its fields, Type in any case.
        let line = b"128166386783630075,hm,0,write,3164164096,40960,2896";
        let parsed = parse_line(Format::Msr, line).unwrap();
        assert_eq!(parsed.host, b"hm");
        assert_eq!(parsed.number, 0);
        assert_eq!(parsed.kind, IoKind::Write);
        assert_eq!(parsed.offset_bytes, 3_164_164_096);
        assert_eq!(parsed.size_bytes, 40_960);
    }
}
