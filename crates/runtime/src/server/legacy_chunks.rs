//! The chunk files of earlier builds (docs/format/replicas.md, "Chunk files"): one
//! file per chunk, each 4 KiB block with a header of its version, stamp and CRC-32C.
//! A server that finds them at start moves their blocks into its packs
//! (`server::packs`) and removes them; this reads them for that.

use std::path::{Path, PathBuf};

use somnus_core::cluster::store::BLOCK_BYTES;
use somnus_core::cluster::{ChunkId, ChunkIndex, Stamp};
use somnus_types::{ChunkGroupId, ObjectId, Version};

use crate::files::record::u32_at;

const MAGIC: &[u8; 8] = b"SOMNUSCK";
const FORMAT: u32 = 1;
/// Bytes of the file header: magic, format, group, object, chunk, blocks, CRC-32C.
const FILE_HEADER_BYTES: u64 = 64;
/// Bytes of a block's header: version, stamp, CRC-32C of the three, padding.
const BLOCK_HEADER_BYTES: u64 = 24;

/// A written block of a chunk file, as it is on disk (its checksum not checked: a
/// corrupt block moves into the packs corrupt, to be repaired there).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyBlock {
    pub group: ChunkGroupId,
    pub chunk: ChunkId,
    pub index: u64,
    pub version: Version,
    pub stamp: Stamp,
    /// The CRC-32C of the version, the stamp and the bytes, as the file holds it.
    pub crc: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChunkFileError {
    #[error("cannot read the chunk directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot read the chunk file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "the chunk file {path} has a damaged header ({what}); its blocks cannot be trusted: \
         move it out of the directory, and the server gets the chunk back from its replicas"
    )]
    Header { path: PathBuf, what: String },
}

/// Where a chunk file's block data starts: past the headers, on a block boundary.
fn data_start(chunk_blocks: u64) -> u64 {
    (FILE_HEADER_BYTES + chunk_blocks * BLOCK_HEADER_BYTES).div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

fn file_name(chunk: ChunkId) -> String {
    format!("{:016x}-{:08x}.chunk", chunk.object.0, chunk.chunk.0)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(eight)
}

/// A parsed file header: the group and chunk, and the blocks the file has room for.
fn parse_header(header: &[u8]) -> Result<(ChunkGroupId, ChunkId, u64), String> {
    if header.len() < FILE_HEADER_BYTES as usize {
        return Err(format!("{} bytes, shorter than a header", header.len()));
    }
    if &header[0..8] != MAGIC {
        return Err("not a somnus chunk file".into());
    }
    if u32_at(header, 60) != crc32c::crc32c(&header[..60]) {
        return Err("checksum mismatch".into());
    }
    let format = u32_at(header, 8);
    if format != FORMAT {
        return Err(format!("format {format}, this build reads {FORMAT}"));
    }
    let chunk =
        ChunkId { object: ObjectId(u64_at(header, 16)), chunk: ChunkIndex(u32_at(header, 24)) };
    Ok((ChunkGroupId(u32_at(header, 12)), chunk, u64::from(u32_at(header, 28))))
}

/// The chunk files in `dir` (`.tmp` leftovers aside), in name order.
pub fn files(dir: &Path) -> Result<Vec<PathBuf>, ChunkFileError> {
    let dir_error = |source| ChunkFileError::Dir { path: dir.to_owned(), source };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(dir_error)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(dir_error)?;
    paths.retain(|p| p.extension().and_then(|e| e.to_str()) == Some("chunk"));
    paths.sort();
    Ok(paths)
}

/// Every written block of the chunk file at `path`, of a cluster whose chunks are
/// `chunk_size_bytes`.
pub fn read(path: &Path, chunk_size_bytes: u64) -> Result<Vec<LegacyBlock>, ChunkFileError> {
    let read_error = |source| ChunkFileError::Read { path: path.to_owned(), source };
    let bytes = std::fs::read(path).map_err(read_error)?;
    let damaged = |what: String| ChunkFileError::Header { path: path.to_owned(), what };
    let (group, chunk, blocks) = parse_header(&bytes).map_err(damaged)?;
    let expected = chunk_size_bytes.div_ceil(BLOCK_BYTES);
    if blocks != expected || path.file_name() != Some(file_name(chunk).as_ref()) {
        return Err(damaged(format!(
            "it names {blocks} blocks of chunk {chunk:?}, not this cluster's {expected} blocks \
             under this file name"
        )));
    }
    let start = data_start(blocks) as usize;
    let mut found = Vec::new();
    for index in 0..blocks {
        let at = (FILE_HEADER_BYTES + index * BLOCK_HEADER_BYTES) as usize;
        let (version, stamp) = (Version(u64_at(&bytes, at)), Stamp(u64_at(&bytes, at + 8)));
        if version.0 == 0 {
            continue;
        }
        // A file cut short (its size lost in a crash) reads as zeros past its end.
        let data_at = start + (index * BLOCK_BYTES) as usize;
        let mut data = vec![0u8; BLOCK_BYTES as usize];
        if let Some(held) = bytes.get(data_at..) {
            let n = held.len().min(data.len());
            data[..n].copy_from_slice(&held[..n]);
        }
        let crc = u32_at(&bytes, at + 16);
        found.push(LegacyBlock { group, chunk, index, version, stamp, crc, data });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture of format 1 (written by the build that wrote chunk files) reads
    /// back as it was written, its garbled block as it is.
    #[test]
    fn chunk_files_of_format_1_are_read() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/chunks-v1");
        let paths = files(&dir).unwrap();
        assert_eq!(paths.len(), 2);
        let first = read(&paths[0], 64 << 10).unwrap();
        let indices: Vec<u64> = first.iter().map(|b| b.index).collect();
        assert_eq!(indices, [0, 1, 5]);
        assert!(first.iter().all(|b| b.group == ChunkGroupId(3)));
        assert_eq!(first[0].data, vec![0xa1; BLOCK_BYTES as usize]);
        let crc = |b: &LegacyBlock| {
            let crc = crc32c::crc32c(&b.version.0.to_le_bytes());
            let crc = crc32c::crc32c_append(crc, &b.stamp.0.to_le_bytes());
            crc32c::crc32c_append(crc, &b.data)
        };
        assert_eq!(crc(&first[0]), first[0].crc);
        assert_ne!(crc(&first[2]), first[2].crc, "block 5 was garbled");
        let second = read(&paths[1], 64 << 10).unwrap();
        assert_eq!((second[0].index, second[0].version), (15, Version(9)));
        let error = read(&paths[0], 1 << 20).unwrap_err().to_string();
        assert!(error.contains("names 16 blocks"), "{error}");
    }
}
