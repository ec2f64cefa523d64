//! Helpers shared by the integration tests: scratch files in a per-process directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A scratch directory for one test, removed when dropped, so runs leave nothing in the
/// system's temporary directory.
pub(crate) struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh scratch directory for one test, emptied if a killed run left it behind.
pub(crate) fn scratch_dir(test: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("somnus-trace-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

/// Writes `content` to `name` in `dir` and returns the path.
pub(crate) fn write_file(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

/// Gzip-compresses `content`.
pub(crate) fn gzip(content: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(content).unwrap();
    encoder.finish().unwrap()
}
