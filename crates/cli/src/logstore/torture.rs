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
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use somnus_logstore::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use somnus_logstore::{Error, FsDisk, LogStore, ObjectId, Options, OwnerId};
use somnus_types::{ByteRange, Version};

use crate::progress::now;

const BLOCK_BYTES: u64 = 4096;
const BLOCKS: u64 = 64;
const OBJECTS: u64 = 4;
/// The most blocks one append writes.
const APPEND_BLOCKS_MAX: u64 = 16;
const APPENDERS_MAX: u64 = 64;
const RUN_MS_MAX: u64 = 60_000;
/// A segment must hold the writer's largest record with its header and the segment's.
const SEGMENT_BYTES_MIN: u64 =
    SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + APPEND_BLOCKS_MAX * BLOCK_BYTES;
/// A quarter of the log's capacity, so that compaction always has segments to choose.
const SEGMENT_BYTES_MAX: u64 = 256 << 20;
/// The log's capacity in the campaign.
const CAPACITY_BYTES: u64 = 1 << 30;

/// `--kills`: a campaign without kills would test nothing.
fn parse_kills(text: &str) -> Result<u64, String> {
    let kills: u64 = text.parse().map_err(|error| format!("{error}"))?;
    if kills == 0 {
        return Err("must be at least 1: a campaign without kills tests nothing".into());
    }
    Ok(kills)
}

#[derive(Args)]
pub(crate) struct TortureArgs {
    /// An existing directory on the device to test. The campaign works in a new
    /// subdirectory of it, removed at the end (whether the campaign passes, fails or
    /// stops on an error) unless --keep.
    dir: PathBuf,
    /// How many times to kill the writer with SIGKILL (at least 1).
    #[arg(long, default_value_t = 200, value_parser = parse_kills)]
    kills: u64,
    /// Appender threads in the writer, each the sole writer of one owner (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=APPENDERS_MAX))]
    appenders: u64,
    /// The longest a writer runs before it is killed, in milliseconds (at most 60000);
    /// each run's time is drawn uniformly up to this (short ones kill it during
    /// recovery, or before it created the log).
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u64).range(0..=RUN_MS_MAX))]
    max_run_ms: u64,
    /// Seed of the writers' choices and of the kill times.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Segment size of the log under test: small, so that segments rotate and
    /// compaction copies and deletes them while the writer is killed (65688, the
    /// writer's largest record with its headers, to 268435456).
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX))]
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
    /// Exit with an error right after opening the log (the campaign's error path).
    WriterFails,
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
        capacity_bytes: CAPACITY_BYTES,
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

/// The operation in words, for the campaign's reports.
impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Op::Append { object, start, blocks, version } => write!(
                f,
                "an append of version {version} to blocks {start}..{} of object {object}",
                start + blocks
            ),
            Op::Invalidate { object, start, blocks, version } => write!(
                f,
                "an invalidation of version {version} of blocks {start}..{} of object {object}",
                start + blocks
            ),
            Op::DeleteAll => write!(f, "a delete-all"),
        }
    }
}

/// A block's visible version in words.
fn version_words(version: Option<u64>) -> String {
    version.map_or("nothing".to_string(), |version| format!("version {version}"))
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
    if args.inject == Some(Inject::WriterFails) {
        bail!("injected failure: the writer stops with an error");
    }
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
    let mut last_append: Option<Op> = None;
    let mut payload = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let op = next_op(&mut rng, &mut version, last_append);
        say(out, &op.line(owner));
        let is_append = matches!(op, Op::Append { .. });
        let ack_early = is_append && args.inject == Some(Inject::AckEarly);
        if ack_early {
            say(out, &format!("A {owner}"));
        }
        let result = perform(store, owner, op, args.inject, &mut payload);
        // Only the owner's last acknowledged append may be invalidated next.
        if !is_append {
            last_append = None;
        } else if result.is_ok() {
            last_append = Some(op);
        }
        match result {
            Ok(()) if ack_early => {}
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

/// An owner's next operation: mostly appends of a new version, now and then an
/// invalidation of its last append, rarely a delete-all.
fn next_op(rng: &mut Pcg64Mcg, version: &mut u64, last_append: Option<Op>) -> Op {
    let roll = rng.random_range(0..1000);
    if roll < 4 {
        return Op::DeleteAll;
    }
    if roll < 150
        && let Some(Op::Append { object, start, blocks, version }) = last_append
    {
        return Op::Invalidate { object, start, blocks, version };
    }
    let blocks = if rng.random_bool(0.1) { APPEND_BLOCKS_MAX } else { rng.random_range(1..=4) };
    let start = rng.random_range(0..=BLOCKS - blocks);
    *version += 1;
    Op::Append { object: rng.random_range(0..OBJECTS), start, blocks, version: *version }
}

/// Performs one operation of `owner` on the log.
fn perform(
    store: &LogStore,
    owner: u64,
    op: Op,
    inject: Option<Inject>,
    payload: &mut Vec<u8>,
) -> Result<(), Error> {
    match op {
        Op::Append { object, start, blocks, version } => {
            payload.clear();
            for block in start..start + blocks {
                block_bytes(owner, object, version, block, payload);
            }
            if inject == Some(Inject::WrongBytes) && version % 50 == 0 {
                payload[100] ^= 1;
            }
            let range = ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES);
            store.append(OwnerId(owner), ObjectId(object), range, Version(version), payload)
        }
        Op::Invalidate { object, start, blocks, version } => {
            let range = ByteRange::new(start * BLOCK_BYTES, blocks * BLOCK_BYTES);
            store.invalidate(OwnerId(owner), ObjectId(object), range, Version(version))
        }
        Op::DeleteAll => store.delete_all(OwnerId(owner)),
    }
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

    /// Blocks of any owner with a visible version.
    fn visible_blocks(&self) -> u64 {
        let states = self.blocks.values().flatten();
        states.filter(|state| state.visible().is_some()).count() as u64
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
    /// Rounds whose writer was killed before it created the log: nothing acknowledged,
    /// nothing to check.
    before_creation: u64,
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

/// Checks the log after a round: every owner's blocks against the model, with its
/// in-flight operation wholly applied or wholly absent. Returns whether a log exists.
fn check_round(
    dir: &Path,
    model: &mut Model,
    in_flight: &BTreeMap<u64, Op>,
    owners: u64,
    tally: &mut Tally,
) -> Result<bool> {
    let disk =
        Arc::new(FsDisk::existing(dir).with_context(|| format!("reopening {}", dir.display()))?);
    let store = match LogStore::open(disk, log_options(1 << 20, true)) {
        Ok(store) => store,
        // The writer was killed before it created the log. That is legitimate only if
        // nothing was ever acknowledged (an acknowledgement needs the log).
        Err(Error::NoLog { .. }) => {
            let lost = model.visible_blocks();
            if lost > 0 {
                noteln!("torture: the log is gone, with {lost} acknowledged blocks");
                tally.lost += lost;
                *model = Model::default();
            } else {
                tally.before_creation += 1;
            }
            return Ok(false);
        }
        Err(error) => return Err(error).with_context(|| format!("reopening {}", dir.display())),
    };
    for damage in &store.recovery().damage {
        noteln!("torture: damage at open: {damage}");
        tally.wrong += 1;
    }
    for owner in 1..=owners {
        let observed = observe(&store, owner)?;
        tally.wrong += observed.iter().filter(|b| matches!(b, Some((_, false)))).count() as u64;
        let versions: Vec<Option<u64>> = observed.iter().map(|b| b.map(|(v, _)| v)).collect();
        check_owner(owner, &versions, model, in_flight.get(&owner).copied(), tally);
    }
    Ok(true)
}

/// Compares an owner's blocks with the model: as acknowledged, or with its in-flight
/// operation applied; otherwise counts the differing blocks and carries on from what
/// is there, so that one fault is not counted again every round.
fn check_owner(
    owner: u64,
    versions: &[Option<u64>],
    model: &mut Model,
    in_flight: Option<Op>,
    tally: &mut Tally,
) {
    let without = model.expected(owner);
    if versions == without {
        if in_flight.is_some() {
            tally.in_flight_absent += 1;
        }
        return;
    }
    if let Some(op) = in_flight {
        let mut with_model = model.clone();
        with_model.apply(owner, op);
        if versions == with_model.expected(owner) {
            *model = with_model;
            tally.in_flight_applied += 1;
            return;
        }
    }
    let in_flight_words = in_flight.map_or("nothing".to_string(), |op| op.to_string());
    for (i, (seen, expected)) in versions.iter().zip(&without).enumerate() {
        if seen == expected {
            continue;
        }
        let (object, block) = (i as u64 / BLOCKS, i as u64 % BLOCKS);
        noteln!(
            "torture: owner {owner} object {object} block {block}: read {}, the acknowledged \
             state says {} (in flight: {in_flight_words})",
            version_words(*seen),
            version_words(*expected),
        );
        match (seen, expected) {
            (None, Some(_)) => tally.lost += 1,
            (Some(s), Some(e)) if s < e => tally.lost += 1,
            _ => tally.wrong += 1,
        }
    }
    model.blocks.retain(|owner_object, _| owner_object.0 != owner);
    for (i, seen) in versions.iter().enumerate() {
        if let Some(version) = seen {
            let (object, block) = (i as u64 / BLOCKS, i as u64 % BLOCKS);
            model.apply(owner, Op::Append { object, start: block, blocks: 1, version: *version });
        }
    }
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
    super::work_dir::existing_dir(&args.dir)?;
    let dir = args.dir.join(format!("somnus-torture-{}", std::process::id()));
    if dir.exists() {
        bail!("{} exists already; remove it or pick another directory", dir.display());
    }
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let outcome = campaign(args, &dir);
    // Every way out of the campaign passes here: its directory goes unless kept.
    if !args.keep
        && let Err(error) = std::fs::remove_dir_all(&dir)
    {
        let removing = anyhow!(error).context(format!("removing {}", dir.display()));
        match outcome {
            Ok(_) => return Err(removing),
            Err(_) => noteln!("torture: {removing:#}"),
        }
    }
    let tally = outcome?;
    outln!(
        "kills={} acknowledged={} lost={} wrong={}",
        tally.kills,
        tally.acknowledged,
        tally.lost,
        tally.wrong
    )?;
    if tally.lost > 0 || tally.wrong > 0 {
        std::process::exit(1);
    }
    Ok(())
}

/// The campaign in `dir`: rounds of a writer killed (or closed) and a check, until
/// `--kills` kills, then a full verify.
fn campaign(args: &TortureArgs, dir: &Path) -> Result<Tally> {
    let exe = std::env::current_exe().context("finding the somnus binary")?;
    let mut rng = Pcg64Mcg::seed_from_u64(args.seed);
    let mut model = Model::default();
    let mut tally = Tally::default();
    let mut version_base = 1;
    let mut log_seen = false;
    let started = now();
    noteln!(
        "torture: {} kills of a writer with {} appenders in {}",
        args.kills,
        args.appenders,
        dir.display()
    );
    for round in 1u64.. {
        if tally.kills >= args.kills {
            break;
        }
        let lines = run_writer(args, &exe, dir, &mut rng, round, version_base, &mut tally)?;
        let in_flight = apply_lines(&lines, &mut model, &mut tally, &mut version_base)?;
        log_seen |= check_round(dir, &mut model, &in_flight, args.appenders, &mut tally)?;
        if round.is_multiple_of(20) {
            noteln!(
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
    if log_seen {
        verify_at_end(dir, &mut tally)?;
    }
    print_summary(&mut tally, started.elapsed().as_secs_f64());
    Ok(tally)
}

/// A writer process, killed when dropped if it is still running (so that no way out of
/// the campaign leaves one behind).
struct WriterProcess(Child);

impl Drop for WriterProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One round's writer: started, left running for a random time, then killed (or, one
/// round in ten, closed cleanly through its stdin). Returns the lines it printed.
fn run_writer(
    args: &TortureArgs,
    exe: &Path,
    dir: &Path,
    rng: &mut Pcg64Mcg,
    round: u64,
    version_base: u64,
    tally: &mut Tally,
) -> Result<Vec<String>> {
    let mut command = Command::new(exe);
    command
        .args(["logstore", "torture-child"])
        .arg(dir)
        .args(["--seed", &(args.seed ^ round.wrapping_mul(0x1000_0001)).to_string()])
        .args(["--appenders", &args.appenders.to_string()])
        .args(["--version-base", &version_base.to_string()])
        .args(["--segment-bytes", &args.segment_bytes.to_string()]);
    if let Some(inject) = args.inject.and_then(|inject| inject.to_possible_value()) {
        command.args(["--inject", inject.get_name()]);
    }
    let child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let mut writer = WriterProcess(child);
    let stdout = writer.0.stdout.take().ok_or_else(|| anyhow!("the writer has no stdout"))?;
    let stderr = writer.0.stderr.take().ok_or_else(|| anyhow!("the writer has no stderr"))?;
    let lines = read_lines(stdout);
    let errors = read_lines(stderr);
    let run_ms = rng.random_range(0..=args.max_run_ms);
    let clean = rng.random_bool(0.1);
    // Let it run, but not past its own end: a writer that failed ends the round now.
    let deadline = now() + Duration::from_millis(run_ms);
    while now() < deadline && writer.0.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(1).min(deadline.saturating_duration_since(now())));
    }
    if clean {
        drop(writer.0.stdin.take());
        let deadline = now() + Duration::from_secs(30);
        while writer.0.try_wait()?.is_none() && now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if writer.0.try_wait()?.is_none() {
        writer.0.kill().context("killing the writer")?;
    }
    let status = writer.0.wait().context("waiting for the writer")?;
    let lines = lines.join().map_err(|_| anyhow!("the writer's stdout reader panicked"))?;
    let errors = errors.join().map_err(|_| anyhow!("the writer's stderr reader panicked"))?;
    // Killed by our signal: no exit code. An exit code is the writer's own doing.
    match status.code() {
        None => tally.kills += 1,
        Some(0) => tally.clean_closes += 1,
        Some(_) => bail!("the writer failed ({status}):\n{}", errors.join("\n")),
    }
    Ok(lines)
}

/// Applies the writer's lines to the model: acknowledged operations; returns those in
/// flight at the kill, by owner.
fn apply_lines(
    lines: &[String],
    model: &mut Model,
    tally: &mut Tally,
    version_base: &mut u64,
) -> Result<BTreeMap<u64, Op>> {
    let mut in_flight: BTreeMap<u64, Op> = BTreeMap::new();
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        let bad_line = || anyhow!("bad line from the writer: {line}");
        match fields.as_slice() {
            ["R", micros, _records] => tally.recovery_us.push(micros.parse().unwrap_or(0)),
            ["B", rest @ ..] => {
                let (owner, op) = Op::parse(rest).ok_or_else(bad_line)?;
                if let Op::Append { version, .. } = op {
                    *version_base = (*version_base).max(version + 1);
                }
                in_flight.insert(owner, op);
            }
            ["A", owner] => {
                let owner: u64 = owner.parse().map_err(|_| bad_line())?;
                let op = in_flight
                    .remove(&owner)
                    .ok_or_else(|| anyhow!("acknowledgement without an operation: {line}"))?;
                model.apply(owner, op);
                tally.acknowledged += 1;
            }
            ["N", owner] => {
                in_flight.remove(&owner.parse().map_err(|_| bad_line())?);
            }
            ["C"] => {}
            _ => return Err(bad_line()),
        }
    }
    Ok(in_flight)
}

/// The full verify of the log the campaign leaves: any damage is wrong.
fn verify_at_end(dir: &Path, tally: &mut Tally) -> Result<()> {
    let disk = FsDisk::existing(dir).with_context(|| format!("verifying {}", dir.display()))?;
    let verify =
        somnus_logstore::verify(&disk).with_context(|| format!("verifying {}", dir.display()))?;
    if verify.is_damaged() {
        tally.wrong += 1;
        for problem in &verify.problems {
            noteln!("torture: verify found damage: {problem}");
        }
        for check in verify.segments.iter().filter(|check| check.state.is_damage()) {
            noteln!("torture: verify found damage: {}: {}", check.segment, check.state);
        }
    }
    Ok(())
}

fn print_summary(tally: &mut Tally, seconds: f64) {
    tally.recovery_us.sort_unstable();
    let median = tally.recovery_us.get(tally.recovery_us.len() / 2).copied().unwrap_or(0);
    let max = tally.recovery_us.last().copied().unwrap_or(0);
    noteln!(
        "torture: {} clean closes; {} kills before the log existed; in-flight operations \
         found applied {} times, absent {}; recovery at open median {:.1} ms, max {:.1} ms; \
         {seconds:.0} s",
        tally.clean_closes,
        tally.before_creation,
        tally.in_flight_applied,
        tally.in_flight_absent,
        median as f64 / 1e3,
        max as f64 / 1e3,
    );
}
