//! `somnus logstore torture`: the SIGKILL crash campaign.
//!
//! The parent runs a writer process (`torture-child`, this same binary) against a log,
//! kills it with SIGKILL after a random time, reopens the log itself (read-only) and
//! checks it against a model of what the writer reported. The writer has one thread per
//! owner; each prints `B …` (flushed) before an operation starts and `A <owner>` once it
//! is acknowledged, so at a kill each owner has at most one operation in flight. After
//! the kill every owner's objects must read back as the model says with its in-flight
//! operation either wholly applied or wholly absent, block by block, with exact bytes.
//! - lost: a block whose acknowledged content is missing or older;
//! - wrong: a block with bytes no write produced, a version that was never written, or
//!   half an operation; or damage found at open.
//!
//! About one run in ten ends with a clean close (stdin closed) instead, so that the
//! snapshot path is crashed into too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use somnus_logstore::{Error, FsDisk, LogStore, ObjectId, Options, OwnerId};
use somnus_types::{ByteRange, Version};

use crate::progress::now;

const BLOCK_BYTES: u64 = 4096;
const BLOCKS: u64 = 64;
const OBJECTS: u64 = 4;

#[derive(Args)]
pub(crate) struct TortureArgs {
    /// A directory on the device to test. The campaign works in a new subdirectory of
    /// it, removed at the end unless --keep.
    dir: PathBuf,
    /// How many times to kill the writer with SIGKILL.
    #[arg(long, default_value_t = 200)]
    kills: u64,
    /// Appender threads in the writer, each the sole writer of one owner.
    #[arg(long, default_value_t = 4)]
    appenders: u64,
    /// The longest a writer runs before it is killed, in milliseconds; each run's time
    /// is drawn uniformly up to this (short ones kill it during recovery).
    #[arg(long, default_value_t = 150)]
    max_run_ms: u64,
    /// Seed of the writers' choices and of the kill times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Segment size of the log under test: small, so that segments rotate and
    /// compaction copies and deletes them while the writer is killed.
    #[arg(long, default_value_t = 1 << 20)]
    segment_bytes: u64,
    /// Keep the log directory at the end.
    #[arg(long)]
    keep: bool,
    /// Make the writer misbehave, to show that the checker catches it (for tests).
    #[arg(long, value_enum, hide = true)]
    inject: Option<Inject>,
}

/// A deliberate fault in the writer.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Inject {
    /// Acknowledge appends before they are written.
    AckEarly,
    /// Append bytes other than the version's own, now and then.
    WrongBytes,
}

#[derive(Args)]
pub(crate) struct ChildArgs {
    dir: PathBuf,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    appenders: u64,
    #[arg(long)]
    version_base: u64,
    #[arg(long)]
    segment_bytes: u64,
    #[arg(long, value_enum)]
    inject: Option<Inject>,
}

fn log_options(segment_bytes: u64, read_only: bool) -> Options {
    Options {
        segment_bytes,
        capacity_bytes: 1 << 30,
        compact_live_percent_max: 50,
        read_only,
        ..Options::default()
    }
}

/// The bytes of one block of a write: a function of where and which version, so the
/// checker knows what every version must read back as.
fn block_bytes(owner: u64, object: u64, version: u64, block: u64, out: &mut Vec<u8>) {
    let mut state = owner
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(object.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(version.wrapping_mul(0x94D0_49BB_1331_11EB))
        .wrapping_add(block);
    for _ in 0..BLOCK_BYTES / 8 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

/// One operation of an owner, as the writer announces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Append { object: u64, start: u64, blocks: u64, version: u64 },
    Invalidate { object: u64, start: u64, blocks: u64, version: u64 },
    DeleteAll,
}

impl Op {
    fn line(self, owner: u64) -> String {
        match self {
            Op::Append { object, start, blocks, version } => {
                format!("B {owner} a {object} {start} {blocks} {version}")
            }
            Op::Invalidate { object, start, blocks, version } => {
                format!("B {owner} i {object} {start} {blocks} {version}")
            }
            Op::DeleteAll => format!("B {owner} d 0 0 0 0"),
        }
    }

    fn parse(fields: &[&str]) -> Option<(u64, Op)> {
        let [owner, kind, object, start, blocks, version] = fields else { return None };
        let number = |s: &str| s.parse::<u64>().ok();
        let owner = number(owner)?;
        let (object, start, blocks, version) =
            (number(object)?, number(start)?, number(blocks)?, number(version)?);
        let op = match *kind {
            "a" => Op::Append { object, start, blocks, version },
            "i" => Op::Invalidate { object, start, blocks, version },
            "d" => Op::DeleteAll,
            _ => return None,
        };
        Some((owner, op))
    }
}

// ---------------------------------------------------------------- the writer process

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let out = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = out.lock();
    // One write per line (a pipe write under 4 KiB is atomic), flushed before the
    // operation it announces starts.
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

pub(crate) fn child(args: &ChildArgs) -> Result<()> {
    let disk = Arc::new(FsDisk::new(&args.dir)?);
    let store = LogStore::open(disk, log_options(args.segment_bytes, false))
        .with_context(|| format!("opening {}", args.dir.display()))?;
    let out = Mutex::new(std::io::stdout());
    let recovery = store.recovery();
    say(&out, &format!("R {} {}", recovery.duration.as_micros(), recovery.records));
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for t in 0..args.appenders {
            let (store, out, stop, failure) = (&store, &out, &stop, &failure);
            scope.spawn(move || {
                if let Err(error) = writer_thread(store, out, stop, args, t) {
                    *failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(error.to_string());
                    stop.store(true, Ordering::Relaxed);
                }
            });
        }
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Err(error) = store.compact() {
                    *failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(format!("compaction: {error}"));
                    stop.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        // A clean stop: the parent closes our stdin.
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(error) = failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        bail!("writer failed: {error}");
    }
    store.close()?;
    say(&out, "C");
    Ok(())
}

fn writer_thread(
    store: &LogStore,
    out: &Mutex<std::io::Stdout>,
    stop: &AtomicBool,
    args: &ChildArgs,
    t: u64,
) -> Result<()> {
    let owner = t + 1;
    let mut rng = Pcg64Mcg::seed_from_u64(args.seed.wrapping_mul(1000).wrapping_add(t));
    let mut version = args.version_base;
    let mut last_append: Option<(u64, u64, u64, u64)> = None;
    let mut payload = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let roll = rng.random_range(0..1000);
        let op = if roll < 4 {
            Op::DeleteAll
        } else if roll < 150
            && let Some((object, start, blocks, version)) = last_append
        {
            Op::Invalidate { object, start, blocks, version }
        } else {
            let blocks = if rng.random_bool(0.1) { 16 } else { rng.random_range(1..=4) };
            let start = rng.random_range(0..=BLOCKS - blocks);
            version += 1;
            Op::Append { object: rng.random_range(0..OBJECTS), start, blocks, version }
        };
        say(out, &op.line(owner));
        let result = match op {
            Op::Append { object, start, blocks, version } => {
                payload.clear();
                for block in start..start + blocks {
                    block_bytes(owner, object, version, block, &mut payload);
                }
                if args.inject == Some(Inject::WrongBytes) && version % 50 == 0 {
                    payload[100] ^= 1;
                }
                if args.inject == Some(Inject::AckEarly) {
                    say(out, &format!("A {owner}"));
                }
                let range = ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES);
                let result = store.append(
                    OwnerId(owner),
                    ObjectId(object),
                    range,
                    Version(version),
                    &payload,
                );
                if args.inject == Some(Inject::AckEarly) && result.is_ok() {
                    last_append = Some((object, start, blocks, version));
                    continue;
                }
                if result.is_ok() {
                    last_append = Some((object, start, blocks, version));
                }
                result
            }
            Op::Invalidate { object, start, blocks, version } => {
                let range = ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES);
                last_append = None;
                store.invalidate(OwnerId(owner), ObjectId(object), range, Version(version))
            }
            Op::DeleteAll => {
                last_append = None;
                store.delete_all(OwnerId(owner))
            }
        };
        match result {
            Ok(()) => say(out, &format!("A {owner}")),
            Err(Error::Full { .. }) => {
                say(out, &format!("N {owner}"));
                store.collect_garbage()?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- the checker

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct BlockState {
    data: Option<u64>,
    marker: u64,
}

impl BlockState {
    fn visible(self) -> Option<u64> {
        self.data.filter(|&version| version > self.marker)
    }
}

/// What every owner's blocks must hold, from acknowledged operations.
#[derive(Default, Clone)]
struct Model {
    blocks: BTreeMap<(u64, u64), Vec<BlockState>>,
}

impl Model {
    fn apply(&mut self, owner: u64, op: Op) {
        let mut each = |object: u64, start: u64, blocks: u64, f: &dyn Fn(&mut BlockState)| {
            let states = self
                .blocks
                .entry((owner, object))
                .or_insert_with(|| vec![BlockState::default(); BLOCKS as usize]);
            for state in &mut states[start as usize..(start + blocks) as usize] {
                f(state);
            }
        };
        match op {
            Op::Append { object, start, blocks, version } => each(object, start, blocks, &|s| {
                s.data = Some(s.data.map_or(version, |d| d.max(version)))
            }),
            Op::Invalidate { object, start, blocks, version } => {
                each(object, start, blocks, &|s| s.marker = s.marker.max(version))
            }
            Op::DeleteAll => self.blocks.retain(|&(o, _), _| o != owner),
        }
    }

    /// The visible version of every block of an owner.
    fn expected(&self, owner: u64) -> Vec<Option<u64>> {
        let mut expected = Vec::with_capacity((OBJECTS * BLOCKS) as usize);
        for object in 0..OBJECTS {
            match self.blocks.get(&(owner, object)) {
                Some(states) => expected.extend(states.iter().map(|s| s.visible())),
                None => expected.extend((0..BLOCKS).map(|_| None)),
            }
        }
        expected
    }
}

#[derive(Default)]
struct Tally {
    kills: u64,
    clean_closes: u64,
    acknowledged: u64,
    lost: u64,
    wrong: u64,
    in_flight_applied: u64,
    in_flight_absent: u64,
    recovery_us: Vec<u64>,
}

/// Reads every block of an owner: its version, and whether its bytes are that version's.
fn observe(store: &LogStore, owner: u64) -> Result<Vec<Option<(u64, bool)>>> {
    let mut observed = Vec::with_capacity((OBJECTS * BLOCKS) as usize);
    let mut expected_bytes = Vec::new();
    for object in 0..OBJECTS {
        let mut blocks: Vec<Option<(u64, bool)>> = vec![None; BLOCKS as usize];
        let read = store
            .read(OwnerId(owner), ObjectId(object), ByteRange::new(0, BLOCKS * BLOCK_BYTES))
            .with_context(|| format!("reading owner {owner} object {object}"))?;
        for piece in &read.pieces {
            let mut at = piece.range.start;
            while at < piece.range.end {
                let block = at / BLOCK_BYTES;
                let end = ((block + 1) * BLOCK_BYTES).min(piece.range.end);
                let whole = at % BLOCK_BYTES == 0 && end - at == BLOCK_BYTES;
                expected_bytes.clear();
                block_bytes(owner, object, piece.version.0, block, &mut expected_bytes);
                let bytes = &piece.bytes
                    [(at - piece.range.start) as usize..(end - piece.range.start) as usize];
                let exact = whole && bytes == expected_bytes.as_slice();
                blocks[block as usize] = Some((piece.version.0, exact));
                at = end;
            }
        }
        observed.extend(blocks);
    }
    Ok(observed)
}

fn check_round(
    dir: &Path,
    model: &mut Model,
    in_flight: &BTreeMap<u64, Op>,
    owners: u64,
    tally: &mut Tally,
) -> Result<()> {
    let disk = Arc::new(FsDisk::existing(dir)?);
    let store = LogStore::open(disk, log_options(1 << 20, true))
        .with_context(|| format!("reopening {}", dir.display()))?;
    for damage in &store.recovery().damage {
        eprintln!("torture: damage at open: {damage:?}");
        tally.wrong += 1;
    }
    for owner in 1..=owners {
        let observed = observe(&store, owner)?;
        let versions: Vec<Option<u64>> = observed.iter().map(|b| b.map(|(v, _)| v)).collect();
        tally.wrong += observed.iter().filter(|b| matches!(b, Some((_, false)))).count() as u64;
        let without = model.expected(owner);
        if versions == without {
            if in_flight.contains_key(&owner) {
                tally.in_flight_absent += 1;
            }
            continue;
        }
        if let Some(&op) = in_flight.get(&owner) {
            let mut with_model = model.clone();
            with_model.apply(owner, op);
            if versions == with_model.expected(owner) {
                *model = with_model;
                tally.in_flight_applied += 1;
                continue;
            }
        }
        // Neither: count the blocks that differ from the acknowledged state.
        for (i, (seen, expected)) in versions.iter().zip(&without).enumerate() {
            if seen == expected {
                continue;
            }
            let (object, block) = (i as u64 / BLOCKS, i as u64 % BLOCKS);
            eprintln!(
                "torture: owner {owner} object {object} block {block}: read version {seen:?}, \
                 acknowledged state says {expected:?} (in flight: {:?})",
                in_flight.get(&owner)
            );
            match (seen, expected) {
                (None, Some(_)) => tally.lost += 1,
                (Some(s), Some(e)) if s < e => tally.lost += 1,
                _ => tally.wrong += 1,
            }
        }
        // Carry on from what is there, so one fault is not counted again every round.
        let mut rebuilt = Model::default();
        for (owner_object, states) in &model.blocks {
            if owner_object.0 != owner {
                rebuilt.blocks.insert(*owner_object, states.clone());
            }
        }
        for (i, seen) in versions.iter().enumerate() {
            if let Some(version) = seen {
                let (object, block) = (i as u64 / BLOCKS, i as u64 % BLOCKS);
                rebuilt.apply(
                    owner,
                    Op::Append { object, start: block, blocks: 1, version: *version },
                );
            }
        }
        *model = rebuilt;
    }
    Ok(())
}

/// Collects a child's stdout lines; a last line without its newline (cut by the kill)
/// is dropped.
fn read_lines(stdout: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<String>> {
    #[allow(clippy::disallowed_methods, reason = "the shell owns its threads")]
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        let mut line = Vec::new();
        while let Ok(n) = reader.read_until(b'\n', &mut line) {
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
            line.clear();
        }
        lines
    })
}

pub(crate) fn run(args: &TortureArgs) -> Result<()> {
    if args.appenders == 0 {
        bail!("--appenders must be at least 1");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let dir = args.dir.join(format!("somnus-torture-{}", std::process::id()));
    if dir.exists() {
        bail!("{} exists already; remove it or pick another directory", dir.display());
    }
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding the somnus binary")?;
    let mut rng = Pcg64Mcg::seed_from_u64(args.seed);
    let mut model = Model::default();
    let mut tally = Tally::default();
    let mut version_base = 1;
    let mut round = 0u64;
    let started = now();
    eprintln!(
        "torture: {} kills of a writer with {} appenders in {}",
        args.kills,
        args.appenders,
        dir.display()
    );
    while tally.kills < args.kills {
        round += 1;
        let mut child = Command::new(&exe)
            .args(["logstore", "torture-child"])
            .arg(&dir)
            .args(["--seed", &(args.seed ^ round.wrapping_mul(0x1000_0001)).to_string()])
            .args(["--appenders", &args.appenders.to_string()])
            .args(["--version-base", &version_base.to_string()])
            .args(["--segment-bytes", &args.segment_bytes.to_string()])
            .args(match args.inject {
                Some(Inject::AckEarly) => vec!["--inject", "ack-early"],
                Some(Inject::WrongBytes) => vec!["--inject", "wrong-bytes"],
                None => vec![],
            })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
        let lines = read_lines(stdout);
        let errors = read_lines(stderr);
        let run_ms = rng.random_range(0..=args.max_run_ms);
        let clean = rng.random_bool(0.1);
        std::thread::sleep(Duration::from_millis(run_ms));
        if clean {
            drop(child.stdin.take());
            let deadline = now() + Duration::from_secs(30);
            while child.try_wait()?.is_none() && now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if child.try_wait()?.is_none() {
            child.kill()?;
        }
        let status = child.wait()?;
        let lines = lines.join().map_err(|_| anyhow!("reader thread panicked"))?;
        let errors = errors.join().map_err(|_| anyhow!("reader thread panicked"))?;
        // Killed by our signal: no exit code. An exit code is the writer's own doing.
        match status.code() {
            None => tally.kills += 1,
            Some(0) => tally.clean_closes += 1,
            Some(_) => bail!("the writer failed ({status}):\n{}", errors.join("\n")),
        }

        let mut in_flight: BTreeMap<u64, Op> = BTreeMap::new();
        for line in &lines {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["R", micros, _records] => tally.recovery_us.push(micros.parse().unwrap_or(0)),
                ["B", rest @ ..] => {
                    let (owner, op) = Op::parse(rest)
                        .ok_or_else(|| anyhow!("bad line from the writer: {line}"))?;
                    if let Op::Append { version, .. } = op {
                        version_base = version_base.max(version + 1);
                    }
                    in_flight.insert(owner, op);
                }
                ["A", owner] => {
                    let owner: u64 = owner.parse()?;
                    let op = in_flight
                        .remove(&owner)
                        .ok_or_else(|| anyhow!("acknowledgement without an operation: {line}"))?;
                    model.apply(owner, op);
                    tally.acknowledged += 1;
                }
                ["N", owner] => {
                    in_flight.remove(&owner.parse()?);
                }
                ["C"] => {}
                _ => bail!("bad line from the writer: {line}"),
            }
        }
        check_round(&dir, &mut model, &in_flight, args.appenders, &mut tally)?;
        if round.is_multiple_of(20) {
            eprintln!(
                "torture: {} kills, {} clean closes, {} acknowledged, lost {}, wrong {} ({:.0} s)",
                tally.kills,
                tally.clean_closes,
                tally.acknowledged,
                tally.lost,
                tally.wrong,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let verify = somnus_logstore::verify(&FsDisk::existing(&dir)?)?;
    if verify.is_damaged() {
        eprintln!("torture: verify found damage: {verify:?}");
        tally.wrong += 1;
    }
    tally.recovery_us.sort_unstable();
    let median = tally.recovery_us.get(tally.recovery_us.len() / 2).copied().unwrap_or(0);
    let max = tally.recovery_us.last().copied().unwrap_or(0);
    eprintln!(
        "torture: {} clean closes; in-flight operations found applied {} times, absent {}; \
         recovery at open median {:.1} ms, max {:.1} ms; {:.0} s",
        tally.clean_closes,
        tally.in_flight_applied,
        tally.in_flight_absent,
        median as f64 / 1e3,
        max as f64 / 1e3,
        started.elapsed().as_secs_f64()
    );
    if !args.keep {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    println!(
        "kills={} acknowledged={} lost={} wrong={}",
        tally.kills, tally.acknowledged, tally.lost, tally.wrong
    );
    if tally.lost > 0 || tally.wrong > 0 {
        std::process::exit(1);
    }
    Ok(())
}
