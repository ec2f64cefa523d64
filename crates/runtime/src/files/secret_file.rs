//! The cluster's secret on disk: `cluster.secret`, 64 hex digits, mode 0600, made
//! once by `somnus up` (or `somnus secret create`) and read by every process.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use somnus_wire::{ClusterSecret, SECRET_BYTES, SecretError};

/// The secret file's name in a cluster's data directory.
pub const FILE_NAME: &str = "cluster.secret";

#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("cannot read the cluster secret {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write the cluster secret {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error(
        "the cluster secret {path} exists already; a new one would lock out the cluster's processes"
    )]
    Exists { path: PathBuf },
    #[error(
        "the cluster secret {path} can be read by others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the cluster secret {path} is not valid: {source}")]
    Invalid { path: PathBuf, source: SecretError },
    #[error("no fresh randomness from the operating system: {0}")]
    Entropy(String),
}

/// Makes a new secret at `path` (which must not exist), readable by its owner only,
/// durably: the file and its directory are synced before it is returned.
pub fn create(path: &Path) -> Result<ClusterSecret, SecretFileError> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|error| SecretFileError::Entropy(error.to_string()))?;
    let secret = ClusterSecret::from_bytes(bytes);
    let write_error = |source| SecretFileError::Write { path: path.to_owned(), source };
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(
        |source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => SecretFileError::Exists { path: path.to_owned() },
            _ => write_error(source),
        },
    )?;
    file.write_all(secret.to_file_text().as_bytes()).map_err(write_error)?;
    file.sync_all().map_err(write_error)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(write_error)?;
    Ok(secret)
}

/// Reads the secret at `path`, refusing a file that others can read.
pub fn load(path: &Path) -> Result<ClusterSecret, SecretFileError> {
    let read_error = |source| SecretFileError::Read { path: path.to_owned(), source };
    if let Some(mode) = crate::files::durable::exposed_mode(path).map_err(read_error)? {
        return Err(SecretFileError::Exposed { path: path.to_owned(), mode });
    }
    let text = fs::read_to_string(path).map_err(read_error)?;
    ClusterSecret::parse(&text)
        .map_err(|source| SecretFileError::Invalid { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_secret_is_created_private_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let made = create(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load(&path).unwrap(), made);
        let again = create(&path).unwrap_err();
        assert!(matches!(again, SecretFileError::Exists { .. }), "{again}");
        assert_eq!(load(&path).unwrap(), made, "the refused create changed nothing");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let exposed = load(&path).unwrap_err().to_string();
        assert!(exposed.contains("mode 644") && exposed.contains("chmod 600"), "{exposed}");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, "not hex\n").unwrap();
        let invalid = load(&path).unwrap_err().to_string();
        assert!(invalid.contains("64 hex digits"), "{invalid}");
    }
}
