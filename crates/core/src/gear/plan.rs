//! From N_load to the servers that stay on (Sierra 3.5): full gearing powers whole gear
//! groups; fractional gearing also powers part of one more. Which gear groups sleep
//! rotates across days.

/// How finely the cluster gears.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gearing {
    /// Whole gear groups on or off, at least N_load servers on.
    Full,
    /// The lowest whole groups on, and enough servers of the next for N_load in all.
    Fractional,
}

impl Gearing {
    pub fn name(self) -> &'static str {
        match self {
            Gearing::Full => "full",
            Gearing::Fractional => "fractional",
        }
    }
}

/// What stays on: the first `full_groups` gear groups of the day's order, and
/// `partial` servers of the next one.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct PowerPlan {
    pub full_groups: u32,
    pub partial: u32,
}

impl PowerPlan {
    /// Every server on.
    pub fn all(sizes: &[u32]) -> PowerPlan {
        PowerPlan { full_groups: sizes.len() as u32, partial: 0 }
    }

    /// Servers on, given the gear groups' sizes in the day's order.
    pub fn servers_on(&self, sizes: &[u32]) -> u32 {
        let full: u32 = sizes.iter().take(self.full_groups as usize).sum();
        full + self.partial
    }

    /// The gear as Sierra writes it, g = r N_on / N with groups of equal size: whole
    /// groups plus the share of the partial one.
    pub fn gear(&self, sizes: &[u32]) -> f64 {
        let next = sizes.get(self.full_groups as usize).copied().unwrap_or(0);
        let share = if next == 0 { 0.0 } else { f64::from(self.partial) / f64::from(next) };
        f64::from(self.full_groups) + share
    }
}

/// The plan that keeps at least `needed` servers on (all of them at most), with at
/// least `gear_min` whole groups. `sizes` are the gear groups' sizes in the day's order.
pub fn plan_for(needed: u32, sizes: &[u32], gearing: Gearing, gear_min: u32) -> PowerPlan {
    let groups = sizes.len() as u32;
    let gear_min = gear_min.min(groups);
    let mut plan = PowerPlan { full_groups: gear_min, partial: 0 };
    let mut on = plan.servers_on(sizes);
    while on < needed && plan.full_groups < groups {
        let next = sizes[plan.full_groups as usize];
        let missing = needed - on;
        if gearing == Gearing::Fractional && missing < next {
            plan.partial = missing;
            return plan;
        }
        plan.full_groups += 1;
        on += next;
    }
    plan
}

/// The gear groups in the order they stay on, on rotation `rotation`: group
/// `rotation mod r` first (it never sleeps that day), then the next ones. Rotating
/// once a day spreads power cycles and sleep over every group.
pub fn group_order(rotation: u64, groups: u32) -> Vec<u32> {
    let groups = groups.max(1);
    (0..groups).map(|i| ((rotation + u64::from(i)) % u64::from(groups)) as u32).collect()
}

/// The sizes of `servers` split into `groups` gear groups as evenly as the layout
/// does it (the first groups one larger when N is not a multiple of r).
pub fn even_sizes(servers: u32, groups: u32) -> Vec<u32> {
    let groups = groups.max(1);
    (0..groups).map(|g| servers / groups + u32::from(g < servers % groups)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_fractional_gearing_keep_n_load_on() {
        // Goal: Sierra 3.5. N = 30, r = 3 (groups of 10). N_load = 13 is gear 1.3:
        // fractional keeps 13 on (one group and 3 of the next), full keeps 20.
        let sizes = even_sizes(30, 3);
        let fractional = plan_for(13, &sizes, Gearing::Fractional, 1);
        assert_eq!(fractional, PowerPlan { full_groups: 1, partial: 3 });
        assert_eq!(fractional.servers_on(&sizes), 13);
        assert!((fractional.gear(&sizes) - 1.3).abs() < 1e-12);
        let full = plan_for(13, &sizes, Gearing::Full, 1);
        assert_eq!((full.full_groups, full.servers_on(&sizes)), (2, 20));
        // g_min: never below it, however low the load.
        assert_eq!(plan_for(0, &sizes, Gearing::Fractional, 2).servers_on(&sizes), 20);
        assert_eq!(plan_for(0, &sizes, Gearing::Full, 1).servers_on(&sizes), 10);
        // Above N: every server, no more.
        assert_eq!(plan_for(31, &sizes, Gearing::Fractional, 1), PowerPlan::all(&sizes));
        assert_eq!(plan_for(30, &sizes, Gearing::Full, 1), PowerPlan::all(&sizes));
        // A whole number of groups is full, not a partial group of its size.
        assert_eq!(
            plan_for(20, &sizes, Gearing::Fractional, 1),
            PowerPlan { full_groups: 2, partial: 0 }
        );
    }

    #[test]
    fn uneven_groups_and_rotation() {
        // Goal: N = 31 in 3 groups is 11, 10, 10; each day a different group leads.
        assert_eq!(even_sizes(31, 3), vec![11, 10, 10]);
        assert_eq!(group_order(0, 3), vec![0, 1, 2]);
        assert_eq!(group_order(4, 3), vec![1, 2, 0]);
        let firsts: Vec<u32> = (0..6).map(|day| group_order(day, 3)[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2, 0, 1, 2]);
    }
}
