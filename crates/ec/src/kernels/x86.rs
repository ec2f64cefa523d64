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
//! and each output is stored once. A coefficient of 1 (every coefficient of the first
//! parity row) is a plain XOR, and 0 is skipped.
//!
//! Safety: the entry points are `unsafe` for two reasons the caller in `kernels/mod.rs`
//! discharges: the CPU must have the features (checked by [`super::Backend`] before a
//! backend can be chosen), and every pointer must be valid for `len` bytes (the caller
//! derives them from slices whose lengths it has checked).
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use crate::gf::{AFFINE, NIBBLES};

/// The most outputs one pass computes; more are done in groups.
pub(crate) const MAX_GROUP: usize = 4;

/// One instruction set's vector operations. Every method is `#[inline(always)]` so that
/// it is compiled inside the `#[target_feature]` entry point that calls it.
trait Lanes {
    type V: Copy;
    /// An input vector made ready for multiplication (its nibbles, for shuffles).
    type P: Copy;
    const WIDTH: usize;
    unsafe fn load(p: *const u8) -> Self::V;
    unsafe fn store(p: *mut u8, v: Self::V);
    unsafe fn zero() -> Self::V;
    unsafe fn xor(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn prepare(v: Self::V) -> Self::P;
    unsafe fn mul(p: Self::P, c: u8) -> Self::V;
}

/// `outputs[j] (^)= sum_i coefs[j * k + i] * inputs[i]` for the first
/// `len / (2 * WIDTH) * 2 * WIDTH` bytes; returns how many bytes that was.
///
/// # Safety
/// The CPU has `L`'s features; every input and output pointer is valid for `len` bytes;
/// no output overlaps an input or another output; `coefs.len() == R * inputs.len()`.
#[inline(always)]
unsafe fn dot_body<L: Lanes, const R: usize>(
    coefs: &[u8],
    inputs: &[*const u8],
    outputs: &[*mut u8; R],
    len: usize,
    accumulate: bool,
) -> usize {
    let k = inputs.len();
    debug_assert_eq!(coefs.len(), R * k);
    let step = 2 * L::WIDTH;
    let mut offset = 0;
    while offset + step <= len {
        // SAFETY: offset + step <= len, so every access below is in bounds of the
        // caller's slices; the CPU features are the caller's promise.
        unsafe {
            let mut acc0 = [L::zero(); R];
            let mut acc1 = [L::zero(); R];
            if accumulate {
                for j in 0..R {
                    acc0[j] = L::load(outputs[j].add(offset));
                    acc1[j] = L::load(outputs[j].add(offset + L::WIDTH));
                }
            }
            for (i, &input) in inputs.iter().enumerate() {
                let v0 = L::load(input.add(offset));
                let v1 = L::load(input.add(offset + L::WIDTH));
                let p0 = L::prepare(v0);
                let p1 = L::prepare(v1);
                for j in 0..R {
                    match *coefs.get_unchecked(j * k + i) {
                        0 => {}
                        1 => {
                            acc0[j] = L::xor(acc0[j], v0);
                            acc1[j] = L::xor(acc1[j], v1);
                        }
                        c => {
                            acc0[j] = L::xor(acc0[j], L::mul(p0, c));
                            acc1[j] = L::xor(acc1[j], L::mul(p1, c));
                        }
                    }
                }
            }
            for j in 0..R {
                L::store(outputs[j].add(offset), acc0[j]);
                L::store(outputs[j].add(offset + L::WIDTH), acc1[j]);
            }
        }
        offset += step;
    }
    offset
}

struct Ssse3;
impl Lanes for Ssse3 {
    type V = __m128i;
    type P = (__m128i, __m128i);
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
    #[inline(always)]
    unsafe fn prepare(v: __m128i) -> (__m128i, __m128i) {
        // SAFETY: SSE2 is part of x86-64.
        unsafe {
            let mask = _mm_set1_epi8(0x0f);
            (_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask))
        }
    }
    #[inline(always)]
    unsafe fn mul((low, high): (__m128i, __m128i), c: u8) -> __m128i {
        let tables = &NIBBLES[c as usize];
        // SAFETY: the tables are 16 bytes each; SSSE3 is the caller's promise.
        unsafe {
            let t_low = _mm_loadu_si128(tables.low.as_ptr().cast());
            let t_high = _mm_loadu_si128(tables.high.as_ptr().cast());
            _mm_xor_si128(_mm_shuffle_epi8(t_low, low), _mm_shuffle_epi8(t_high, high))
        }
    }
}

struct Avx2;
impl Lanes for Avx2 {
    type V = __m256i;
    type P = (__m256i, __m256i);
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
    #[inline(always)]
    unsafe fn prepare(v: __m256i) -> (__m256i, __m256i) {
        // SAFETY: the caller's features.
        unsafe {
            let mask = _mm256_set1_epi8(0x0f);
            (_mm256_and_si256(v, mask), _mm256_and_si256(_mm256_srli_epi16(v, 4), mask))
        }
    }
    #[inline(always)]
    unsafe fn mul((low, high): (__m256i, __m256i), c: u8) -> __m256i {
        let tables = &NIBBLES[c as usize];
        // SAFETY: the tables are 16 bytes each; the caller's features.
        unsafe {
            let t_low = _mm256_broadcastsi128_si256(_mm_loadu_si128(tables.low.as_ptr().cast()));
            let t_high = _mm256_broadcastsi128_si256(_mm_loadu_si128(tables.high.as_ptr().cast()));
            _mm256_xor_si256(_mm256_shuffle_epi8(t_low, low), _mm256_shuffle_epi8(t_high, high))
        }
    }
}

struct Avx512;
impl Lanes for Avx512 {
    type V = __m512i;
    type P = (__m512i, __m512i);
    const WIDTH: usize = 64;
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
    unsafe fn prepare(v: __m512i) -> (__m512i, __m512i) {
        // SAFETY: the caller's features.
        unsafe {
            let mask = _mm512_set1_epi8(0x0f);
            (_mm512_and_si512(v, mask), _mm512_and_si512(_mm512_srli_epi16(v, 4), mask))
        }
    }
    #[inline(always)]
    unsafe fn mul((low, high): (__m512i, __m512i), c: u8) -> __m512i {
        let tables = &NIBBLES[c as usize];
        // SAFETY: the tables are 16 bytes each; the caller's features.
        unsafe {
            let t_low = _mm512_broadcast_i32x4(_mm_loadu_si128(tables.low.as_ptr().cast()));
            let t_high = _mm512_broadcast_i32x4(_mm_loadu_si128(tables.high.as_ptr().cast()));
            _mm512_xor_si512(_mm512_shuffle_epi8(t_low, low), _mm512_shuffle_epi8(t_high, high))
        }
    }
}

struct Avx2Gfni;
impl Lanes for Avx2Gfni {
    type V = __m256i;
    type P = __m256i;
    const WIDTH: usize = 32;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        // SAFETY: as for AVX2.
        unsafe { Avx2::load(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m256i) {
        // SAFETY: as for AVX2.
        unsafe { Avx2::store(p, v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        // SAFETY: as for AVX2.
        unsafe { Avx2::zero() }
    }
    #[inline(always)]
    unsafe fn xor(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: as for AVX2.
        unsafe { Avx2::xor(a, b) }
    }
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

struct Avx512Gfni;
impl Lanes for Avx512Gfni {
    type V = __m512i;
    type P = __m512i;
    const WIDTH: usize = 64;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        // SAFETY: as for AVX-512.
        unsafe { Avx512::load(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m512i) {
        // SAFETY: as for AVX-512.
        unsafe { Avx512::store(p, v) }
    }
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        // SAFETY: as for AVX-512.
        unsafe { Avx512::zero() }
    }
    #[inline(always)]
    unsafe fn xor(a: __m512i, b: __m512i) -> __m512i {
        // SAFETY: as for AVX-512.
        unsafe { Avx512::xor(a, b) }
    }
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
    ($($name:ident: $lanes:ty, $features:literal;)*) => {$(
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
            // SAFETY: forwarded from this function's contract; the group size is
            // matched exactly, so the array conversions cannot fail.
            unsafe {
                match outputs {
                    [a] => dot_body::<$lanes, 1>(coefs, inputs, &[*a], len, accumulate),
                    [a, b] => dot_body::<$lanes, 2>(coefs, inputs, &[*a, *b], len, accumulate),
                    [a, b, c] => {
                        dot_body::<$lanes, 3>(coefs, inputs, &[*a, *b, *c], len, accumulate)
                    }
                    [a, b, c, d] => {
                        dot_body::<$lanes, 4>(coefs, inputs, &[*a, *b, *c, *d], len, accumulate)
                    }
                    _ => 0,
                }
            }
        }
    )*};
}

entry_points! {
    dot_ssse3: Ssse3, "ssse3";
    dot_avx2: Avx2, "avx2";
    dot_avx512: Avx512, "avx512f,avx512bw";
    dot_avx2_gfni: Avx2Gfni, "avx2,gfni";
    dot_avx512_gfni: Avx512Gfni, "avx512f,avx512bw,gfni";
}
