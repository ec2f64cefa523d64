//! Erasure coding for somnus: every erasure-coded byte it stores, every parity delta
//! ECS2 buffers and every read RIMAC rebuilds instead of waking a disk goes through
//! this crate.
//!
//! - [`gf`]: GF(2^8) arithmetic (polynomial 0x11d, as ISA-L and Jerasure).
//! - Slice kernels [`mul_slice`], [`mul_slice_xor`], [`xor_slices`], portable and SIMD
//!   (SSSE3, AVX2, AVX-512BW shuffles; GFNI affine transforms), picked at run time by
//!   [`Backend::detect`]. `unsafe` is confined to `kernels/x86.rs` and
//!   `kernels/mod.rs`'s one call into it; every kernel is checked against the portable
//!   one by the tests and by the fuzz target in `fuzz/`.
//! - [`Code`]: a systematic Reed-Solomon code whose first parity is the XOR of the data,
//!   with encoding, reconstruction of any r lost shards (plans cached per pattern),
//!   verification and read-modify-write parity updates.
//! - [`ecs2`]: the extra XOR parities of ECS2's active group and the survivability of a
//!   layout.
//!
//! Shards may have any length; long ones are processed in cache-sized blocks.
//! [`StripeBuffer`] lays shards out so that their streams do not alias in the caches.

mod buffer;
mod code;
pub mod ecs2;
mod error;
pub mod gf;
mod kernels;
mod matrix;

#[cfg(feature = "compare")]
pub mod bench;

pub use buffer::StripeBuffer;
pub use code::Code;
pub use error::{Error, Result};
pub use kernels::{Backend, Kernels, mul_slice, mul_slice_xor, xor_slices};
