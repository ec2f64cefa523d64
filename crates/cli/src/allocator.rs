//! The allocator's two settings.
//!
//! How long mimalloc keeps memory freed before giving it back to the system. A loaded
//! storage server, MDS or gateway frees and takes again buffers of a MiB or more every
//! few milliseconds (a frame of a write, a GET's blocks). With mimalloc's default, 1 s,
//! some are given back between uses and faulted in again, the kernel zeroing every
//! page (2 MiB at a time under transparent huge pages): 4 % of a loaded `somnus up`'s
//! CPU in a profile of 1 MiB S3 PUTs. Kept for 10 s, memory still goes back once a
//! process idles, and 1 MiB PUTs went 6 % faster (179 op/s against 169, medians of
//! three alternating rounds; docs/results/s3-peers.md). `MIMALLOC_PURGE_DELAY` in the
//! environment, as mimalloc documents it, still decides.
//!
//! How often mimalloc looks over every page of the heap for ones it can free: every
//! 10,000 allocations that miss its fast path, by default, and each look visits every
//! page not full. A geared replay of a week holds a heap of several GB, and those
//! looks were 8-10 % of its CPU (`mi_theap_collect_ex`); once every million, the
//! replay of the week's first 27.8 h took 227 CPU s against 249, at the same peak
//! resident memory (5.02 GB against 5.03). `MIMALLOC_GENERIC_COLLECT` in the
//! environment still decides.

use std::ffi::{c_int, c_long};

/// Milliseconds freed memory is kept before it goes back to the system.
const PURGE_DELAY_MS: c_long = 10_000;

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (its place in the enum of
/// `mimalloc.h`, the same in mimalloc 2 and 3).
const MI_OPTION_PURGE_DELAY: c_int = 15;

/// Generic allocations between two looks over the heap (mimalloc's upper bound).
const GENERIC_COLLECT: c_long = 1_000_000;

/// `mi_option_generic_collect` in mimalloc 3's `mi_option_t` (the `mimalloc` crate's
/// default; mimalloc 2 has it elsewhere), and its default there: a library whose
/// option at that place has another default is left alone.
const MI_OPTION_GENERIC_COLLECT: c_int = 34;
const GENERIC_COLLECT_DEFAULT: c_long = 10_000;

#[allow(unsafe_code)]
unsafe extern "C" {
    /// mimalloc's own, linked in by the `mimalloc` crate (its `libmimalloc-sys`).
    fn mi_option_set(option: c_int, value: c_long);
    fn mi_option_get(option: c_int) -> c_long;
}

/// Sets the purge delay and how often the heap is looked over, unless the
/// environment sets them.
pub(crate) fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: `mi_option_set` writes one word of mimalloc's option table, with a
        // valid option and value; mimalloc reads the delay whenever it purges.
        #[allow(unsafe_code)]
        unsafe {
            mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        }
    }
    if std::env::var_os("MIMALLOC_GENERIC_COLLECT").is_none() {
        // SAFETY: as above; `mi_option_get` reads one word of the table (a valid
        // option: mimalloc 2 and 3 both have more than 35).
        #[allow(unsafe_code)]
        unsafe {
            if mi_option_get(MI_OPTION_GENERIC_COLLECT) == GENERIC_COLLECT_DEFAULT {
                mi_option_set(MI_OPTION_GENERIC_COLLECT, GENERIC_COLLECT);
            }
        }
    }
}
