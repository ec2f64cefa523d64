//! The processes `somnus up` runs (the MDS, the servers, the gateway): each with its
//! standard output and error appended line by line to its log under `logs/`, rotated
//! past [`LOG_BYTES_MAX`] (`name.log.1` .. `name.log.4`, the oldest dropped), so that
//! the lines that explained a crash outlive the restart; and each started again when
//! it exits unasked, after a backoff, which `up` says.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Set by `up` in its children's environment to its process id: each asks the kernel
/// for SIGTERM when `up` ends, even by SIGKILL, where no handler of `up` runs
/// ([`stop_with_parent`]).
pub(crate) const STOP_WITH_PARENT: &str = "SOMNUS_STOP_WITH_PARENT";

/// In a role `up` started: SIGTERM when `up` ends (`PR_SET_PDEATHSIG`), or an error at
/// once if it already has.
pub(crate) fn stop_with_parent() -> Result<()> {
    let Ok(parent) = std::env::var(STOP_WITH_PARENT) else { return Ok(()) };
    let parent: i32 = parent.parse().with_context(|| format!("{STOP_WITH_PARENT}={parent}"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
        .context("cannot ask to stop with `somnus up`")?;
    if nix::unistd::getppid().as_raw() != parent {
        bail!("`somnus up` (process {parent}) has ended: not starting");
    }
    Ok(())
}

/// A log's size before it is rotated.
pub(crate) const LOG_BYTES_MAX: u64 = 64 << 20;
/// Rotated logs kept.
const LOGS_KEPT: u32 = 4;
/// The first wait before a child that exited is started again; doubled at each exit
/// in a row, up to [`RESTART_DELAY_MAX`].
const RESTART_DELAY: Duration = Duration::from_secs(1);
const RESTART_DELAY_MAX: Duration = Duration::from_secs(60);
/// A child that ran this long before it exited starts the backoff over.
const RAN_WELL: Duration = Duration::from_secs(60);

/// How to start a child: its program, arguments and log.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) name: String,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) log: PathBuf,
}

/// A child running (or waiting to start again).
pub(crate) struct Running {
    pub(crate) name: String,
    pub(crate) child: Child,
    spec: Spec,
    log: Arc<ProcessLog>,
    started: Instant,
    /// Exits in a row, each soon after its start.
    exits: u32,
    /// When it starts again, after an exit.
    restart_at: Option<Instant>,
}

impl Running {
    /// Starts `spec`'s process, its output appended to its log.
    pub(crate) fn start(spec: Spec) -> Result<Running> {
        let log = Arc::new(ProcessLog::open(&spec.log)?);
        let child = spawn(&spec, &log)?;
        Ok(Running {
            name: spec.name.clone(),
            child,
            spec,
            log,
            started: Instant::now(),
            exits: 0,
            restart_at: None,
        })
    }

    /// Checks the child: if it exited, says so and plans its restart; if a planned
    /// restart is due, starts it again (and says so).
    pub(crate) fn supervise(&mut self) -> Result<()> {
        if let Some(at) = self.restart_at {
            if Instant::now() < at {
                return Ok(());
            }
            self.restart_at = None;
            self.child = spawn(&self.spec, &self.log)?;
            self.started = Instant::now();
            noteln!("somnus: {} started again", self.name);
            return Ok(());
        }
        let Ok(Some(status)) = self.child.try_wait() else { return Ok(()) };
        if self.started.elapsed() >= RAN_WELL {
            self.exits = 0;
        }
        let delay = RESTART_DELAY.saturating_mul(1 << self.exits.min(6)).min(RESTART_DELAY_MAX);
        self.exits += 1;
        self.restart_at = Some(Instant::now() + delay);
        let line =
            format!("somnus up: {} exited ({status}); starting it again in {delay:?}", self.name);
        self.log.append(line.as_bytes());
        noteln!(
            "somnus: {} exited ({status}); starting it again in {delay:?} (see {})",
            self.name,
            self.spec.log.display()
        );
        Ok(())
    }
}

/// Spawns `spec`'s process with its output piped into `log`.
fn spawn(spec: &Spec, log: &Arc<ProcessLog>) -> Result<Child> {
    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // A cluster never outlives the `up` that started it, however `up` ends.
        .env(STOP_WITH_PARENT, std::process::id().to_string());
    let mut child = command.spawn().with_context(|| format!("cannot start {}", spec.name))?;
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(pump(stdout, log.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(pump(stderr, log.clone()));
    }
    let line = format!("somnus up: started {}, process {}", spec.name, child.id().unwrap_or(0));
    log.append(line.as_bytes());
    Ok(child)
}

/// Appends each line `output` gives to `log`, until it ends.
async fn pump(output: impl AsyncRead + Unpin, log: Arc<ProcessLog>) {
    let mut lines = BufReader::new(output).split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        log.append(&line);
    }
}

/// A child's log: appended to, owner-only (a gateway prints its secret key), rotated
/// past [`LOG_BYTES_MAX`].
pub(crate) struct ProcessLog {
    path: PathBuf,
    file: Mutex<(std::fs::File, u64)>,
}

impl ProcessLog {
    pub(crate) fn open(path: &Path) -> Result<ProcessLog> {
        let file =
            open_append(path).with_context(|| format!("cannot open the log {}", path.display()))?;
        // A log made by an earlier version keeps its mode when opened: set it.
        file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let size = file.metadata()?.len();
        Ok(ProcessLog { path: path.to_owned(), file: Mutex::new((file, size)) })
    }

    /// Appends `line` and a newline (a failure is said on `up`'s own standard error).
    pub(crate) fn append(&self, line: &[u8]) {
        let mut guard = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.1 > 0 && guard.1 + line.len() as u64 + 1 > LOG_BYTES_MAX {
            let rotated = somnus_runtime::files::durable::rotate_log(&self.path, LOGS_KEPT);
            match rotated.and_then(|()| open_append(&self.path)) {
                Ok(file) => *guard = (file, 0),
                Err(error) => eprintln!("somnus: cannot rotate {}: {error}", self.path.display()),
            }
        }
        let (file, size) = &mut *guard;
        let written = file.write_all(line).and_then(|()| file.write_all(b"\n"));
        match written {
            Ok(()) => *size += line.len() as u64 + 1,
            Err(error) => eprintln!("somnus: cannot write {}: {error}", self.path.display()),
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    somnus_runtime::files::durable::private_file().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_log_is_appended_to_and_rotated_past_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server-1.log");
        std::fs::write(&path, "the line that explained the crash\n").unwrap();
        let log = ProcessLog::open(&path).unwrap();
        log.append(b"started again");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "the line that explained the crash\nstarted again\n");
        let line = vec![b'x'; 1 << 20];
        for _ in 0..(LOG_BYTES_MAX >> 20) + 1 {
            log.append(&line);
        }
        let rotated = std::fs::read_to_string(dir.path().join("server-1.log.1")).unwrap();
        assert!(rotated.starts_with("the line that explained the crash\n"));
        assert!(std::fs::metadata(&path).unwrap().len() <= LOG_BYTES_MAX);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
