//! Slice kernels: the one operation everything in this crate reduces to,
//! `outputs[j] (^)= sum_i coefs[j][i] * inputs[i]`, over whole slices, with the
//! instruction set chosen at run time.
//!
//! [`dot`] validates the slices (so no kernel can read or write out of bounds), cuts
//! them into cache-sized blocks, runs the chosen SIMD kernel on the part of each block
//! that fills whole vectors and the portable kernel on the rest.

mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

/// Bytes of each shard processed together: the inputs and outputs of a block stay in
/// the L1/L2 caches while each group of at most four outputs passes over them.
pub(crate) const BLOCK: usize = 32 * 1024;

/// The most inputs one kernel call takes; more are folded in with `accumulate`.
const MAX_INPUTS: usize = 256;

/// An implementation of the slice kernels. The SIMD ones need the CPU features in
/// their names; [`Backend::detect`] picks the best available one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// Safe Rust, table lookups: the reference and the fallback.
    Portable,
    /// 16-byte nibble-table shuffles.
    Ssse3,
    /// 32-byte nibble-table shuffles.
    Avx2,
    /// 64-byte nibble-table shuffles (AVX-512F and AVX-512BW).
    Avx512,
    /// 32-byte GF(2) affine transforms (GFNI with AVX2).
    Avx2Gfni,
    /// 64-byte GF(2) affine transforms (GFNI with AVX-512F and AVX-512BW).
    Avx512Gfni,
}

impl Backend {
    /// Every backend, slowest first.
    pub const ALL: [Backend; 6] = [
        Backend::Portable,
        Backend::Ssse3,
        Backend::Avx2,
        Backend::Avx512,
        Backend::Avx2Gfni,
        Backend::Avx512Gfni,
    ];

    /// The name used by `SOMNUS_EC_BACKEND` and in benchmark output.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Portable => "portable",
            Backend::Ssse3 => "ssse3",
            Backend::Avx2 => "avx2",
            Backend::Avx512 => "avx512",
            Backend::Avx2Gfni => "avx2-gfni",
            Backend::Avx512Gfni => "avx512-gfni",
        }
    }

    /// The backend of that name.
    pub fn from_name(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|backend| backend.name() == name)
    }

    /// Whether this CPU can run the backend.
    pub fn is_available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Backend::Portable => true,
                Backend::Ssse3 => has!("ssse3"),
                Backend::Avx2 => has!("avx2"),
                Backend::Avx512 => has!("avx512f") && has!("avx512bw"),
                Backend::Avx2Gfni => has!("avx2") && has!("gfni"),
                Backend::Avx512Gfni => has!("avx512f") && has!("avx512bw") && has!("gfni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Backend::Portable
        }
    }

    /// The backends this CPU can run, slowest first.
    pub fn available() -> Vec<Backend> {
        Backend::ALL.into_iter().filter(|backend| backend.is_available()).collect()
    }

    /// The backend used by default: the one named by the environment variable
    /// `SOMNUS_EC_BACKEND` if it is set to an available backend, else the fastest
    /// available. Decided once per process.
    pub fn detect() -> Backend {
        static DETECTED: OnceLock<Backend> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let forced =
                std::env::var("SOMNUS_EC_BACKEND").ok().and_then(|name| Backend::from_name(&name));
            match forced {
                Some(backend) if backend.is_available() => backend,
                _ => Backend::available().into_iter().next_back().unwrap_or(Backend::Portable),
            }
        })
    }

    #[cfg(target_arch = "x86_64")]
    fn kernel(self) -> Option<x86::Kernel> {
        match self {
            Backend::Portable => None,
            Backend::Ssse3 => Some(x86::dot_ssse3),
            Backend::Avx2 => Some(x86::dot_avx2),
            Backend::Avx512 => Some(x86::dot_avx512),
            Backend::Avx2Gfni => Some(x86::dot_avx2_gfni),
            Backend::Avx512Gfni => Some(x86::dot_avx512_gfni),
        }
    }
}

/// `outputs[j] = sum_i coefs[j * k + i] * inputs[i]` (or `^=` with `accumulate`), where
/// `k = inputs.len()`, for every byte of the slices.
///
/// # Panics
/// If the slices differ in length or `coefs.len() != outputs.len() * inputs.len()`:
/// the callers in this crate check their arguments and return errors first, so a panic
/// here is a bug in this crate, never undefined behaviour.
pub(crate) fn dot(
    backend: Backend,
    coefs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) {
    let k = inputs.len();
    assert_eq!(coefs.len(), outputs.len() * k, "one coefficient per input and output");
    let Some(len) = outputs.first().map(|output| output.len()) else { return };
    assert!(
        inputs.iter().all(|input| input.len() == len)
            && outputs.iter().all(|output| output.len() == len),
        "slices of one length"
    );
    if k > MAX_INPUTS {
        // Fold the inputs in a chunk at a time; coefficient rows are split alike.
        let r = outputs.len();
        let mut first = true;
        for start in (0..k).step_by(MAX_INPUTS) {
            let end = (start + MAX_INPUTS).min(k);
            let chunk_coefs: Vec<u8> =
                (0..r).flat_map(|j| coefs[j * k + start..j * k + end].iter().copied()).collect();
            dot(backend, &chunk_coefs, &inputs[start..end], outputs, accumulate || !first);
            first = false;
        }
        return;
    }
    if k == 0 {
        if !accumulate {
            outputs.iter_mut().for_each(|output| output.fill(0));
        }
        return;
    }
    for block in (0..len).step_by(BLOCK) {
        let end = (block + BLOCK).min(len);
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if let Some(kernel) = backend.kernel().filter(|_| backend.is_available()) {
            done = simd_block(kernel, coefs, inputs, outputs, block..end, accumulate);
        }
        if block + done < end {
            portable::dot(coefs, inputs, outputs, block + done..end, accumulate);
        }
    }
}

/// Runs `kernel` on `range` of the slices, a group of outputs at a time; returns how
/// many bytes from the range's start it computed (the same for every group).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn simd_block(
    kernel: x86::Kernel,
    coefs: &[u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    range: std::ops::Range<usize>,
    accumulate: bool,
) -> usize {
    let k = inputs.len();
    let len = range.len();
    let mut input_pointers = [std::ptr::null::<u8>(); MAX_INPUTS];
    for (pointer, input) in input_pointers.iter_mut().zip(inputs) {
        *pointer = input[range.clone()].as_ptr();
    }
    let mut done = None;
    for (group, group_outputs) in outputs.chunks_mut(x86::MAX_GROUP).enumerate() {
        let mut output_pointers = [std::ptr::null_mut::<u8>(); x86::MAX_GROUP];
        for (pointer, output) in output_pointers.iter_mut().zip(group_outputs.iter_mut()) {
            *pointer = output[range.clone()].as_mut_ptr();
        }
        let first_row = group * x86::MAX_GROUP;
        let group_coefs = &coefs[first_row * k..(first_row + group_outputs.len()) * k];
        // SAFETY: the backend is available on this CPU (checked by the caller); every
        // pointer comes from a sub-slice of exactly `len` bytes; the inputs are shared
        // borrows and the outputs distinct mutable borrows, so no output aliases
        // anything; `group_coefs` has one coefficient per input and output of the group.
        let group_done = unsafe {
            kernel(
                group_coefs,
                &input_pointers[..k],
                &output_pointers[..group_outputs.len()],
                len,
                accumulate,
            )
        };
        // Every group covers the same whole vectors; the caller finishes the tail once
        // for all outputs, so a group that stopped elsewhere would be a kernel bug.
        assert!(done.is_none_or(|done| done == group_done), "kernel groups disagree");
        done = Some(group_done);
    }
    done.unwrap_or(0)
}

/// `dst = c * src`.
///
/// # Panics
/// If the slices differ in length.
pub fn mul_slice(c: u8, src: &[u8], dst: &mut [u8]) {
    Kernels::detected().mul_slice(c, src, dst);
}

/// `dst ^= c * src`.
///
/// # Panics
/// If the slices differ in length.
pub fn mul_slice_xor(c: u8, src: &[u8], dst: &mut [u8]) {
    Kernels::detected().mul_slice_xor(c, src, dst);
}

/// `dst = srcs[0] ^ srcs[1] ^ ...` (zero for no sources).
///
/// # Panics
/// If the slices differ in length.
pub fn xor_slices(srcs: &[&[u8]], dst: &mut [u8]) {
    Kernels::detected().xor_slices(srcs, dst);
}

/// The slice kernels with a chosen backend, for tests, fuzzing and benchmarks that
/// compare backends; the free functions use [`Backend::detect`].
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    backend: Backend,
}

impl Kernels {
    /// The kernels of `backend`, or `None` if this CPU cannot run it.
    pub fn new(backend: Backend) -> Option<Kernels> {
        backend.is_available().then_some(Kernels { backend })
    }

    /// The kernels of [`Backend::detect`].
    pub fn detected() -> Kernels {
        Kernels { backend: Backend::detect() }
    }

    /// The backend.
    pub fn backend(self) -> Backend {
        self.backend
    }

    /// `dst = c * src`. Panics if the slices differ in length.
    pub fn mul_slice(self, c: u8, src: &[u8], dst: &mut [u8]) {
        dot(self.backend, &[c], &[src], &mut [dst], false);
    }

    /// `dst ^= c * src`. Panics if the slices differ in length.
    pub fn mul_slice_xor(self, c: u8, src: &[u8], dst: &mut [u8]) {
        dot(self.backend, &[c], &[src], &mut [dst], true);
    }

    /// `dst = srcs[0] ^ srcs[1] ^ ...`. Panics if the slices differ in length.
    pub fn xor_slices(self, srcs: &[&[u8]], dst: &mut [u8]) {
        // The usual few sources take their coefficients from a constant row of ones.
        const ONES: [u8; MAX_INPUTS] = [1; MAX_INPUTS];
        match ONES.get(..srcs.len()) {
            Some(ones) => dot(self.backend, ones, srcs, &mut [dst], false),
            None => dot(self.backend, &vec![1; srcs.len()], srcs, &mut [dst], false),
        }
    }

    /// `outputs[j] (^)= sum_i coefs[j * k + i] * inputs[i]`, `k = inputs.len()`: a
    /// matrix of constants applied to whole slices, the operation every encode and
    /// decode is made of. Panics if the slices differ in length or the matrix is not
    /// `outputs.len()` by `inputs.len()`.
    pub fn dot(self, coefs: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]], accumulate: bool) {
        dot(self.backend, coefs, inputs, outputs, accumulate);
    }
}
