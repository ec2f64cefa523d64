//! Helpers shared by the integration tests: scratch files in a per-process directory.
#![allow(dead_code)]

use std::path::PathBuf;

/// A fresh scratch directory for one test, removed and recreated on each call.
pub(crate) fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("somnus-trace-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `content` to `name` in `dir` and returns the path.
pub(crate) fn write_file(dir: &std::path::Path, name: &str, content: &[u8]) -> PathBuf {
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
