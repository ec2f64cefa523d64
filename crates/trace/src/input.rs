//! Opening a trace file (plain or gzip, told apart by the gzip magic 1f 8b) and
//! splitting text into lines without allocating per line.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use memchr::memchr;

use crate::TraceError;

/// The gzip magic number (RFC 1952, section 2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The read size of the compressed side of a gzip stream.
const GZIP_READ_BYTES: usize = 256 * 1024;

/// A readable, possibly decompressing, byte stream of one trace file.
pub(crate) type Input = Box<dyn Read + Send>;

/// Opens `path`, decompressing if it starts with the gzip magic. Multi-member gzip
/// files (concatenated `gzip` outputs) are read to the end.
pub(crate) fn open(path: &Path) -> Result<Input, TraceError> {
    let io_error = |source| TraceError::Io { path: path.to_owned(), source };
    let mut file = File::open(path).map_err(io_error)?;
    let mut magic = [0_u8; 2];
    let magic_bytes = read_up_to(&mut file, &mut magic).map_err(io_error)?;
    file.rewind().map_err(io_error)?;
    if magic_bytes == 2 && magic == GZIP_MAGIC {
        let compressed = BufReader::with_capacity(GZIP_READ_BYTES, file);
        Ok(Box::new(flate2::read::MultiGzDecoder::new(compressed)))
    } else {
        Ok(Box::new(file))
    }
}

/// Reads the first (decompressed) bytes of `path`, up to `limit`, for detection.
pub(crate) fn sample(path: &Path, limit: usize) -> Result<Vec<u8>, TraceError> {
    let mut input = open(path)?;
    let mut buffer = vec![0_u8; limit];
    let length = read_up_to(&mut input, &mut buffer)
        .map_err(|source| TraceError::Io { path: path.to_owned(), source })?;
    buffer.truncate(length);
    Ok(buffer)
}

/// Fills `buffer` as far as the stream allows; returns the number of bytes read,
/// which is less than the buffer only at end of stream.
pub(crate) fn read_up_to(source: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match source.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    assert!(filled <= buffer.len());
    Ok(filled)
}

/// The line buffer size, which is also the longest line accepted.
pub(crate) const LINE_BUFFER_BYTES: usize = 256 * 1024;

/// Why the next line could not be produced.
#[derive(Debug)]
pub(crate) enum LineError {
    Io(io::Error),
    /// A line longer than [`LINE_BUFFER_BYTES`] starts at this byte offset.
    TooLong(u64),
}

/// Splits a byte stream into lines in a fixed buffer; each line is a slice into it,
/// valid until the next call. Lines end at LF; a CR before it is dropped; the last
/// line may lack its LF.
pub(crate) struct LineReader<R> {
    source: R,
    buffer: Box<[u8]>,
    start: usize,
    end: usize,
    end_of_stream: bool,
    /// The 1-based number of the line last returned.
    line_number: u64,
    /// The stream offset of `buffer[0]`.
    buffer_offset: u64,
}

impl<R: Read> LineReader<R> {
    pub(crate) fn new(source: R) -> LineReader<R> {
        LineReader {
            source,
            buffer: vec![0_u8; LINE_BUFFER_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            end_of_stream: false,
            line_number: 0,
            buffer_offset: 0,
        }
    }

    /// The next line and its 1-based number, or `None` at the end of the stream.
    pub(crate) fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, LineError> {
        loop {
            if let Some(length) = memchr(b'\n', &self.buffer[self.start..self.end]) {
                let line_start = self.start;
                self.start += length + 1;
                self.line_number += 1;
                return Ok(Some((
                    self.line_number,
                    strip_cr(&self.buffer[line_start..line_start + length]),
                )));
            }
            if self.end_of_stream {
                if self.start == self.end {
                    return Ok(None);
                }
                let line_start = self.start;
                self.start = self.end;
                self.line_number += 1;
                return Ok(Some((self.line_number, strip_cr(&self.buffer[line_start..self.end]))));
            }
            self.refill()?;
        }
    }

    /// Moves the unread tail to the front and reads more after it.
    fn refill(&mut self) -> Result<(), LineError> {
        assert!(!self.end_of_stream);
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.buffer_offset += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buffer.len() {
            return Err(LineError::TooLong(self.buffer_offset));
        }
        loop {
            match self.source.read(&mut self.buffer[self.end..]) {
                Ok(0) => {
                    self.end_of_stream = true;
                    return Ok(());
                }
                Ok(count) => {
                    self.end += count;
                    assert!(self.end <= self.buffer.len());
                    return Ok(());
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(LineError::Io(error)),
            }
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_refills() {
        // Goal: lines are exact whether or not they straddle a buffer refill, CRLF and
        // a missing final LF included. Method: a reader that returns one byte at a time.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
                let Some((&first, rest)) = self.0.split_first() else { return Ok(0) };
                buffer[0] = first;
                self.0 = rest;
                Ok(1)
            }
        }
        let mut reader = LineReader::new(Trickle(b"a,b\r\n\nlast"));
        let mut lines = Vec::new();
        while let Some((_, line)) = reader.next_line().unwrap() {
            lines.push(line.to_vec());
        }
        assert_eq!(lines, vec![b"a,b".to_vec(), b"".to_vec(), b"last".to_vec()]);
        assert_eq!(reader.line_number, 3);
    }

    #[test]
    fn overlong_line_is_an_error() {
        // Goal: a line longer than the buffer is refused instead of growing memory.
        let data = vec![b'x'; LINE_BUFFER_BYTES + 10];
        let mut reader = LineReader::new(&data[..]);
        assert!(matches!(reader.next_line(), Err(LineError::TooLong(0))));
    }
}
