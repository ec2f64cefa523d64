//! Helpers shared by somnus's tests, and only by tests (every user is a
//! dev-dependency): where the shared trace set is, and which seeds a property test
//! runs.
//!
//! `cargo test` runs each crate's tests from that crate's own directory, so a relative
//! path means something different in every crate. The helpers here resolve paths
//! against the workspace root instead, so that `cargo test --workspace` run from the
//! root of a fresh clone, with `../shared` beside it, finds the traces unaided.

use std::path::{Path, PathBuf};

/// The workspace root: two levels above this crate's manifest (`crates/testkit`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.ancestors().nth(2).map_or_else(|| manifest.to_path_buf(), Path::to_path_buf)
}

/// The default place of the shared traces: `../shared/traces` beside the workspace root.
pub fn default_traces_dir() -> PathBuf {
    workspace_root().join("..").join("shared").join("traces")
}

/// The directory of the shared trace set, or `None` (after saying on stderr that the
/// calling test is skipped) when there is none.
///
/// `SOMNUS_TRACES`, when set, names it; a relative value is taken from the current
/// directory if it exists there, else from the workspace root (where the README's
/// commands run). A set variable that names no trace set is a mistake and fails the
/// test, rather than skipping it silently. Unset, `../shared/traces` beside the
/// workspace root is used if it holds the set.
pub fn traces_dir() -> Option<PathBuf> {
    match std::env::var_os("SOMNUS_TRACES") {
        Some(value) => {
            let given = PathBuf::from(&value);
            let candidates = if given.is_absolute() {
                vec![given.clone()]
            } else {
                vec![given.clone(), workspace_root().join(&given)]
            };
            match candidates.into_iter().find(|dir| holds_traces(dir)) {
                Some(dir) => Some(dir),
                None => panic!(
                    "SOMNUS_TRACES={} names no trace set (looked for msr-csv/rsrch_1.csv there \
                     and under the workspace root {}); unset it to use ../shared/traces",
                    given.display(),
                    workspace_root().display()
                ),
            }
        }
        None => {
            let dir = default_traces_dir();
            if holds_traces(&dir) {
                return Some(dir);
            }
            eprintln!(
                "skipped: no trace set at {} (put ../shared beside the workspace, or set \
                 SOMNUS_TRACES)",
                dir.display()
            );
            None
        }
    }
}

/// Whether `dir` looks like the shared trace set.
fn holds_traces(dir: &Path) -> bool {
    dir.join("msr-csv").join("rsrch_1.csv").is_file()
}

/// The seeds a property test runs: only `ONE_VAR` if it is set (to replay a failure),
/// else `0..COUNT_VAR` (default `count_default`).
///
/// A variable that is set but not a number fails the test with a message naming it.
pub fn seeds(one_var: &str, count_var: &str, count_default: u64) -> Vec<u64> {
    let number = |name: &str| -> Option<u64> {
        let value = std::env::var(name).ok()?;
        match value.trim().parse() {
            Ok(number) => Some(number),
            Err(_) => panic!("{name}={value:?} is not a whole number"),
        }
    };
    match number(one_var) {
        Some(seed) => vec![seed],
        None => (0..number(count_var).unwrap_or(count_default)).collect(),
    }
}

/// Whether this host lets an unprivileged process mount a tmpfs in a user and mount
/// namespace of its own (`unshare -rm`): the full-disk tests give a process a small
/// disk so. Where it does not, they say so and check nothing.
pub fn private_tmpfs_allowed() -> bool {
    std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /tmp"])
        .output()
        .is_ok_and(|out| out.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_root_holds_the_workspace_manifest() {
        // Goal: paths are resolved against the real workspace root, wherever cargo runs
        // the tests from.
        let manifest = workspace_root().join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        assert!(
            text.contains("[workspace]"),
            "{} is not the workspace manifest",
            manifest.display()
        );
    }
}
