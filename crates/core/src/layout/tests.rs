// Goal: every layout keeps its promises (Sierra 3.2) and its analysis reproduces Table 1
// from the placement itself. Method: build layouts of Sierra's sizes, analyse them, and
// compare with the formulas; move servers in and out and check the gear groups hold.

use super::analysis::{GearReport, analyze};
use super::*;

fn spec(servers: u32, racks: u32, chunk_groups: u32, scheme: Scheme) -> LayoutSpec {
    LayoutSpec { servers, replicas: 3, racks, chunk_groups, scheme, seed: 7 }
}

fn assert_gears_match_formula(gears: &[GearReport], what: &str) {
    for gear in gears {
        assert!(
            gear.exact(),
            "{what} gear {}: found {} on, proved only {}",
            gear.gear,
            gear.servers_on.len(),
            gear.servers_on_min
        );
        assert_eq!(gear.servers_on.len() as u32, gear.formula, "{what} gear {}", gear.gear);
    }
}

#[test]
fn power_aware_layouts_keep_n_g_over_r_servers_on_and_rebuild_from_n_over_r() {
    for n in [9, 30, 300] {
        // Rotated layouts get more racks than replicas: with exactly r racks every group
        // uses every rack, so a lost replica is rebuilt only in its own rack (next test).
        let rotated_racks = if n == 9 { 9 } else { 6 };
        for (assignment, racks) in
            [(RackAssignment::Aligned, 3), (RackAssignment::Rotated, rotated_racks)]
        {
            let layout =
                Layout::build(&spec(n, racks, 64 * n, Scheme::PowerAware(assignment))).unwrap();
            let analysis = analyze(&layout, 1);
            let what = format!("N={n} {assignment:?}");
            assert_gears_match_formula(&analysis.gears, &what);
            assert_eq!(analysis.rebuild.targets_min, n / 3, "{what}");
            assert_eq!(analysis.rebuild.targets_max, n / 3, "{what}");
            // A lost server's replicas are read from the other two gear groups, except
            // (rotated) their servers in its own rack, which hold none of its groups.
            let same_rack_others =
                if assignment == RackAssignment::Aligned { 0 } else { n / racks - n / racks / 3 };
            // (At N = 300 a server's 192 groups draw 384 sources from 200: not all.)
            if n <= 30 {
                assert!(analysis.rebuild.sources_min >= 2 * n / 3 - same_rack_others, "{what}");
            }
            assert!(analysis.rebuild.sources_max <= 2 * n / 3, "{what}");
            assert_eq!(analysis.load.replicas_min, analysis.load.replicas_max, "{what}: balanced");
            assert_eq!(f64::from(analysis.load.replicas_min), analysis.load.formula, "{what}");
        }
    }
}

#[test]
fn rotated_over_exactly_r_racks_rebuilds_only_inside_the_lost_servers_rack() {
    // Every group then has one replica in each rack, so the rack constraint leaves a
    // lost replica only the servers of its own gear group and rack: N / (r K).
    let layout =
        Layout::build(&spec(30, 3, 64 * 30, Scheme::PowerAware(RackAssignment::Rotated))).unwrap();
    let rebuild = analyze(&layout, 1).rebuild;
    assert!(rebuild.targets_max <= 4, "{rebuild:?}");
    assert!(rebuild.targets_min >= 3, "{rebuild:?}");
}

#[test]
fn the_servers_a_gear_keeps_on_are_whole_gear_groups() {
    let layout =
        Layout::build(&spec(9, 3, 300, Scheme::PowerAware(RackAssignment::Rotated))).unwrap();
    let analysis = analyze(&layout, 1);
    for gear in &analysis.gears {
        let groups: std::collections::BTreeSet<_> =
            gear.servers_on.iter().map(|s| layout.servers()[s.index()].gear_group).collect();
        assert_eq!(groups.len(), gear.gear as usize, "gear {} keeps whole gear groups", gear.gear);
    }
    // Rotated: every rack keeps servers on even in gear 1 (the heat is spread).
    let racks_on: std::collections::BTreeSet<_> =
        analysis.gears[0].servers_on.iter().map(|s| layout.servers()[s.index()].rack).collect();
    assert_eq!(racks_on.len(), 3);
    // Rack-aligned: gear 1 keeps one whole rack on.
    let aligned =
        Layout::build(&spec(9, 3, 300, Scheme::PowerAware(RackAssignment::Aligned))).unwrap();
    let gear_1 = &analyze(&aligned, 1).gears[0];
    let racks_on: std::collections::BTreeSet<_> =
        gear_1.servers_on.iter().map(|s| aligned.servers()[s.index()].rack).collect();
    assert_eq!(racks_on.len(), 1);
}

#[test]
fn naive_grouping_is_power_proportional_but_rebuilds_onto_one_server() {
    for n in [9, 30, 300] {
        let layout = Layout::build(&spec(n, n, 64 * n, Scheme::NaiveGrouping)).unwrap();
        let analysis = analyze(&layout, 1);
        assert_gears_match_formula(&analysis.gears, &format!("naive grouping N={n}"));
        assert_eq!(analysis.rebuild.targets_max, 1);
        assert_eq!(analysis.rebuild.sources_max, 2, "read only from its replica group");
    }
}

#[test]
fn naive_random_needs_all_but_r_minus_g_servers_once_every_subset_holds_a_group() {
    // C large enough that every triple of servers holds some group: then only r - g
    // servers can be off at gear g (Sierra Table 1: N - (r - g)).
    for (n, chunk_groups) in [(9, 2_000), (30, 120_000)] {
        let layout = Layout::build(&spec(n, n, chunk_groups, Scheme::NaiveRandom)).unwrap();
        let analysis = analyze(&layout, 1);
        assert_gears_match_formula(&analysis.gears, &format!("naive random N={n}"));
        assert_eq!(analysis.rebuild.targets_min, n, "any server can take a lost replica");
    }
}

#[test]
fn naive_random_with_few_groups_is_bracketed_not_guessed() {
    // With 64 groups per server not every triple holds a group, so more servers can
    // sleep than the formula says; the analysis proves a range instead.
    let layout = Layout::build(&spec(30, 30, 64 * 30, Scheme::NaiveRandom)).unwrap();
    let gear_1 = &analyze(&layout, 1).gears[0];
    assert!(gear_1.servers_on.len() as u32 <= gear_1.formula);
    assert!(gear_1.servers_on_min <= gear_1.servers_on.len() as u32);
    assert!(gear_1.servers_on_min < gear_1.formula, "the counting bound alone is weaker");
}

#[test]
fn a_gear_checker_rejects_a_set_that_loses_a_groups_last_replica() {
    let layout =
        Layout::build(&spec(9, 3, 90, Scheme::PowerAware(RackAssignment::Aligned))).unwrap();
    let mut on: Vec<ServerId> = layout.present_servers().filter(|s| s.0 % 3 == 0).collect();
    analysis::assert_keeps_gear(&layout, &on, 1);
    on.pop();
    let caught = std::panic::catch_unwind(|| analysis::assert_keeps_gear(&layout, &on, 1));
    assert!(caught.is_err(), "a gear-1 set missing a server of its gear group must fail");
}

#[test]
fn layouts_are_deterministic_in_their_seed() {
    let a = Layout::build(&spec(30, 3, 500, Scheme::PowerAware(RackAssignment::Rotated))).unwrap();
    let b = Layout::build(&spec(30, 3, 500, Scheme::PowerAware(RackAssignment::Rotated))).unwrap();
    let c = Layout::build(&LayoutSpec {
        seed: 8,
        ..spec(30, 3, 500, Scheme::PowerAware(RackAssignment::Rotated))
    })
    .unwrap();
    assert!(a.groups().eq(b.groups()));
    assert!(!a.groups().eq(c.groups()));
}

#[test]
fn removing_a_server_rebuilds_its_replicas_inside_its_gear_group_in_parallel() {
    let mut layout =
        Layout::build(&spec(30, 6, 1_920, Scheme::PowerAware(RackAssignment::Rotated))).unwrap();
    let lost = ServerId(4);
    let gear_group = layout.servers()[lost.index()].gear_group;
    let held = layout.load(lost);
    let moves = layout.remove_server(lost).unwrap();
    assert_eq!(moves.len() as u32, held);
    let targets: std::collections::BTreeSet<_> = moves.iter().map(|m| m.target).collect();
    assert_eq!(targets.len(), 9, "spread over the 9 other servers of its gear group");
    for m in &moves {
        assert_eq!(layout.servers()[m.target.index()].gear_group, gear_group);
        assert_eq!(layout.replicas(m.group)[m.replica], m.target);
    }
    assert_eq!(layout.remove_server(lost), Err(LayoutError::UnknownServer(lost)));
}

#[test]
fn an_added_server_joins_a_gear_group_and_takes_its_share() {
    let mut layout =
        Layout::build(&spec(9, 3, 900, Scheme::PowerAware(RackAssignment::Aligned))).unwrap();
    let (added, moves) = layout.add_server(RackId(1)).unwrap();
    assert_eq!(
        layout.servers()[added.index()].gear_group,
        Some(GearGroupId(1)),
        "rack 1's gear group"
    );
    assert!(moves.iter().all(|m| m.target == added && m.replica == 1));
    // Gear group 1 held 900 replicas on 3 servers; on 4 each holds 225.
    assert_eq!(layout.load(added), 225);
    let loads: Vec<u32> = layout
        .present_servers()
        .filter(|s| layout.servers()[s.index()].gear_group == Some(GearGroupId(1)))
        .map(|s| layout.load(s))
        .collect();
    assert_eq!(loads, vec![225; 4]);
    assert_eq!(layout.add_server(RackId(3)), Err(LayoutError::UnknownRack(RackId(3))));
}

#[test]
fn naive_layouts_do_not_move_servers() {
    let mut layout = Layout::build(&spec(9, 3, 90, Scheme::NaiveRandom)).unwrap();
    assert!(matches!(layout.add_server(RackId(0)), Err(LayoutError::NotPowerAware(_))));
    assert!(matches!(layout.remove_server(ServerId(0)), Err(LayoutError::NotPowerAware(_))));
}

#[test]
fn impossible_layouts_are_refused_with_the_reason() {
    let aligned = Scheme::PowerAware(RackAssignment::Aligned);
    let cases = [
        (LayoutSpec { replicas: 0, ..spec(9, 3, 9, aligned) }, "replicas must be"),
        (spec(2, 2, 9, aligned), "servers must be"),
        (spec(9, 2, 9, aligned), "2 racks cannot hold 3 replicas"),
        (spec(9, 3, 0, aligned), "chunk groups must be"),
        (spec(10, 5, 9, Scheme::NaiveGrouping), "multiple of the replica count"),
        (spec(12, 4, 9, aligned), "rack count (4)"),
    ];
    for (spec, message) in cases {
        let error = Layout::build(&spec).unwrap_err().to_string();
        assert!(error.contains(message), "{error:?} should say {message:?}");
    }
}
