//! `somnus bench s3`: PUT and GET throughput and latency of an S3 endpoint, or of
//! several in alternating rounds (medians, and ratios to the first).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use somnus_s3::bench::{BenchConfig, Endpoint, Phase};
use somnus_s3::sigv4::Signer;

use crate::cluster::access::{ClusterArg, runtime};

#[derive(Args)]
pub(crate) struct BenchS3Args {
    /// The endpoint, http://HOST:PORT or https://HOST:PORT: somnus's gateway, or any
    /// S3 store. Repeated: each is measured in turn, round after round (`--rounds`),
    /// and their medians compared as ratios to the first's (with the same keys).
    #[arg(long = "endpoint", default_value = "http://127.0.0.1:9000")]
    endpoints: Vec<String>,
    /// The authorities (or self-signed certificate) an https:// endpoint's certificate
    /// is checked against, as PEM.
    #[arg(long, value_name = "FILE")]
    ca_cert: Option<std::path::PathBuf>,
    /// Rounds over the endpoints (their order alternating by round).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
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

fn endpoint(endpoint: &str, ca_cert: Option<&std::path::Path>) -> Result<Endpoint> {
    let (https, rest) = match (endpoint.strip_prefix("http://"), endpoint.strip_prefix("https://"))
    {
        (Some(rest), _) => (false, rest),
        (_, Some(rest)) => (true, rest),
        _ => bail!("--endpoint {endpoint}: expected http://HOST:PORT or https://HOST:PORT"),
    };
    let authority = rest.trim_end_matches('/');
    let address = std::net::ToSocketAddrs::to_socket_addrs(authority)
        .with_context(|| format!("--endpoint {endpoint}: not a host and port"))?
        .next()
        .with_context(|| format!("--endpoint {endpoint}: resolves to no address"))?;
    if !https {
        return Ok(Endpoint::http(address));
    }
    let Some(ca_cert) = ca_cert else {
        bail!("--endpoint {endpoint}: HTTPS needs --ca-cert FILE, the authority to trust");
    };
    let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Endpoint::https(address, host, ca_cert).with_context(|| format!("--endpoint {endpoint}"))
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
    // The endpoints first: a bad one is named before keys are looked for (or made).
    let endpoints = (args.endpoints.iter())
        .map(|e| endpoint(e, args.ca_cert.as_deref()))
        .collect::<Result<Vec<_>>>()?;
    let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let (access_key, secret_key) = match args.access_key.clone().zip(args.secret_key.clone()) {
        Some(keys) => keys,
        None => match env("AWS_ACCESS_KEY_ID").zip(env("AWS_SECRET_ACCESS_KEY")) {
            Some(keys) => keys,
            None => {
                let keys = crate::cluster::s3::credentials(None, None, &args.cluster.path())
                    .context("no keys given and no somnus cluster's gateway keys found")?;
                (keys.access_key, keys.secret_key)
            }
        },
    };
    let mut config = BenchConfig {
        endpoint: endpoints[0].clone(),
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
    let runtime = runtime()?;
    // rounds[endpoint][round]: the phases of one run.
    let mut rounds: Vec<Vec<Vec<Phase>>> = endpoints.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds as usize {
        let mut order: Vec<usize> = (0..endpoints.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for at in order {
            config.endpoint = endpoints[at].clone();
            if !json && (args.rounds > 1 || endpoints.len() > 1) {
                crate::output::note(format!("round {}: {}", round + 1, args.endpoints[at]));
            }
            let phases = runtime.block_on(somnus_s3::bench::run(&config, |phase| {
                if !json {
                    crate::output::note(format!(
                        "  {} {} B: {:.0} op/s",
                        phase.op, phase.size_bytes, phase.ops_per_s
                    ));
                }
            }))?;
            rounds[at].push(phases);
        }
    }
    if rounds.len() == 1 && rounds[0].len() == 1 {
        return print(args, &rounds[0][0]);
    }
    compare(args, &rounds)
}

/// The median of each phase's figures over the rounds of one endpoint.
fn medians(rounds: &[Vec<Phase>]) -> Vec<Phase> {
    let median = |at: usize, f: fn(&Phase) -> f64| {
        super::stats::median_f64(rounds.iter().map(|phases| f(&phases[at])).collect())
    };
    (rounds[0].iter().enumerate())
        .map(|(at, first)| Phase {
            ops: rounds.iter().map(|p| p[at].ops).sum::<u64>() / rounds.len() as u64,
            errors: rounds.iter().map(|p| p[at].errors).sum(),
            ops_per_s: median(at, |p| p.ops_per_s),
            mib_per_s: median(at, |p| p.mib_per_s),
            p50_ms: median(at, |p| p.p50_ms),
            p99_ms: median(at, |p| p.p99_ms),
            disk_bytes_per_object: first
                .disk_bytes_per_object
                .map(|_| median(at, |p| p.disk_bytes_per_object.unwrap_or(f64::NAN))),
            ..first.clone()
        })
        .collect()
}

/// Several endpoints or rounds: each endpoint's medians, and ratios to the first's.
fn compare(args: &BenchS3Args, rounds: &[Vec<Vec<Phase>>]) -> Result<()> {
    let medians: Vec<Vec<Phase>> = rounds.iter().map(|r| medians(r)).collect();
    if args.json {
        let endpoints: Vec<_> = (args.endpoints.iter().zip(rounds).zip(&medians))
            .map(|((endpoint, rounds), medians)| {
                serde_json::json!({ "endpoint": endpoint, "medians": medians, "rounds": rounds })
            })
            .collect();
        let figures = serde_json::json!({
            "endpoints": endpoints,
            "concurrency": args.concurrency,
            "seconds_per_phase": args.seconds,
            "rounds": args.rounds,
        });
        let document = crate::provenance::Document::new("somnus-bench-s3-compare", figures);
        return outln!("{}", document.to_json()?);
    }
    outln!(
        "{} endpoint(s), {} round(s) in alternating order, {} clients, {} s per phase: medians",
        args.endpoints.len(),
        args.rounds,
        args.concurrency,
        args.seconds
    )?;
    outln!(
        "{:<28} {:>4} {:>9} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9}",
        "endpoint",
        "op",
        "size B",
        "op/s",
        "MiB/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "op/s x",
        "p50 x"
    )?;
    for (at, first) in medians[0].iter().enumerate() {
        for (endpoint, phases) in args.endpoints.iter().zip(&medians) {
            let p = &phases[at];
            outln!(
                "{:<28} {:>4} {:>9} {:>10.0} {:>9.1} {:>9.2} {:>9.2} {:>7} {:>9.3} {:>9.3}",
                endpoint,
                p.op,
                p.size_bytes,
                p.ops_per_s,
                p.mib_per_s,
                p.p50_ms,
                p.p99_ms,
                p.errors,
                p.ops_per_s / first.ops_per_s.max(1e-9),
                p.p50_ms / first.p50_ms.max(1e-9)
            )?;
        }
    }
    Ok(())
}

fn print(args: &BenchS3Args, phases: &[Phase]) -> Result<()> {
    if args.json {
        let figures = serde_json::json!({
            "endpoint": args.endpoints[0],
            "concurrency": args.concurrency,
            "seconds_per_phase": args.seconds,
            "phases": phases,
        });
        let document = crate::provenance::Document::new("somnus-bench-s3", figures);
        return outln!("{}", document.to_json()?);
    }
    outln!(
        "S3 at {}: {} clients, one request in flight each, {} s per phase",
        args.endpoints[0],
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
