//! `somnus bench runtime --compare-wire`: what TLS on the cluster wire costs. Two
//! 9-server clusters on this machine, one with `wire = "plain"` and one with TLS,
//! both up for the whole run; each round measures the client's writes and reads of
//! 4 KiB and 1 MiB on one and then the other (the order alternating by round, so
//! that neither always runs on a warmer disk), and the medians over the rounds are
//! compared as ratios TLS / plain.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use somnus_runtime::cluster_file::Wire;

use super::local::{Figure, LocalCluster, bench_dir, closed_loop};
use super::runtime::BenchRuntimeArgs;
use super::stats::median_f64 as median;
use crate::cluster::access::runtime;

/// The measurements of a round, in order.
const MEASURES: [(&str, u64, bool); 4] = [
    ("write 4 KiB", 4096, true),
    ("read 4 KiB", 4096, false),
    ("write 1 MiB", 1 << 20, true),
    ("read 1 MiB", 1 << 20, false),
];

pub(crate) fn run(args: &BenchRuntimeArgs) -> Result<()> {
    let (_scratch, dir) = bench_dir(args.dir.as_deref())?;
    runtime()?.block_on(compare(args, &dir))
}

async fn compare(args: &BenchRuntimeArgs, dir: &Path) -> Result<()> {
    let seconds = Duration::from_secs(args.seconds);
    noteln!("starting two clusters, one on the plain wire and one on TLS ...");
    let plain = LocalCluster::start(dir, args.groups_per_server, Wire::Plain, "plain").await?;
    let tls = LocalCluster::start(dir, args.groups_per_server, Wire::Tls, "tls").await?;
    let clients = [plain.client()?, tls.client()?];
    let span = 256u64 << 20;
    for client in &clients {
        for (_, size, _) in MEASURES {
            let _ = client.create(&format!("bench-{size}"), span).await;
        }
    }
    // figures[measure][wire]: one per round.
    let mut figures: Vec<[Vec<Figure>; 2]> = MEASURES.iter().map(|_| [vec![], vec![]]).collect();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        noteln!("round {} of {} ...", round + 1, args.rounds);
        for wire in order {
            for (at, (_, size, write)) in MEASURES.iter().enumerate() {
                let object = format!("bench-{size}");
                let client = &clients[wire];
                let figure =
                    closed_loop(client, &object, *size, span, args.in_flight, seconds, *write)
                        .await?;
                figures[at][wire].push(figure);
            }
        }
    }
    plain.stop().await;
    tls.stop().await;
    outln!(
        "cluster wire, {} rounds of {} s, {} in flight: medians (plain | TLS) and TLS / plain",
        args.rounds,
        args.seconds,
        args.in_flight
    )?;
    outln!(
        "{:<12} {:>10} {:>10} {:>8}   {:>8} {:>8} {:>8}   {:>8} {:>8} {:>8}",
        "",
        "MiB/s",
        "MiB/s",
        "ratio",
        "p50 ms",
        "p50 ms",
        "ratio",
        "p99 ms",
        "p99 ms",
        "ratio"
    )?;
    for ((name, _, _), [plain, tls]) in MEASURES.iter().zip(&figures) {
        let pick =
            |figures: &[Figure], f: fn(&Figure) -> f64| median(figures.iter().map(f).collect());
        let columns: Vec<(f64, f64)> = [
            (|f: &Figure| f.mib_s) as fn(&Figure) -> f64,
            |f: &Figure| f.p50_ms,
            |f: &Figure| f.p99_ms,
        ]
        .into_iter()
        .map(|f| (pick(plain, f), pick(tls, f)))
        .collect();
        let ratio = |(p, t): (f64, f64)| t / p.max(1e-9);
        outln!(
            "{name:<12} {:>10.2} {:>10.2} {:>8.3}   {:>8.2} {:>8.2} {:>8.3}   {:>8.2} {:>8.2} {:>8.3}",
            columns[0].0,
            columns[0].1,
            ratio(columns[0]),
            columns[1].0,
            columns[1].1,
            ratio(columns[1]),
            columns[2].0,
            columns[2].1,
            ratio(columns[2]),
        )?;
    }
    Ok(())
}
