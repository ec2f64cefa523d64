//! `somnus bench ec`: erasure-coding throughput next to other Reed-Solomon libraries
//! and a plain XOR measured in the same run (the measuring is in
//! `somnus_ec::bench`, shared with `cargo bench -p somnus-ec`).

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use somnus_ec::Backend;
use somnus_ec::bench::{self, Measurement, Options, ShardPlacement};

#[derive(Args)]
pub(crate) struct BenchEcArgs {
    /// Codes to measure, as DATA+PARITY, comma-separated.
    #[arg(long = "code", value_name = "K+R", value_delimiter = ',', default_value = "6+3,10+4", value_parser = parse_code)]
    codes: Vec<(usize, usize)>,
    /// Shard sizes, comma-separated, in bytes or with a KiB or MiB suffix
    /// (reed-solomon-simd takes only even sizes and is left out of the others).
    #[arg(long, value_name = "SIZE", value_delimiter = ',', default_value = "64KiB,1MiB", value_parser = parse_size)]
    shard_bytes: Vec<usize>,
    /// Rounds per figure; each figure is the median of its rounds.
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// How long each implementation runs in each round, in milliseconds; the XOR runs
    /// as long just before it, and the figure's ratio to the XOR is the median of these
    /// paired ratios (a shared machine's slow phases then hit both alike).
    #[arg(long, default_value_t = 40)]
    round_ms: u64,
    /// Also measure somnus with each SIMD backend this CPU has (as `somnus/<backend>`);
    /// `somnus` alone is the backend chosen at run time (or by SOMNUS_EC_BACKEND).
    #[arg(long)]
    backends: bool,
    /// Where the shards live, for every implementation alike: `separate` (one
    /// allocation per shard, as most callers do; large allocations all start at the same
    /// page offset) or `staggered` (one `StripeBuffer` per stripe, the shards staggered
    /// across cache sets).
    #[arg(long, default_value = "separate", value_parser = ["separate", "staggered"])]
    layout: String,
    /// Print one JSON document (schema `somnus-bench-ec`) whose `measurements` hold one
    /// object per measurement, keys `code`, `shard_bytes`, `op`, `impl`, `gbps` (the
    /// median), `min_gbps`, `max_gbps`, `ratio_to_xor` and `layout`.
    #[arg(long)]
    json: bool,
}

fn parse_code(text: &str) -> Result<(usize, usize), String> {
    let parse = |part: &str| {
        part.trim().parse::<usize>().map_err(|_| format!("{text:?} is not K+R (like 6+3)"))
    };
    let (k, r) = text.split_once('+').ok_or_else(|| format!("{text:?} is not K+R (like 6+3)"))?;
    let (k, r) = (parse(k)?, parse(r)?);
    somnus_ec::Code::new(k, r).map_err(|error| error.to_string())?;
    Ok((k, r))
}

fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        _ => return Err(format!("{text:?}: the unit must be B, KiB or MiB")),
    };
    let size = number.parse::<usize>().map_err(|_| format!("{text:?} is not a size"))? * scale;
    if size == 0 || size > 256 << 20 {
        return Err(format!("{text:?}: a shard is 1 byte to 256 MiB"));
    }
    Ok(size)
}

pub(crate) fn run(args: &BenchEcArgs) -> Result<()> {
    if args.rounds == 0 || args.rounds > 1000 {
        bail!("--rounds must be between 1 and 1000");
    }
    if args.round_ms == 0 || args.round_ms > 60_000 {
        bail!("--round-ms must be between 1 and 60000");
    }
    let backends = if args.backends { Backend::available() } else { Vec::new() };
    let options = Options {
        shapes: args.codes.clone(),
        shard_bytes: args.shard_bytes.clone(),
        rounds: args.rounds,
        round_time: Duration::from_millis(args.round_ms),
        backends,
        layout: if args.layout == "separate" {
            ShardPlacement::Separate
        } else {
            ShardPlacement::Staggered
        },
    };
    let groups = options.shapes.len() * options.shard_bytes.len();
    noteln!(
        "somnus bench ec: {groups} groups, {} rounds of {} ms per implementation; one core; backend {}; {} shards",
        args.rounds,
        args.round_ms,
        Backend::detect().name(),
        options.layout.name()
    );
    let mut done = 0;
    let measurements = bench::run(&options, |group| {
        done += 1;
        if let Some(first) = group.first() {
            noteln!(
                "[{done}/{groups}] {} with {} shards measured",
                first.code(),
                bench::human_bytes(first.shard_bytes)
            );
        }
    });
    if args.json {
        let objects: Vec<serde_json::Value> =
            measurements.iter().map(|m| json(m, options.layout.name())).collect();
        let body = serde_json::json!({ "measurements": objects });
        let document = crate::provenance::Document::new("somnus-bench-ec", body);
        outln!("{}", document.to_json()?)?;
    } else {
        out!("{}", bench::table(&measurements))?;
        outln!(
            "GB/s of data (k x shard bytes per operation), median of the rounds; /xor is the median of the ratios to a plain XOR of the same k data buffers run just before in each round."
        )?;
    }
    Ok(())
}

fn json(m: &Measurement, layout: &str) -> serde_json::Value {
    serde_json::json!({
        "code": m.code(),
        "shard_bytes": m.shard_bytes,
        "op": m.op.name(),
        "impl": m.implementation,
        "gbps": m.gbps,
        "min_gbps": m.min_gbps,
        "max_gbps": m.max_gbps,
        "ratio_to_xor": m.ratio_to_xor,
        "layout": layout,
    })
}
