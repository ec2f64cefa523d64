//! Standard output and error as a command-line tool should treat them.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe (`somnus demo | head -1`) fails
//! with `BrokenPipe`, and `println!` panics on it. Every line somnus prints goes
//! through here instead: a closed stdout becomes [`StdoutClosed`], which `main` turns
//! into a quiet exit with status 0, as `cat` does; any other failure to write is an
//! ordinary error. Notes and progress on stderr are best effort: a closed stderr never
//! stops a command.

use std::fmt::Display;
use std::io::{self, Write};

/// Standard output was closed by its reader: the command stops quietly.
#[derive(Debug)]
pub(crate) struct StdoutClosed;

impl Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Turns a failed write to stdout into the command's error.
fn stdout_error(error: io::Error) -> anyhow::Error {
    if error.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(error).context("writing to standard output")
    }
}

/// Writes `text` to stdout and flushes it.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    write_with(|out| out.write_all(text.as_bytes()))
}

/// Runs `write` on the locked stdout, then flushes it.
pub(crate) fn write_with(
    write: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<()>,
) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    write(&mut out).and_then(|()| out.flush()).map_err(stdout_error)
}

/// Writes a line to stderr, ignoring a closed stderr.
pub(crate) fn note(line: impl Display) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// Prints a line (or nothing but a newline) to stdout; evaluates to `anyhow::Result<()>`.
macro_rules! outln {
    () => {
        $crate::output::print("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::print(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints to stdout without a newline; evaluates to `anyhow::Result<()>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(&format!($($arg)*))
    };
}

/// Writes a line to stderr, best effort (progress and notes).
macro_rules! noteln {
    ($($arg:tt)*) => {
        $crate::output::note(format_args!($($arg)*))
    };
}

/// The message of a failed command: each cause once, on one line. A cause whose text
/// the message already holds (an error that names its source in its own text) is not
/// repeated. Never a backtrace: those are for bugs, which panic.
pub(crate) fn error_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        // Goal: an error whose text names its source prints the source once.
        let source = io::Error::other("disk on fire");
        let error = anyhow::Error::new(io::Error::other(format!("reading x: {source}")))
            .context("opening the log");
        assert_eq!(error_message(&error), "opening the log: reading x: disk on fire");
        let chained = anyhow::Error::new(source).context("reading x").context("opening");
        assert_eq!(error_message(&chained), "opening: reading x: disk on fire");
    }
}
