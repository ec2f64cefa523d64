// Goal: Sierra Table 1's naive random row, N - (r - g) servers on at gear g, measured on
// a 300-server placement. Method: place enough chunk groups at random that every triple
// of servers holds one (about T ln 2T for T = C(300, 3) triples), then let the analysis
// find and prove the fewest servers on. The smaller sizes and the other layouts are in
// the unit tests of `somnus_core::layout`.

use somnus_core::layout::analysis::analyze;
use somnus_core::layout::{Layout, LayoutSpec, Scheme};

#[test]
fn naive_random_on_300_servers_keeps_all_but_r_minus_g_on() {
    let spec = LayoutSpec {
        servers: 300,
        replicas: 3,
        racks: 300,
        chunk_groups: 71_300_000,
        scheme: Scheme::NaiveRandom,
        seed: 1,
    };
    let layout = Layout::build(&spec).expect("a valid spec");
    let analysis = analyze(&layout, 1);
    for gear in &analysis.gears {
        assert!(
            gear.exact(),
            "gear {} not proved: {} found, {} proved",
            gear.gear,
            gear.servers_on.len(),
            gear.servers_on_min
        );
        assert_eq!(gear.servers_on.len() as u32, 300 - (3 - gear.gear), "gear {}", gear.gear);
    }
    assert_eq!(analysis.rebuild.targets_min, 300);
}
