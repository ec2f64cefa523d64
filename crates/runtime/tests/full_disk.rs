//! A full disk, for real: a server's replica state on a 4 MiB tmpfs, written until
//! the disk has no room. The write that finds no room fails whole (no slot it
//! reserved stays taken, the journal keeps exactly what it held), later writes that
//! fit still go in, and a restart brings back exactly what was made durable.
//!
//! The tmpfs is mounted in a user and mount namespace of its own (`unshare -rm`),
//! in which this test binary runs again for the inner test; where the host allows no
//! user namespaces the test says so and checks nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use somnus_core::cluster::store::{BLOCK_BYTES, ChunkStore, StoreOp, fill};
use somnus_core::cluster::{ChunkId, ChunkIndex, Payload, Stamp, UnstableWrite};
use somnus_runtime::server::disk::ServerDisk;
use somnus_types::{ByteRange, ChunkGroupId, ObjectId, Version};

/// The inner test's directory, on the small tmpfs.
const DIR_VAR: &str = "SOMNUS_FULL_DISK_DIR";
const CHUNK_BYTES: u64 = 1 << 20;
const GROUP: ChunkGroupId = ChunkGroupId(2);

#[test]
fn a_full_disk_fails_the_write_whole_and_loses_nothing() {
    if !somnus_testkit::private_tmpfs_allowed() {
        eprintln!("SKIPPED: `unshare -rm` cannot mount a tmpfs here (no user namespaces)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"mount -t tmpfs -o size=4m tmpfs "$SOMNUS_FULL_DISK_DIR" && exec "$0" "$@""#;
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", script])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "inner_writes_until_the_disk_is_full", "--ignored", "--nocapture"])
        .env(DIR_VAR, dir.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the inner test failed:\n{text}");
    assert!(text.contains("1 passed"), "the inner test did not run:\n{text}");
}

fn write(n: u32, version: u64) -> StoreOp {
    let range = ByteRange::new(0, 16 * BLOCK_BYTES);
    let data = Payload::new(vec![n as u8 ^ 0x5a; range.size_bytes() as usize].into());
    let chunk = ChunkId { object: ObjectId(9), chunk: ChunkIndex(n) };
    let write =
        UnstableWrite { chunk, range, version: Version(version), stamp: Stamp(version), data };
    StoreOp::Apply { group: GROUP, write, stable: Version(version - 1) }
}

/// Every chunk's blocks with their bytes, and the groups' state.
fn state(disk: &ServerDisk, store: &ChunkStore) -> Vec<String> {
    let chunks: Vec<ChunkId> = store.chunk_ids().collect();
    let whole = ByteRange::new(0, CHUNK_BYTES);
    let blocks = 0..CHUNK_BYTES / BLOCK_BYTES;
    let read = |c: ChunkId| {
        let found = disk.read_blocks(c, blocks.clone()).unwrap().unwrap();
        fill(store.read(c, whole).unwrap(), &found).unwrap()
    };
    let mut out: Vec<String> =
        chunks.into_iter().map(|c| format!("{c:?}: {:?}", read(c))).collect();
    out.push(format!("{:?}", store.groups()));
    out
}

/// What the server does with a change: the runs it lands on decided, made durable
/// with them, then recorded.
fn make_durable(
    disk: &mut ServerDisk,
    store: &mut ChunkStore,
    op: &StoreOp,
) -> Result<(), somnus_runtime::server::disk::ServerDiskError> {
    let runs = store.landing(op);
    disk.make_durable(std::slice::from_ref(op), std::slice::from_ref(&runs))?;
    store.land(op.clone(), &runs);
    Ok(())
}

fn journal_bytes(dir: &Path) -> u64 {
    std::fs::metadata(dir.join("journal")).map_or(0, |m| m.len())
}

#[test]
#[ignore = "run by a_full_disk_fails_the_write_whole_and_loses_nothing, on its tmpfs"]
fn inner_writes_until_the_disk_is_full() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        eprintln!("SKIPPED: runs only inside a_full_disk_fails_the_write_whole_and_loses_nothing");
        return;
    };
    let dir = Path::new(&dir).join("replicas");
    let (mut disk, mut store) = ServerDisk::open(&dir, CHUNK_BYTES).unwrap();
    // Each write goes to a new chunk: 64 KiB of slots in the packs and 64 KiB of
    // journal, no more (a chunk takes the space of the blocks written to it).
    let mut made_durable = 0;
    let error = loop {
        let n = made_durable + 1;
        let op = write(n, u64::from(n));
        let before = journal_bytes(&dir);
        match make_durable(&mut disk, &mut store, &op) {
            Ok(()) => {
                made_durable += 1;
                assert!(made_durable < 40, "a 4 MiB disk took {made_durable} writes of 128 KiB");
            }
            Err(error) => {
                assert_eq!(journal_bytes(&dir), before, "the journal keeps what it held");
                break error;
            }
        }
    };
    assert!(error.is_no_space(), "{error}");
    assert!(error.to_string().contains("No space left on device"), "{error}");
    // A 1 MiB chunk per write would have fit 3 (the disk holds 4 MiB): the space of
    // what was written only, many more.
    assert!(made_durable >= 12, "the disk took {made_durable} writes of 64 KiB");
    // The write that found no room left no slot reserved.
    let stats = disk.watch().packs();
    assert_eq!(stats.slots_reserved, 0);
    assert_eq!(stats.slots_used, u64::from(made_durable) * 16);
    // A write into a block that has its slot needs journal room only (one block: the
    // disk is full to the last few blocks).
    let small = |version: u64, fill: u8| match write(1, version) {
        StoreOp::Apply { group, mut write, stable } => {
            write.range = ByteRange::new(0, BLOCK_BYTES);
            write.data = Payload::new(vec![fill; BLOCK_BYTES as usize].into());
            StoreOp::Apply { group, write, stable }
        }
        op => op,
    };
    let mut version = u64::from(made_durable);
    let mut commit = |disk: &mut ServerDisk, store: &mut ChunkStore, fill: u8| {
        version += 1;
        let op = small(version, fill);
        let before = journal_bytes(&dir);
        let done = make_durable(disk, store, &op);
        if done.is_err() {
            assert_eq!(journal_bytes(&dir), before, "the journal keeps what it held");
        }
        done
    };
    commit(&mut disk, &mut store, 0xe1).unwrap();
    // Fill the disk to the last byte: the journal's next append finds no room, part
    // of its record written before it did; that part is cut off again.
    let ballast = dir.join("ballast");
    assert!(std::fs::write(&ballast, vec![1u8; 4 << 20]).is_err(), "the ballast fills the disk");
    let full = commit(&mut disk, &mut store, 0xe2).unwrap_err();
    assert!(full.is_no_space(), "{full}");
    // A checkpoint with no room for the snapshot fails and leaves the journals whole.
    if let Err(error) = disk.checkpoint(&store) {
        assert!(error.is_no_space(), "{error}");
    }
    // Room again: the next append goes on after the last whole record.
    std::fs::remove_file(&ballast).unwrap();
    commit(&mut disk, &mut store, 0xe3).unwrap();
    let before = state(&disk, &store);
    drop((disk, store));
    let (disk, store) = ServerDisk::open(&dir, CHUNK_BYTES).unwrap();
    assert_eq!(state(&disk, &store), before, "a restart brings back what was made durable");
    println!("{made_durable} writes made durable before the disk was full");
}
