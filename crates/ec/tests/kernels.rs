#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goal: every SIMD kernel computes exactly what the portable kernel computes, for any
//! constant, any length (vector tails, block boundaries) and any alignment.
//! Method: random inputs from a seeded generator, each backend this CPU has against
//! `Backend::Portable`. The fuzz target in `fuzz/` does the same with inputs chosen by
//! coverage.

use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64;
use somnus_ec::{Backend, Kernels, gf};

/// Lengths around every boundary a kernel has: vector widths, its two-vector step, and
/// the 32 KiB block.
const LENGTHS: &[usize] = &[
    0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 255, 256, 1000, 4096, 32767,
    32768, 32769, 100_003,
];

fn random_bytes(rng: &mut Pcg64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill_bytes(&mut bytes);
    bytes
}

fn simd_backends() -> Vec<Kernels> {
    let backends: Vec<Kernels> = Backend::available()
        .into_iter()
        .filter(|&b| b != Backend::Portable)
        .filter_map(Kernels::new)
        .collect();
    eprintln!(
        "backends checked: {:?}",
        backends.iter().map(|k| k.backend().name()).collect::<Vec<_>>()
    );
    backends
}

#[test]
fn mul_slice_and_mul_slice_xor_match_portable_for_every_constant() {
    let portable = Kernels::new(Backend::Portable).unwrap();
    let mut rng = Pcg64::seed_from_u64(1);
    for kernels in simd_backends() {
        for c in 0..=255u8 {
            let len = LENGTHS[c as usize % LENGTHS.len()];
            // Slices that start at any offset inside a buffer: no alignment assumed.
            let offset = rng.random_range(0..64);
            let src_buf = random_bytes(&mut rng, len + offset);
            let src = &src_buf[offset..];
            let dst0 = random_bytes(&mut rng, len);

            let (mut expected, mut got) = (dst0.clone(), dst0.clone());
            portable.mul_slice(c, src, &mut expected);
            kernels.mul_slice(c, src, &mut got);
            assert_eq!(got, expected, "{:?} mul_slice c={c} len={len}", kernels.backend());
            for (x, y) in src.iter().zip(&got) {
                assert_eq!(*y, gf::mul(c, *x));
            }

            let (mut expected, mut got) = (dst0.clone(), dst0.clone());
            portable.mul_slice_xor(c, src, &mut expected);
            kernels.mul_slice_xor(c, src, &mut got);
            assert_eq!(got, expected, "{:?} mul_slice_xor c={c} len={len}", kernels.backend());
        }
    }
}

#[test]
fn matrix_kernels_match_portable_for_every_length_and_group_size() {
    let portable = Kernels::new(Backend::Portable).unwrap();
    let mut rng = Pcg64::seed_from_u64(2);
    for kernels in simd_backends() {
        for (case, &len) in LENGTHS.iter().enumerate() {
            // Up to 9 outputs: groups of 4, 4 and 1.
            let k = 1 + case % 13;
            let r = 1 + case % 9;
            let mut coefs = random_bytes(&mut rng, k * r);
            // Zeros and ones take their own paths in the kernels.
            for c in coefs.iter_mut().step_by(3) {
                *c = rng.random_range(0..2);
            }
            let inputs: Vec<Vec<u8>> = (0..k).map(|_| random_bytes(&mut rng, len)).collect();
            let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let initial: Vec<Vec<u8>> = (0..r).map(|_| random_bytes(&mut rng, len)).collect();
            for accumulate in [false, true] {
                let mut expected = initial.clone();
                let mut got = initial.clone();
                portable.dot(
                    &coefs,
                    &inputs,
                    &mut expected.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(),
                    accumulate,
                );
                kernels.dot(
                    &coefs,
                    &inputs,
                    &mut got.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(),
                    accumulate,
                );
                assert_eq!(
                    got,
                    expected,
                    "{:?} k={k} r={r} len={len} accumulate={accumulate}",
                    kernels.backend()
                );
            }
        }
    }
}

#[test]
fn xor_slices_is_the_xor_of_its_sources() {
    let mut rng = Pcg64::seed_from_u64(3);
    for kernels in Backend::available().into_iter().filter_map(Kernels::new) {
        for &len in LENGTHS {
            let sources: Vec<Vec<u8>> = (0..6).map(|_| random_bytes(&mut rng, len)).collect();
            let sources: Vec<&[u8]> = sources.iter().map(Vec::as_slice).collect();
            let mut dst = random_bytes(&mut rng, len);
            kernels.xor_slices(&sources, &mut dst);
            for (index, byte) in dst.iter().enumerate() {
                assert_eq!(
                    *byte,
                    sources.iter().fold(0, |acc, s| acc ^ s[index]),
                    "{:?} len={len}",
                    kernels.backend()
                );
            }
        }
        // No sources: zero.
        let mut dst = vec![7u8; 100];
        kernels.xor_slices(&[], &mut dst);
        assert!(dst.iter().all(|&b| b == 0));
    }
}

#[test]
fn more_inputs_than_one_kernel_call_takes_are_folded_in() {
    let mut rng = Pcg64::seed_from_u64(4);
    let len = 300;
    let inputs: Vec<Vec<u8>> = (0..600).map(|_| random_bytes(&mut rng, len)).collect();
    let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let coefs = random_bytes(&mut rng, 2 * inputs.len());
    let mut results = Vec::new();
    for kernels in Backend::available().into_iter().filter_map(Kernels::new) {
        let mut out = vec![vec![0u8; len]; 2];
        kernels.dot(
            &coefs,
            &inputs,
            &mut out.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(),
            false,
        );
        results.push(out);
    }
    let mut expected = vec![vec![0u8; len]; 2];
    for (j, out) in expected.iter_mut().enumerate() {
        for (i, input) in inputs.iter().enumerate() {
            for (o, x) in out.iter_mut().zip(*input) {
                *o ^= gf::mul(coefs[j * inputs.len() + i], *x);
            }
        }
    }
    for out in results {
        assert_eq!(out, expected);
    }
}

#[test]
#[should_panic(expected = "slices of one length")]
fn slices_of_different_lengths_are_refused() {
    somnus_ec::mul_slice_xor(3, &[1, 2, 3], &mut [0, 0]);
}
