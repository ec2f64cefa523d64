//! The allocator's one setting: how long mimalloc keeps memory freed before giving it
//! back to the system.
//!
//! A loaded storage server, MDS or gateway frees and takes again buffers of a MiB or
//! more every few milliseconds (a frame of a write, a GET's blocks). With mimalloc's
//! default, 1 s, some are given back between uses and faulted in again, the kernel
//! zeroing every page (2 MiB at a time under transparent huge pages): 4 % of a loaded
//! `somnus up`'s CPU in a profile of 1 MiB S3 PUTs. Kept for 10 s, memory still goes
//! back once a process idles, and 1 MiB PUTs went 6 % faster (179 op/s against 169,
//! medians of three alternating rounds; docs/results/s3-peers.md).
//! `MIMALLOC_PURGE_DELAY` in the environment, as mimalloc documents it, still decides.

use std::ffi::{c_int, c_long};

/// Milliseconds freed memory is kept before it goes back to the system.
const PURGE_DELAY_MS: c_long = 10_000;

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (its place in the enum of
/// `mimalloc.h`, the same in mimalloc 2 and 3).
const MI_OPTION_PURGE_DELAY: c_int = 15;

#[allow(unsafe_code)]
unsafe extern "C" {
    /// mimalloc's own, linked in by the `mimalloc` crate (its `libmimalloc-sys`).
    fn mi_option_set(option: c_int, value: c_long);
}

/// Sets the purge delay, unless the environment sets it.
pub(crate) fn keep_freed_memory_a_while() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` writes one word of mimalloc's option table, with a valid
    // option and value; mimalloc reads the delay whenever it purges.
    #[allow(unsafe_code)]
    unsafe {
        mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}
