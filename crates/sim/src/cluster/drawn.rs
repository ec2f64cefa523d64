//! A cluster drawn from its seed (TigerBeetle's VOPR is the model): its size, racks,
//! replication, chunk size, objects, clients, churn and fault rates, so that a sweep
//! of seeds meets clusters of many shapes, each replayable from its seed alone.

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use super::{ClusterSpec, FaultRates};

/// Mixed into the seed for the draw, so the cluster's shape and its run use
/// different streams.
const DRAW_SALT: u64 = 0x5eed_c1a5_7e12_d4a3;

/// Draws tried before the base shape is kept (a draw the layout refuses is drawn
/// again).
const DRAWS_MAX: u32 = 32;

impl ClusterSpec {
    /// `base` with its shape and fault rates drawn from `seed`: 3 to 5 racks, r of 2
    /// or 3, 1 to 3 servers per rack and replica, 2 to 6 chunk groups per server,
    /// chunks of 256 KiB to 1 MiB, 4 to 12 objects of 1 to 3 chunks, 1 to 6 clients,
    /// churn up to 10 %, and [`FaultRates::drawn`]. Its fault kinds, time, checks and
    /// loggers are `base`'s.
    pub fn drawn(base: &ClusterSpec, seed: u64) -> ClusterSpec {
        let mut rng = Pcg64::seed_from_u64(seed ^ DRAW_SALT);
        for _ in 0..DRAWS_MAX {
            let racks = rng.random_range(3..=5);
            let replicas = rng.random_range(2..=3u32);
            let chunk_bytes = 256 << (10 + rng.random_range(0..=2u32));
            let spec = ClusterSpec {
                racks,
                replicas,
                servers: racks * replicas * rng.random_range(1..=3),
                groups_per_server: rng.random_range(2..=6),
                chunk_bytes,
                objects: rng.random_range(4..=12),
                object_bytes: chunk_bytes * rng.random_range(1..=3),
                clients: rng.random_range(1..=6),
                churn: f64::from(rng.random_range(0..=10u32)) / 100.0,
                rates: FaultRates::drawn(&mut rng),
                ..base.clone()
            };
            if spec.validate(seed).is_ok() {
                return spec;
            }
        }
        base.clone()
    }

    /// The shape and the fault rates in a few words, for a seed's line.
    pub fn shape(&self) -> String {
        format!(
            "{} servers in {} racks, r = {}, {} groups each, {} KiB chunks, {} objects of {} KiB, {} clients, churn {:.2}; faults {}: {}",
            self.servers,
            self.racks,
            self.replicas,
            self.groups_per_server,
            self.chunk_bytes >> 10,
            self.objects,
            self.object_bytes >> 10,
            self.clients,
            self.churn,
            self.faults,
            self.rates.describe()
        )
    }
}
