//! Every SIMD kernel against the portable kernel, on inputs a coverage-guided fuzzer
//! chooses: constants, lengths (vector tails, block edges), misaligned starts, numbers
//! of inputs and outputs, accumulation; then the whole code (encode, lose shards,
//! reconstruct) with each backend.
//!
//! Run: `cargo +nightly fuzz run kernels` in `crates/ec/fuzz` (see docs/ec.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use somnus_ec::{Backend, Code, Kernels};

/// Reads little pieces of the input as parameters; the rest is data.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }
    fn u16(&mut self) -> usize {
        usize::from(self.byte()) | usize::from(self.byte()) << 8
    }
    /// `len` bytes: the input's own, repeated if it runs short.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let source = if self.0.is_empty() { &[0x5a][..] } else { self.0 };
        let out: Vec<u8> = source.iter().copied().cycle().take(len).collect();
        self.0 = &self.0[len.min(self.0.len())..];
        out
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let backends: Vec<Backend> = Backend::available().into_iter().filter(|&b| b != Backend::Portable).collect();
    let Some(&backend) = backends.get(usize::from(input.byte()) % backends.len().max(1)) else { return };
    let (Some(simd), Some(portable)) = (Kernels::new(backend), Kernels::new(Backend::Portable)) else { return };
    match input.byte() % 3 {
        0 => {
            // One constant, one slice, at any offset.
            let c = input.byte();
            let offset = usize::from(input.byte() % 64);
            let len = input.u16() % 20_000;
            let src = input.bytes(len + offset);
            let dst = input.bytes(len);
            let (mut a, mut b) = (dst.clone(), dst.clone());
            simd.mul_slice(c, &src[offset..], &mut a);
            portable.mul_slice(c, &src[offset..], &mut b);
            assert_eq!(a, b, "{backend:?} mul_slice c={c} len={len} offset={offset}");
            let (mut a, mut b) = (dst.clone(), dst);
            simd.mul_slice_xor(c, &src[offset..], &mut a);
            portable.mul_slice_xor(c, &src[offset..], &mut b);
            assert_eq!(a, b, "{backend:?} mul_slice_xor c={c} len={len} offset={offset}");
        }
        1 => {
            // A matrix of constants over several slices.
            let k = 1 + usize::from(input.byte() % 20);
            let r = 1 + usize::from(input.byte() % 10);
            let accumulate = input.byte() & 1 == 1;
            let len = input.u16() % 5_000;
            let coefs = input.bytes(k * r);
            let inputs: Vec<Vec<u8>> = (0..k).map(|_| input.bytes(len)).collect();
            let inputs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
            let initial: Vec<Vec<u8>> = (0..r).map(|_| input.bytes(len)).collect();
            let (mut a, mut b) = (initial.clone(), initial);
            simd.dot(&coefs, &inputs, &mut a.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(), accumulate);
            portable.dot(&coefs, &inputs, &mut b.iter_mut().map(Vec::as_mut_slice).collect::<Vec<_>>(), accumulate);
            assert_eq!(a, b, "{backend:?} dot k={k} r={r} len={len} accumulate={accumulate}");
        }
        _ => {
            // The code: encode, lose up to r shards, reconstruct.
            let k = 1 + usize::from(input.byte() % 16);
            let r = 1 + usize::from(input.byte() % 6);
            let len = input.u16() % 3_000;
            let lost_mask = input.u16();
            let Ok(code) = Code::new(k, r) else { return };
            let Some(code) = code.with_backend(backend) else { return };
            let mut shards: Vec<Vec<u8>> = (0..k + r).map(|_| input.bytes(len)).collect();
            code.encode_shards(&mut shards).expect("encode");
            let original = shards.clone();
            let mut present = vec![true; k + r];
            let mut lost = 0;
            for (index, flag) in present.iter_mut().enumerate() {
                if lost < r && lost_mask >> (index % 16) & 1 == 1 {
                    *flag = false;
                    shards[index].fill(0xee);
                    lost += 1;
                }
            }
            code.reconstruct(&mut shards, &present).expect("at most r lost");
            assert_eq!(shards, original, "{backend:?} {k}+{r} len={len} present={present:?}");
        }
    }
});
