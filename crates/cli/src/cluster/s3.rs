//! `somnus s3`: the S3-compatible gateway of a running cluster (docs/s3-compat.md).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use somnus_runtime::client::ClusterClient;
use somnus_s3::observe::AccessLog;
use somnus_s3::{Credentials, Store};

use crate::cluster::access::{ClusterArg, load, runtime};

#[derive(Args)]
pub(crate) struct S3Args {
    /// The address to serve S3 on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// The access key clients sign with (with --secret-key). Default:
    /// $SOMNUS_S3_ACCESS_KEY and $SOMNUS_S3_SECRET_KEY if set, else the keys in
    /// `s3-credentials` beside the cluster file, made at random the first time.
    #[arg(long, requires = "secret_key")]
    access_key: Option<String>,
    /// The secret key of --access-key.
    #[arg(long, requires = "access_key")]
    secret_key: Option<String>,
    /// Abort multipart uploads left unfinished this many hours (checked every five
    /// minutes, or every quarter of HOURS if that is shorter); their parts' space is
    /// freed.
    #[arg(long, default_value_t = 24.0, value_name = "HOURS")]
    abandoned_after: f64,
    /// Serve the gateway's `/status` (JSON) and `/metrics` (Prometheus: requests by
    /// operation, errors by code, latency histograms) over HTTP on this address.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Write one line per request (time, request id, operation, bucket, key, status,
    /// bytes in and out, seconds) to this file, rotated past --access-log-mib.
    #[arg(long, value_name = "FILE")]
    access_log: Option<std::path::PathBuf>,
    /// The access log's size before it is rotated (to FILE.1 .. FILE.4), MiB.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    access_log_mib: u64,
    /// Connections served at once; one more is answered 503 SlowDown and closed.
    #[arg(long, default_value_t = 4096, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_connections: u64,
    /// Seconds a client has to send a request's headers once it sent their first
    /// byte (a connection sending them slower is closed).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    header_timeout_s: f64,
    /// Seconds a connection may stay open with no request under way and no byte sent
    /// either way (then it is closed; S3 clients open another).
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    idle_timeout_s: f64,
    /// Serve HTTPS (TLS 1.3 and 1.2) with this certificate chain, as PEM (the
    /// gateway's own certificate first); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert, as PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    #[command(flatten)]
    cluster: ClusterArg,
}

/// A positive number of seconds from the flag `flag`.
fn seconds(flag: &str, value: f64) -> Result<std::time::Duration> {
    if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
        anyhow::bail!("{flag} {value}: must be a number of seconds above 0 (a day at most)");
    }
    Ok(std::time::Duration::from_secs_f64(value))
}

/// The keys the gateway accepts: the flags', the environment's, or the file's.
pub(crate) fn credentials(
    access_key: Option<String>,
    secret_key: Option<String>,
    cluster_file: &Path,
) -> Result<Credentials> {
    let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let given = access_key
        .zip(secret_key)
        .or_else(|| env("SOMNUS_S3_ACCESS_KEY").zip(env("SOMNUS_S3_SECRET_KEY")));
    if let Some((access_key, secret_key)) = given {
        return Ok(Credentials { access_key, secret_key });
    }
    let path = cluster_file.with_file_name("s3-credentials");
    Ok(somnus_s3::keys::load_or_create(&path)?)
}

pub(crate) fn run(args: S3Args) -> Result<()> {
    crate::cluster::children::stop_with_parent()?;
    let path = args.cluster.path();
    let (file, secret) = load(&args.cluster)?;
    let credentials = credentials(args.access_key, args.secret_key, &path)?;
    if !(args.abandoned_after.is_finite() && args.abandoned_after > 0.0) {
        anyhow::bail!(
            "--abandoned-after {}: must be a positive number of hours",
            args.abandoned_after
        );
    }
    let abandoned_after = std::time::Duration::from_secs_f64(args.abandoned_after * 3600.0);
    let limits = somnus_s3::Limits {
        max_connections: args.max_connections as usize,
        header_timeout: seconds("--header-timeout-s", args.header_timeout_s)?,
        idle_timeout: seconds("--idle-timeout-s", args.idle_timeout_s)?,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(somnus_s3::https::server_config(cert, key)?),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    somnus_runtime::files::open_files::raise_limit_and_say("s3");
    runtime()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot serve S3 on {}", args.listen))?;
        let client = ClusterClient::start(Arc::new(file), secret)?;
        let store = Store::new(client);
        let log = match &args.access_log {
            Some(path) => Some(
                AccessLog::open(path, args.access_log_mib << 20, 4)
                    .with_context(|| format!("cannot open the access log {}", path.display()))?,
            ),
            None => None,
        };
        if let Some(address) = args.http {
            serve_status(address, args.listen, log.clone()).await?;
        }
        move_legacy_records(store.clone());
        // Abandoned uploads are looked for every five minutes, or sooner when they
        // are abandoned sooner (a test's seconds).
        let sweeper = std::time::Duration::from_secs(300).min(abandoned_after / 4);
        somnus_s3::sweep_abandoned_uploads(store.clone(), abandoned_after, sweeper);
        let service = somnus_s3::service(store, std::slice::from_ref(&credentials));
        let address = listener.local_addr()?;
        outln!("S3 gateway of {} on {scheme}://{address} (region us-east-1)", path.display())?;
        outln!("  access key {}", credentials.access_key)?;
        outln!("  secret key {}", credentials.secret_key)?;
        outln!(
            "  try: AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url {scheme}://{address} s3 ls",
            credentials.access_key, credentials.secret_key
        )?;
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        somnus_s3::serve_logged(listener, service, stop, log, limits, tls).await?;
        Ok(())
    })
}

/// Moves the records an earlier build's gateway wrote into their names' attributes
/// (`somnus_s3::legacy`), in the background, tried again a few times while the
/// cluster comes up; what it moved is printed.
fn move_legacy_records(store: Store) {
    tokio::spawn(async move {
        for attempt in 1..=5u32 {
            match store.move_legacy_records().await {
                Ok(moved) if moved == somnus_s3::legacy::Moved::default() => return,
                Ok(moved) => {
                    eprintln!(
                        "somnus s3: moved {} records of an earlier build into the metadata \
                         service, deleted {} names no record holds",
                        moved.records, moved.deleted
                    );
                    return;
                }
                Err(error) if attempt < 5 => {
                    let _ = error;
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
                Err(error) => eprintln!("somnus s3: moving an earlier build's records: {error}"),
            }
        }
    });
}

/// Serves the gateway's `/status` and `/metrics` on `address`.
async fn serve_status(
    address: SocketAddr,
    listen: SocketAddr,
    log: Option<AccessLog>,
) -> Result<()> {
    let socket = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot serve the gateway's status on {address}"))?;
    let report = Arc::new(move || {
        serde_json::json!({
            "s3": listen.to_string(),
            "access_log": log.as_ref().map(|l| l.path().display().to_string()),
            "access_log_lines_dropped": log.as_ref().map_or(0, AccessLog::dropped),
        })
    });
    let endpoint = somnus_runtime::observe::http::Endpoint {
        report,
        metrics: somnus_runtime::observe::metrics::install(),
        operator: None,
    };
    somnus_runtime::observe::http::serve(socket, endpoint);
    Ok(())
}
