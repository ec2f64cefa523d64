//! Where chunk groups live: Sierra's power-aware grouping (3.2) and the two naive
//! layouts it is measured against.
//!
//! - **Power-aware grouping**: every server is in exactly one of r gear groups and
//!   every chunk group has exactly one replica in each, so any g gear groups hold g
//!   replicas of everything and the other r - g can sleep. Replica `i` of a chunk
//!   group is always in gear group `i`. Racks are the fault domains: *rack-aligned*
//!   puts whole racks in one gear group (so whole racks can sleep), *rotated* spreads
//!   every gear group over every rack (so the heat of the servers left on is spread);
//!   Fig. 5. Within a gear group replicas are balanced: every server holds the same
//!   count, within one.
//! - **Naive random**: each chunk group on r servers drawn at random (in distinct
//!   racks).
//! - **Naive grouping**: servers in fixed replica groups of r; a chunk group lives on
//!   one whole replica group.
//!
//! Servers are numbered 0..N and server `i` is in rack `i mod K`, so racks are
//! balanced. A layout is built from a seed, deterministically. [`analysis`] measures
//! what a layout allows: the servers each gear must keep on, rebuild parallelism and
//! load distribution (Sierra Table 1), computed from the placement itself.

pub mod analysis;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use somnus_types::{ChunkGroupId, GearGroupId, RackId, ServerId};

/// The most servers a layout holds: Sierra expects 100-1000 servers per cluster, and
/// the analysis keeps a set of servers per server.
pub const SERVERS_MAX: u32 = 4096;
/// The most replicas of a chunk group.
pub const REPLICAS_MAX: u32 = 8;
/// The most chunk groups a layout holds (enough for naive random to cover every
/// triple of 300 servers, Sierra Table 1's limit case).
pub const CHUNK_GROUPS_MAX: u32 = 1 << 27;

/// How a layout places replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    PowerAware(RackAssignment),
    NaiveRandom,
    NaiveGrouping,
}

impl Scheme {
    /// The name the CLI and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::PowerAware(RackAssignment::Aligned) => "power-aware (rack-aligned)",
            Scheme::PowerAware(RackAssignment::Rotated) => "power-aware (rotated)",
            Scheme::NaiveRandom => "naive random",
            Scheme::NaiveGrouping => "naive grouping",
        }
    }
}

/// How gear groups map onto racks (Sierra Fig. 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RackAssignment {
    /// Every server of a rack is in the same gear group: whole racks sleep.
    Aligned,
    /// Every rack holds servers of every gear group: the servers left on, and their
    /// heat, are spread over all racks.
    Rotated,
}

/// What to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayoutSpec {
    pub servers: u32,
    pub replicas: u32,
    pub racks: u32,
    pub chunk_groups: u32,
    pub scheme: Scheme,
    pub seed: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error("replicas must be between 1 and {REPLICAS_MAX}, not {0}")]
    Replicas(u32),
    #[error(
        "servers must be between the replica count ({replicas}) and {SERVERS_MAX}, not {servers}"
    )]
    Servers { servers: u32, replicas: u32 },
    #[error(
        "{racks} racks cannot hold {replicas} replicas in distinct racks: racks must be between {replicas} and the server count ({servers})"
    )]
    Racks { racks: u32, replicas: u32, servers: u32 },
    #[error("chunk groups must be between 1 and {CHUNK_GROUPS_MAX}, not {0}")]
    ChunkGroups(u32),
    #[error(
        "{scheme} needs the server count ({servers}) to be a multiple of the replica count ({replicas}), so that its groups are equal"
    )]
    UnevenGroups { scheme: &'static str, servers: u32, replicas: u32 },
    #[error(
        "rack-aligned gear groups need the rack count ({racks}) to be a multiple of the replica count ({replicas})"
    )]
    UnevenRacks { racks: u32, replicas: u32 },
    #[error(
        "these servers and racks give gear groups of unequal sizes {sizes:?}: choose racks so that every rack holds the same number of servers of each gear group"
    )]
    UnevenGearGroups { sizes: Vec<u32> },
    #[error(
        "no server of {gear_group} can take a replica of {group} in a rack of its own: the gear group is too small or its racks are all taken"
    )]
    NoTarget { group: ChunkGroupId, gear_group: GearGroupId },
    #[error("{0} is not a server of this layout, or was removed")]
    UnknownServer(ServerId),
    #[error("{0} is not a rack of this layout")]
    UnknownRack(RackId),
    #[error(
        "{0} does not keep gear groups, so servers are added and removed only with power-aware grouping"
    )]
    NotPowerAware(&'static str),
}

/// One server's place in the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerSlot {
    pub rack: RackId,
    /// The gear group, or for naive grouping the server's position in its replica
    /// group; naive random has none.
    pub gear_group: Option<GearGroupId>,
    pub removed: bool,
}

/// One replica moved to another server (by a rebuild or a rebalance).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub group: ChunkGroupId,
    /// The replica's index in its group (its gear group, under power-aware grouping).
    pub replica: usize,
    pub source: ServerId,
    pub target: ServerId,
}

/// A placement of chunk groups on servers.
#[derive(Clone, Debug)]
pub struct Layout {
    scheme: Scheme,
    replicas: usize,
    racks: u32,
    servers: Vec<ServerSlot>,
    /// Replica `i` of group `c` is on `placement[c * replicas + i]`.
    placement: Vec<ServerId>,
    /// Replicas each server holds.
    load: Vec<u32>,
}

impl Layout {
    /// Builds the layout `spec` asks for; the same spec always gives the same layout.
    pub fn build(spec: &LayoutSpec) -> Result<Layout, LayoutError> {
        validate(spec)?;
        let servers = server_slots(spec);
        if matches!(spec.scheme, Scheme::PowerAware(_)) {
            let mut sizes = vec![0u32; spec.replicas as usize];
            for slot in &servers {
                sizes[slot.gear_group.map_or(0, GearGroupId::index)] += 1;
            }
            if sizes.iter().any(|&size| size != sizes[0]) {
                return Err(LayoutError::UnevenGearGroups { sizes });
            }
        }
        let mut layout = Layout {
            scheme: spec.scheme,
            replicas: spec.replicas as usize,
            racks: spec.racks,
            servers,
            placement: Vec::with_capacity(spec.chunk_groups as usize * spec.replicas as usize),
            load: vec![0; spec.servers as usize],
        };
        let mut rng = Pcg64::seed_from_u64(spec.seed);
        for index in 0..spec.chunk_groups {
            let group = ChunkGroupId(index);
            match spec.scheme {
                Scheme::PowerAware(_) => layout.place_power_aware(group, &mut rng)?,
                Scheme::NaiveRandom => layout.place_random(&mut rng),
                Scheme::NaiveGrouping => layout.place_grouped(&mut rng),
            }
        }
        if let Scheme::PowerAware(_) = spec.scheme {
            for gear in 0..spec.replicas {
                layout.level(GearGroupId(gear));
            }
        }
        layout.check();
        Ok(layout)
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn replica_count(&self) -> usize {
        self.replicas
    }

    pub fn rack_count(&self) -> u32 {
        self.racks
    }

    pub fn chunk_group_count(&self) -> usize {
        self.placement.len() / self.replicas
    }

    /// Every server ever in the layout, removed ones included (ids stay stable).
    pub fn servers(&self) -> &[ServerSlot] {
        &self.servers
    }

    /// The servers not removed.
    pub fn present_servers(&self) -> impl Iterator<Item = ServerId> + '_ {
        self.servers
            .iter()
            .enumerate()
            .filter(|(_, slot)| !slot.removed)
            .map(|(index, _)| ServerId(index as u32))
    }

    /// The replicas of `group`, replica `i` first in gear group `i` (power-aware).
    pub fn replicas(&self, group: ChunkGroupId) -> &[ServerId] {
        let start = group.index() * self.replicas;
        &self.placement[start..start + self.replicas]
    }

    /// Every group's replicas, in group order.
    pub fn groups(&self) -> impl Iterator<Item = &[ServerId]> {
        self.placement.chunks_exact(self.replicas)
    }

    /// Replicas held by `server`.
    pub fn load(&self, server: ServerId) -> u32 {
        self.load[server.index()]
    }

    /// Adds a server in `rack` (power-aware only): it joins the rack's gear group
    /// (rack-aligned) or the gear group that rack has fewest of (rotated), then takes
    /// replicas from the most loaded servers of its gear group until the group is
    /// balanced again (within one). Every replica stays in its gear group. Returns
    /// the moves.
    pub fn add_server(&mut self, rack: RackId) -> Result<(ServerId, Vec<Move>), LayoutError> {
        let Scheme::PowerAware(assignment) = self.scheme else {
            return Err(LayoutError::NotPowerAware(self.scheme.name()));
        };
        if rack.0 >= self.racks {
            return Err(LayoutError::UnknownRack(rack));
        }
        let gear_group = match assignment {
            RackAssignment::Aligned => GearGroupId(rack.0 % self.replicas as u32),
            RackAssignment::Rotated => self.sparsest_gear_group(rack),
        };
        let server = ServerId(self.servers.len() as u32);
        assert!(server.0 < SERVERS_MAX, "a layout holds at most {SERVERS_MAX} servers");
        self.servers.push(ServerSlot { rack, gear_group: Some(gear_group), removed: false });
        self.load.push(0);
        let moves = self.level(gear_group);
        self.check();
        Ok((server, moves))
    }

    /// Removes `server` (power-aware only; a permanent loss or a decommission): each of
    /// its replicas moves to the least loaded server of the same gear group in a rack
    /// the group does not use yet. Returns the moves, which a rebuild carries out in
    /// parallel across the gear group.
    pub fn remove_server(&mut self, server: ServerId) -> Result<Vec<Move>, LayoutError> {
        if !matches!(self.scheme, Scheme::PowerAware(_)) {
            return Err(LayoutError::NotPowerAware(self.scheme.name()));
        }
        let slot = self.servers.get(server.index()).copied();
        if slot.is_none_or(|slot| slot.removed) {
            return Err(LayoutError::UnknownServer(server));
        }
        // Plan every move before changing anything, so an error leaves the layout whole.
        let mut planned_load = self.load.clone();
        let mut moves = Vec::new();
        for (index, replicas) in self.placement.chunks_exact(self.replicas).enumerate() {
            let Some(replica) = replicas.iter().position(|&s| s == server) else { continue };
            let group = ChunkGroupId(index as u32);
            let gear_group = GearGroupId(replica as u32);
            let target = self
                .rebuild_targets(replicas, replica)
                .min_by_key(|target| (planned_load[target.index()], target.0))
                .ok_or(LayoutError::NoTarget { group, gear_group })?;
            planned_load[target.index()] += 1;
            moves.push(Move { group, replica, source: server, target });
        }
        self.servers[server.index()].removed = true;
        for m in &moves {
            self.apply(m);
        }
        assert_eq!(self.load[server.index()], 0, "a removed server keeps no replica");
        self.check();
        Ok(moves)
    }

    /// The servers that could take replica `replica` of a group on `replicas` if its
    /// server were lost: under power-aware grouping the other present servers of its
    /// gear group, under naive random any present server not holding the group; both
    /// in a rack the group's other replicas do not use. Naive grouping has none (only
    /// a replacement server can take the lost one's place).
    pub fn rebuild_targets<'a>(
        &'a self,
        replicas: &'a [ServerId],
        replica: usize,
    ) -> impl Iterator<Item = ServerId> + 'a {
        let lost = replicas[replica];
        let gear_group = self.servers[lost.index()].gear_group;
        self.present_servers().filter(move |&candidate| {
            let slot = self.servers[candidate.index()];
            let allowed = match self.scheme {
                Scheme::PowerAware(_) => slot.gear_group == gear_group,
                Scheme::NaiveRandom => true,
                Scheme::NaiveGrouping => false,
            };
            allowed
                && !replicas.contains(&candidate)
                && replicas
                    .iter()
                    .enumerate()
                    .all(|(i, other)| i == replica || self.servers[other.index()].rack != slot.rack)
        })
    }

    fn place_power_aware(
        &mut self,
        group: ChunkGroupId,
        rng: &mut Pcg64,
    ) -> Result<(), LayoutError> {
        let mut chosen: Vec<ServerId> = Vec::with_capacity(self.replicas);
        for gear in 0..self.replicas {
            let gear_group = GearGroupId(gear as u32);
            let target = self
                .least_loaded(rng, |slot| {
                    slot.gear_group == Some(gear_group)
                        && chosen.iter().all(|other| self.servers[other.index()].rack != slot.rack)
                })
                .ok_or(LayoutError::NoTarget { group, gear_group })?;
            chosen.push(target);
        }
        self.push_group(&chosen);
        Ok(())
    }

    fn place_random(&mut self, rng: &mut Pcg64) {
        let count = self.servers.len() as u32;
        let mut chosen: Vec<ServerId> = Vec::with_capacity(self.replicas);
        // Racks >= replicas (validated), so a draw succeeds with probability at least
        // 1/count: the bound is never reached in practice, and asserted.
        let mut draws_left = 1_000 * count as usize;
        while chosen.len() < self.replicas {
            assert!(draws_left > 0, "naive random placement found no rack-distinct servers");
            draws_left -= 1;
            let candidate = ServerId(rng.random_range(0..count));
            let rack = self.servers[candidate.index()].rack;
            if chosen.iter().all(|other| self.servers[other.index()].rack != rack) {
                chosen.push(candidate);
            }
        }
        self.push_group(&chosen);
    }

    fn place_grouped(&mut self, rng: &mut Pcg64) {
        // Replica group `j` is servers j*r .. j*r + r; all its servers hold the same
        // load, so the least loaded group is found by its first server.
        let groups = self.servers.len() / self.replicas;
        let start = rng.random_range(0..groups);
        let first = (0..groups)
            .map(|k| (start + k) % groups)
            .min_by_key(|&j| self.load[j * self.replicas])
            .unwrap_or(0);
        let chosen: Vec<ServerId> =
            (0..self.replicas).map(|i| ServerId((first * self.replicas + i) as u32)).collect();
        self.push_group(&chosen);
    }

    /// The least loaded present server satisfying `eligible`; ties go to the first
    /// found from a random starting point, so equal servers share the load at random.
    fn least_loaded(
        &self,
        rng: &mut Pcg64,
        eligible: impl Fn(&ServerSlot) -> bool,
    ) -> Option<ServerId> {
        let count = self.servers.len();
        let start = rng.random_range(0..count);
        (0..count)
            .map(|k| (start + k) % count)
            .filter(|&i| !self.servers[i].removed && eligible(&self.servers[i]))
            .min_by_key(|&i| self.load[i])
            .map(|i| ServerId(i as u32))
    }

    fn push_group(&mut self, chosen: &[ServerId]) {
        assert_eq!(chosen.len(), self.replicas, "a group has one server per replica");
        for server in chosen {
            self.load[server.index()] += 1;
        }
        self.placement.extend_from_slice(chosen);
    }

    fn apply(&mut self, m: &Move) {
        let slot = &mut self.placement[m.group.index() * self.replicas + m.replica];
        assert_eq!(*slot, m.source, "a move starts where the replica is");
        *slot = m.target;
        self.load[m.source.index()] -= 1;
        self.load[m.target.index()] += 1;
    }

    fn sparsest_gear_group(&self, rack: RackId) -> GearGroupId {
        let mut in_rack = vec![0u32; self.replicas];
        let mut overall = vec![0u32; self.replicas];
        for slot in self.servers.iter().filter(|slot| !slot.removed) {
            if let Some(gear_group) = slot.gear_group {
                overall[gear_group.index()] += 1;
                if slot.rack == rack {
                    in_rack[gear_group.index()] += 1;
                }
            }
        }
        let gear = (0..self.replicas).min_by_key(|&g| (in_rack[g], overall[g], g)).unwrap_or(0);
        GearGroupId(gear as u32)
    }

    /// Moves replicas inside `gear_group` from its most loaded servers to its least
    /// loaded ones until their loads differ by at most one, or no move keeps a group's
    /// racks distinct. Every replica stays in its gear group.
    fn level(&mut self, gear_group: GearGroupId) -> Vec<Move> {
        let replica = gear_group.index();
        let members: Vec<ServerId> = self
            .present_servers()
            .filter(|s| self.servers[s.index()].gear_group == Some(gear_group))
            .collect();
        let mut groups_on: Vec<Vec<ChunkGroupId>> = vec![Vec::new(); self.servers.len()];
        for (index, replicas) in self.placement.chunks_exact(self.replicas).enumerate() {
            groups_on[replicas[replica].index()].push(ChunkGroupId(index as u32));
        }
        let mut moves = Vec::new();
        // Each move lowers the spread of loads or ends the loop: bounded by the replicas.
        for _ in 0..=self.chunk_group_count() {
            let Some(m) = self.best_leveling_move(&members, &groups_on, replica) else { break };
            let position = groups_on[m.source.index()].iter().position(|&g| g == m.group);
            if let Some(position) = position {
                groups_on[m.source.index()].swap_remove(position);
            }
            groups_on[m.target.index()].push(m.group);
            self.apply(&m);
            moves.push(m);
        }
        moves
    }

    /// A move from the most loaded member to the least loaded one that a group allows
    /// (its other replicas' racks), trying lighter sources and heavier targets in turn;
    /// `None` once loads differ by at most one or nothing can move.
    fn best_leveling_move(
        &self,
        members: &[ServerId],
        groups_on: &[Vec<ChunkGroupId>],
        replica: usize,
    ) -> Option<Move> {
        let mut by_load = members.to_vec();
        by_load.sort_by_key(|s| (self.load[s.index()], s.0));
        for &source in by_load.iter().rev() {
            for &target in &by_load {
                if self.load[source.index()] <= self.load[target.index()] + 1 {
                    break;
                }
                let rack = self.servers[target.index()].rack;
                let movable = groups_on[source.index()].iter().rev().find(|group| {
                    self.replicas(**group)
                        .iter()
                        .enumerate()
                        .all(|(i, other)| i == replica || self.servers[other.index()].rack != rack)
                });
                if let Some(&group) = movable {
                    return Some(Move { group, replica, source, target });
                }
            }
        }
        None
    }

    /// The layout's invariants: one replica per gear group (power-aware), distinct
    /// servers and racks in every group, loads that add up.
    fn check(&self) {
        let mut load = vec![0u32; self.servers.len()];
        for replicas in self.placement.chunks_exact(self.replicas) {
            for (i, server) in replicas.iter().enumerate() {
                let slot = self.servers[server.index()];
                assert!(!slot.removed, "no replica on a removed server {server}");
                if let Scheme::PowerAware(_) = self.scheme {
                    assert_eq!(
                        slot.gear_group,
                        Some(GearGroupId(i as u32)),
                        "replica {i} out of its gear group"
                    );
                }
                for other in &replicas[..i] {
                    assert_ne!(
                        self.servers[other.index()].rack,
                        slot.rack,
                        "two replicas in one rack"
                    );
                }
                load[server.index()] += 1;
            }
        }
        assert_eq!(load, self.load, "server loads out of step with the placement");
    }
}

fn validate(spec: &LayoutSpec) -> Result<(), LayoutError> {
    let LayoutSpec { servers, replicas, racks, chunk_groups, scheme, .. } = *spec;
    if replicas == 0 || replicas > REPLICAS_MAX {
        return Err(LayoutError::Replicas(replicas));
    }
    if servers < replicas || servers > SERVERS_MAX {
        return Err(LayoutError::Servers { servers, replicas });
    }
    if racks < replicas || racks > servers {
        return Err(LayoutError::Racks { racks, replicas, servers });
    }
    if chunk_groups == 0 || chunk_groups > CHUNK_GROUPS_MAX {
        return Err(LayoutError::ChunkGroups(chunk_groups));
    }
    let grouped = matches!(scheme, Scheme::PowerAware(_) | Scheme::NaiveGrouping);
    if grouped && servers % replicas != 0 {
        return Err(LayoutError::UnevenGroups { scheme: scheme.name(), servers, replicas });
    }
    if scheme == Scheme::PowerAware(RackAssignment::Aligned) && racks % replicas != 0 {
        return Err(LayoutError::UnevenRacks { racks, replicas });
    }
    Ok(())
}

/// Server `i` in rack `i mod K`; its gear group by the scheme.
fn server_slots(spec: &LayoutSpec) -> Vec<ServerSlot> {
    let r = spec.replicas;
    let k = spec.racks;
    (0..spec.servers)
        .map(|i| {
            let rack = i % k;
            let gear_group = match spec.scheme {
                Scheme::PowerAware(RackAssignment::Aligned) => Some(rack % r),
                // The j-th server of rack k is in gear group (j + k) mod r.
                Scheme::PowerAware(RackAssignment::Rotated) => Some((i / k + rack) % r),
                Scheme::NaiveGrouping => Some(i % r),
                Scheme::NaiveRandom => None,
            };
            ServerSlot {
                rack: RackId(rack),
                gear_group: gear_group.map(GearGroupId),
                removed: false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
