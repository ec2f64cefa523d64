//! What a layout allows, measured on its placement (Sierra Table 1): for each gear g
//! the fewest servers that keep g replicas of every chunk group, the rebuild
//! parallelism when a server is lost, and how evenly replicas are spread.
//!
//! The fewest servers on is a hitting-set problem, hard in general, so it is bracketed:
//! a valid set of servers found by greedy passes in several orders (the layout's own
//! gear groups first, then racks, load and seeded random orders) from above, and two
//! proofs from below: a counting bound (the servers off hold at most r - g replicas of
//! each of the C groups, so the lightest servers must fit in (r - g) C) and a coverage
//! bound (when every set of r - g + 1 servers holds some whole group's replicas, no
//! more than r - g servers can be off). When the two meet, the count is exact.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_pcg::Pcg64;
use somnus_types::ServerId;

use super::{Layout, Scheme};

/// Random orders the greedy search tries besides the structured ones.
const RANDOM_ORDERS: usize = 4;
/// The largest bitset of server subsets the coverage bound builds (16 MiB).
const COVERAGE_BITS_MAX: u64 = 1 << 27;

/// One gear's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct GearReport {
    pub gear: u32,
    /// The smallest set found that keeps `gear` replicas of every group, sorted.
    pub servers_on: Vec<ServerId>,
    /// No set smaller than this can (proved by the bounds).
    pub servers_on_min: u32,
    /// Sierra Table 1's formula for this scheme.
    pub formula: u32,
}

impl GearReport {
    /// Whether `servers_on` is proved minimal.
    pub fn exact(&self) -> bool {
        self.servers_on.len() as u32 == self.servers_on_min
    }
}

/// Rebuild parallelism: for each server, as if lost, how many servers could receive
/// its replicas (counting the replacement that takes its place) and how many hold
/// the other replicas to read from. The worst server decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RebuildReport {
    pub targets_min: u32,
    pub targets_max: u32,
    pub sources_min: u32,
    pub sources_max: u32,
    /// Sierra Table 1's rebuild parallelism.
    pub formula: u32,
}

/// Replicas per server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadReport {
    pub replicas_min: u32,
    pub replicas_max: u32,
    pub replicas_mean: f64,
    /// Sierra Table 1: r C / N (equal to C / (N / r)).
    pub formula: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LayoutAnalysis {
    pub scheme: Scheme,
    pub servers: u32,
    pub replicas: u32,
    pub racks: u32,
    pub chunk_groups: u32,
    pub gears: Vec<GearReport>,
    pub rebuild: RebuildReport,
    pub load: LoadReport,
}

/// Measures `layout`; `seed` drives the random orders of the greedy search.
pub fn analyze(layout: &Layout, seed: u64) -> LayoutAnalysis {
    let present: Vec<ServerId> = layout.present_servers().collect();
    let replicas = layout.replica_count() as u32;
    let gears = (1..=replicas).map(|gear| analyze_gear(layout, &present, gear, seed)).collect();
    LayoutAnalysis {
        scheme: layout.scheme(),
        servers: present.len() as u32,
        replicas,
        racks: layout.rack_count(),
        chunk_groups: layout.chunk_group_count() as u32,
        gears,
        rebuild: rebuild(layout, &present),
        load: load(layout, &present),
    }
}

fn analyze_gear(layout: &Layout, present: &[ServerId], gear: u32, seed: u64) -> GearReport {
    let n = present.len() as u32;
    let r = layout.replica_count() as u32;
    // Any r - g servers can be off together, so a counting bound that low is exact and
    // the (costlier) coverage bound is not needed.
    let counting = counting_bound(layout, present, gear);
    let off_max = if counting <= r - gear {
        counting
    } else {
        counting.min(coverage_bound(layout, present, gear))
    };
    let mut best_off: Vec<ServerId> = Vec::new();
    for order in candidate_orders(layout, present, seed) {
        let off = greedy_off(layout, &order, gear, off_max);
        if off.len() > best_off.len() {
            best_off = off;
        }
        if best_off.len() as u32 == off_max {
            break;
        }
    }
    let mut servers_on: Vec<ServerId> =
        present.iter().copied().filter(|s| !best_off.contains(s)).collect();
    servers_on.sort();
    assert_keeps_gear(layout, &servers_on, gear);
    let formula = match layout.scheme() {
        Scheme::NaiveRandom => n - (r - gear),
        Scheme::PowerAware(_) | Scheme::NaiveGrouping => (n * gear).div_ceil(r),
    };
    GearReport { gear, servers_on, servers_on_min: n - off_max, formula }
}

/// The most servers that can be off by counting: each group keeps at most r - g of
/// its replicas off, so the servers off hold at most (r - g) C replicas, and the
/// lightest servers are the most that fit.
fn counting_bound(layout: &Layout, present: &[ServerId], gear: u32) -> u32 {
    let r = layout.replica_count() as u64;
    let budget = (r - u64::from(gear)) * layout.chunk_group_count() as u64;
    let mut loads: Vec<u64> = present.iter().map(|&s| u64::from(layout.load(s))).collect();
    loads.sort_unstable();
    let mut sum = 0;
    let mut count = 0;
    for load in loads {
        sum += load;
        if sum > budget {
            break;
        }
        count += 1;
    }
    count
}

/// r - g when every set of r - g + 1 present servers holds replicas of one group (so
/// any larger off set contains a whole group's g-th replica); otherwise no bound.
fn coverage_bound(layout: &Layout, present: &[ServerId], gear: u32) -> u32 {
    let r = layout.replica_count();
    let t = r - gear as usize + 1;
    let n = present.len();
    let no_bound = n as u32;
    let Some(subsets) = binomial(n as u64, t as u64).filter(|&b| b <= COVERAGE_BITS_MAX) else {
        return no_bound;
    };
    let mut dense = vec![u32::MAX; layout.servers().len()];
    for (i, s) in present.iter().enumerate() {
        dense[s.index()] = i as u32;
    }
    // rank_terms[c * t + i] = binomial(c, i + 1): the combinatorial number system ranks
    // a sorted subset c_0 < c_1 < ... as the sum of binomial(c_i, i + 1).
    let rank_terms: Vec<u64> = (0..n as u64)
        .flat_map(|c| (0..t as u64).map(move |i| binomial(c, i + 1).unwrap_or(u64::MAX)))
        .collect();
    let mut covered = vec![0u64; subsets.div_ceil(64) as usize];
    // The t-subsets of a group's r replicas, as lists of positions in sorted order.
    let picks: Vec<Vec<usize>> = (0u32..1 << r)
        .filter(|m| m.count_ones() as usize == t)
        .map(|m| (0..r).filter(|bit| m & (1 << bit) != 0).collect())
        .collect();
    let mut members: Vec<usize> = Vec::with_capacity(r);
    for replicas in layout.groups() {
        members.clear();
        members.extend(replicas.iter().map(|s| dense[s.index()] as usize));
        members.sort_unstable();
        for pick in &picks {
            let rank: u64 =
                pick.iter().enumerate().map(|(i, &at)| rank_terms[members[at] * t + i]).sum();
            covered[(rank / 64) as usize] |= 1 << (rank % 64);
        }
    }
    let set: u64 = covered.iter().map(|w| u64::from(w.count_ones())).sum();
    if set == subsets { (t - 1) as u32 } else { no_bound }
}

/// Chunk groups a random layout needs so that every set of t = r - g + 1 servers
/// likely holds some group, which Table 1's N - (r - g) assumes (coupon collector:
/// T ln 2T draws of T subsets, each group drawing C(r, t) of them).
pub fn groups_for_full_coverage(servers: u32, replicas: u32, gear: u32) -> u64 {
    let t = u64::from(replicas - gear + 1);
    let subsets = binomial(u64::from(servers), t).unwrap_or(u64::MAX) as f64;
    let per_group = binomial(u64::from(replicas), t).unwrap_or(1).max(1) as f64;
    (subsets * (2.0 * subsets).ln() / per_group).ceil() as u64
}

fn binomial(n: u64, k: u64) -> Option<u64> {
    if k > n {
        return Some(0);
    }
    let k = k.min(n - k);
    let mut value: u128 = 1;
    for i in 0..k {
        value = value * u128::from(n - i) / u128::from(i + 1);
        if value > u128::from(u64::MAX) {
            return None;
        }
    }
    u64::try_from(value).ok()
}

/// The orders the greedy search tries: servers of the highest gear groups (or replica
/// group positions) first, racks from the last, lightest first, then random orders.
fn candidate_orders(layout: &Layout, present: &[ServerId], seed: u64) -> Vec<Vec<ServerId>> {
    let slot = |s: &ServerId| layout.servers()[s.index()];
    let mut orders = Vec::new();
    if present.iter().all(|s| slot(s).gear_group.is_some()) {
        let mut by_gear = present.to_vec();
        by_gear.sort_by_key(|s| (std::cmp::Reverse(slot(s).gear_group), s.0));
        orders.push(by_gear);
    }
    let mut by_rack = present.to_vec();
    by_rack.sort_by_key(|s| (std::cmp::Reverse(slot(s).rack), s.0));
    orders.push(by_rack);
    let mut by_load = present.to_vec();
    by_load.sort_by_key(|s| (layout.load(*s), s.0));
    orders.push(by_load);
    let mut rng = Pcg64::seed_from_u64(seed);
    for _ in 0..RANDOM_ORDERS {
        let mut random = present.to_vec();
        random.shuffle(&mut rng);
        orders.push(random);
    }
    orders
}

/// Turns servers off in `order` while every group keeps `gear` replicas on, up to
/// `off_max` (no more can be off). Any r - g servers can always be off together, so
/// those are taken without a check; each later candidate costs one pass over the
/// placement.
fn greedy_off(layout: &Layout, order: &[ServerId], gear: u32, off_max: u32) -> Vec<ServerId> {
    let r = layout.replica_count();
    let off_per_group = r - gear as usize;
    let mut off: Vec<ServerId> = Vec::new();
    let mut is_off = vec![false; layout.servers().len()];
    let mut off_in_group: Option<Vec<u8>> = None;
    for &candidate in order {
        if off.len() as u32 >= off_max {
            break;
        }
        if off.len() >= off_per_group {
            let counts = off_in_group.get_or_insert_with(|| {
                layout
                    .groups()
                    .map(|replicas| replicas.iter().filter(|s| is_off[s.index()]).count() as u8)
                    .collect()
            });
            let fits = layout.groups().zip(counts.iter()).all(|(replicas, &count)| {
                !replicas.contains(&candidate) || usize::from(count) < off_per_group
            });
            if !fits {
                continue;
            }
            for (replicas, count) in layout.groups().zip(counts.iter_mut()) {
                if replicas.contains(&candidate) {
                    *count += 1;
                }
            }
        }
        is_off[candidate.index()] = true;
        off.push(candidate);
    }
    off
}

/// The checker of the search: every group keeps at least `gear` replicas in `on`.
pub(super) fn assert_keeps_gear(layout: &Layout, on: &[ServerId], gear: u32) {
    let mut is_on = vec![false; layout.servers().len()];
    for s in on {
        is_on[s.index()] = true;
    }
    for (index, replicas) in layout.groups().enumerate() {
        let kept = replicas.iter().filter(|s| is_on[s.index()]).count();
        assert!(kept >= gear as usize, "gear {gear}: group {index} keeps only {kept} replicas on");
    }
}

fn rebuild(layout: &Layout, present: &[ServerId]) -> RebuildReport {
    let n = layout.servers().len();
    let words = n.div_ceil(64);
    let mut sources = vec![0u64; n * words];
    let mut targets = vec![0u64; n * words];
    let mut source_count = vec![0u32; n];
    let mut target_count = vec![0u32; n];
    let others = present.len() as u32 - 1;
    let set = |bits: &mut [u64], count: &mut u32, server: ServerId| {
        let (word, bit) = (server.index() / 64, server.index() % 64);
        if bits[word] & (1 << bit) == 0 {
            bits[word] |= 1 << bit;
            *count += 1;
        }
    };
    for replicas in layout.groups() {
        for (i, lost) in replicas.iter().enumerate() {
            let row = lost.index() * words..(lost.index() + 1) * words;
            // Once every other server is a source (or a target), no group adds one.
            if source_count[lost.index()] < others {
                for other in replicas.iter().filter(|s| *s != lost) {
                    set(&mut sources[row.clone()], &mut source_count[lost.index()], *other);
                }
            }
            if target_count[lost.index()] < others {
                for target in layout.rebuild_targets(replicas, i) {
                    set(&mut targets[row.clone()], &mut target_count[lost.index()], target);
                }
            }
        }
    }
    let holding: Vec<ServerId> = present.iter().copied().filter(|s| layout.load(*s) > 0).collect();
    // The lost server's replacement always counts as one target.
    let targets_of = |s: &ServerId| target_count[s.index()] + 1;
    let sources_of = |s: &ServerId| source_count[s.index()];
    let r = layout.replica_count() as u32;
    let count = present.len() as u32;
    RebuildReport {
        targets_min: holding.iter().map(targets_of).min().unwrap_or(0),
        targets_max: holding.iter().map(targets_of).max().unwrap_or(0),
        sources_min: holding.iter().map(sources_of).min().unwrap_or(0),
        sources_max: holding.iter().map(sources_of).max().unwrap_or(0),
        formula: match layout.scheme() {
            Scheme::NaiveRandom => count,
            Scheme::NaiveGrouping => 1,
            Scheme::PowerAware(_) => count / r,
        },
    }
}

fn load(layout: &Layout, present: &[ServerId]) -> LoadReport {
    let loads: Vec<u32> = present.iter().map(|s| layout.load(*s)).collect();
    let total: u64 = loads.iter().map(|&l| u64::from(l)).sum();
    let r = layout.replica_count() as f64;
    let c = layout.chunk_group_count() as f64;
    LoadReport {
        replicas_min: loads.iter().copied().min().unwrap_or(0),
        replicas_max: loads.iter().copied().max().unwrap_or(0),
        replicas_mean: total as f64 / present.len() as f64,
        formula: r * c / present.len() as f64,
    }
}
