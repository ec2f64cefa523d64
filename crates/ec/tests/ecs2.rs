#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goal: the ECS2 active-group layout of Fig. 3 survives every double node failure,
//! with the available and auxiliary blocks of Table III, and the extra parities make the
//! difference the paper's section 3.2 and appendix claim.
//! Method: `Ecs2Layout::survival` decides by the rank of the surviving blocks' rows over the
//! data, for every pair of failed nodes; the extra parities are then computed on real
//! bytes and the lost data rebuilt through the auxiliary block and the code.

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64;
use somnus_ec::Code;
use somnus_ec::ecs2::{Block, Ecs2Layout, subsets};

fn names(blocks: &[Block]) -> Vec<String> {
    blocks.iter().map(Block::to_string).collect()
}

fn list(text: &str) -> Vec<String> {
    text.split(", ").map(str::to_owned).collect()
}

/// Table III of ECS2 (paper 000), row by row: the two failed nodes, the available
/// blocks and the auxiliary block with how it is rebuilt.
///
/// One row is corrected: the paper prints "D1, D2, D3, D4, D5, P1" for DN2 and DN6,
/// but D2 is on the failed DN2 and P2 on the surviving DN4 (as the rows for DN2 with
/// DN3 and DN2 with DN4 show); the surviving blocks are D1, D3, D4, D5, P1, P2.
/// (first failed node, second failed node, available blocks, auxiliary block and its terms)
type Row = (usize, usize, &'static str, Option<(&'static str, &'static str)>);

const TABLE_III: &[Row] = &[
    (2, 3, "D1, D4, D5, D6, P2, P3", None),
    (2, 4, "D1, D3, D5, D6, P1, P3", None),
    (2, 6, "D1, D3, D4, D5, P1, P2", None),
    (3, 4, "D1, D2, D5, D6, P3, Q1", Some(("D3", "Q1, D1, D2, D5, D6"))),
    (3, 6, "D1, D2, D4, D5, P2, Q1", Some(("P1", "Q1, D4"))),
    (4, 6, "D1, D2, D3, D5, P1, Q1", Some(("D4", "Q1, P1"))),
];

#[test]
fn fig3_layout_reproduces_table_iii() {
    let code = Code::new(6, 3).unwrap();
    let layout = Ecs2Layout::ecs2_fig3();
    assert_eq!(names(layout.blocks_on(1)), ["D2", "Q1"]);
    assert_eq!(names(layout.blocks_on(2)), ["D3", "P1"]);
    assert_eq!(names(layout.blocks_on(3)), ["D4", "P2"]);
    assert_eq!(names(layout.blocks_on(5)), ["D6", "P3"]);
    assert_eq!(names(layout.extra_terms(0)), ["P1", "D4"], "Q1 = P1 ^ D[P2] = P1 ^ D4");

    for &(first, second, available, auxiliary) in TABLE_III {
        let survival = layout.survival(&code, &[first - 1, second - 1]).unwrap();
        assert!(survival.survivable, "DN{first} and DN{second}");
        assert_eq!(names(&survival.available), list(available), "DN{first} and DN{second}");
        let expected: Vec<(String, Vec<String>)> =
            auxiliary.map(|(block, from)| (block.to_owned(), list(from))).into_iter().collect();
        let got: Vec<(String, Vec<String>)> = survival
            .auxiliary
            .iter()
            .map(|(block, from)| (block.to_string(), names(from)))
            .collect();
        assert_eq!(got, expected, "DN{first} and DN{second}");
        println!("DN{first} DN{second}: {available} | auxiliary {auxiliary:?}");
    }

    // "DN1 or DN5: there are still 9 surviving blocks, so can tolerate one node
    // failure" more: every pair with DN1 or DN5 is survivable too.
    for first in [0, 4] {
        assert_eq!(layout.survival(&code, &[first]).unwrap().available.len(), 9);
        for second in 0..6 {
            assert!(
                layout.survival(&code, &[first, second]).unwrap().survivable,
                "DN{} DN{}",
                first + 1,
                second + 1
            );
        }
    }
    assert_eq!(layout.fault_tolerance(&code).unwrap(), 2);
    assert!(!layout.survival(&code, &[1, 2, 3]).unwrap().survivable, "three failures lose data");
}

/// Section 3.2: r parities buffered alone give floor(r / 2)-fault tolerance; the extra
/// XOR parities (Q1 for r = 3; Q1, Q2 for r = 2) give floor(r / 2) + 1 = 2, when every
/// buffered block has a node of its own (k >= r + dr, as the paper requires).
#[test]
fn extra_parities_raise_the_fault_tolerance_of_the_active_group() {
    for k in 4..=8 {
        let code3 = Code::new(k, 3).unwrap();
        let hosts3: Vec<usize> = (0..3).map(|j| k - 3 + j).collect();
        assert_eq!(
            Ecs2Layout::ecs2(k, 3, &hosts3, &[]).unwrap().fault_tolerance(&code3).unwrap(),
            1,
            "k={k}, r=3 without Q1"
        );
        for extra in 0..k {
            let layout = Ecs2Layout::ecs2(k, 3, &hosts3, &[extra]).unwrap();
            let alone = !hosts3.contains(&extra);
            assert_eq!(
                layout.fault_tolerance(&code3).unwrap(),
                if alone { 2 } else { 1 },
                "k={k}, r=3, Q1 on DN{}",
                extra + 1
            );
        }

        let code2 = Code::new(k, 2).unwrap();
        let hosts2 = [k - 2, k - 1];
        assert_eq!(
            Ecs2Layout::ecs2(k, 2, &hosts2, &[]).unwrap().fault_tolerance(&code2).unwrap(),
            1,
            "k={k}, r=2 without Q"
        );
        let layout = Ecs2Layout::ecs2(k, 2, &hosts2, &[0, 1]).unwrap();
        assert_eq!(layout.fault_tolerance(&code2).unwrap(), 2, "k={k}, r=2 with Q1, Q2");
    }
}

/// The appendix's matrix construction: a (k + r + dr, k) code (dr = 1 for odd r, 2 for
/// even) whose r + dr parities are buffered on distinct data nodes makes the group
/// floor((r + dr) / 2) = floor(r / 2) + 1 tolerant (formulas 19 to 22).
#[test]
fn appendix_matrix_construction_gives_the_same_tolerance() {
    for (k, r, dr) in [(6, 3, 1), (6, 2, 2), (8, 4, 2), (6, 5, 1)] {
        let code = Code::new(k, r + dr).unwrap();
        let hosts: Vec<usize> = (0..r + dr).collect();
        let layout = Ecs2Layout::ecs2(k, r + dr, &hosts, &[]).unwrap();
        assert_eq!(
            layout.fault_tolerance(&code).unwrap(),
            r / 2 + 1,
            "({}, {k}) with dr = {dr}",
            k + r + dr
        );
    }
}

/// The table on real bytes: for every pair of failed nodes of Fig. 3, the auxiliary
/// block rebuilt by XOR and then the code's reconstruction give back all six data
/// blocks.
#[test]
fn fig3_double_failures_are_recovered_on_real_bytes() {
    let code = Code::new(6, 3).unwrap();
    let layout = Ecs2Layout::ecs2_fig3();
    let mut rng = Pcg64::seed_from_u64(6);
    let mut shards: Vec<Vec<u8>> = (0..9)
        .map(|_| {
            let mut shard = vec![0u8; 4099];
            rng.fill_bytes(&mut shard);
            shard
        })
        .collect();
    code.encode_shards(&mut shards).unwrap();
    let mut q1 = vec![0u8; 4099];
    {
        let data: Vec<&[u8]> = shards[..6].iter().map(Vec::as_slice).collect();
        let parity: Vec<&[u8]> = shards[6..].iter().map(Vec::as_slice).collect();
        layout.encode_extras(&data, &parity, &mut [&mut q1]).unwrap();
    }
    let expected_q1: Vec<u8> = shards[6].iter().zip(&shards[3]).map(|(p1, d4)| p1 ^ d4).collect();
    assert_eq!(q1, expected_q1);

    for failed in subsets(6, 2) {
        let survival = layout.survival(&code, &failed).unwrap();
        let mut known: Vec<Option<Vec<u8>>> = vec![None; 9];
        for block in &survival.available {
            match *block {
                Block::Data(i) => known[i] = Some(shards[i].clone()),
                Block::Parity(j) => known[6 + j] = Some(shards[6 + j].clone()),
                Block::Extra(_) => {}
            }
        }
        for (lost, from) in &survival.auxiliary {
            let mut rebuilt = vec![0u8; 4099];
            for term in from {
                let bytes = match *term {
                    Block::Data(i) => known[i].as_ref().unwrap(),
                    Block::Parity(j) => known[6 + j].as_ref().unwrap(),
                    Block::Extra(_) => &q1,
                };
                rebuilt.iter_mut().zip(bytes).for_each(|(r, b)| *r ^= b);
            }
            let slot = match *lost {
                Block::Data(i) => i,
                Block::Parity(j) => 6 + j,
                Block::Extra(_) => unreachable!(),
            };
            assert_eq!(&rebuilt, &shards[slot], "{lost} for {failed:?}");
            known[slot] = Some(rebuilt);
        }
        code.reconstruct_vecs(&mut known).unwrap();
        for i in 0..6 {
            assert_eq!(known[i].as_ref(), Some(&shards[i]), "D{} after losing {failed:?}", i + 1);
        }
    }
}

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    let layout = Ecs2Layout::ecs2_fig3();
    assert_eq!(
        layout.survival(&Code::new(2, 1).unwrap(), &[2, 3]),
        Err(somnus_ec::Error::LayoutCode { layout_k: 6, layout_r: 3, code_k: 2, code_r: 1 })
    );
    // A short extra parity buffer: an error naming it, and no buffer written.
    let layout = Ecs2Layout::ecs2(4, 2, &[0, 1], &[2, 3]).unwrap();
    let data = [[1u8; 8]; 4];
    let parity = [[2u8; 8]; 2];
    let (mut q0, mut q1) = ([0xaau8; 8], [0xaau8; 7]);
    let data_refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
    let parity_refs: Vec<&[u8]> = parity.iter().map(|p| &p[..]).collect();
    let error =
        layout.encode_extras(&data_refs, &parity_refs, &mut [&mut q0, &mut q1]).unwrap_err();
    assert_eq!(error.to_string(), "extra parity 1 is 7 bytes long, not 8");
    assert_eq!((q0, q1), ([0xaa; 8], [0xaa; 7]));
    let short_parity: Vec<&[u8]> = vec![&parity[0][..7], &parity[1][..]];
    let error =
        layout.encode_extras(&data_refs, &short_parity, &mut [&mut q0, &mut q1[..]]).unwrap_err();
    assert_eq!(error.to_string(), "parity shard 0 is 7 bytes long, not 8");
}

#[test]
fn bad_layouts_are_refused() {
    assert!(Ecs2Layout::ecs2(6, 3, &[2, 3], &[1]).is_err(), "one host per parity");
    assert!(Ecs2Layout::ecs2(6, 3, &[2, 3, 9], &[1]).is_err(), "hosts are data nodes");
    assert!(Ecs2Layout::ecs2(6, 4, &[0, 1, 2, 3], &[5]).is_err(), "no XOR construction for r = 4");
}
