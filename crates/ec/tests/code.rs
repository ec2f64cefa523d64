#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goal: the code is MDS, its first parity is the XOR of the data, it rebuilds any r
//! lost shards byte for byte, its parity updates equal re-encoding, and its encoding
//! and decoding machinery agrees with reed-solomon-erasure's.
//! Method: exhaustive over every erasure pattern of the shapes the issue names, with
//! every backend this CPU has; proptest for updates; reed-solomon-erasure as an oracle,
//! run on its own parity matrix through `Code::with_parity_matrix`.

use proptest::prelude::*;
use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;
use somnus_ec::ecs2::subsets;
use somnus_ec::{Backend, Code, Error, gf};

const SHAPES: &[(usize, usize)] = &[(4, 2), (6, 3), (8, 4), (10, 4), (12, 3)];

fn random_shards(seed: u64, count: usize, len: usize) -> Vec<Vec<u8>> {
    let mut rng = Pcg64::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let mut shard = vec![0u8; len];
            rng.fill_bytes(&mut shard);
            shard
        })
        .collect()
}

fn encoded(code: &Code, seed: u64, len: usize) -> Vec<Vec<u8>> {
    let mut shards = random_shards(seed, code.total_shards(), len);
    code.encode_shards(&mut shards).unwrap();
    shards
}

#[test]
fn parity_row_zero_is_all_ones_and_p1_is_the_xor_of_the_data() {
    for &(k, r) in SHAPES.iter().chain(&[(1, 1), (200, 56), (255, 1), (128, 128)]) {
        let code = Code::new(k, r).unwrap();
        for i in 0..k {
            assert_eq!(code.parity_coefficient(0, i).unwrap(), 1, "{k}+{r}, column {i}");
        }
        let shards = encoded(&code, 5, 333);
        let xor: Vec<u8> =
            (0..333).map(|b| shards[..k].iter().fold(0, |acc, s| acc ^ s[b])).collect();
        assert_eq!(shards[k], xor, "{k}+{r}");
        // Every coefficient is non-zero, as in any Cauchy matrix.
        for j in 0..r {
            for i in 0..k {
                assert_ne!(code.parity_coefficient(j, i).unwrap(), 0);
            }
        }
    }
}

/// Every pattern of up to r lost shards, for every shape and backend, rebuilds the
/// original bytes; r + 1 lost shards are refused without touching anything.
#[test]
fn every_erasure_pattern_of_up_to_r_shards_reconstructs_the_original() {
    // A length that is no multiple of any vector and spans two 32 KiB blocks.
    const LEN: usize = 32 * 1024 + 1001;
    let mut patterns = 0;
    for &(k, r) in SHAPES {
        let reference = Code::new(k, r).unwrap();
        let original = encoded(&reference, (k * 100 + r) as u64, LEN);
        assert!(reference.verify(&original).unwrap());
        for backend in Backend::available() {
            let code = reference.with_backend(backend).unwrap();
            let n = k + r;
            for lost in 1..=r {
                for missing in subsets(n, lost) {
                    let mut shards = original.clone();
                    let mut present = vec![true; n];
                    for &m in &missing {
                        present[m] = false;
                        shards[m].fill(0xa5);
                    }
                    code.reconstruct(&mut shards, &present).unwrap();
                    assert!(shards == original, "{k}+{r} {backend:?} lost {missing:?}");
                    patterns += 1;
                }
            }
            // One shard too many.
            let mut shards = original.clone();
            let mut present = vec![true; n];
            present[..=r].iter_mut().for_each(|p| *p = false);
            assert_eq!(
                code.reconstruct(&mut shards, &present),
                Err(Error::TooFewShards { present: k - 1, needed: k })
            );
            assert!(shards == original, "a refused call changes nothing");
        }
    }
    eprintln!("{patterns} erasure patterns reconstructed");
}

#[test]
fn reconstruct_data_leaves_lost_parity_alone_and_plans_are_cached() {
    let code = Code::new(6, 3).unwrap();
    let original = encoded(&code, 9, 4096);
    let mut shards = original.clone();
    let present = [false, true, false, true, true, true, true, false, true];
    shards[0].fill(0);
    shards[2].fill(0);
    shards[7].fill(0);
    code.reconstruct_data(&mut shards, &present).unwrap();
    assert_eq!(shards[0], original[0]);
    assert_eq!(shards[2], original[2]);
    assert!(shards[7].iter().all(|&b| b == 0), "a lost parity is not rebuilt by reconstruct_data");
    assert_eq!(code.cached_plans(), 1);
    code.reconstruct_data(&mut shards, &present).unwrap();
    assert_eq!(code.cached_plans(), 1, "the same pattern reuses its plan");

    let mut vecs: Vec<Option<Vec<u8>>> = original.iter().cloned().map(Some).collect();
    vecs[1] = None;
    vecs[8] = None;
    code.reconstruct_vecs(&mut vecs).unwrap();
    assert_eq!(vecs.into_iter().map(Option::unwrap).collect::<Vec<_>>(), original);
}

#[test]
fn verify_finds_a_single_changed_byte_anywhere() {
    let code = Code::new(10, 4).unwrap();
    let original = encoded(&code, 11, 70_000);
    assert!(code.verify(&original).unwrap());
    for (shard, byte) in [(0, 0), (9, 69_999), (10, 35_000), (13, 65_536)] {
        let mut shards = original.clone();
        shards[shard][byte] ^= 0x10;
        assert!(!code.verify(&shards).unwrap(), "shard {shard} byte {byte}");
    }
}

#[test]
fn bad_arguments_are_named_errors() {
    assert_eq!(Code::new(0, 2).unwrap_err(), Error::InvalidShape { k: 0, r: 2 });
    assert_eq!(Code::new(4, 0).unwrap_err(), Error::InvalidShape { k: 4, r: 0 });
    assert_eq!(Code::new(250, 7).unwrap_err(), Error::InvalidShape { k: 250, r: 7 });
    assert!(Code::new(250, 6).is_ok());
    let code = Code::new(4, 2).unwrap();
    let data = random_shards(1, 4, 100);
    let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = [vec![0u8; 100], vec![0u8; 99]];
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    assert_eq!(
        code.encode(&data_refs, &mut parity_refs),
        Err(Error::ShardLength { what: "parity shard", index: 1, expected: 100, got: 99 })
    );
    assert_eq!(
        code.encode(&data_refs[..3], &mut parity_refs),
        Err(Error::ShardCount { what: "data shards", expected: 4, got: 3 })
    );
    let message = code.encode(&data_refs, &mut parity_refs).unwrap_err().to_string();
    assert!(message.contains("parity shard 1 is 99 bytes long"), "{message}");
    assert_eq!(code.parity_coefficient(2, 0), Err(Error::ParityIndex { index: 2, r: 2 }));
    assert_eq!(code.update_parity(4, &[], &[], &mut []), Err(Error::DataIndex { index: 4, k: 4 }));
    let mut shards = encoded(&code, 3, 10);
    assert!(matches!(code.reconstruct(&mut shards, &[true; 5]), Err(Error::ShardCount { .. })));
}

/// With a matrix that is not MDS, reconstruction looks past shards that add nothing:
/// losing D0 of (D0, D1, P1 = D1, P2 = D0 ^ D1) is decodable from D1 and P2.
#[test]
fn a_non_mds_matrix_decodes_whatever_the_present_shards_determine() {
    let code = Code::with_parity_matrix(2, 2, &[0, 1, 1, 1]).unwrap();
    let original = encoded(&code, 8, 100);
    assert_eq!(original[2], original[1]);
    let mut shards = original.clone();
    shards[0].fill(0);
    code.reconstruct(&mut shards, &[false, true, true, true]).unwrap();
    assert_eq!(shards, original);
    // D1 and P1 alone are the same row twice: not decodable.
    let mut shards = original.clone();
    assert_eq!(code.reconstruct(&mut shards, &[false, true, true, false]), Err(Error::Singular));
    assert_eq!(shards, original, "a refused call changes nothing");
}

#[test]
fn empty_and_one_byte_shards_work() {
    for len in [0, 1] {
        let code = Code::new(6, 3).unwrap();
        let original = encoded(&code, 2, len);
        assert!(code.verify(&original).unwrap());
        let mut shards = original.clone();
        let mut present = vec![true; 9];
        present[0] = false;
        present[4] = false;
        present[8] = false;
        code.reconstruct(&mut shards, &present).unwrap();
        assert_eq!(shards, original);
    }
}

/// reed-solomon-erasure's parity matrix, read off by encoding unit vectors: parity
/// byte j of "data shard i = [1], the others [0]" is its coefficient g[j][i].
fn rse_parity_matrix(k: usize, r: usize) -> Vec<u8> {
    let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(k, r).unwrap();
    let mut matrix = vec![0u8; r * k];
    for i in 0..k {
        let mut shards = vec![vec![0u8; 1]; k + r];
        shards[i][0] = 1;
        rse.encode(&mut shards).unwrap();
        for j in 0..r {
            matrix[j * k + i] = shards[k + j][0];
        }
    }
    matrix
}

#[test]
fn field_agrees_with_reed_solomon_erasure() {
    use reed_solomon_erasure::galois_8;
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(gf::mul(a, b), galois_8::mul(a, b));
            if b != 0 {
                assert_eq!(gf::div(a, b), Some(galois_8::div(a, b)));
            }
        }
    }
}

/// With reed-solomon-erasure's own matrix, this crate's encode gives its parity bytes
/// and this crate's reconstruct gives what its reconstruct gives, for every pattern.
#[test]
fn encode_and_reconstruct_agree_with_reed_solomon_erasure() {
    const LEN: usize = 5_000;
    for &(k, r) in SHAPES {
        let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(k, r).unwrap();
        let code = Code::with_parity_matrix(k, r, &rse_parity_matrix(k, r)).unwrap();
        let mut theirs = random_shards(k as u64, k + r, LEN);
        let mut ours = theirs.clone();
        rse.encode(&mut theirs).unwrap();
        code.encode_shards(&mut ours).unwrap();
        assert_eq!(ours, theirs, "{k}+{r} encode");
        for lost in 1..=r {
            for missing in subsets(k + r, lost) {
                let mut their_shards: Vec<Option<Vec<u8>>> =
                    theirs.iter().cloned().map(Some).collect();
                let mut our_shards: Vec<Option<Vec<u8>>> = their_shards.clone();
                for &m in &missing {
                    their_shards[m] = None;
                    our_shards[m] = None;
                }
                rse.reconstruct(&mut their_shards).unwrap();
                code.reconstruct_vecs(&mut our_shards).unwrap();
                assert_eq!(our_shards, their_shards, "{k}+{r} lost {missing:?}");
            }
        }
    }
}

/// Our own code decoded by reed-solomon-erasure's decoder is impossible (the matrices
/// differ), so the oracle check for it is the original data: both libraries, each on
/// its own code, return the same bytes for the same loss.
#[test]
fn both_libraries_recover_the_same_data_from_the_same_loss() {
    let (k, r) = (10, 4);
    let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(k, r).unwrap();
    let code = Code::new(k, r).unwrap();
    let data = random_shards(77, k, 9_999);
    let mut theirs = data.clone();
    theirs.extend(vec![vec![0u8; 9_999]; r]);
    let mut ours = theirs.clone();
    rse.encode(&mut theirs).unwrap();
    code.encode_shards(&mut ours).unwrap();
    for missing in subsets(k + r, r) {
        let mut their_shards: Vec<Option<Vec<u8>>> = theirs.iter().cloned().map(Some).collect();
        let mut our_shards: Vec<Option<Vec<u8>>> = ours.iter().cloned().map(Some).collect();
        for &m in &missing {
            their_shards[m] = None;
            our_shards[m] = None;
        }
        rse.reconstruct_data(&mut their_shards).unwrap();
        code.reconstruct_vecs(&mut our_shards).unwrap();
        for i in 0..k {
            assert_eq!(our_shards[i].as_ref(), their_shards[i].as_ref());
            assert_eq!(our_shards[i].as_ref(), Some(&data[i]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// update_parity and apply_delta equal a full re-encode, and buffered deltas of the
    /// same shard compose by XOR (ECS2 pushes them to a waking parity node at once).
    #[test]
    fn update_parity_equals_reencoding(
        shape in 0..SHAPES.len(),
        len in 0usize..3000,
        seed: u64,
        index_seed: usize,
    ) {
        let (k, r) = SHAPES[shape];
        let code = Code::new(k, r).unwrap();
        let i = index_seed % k;
        let mut shards = encoded(&code, seed, len);
        let new_versions = random_shards(seed ^ 0xdead, 2, len);

        // One update in place.
        let old = shards[i].clone();
        let mut parity: Vec<Vec<u8>> = shards[k..].to_vec();
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.update_parity(i, &old, &new_versions[0], &mut parity_refs).unwrap();
        shards[i] = new_versions[0].clone();
        code.encode_shards(&mut shards).unwrap();
        prop_assert_eq!(&parity[..], &shards[k..]);

        // Two more updates buffered as one delta, applied once.
        let delta: Vec<u8> = shards[i].iter().zip(&new_versions[1]).map(|(a, b)| a ^ b).collect();
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        code.apply_delta(i, &delta, &mut parity_refs).unwrap();
        shards[i] = new_versions[1].clone();
        code.encode_shards(&mut shards).unwrap();
        prop_assert_eq!(&parity[..], &shards[k..]);
        prop_assert!(code.verify(&shards).unwrap());
    }
}
