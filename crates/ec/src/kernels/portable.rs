//! The portable kernel: safe Rust, a 256-byte table per constant and 8-byte XORs. It is
//! the reference every SIMD kernel is checked against, the fallback on CPUs without
//! them, and the tail of every slice whose length is not a multiple of a vector.

use crate::gf::MUL;

/// `outputs[j] (^)= sum_i coefs[j * k + i] * inputs[i]` over `len` bytes from `offset`,
/// where `k = inputs.len()`; with `accumulate` false the outputs are overwritten.
pub(crate) fn dot(
    coefs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    range: std::ops::Range<usize>,
    accumulate: bool,
) {
    let k = inputs.len();
    for (j, output) in outputs.iter_mut().enumerate() {
        let output = &mut output[range.clone()];
        if !accumulate {
            output.fill(0);
        }
        for (i, input) in inputs.iter().enumerate() {
            mul_xor(coefs[j * k + i], &input[range.clone()], output);
        }
    }
}

/// `dst ^= c * src`.
fn mul_xor(c: u8, src: &[u8], dst: &mut [u8]) {
    match c {
        0 => {}
        1 => xor(src, dst),
        _ => {
            let row = &MUL[c as usize];
            for (d, s) in dst.iter_mut().zip(src) {
                *d ^= row[*s as usize];
            }
        }
    }
}

/// `dst ^= src`, eight bytes at a time.
fn xor(src: &[u8], dst: &mut [u8]) {
    let mut dst_words = dst.chunks_exact_mut(8);
    let mut src_words = src.chunks_exact(8);
    for (d, s) in (&mut dst_words).zip(&mut src_words) {
        let word = u64::from_ne_bytes(d.try_into().unwrap_or([0; 8]))
            ^ u64::from_ne_bytes(s.try_into().unwrap_or([0; 8]));
        d.copy_from_slice(&word.to_ne_bytes());
    }
    for (d, s) in dst_words.into_remainder().iter_mut().zip(src_words.remainder()) {
        *d ^= *s;
    }
}
