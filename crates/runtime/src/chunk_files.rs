//! A storage server's chunk replicas in files: one file per chunk, each 4 KiB block
//! with a header of its version, stamp and CRC-32C (docs/format/chunk-file.md).
//!
//! The core's [`ChunkStore`](somnus_core::cluster::store::ChunkStore) calls this as it
//! changes blocks ([`ChunkData`]), so the files follow exactly the blocks a write, a
//! repair or a copy lands on. Writes go to the page cache: the journal made each
//! change durable before the core applied it, and [`ChunkFiles::sync`] syncs the files
//! before the journals that hold their writes are removed. A new file is created whole (written, synced, renamed
//! into place, its directory synced), so a crash never leaves half a header.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use somnus_core::cluster::store::{BLOCK_BYTES, ChunkData, StoreOp};
use somnus_core::cluster::{ChunkId, ChunkIndex, Stamp};
use somnus_types::{ChunkGroupId, ObjectId, Version};

use crate::durable;
use crate::record::u32_at;

const MAGIC: &[u8; 8] = b"SOMNUSCK";
const FORMAT: u32 = 1;
/// Bytes of the file header: magic, format, group, object, chunk, blocks, CRC-32C.
const FILE_HEADER_BYTES: u64 = 64;
/// Bytes of a block's header: version, stamp, CRC-32C of the three, padding.
const BLOCK_HEADER_BYTES: u64 = 24;

/// A block found on disk when the files are opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundBlock {
    pub group: ChunkGroupId,
    pub chunk: ChunkId,
    pub index: u64,
    pub version: Version,
    pub stamp: Stamp,
    /// Whether its checksum holds (a block that fails it is corrupt: a read of it is
    /// served from another replica, which repairs it).
    pub intact: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ChunkFileError {
    #[error("cannot use the chunk directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot read the chunk file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "the chunk file {path} has a damaged header ({what}); its blocks cannot be trusted: \
         move it out of the directory, and the server gets the chunk back from its replicas"
    )]
    Header { path: PathBuf, what: String },
}

/// I/O errors met while the core wrote or read blocks: the core's calls cannot fail, so
/// the server's task takes these after each step and stops the server on any.
pub type IoErrors = Arc<Mutex<Vec<String>>>;

#[derive(Debug)]
pub struct ChunkFiles {
    dir: PathBuf,
    chunk_blocks: u64,
    /// Shared with a checkpoint, which syncs them without holding these files.
    files: BTreeMap<ChunkId, Arc<File>>,
    /// Files written since the last sync.
    dirty: BTreeSet<ChunkId>,
    errors: IoErrors,
}

/// Where a chunk file's block data starts: past the headers, on a block boundary.
fn data_start(chunk_blocks: u64) -> u64 {
    (FILE_HEADER_BYTES + chunk_blocks * BLOCK_HEADER_BYTES).div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

fn file_name(chunk: ChunkId) -> String {
    format!("{:016x}-{:08x}.chunk", chunk.object.0, chunk.chunk.0)
}

fn block_crc(version: Version, stamp: Stamp, data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&version.0.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &stamp.0.to_le_bytes());
    crc32c::crc32c_append(crc, data)
}

fn file_header(group: ChunkGroupId, chunk: ChunkId, chunk_blocks: u64) -> [u8; 64] {
    let mut header = [0u8; FILE_HEADER_BYTES as usize];
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    header[12..16].copy_from_slice(&group.0.to_le_bytes());
    header[16..24].copy_from_slice(&chunk.object.0.to_le_bytes());
    header[24..28].copy_from_slice(&chunk.chunk.0.to_le_bytes());
    header[28..32].copy_from_slice(&(chunk_blocks as u32).to_le_bytes());
    let crc = crc32c::crc32c(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    header
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

impl ChunkFiles {
    /// Opens (creating it if need be) the chunk directory `dir` for chunks of
    /// `chunk_size_bytes`, and returns every written block found, checked.
    pub fn open(
        dir: &Path,
        chunk_size_bytes: u64,
        errors: IoErrors,
    ) -> Result<(ChunkFiles, Vec<FoundBlock>), ChunkFileError> {
        let dir_error = |source| ChunkFileError::Dir { path: dir.to_owned(), source };
        std::fs::create_dir_all(dir).map_err(dir_error)?;
        let chunk_blocks = chunk_size_bytes.div_ceil(BLOCK_BYTES);
        let mut files = ChunkFiles {
            dir: dir.to_owned(),
            chunk_blocks,
            files: BTreeMap::new(),
            dirty: BTreeSet::new(),
            errors,
        };
        let mut found = Vec::new();
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(dir_error)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(dir_error)?;
        paths.sort();
        for path in paths {
            match path.extension().and_then(|e| e.to_str()) {
                // A file a crash left before its rename: never in use.
                Some("tmp") => std::fs::remove_file(&path).map_err(dir_error)?,
                Some("chunk") => found.extend(files.scan(&path)?),
                _ => {}
            }
        }
        Ok((files, found))
    }

    /// The blocks a chunk file holds, each checked against its checksum.
    fn scan(&mut self, path: &Path) -> Result<Vec<FoundBlock>, ChunkFileError> {
        let read_error = |source| ChunkFileError::Read { path: path.to_owned(), source };
        let bytes = std::fs::read(path).map_err(read_error)?;
        let damaged = |what: String| ChunkFileError::Header { path: path.to_owned(), what };
        let (group, chunk, blocks) = parse_header(&bytes).map_err(damaged)?;
        if blocks != self.chunk_blocks || path.file_name() != Some(file_name(chunk).as_ref()) {
            return Err(damaged(format!(
                "it names {} blocks of chunk {chunk:?}, not this cluster's {} blocks under \
                 this file name",
                blocks, self.chunk_blocks
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
            let data_at = start + (index * BLOCK_BYTES) as usize;
            let data = bytes.get(data_at..data_at + BLOCK_BYTES as usize).unwrap_or_default();
            let intact = data.len() == BLOCK_BYTES as usize
                && u32_at(&bytes, at + 16) == block_crc(version, stamp, data);
            found.push(FoundBlock { group, chunk, index, version, stamp, intact });
        }
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(read_error)?;
        // A file of an earlier build has a sparse data region, maybe cut short (its
        // size was not synced): its space is allocated now where there is room (so
        // no block's write finds the disk full), and a block past the end must read
        // as unwritten, not fail the read of its neighbours.
        if durable::allocate(&file, self.file_bytes()).is_err()
            && (bytes.len() as u64) < self.file_bytes()
        {
            file.set_len(self.file_bytes()).map_err(read_error)?;
        }
        self.files.insert(chunk, Arc::new(file));
        Ok(found)
    }

    /// A chunk file's whole size: headers, then every block.
    fn file_bytes(&self) -> u64 {
        data_start(self.chunk_blocks) + self.chunk_blocks * BLOCK_BYTES
    }

    fn path(&self, chunk: ChunkId) -> PathBuf {
        self.dir.join(file_name(chunk))
    }

    fn error(&self, error: String) {
        if let Ok(mut errors) = self.errors.lock() {
            errors.push(error);
        }
    }

    /// The open file of `chunk`, created whole if it has none yet: its header, and
    /// the space of every block allocated (a block never written reads as unwritten,
    /// its header's version being 0), so no block's write finds the disk full.
    fn file(&mut self, group: ChunkGroupId, chunk: ChunkId) -> std::io::Result<&File> {
        if !self.files.contains_key(&chunk) {
            let path = self.path(chunk);
            let mut bytes = vec![0u8; data_start(self.chunk_blocks) as usize];
            bytes[..FILE_HEADER_BYTES as usize].copy_from_slice(&file_header(
                group,
                chunk,
                self.chunk_blocks,
            ));
            durable::replace_allocated(&path, &bytes, self.file_bytes())?;
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            self.files.insert(chunk, Arc::new(file));
        }
        let file = self.files.get(&chunk).map(|file| &**file);
        file.ok_or_else(|| std::io::Error::other("chunk file vanished"))
    }

    /// Creates the files of the chunks `changes` write to that have none yet.
    fn prepare(&mut self, changes: &[StoreOp]) -> std::io::Result<()> {
        for change in changes {
            match change {
                StoreOp::Apply { group, write, .. } => self.file(*group, write.chunk)?,
                StoreOp::Copy { group, chunk, .. } => self.file(*group, *chunk)?,
                // A repair mends blocks of a file it read; a fence and a free write none.
                StoreOp::Repair { .. } | StoreOp::Fence { .. } | StoreOp::Free { .. } => continue,
            };
        }
        Ok(())
    }

    /// The files written since the last call, to sync: written after this, a file is
    /// taken again at the next.
    fn take_dirty(&mut self) -> Vec<Arc<File>> {
        let dirty = std::mem::take(&mut self.dirty);
        dirty.iter().filter_map(|chunk| self.files.get(chunk).cloned()).collect()
    }

    /// Writes consecutive blocks from `first`, all of `version` by `stamp`: their
    /// bytes in one write, then their headers in one.
    fn write(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        first: u64,
        version: Version,
        stamp: Stamp,
        data: &[u8],
    ) -> std::io::Result<()> {
        let start = data_start(self.chunk_blocks);
        let file = self.file(group, chunk)?;
        file.write_all_at(data, start + first * BLOCK_BYTES)?;
        let mut headers =
            Vec::with_capacity(data.len() / BLOCK_BYTES as usize * BLOCK_HEADER_BYTES as usize);
        for block in data.chunks(BLOCK_BYTES as usize) {
            let mut header = [0u8; BLOCK_HEADER_BYTES as usize];
            header[0..8].copy_from_slice(&version.0.to_le_bytes());
            header[8..16].copy_from_slice(&stamp.0.to_le_bytes());
            header[16..20].copy_from_slice(&block_crc(version, stamp, block).to_le_bytes());
            headers.extend_from_slice(&header);
        }
        file.write_all_at(&headers, FILE_HEADER_BYTES + first * BLOCK_HEADER_BYTES)?;
        self.dirty.insert(chunk);
        Ok(())
    }

    fn read(
        &self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
    ) -> std::io::Result<Result<Bytes, Vec<u64>>> {
        let count = (blocks.end - blocks.start) as usize;
        let mut out = vec![0u8; count * BLOCK_BYTES as usize];
        let Some(file) = self.files.get(&chunk) else { return Ok(Ok(out.into())) };
        let mut headers = vec![0u8; count * BLOCK_HEADER_BYTES as usize];
        file.read_exact_at(&mut headers, FILE_HEADER_BYTES + blocks.start * BLOCK_HEADER_BYTES)?;
        let start = data_start(self.chunk_blocks) + blocks.start * BLOCK_BYTES;
        file.read_exact_at(&mut out, start)?;
        let mut bad = Vec::new();
        for (i, index) in blocks.enumerate() {
            let at = i * BLOCK_HEADER_BYTES as usize;
            let (version, stamp) = (Version(u64_at(&headers, at)), Stamp(u64_at(&headers, at + 8)));
            let data = &mut out[i * BLOCK_BYTES as usize..(i + 1) * BLOCK_BYTES as usize];
            if version.0 == 0 {
                data.fill(0);
            } else if u32_at(&headers, at + 16) != block_crc(version, stamp, data) {
                bad.push(index);
            }
        }
        Ok(if bad.is_empty() { Ok(out.into()) } else { Err(bad) })
    }
}

/// The chunk files, shared by the store (which writes and reads their blocks) and
/// the disk worker, which creates the files a change writes to before the journal
/// takes it ([`SharedChunkFiles::prepare`]): a full disk then fails the change before
/// it is durable, never a block's write after it.
#[derive(Clone, Debug)]
pub struct SharedChunkFiles(Arc<Mutex<ChunkFiles>>);

impl SharedChunkFiles {
    pub fn new(files: ChunkFiles) -> SharedChunkFiles {
        SharedChunkFiles(Arc::new(Mutex::new(files)))
    }

    /// Creates, their space allocated, the files of the chunks `changes` write to.
    pub fn prepare(&self, changes: &[StoreOp]) -> std::io::Result<()> {
        self.files().prepare(changes)
    }

    /// The files; a panic while another held them leaves them as whole as any I/O
    /// error does (what the journal holds is replayed at start).
    fn files(&self) -> MutexGuard<'_, ChunkFiles> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ChunkData for SharedChunkFiles {
    fn write_blocks(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        first: u64,
        version: Version,
        stamp: Stamp,
        data: Option<&[u8]>,
    ) {
        let mut files = self.files();
        let blocks = match data {
            Some(data) if !data.is_empty() && data.len() % BLOCK_BYTES as usize == 0 => data,
            _ => {
                let what = data.map_or("no bytes".to_string(), |d| format!("{} bytes", d.len()));
                return files
                    .error(format!("a write of {chunk:?} from block {first} came with {what}"));
            }
        };
        if let Err(error) = files.write(group, chunk, first, version, stamp, blocks) {
            let path = files.path(chunk);
            files.error(format!("writing blocks from {first} of {}: {error}", path.display()));
        }
    }

    /// Syncs every file written since the last sync (before the journals that made
    /// their writes durable are removed), without holding the files meanwhile: the
    /// server's task goes on writing and reading blocks.
    fn sync(&mut self) -> Result<(), String> {
        let (dirty, dir) = {
            let mut files = self.files();
            (files.take_dirty(), files.dir.display().to_string())
        };
        for file in dirty {
            file.sync_data()
                .map_err(|error| format!("syncing the chunk files in {dir}: {error}"))?;
        }
        Ok(())
    }

    fn free_chunk(&mut self, chunk: ChunkId) {
        let mut files = self.files();
        files.dirty.remove(&chunk);
        if files.files.remove(&chunk).is_some() {
            let path = files.path(chunk);
            if let Err(error) = std::fs::remove_file(&path) {
                files.error(format!("removing {}: {error}", path.display()));
            }
        }
    }

    fn read_blocks(
        &mut self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
    ) -> Result<Bytes, Vec<u64>> {
        match self.files().read(chunk, blocks.clone()) {
            Ok(read) => read,
            // An unreadable block is a corrupt one: served from another replica, and
            // repaired (the repair's write reports a disk that fails for good).
            Err(_) => Err(blocks.collect()),
        }
    }
}
