//! A storage server's chunk replicas in block packs (docs/format/replicas.md): shared
//! files of 4 KiB slots, each slot one block of one chunk with a header of its owner,
//! version, stamp and CRC-32C. A chunk takes the slots of the blocks written to it,
//! nothing more; a freed chunk's slots are punched out of their files (the space goes
//! back to the filesystem) and taken again by later writes. No file is made per chunk:
//! a small object costs its blocks, and the write path creates no file.
//!
//! A free is applied on the server's task, which also heartbeats: there it only takes
//! the chunks' slots from them, under one hold of the packs. The disk worker
//! punches them out a batch at a time ([`SharedPacks::punch_released`]): thousands of
//! frees at a grace's end are seconds of `fallocate`, which on the server's task kept
//! its heartbeats from the MDS until the MDS took the server for dead. Released slots
//! are taken by no write until punched, and a checkpoint punches every one before it
//! syncs the packs (the journals that hold the frees go only after that).
//!
//! The core's [`ChunkStore`](somnus_core::cluster::store::ChunkStore) calls this as it
//! changes blocks ([`ChunkData`]). A block's bytes are written around the page cache
//! where the file system allows (`O_DIRECT`), its slot's header through it; neither is
//! synced at once: the journal made each change durable before the core applied it,
//! and a checkpoint syncs the packs before it removes the journals that hold their
//! writes.
//!
//! Room is reserved before a change is made durable ([`Packs::prepare`]): the slots of
//! the blocks it writes that have none yet are taken and their space allocated
//! (`fallocate`), so that a block's write after the acknowledgement never finds the
//! disk full. The reservation is the filesystem's own; [`PackStats`] counts it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

use somnus_core::cluster::store::{BLOCK_BYTES, BlockRun, BlocksRead};
use somnus_core::cluster::{ChunkId, ChunkIndex, Payload, Stamp};
use somnus_types::{ChunkGroupId, ObjectId, Version};

use crate::files::durable;
use crate::files::record::u32_at;

const MAGIC: &[u8; 8] = b"SOMNUSPK";
const FORMAT: u32 = 1;
/// Slots of one pack: 128 MiB of blocks.
pub const SLOTS_PER_PACK: u32 = 32_768;
/// Bytes of a slot's header: eight to a 512-byte sector, so a crash never tears one.
const SLOT_HEADER_BYTES: u64 = 64;
/// Where the slot headers start (the pack's header takes the first block).
const HEADERS_START: u64 = BLOCK_BYTES;
/// Where slot 0's block starts: past the headers, on a block boundary.
const DATA_START: u64 = HEADERS_START + SLOTS_PER_PACK as u64 * SLOT_HEADER_BYTES;
/// A pack's whole length (sparse: only what is written or reserved takes space).
const PACK_BYTES: u64 = DATA_START + SLOTS_PER_PACK as u64 * BLOCK_BYTES;
/// Packs one server holds at most (512 TiB of blocks).
const PACKS_MAX: u32 = 1 << 22;

/// Where slot `index`'s block starts in its pack (for tests that damage one).
pub fn slot_data_at(index: u32) -> u64 {
    Slot { pack: 0, index }.data_at()
}

/// Where slot `index`'s header starts in its pack.
pub fn slot_header_at(index: u32) -> u64 {
    Slot { pack: 0, index }.header_at()
}

/// Where block `block` of `chunk` is in the packs of `dir` (a replica directory's
/// `packs`): the pack's path and the offset of the block's bytes there. For tools and
/// tests that look at a replica's bytes on disk; none if no slot holds it.
pub fn locate(dir: &Path, chunk: ChunkId, block: u64) -> std::io::Result<Option<(PathBuf, u64)>> {
    let mut names: Vec<(u32, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if let Some(pack) = path.file_name().and_then(|n| n.to_str()).and_then(pack_of_name) {
            names.push((pack, path));
        }
    }
    names.sort();
    let mut headers = vec![0u8; (SLOTS_PER_PACK as u64 * SLOT_HEADER_BYTES) as usize];
    for (pack, path) in names {
        File::open(&path)?.read_exact_at(&mut headers, HEADERS_START)?;
        for index in 0..SLOTS_PER_PACK {
            let at = (u64::from(index) * SLOT_HEADER_BYTES) as usize;
            let Ok(Some(header)) = Header::decode(&headers[at..at + SLOT_HEADER_BYTES as usize])
            else {
                continue;
            };
            if header.chunk == chunk && u64::from(header.block) == block {
                return Ok(Some((path, Slot { pack, index }.data_at())));
            }
        }
    }
    Ok(None)
}

/// A buffer whose bytes start on a block boundary in memory, as direct I/O needs.
#[derive(Debug, Default)]
struct AlignedBuffer {
    memory: Vec<u8>,
}

impl AlignedBuffer {
    /// A copy of `bytes` (whole blocks) at an aligned address.
    fn holding(&mut self, bytes: &[u8]) -> &[u8] {
        let block = BLOCK_BYTES as usize;
        if self.memory.len() < bytes.len() + block {
            self.memory = vec![0; bytes.len() + block];
        }
        let skip = self.memory.as_ptr().align_offset(block).min(block);
        let target = &mut self.memory[skip..skip + bytes.len()];
        target.copy_from_slice(bytes);
        target
    }
}

/// A slot: its pack and its place in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    pack: u32,
    index: u32,
}

impl Slot {
    fn header_at(self) -> u64 {
        HEADERS_START + u64::from(self.index) * SLOT_HEADER_BYTES
    }

    fn data_at(self) -> u64 {
        DATA_START + u64::from(self.index) * BLOCK_BYTES
    }

    fn next(self) -> Slot {
        Slot { pack: self.pack, index: self.index + 1 }
    }
}

/// A slot's header, as written and read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    chunk: ChunkId,
    block: u32,
    group: ChunkGroupId,
    version: Version,
    stamp: Stamp,
    /// CRC-32C of the version, the stamp and the block's bytes.
    data_crc: u32,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(eight)
}

impl Header {
    fn encode(&self) -> [u8; SLOT_HEADER_BYTES as usize] {
        let mut out = [0u8; SLOT_HEADER_BYTES as usize];
        out[0..8].copy_from_slice(&self.chunk.object.0.to_le_bytes());
        out[8..12].copy_from_slice(&self.chunk.chunk.0.to_le_bytes());
        out[12..16].copy_from_slice(&self.block.to_le_bytes());
        out[16..20].copy_from_slice(&self.group.0.to_le_bytes());
        out[20..24].copy_from_slice(&self.data_crc.to_le_bytes());
        out[24..32].copy_from_slice(&self.version.0.to_le_bytes());
        out[32..40].copy_from_slice(&self.stamp.0.to_le_bytes());
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The header in `bytes` (a slot's 64): none for a free slot (all zeros), an
    /// error for one that is neither free nor whole.
    fn decode(bytes: &[u8]) -> Result<Option<Header>, &'static str> {
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        if u32_at(bytes, 60) != crc32c::crc32c(&bytes[..60]) {
            return Err("its header's checksum does not match");
        }
        let version = Version(u64_at(bytes, 24));
        if version.0 == 0 {
            return Err("its header names version 0");
        }
        let chunk =
            ChunkId { object: ObjectId(u64_at(bytes, 0)), chunk: ChunkIndex(u32_at(bytes, 8)) };
        Ok(Some(Header {
            chunk,
            block: u32_at(bytes, 12),
            group: ChunkGroupId(u32_at(bytes, 16)),
            version,
            stamp: Stamp(u64_at(bytes, 32)),
            data_crc: u32_at(bytes, 20),
        }))
    }
}

fn block_crc(version: Version, stamp: Stamp, data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&version.0.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &stamp.0.to_le_bytes());
    crc32c::crc32c_append(crc, data)
}

fn pack_header(pack: u32) -> [u8; 64] {
    let mut header = [0u8; 64];
    header[0..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    header[12..16].copy_from_slice(&pack.to_le_bytes());
    header[16..20].copy_from_slice(&SLOTS_PER_PACK.to_le_bytes());
    header[20..24].copy_from_slice(&(SLOT_HEADER_BYTES as u32).to_le_bytes());
    header[24..32].copy_from_slice(&DATA_START.to_le_bytes());
    let crc = crc32c::crc32c(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    header
}

fn check_pack_header(bytes: &[u8], pack: u32) -> Result<(), String> {
    if bytes.len() < 64 {
        return Err(format!("{} bytes, shorter than a header", bytes.len()));
    }
    if &bytes[0..8] != MAGIC {
        return Err("not a somnus pack".into());
    }
    if u32_at(bytes, 60) != crc32c::crc32c(&bytes[..60]) {
        return Err("its header's checksum does not match".into());
    }
    let format = u32_at(bytes, 8);
    if format != FORMAT {
        return Err(format!("format {format}, this build reads {FORMAT}"));
    }
    let shape = (u32_at(bytes, 12), u32_at(bytes, 16), u32_at(bytes, 20), u64_at(bytes, 24));
    if shape != (pack, SLOTS_PER_PACK, SLOT_HEADER_BYTES as u32, DATA_START) {
        return Err(format!(
            "it describes pack {} of {} slots, not this name's shape",
            shape.0, shape.1
        ));
    }
    Ok(())
}

fn pack_name(pack: u32) -> String {
    format!("pack-{pack:08x}")
}

fn pack_of_name(name: &str) -> Option<u32> {
    let hex = name.strip_prefix("pack-")?;
    (hex.len() == 8).then(|| u32::from_str_radix(hex, 16).ok()).flatten()
}

/// A block found in the packs when they are opened.
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
pub enum PackError {
    #[error("cannot use the pack directory {path}: {source}")]
    Dir { path: PathBuf, source: std::io::Error },
    #[error("cannot read the pack {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "the pack {path} is damaged ({what}); its blocks cannot be trusted: move it out of \
         the directory, and the server gets its chunks back from their replicas"
    )]
    Damaged { path: PathBuf, what: String },
}

/// What the packs hold, for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackStats {
    /// Slots holding a block.
    pub slots_used: u64,
    /// Slots reserved for writes made durable (or being made so) not yet applied.
    pub slots_reserved: u64,
    pub packs: u64,
}

/// The slots of one chunk's blocks, as runs of consecutive blocks in consecutive
/// slots: a chunk written in order is one run.
#[derive(Clone, Debug, Default)]
struct ChunkSlots {
    /// (first block, first slot, blocks), by first block.
    runs: Vec<(u32, Slot, u32)>,
    /// Blocks whose slot is reserved and not written yet.
    reserved: BTreeSet<u32>,
}

impl ChunkSlots {
    fn get(&self, block: u32) -> Option<Slot> {
        let at = self.runs.partition_point(|(first, _, _)| *first <= block).checked_sub(1)?;
        let (first, slot, count) = self.runs[at];
        (block < first + count)
            .then(|| Slot { pack: slot.pack, index: slot.index + (block - first) })
    }

    fn insert(&mut self, block: u32, slot: Slot) {
        debug_assert!(self.get(block).is_none(), "block {block} has a slot already");
        let at = self.runs.partition_point(|(first, _, _)| *first <= block);
        // Joins the run before it, the run after it, or both, where contiguous.
        let before = at.checked_sub(1).filter(|&i| {
            let (first, start, count) = self.runs[i];
            first + count == block && start.pack == slot.pack && start.index + count == slot.index
        });
        let after = (at < self.runs.len()).then_some(at).filter(|&i| {
            let (first, start, _) = self.runs[i];
            block + 1 == first && start.pack == slot.pack && slot.index + 1 == start.index
        });
        match (before, after) {
            (Some(b), Some(a)) => {
                let count = self.runs[a].2;
                self.runs[b].2 += 1 + count;
                self.runs.remove(a);
            }
            (Some(b), None) => self.runs[b].2 += 1,
            (None, Some(a)) => self.runs[a] = (block, slot, self.runs[a].2 + 1),
            (None, None) => self.runs.insert(at, (block, slot, 1)),
        }
    }

    /// Takes block `block`'s slot out, splitting its run.
    fn remove(&mut self, block: u32) -> Option<Slot> {
        let slot = self.get(block)?;
        let at = self.runs.partition_point(|(first, _, _)| *first <= block) - 1;
        let (first, start, count) = self.runs[at];
        let before = block - first;
        let after = count - before - 1;
        let mut pieces = Vec::with_capacity(2);
        if before > 0 {
            pieces.push((first, start, before));
        }
        if after > 0 {
            pieces.push((block + 1, slot.next(), after));
        }
        self.runs.splice(at..=at, pieces);
        Some(slot)
    }

    fn slots(&self) -> impl Iterator<Item = (Slot, u32)> + '_ {
        self.runs.iter().map(|(_, slot, count)| (*slot, *count))
    }

    fn blocks(&self) -> u64 {
        self.runs.iter().map(|(_, _, count)| u64::from(*count)).sum()
    }
}

/// The free slots: per pack its runs of free slots below its high mark (slots at and
/// above it were never used).
#[derive(Clone, Debug, Default)]
struct FreeSlots {
    /// (pack, first) → count.
    runs: BTreeMap<(u32, u32), u32>,
}

impl FreeSlots {
    fn add(&mut self, slot: Slot, count: u32) {
        if count == 0 {
            return;
        }
        let (mut first, mut count) = (slot.index, count);
        // Merges with the run before and the run after.
        if let Some((&(pack, start), &len)) = self.runs.range(..(slot.pack, slot.index)).next_back()
            && pack == slot.pack
            && start + len == first
        {
            self.runs.remove(&(pack, start));
            first = start;
            count += len;
        }
        if let Some(&len) = self.runs.get(&(slot.pack, first + count)) {
            self.runs.remove(&(slot.pack, first + count));
            count += len;
        }
        self.runs.insert((slot.pack, first), count);
    }

    /// Whether slots `from..to` of `pack` are all free.
    fn covers(&self, pack: u32, from: u32, to: u32) -> bool {
        let run = self.runs.range(..=(pack, from)).next_back();
        run.is_some_and(|(&(p, start), &len)| p == pack && start + len >= to)
    }

    /// Up to `want` consecutive free slots, the lowest first.
    fn take(&mut self, want: u32) -> Option<(Slot, u32)> {
        let (&(pack, first), &len) = self.runs.iter().next()?;
        self.runs.remove(&(pack, first));
        let taken = len.min(want);
        if taken < len {
            self.runs.insert((pack, first + taken), len - taken);
        }
        Some((Slot { pack, index: first }, taken))
    }
}

/// Slots reserved by one `prepare`: released if its change is not made durable.
#[derive(Debug, Default)]
pub struct Reservation(Vec<(ChunkId, u32)>);

#[derive(Debug)]
pub struct Packs {
    dir: PathBuf,
    chunk_blocks: u64,
    /// The packs' files, a bounded number open at once.
    open: OpenPacks,
    /// Memory aligned for direct writes, reused: a write's bytes are copied in.
    aligned: AlignedBuffer,
    index: BTreeMap<ChunkId, ChunkSlots>,
    free: FreeSlots,
    /// Per pack, the first slot never used.
    high: Vec<u32>,
    /// Packs written since the last sync.
    dirty: BTreeSet<u32>,
    /// Runs of slots of freed chunks, not punched out yet: free for no write until
    /// they are.
    released: Vec<(Slot, u32)>,
    stats: PackStats,
    /// The first punch that failed: a freed chunk's headers may be on disk still, so
    /// no sync succeeds from then on (a checkpoint would remove the journals whose
    /// replay frees it again at a restart).
    punch_failed: Option<String>,
}

impl Packs {
    /// Opens (creating it if need be) the pack directory `dir` for chunks of
    /// `chunk_size_bytes`, and returns every written block found, checked.
    pub fn open(dir: &Path, chunk_size_bytes: u64) -> Result<(Packs, Vec<FoundBlock>), PackError> {
        let dir_error = |source| PackError::Dir { path: dir.to_owned(), source };
        durable::create_private_dir_all(dir).map_err(dir_error)?;
        let mut packs = Packs {
            dir: dir.to_owned(),
            chunk_blocks: chunk_size_bytes.div_ceil(BLOCK_BYTES),
            open: OpenPacks::new(dir, OPEN_PACKS_MAX),
            aligned: AlignedBuffer::default(),
            index: BTreeMap::new(),
            free: FreeSlots::default(),
            high: Vec::new(),
            dirty: BTreeSet::new(),
            released: Vec::new(),
            stats: PackStats::default(),
            punch_failed: None,
        };
        let mut names: Vec<(u32, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(dir_error)? {
            let path = entry.map_err(dir_error)?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name.ends_with(".tmp") {
                // A pack a crash left before its rename: never in use.
                std::fs::remove_file(&path).map_err(dir_error)?;
            } else if let Some(pack) = pack_of_name(name) {
                names.push((pack, path));
            }
        }
        names.sort();
        for (expected, (pack, path)) in names.iter().enumerate() {
            if *pack != expected as u32 {
                let what = format!("pack {expected} is missing before it");
                return Err(PackError::Damaged { path: path.clone(), what });
            }
        }
        let mut found: BTreeMap<(ChunkId, u32), (Slot, FoundBlock)> = BTreeMap::new();
        let mut stale = Vec::new();
        for (pack, path) in names {
            for (slot, block) in packs.scan(pack, &path)? {
                // Two slots of one block (a crash before a free's headers were
                // synced, and a later write took another slot): the newer version
                // holds, the other is freed.
                let key = (block.chunk, block.index as u32);
                match found.get(&key) {
                    Some((_, older)) if older.version >= block.version => stale.push(slot),
                    Some((older, _)) => {
                        stale.push(*older);
                        found.insert(key, (slot, block));
                    }
                    None => {
                        found.insert(key, (slot, block));
                    }
                }
            }
        }
        for ((chunk, block), (slot, _)) in &found {
            packs.index.entry(*chunk).or_default().insert(*block, *slot);
            packs.stats.slots_used += 1;
        }
        for slot in stale {
            packs
                .punch(slot, 1)
                .map_err(|source| PackError::Read { path: packs.path(slot.pack), source })?;
            packs.free.add(slot, 1);
        }
        Ok((packs, found.into_values().map(|(_, block)| block).collect()))
    }

    /// Reads pack `pack`'s slots: each block it holds, checked, and its free slots
    /// listed.
    fn scan(&mut self, pack: u32, path: &Path) -> Result<Vec<(Slot, FoundBlock)>, PackError> {
        let read_error = |source| PackError::Read { path: path.to_owned(), source };
        let damaged = |what: String| PackError::Damaged { path: path.to_owned(), what };
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(read_error)?;
        let mut header = [0u8; 64];
        file.read_exact_at(&mut header, 0).map_err(read_error)?;
        check_pack_header(&header, pack).map_err(damaged)?;
        if file.metadata().map_err(read_error)?.len() < PACK_BYTES {
            // Its length was set when it was made, and synced: a shorter one was cut.
            return Err(damaged("it is shorter than a pack".into()));
        }
        let mut headers = vec![0u8; (SLOTS_PER_PACK as u64 * SLOT_HEADER_BYTES) as usize];
        file.read_exact_at(&mut headers, HEADERS_START).map_err(read_error)?;
        let mut high = 0;
        let mut used = Vec::new();
        for index in 0..SLOTS_PER_PACK {
            let at = (u64::from(index) * SLOT_HEADER_BYTES) as usize;
            let bytes = &headers[at..at + SLOT_HEADER_BYTES as usize];
            match Header::decode(bytes) {
                Ok(None) => {}
                Ok(Some(header)) => {
                    high = index + 1;
                    used.push((Slot { pack, index }, header));
                }
                Err(what) => return Err(damaged(format!("slot {index}: {what}"))),
            }
        }
        let mut blocks = Vec::with_capacity(used.len());
        let mut free_from = 0;
        let mut data = vec![0u8; BLOCK_BYTES as usize];
        for (slot, header) in used {
            self.free.add(Slot { pack, index: free_from }, slot.index - free_from);
            free_from = slot.index + 1;
            if u64::from(header.block) >= self.chunk_blocks {
                return Err(damaged(format!(
                    "slot {} holds block {} of a chunk of {} blocks",
                    slot.index, header.block, self.chunk_blocks
                )));
            }
            file.read_exact_at(&mut data, slot.data_at()).map_err(read_error)?;
            let intact = block_crc(header.version, header.stamp, &data) == header.data_crc;
            let block = FoundBlock {
                group: header.group,
                chunk: header.chunk,
                index: u64::from(header.block),
                version: header.version,
                stamp: header.stamp,
                intact,
            };
            blocks.push((slot, block));
        }
        self.free.add(Slot { pack, index: free_from }, high - free_from);
        drop(file);
        self.open.count += 1;
        self.high.push(high);
        self.stats.packs += 1;
        Ok(blocks)
    }

    fn path(&self, pack: u32) -> PathBuf {
        self.dir.join(pack_name(pack))
    }

    /// A punch failed: remembered (the first), and returned.
    fn punch_error(&mut self, error: String) -> std::io::Error {
        self.punch_failed.get_or_insert_with(|| error.clone());
        std::io::Error::other(error)
    }

    /// A new pack, made whole (its header, its length) under a temporary name, synced
    /// and renamed into place, its directory synced.
    fn new_pack(&mut self) -> std::io::Result<()> {
        let pack = self.open.count;
        if pack >= PACKS_MAX {
            return Err(std::io::Error::other(format!("{PACKS_MAX} packs: no more")));
        }
        let path = self.path(pack);
        durable::replace_sized(&path, &pack_header(pack), PACK_BYTES)?;
        self.open.count += 1;
        self.high.push(0);
        self.stats.packs += 1;
        Ok(())
    }

    /// Up to `want` consecutive slots: free ones first, then never used ones of the
    /// last pack, then a new pack's.
    fn take_slots(&mut self, want: u32) -> std::io::Result<(Slot, u32)> {
        if let Some(taken) = self.free.take(want) {
            return Ok(taken);
        }
        if self.high.last().is_none_or(|high| *high == SLOTS_PER_PACK) {
            self.new_pack()?;
        }
        let pack = self.open.count - 1;
        let high = &mut self.high[pack as usize];
        let taken = want.min(SLOTS_PER_PACK - *high);
        let slot = Slot { pack, index: *high };
        *high += taken;
        Ok((slot, taken))
    }

    /// Takes the slots of `blocks` of `chunk` that have none (each marked reserved),
    /// with their space allocated; each taken is added to `reservation`.
    fn reserve(
        &mut self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
        reservation: &mut Reservation,
    ) -> std::io::Result<()> {
        let blocks = blocks.start.min(self.chunk_blocks)..blocks.end.min(self.chunk_blocks);
        let mut missing: Vec<u32> = {
            let held = self.index.get(&chunk);
            blocks.map(|b| b as u32).filter(|b| held.is_none_or(|h| h.get(*b).is_none())).collect()
        };
        while !missing.is_empty() {
            // Consecutive blocks get consecutive slots where the free runs allow.
            let run = missing.iter().zip(missing[0]..).take_while(|(b, want)| **b == *want).count();
            let (slot, taken) = self.take_slots(run as u32)?;
            let allocated = self.open.file(slot.pack, &self.dirty).and_then(|open| {
                durable::allocate_range(&open.file, slot.data_at(), u64::from(taken) * BLOCK_BYTES)
            });
            let entry = self.index.entry(chunk).or_default();
            for (i, block) in missing.drain(..taken as usize).enumerate() {
                entry.insert(block, Slot { pack: slot.pack, index: slot.index + i as u32 });
                entry.reserved.insert(block);
                reservation.0.push((chunk, block));
            }
            self.stats.slots_reserved += u64::from(taken);
            self.dirty.insert(slot.pack);
            allocated?;
        }
        Ok(())
    }

    /// Reserves the slots the blocks of `runs` need, their space allocated; with no
    /// room, none is left reserved.
    pub fn prepare<'a>(
        &mut self,
        runs: impl IntoIterator<Item = &'a BlockRun>,
    ) -> std::io::Result<Reservation> {
        let mut reservation = Reservation::default();
        for run in runs {
            if let Err(error) = self.reserve(run.chunk, run.blocks.clone(), &mut reservation) {
                // A punch that failed too is the error to tell: the disk fails.
                self.release_reservation(reservation)?;
                return Err(error);
            }
        }
        Ok(reservation)
    }

    /// Takes the slots of every chunk of `objects` (freed): they read as never
    /// written from now on, and wait to be punched out.
    fn release_objects(&mut self, objects: &[ObjectId]) {
        for object in objects {
            let first = ChunkId { object: *object, chunk: ChunkIndex(0) };
            let last = ChunkId { object: *object, chunk: ChunkIndex(u32::MAX) };
            let chunks: Vec<ChunkId> = self.index.range(first..=last).map(|(c, _)| *c).collect();
            for chunk in chunks {
                self.release_chunk(chunk);
            }
        }
    }

    /// Gives back the slots of `reservation` not written since (its change was not
    /// made durable); the first punch that failed, if one did.
    pub fn release_reservation(&mut self, reservation: Reservation) -> std::io::Result<()> {
        let mut failed = Ok(());
        for (chunk, block) in reservation.0 {
            let Some(slots) = self.index.get_mut(&chunk) else { continue };
            if !slots.reserved.remove(&block) {
                continue;
            }
            self.stats.slots_reserved -= 1;
            let Some(slot) = slots.remove(block) else { continue };
            if slots.runs.is_empty() {
                self.index.remove(&chunk);
            }
            let punched = self.punch(slot, 1).and_then(|()| {
                self.free.add(slot, 1);
                self.punch_free_headers(slot, 1)
            });
            if failed.is_ok() {
                failed = punched;
            }
        }
        failed
    }

    /// Gives the space of `count` slots from `slot` back to the filesystem: their
    /// headers zeroed, their blocks punched out.
    fn punch(&mut self, slot: Slot, count: u32) -> std::io::Result<()> {
        let zeros = vec![0u8; (u64::from(count) * SLOT_HEADER_BYTES) as usize];
        let punched = self.open.file(slot.pack, &self.dirty).and_then(|open| {
            open.file.write_all_at(&zeros, slot.header_at())?;
            durable::punch_hole(&open.file, slot.data_at(), u64::from(count) * BLOCK_BYTES)
        });
        self.dirty.insert(slot.pack);
        punched.map_err(|error| {
            let path = self.path(slot.pack);
            self.punch_error(format!(
                "freeing slots from {} of {}: {error}",
                slot.index,
                path.display()
            ))
        })
    }

    /// Takes every slot of `chunk` from it: the chunk reads as never written from now
    /// on, and its slots wait to be punched out ([`Packs::punch_released`]).
    fn release_chunk(&mut self, chunk: ChunkId) {
        let Some(slots) = self.index.remove(&chunk) else { return };
        self.stats.slots_used -= slots.blocks() - slots.reserved.len() as u64;
        self.stats.slots_reserved -= slots.reserved.len() as u64;
        self.released.extend(slots.slots());
    }

    /// Punches out runs of released slots, which become free: at most `runs`, and
    /// none begun past `until`; whether any are left.
    fn punch_released(&mut self, runs: usize, until: Option<Instant>) -> std::io::Result<bool> {
        for _ in 0..runs {
            if until.is_some_and(|until| Instant::now() >= until) {
                break;
            }
            let Some((slot, count)) = self.released.pop() else { break };
            self.punch(slot, count)?;
            self.free.add(slot, count);
            self.punch_free_headers(slot, count)?;
        }
        Ok(!self.released.is_empty())
    }

    /// Frees every slot of `chunk` at once.
    #[cfg(test)]
    fn free_chunk(&mut self, chunk: ChunkId) {
        self.release_chunk(chunk);
        self.punch_released(usize::MAX, None).unwrap();
    }

    /// Gives back the header blocks among those of `count` slots from `slot` whose
    /// every slot is free now (all their headers zero).
    fn punch_free_headers(&mut self, slot: Slot, count: u32) -> std::io::Result<()> {
        const PER_BLOCK: u32 = (BLOCK_BYTES / SLOT_HEADER_BYTES) as u32;
        let high = self.high.get(slot.pack as usize).copied().unwrap_or(0);
        let first = slot.index / PER_BLOCK;
        let last = (slot.index + count - 1) / PER_BLOCK;
        for block in first..=last {
            let from = block * PER_BLOCK;
            let to = (from + PER_BLOCK).min(high);
            if from < to && !self.free.covers(slot.pack, from, to) {
                continue;
            }
            let at = Slot { pack: slot.pack, index: from }.header_at();
            let punched = (self.open.file(slot.pack, &self.dirty))
                .and_then(|open| durable::punch_hole(&open.file, at, BLOCK_BYTES));
            if let Err(error) = punched {
                let path = self.path(slot.pack);
                let what = format!("freeing header block {block} of {}: {error}", path.display());
                return Err(self.punch_error(what));
            }
        }
        Ok(())
    }

    /// Takes a block of an earlier build's chunk file as it is (its checksum as the
    /// file held it: a corrupt block stays corrupt, to be repaired from a replica).
    pub fn adopt(
        &mut self,
        block: &crate::server::legacy_chunks::LegacyBlock,
    ) -> std::io::Result<()> {
        let index = block.index;
        let mut reservation = Reservation::default();
        self.reserve(block.chunk, index..index + 1, &mut reservation)?;
        let Some(slot) = self.index.get(&block.chunk).and_then(|s| s.get(index as u32)) else {
            return Err(std::io::Error::other(format!(
                "block {index} of {:?} has no slot",
                block.chunk
            )));
        };
        let header = Header {
            chunk: block.chunk,
            block: index as u32,
            group: block.group,
            version: block.version,
            stamp: block.stamp,
            data_crc: block.crc,
        };
        let file = &self.open.file(slot.pack, &self.dirty)?.file;
        file.write_all_at(&block.data, slot.data_at())?;
        file.write_all_at(&header.encode(), slot.header_at())?;
        if let Some(slots) = self.index.get_mut(&block.chunk)
            && slots.reserved.remove(&(index as u32))
        {
            self.stats.slots_reserved -= 1;
            self.stats.slots_used += 1;
        }
        Ok(())
    }

    /// Syncs every pack written (a migration's end).
    pub fn sync_all(&mut self) -> std::io::Result<()> {
        for file in self.take_dirty() {
            file.sync_data()?;
        }
        Ok(())
    }

    /// The packs written since the last call, to sync: written after this, a pack is
    /// taken again at the next.
    fn take_dirty(&mut self) -> Vec<Arc<File>> {
        let dirty = std::mem::take(&mut self.dirty);
        // A written pack is never closed before it is taken here (`OpenPacks::file`).
        dirty.iter().filter_map(|pack| self.open.open.get(pack).map(|o| o.file.clone())).collect()
    }

    /// Writes consecutive blocks from `first`, all of `version` by `stamp`: per run of
    /// consecutive slots, their bytes in one write and their headers in one. A block
    /// with no slot (the journal's replay at start) takes one here.
    fn write(
        &mut self,
        group: ChunkGroupId,
        chunk: ChunkId,
        first: u64,
        version: Version,
        stamp: Stamp,
        data: &[u8],
    ) -> std::io::Result<()> {
        let count = (data.len() as u64 / BLOCK_BYTES) as u32;
        let first = first as u32;
        let mut unreserved = Reservation::default();
        self.reserve(chunk, u64::from(first)..u64::from(first + count), &mut unreserved)?;
        let slots = self.index.entry(chunk).or_default();
        let mut newly = 0;
        let mut runs: Vec<(Slot, u32, u32)> = Vec::new();
        for block in first..first + count {
            let Some(slot) = slots.get(block) else {
                return Err(std::io::Error::other(format!(
                    "block {block} of {chunk:?} has no slot"
                )));
            };
            if slots.reserved.remove(&block) {
                newly += 1;
            }
            match runs.last_mut() {
                Some((start, _, len))
                    if start.pack == slot.pack && start.index + *len == slot.index =>
                {
                    *len += 1;
                }
                _ => runs.push((slot, block, 1)),
            }
        }
        self.stats.slots_reserved -= newly;
        self.stats.slots_used += newly;
        for (slot, block, len) in runs {
            let from = ((block - first) as u64 * BLOCK_BYTES) as usize;
            let bytes = &data[from..from + (u64::from(len) * BLOCK_BYTES) as usize];
            let open = self.open.file(slot.pack, &self.dirty)?;
            match &open.direct {
                Some(direct) => direct.write_all_at(self.aligned.holding(bytes), slot.data_at())?,
                None => open.file.write_all_at(bytes, slot.data_at())?,
            }
            let file = open.file.clone();
            let mut headers = Vec::with_capacity((u64::from(len) * SLOT_HEADER_BYTES) as usize);
            for (i, block_bytes) in bytes.chunks(BLOCK_BYTES as usize).enumerate() {
                let header = Header {
                    chunk,
                    block: block + i as u32,
                    group,
                    version,
                    stamp,
                    data_crc: block_crc(version, stamp, block_bytes),
                };
                headers.extend_from_slice(&header.encode());
            }
            file.write_all_at(&headers, slot.header_at())?;
            self.dirty.insert(slot.pack);
        }
        Ok(())
    }

    /// Blocks `blocks` of `chunk` (zeros where none was written), each checked, with
    /// the version and stamp each one's header holds; or the blocks that fail their
    /// check. Consecutive slots are read at once, their headers too: a megabyte is two
    /// reads, not five hundred.
    /// Without `wait`, only what the page cache holds is read: a block that is not
    /// there ends the read with `WouldBlock` (as does any error: the caller reads
    /// again, waiting).
    fn read(
        &mut self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
        wait: bool,
    ) -> std::io::Result<Result<BlocksRead, Vec<u64>>> {
        let len = (blocks.end - blocks.start) as usize * BLOCK_BYTES as usize;
        let mut held = vec![(Version(0), Stamp(0)); (blocks.end - blocks.start) as usize];
        let Some(slots) = self.index.get(&chunk) else {
            return Ok(Ok(BlocksRead { data: Payload::new(vec![0u8; len].into()), held }));
        };
        // Runs of blocks in consecutive slots of one pack: (first slot, first block, length).
        let mut runs: Vec<(Slot, u64, u32)> = Vec::new();
        for block in blocks.clone() {
            let block32 = block as u32;
            let Some(slot) = slots.get(block32).filter(|_| !slots.reserved.contains(&block32))
            else {
                continue;
            };
            match runs.last_mut() {
                Some((start, first, len))
                    if start.pack == slot.pack
                        && start.index + *len == slot.index
                        && *first + u64::from(*len) == block =>
                {
                    *len += 1;
                }
                _ => runs.push((slot, block, 1)),
            }
        }
        let mut bad = Vec::new();
        let mut headers = Vec::new();
        let mut out = Vec::with_capacity(len);
        for (slot, first, len) in runs {
            let file = &self.open.file(slot.pack, &self.dirty)?.file;
            let at = ((first - blocks.start) * BLOCK_BYTES) as usize;
            out.resize(at, 0); // blocks never written read as zeros
            let bytes = len as usize * BLOCK_BYTES as usize;
            headers.resize(len as usize * SLOT_HEADER_BYTES as usize, 0);
            if wait {
                append_at(file, slot.data_at(), bytes, &mut out)?;
                file.read_exact_at(&mut headers, slot.header_at())?;
            } else {
                out.resize(at + bytes, 0);
                read_cached(file, &mut out[at..], slot.data_at())?;
                read_cached(file, &mut headers, slot.header_at())?;
            }
            let data = &out[at..];
            let blocks_read = data.chunks(BLOCK_BYTES as usize);
            let headers_read = headers.chunks(SLOT_HEADER_BYTES as usize);
            for (i, (bytes, header)) in blocks_read.zip(headers_read).enumerate() {
                let block = first + i as u64;
                let whole = match Header::decode(header) {
                    Ok(Some(h)) => {
                        held[(block - blocks.start) as usize] = (h.version, h.stamp);
                        h.chunk == chunk
                            && u64::from(h.block) == block
                            && h.data_crc == block_crc(h.version, h.stamp, bytes)
                    }
                    _ => false,
                };
                if !whole {
                    bad.push(block);
                }
            }
        }
        out.resize(len, 0);
        let read = BlocksRead { data: Payload::new(out.into()), held };
        Ok(if bad.is_empty() { Ok(read) } else { Err(bad) })
    }
}

/// Packs whose files are open at most at once (two descriptors each: 512 for 32 GiB
/// of packs in use). A server once kept a file open per chunk and stopped with "Too
/// many open files" near the usual limit of 1,024.
const OPEN_PACKS_MAX: usize = if cfg!(test) { 2 } else { 256 };

/// Runs of released slots punched out under one hold of the packs at most, and for
/// how long at most (a punch on a loaded disk can take milliseconds): the server's
/// task, which reads and writes blocks under the same hold, waits no longer.
const PUNCH_BATCH: usize = 64;
const PUNCH_HOLD: std::time::Duration = std::time::Duration::from_millis(10);

/// One pack's open files.
#[derive(Debug)]
struct OpenPack {
    /// Shared with a checkpoint, which syncs it without holding the packs.
    file: Arc<File>,
    /// The same file opened for direct writes of blocks (none where the file system
    /// has no `O_DIRECT`): a block's bytes go to the disk around the page cache, whose
    /// copy of every byte written cost more CPU than anything else a loaded server
    /// did. The slots' headers go through the cache.
    direct: Option<File>,
    /// When it was last used (a count of uses).
    used: u64,
}

/// The packs' files, opened when used and closed, least recently used first, past
/// `max` open; a pack written since its last sync is never closed (its sync must see
/// the errors of its writes, which Linux reports on the descriptors open when they
/// happened).
#[derive(Debug)]
struct OpenPacks {
    dir: PathBuf,
    /// Packs there are (numbered from 0).
    count: u32,
    open: BTreeMap<u32, OpenPack>,
    uses: u64,
    max: usize,
}

impl OpenPacks {
    fn new(dir: &Path, max: usize) -> OpenPacks {
        OpenPacks { dir: dir.to_owned(), count: 0, open: BTreeMap::new(), uses: 0, max }
    }

    /// Pack `pack`'s files, opened if need be (closing the least recently used one not
    /// in `dirty` past the bound).
    fn file(&mut self, pack: u32, dirty: &BTreeSet<u32>) -> std::io::Result<&OpenPack> {
        self.uses += 1;
        if !self.open.contains_key(&pack) {
            if self.open.len() >= self.max {
                let unwritten = self.open.iter().filter(|(p, _)| !dirty.contains(p));
                if let Some((&oldest, _)) = unwritten.min_by_key(|(_, open)| open.used) {
                    self.open.remove(&oldest);
                }
            }
            let path = self.dir.join(pack_name(pack));
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let direct = durable::open_direct(&path);
            self.open.insert(pack, OpenPack { file: Arc::new(file), direct, used: 0 });
        }
        let open = self.open.get_mut(&pack).ok_or_else(|| std::io::Error::other("no pack"))?;
        open.used = self.uses;
        Ok(open)
    }
}

/// Appends `len` bytes of `file` from `offset` to `out`, without zeroing them first
/// (`read_to_end` reads into the vector's spare room): zeroing a megabyte before
/// reading into it was a tenth of a loaded server's CPU. Through the file's position,
/// which nothing else uses: blocks are written with `pwrite`, and the packs' reads
/// are one at a time under their lock.
fn append_at(file: &File, offset: u64, len: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut reader = file;
    reader.seek(SeekFrom::Start(offset))?;
    let before = out.len();
    reader.take(len as u64).read_to_end(out)?;
    if out.len() - before != len {
        let message = format!("{} of {len} bytes at {offset}", out.len() - before);
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, message));
    }
    Ok(())
}

/// Reads `buf` at `offset` of `file` if the page cache holds all of it, without
/// waiting for the disk (`RWF_NOWAIT`); `WouldBlock` if it does not.
fn read_cached(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let flags = rustix::io::ReadWriteFlags::NOWAIT;
    let read = rustix::io::preadv2(file, &mut [std::io::IoSliceMut::new(buf)], offset, flags)?;
    if read != buf.len() {
        return Err(std::io::ErrorKind::WouldBlock.into());
    }
    Ok(())
}

/// The packs, shared by the store (which writes and reads their blocks) and the disk
/// worker, which reserves the slots a change writes to before the journal takes it
/// ([`SharedPacks::prepare`]): a full disk then fails the change before it is durable,
/// never a block's write after it.
#[derive(Clone, Debug)]
pub struct SharedPacks {
    packs: Arc<Mutex<Packs>>,
    /// The stats last read, for a reader that finds the packs held (by the disk
    /// worker's batch of punches): the status tick never waits for the packs.
    last_stats: Arc<Mutex<PackStats>>,
}

impl SharedPacks {
    pub fn new(packs: Packs) -> SharedPacks {
        let last_stats = Arc::new(Mutex::new(packs.stats));
        SharedPacks { packs: Arc::new(Mutex::new(packs)), last_stats }
    }

    /// Reserves, their space allocated, the slots the blocks of `runs` need.
    pub fn prepare<'a>(
        &self,
        runs: impl IntoIterator<Item = &'a BlockRun>,
    ) -> std::io::Result<Reservation> {
        self.packs().prepare(runs)
    }

    /// Gives back what a `prepare` reserved for changes not made durable.
    pub fn release(&self, reservation: Reservation) -> std::io::Result<()> {
        self.packs().release_reservation(reservation)
    }

    /// What the packs hold; while another holds them, what they held when last read.
    pub fn stats(&self) -> PackStats {
        let mut last = self.last_stats.lock().unwrap_or_else(PoisonError::into_inner);
        match self.packs.try_lock() {
            Ok(packs) => *last = packs.stats,
            Err(std::sync::TryLockError::Poisoned(packs)) => *last = packs.into_inner().stats,
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        *last
    }

    /// Punches out a batch of released slots, the packs held for that batch only
    /// (reads and writes go on between batches); whether any are left.
    pub fn punch_released(&self) -> std::io::Result<bool> {
        self.packs().punch_released(PUNCH_BATCH, Some(Instant::now() + PUNCH_HOLD))
    }

    /// Punches out every released slot, a batch at a time.
    pub fn punch_all_released(&self) -> std::io::Result<()> {
        while self.packs().punch_released(PUNCH_BATCH, Some(Instant::now() + PUNCH_HOLD))? {}
        Ok(())
    }

    /// The packs; a panic while another held them leaves them as whole as any I/O
    /// error does (what the journal holds is replayed at start).
    fn packs(&self) -> MutexGuard<'_, Packs> {
        self.packs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SharedPacks {
    /// Writes the runs of blocks a change lands on (made durable in the journal
    /// before): exactly those, each run's bytes at once.
    pub fn write_runs(&self, runs: &[BlockRun]) -> std::io::Result<()> {
        let mut packs = self.packs();
        for run in runs {
            let first = run.blocks.start;
            let want = (run.blocks.end - first) * BLOCK_BYTES;
            let data = match run.data.bytes() {
                Some(data) if data.len() as u64 == want => data,
                data => {
                    let what =
                        data.map_or("no bytes".to_string(), |d| format!("{} bytes", d.len()));
                    return Err(std::io::Error::other(format!(
                        "a write of {:?} from block {first} came with {what}, not {want}",
                        run.chunk
                    )));
                }
            };
            packs.write(run.group, run.chunk, first, run.version, run.stamp, data).map_err(
                |e| {
                    let dir = packs.dir.display();
                    std::io::Error::new(
                        e.kind(),
                        format!("writing blocks from {first} of {:?} in {dir}: {e}", run.chunk),
                    )
                },
            )?;
        }
        Ok(())
    }

    /// Syncs every pack written since the last sync (before the journals that made
    /// their writes durable are removed), without holding the packs meanwhile: the
    /// disk worker and the reads go on. Every slot released before is punched out
    /// first: no journal that holds a free goes before its slots' headers are zero on
    /// disk.
    pub fn sync(&self) -> Result<(), String> {
        self.punch_all_released().map_err(|error| error.to_string())?;
        let (dirty, dir) = {
            let mut packs = self.packs();
            if let Some(failed) = &packs.punch_failed {
                return Err(failed.clone());
            }
            (packs.take_dirty(), packs.dir.display().to_string())
        };
        for file in dirty {
            file.sync_data().map_err(|error| format!("syncing the packs in {dir}: {error}"))?;
        }
        Ok(())
    }

    /// Blocks `blocks` of `chunk` with their headers' versions and stamps, or the
    /// blocks that fail their checksum.
    pub fn read_blocks(
        &self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
    ) -> std::io::Result<Result<BlocksRead, Vec<u64>>> {
        self.packs().read(chunk, blocks, true)
    }

    /// `read_blocks`, if it can be done at once: the packs free, every byte in the
    /// page cache, and at most `most_bytes`. None otherwise (read them waiting).
    pub fn read_cached(
        &self,
        chunk: ChunkId,
        blocks: std::ops::Range<u64>,
        most_bytes: u64,
    ) -> Option<Result<BlocksRead, Vec<u64>>> {
        if (blocks.end - blocks.start) * BLOCK_BYTES > most_bytes {
            return None;
        }
        let mut packs = self.packs.try_lock().ok()?;
        packs.read(chunk, blocks, false).ok()
    }

    /// Tests: a punch failed with `what`.
    #[cfg(test)]
    pub(crate) fn fail_punch(&self, what: &str) {
        let _ = self.packs().punch_error(what.to_owned());
    }

    /// Releases the slots of every chunk of `objects`; the disk worker punches them
    /// out.
    pub fn free_objects(&self, objects: &[ObjectId]) {
        self.packs().release_objects(objects);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const CHUNK_BYTES: u64 = 1 << 20;

    fn chunk(object: u64) -> ChunkId {
        ChunkId { object: ObjectId(object), chunk: ChunkIndex(0) }
    }

    fn open(dir: &Path) -> (Packs, Vec<FoundBlock>) {
        Packs::open(dir, CHUNK_BYTES).unwrap()
    }

    fn apply(object: u64, blocks: u64, fill: u8) -> BlockRun {
        let data = Payload::new(vec![fill; (blocks * BLOCK_BYTES) as usize].into());
        BlockRun {
            group: ChunkGroupId(1),
            chunk: chunk(object),
            blocks: 0..blocks,
            version: Version(5),
            stamp: Stamp(7),
            data,
        }
    }

    /// The bytes a read found.
    fn bytes(read: BlocksRead) -> bytes::Bytes {
        read.data.bytes().cloned().unwrap_or_default()
    }

    /// Prepares, then writes, as the server does.
    fn put(packs: &mut Packs, object: u64, blocks: u64, fill: u8) {
        let reservation = packs.prepare(&[apply(object, blocks, fill)]).unwrap();
        assert_eq!(packs.stats.slots_reserved, blocks);
        drop(reservation);
        let data = vec![fill; (blocks * BLOCK_BYTES) as usize];
        packs.write(ChunkGroupId(1), chunk(object), 0, Version(5), Stamp(7), &data).unwrap();
        assert_eq!(packs.stats.slots_reserved, 0);
    }

    /// Pack 0's file, opened if need be.
    fn first_pack(packs: &mut Packs) -> Arc<File> {
        packs.open.file(0, &BTreeSet::new()).unwrap().file.clone()
    }

    fn allocated(dir: &Path) -> u64 {
        std::fs::metadata(dir.join(pack_name(0))).unwrap().blocks() * 512
    }

    /// Goal: a chunk takes the space of its blocks, a freed chunk's space goes back
    /// to the filesystem at once, and its slots are taken by the next writes.
    #[test]
    fn space_follows_the_blocks_written_and_comes_back_when_freed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut packs, _) = open(dir.path());
        put(&mut packs, 1, 1, 0x11);
        let one_block = allocated(dir.path());
        // The pack's first block and a header block, and one slot's block: not a chunk.
        assert!(one_block <= 4 * BLOCK_BYTES, "{one_block} bytes for one block");
        put(&mut packs, 2, 256, 0x22);
        let grown = allocated(dir.path()) - one_block;
        assert!((256 * BLOCK_BYTES..=260 * BLOCK_BYTES).contains(&grown), "{grown}");
        packs.free_chunk(chunk(2));
        // The header blocks of slots all free go back too; a block of the
        // filesystem's own for the file's extents may stay.
        let left = allocated(dir.path());
        assert!(left <= one_block + BLOCK_BYTES, "the space came back: {left} of {one_block}");
        assert_eq!(packs.stats.slots_used, 1);
        put(&mut packs, 3, 256, 0x33);
        assert_eq!(packs.high[0], 257, "the freed slots were taken again");
        let read = bytes(packs.read(chunk(3), 0..256, true).unwrap().unwrap());
        assert!(read.iter().all(|b| *b == 0x33));
        let read = packs.read(chunk(2), 0..1, true).unwrap().unwrap();
        assert_eq!(read.held, [(Version(0), Stamp(0))], "a freed chunk reads as unwritten");
        assert!(bytes(read).iter().all(|b| *b == 0));
        drop(packs);
        let (packs, found) = open(dir.path());
        assert_eq!(found.len(), 257);
        assert!(found.iter().all(|b| b.intact && b.chunk != chunk(2)));
        assert_eq!(packs.stats.slots_used, 257);
    }

    /// Goal: a free on the server's task punches nothing (thousands of them at a
    /// grace's end were seconds of `fallocate` there, its heartbeats unsent): the
    /// chunk reads as unwritten at once, its slots are taken by no write until the
    /// disk worker punches them out, a batch at a time, and a sync punches every
    /// one left before the journals that hold the frees can go.
    #[test]
    fn a_free_releases_its_slots_and_the_worker_punches_them_out() {
        let dir = tempfile::tempdir().unwrap();
        let (mut inner, _) = open(dir.path());
        for object in 1..=PUNCH_BATCH as u64 + 2 {
            put(&mut inner, object, 2, object as u8);
        }
        let packs = SharedPacks::new(inner);
        let full = allocated(dir.path());
        let freed: Vec<ObjectId> = (1..=PUNCH_BATCH as u64 + 1).map(ObjectId).collect();
        packs.free_objects(&freed);
        assert_eq!(allocated(dir.path()), full, "nothing punched on the server's task");
        assert_eq!(packs.stats().slots_used, 2, "the freed chunks hold no slot");
        let read = bytes(packs.packs().read(chunk(1), 0..2, true).unwrap().unwrap());
        assert!(read.iter().all(|b| *b == 0), "a freed chunk reads as unwritten");
        // A write meanwhile takes a slot of its own, never one waiting to be punched.
        put(&mut packs.packs(), 1000, 1, 0x77);
        assert_eq!(packs.packs().high[0], 2 * (PUNCH_BATCH as u32 + 2) + 1);
        assert!(packs.punch_released().unwrap(), "a batch at a time: a chunk at least left");
        assert!(allocated(dir.path()) < full, "a batch's space came back");
        while packs.punch_released().unwrap() {}
        let left = allocated(dir.path());
        packs.free_objects(&[ObjectId(PUNCH_BATCH as u64 + 2)]);
        packs.sync().unwrap();
        assert!(allocated(dir.path()) < left, "the sync punched the last one out");
        assert!(packs.packs().released.is_empty());
        drop(packs);
        let (_, found) = open(dir.path());
        assert_eq!(found.len(), 1, "only the block written since: {found:?}");
    }

    /// Goal: a reservation whose change was not made durable goes back whole.
    #[test]
    fn a_reservation_not_made_durable_is_given_back() {
        let dir = tempfile::tempdir().unwrap();
        let (mut packs, _) = open(dir.path());
        put(&mut packs, 1, 4, 0x11);
        let before = allocated(dir.path());
        let reservation = packs.prepare(&[apply(1, 8, 0x12), apply(2, 3, 0x21)]).unwrap();
        assert_eq!(packs.stats.slots_reserved, 4 + 3, "only the blocks without slots");
        assert!(allocated(dir.path()) >= before + 7 * BLOCK_BYTES, "their space allocated");
        packs.release_reservation(reservation).unwrap();
        assert_eq!(packs.stats.slots_reserved, 0);
        // A block of the filesystem's own for the file's extents may stay.
        assert!(allocated(dir.path()) <= before + BLOCK_BYTES, "{}", allocated(dir.path()));
        assert!(!packs.index.contains_key(&chunk(2)));
        assert_eq!(packs.index[&chunk(1)].blocks(), 4);
    }

    /// Goal: a free whose zeroed headers a crash lost leaves two slots of one block
    /// once the block is written again (a resurrected orphan): the newer holds.
    #[test]
    fn of_two_slots_of_one_block_the_newer_version_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (mut packs, _) = open(dir.path());
        put(&mut packs, 1, 1, 0x11);
        let mut old_header = [0u8; 64];
        first_pack(&mut packs).read_exact_at(&mut old_header, slot_header_at(0)).unwrap();
        packs.free_chunk(chunk(1));
        put(&mut packs, 9, 1, 0x99);
        let data = vec![0x55u8; BLOCK_BYTES as usize];
        packs.reserve(chunk(1), 0..1, &mut Reservation::default()).unwrap();
        packs.write(ChunkGroupId(1), chunk(1), 0, Version(8), Stamp(8), &data).unwrap();
        let slot = packs.index[&chunk(1)].get(0).unwrap();
        assert_eq!(slot.index, 1);
        // Object 9 took slot 0; put object 1's old header back over it.
        first_pack(&mut packs).write_all_at(&old_header, slot_header_at(0)).unwrap();
        drop(packs);
        let (packs, found) = open(dir.path());
        let ones: Vec<&FoundBlock> = found.iter().filter(|b| b.chunk == chunk(1)).collect();
        assert_eq!(ones.len(), 1);
        assert_eq!(ones[0].version, Version(8));
        assert_eq!(packs.index[&chunk(1)].get(0).unwrap().index, 1);
    }

    /// Goal: a read across blocks in slots far apart and blocks never written gives
    /// each block's bytes in its place and zeros in the holes, from any first block.
    #[test]
    fn a_read_places_each_run_and_zeros_the_holes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut packs, _) = open(dir.path());
        // Blocks 5..8 first, then another chunk, then blocks 0..2: three runs of
        // slots, none next to another in block order.
        for (first, blocks, fill) in [(5u64, 3u64, 0xa5u8), (0, 2, 0xa0)] {
            packs.reserve(chunk(1), first..first + blocks, &mut Reservation::default()).unwrap();
            let data = vec![fill; (blocks * BLOCK_BYTES) as usize];
            packs.write(ChunkGroupId(1), chunk(1), first, Version(5), Stamp(7), &data).unwrap();
            put(&mut packs, 10 + first, 1, 0xee);
        }
        let block = BLOCK_BYTES as usize;
        let read = bytes(packs.read(chunk(1), 0..10, true).unwrap().unwrap());
        let expected: Vec<u8> = (0..10u64)
            .flat_map(|b| match b {
                0..2 => vec![0xa0; block],
                5..8 => vec![0xa5; block],
                _ => vec![0; block],
            })
            .collect();
        assert_eq!(read.len(), expected.len());
        assert!(read == expected, "blocks out of place");
        let read = bytes(packs.read(chunk(1), 1..6, true).unwrap().unwrap());
        assert!(read[..block] == expected[block..2 * block]);
        assert!(read[block..] == expected[2 * block..6 * block]);
    }

    /// The runs of a chunk's slots agree with a plain map under random inserts and
    /// removals.
    /// Descriptors this process holds open on files in `dir`.
    fn open_in(dir: &Path) -> usize {
        let fds = std::fs::read_dir("/proc/self/fd").unwrap();
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    /// However many packs there are, at most `OPEN_PACKS_MAX` are open (two
    /// descriptors each), the least recently used closed first, never one written
    /// since its last sync; what a closed pack holds is read back when it is opened
    /// again.
    #[test]
    fn open_files_are_bounded_and_a_written_pack_stays_open_until_synced() {
        let dir = tempfile::tempdir().unwrap();
        let (mut packs, _) = open(dir.path());
        for _ in 0..6 {
            packs.new_pack().unwrap();
        }
        let none = BTreeSet::new();
        for pack in 0..6 {
            packs.open.file(pack, &none).unwrap();
            assert!(packs.open.open.len() <= OPEN_PACKS_MAX);
            assert!(open_in(dir.path()) <= 2 * OPEN_PACKS_MAX, "{}", open_in(dir.path()));
        }
        let written = BTreeSet::from([0]);
        packs.open.file(0, &none).unwrap();
        for pack in 1..6 {
            packs.open.file(pack, &written).unwrap();
            assert!(packs.open.open.contains_key(&0), "pack 0 closed while written");
        }
        // A chunk written, every pack used since, and read back whole.
        put(&mut packs, 1, 4, 0xab);
        for pack in 0..6 {
            packs.open.file(pack, &none).unwrap();
        }
        packs.sync_all().unwrap();
        let read = bytes(packs.read(chunk(1), 0..4, true).unwrap().unwrap());
        assert!(read.iter().all(|b| *b == 0xab));
        assert!(open_in(dir.path()) <= 2 * OPEN_PACKS_MAX);
    }

    #[test]
    fn chunk_slots_agree_with_a_map() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |bound: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(bound)) as u32
        };
        let mut slots = ChunkSlots::default();
        let mut model: BTreeMap<u32, Slot> = BTreeMap::new();
        for step in 0..20_000 {
            let block = next(64);
            if next(3) == 0 {
                assert_eq!(slots.remove(block), model.remove(&block), "step {step}");
            } else if let std::collections::btree_map::Entry::Vacant(entry) = model.entry(block) {
                // Mostly in order, so that runs form.
                let slot = Slot { pack: next(2), index: block + if next(4) == 0 { 7 } else { 0 } };
                slots.insert(block, slot);
                entry.insert(slot);
            }
            for b in 0..64 {
                assert_eq!(slots.get(b), model.get(&b).copied(), "step {step} block {b}");
            }
            assert_eq!(slots.blocks(), model.len() as u64);
            assert!(slots.runs.windows(2).all(|w| w[0].0 + w[0].2 <= w[1].0), "step {step}");
        }
    }
}
