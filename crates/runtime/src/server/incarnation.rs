//! A server's incarnation: a number in its data directory that each start raises by
//! one and makes durable before the server sends anything, so every run's heartbeats
//! are newer than the runs before it (`ServerTime`), whatever its clock (which starts
//! at 0 with the process) reads. The file holds the number in decimal and a newline.

use std::path::{Path, PathBuf};

use crate::files::durable;

/// The file's name in the server's data directory.
pub const FILE_NAME: &str = "incarnation";

#[derive(Debug, thiserror::Error)]
pub enum IncarnationError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: holds {found:?}, not a server's incarnation (a whole number)")]
    Corrupt { path: PathBuf, found: String },
}

/// The incarnation of the run starting now in `dir`: one more than the last run's
/// (1 on a new disk), made durable before it is returned.
pub fn next(dir: &Path) -> Result<u64, IncarnationError> {
    let path = dir.join(FILE_NAME);
    let io = |source| IncarnationError::Io { path: path.clone(), source };
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim_end().parse::<u64>().map_err(|_| IncarnationError::Corrupt {
            path: path.clone(),
            found: text.chars().take(40).collect(),
        })?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(error) => return Err(io(error)),
    };
    let next = last
        .checked_add(1)
        .ok_or_else(|| IncarnationError::Corrupt { path: path.clone(), found: last.to_string() })?;
    durable::replace(&path, format!("{next}\n").as_bytes()).map_err(io)?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_start_is_a_greater_incarnation_and_a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(next(dir.path()).unwrap(), 1);
        assert_eq!(next(dir.path()).unwrap(), 2);
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap(), "2\n");
        std::fs::write(dir.path().join(FILE_NAME), "two\n").unwrap();
        let error = next(dir.path()).unwrap_err().to_string();
        assert!(error.contains("incarnation") && error.contains("\"two\\n\""), "{error}");
        std::fs::write(dir.path().join(FILE_NAME), "two\n").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap(), "two\n");
    }
}
