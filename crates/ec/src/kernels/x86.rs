//! The x86-64 SIMD kernels: one generic loop ([`dot_body`]) instantiated for each
//! instruction set by a `#[target_feature]` entry point.
//!
//! - Byte shuffles (SSSE3, AVX2, AVX-512BW): `c * x = low[x & 15] ^ high[x >> 4]`, each
//!   16-entry table looked up for a whole vector by one `PSHUFB`.
//! - GFNI (with AVX2 or AVX-512): one `GF2P8AFFINEQB` multiplies a whole vector by the
//!   8x8 bit matrix of "times c".
//!
//! The loop computes up to [`MAX_GROUP`] outputs at once: each input vector is loaded
//! once, multiplied by each output's coefficient and XORed into that output's register,
//! and each output is stored once. When the first row of coefficients is all ones (the
//! first parity, P1 = XOR of the data), that output is computed with XORs alone.
//!
//! Safety: the entry points are `unsafe` for two reasons the caller in `kernels/mod.rs`
//! discharges: the CPU must have the features (checked by [`super::Backend`] before a
//! backend can be chosen), and every pointer must be valid for `len` bytes (the caller
//! derives them from slices whose lengths it has checked).
#![allow(unsafe_code)]
#![allow(
    clippy::needless_range_loop,
    reason = "indexing several register arrays by the same output and vector is the clearest form"
)]

use std::arch::x86_64::*;

use crate::gf::{AFFINE, NIBBLES};

/// The most outputs one pass computes; more are done in groups.
pub(crate) const MAX_GROUP: usize = 4;

/// A vector width's operations. Every method is `#[inline(always)]` so that it is
/// compiled inside the `#[target_feature]` entry point that calls it.
trait Vector {
    type V: Copy;
    const WIDTH: usize;
    /// Whether the loop takes inputs two at a time, folding both products into an
    /// output with one three-way XOR: worth it where that is one instruction
    /// (AVX-512's `VPTERNLOGQ`) and there are registers for the extra inputs.
    const PAIRS: bool = false;
    unsafe fn load(p: *const u8) -> Self::V;
    unsafe fn store(p: *mut u8, v: Self::V);
    unsafe fn zero() -> Self::V;
    unsafe fn xor(a: Self::V, b: Self::V) -> Self::V;
    /// `a ^ b ^ c`.
    #[inline(always)]
    unsafe fn xor3(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        // SAFETY: the caller's features.
        unsafe { Self::xor(Self::xor(a, b), c) }
    }
}

/// A way to multiply vectors of width `W` by a constant.
trait Multiply<W: Vector> {
    /// An input vector made ready for multiplication (its nibbles, for shuffles).
    type P: Copy;
    unsafe fn prepare(v: W::V) -> Self::P;
    unsafe fn mul(p: Self::P, c: u8) -> W::V;
}

/// `outputs[j] (^)= sum_i coefs[j * k + i] * inputs[i]` for the first
/// `len / (UNROLL * WIDTH) * UNROLL * WIDTH` bytes; returns how many bytes that was. With
/// `FIRST_XOR`, row 0 of `coefs` is all ones (a first parity, or an XOR of slices) and
/// is computed with XORs alone.
///
/// # Safety
/// The CPU has `W`'s and `M`'s features; every input and output pointer is valid for `len` bytes;
/// no output overlaps an input or another output; `coefs.len() == R * inputs.len()`.
#[inline(always)]
unsafe fn dot_body<
    W: Vector,
    M: Multiply<W>,
    const R: usize,
    const U: usize,
    const FIRST_XOR: bool,
>(
    coefs: &[u8],
    inputs: &[*const u8],
    outputs: &[*mut u8; R],
    len: usize,
    accumulate: bool,
) -> usize {
    let k = inputs.len();
    debug_assert_eq!(coefs.len(), R * k);
    let step = U * W::WIDTH;
    let mut offset = 0;
    while offset + step <= len {
        // SAFETY: offset + step <= len, so every access below is in bounds of the
        // caller's slices; the CPU features are the caller's promise.
        unsafe {
            // Plain loops, not closures or `array::map`: those are not always inlined
            // into the `#[target_feature]` function, and every intrinsic would become
            // a call.
            let load = |p: *const u8| -> [W::V; U] {
                let mut vectors = [W::zero(); U];
                for (u, vector) in vectors.iter_mut().enumerate() {
                    *vector = W::load(p.add(offset + u * W::WIDTH));
                }
                vectors
            };
            let prepare = |vectors: &[W::V; U]| -> [M::P; U] {
                let mut prepared = [M::prepare(vectors[0]); U];
                for u in 1..U {
                    prepared[u] = M::prepare(vectors[u]);
                }
                prepared
            };
            let mut acc = [[W::zero(); U]; R];
            if accumulate {
                for j in 0..R {
                    acc[j] = load(outputs[j].cast_const());
                }
            }
            let mut i = 0;
            while W::PAIRS && i + 2 <= k {
                let a = load(*inputs.get_unchecked(i));
                let b = load(*inputs.get_unchecked(i + 1));
                let pa = prepare(&a);
                let pb = prepare(&b);
                for j in 0..R {
                    if FIRST_XOR && j == 0 {
                        for u in 0..U {
                            acc[0][u] = W::xor3(acc[0][u], a[u], b[u]);
                        }
                    } else {
                        let (ca, cb) =
                            (*coefs.get_unchecked(j * k + i), *coefs.get_unchecked(j * k + i + 1));
                        for u in 0..U {
                            acc[j][u] = W::xor3(acc[j][u], M::mul(pa[u], ca), M::mul(pb[u], cb));
                        }
                    }
                }
                i += 2;
            }
            while i < k {
                let a = load(*inputs.get_unchecked(i));
                let pa = prepare(&a);
                for j in 0..R {
                    if FIRST_XOR && j == 0 {
                        for u in 0..U {
                            acc[0][u] = W::xor(acc[0][u], a[u]);
                        }
                    } else {
                        let c = *coefs.get_unchecked(j * k + i);
                        for u in 0..U {
                            acc[j][u] = W::xor(acc[j][u], M::mul(pa[u], c));
                        }
                    }
                }
                i += 1;
            }
            for j in 0..R {
                for u in 0..U {
                    W::store(outputs[j].add(offset + u * W::WIDTH), acc[j][u]);
                }
            }
        }
        offset += step;
    }
    offset
}

/// 16-byte vectors (SSE2, part of x86-64).
struct W128;
impl Vector for W128 {
    type V = __m128i;
    const WIDTH: usize = 16;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m128i {
        // SAFETY: the caller's bounds; unaligned loads are allowed.
        unsafe { _mm_loadu_si128(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m128i) {
        // SAFETY: the caller's bounds; unaligned stores are allowed.
        unsafe { _mm_storeu_si128(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m128i {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { _mm_setzero_si128() }
    }
    #[inline(always)]
    unsafe fn xor(a: __m128i, b: __m128i) -> __m128i {
        // SAFETY: SSE2 is part of x86-64.
        unsafe { _mm_xor_si128(a, b) }
    }
}

/// 32-byte vectors (AVX2).
struct W256;
impl Vector for W256 {
    type V = __m256i;
    const WIDTH: usize = 32;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        // SAFETY: the caller's bounds and features.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m256i) {
        // SAFETY: the caller's bounds and features.
        unsafe { _mm256_storeu_si256(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        // SAFETY: the caller's features.
        unsafe { _mm256_setzero_si256() }
    }
    #[inline(always)]
    unsafe fn xor(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the caller's features.
        unsafe { _mm256_xor_si256(a, b) }
    }
}

/// 64-byte vectors (AVX-512F), with a one-instruction three-way XOR.
struct W512;
impl Vector for W512 {
    type V = __m512i;
    const WIDTH: usize = 64;
    const PAIRS: bool = true;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        // SAFETY: the caller's bounds and features.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m512i) {
        // SAFETY: the caller's bounds and features.
        unsafe { _mm512_storeu_si512(p.cast(), v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        // SAFETY: the caller's features.
        unsafe { _mm512_setzero_si512() }
    }
    #[inline(always)]
    unsafe fn xor(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: the caller's features.
        unsafe { _mm512_xor_si512(a, b) }
    }
    #[inline(always)]
    unsafe fn xor3(a: __m512i, b: __m512i, c: __m512i) -> __m512i {
        // SAFETY: the caller's features.
        unsafe { _mm512_ternarylogic_epi64::<0x96>(a, b, c) }
    }
}

/// Nibble-table shuffles: `c * x = low[x & 15] ^ high[x >> 4]`, each table looked up
/// for a whole vector by one `PSHUFB` (SSSE3, AVX2, AVX-512BW).
struct Shuffle;

/// The nibble-shuffle multiplication for one width, from its intrinsics: the 16-byte
/// tables are broadcast to every 128-bit lane by `$lanes`.
macro_rules! shuffle_multiply {
    ($width:ty, $v:ty, $set1:ident, $and:ident, $srli:ident, $shuffle:ident, $xor:ident, $lanes:expr) => {
        impl Multiply<$width> for Shuffle {
            type P = ($v, $v);
            #[inline(always)]
            unsafe fn prepare(v: $v) -> ($v, $v) {
                // SAFETY: the caller's features.
                unsafe {
                    let mask = $set1(0x0f);
                    ($and(v, mask), $and($srli(v, 4), mask))
                }
            }
            #[inline(always)]
            unsafe fn mul((low, high): ($v, $v), c: u8) -> $v {
                let tables = &NIBBLES[c as usize];
                // SAFETY: the tables are 16 bytes each; the caller's features.
                unsafe {
                    let t_low = $lanes(_mm_loadu_si128(tables.low.as_ptr().cast()));
                    let t_high = $lanes(_mm_loadu_si128(tables.high.as_ptr().cast()));
                    $xor($shuffle(t_low, low), $shuffle(t_high, high))
                }
            }
        }
    };
}

shuffle_multiply!(
    W128,
    __m128i,
    _mm_set1_epi8,
    _mm_and_si128,
    _mm_srli_epi16,
    _mm_shuffle_epi8,
    _mm_xor_si128,
    |t| t
);
shuffle_multiply!(
    W256,
    __m256i,
    _mm256_set1_epi8,
    _mm256_and_si256,
    _mm256_srli_epi16,
    _mm256_shuffle_epi8,
    _mm256_xor_si256,
    |t| _mm256_broadcastsi128_si256(t)
);
shuffle_multiply!(
    W512,
    __m512i,
    _mm512_set1_epi8,
    _mm512_and_si512,
    _mm512_srli_epi16,
    _mm512_shuffle_epi8,
    _mm512_xor_si512,
    |t| _mm512_broadcast_i32x4(t)
);

/// GF(2) affine transforms: one `GF2P8AFFINEQB` multiplies a whole vector by the 8x8 bit
/// matrix of "times c" (GFNI).
struct Gfni;

impl Multiply<W256> for Gfni {
    type P = __m256i;
    #[inline(always)]
    unsafe fn prepare(v: __m256i) -> __m256i {
        v
    }
    #[inline(always)]
    unsafe fn mul(v: __m256i, c: u8) -> __m256i {
        // SAFETY: the caller's features (GFNI with AVX).
        unsafe {
            _mm256_gf2p8affine_epi64_epi8::<0>(v, _mm256_set1_epi64x(AFFINE[c as usize] as i64))
        }
    }
}

impl Multiply<W512> for Gfni {
    type P = __m512i;
    #[inline(always)]
    unsafe fn prepare(v: __m512i) -> __m512i {
        v
    }
    #[inline(always)]
    unsafe fn mul(v: __m512i, c: u8) -> __m512i {
        // SAFETY: the caller's features (GFNI with AVX-512F).
        unsafe {
            _mm512_gf2p8affine_epi64_epi8::<0>(v, _mm512_set1_epi64(AFFINE[c as usize] as i64))
        }
    }
}

/// A kernel entry point: `dot_body` compiled for one instruction set and group size.
pub(crate) type Kernel = unsafe fn(&[u8], &[*const u8], &[*mut u8], usize, bool) -> usize;

macro_rules! entry_points {
    ($($name:ident: $width:ty, $multiply:ty, $unroll:literal, $features:literal;)*) => {$(
        /// # Safety
        /// The CPU has the features named; the pointers are as `dot_body` requires, and
        /// `outputs.len()` is between 1 and `MAX_GROUP`.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            coefs: &[u8],
            inputs: &[*const u8],
            outputs: &[*mut u8],
            len: usize,
            accumulate: bool,
        ) -> usize {
            // One instantiation per group size: the outputs' registers are arrays of
            // constant length.
            macro_rules! by_group {
                ($first_xor:literal) => {
                    match outputs {
                        [a] => dot_body::<$width, $multiply, 1, $unroll, $first_xor>(coefs, inputs, &[*a], len, accumulate),
                        [a, b] => dot_body::<$width, $multiply, 2, $unroll, $first_xor>(coefs, inputs, &[*a, *b], len, accumulate),
                        [a, b, c] => dot_body::<$width, $multiply, 3, $unroll, $first_xor>(coefs, inputs, &[*a, *b, *c], len, accumulate),
                        [a, b, c, d] => dot_body::<$width, $multiply, 4, $unroll, $first_xor>(coefs, inputs, &[*a, *b, *c, *d], len, accumulate),
                        _ => 0,
                    }
                };
            }
            let first_row_is_xor = coefs.get(..inputs.len()).is_some_and(|row| row.iter().all(|&c| c == 1));
            // SAFETY: forwarded from this function's contract; the group size is matched
            // exactly.
            unsafe {
                if first_row_is_xor { by_group!(true) } else { by_group!(false) }
            }
        }
    )*};
}

entry_points! {
    dot_ssse3: W128, Shuffle, 2, "ssse3";
    dot_avx2: W256, Shuffle, 2, "avx2";
    dot_avx512: W512, Shuffle, 2, "avx512f,avx512bw";
    dot_avx2_gfni: W256, Gfni, 2, "avx2,gfni";
    dot_avx512_gfni: W512, Gfni, 4, "avx512f,avx512bw,gfni";
}
