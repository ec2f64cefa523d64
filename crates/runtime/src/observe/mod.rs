//! What each process tells of itself: its report (`status`), Prometheus metrics
//! (`metrics`), and the HTTP endpoint serving both and the operator's commands
//! (`http`).

pub mod http;
pub mod metrics;
pub mod status;
