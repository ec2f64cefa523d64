//! The supported input formats, their names, and detection from a file's first bytes.
//! The heuristics are specified in `docs/format/trace.md`; keep the two in step.

use std::fmt;
use std::str::FromStr;

use crate::TimeBase;
use crate::binary::MAGIC;

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    Msr,
    /// UMass/SPC CSV: `ASU,LBA,Size,Opcode,Timestamp[,...]`.
    Spc,
    /// DiskSim ASCII: `ArrivalTime_ms DeviceNumber StartLBA_sectors Size_sectors Type`.
    Disksim,
    /// MQSim ASCII: like DiskSim with the arrival time in integer nanoseconds.
    Mqsim,
    /// io_replayer/Heimdall ASCII: `Timestamp_ms DeviceID Offset_bytes Size_bytes Type`.
    Replayer,
    /// CloudPhysics vSCSI binary, record versions 1 (32 bytes) and 2 (40 bytes).
    Vscsi,
    /// CloudPhysics CSV as converted by somnus: `timestamp_us,op,lbn_512B,size_bytes`.
    CloudphysicsCsv,
    /// somnus's own compact binary format (`docs/format/trace.md`).
    Somnus,
}

/// The names of all formats in detection order, for error messages.
pub(crate) const TRIED: &str =
    "somnus, vscsi, cloudphysics-csv, msr, spc, mqsim, disksim, replayer";

impl Format {
    /// Every format, in the order of [`Format::name`]'s documentation.
    pub const ALL: [Format; 8] = [
        Format::Msr,
        Format::Spc,
        Format::Disksim,
        Format::Mqsim,
        Format::Replayer,
        Format::Vscsi,
        Format::CloudphysicsCsv,
        Format::Somnus,
    ];

    /// The name accepted by [`Format::from_str`] and printed by `Display`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Spc => "spc",
            Format::Disksim => "disksim",
            Format::Mqsim => "mqsim",
            Format::Replayer => "replayer",
            Format::Vscsi => "vscsi",
            Format::CloudphysicsCsv => "cloudphysics-csv",
            Format::Somnus => "somnus",
        }
    }

    /// The time base of the format, or `None` when the file says (somnus binary).
    pub fn time_base(self) -> Option<TimeBase> {
        match self {
            Format::Msr => Some(TimeBase::UnixEpoch),
            Format::Somnus => None,
            _ => Some(TimeBase::Relative),
        }
    }

    /// Whether the format is binary (errors are located by byte offset, not line).
    pub fn is_binary(self) -> bool {
        matches!(self, Format::Vscsi | Format::Somnus)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that is not one of [`Format::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown trace format {0:?}; expected one of msr, spc, disksim, mqsim, replayer, vscsi, cloudphysics-csv, somnus"
)]
pub struct FormatNameError(pub String);

impl FromStr for Format {
    type Err = FormatNameError;

    /// Accepts the names of [`Format::name`], in any case.
    fn from_str(text: &str) -> Result<Format, FormatNameError> {
        Format::ALL
            .into_iter()
            .find(|format| format.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| FormatNameError(text.to_owned()))
    }
}

/// How many bytes of a file detection looks at.
pub(crate) const SAMPLE_BYTES: usize = 128 * 1024;
/// How many data lines of a whitespace format detection looks at.
const SAMPLE_LINES_MAX: usize = 1000;
/// An integer arrival time at or above this in the sample means nanoseconds (MQSim):
/// it is 1 ms in nanoseconds but 16.7 minutes in milliseconds.
const MQSIM_TIME_MIN: u64 = 1_000_000;
/// The CloudPhysics CSV header written by our converter.
pub(crate) const CLOUDPHYSICS_HEADER: &[u8] = b"timestamp_us,op,lbn_512B,size_bytes";

/// Detects the format of a file from its first (decompressed) bytes. The error is the
/// reason detection failed, for [`crate::TraceError::UnknownFormat`].
pub(crate) fn detect(sample: &[u8]) -> Result<Format, String> {
    if sample.is_empty() {
        return Err("the file is empty".to_owned());
    }
    if sample.starts_with(&MAGIC) {
        return Ok(Format::Somnus);
    }
    if !looks_like_text(sample) {
        return match crate::vscsi::detect_version(sample) {
            Some(_) => Ok(Format::Vscsi),
            None => Err("binary content matches neither somnus nor vSCSI v1/v2 records".into()),
        };
    }
    detect_text(sample)
}

/// Text is printable ASCII plus tab, CR and LF; anything else is binary.
fn looks_like_text(sample: &[u8]) -> bool {
    let head = &sample[..sample.len().min(4096)];
    head.iter().all(|&byte| {
        byte == b'\t' || byte == b'\n' || byte == b'\r' || (0x20..0x7f).contains(&byte)
    })
}

fn detect_text(sample: &[u8]) -> Result<Format, String> {
    // Only complete lines count: the sample may end in the middle of one.
    let complete = match memchr::memrchr(b'\n', sample) {
        Some(end) if sample.len() == SAMPLE_BYTES => &sample[..end],
        _ => sample,
    };
    let mut lines = complete.split(|&byte| byte == b'\n').map(trim_line).filter(|l| !l.is_empty());
    let Some(first) = lines.next() else {
        return Err("the file has no non-blank line".to_owned());
    };
    if first.len() >= CLOUDPHYSICS_HEADER.len()
        && first[..CLOUDPHYSICS_HEADER.len()].eq_ignore_ascii_case(CLOUDPHYSICS_HEADER)
    {
        return Ok(Format::CloudphysicsCsv);
    }
    let first_data = if starts_with_digit(first) { Some(first) } else { lines.next() };
    let Some(data) = first_data else {
        return Err("the file has a header line but no data line".to_owned());
    };
    if data.contains(&b',') {
        return detect_comma(data);
    }
    let data_lines = std::iter::once(data).chain(lines).take(SAMPLE_LINES_MAX);
    detect_whitespace(data_lines)
}

fn detect_comma(line: &[u8]) -> Result<Format, String> {
    let fields: Vec<&[u8]> = line.split(|&byte| byte == b',').map(trim_spaces).collect();
    if fields.len() == 7 {
        let kind = fields[3];
        if kind.eq_ignore_ascii_case(b"read") || kind.eq_ignore_ascii_case(b"write") {
            return Ok(Format::Msr);
        }
    }
    if fields.len() >= 5 && matches!(fields[3], b"r" | b"R" | b"w" | b"W") {
        return Ok(Format::Spc);
    }
    Err(format!(
        "comma-separated line with {} fields matches neither MSR (7 fields, 4th Read/Write) nor SPC (5+ fields, 4th r/w)",
        fields.len()
    ))
}

fn detect_whitespace<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Result<Format, String> {
    let mut all_integer_times = true;
    let mut time_max = 0_u64;
    let mut sizes_look_like_bytes = true;
    let mut line_count = 0_usize;
    for line in lines {
        let fields: Vec<&[u8]> =
            line.split(|b| *b == b' ' || *b == b'\t').filter(|f| !f.is_empty()).collect();
        if fields.len() != 5 {
            return Err(format!(
                "whitespace-separated line with {} fields, expected 5",
                fields.len()
            ));
        }
        line_count += 1;
        match crate::text::parse_u64("ArrivalTime", fields[0]) {
            Ok(time) => time_max = time_max.max(time),
            Err(_) => all_integer_times = false,
        }
        let size = crate::text::parse_u64("Size", fields[3]).map_err(|e| e.message)?;
        if size < 512 || size % 512 != 0 {
            sizes_look_like_bytes = false;
        }
    }
    assert!(line_count > 0, "detect_whitespace needs a data line");
    if all_integer_times && time_max >= MQSIM_TIME_MIN {
        return Ok(Format::Mqsim);
    }
    Ok(if sizes_look_like_bytes { Format::Replayer } else { Format::Disksim })
}

/// A line without its trailing CR (Windows line ends) and surrounding spaces.
fn trim_line(line: &[u8]) -> &[u8] {
    trim_spaces(line.strip_suffix(b"\r").unwrap_or(line))
}

pub(crate) fn trim_spaces(mut field: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = field {
        field = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = field {
        field = rest;
    }
    field
}

pub(crate) fn starts_with_digit(line: &[u8]) -> bool {
    line.first().is_some_and(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        // Goal: every format's name parses back to it, in any case; others are refused.
        for format in Format::ALL {
            assert_eq!(format.name().parse::<Format>(), Ok(format));
            assert_eq!(format.name().to_uppercase().parse::<Format>(), Ok(format));
        }
        assert!("csv".parse::<Format>().is_err());
    }

    #[test]
    fn detects_each_text_format() {
        // Goal: each text format is recognised from a small inline sample, with and
        // without a header line. Method: one sample per format through `detect`.
        let cases: [(&[u8], Format); 9] = [
            (b"128166372003061629,hm,0,Read,383496192,32768,41286\n", Format::Msr),
            (b"Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n128166372003061629,hm,0,write,1,512,4\n", Format::Msr),
            (b"0,20941264,8192,W,0.551706\n1,20939840,8192,r,0.554041,x\n", Format::Spc),
            (b"0.000 5 174224064 16 1\n0.221 5 162947904 16 1\n", Format::Disksim),
            (b"11413000 0 657728 16 1\n11565000 1 31244784 64 1\n", Format::Mqsim),
            (b"0.000 0 200626176 4096 0\n223.412 0 3159347200 36864 0\n", Format::Replayer),
            (b"12 0 200626176 4096 0\n13 0 3159347200 36864 0\n", Format::Replayer),
            (b"12 0 200626176 16 0\n13 0 3159347200 8 0\n", Format::Disksim),
            (b"timestamp_us,op,lbn_512B,size_bytes\n5633898368802,W,42932745,512\n", Format::CloudphysicsCsv),
        ];
        for (sample, format) in cases {
            assert_eq!(detect(sample), Ok(format), "{}", String::from_utf8_lossy(sample));
        }
    }

    #[test]
    fn undetectable_samples_say_why() {
        // Goal: junk is refused with a reason instead of being guessed.
        assert!(detect(b"").unwrap_err().contains("empty"));
        assert!(detect(b"hello world\n").unwrap_err().contains("header line but no data"));
        assert!(detect(b"1,2,3\n").unwrap_err().contains("3 fields"));
        assert!(detect(b"1 2 3\n").unwrap_err().contains("3 fields"));
        assert!(detect(&[0xff, 0x00, 0x13]).unwrap_err().contains("vSCSI"));
    }
}
