//! The device under the log: a directory of files, behind a trait so that tests can put
//! a fault-injecting layer ([`crate::MemDisk`]) where production has the file system
//! ([`FsDisk`]).

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One file of the log, shared by the writer and readers (positioned I/O only).
pub trait DiskFile: Send + Sync {
    /// Reads at `offset`; may return fewer bytes than asked, 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes written data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Makes written data and all metadata durable (fsync).
    fn sync_all(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Cuts the file to `len` bytes (not durable until synced).
    fn truncate(&self, len: u64) -> io::Result<()>;
}

/// A directory of files. Names are plain file names, never paths.
pub trait Disk: Send + Sync {
    /// Where the directory is, for messages.
    fn describe(&self) -> String;
    /// Creates a new file for reading and writing; fails if it exists.
    fn create(&self, name: &str) -> io::Result<Arc<dyn DiskFile>>;
    /// Opens an existing file, for writing too if `writable`.
    fn open(&self, name: &str, writable: bool) -> io::Result<Arc<dyn DiskFile>>;
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Unlinks a file (open handles keep reading it).
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes creations, removals and renames in the directory durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Takes the directory's lock (shared for readers, exclusive for the writer) for as
    /// long as the returned guard lives; fails at once if another holder conflicts.
    fn lock(&self, exclusive: bool) -> io::Result<Box<dyn Any + Send + Sync>>;
}

/// Reads exactly `buf.len()` bytes at `offset`, looping over short reads; a file that
/// ends first is an `UnexpectedEof` error.
pub(crate) fn read_exact_at(file: &dyn DiskFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "file ends at byte {} but {} bytes were expected from byte {offset}",
                        offset + done as u64,
                        buf.len()
                    ),
                ));
            }
            Ok(n) => done += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// Reads a whole file.
pub(crate) fn read_all(file: &dyn DiskFile) -> io::Result<Vec<u8>> {
    let len = file.len()?;
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large for memory"))?;
    let mut bytes = vec![0; len];
    read_exact_at(file, &mut bytes, 0)?;
    Ok(bytes)
}

/// The file system: a real directory, real files, fsync and fdatasync.
#[derive(Debug)]
pub struct FsDisk {
    dir: PathBuf,
}

impl FsDisk {
    /// The directory `dir`, created (with its parents) if missing. Each directory
    /// created is made durable in its parent, so that a log (and what it acknowledges)
    /// cannot vanish with the directory entry after a power loss.
    pub fn new(dir: impl AsRef<Path>) -> io::Result<FsDisk> {
        let dir = dir.as_ref().to_path_buf();
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|path| !path.as_os_str().is_empty() && !path.exists())
            .map(Path::to_path_buf)
            .collect();
        // Readable by their owner alone: the log holds the users' data.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&dir)?;
        for created in missing.iter().rev() {
            let parent = match created.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            File::open(parent)?.sync_all()?;
        }
        Ok(FsDisk { dir })
    }

    /// The directory, if it exists already (for read-only use: nothing is created).
    /// The error says what is there instead: nothing, or a file.
    pub fn existing(dir: impl AsRef<Path>) -> io::Result<FsDisk> {
        let dir = dir.as_ref().to_path_buf();
        match std::fs::metadata(&dir) {
            Ok(metadata) if metadata.is_dir() => Ok(FsDisk { dir }),
            Ok(metadata) if metadata.is_file() => {
                Err(io::Error::new(io::ErrorKind::NotADirectory, "is a file, not a log directory"))
            }
            Ok(_) => Err(io::Error::new(io::ErrorKind::NotADirectory, "is not a directory")),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Err(io::Error::new(io::ErrorKind::NotFound, "no such directory"))
            }
            Err(error) => Err(error),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

struct FsFile(File);

impl DiskFile for FsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl Disk for FsDisk {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn DiskFile>> {
        let file =
            owner_only().read(true).write(true).create_new(true).open(self.dir.join(name))?;
        Ok(Arc::new(FsFile(file)))
    }

    fn open(&self, name: &str, writable: bool) -> io::Result<Arc<dyn DiskFile>> {
        let file = OpenOptions::new().read(true).write(writable).open(self.dir.join(name))?;
        Ok(Arc::new(FsFile(file)))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn lock(&self, exclusive: bool) -> io::Result<Box<dyn Any + Send + Sync>> {
        let path = self.dir.join("LOCK");
        let file = if exclusive {
            owner_only().read(true).write(true).create(true).truncate(false).open(&path)?
        } else {
            // A reader must not create files; without a LOCK file there is no writer.
            match File::open(&path) {
                Ok(file) => file,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    return Ok(Box::new(()));
                }
                Err(error) => return Err(error),
            }
        };
        let taken = if exclusive { file.try_lock() } else { file.try_lock_shared() };
        match taken {
            Ok(()) => Ok(Box::new(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "another process has the log open (LOCK is held)",
            )),
            Err(std::fs::TryLockError::Error(error)) => Err(error),
        }
    }
}

/// Options that create a file readable and writable by its owner alone (0600): the
/// log holds the users' data.
fn owner_only() -> OpenOptions {
    let mut options = OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}
