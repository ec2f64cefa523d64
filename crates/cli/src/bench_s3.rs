//! `somnus bench s3`: PUT and GET throughput and latency of an S3 endpoint.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_s3::bench::{BenchConfig, Phase};
use somnus_s3::sigv4::Signer;

use crate::cluster_cmd::{ClusterArg, runtime};

#[derive(Args)]
pub(crate) struct BenchS3Args {
    /// The endpoint (plain HTTP): somnus's gateway, or any S3 store.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    endpoint: String,
    /// The access key (with --secret-key). Default: $AWS_ACCESS_KEY_ID and
    /// $AWS_SECRET_ACCESS_KEY if set, else the somnus cluster's gateway keys (its
    /// `s3-credentials`, or $SOMNUS_S3_ACCESS_KEY and $SOMNUS_S3_SECRET_KEY).
    #[arg(long, requires = "secret_key")]
    access_key: Option<String>,
    #[arg(long, requires = "access_key")]
    secret_key: Option<String>,
    /// The region requests are signed for.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Clients, each with one request in flight on a connection of its own.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds of each phase (PUT, then GET, per object size).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Object sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [4096u64, 1 << 20])]
    sizes: Vec<u64>,
    /// The bucket (created if missing, and then deleted at the end).
    #[arg(long, default_value = "somnus-bench")]
    bucket: String,
    /// Keep the objects stored (and the bucket).
    #[arg(long)]
    keep: bool,
    /// A directory of the store's data (repeatable: every directory it writes to,
    /// without its logs): its disk use is measured before and after each PUT phase,
    /// and the bytes on disk per object stored are reported. Each measure waits until
    /// the use holds still for a second (a store may move what it acknowledged to its
    /// final place a moment later).
    #[arg(long = "disk", value_name = "DIR")]
    disk_dirs: Vec<std::path::PathBuf>,
    /// Print the figures as one JSON document (schema `somnus-bench-s3`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

fn address(endpoint: &str) -> Result<std::net::SocketAddr> {
    let Some(rest) = endpoint.strip_prefix("http://") else {
        bail!("--endpoint {endpoint}: expected http://HOST:PORT (HTTPS is not supported)");
    };
    let host = rest.trim_end_matches('/');
    std::net::ToSocketAddrs::to_socket_addrs(host)
        .with_context(|| format!("--endpoint {endpoint}: not a host and port"))?
        .next()
        .with_context(|| format!("--endpoint {endpoint}: resolves to no address"))
}

pub(crate) fn run(args: &BenchS3Args) -> Result<()> {
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 3600.0) {
        bail!("--seconds {}: must be more than 0 and at most 3600", args.seconds);
    }
    if args.concurrency == 0 || args.concurrency > 1024 {
        bail!("--concurrency {}: must be 1 to 1024", args.concurrency);
    }
    if args.sizes.is_empty() || args.sizes.iter().any(|&s| s == 0 || s > 5 << 30) {
        bail!("--sizes: each must be 1 byte to 5 GiB");
    }
    // The endpoint first: a bad one is named before keys are looked for (or made).
    let address = address(&args.endpoint)?;
    let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let (access_key, secret_key) = match args.access_key.clone().zip(args.secret_key.clone()) {
        Some(keys) => keys,
        None => match env("AWS_ACCESS_KEY_ID").zip(env("AWS_SECRET_ACCESS_KEY")) {
            Some(keys) => keys,
            None => {
                let keys = crate::s3_cmd::credentials(None, None, &args.cluster.path())
                    .context("no keys given and no somnus cluster's gateway keys found")?;
                (keys.access_key, keys.secret_key)
            }
        },
    };
    let config = BenchConfig {
        address,
        signer: Signer { access_key, secret_key, region: args.region.clone() },
        bucket: args.bucket.clone(),
        concurrency: args.concurrency,
        phase: Duration::from_secs_f64(args.seconds),
        sizes: args.sizes.clone(),
        keep: args.keep,
        disk_dirs: args.disk_dirs.clone(),
    };
    if let Some(dir) = args.disk_dirs.iter().find(|d| !d.is_dir()) {
        bail!("--disk {}: not a directory", dir.display());
    }
    let json = args.json;
    let phases = runtime()?.block_on(somnus_s3::bench::run(&config, |phase| {
        if !json {
            crate::output::note(format!(
                "  {} {} B: {:.0} op/s",
                phase.op, phase.size_bytes, phase.ops_per_s
            ));
        }
    }))?;
    print(args, &phases)
}

fn print(args: &BenchS3Args, phases: &[Phase]) -> Result<()> {
    if args.json {
        let figures = serde_json::json!({
            "endpoint": args.endpoint,
            "concurrency": args.concurrency,
            "seconds_per_phase": args.seconds,
            "phases": phases,
        });
        let document = crate::provenance::Document::new("somnus-bench-s3", figures);
        return outln!("{}", document.to_json()?);
    }
    outln!(
        "S3 at {}: {} clients, one request in flight each, {} s per phase",
        args.endpoint,
        args.concurrency,
        args.seconds
    )?;
    outln!(
        "{:>4} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>14}",
        "op",
        "size B",
        "ops",
        "op/s",
        "MiB/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "disk B/object"
    )?;
    for p in phases {
        let disk = p.disk_bytes_per_object.map_or("-".to_owned(), |b| format!("{b:.0}"));
        outln!(
            "{:>4} {:>9} {:>9} {:>10.0} {:>9.1} {:>9.2} {:>9.2} {:>7} {:>14}",
            p.op,
            p.size_bytes,
            p.ops,
            p.ops_per_s,
            p.mib_per_s,
            p.p50_ms,
            p.p99_ms,
            p.errors,
            disk
        )?;
    }
    Ok(())
}
