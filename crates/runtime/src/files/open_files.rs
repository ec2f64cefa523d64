//! The open-file limit: a server keeps its pack files open (two descriptors a pack),
//! and a gateway or MDS a socket per client, so each process raises its soft limit to
//! the hard limit at start (the usual soft limit, 1,024, is far below what a storage
//! process meets; the hard limit is the operator's bound and is kept).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft limit on open files to the hard limit; the limit now, and the one
/// before if it changed. A limit that cannot be read or raised is left as it is.
pub fn raise_limit() -> Option<(u64, Option<u64>)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some((soft, None));
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some((hard, Some(soft))),
        Err(_) => Some((soft, None)),
    }
}

/// Raises the limit and says so on standard error (a process's log), naming `role`.
pub fn raise_limit_and_say(role: &str) {
    match raise_limit() {
        Some((now, Some(before))) => {
            eprintln!("{role}: open files: soft limit raised from {before} to {now}")
        }
        Some((now, None)) => eprintln!("{role}: open files: limit {now}"),
        None => eprintln!("{role}: open files: the limit could not be read"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Run in a process of its own whose soft limit a shell lowered to 256 (lowering
    /// it here would starve the tests running beside it).
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        if std::env::var_os("SOMNUS_OPEN_FILES_CHILD").is_some() {
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
            assert_eq!(raise_limit(), Some((hard, (hard > 256).then_some(256))));
            assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
            return;
        }
        let me = std::env::current_exe().unwrap();
        let status = std::process::Command::new("sh")
            .args(["-c", r#"ulimit -Sn 256 && exec "$0" --exact "$1" --quiet"#])
            .arg(me)
            .arg("open_files::tests::the_soft_limit_is_raised_to_the_hard_one")
            .env("SOMNUS_OPEN_FILES_CHILD", "1")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "the child found the limit not raised: {status}");
    }
}
