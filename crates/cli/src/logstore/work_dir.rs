//! The working directory a crash test or a benchmark of a log is given.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// Checks that `dir`, where a command is to make its working directory, is an existing
/// directory: the commands create nothing the user did not ask for, parents included.
pub(super) fn existing_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(metadata) if metadata.is_file() => bail!("{} is a file, not a directory", dir.display()),
        Ok(_) => bail!("{} is not a directory", dir.display()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            bail!("{} does not exist; create it first", dir.display())
        }
        Err(error) => Err(error).with_context(|| format!("looking at {}", dir.display())),
    }
}
