//! A fault-injecting in-memory device for tests: it keeps, per file, what the platter
//! holds (synced) apart from what the page cache holds, and can crash, tear the last
//! writes, flip bits, return short reads, run out of space or fail a sync.
//!
//! A crash keeps only what was made durable, strictly: file contents survive as far as
//! `sync_data` made them, and a file's name (creation, removal, rename) only as far as
//! `sync_dir` did. Unsynced writes may survive in part, in order, the last one torn.

use std::any::Any;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::{Rng, SeedableRng};

use crate::disk::{Disk, DiskFile};

/// What survives a crash of the unsynced writes of each file.
#[derive(Clone, Copy, Debug)]
pub enum Crash {
    /// Nothing that was not synced.
    LoseUnsynced,
    /// Every write, as if the crash came after the page cache was flushed.
    KeepAll,
    /// All unsynced writes but the last, and `bytes` of the last (a torn write).
    TornLast { bytes: usize },
    /// Per file, a random number of unsynced writes in order and a random prefix of the
    /// next one, drawn from `seed`.
    Torn { seed: u64 },
}

#[derive(Default)]
struct FileData {
    /// What a read sees.
    current: Vec<u8>,
    /// What survives a crash.
    durable: Vec<u8>,
    /// Writes since the last sync, in order (offset, bytes); a truncation is a write of
    /// `None` at the new length. `durable` with these applied is `current`, unless
    /// `tampered`.
    unsynced: Vec<(u64, Option<Vec<u8>>)>,
    /// A fault injected behind the writes' back (a flipped bit, a cut): the next sync
    /// copies `current` whole instead of applying the unsynced writes.
    tampered: bool,
}

#[derive(Default)]
struct State {
    names: BTreeMap<String, Arc<Mutex<FileData>>>,
    durable_names: BTreeMap<String, Arc<Mutex<FileData>>>,
    /// After a crash the old handles fail: the process that held them is gone.
    crashed: bool,
    space_bytes: Option<u64>,
    syncs_until_failure: Option<u64>,
    /// How long a sync takes, like a device's flush (none: at once).
    sync_latency: Option<std::time::Duration>,
    short_reads: bool,
    writes: u64,
    syncs: u64,
    exclusive_locks: u64,
    shared_locks: u64,
}

/// The fault-injecting device. Clones share the device.
#[derive(Clone, Default)]
pub struct MemDisk {
    state: Arc<Mutex<State>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide the device from the others.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gone() -> io::Error {
    io::Error::other("the device crashed; this handle belongs to the dead process")
}

impl MemDisk {
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    /// The device as it is after a crash: a new device holding what survived; the old
    /// one (and every handle open on it) fails from now on.
    pub fn crash(&self, mode: Crash) -> MemDisk {
        let mut state = lock(&self.state);
        state.crashed = true;
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(match mode {
            Crash::Torn { seed } => seed,
            _ => 0,
        });
        let mut names = BTreeMap::new();
        for (name, file) in &state.durable_names {
            let file = lock(file);
            let mut bytes = file.durable.clone();
            let kept: Vec<(u64, Option<Vec<u8>>)> = match mode {
                Crash::LoseUnsynced => Vec::new(),
                Crash::KeepAll => file.unsynced.clone(),
                Crash::TornLast { bytes: torn } => {
                    let mut kept = file.unsynced.clone();
                    if let Some((_, Some(last))) = kept.last_mut() {
                        last.truncate(torn);
                    }
                    kept
                }
                Crash::Torn { .. } => {
                    let whole = rng.random_range(0..=file.unsynced.len());
                    let mut kept = file.unsynced[..whole].to_vec();
                    if let Some((offset, Some(next))) = file.unsynced.get(whole) {
                        let prefix = rng.random_range(0..=next.len());
                        kept.push((*offset, Some(next[..prefix].to_vec())));
                    }
                    kept
                }
            };
            for (offset, write) in kept {
                apply(&mut bytes, offset, write.as_deref());
            }
            let data = FileData { current: bytes.clone(), durable: bytes, ..FileData::default() };
            names.insert(name.clone(), Arc::new(Mutex::new(data)));
        }
        let fresh = State {
            durable_names: names.clone(),
            names,
            space_bytes: state.space_bytes,
            ..State::default()
        };
        MemDisk { state: Arc::new(Mutex::new(fresh)) }
    }

    /// Limits the bytes all files may hold together; a write past it fails with ENOSPC.
    pub fn set_space(&self, bytes: Option<u64>) {
        lock(&self.state).space_bytes = bytes;
    }

    /// Lets `count` more syncs succeed, then fails every sync with EIO (`None`: never).
    pub fn fail_syncs_after(&self, count: Option<u64>) {
        lock(&self.state).syncs_until_failure = count;
    }

    /// Makes every sync take `latency` (the caller waits, as for a device's flush), so
    /// appenders of a group commit overlap however the threads are scheduled.
    pub fn set_sync_latency(&self, latency: Option<std::time::Duration>) {
        lock(&self.state).sync_latency = latency;
    }

    /// Makes every read return at most half of what it asks for.
    pub fn set_short_reads(&self, on: bool) {
        lock(&self.state).short_reads = on;
    }

    /// Flips one bit of a file, in what reads see and in what survives a crash (bit rot).
    pub fn flip_bit(&self, name: &str, offset: u64, bit: u8) -> io::Result<()> {
        let file = self.file(name)?;
        let mut file = lock(&file);
        let at = offset as usize;
        if at >= file.current.len() {
            return Err(io::Error::other(format!("{name} has no byte {offset}")));
        }
        file.current[at] ^= 1 << bit;
        if at < file.durable.len() {
            file.durable[at] ^= 1 << bit;
        }
        file.tampered = true;
        Ok(())
    }

    /// Cuts a file short, durably, behind the log's back.
    pub fn cut(&self, name: &str, len: u64) -> io::Result<()> {
        let file = self.file(name)?;
        let mut file = lock(&file);
        file.current.truncate(len as usize);
        file.durable.truncate(len as usize);
        file.tampered = true;
        Ok(())
    }

    /// A file's current bytes.
    pub fn contents(&self, name: &str) -> io::Result<Vec<u8>> {
        let file = self.file(name)?;
        let contents = lock(&file).current.clone();
        Ok(contents)
    }

    /// Writes so far (all files).
    pub fn write_count(&self) -> u64 {
        lock(&self.state).writes
    }

    /// Successful `sync_data` and `sync_all` calls on files so far.
    pub fn sync_count(&self) -> u64 {
        lock(&self.state).syncs
    }

    fn file(&self, name: &str) -> io::Result<Arc<Mutex<FileData>>> {
        let state = lock(&self.state);
        state.names.get(name).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn used_bytes(state: &State) -> u64 {
        state.names.values().map(|file| lock(file).current.len() as u64).sum()
    }
}

fn apply(bytes: &mut Vec<u8>, offset: u64, write: Option<&[u8]>) {
    let offset = offset as usize;
    match write {
        // An append (the log's usual write) copies once, without zeroing first.
        Some(write) if offset == bytes.len() => bytes.extend_from_slice(write),
        Some(write) => {
            if bytes.len() < offset + write.len() {
                bytes.resize(offset + write.len(), 0);
            }
            bytes[offset..offset + write.len()].copy_from_slice(write);
        }
        None => bytes.resize(offset, 0),
    }
}

struct MemFile {
    state: Arc<Mutex<State>>,
    data: Arc<Mutex<FileData>>,
}

impl MemFile {
    fn live(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = lock(&self.state);
        if state.crashed { Err(gone()) } else { Ok(state) }
    }

    fn sync(&self) -> io::Result<()> {
        let mut state = self.live()?;
        match state.syncs_until_failure {
            Some(0) => return Err(io::Error::other("injected sync failure (EIO)")),
            Some(left) => state.syncs_until_failure = Some(left - 1),
            None => {}
        }
        state.syncs += 1;
        let latency = state.sync_latency;
        drop(state);
        let mut data = lock(&self.data);
        let data = &mut *data;
        if data.tampered {
            data.durable.clone_from(&data.current);
            data.tampered = false;
        } else {
            // Only what changed since the last sync is copied: a sync costs the bytes
            // written, not the file's size.
            for (offset, write) in &data.unsynced {
                apply(&mut data.durable, *offset, write.as_deref());
            }
        }
        debug_assert_eq!(data.durable.len(), data.current.len(), "a sync leaves them equal");
        data.unsynced.clear();
        if let Some(latency) = latency {
            std::thread::sleep(latency);
        }
        Ok(())
    }
}

impl DiskFile for MemFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let short = self.live()?.short_reads;
        let data = lock(&self.data);
        let offset = offset as usize;
        if offset >= data.current.len() {
            return Ok(0);
        }
        let mut n = buf.len().min(data.current.len() - offset);
        if short && n > 1 {
            n /= 2;
        }
        buf[..n].copy_from_slice(&data.current[offset..offset + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.live()?;
        if let Some(space) = state.space_bytes {
            let len = lock(&self.data).current.len() as u64;
            let growth = (offset + buf.len() as u64).saturating_sub(len);
            if MemDisk::used_bytes(&state) + growth > space {
                return Err(io::Error::from_raw_os_error(28));
            }
        }
        state.writes += 1;
        let mut data = lock(&self.data);
        apply(&mut data.current, offset, Some(buf));
        data.unsynced.push((offset, Some(buf.to_vec())));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }

    fn len(&self) -> io::Result<u64> {
        drop(self.live()?);
        Ok(lock(&self.data).current.len() as u64)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        drop(self.live()?);
        let mut data = lock(&self.data);
        apply(&mut data.current, len, None);
        data.unsynced.push((len, None));
        Ok(())
    }
}

impl Disk for MemDisk {
    fn describe(&self) -> String {
        "memdisk:".to_string()
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn DiskFile>> {
        let mut state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        if state.names.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let data = Arc::new(Mutex::new(FileData::default()));
        state.names.insert(name.to_string(), data.clone());
        Ok(Arc::new(MemFile { state: self.state.clone(), data }))
    }

    fn open(&self, name: &str, _writable: bool) -> io::Result<Arc<dyn DiskFile>> {
        let state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        let data = state.names.get(name).cloned().ok_or(io::ErrorKind::NotFound)?;
        Ok(Arc::new(MemFile { state: self.state.clone(), data }))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        Ok(state.names.keys().cloned().collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        state.names.remove(name).map(|_| ()).ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        let data = state.names.remove(from).ok_or(io::ErrorKind::NotFound)?;
        state.names.insert(to.to_string(), data);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut state = lock(&self.state);
        if state.crashed {
            return Err(gone());
        }
        state.durable_names = state.names.clone();
        Ok(())
    }

    fn lock(&self, exclusive: bool) -> io::Result<Box<dyn Any + Send + Sync>> {
        let mut state = lock(&self.state);
        if state.exclusive_locks > 0 || (exclusive && state.shared_locks > 0) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "the log is open elsewhere"));
        }
        if exclusive {
            state.exclusive_locks += 1;
        } else {
            state.shared_locks += 1;
        }
        Ok(Box::new(MemLock { state: self.state.clone(), exclusive }))
    }
}

struct MemLock {
    state: Arc<Mutex<State>>,
    exclusive: bool,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if self.exclusive {
            state.exclusive_locks -= 1;
        } else {
            state.shared_locks -= 1;
        }
    }
}
