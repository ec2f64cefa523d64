//! When to shift gear (Sierra 3.5, 4.1-4.2): the load metric, the hour-of-day
//! predictor, full and fractional gearing with g_min and a daily rotation, and the
//! scheduler that turns the primaries' per-second loads into plans, with the reactive
//! hybrid Sierra names and an operator's override; and the io-server controller that
//! sizes the max-perf set to the compute load (001).

pub mod io_server;
pub mod load;
pub mod plan;
pub mod predictor;
pub mod scheduler;

pub use io_server::{IoServerConfig, IoServerController};
pub use load::{Capability, Load, LoadMeter, LoadSample, servers_needed};
pub use plan::{Gearing, PowerPlan, even_sizes, group_order, plan_for};
pub use predictor::HourOfDay;
pub use scheduler::{
    Decision, GearMode, GearScheduler, LeadTimes, Policy, Reason, SchedulerConfig,
    SchedulerCounters,
};

#[cfg(test)]
mod tests;
