//! The erasure-coding benchmark behind `somnus bench ec` and `cargo bench -p somnus-ec`:
//! encode and reconstruct throughput of this crate next to reed-solomon-erasure (with
//! its C SIMD), reed-solomon-simd and a plain XOR of the same data buffers, all on one
//! core in the same run, so that ratios to the XOR mean something on a shared machine.
//!
//! Throughput is GB/s of data (k * shard bytes per operation, 10^9 bytes per GB), for
//! encode (all r parities) and for reconstruct (data shards 1 and 2 lost, or only
//! shard 1 where r or k is 1, rebuilt from the other data shards and the first
//! parities). An implementation whose first run fails is left out.
//!
//! The shards are allocated one by one for every implementation, or with
//! [`ShardPlacement::Staggered`] kept in one [`StripeBuffer`] per stripe.
//!
//! A shared machine has slow phases lasting seconds, so absolute figures wander; the
//! ratios are paired: in each of `rounds` rounds, every implementation runs for
//! `round_time` right after the XOR runs for as long, and its ratio for the round is
//! the quotient of the two. A figure is the median over rounds of the throughput, and
//! its ratio the median of its paired ratios.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Backend, Code, StripeBuffer};

/// What a measurement measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Encode,
    Reconstruct,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Reconstruct => "reconstruct",
        }
    }
}

/// One figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub k: usize,
    pub r: usize,
    pub shard_bytes: usize,
    pub op: Op,
    /// `somnus`, `somnus/<backend>`, `reed-solomon-erasure`, `reed-solomon-simd` or `xor`.
    pub implementation: String,
    /// The median over rounds, GB/s of data.
    pub gbps: f64,
    /// The median over rounds of the throughput over the XOR's measured just before.
    pub ratio_to_xor: f64,
    /// The slowest and fastest rounds, GB/s.
    pub min_gbps: f64,
    pub max_gbps: f64,
}

impl Measurement {
    /// `"6+3"`.
    pub fn code(&self) -> String {
        format!("{}+{}", self.k, self.r)
    }
}

/// Where the shards of a measurement live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardPlacement {
    /// One [`StripeBuffer`] per implementation's stripe: shards staggered across cache
    /// sets, as somnus allocates them.
    Staggered,
    /// One `Vec<u8>` per shard, as a caller that allocates each shard does; large
    /// allocations start at the same offset within a page, so the streams alias.
    Separate,
}

impl ShardPlacement {
    pub fn name(self) -> &'static str {
        match self {
            ShardPlacement::Staggered => "staggered",
            ShardPlacement::Separate => "separate",
        }
    }
}

/// Shards in either layout.
enum Shards {
    Separate(Vec<Vec<u8>>),
    Stripe(StripeBuffer),
}

impl Shards {
    /// `contents` followed by `zeroed` zeroed shards of the same length.
    fn new(layout: ShardPlacement, contents: &[Vec<u8>], zeroed: usize) -> Shards {
        let len = contents.first().map_or(0, Vec::len);
        match layout {
            ShardPlacement::Separate => {
                let mut shards = contents.to_vec();
                shards.extend((0..zeroed).map(|_| vec![0u8; len]));
                Shards::Separate(shards)
            }
            ShardPlacement::Staggered => {
                let mut buffer = StripeBuffer::new(contents.len() + zeroed, len);
                for (shard, content) in buffer.shards_mut().into_iter().zip(contents) {
                    shard.copy_from_slice(content);
                }
                Shards::Stripe(buffer)
            }
        }
    }

    fn slices(&self) -> Vec<&[u8]> {
        match self {
            Shards::Separate(shards) => shards.iter().map(Vec::as_slice).collect(),
            Shards::Stripe(buffer) => buffer.shards(),
        }
    }

    fn slices_mut(&mut self) -> Vec<&mut [u8]> {
        match self {
            Shards::Separate(shards) => shards.iter_mut().map(Vec::as_mut_slice).collect(),
            Shards::Stripe(buffer) => buffer.shards_mut(),
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    pub shapes: Vec<(usize, usize)>,
    pub shard_bytes: Vec<usize>,
    pub rounds: usize,
    pub round_time: Duration,
    /// Also measure this crate with each of these backends (`somnus/<name>`).
    pub backends: Vec<Backend>,
    pub layout: ShardPlacement,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            shapes: vec![(6, 3), (10, 4)],
            shard_bytes: vec![64 * 1024, 1024 * 1024],
            rounds: 15,
            round_time: Duration::from_millis(40),
            backends: Vec::new(),
            layout: ShardPlacement::Separate,
        }
    }
}

/// One implementation's operation, ready to run repeatedly on its own buffers.
struct Contender<'a> {
    implementation: String,
    op: Op,
    /// Runs the operation once; false if it failed (it is then left out).
    run: Box<dyn FnMut() -> bool + 'a>,
    samples: Vec<f64>,
    ratios: Vec<f64>,
}

impl<'a> Contender<'a> {
    fn new(implementation: &str, op: Op, run: impl FnMut() -> bool + 'a) -> Contender<'a> {
        Contender {
            implementation: implementation.to_owned(),
            op,
            run: Box::new(run),
            samples: Vec::new(),
            ratios: Vec::new(),
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the benchmark; `report` sees each (shape, size) group's measurements as soon as
/// they are done (for progress output).
pub fn run(options: &Options, mut report: impl FnMut(&[Measurement])) -> Vec<Measurement> {
    let mut all = Vec::new();
    for &(k, r) in &options.shapes {
        for &shard_bytes in &options.shard_bytes {
            let group = measure_group(options, k, r, shard_bytes);
            report(&group);
            all.extend(group);
        }
    }
    all
}

fn measure_group(options: &Options, k: usize, r: usize, len: usize) -> Vec<Measurement> {
    let data: Vec<Vec<u8>> = (0..k).map(|i| pseudo_random(i as u64 + 1, len)).collect();
    let Ok(code) = Code::new(k, r) else { return Vec::new() };
    let mut contenders = Vec::new();

    // Each contender owns its buffers, so none reads another's output from cache.
    for &backend in &options.backends {
        if let Some(code) = code.with_backend(backend) {
            contenders.extend(somnus_contenders(
                format!("somnus/{}", backend.name()),
                Arc::new(code),
                options.layout,
                &data,
            ));
        }
    }
    contenders.extend(somnus_contenders(
        "somnus".to_owned(),
        Arc::new(code),
        options.layout,
        &data,
    ));
    contenders.extend(rse_contenders(k, r, options.layout, &data));
    contenders.extend(simd_contenders(k, r, options.layout, &data));

    let bytes_per_op = (k * len) as f64;
    let mut xor = xor_contender(options.layout, &data);
    // Warm up (page in, fill caches and plan caches), and leave out what fails.
    (xor.run)();
    contenders.retain_mut(|contender| (contender.run)());
    let gbps = |(operations, elapsed): (u64, Duration)| {
        bytes_per_op * operations as f64 / elapsed.as_secs_f64() / 1e9
    };
    for _ in 0..options.rounds {
        for contender in &mut contenders {
            let reference = gbps(time_for(options.round_time, &mut xor.run));
            let figure = gbps(time_for(options.round_time, &mut contender.run));
            xor.samples.push(reference);
            contender.samples.push(figure);
            contender.ratios.push(figure / reference);
        }
    }
    xor.ratios = vec![1.0];
    std::iter::once(xor)
        .chain(contenders)
        .map(|contender| {
            let (min_gbps, max_gbps) = contender
                .samples
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            Measurement {
                k,
                r,
                shard_bytes: len,
                op: contender.op,
                implementation: contender.implementation,
                gbps: median(contender.samples),
                ratio_to_xor: median(contender.ratios),
                min_gbps,
                max_gbps,
            }
        })
        .collect()
}

/// Runs `work` until `at_least` has passed; returns how many times and how long.
#[allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]
fn time_for(at_least: Duration, work: &mut dyn FnMut() -> bool) -> (u64, Duration) {
    let start = Instant::now();
    let mut operations = 0;
    loop {
        let _ = work();
        operations += 1;
        let elapsed = start.elapsed();
        if elapsed >= at_least {
            return (operations, elapsed);
        }
    }
}

/// How many data shards the reconstruct measurement loses: 2, or fewer where the code
/// has fewer data or parity shards.
pub fn lost_count(k: usize, r: usize) -> usize {
    2.min(k).min(r)
}

fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    // xorshift64*: enough to keep the data from being all zeros; no quality needed.
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

fn xor_contender<'a>(layout: ShardPlacement, data: &[Vec<u8>]) -> Contender<'a> {
    let k = data.len();
    let mut shards = Shards::new(layout, data, 1);
    Contender::new("xor", Op::Encode, move || {
        let mut slices = shards.slices_mut();
        let (sources, out) = slices.split_at_mut(k);
        let sources: Vec<&[u8]> = sources.iter().map(|s| &**s).collect();
        crate::xor_slices(&sources, &mut *out[0]);
        true
    })
}

fn somnus_contenders<'a>(
    name: String,
    code: Arc<Code>,
    layout: ShardPlacement,
    data: &[Vec<u8>],
) -> Vec<Contender<'a>> {
    let (k, r) = (code.data_shards(), code.parity_shards());
    let mut encode_shards = Shards::new(layout, data, r);
    let mut lost = Shards::new(layout, data, r);
    let _ = code.encode_shards(&mut lost.slices_mut());
    let mut present = vec![true; k + r];
    present[..lost_count(k, r)].iter_mut().for_each(|p| *p = false);
    let encoder = Arc::clone(&code);
    vec![
        Contender::new(&name, Op::Encode, move || {
            encoder.encode_shards(&mut encode_shards.slices_mut()).is_ok()
        }),
        Contender::new(&name, Op::Reconstruct, move || {
            code.reconstruct_data(&mut lost.slices_mut(), &present).is_ok()
        }),
    ]
}

fn rse_contenders<'a>(
    k: usize,
    r: usize,
    layout: ShardPlacement,
    data: &[Vec<u8>],
) -> Vec<Contender<'a>> {
    use reed_solomon_erasure::galois_8::ReedSolomon;
    let (Ok(encoder), Ok(decoder)) = (ReedSolomon::new(k, r), ReedSolomon::new(k, r)) else {
        return Vec::new();
    };
    let mut encode_shards = Shards::new(layout, data, r);
    let mut lost = Shards::new(layout, data, r);
    let _ = encoder.encode(&mut lost.slices_mut());
    vec![
        Contender::new("reed-solomon-erasure", Op::Encode, move || {
            encoder.encode(&mut encode_shards.slices_mut()).is_ok()
        }),
        Contender::new("reed-solomon-erasure", Op::Reconstruct, move || {
            // The slices are reused in place: (buffer, present?).
            let mut slices: Vec<(&mut [u8], bool)> = lost
                .slices_mut()
                .into_iter()
                .enumerate()
                .map(|(i, shard)| (shard, i >= lost_count(k, r)))
                .collect();
            decoder.reconstruct_data(&mut slices).is_ok()
        }),
    ]
}

fn simd_contenders<'a>(
    k: usize,
    r: usize,
    layout: ShardPlacement,
    data: &[Vec<u8>],
) -> Vec<Contender<'a>> {
    use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
    let len = data[0].len();
    let (Ok(mut encoder), Ok(mut decoder)) =
        (ReedSolomonEncoder::new(k, r, len), ReedSolomonDecoder::new(k, r, len))
    else {
        return Vec::new();
    };
    // Its recovery shards, for the decoder to start from.
    let recovery: Vec<Vec<u8>> = {
        data.iter().for_each(|shard| {
            let _ = encoder.add_original_shard(shard);
        });
        match encoder.encode() {
            Ok(result) => result.recovery_iter().map(<[u8]>::to_vec).collect(),
            Err(_) => return Vec::new(),
        }
    };
    let encode_data = Shards::new(layout, data, 0);
    let decode_data = Shards::new(layout, data, 0);
    vec![
        Contender::new("reed-solomon-simd", Op::Encode, move || {
            let _ = encoder.reset(k, r, len);
            encode_data.slices().into_iter().for_each(|shard| {
                let _ = encoder.add_original_shard(shard);
            });
            // The parities stay in the encoder's buffers, as its API gives them.
            encoder.encode().map(|result| result.recovery_iter().count()).is_ok()
        }),
        Contender::new("reed-solomon-simd", Op::Reconstruct, move || {
            let _ = decoder.reset(k, r, len);
            for (index, shard) in
                decode_data.slices().into_iter().enumerate().skip(lost_count(k, r))
            {
                let _ = decoder.add_original_shard(index, shard);
            }
            for (index, shard) in recovery.iter().enumerate().take(lost_count(k, r)) {
                let _ = decoder.add_recovery_shard(index, shard);
            }
            // The rebuilt shards stay in the decoder's buffers, as its API gives them.
            decoder.decode().is_ok_and(|result| result.restored_original(0).is_some())
        }),
    ]
}

/// The measurements as a table, with each figure's paired ratio to the XOR of the same
/// data buffers.
pub fn table(measurements: &[Measurement]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<6} {:>10} {:<12} {:<22} {:>8} {:>8}  rounds min..max",
        "code", "shard", "op", "impl", "GB/s", "/xor"
    );
    for m in measurements {
        let _ = writeln!(
            out,
            "{:<6} {:>10} {:<12} {:<22} {:>8.2} {:>8.2}  {:.2}..{:.2}",
            m.code(),
            human_bytes(m.shard_bytes),
            m.op.name(),
            m.implementation,
            m.gbps,
            m.ratio_to_xor,
            m.min_gbps,
            m.max_gbps
        );
    }
    out
}

/// `65536` as `64 KiB`, `1048576` as `1 MiB`, others in bytes.
pub fn human_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}
