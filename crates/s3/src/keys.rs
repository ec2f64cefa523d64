//! The gateway's access keys: given on the command line or in the environment, or
//! kept in a file beside the cluster file (`s3-credentials`, readable by its owner
//! only), made with random keys the first time, so that the gateway started by
//! `somnus up` and a `somnus s3` started later accept the same keys.
//!
//! The file is two lines: `access_key = "..."` and `secret_key = "..."`.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::serve::Credentials;

#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} can be read by others (mode {mode:o}): run `chmod 600 {path}`")]
    Exposed { path: PathBuf, mode: u32 },
    #[error("{path}:{line}: expected `access_key = \"...\"` or `secret_key = \"...\"`")]
    Malformed { path: PathBuf, line: usize },
    #[error("{path}: names no {0}", path = .1.display())]
    Missing(&'static str, PathBuf),
    #[error("no randomness for a key: {0}")]
    Entropy(String),
}

/// The keys at `path`, made (durably) if the file does not exist.
pub fn load_or_create(path: &Path) -> Result<Credentials, KeysError> {
    match fs::metadata(path) {
        Ok(_) => load(path),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(source) => Err(KeysError::Io { path: path.to_owned(), source }),
    }
}

fn random(chars: usize) -> Result<String, KeysError> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; chars];
    getrandom::fill(&mut bytes).map_err(|e| KeysError::Entropy(e.to_string()))?;
    // 62 letters from 256 values: the first 248 map evenly, the rest are rare enough
    // that their slight bias does not matter for 160 bits and more.
    Ok(bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect())
}

fn create(path: &Path) -> Result<Credentials, KeysError> {
    let credentials =
        Credentials { access_key: format!("SOMNUS{}", random(14)?), secret_key: random(40)? };
    let io = |source| KeysError::Io { path: path.to_owned(), source };
    let mut file =
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io)?;
    let text = format!(
        "access_key = \"{}\"\nsecret_key = \"{}\"\n",
        credentials.access_key, credentials.secret_key
    );
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(credentials)
}

fn load(path: &Path) -> Result<Credentials, KeysError> {
    let io = |source| KeysError::Io { path: path.to_owned(), source };
    if let Some(mode) = somnus_runtime::files::durable::exposed_mode(path).map_err(io)? {
        return Err(KeysError::Exposed { path: path.to_owned(), mode });
    }
    let text = fs::read_to_string(path).map_err(io)?;
    let (mut access, mut secret) = (None, None);
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = || KeysError::Malformed { path: path.to_owned(), line: index + 1 };
        let (name, value) = line.split_once('=').ok_or_else(malformed)?;
        let value = value.trim().strip_prefix('"').and_then(|v| v.strip_suffix('"'));
        let value = value.filter(|v| !v.is_empty() && !v.contains('"')).ok_or_else(malformed)?;
        match name.trim() {
            "access_key" => access = Some(value.to_owned()),
            "secret_key" => secret = Some(value.to_owned()),
            _ => return Err(malformed()),
        }
    }
    Ok(Credentials {
        access_key: access.ok_or_else(|| KeysError::Missing("access_key", path.to_owned()))?,
        secret_key: secret.ok_or_else(|| KeysError::Missing("secret_key", path.to_owned()))?,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn keys_are_made_once_and_read_back() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s3-credentials");
        let made = load_or_create(&path)?;
        assert_eq!(made.secret_key.len(), 40);
        let again = load_or_create(&path)?;
        assert_eq!((again.access_key, again.secret_key), (made.access_key, made.secret_key));
        assert_eq!(fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
        Ok(())
    }

    #[test]
    fn bad_files_are_refused_with_where() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("keys");
        let write = |text: &str, mode: u32| -> std::io::Result<()> {
            fs::write(&path, text)?;
            fs::set_permissions(&path, fs::Permissions::from_mode(mode))
        };
        write("access_key = \"a\"\nsecret_key = \"b\"\n", 0o644)?;
        assert!(matches!(load(&path), Err(KeysError::Exposed { .. })));
        write("access_key = \"a\"\nsecret = \"b\"\n", 0o600)?;
        let error = load(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            error.ends_with("keys:2: expected `access_key = \"...\"` or `secret_key = \"...\"`"),
            "{error}"
        );
        write("access_key = \"a\"\n", 0o600)?;
        assert!(matches!(load(&path), Err(KeysError::Missing("secret_key", _))));
        Ok(())
    }
}
