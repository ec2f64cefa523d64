//! Small durable-file steps every on-disk structure of the runtime shares.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Rotates the log at `path`: `path.N-1` becomes `path.N` (the old `path.N`, the
/// oldest of `keep`, goes), ..., `path` becomes `path.1`; the caller opens a new
/// `path` as it opened the first.
pub fn rotate_log(path: &Path, keep: u32) -> std::io::Result<()> {
    let numbered = |n: u32| {
        let mut name = path.to_owned().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let _ = std::fs::rename(numbered(n), numbered(n + 1));
    }
    std::fs::rename(path, numbered(1))
}

/// Syncs the directory `dir`, so that files created, renamed or removed in it stay so
/// after a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The temporary name a file is written under before it is renamed into place.
fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Puts `bytes` at `path` whole or not at all: written under a temporary name,
/// synced, renamed into place, and the directory synced. A crash leaves the old file
/// (or none) or the new one, never a part; a failure (a full disk) leaves the old one
/// and removes the temporary.
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_allocated(path, bytes, 0)
}

/// As [`replace`], the new file `size_bytes` long (at least), its space allocated
/// before it is renamed into place: writes inside it later never find the disk full.
pub fn replace_allocated(path: &Path, bytes: &[u8], size_bytes: u64) -> std::io::Result<()> {
    let tmp = temporary(path);
    let written = write_new(&tmp, bytes, size_bytes);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Creates `dir` and its missing parents readable by their owner alone (0700): they
/// hold the users' data, the journals and the MDS's commands, which no other local
/// user may read. A directory that exists keeps its mode (the operator's choice).
pub fn create_private_dir_all(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The mode of the file at `path` if others than its owner may read or write it (a
/// secret, a key: refused then), or `None` if it is its owner's alone.
pub fn exposed_mode(path: &Path) -> std::io::Result<Option<u32>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// Options that create a file readable and writable by its owner alone (0600), as
/// every file of a server's or the MDS's data is.
pub fn private_file() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

fn write_new(tmp: &Path, bytes: &[u8], size_bytes: u64) -> std::io::Result<()> {
    let mut file = private_file().write(true).create(true).truncate(true).open(tmp)?;
    file.write_all(bytes)?;
    if size_bytes > bytes.len() as u64 {
        allocate(&file, size_bytes)?;
    }
    file.sync_all()
}

/// Puts a new file at `path` holding `bytes`, `size_bytes` long (sparse past `bytes`),
/// whole or not at all, as [`replace`] does.
pub fn replace_sized(path: &Path, bytes: &[u8], size_bytes: u64) -> std::io::Result<()> {
    let tmp = temporary(path);
    let written = (|| {
        let mut file = private_file().write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.set_len(size_bytes.max(bytes.len() as u64))?;
        file.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Allocates `length` bytes of `file` from `offset` (`fallocate`, within its length):
/// writes there later never find the disk full. Where the filesystem cannot, nothing
/// is done (sparse: a later write may find the disk full).
pub fn allocate_range(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    use nix::fcntl::{FallocateFlags, fallocate};
    let (offset, length) = (signed(offset)?, signed(length)?);
    match fallocate(file, FallocateFlags::FALLOC_FL_KEEP_SIZE, offset, length) {
        Ok(()) | Err(nix::errno::Errno::EOPNOTSUPP) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

/// Gives `length` bytes of `file` from `offset` back to the filesystem (they read as
/// zeros). Where the filesystem cannot, nothing is done: the space stays taken until
/// a write takes it again.
pub fn punch_hole(file: &File, offset: u64, length: u64) -> std::io::Result<()> {
    use nix::fcntl::{FallocateFlags, fallocate};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    match fallocate(file, flags, signed(offset)?, signed(length)?) {
        Ok(()) | Err(nix::errno::Errno::EOPNOTSUPP) => Ok(()),
        Err(errno) => Err(errno.into()),
    }
}

fn signed(value: u64) -> std::io::Result<i64> {
    i64::try_from(value).map_err(std::io::Error::other)
}

/// Bytes the files under `dir` take on their filesystem (their allocated blocks),
/// the directories' own blocks included; what a vanished entry took is not counted.
pub fn disk_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(metadata) = entry.metadata() else { continue };
            total += metadata.blocks() * 512;
            if metadata.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

/// `path` opened for direct writes (`O_DIRECT`: around the page cache), if its file
/// system has them (tmpfs has not).
pub(crate) fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_DIRECT.bits();
    OpenOptions::new().write(true).custom_flags(flags).open(path).ok()
}

/// Allocates the first `size_bytes` of `file` (`fallocate`); where the filesystem
/// cannot, only sets its length (sparse: a later write may find the disk full).
pub fn allocate(file: &File, size_bytes: u64) -> std::io::Result<()> {
    use nix::fcntl::{FallocateFlags, fallocate};
    let length = i64::try_from(size_bytes).map_err(std::io::Error::other)?;
    match fallocate(file, FallocateFlags::empty(), 0, length) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EOPNOTSUPP) => file.set_len(size_bytes),
        Err(errno) => Err(errno.into()),
    }
}

/// Whether `error` says the disk (or the user's quota) has no room.
pub fn is_no_space(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded)
}

/// The bytes an unprivileged writer may still put on the filesystem holding `path`:
/// none when it has no inode left for a new file (where it counts inodes at all).
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(path)?;
    if stat.files() > 0 && stat.files_available() == 0 {
        return Ok(0);
    }
    Ok(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        replace(&path, b"one").unwrap();
        replace(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["state"]);
    }
}
