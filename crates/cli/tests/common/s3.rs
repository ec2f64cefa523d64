//! A gateway (`somnus s3`) in front of a test cluster, and the Python clients run
//! against it (crates/s3/tests/*.py, boto3 and the AWS CLI).
// Processes are waited for in real time.
#![allow(clippy::disallowed_methods)]

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Cluster, free_ports};

pub(crate) const ACCESS_KEY: &str = "somnus-test";
pub(crate) const SECRET_KEY: &str = "somnus-test-secret";

/// The gateway process, stopped when the test ends however it ends.
pub(crate) struct Gateway {
    pub(crate) child: Child,
    pub(crate) address: SocketAddr,
    /// What clients are given: http://ADDRESS unless a test serves HTTPS.
    pub(crate) endpoint: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gateway {
    /// Kills the process (SIGKILL: no request it serves finishes).
    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Runs `crates/s3/tests/<script>` with `args` against this gateway, `env` added;
    /// its standard output (it must succeed).
    pub(crate) fn python(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
        let output = self.python_command(script, args, env).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{script} {args:?} failed:\n{stdout}\n{stderr}");
        stdout
    }

    /// The command that runs `script` against this gateway, not yet started.
    pub(crate) fn python_command(
        &self,
        script: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Command {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../s3/tests").join(script);
        let mut command = Command::new("python3");
        command
            .arg(path)
            .args(args)
            .env("S3_ENDPOINT", &self.endpoint)
            .env("S3_ACCESS_KEY", ACCESS_KEY)
            .env("S3_SECRET_KEY", SECRET_KEY)
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        command
    }
}

/// Starts `somnus s3` for `cluster` on a free loopback port, `extra` flags added;
/// returns once it listens.
pub(crate) fn start_gateway(cluster: &Cluster, extra: &[&str]) -> Gateway {
    start_gateway_by(cluster, Command::new(env!("CARGO_BIN_EXE_somnus")), extra)
}

/// [`start_gateway`], the process started by `command` (the binary, or a wrapper
/// that runs it).
pub(crate) fn start_gateway_by(cluster: &Cluster, command: Command, extra: &[&str]) -> Gateway {
    let address = free_ports(1)[0];
    let listen = address.to_string();
    let mut args =
        vec!["s3", "--listen", &listen, "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY];
    args.extend_from_slice(extra);
    let child = cluster.spawn_in(command, &args);
    let gateway = Gateway { child, address, endpoint: format!("http://{address}") };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(address).is_err() {
        assert!(Instant::now() < deadline, "the gateway does not listen on {address}");
        std::thread::sleep(Duration::from_millis(50));
    }
    gateway
}

/// Whether boto3 and the AWS CLI are here; under CI they must be.
pub(crate) fn clients_installed() -> bool {
    let boto3 = Command::new("python3").args(["-c", "import boto3"]).status();
    let aws = Command::new("aws").arg("--version").stdout(Stdio::null()).status();
    let installed = boto3.is_ok_and(|s| s.success()) && aws.is_ok_and(|s| s.success());
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "boto3 and the AWS CLI are needed: python3 -m pip install boto3 awscli"
        );
        eprintln!("skipped: boto3 or the AWS CLI is missing (python3 -m pip install boto3 awscli)");
    }
    installed
}
