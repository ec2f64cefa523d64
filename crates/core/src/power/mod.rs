//! Power units, their profiles and the energy meter.
//!
//! A power unit is anything that can be put to sleep: a disk (spun down) or a server
//! (standby). Its [`PowerProfile`] is data (TOML), not code: watts per state and the
//! time and energy of each transition, as the papers' tables give them.

mod meter;
mod profile;
mod server_meter;

pub use meter::{EnergyMeter, MeterError, MeterReading, PowerTimeline};
pub use profile::{
    DiskMechanics, PowerProfile, PowerState, ProfileError, Transition, UnitKind, builtin_profile,
    builtin_profile_names, io_server_cluster_watts,
};
pub use server_meter::{ComputeRole, ServerMeter, ServerReading};
