//! A process's clock as the core sees it: nanoseconds since the process started,
//! times the cluster's time scale. The core only ever sees that number; a timer the
//! core asks for at `t` is slept for `(t - now) / scale` of real time.

use std::time::Duration;

use somnus_types::VirtualInstant;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    scale: f64,
}

impl Clock {
    /// A clock starting now, running `scale` times faster than real time.
    pub fn start(scale: f64) -> Clock {
        Clock { start: Instant::now(), scale }
    }

    pub fn now(&self) -> VirtualInstant {
        let real = self.start.elapsed().as_nanos() as f64;
        VirtualInstant((real * self.scale) as u64)
    }

    /// The real instant the clock reads `at`.
    pub fn instant_of(&self, at: VirtualInstant) -> Instant {
        let real = at.as_nanos() as f64 / self.scale;
        self.start + Duration::from_nanos(real.min(u64::MAX as f64 / 2.0) as u64)
    }

    /// The real time `duration` of the clock's takes.
    pub fn real_of(&self, duration: somnus_types::VirtualDuration) -> Duration {
        Duration::from_secs_f64(duration.as_secs_f64() / self.scale)
    }

    /// The clock's time that `real` takes.
    pub fn virtual_of(&self, real: Duration) -> somnus_types::VirtualDuration {
        somnus_types::VirtualDuration((real.as_nanos() as f64 * self.scale) as u64)
    }

    /// Sleeps until the clock reads `at`; forever for `None`.
    pub async fn sleep_until(&self, at: Option<VirtualInstant>) {
        match at {
            Some(at) => tokio::time::sleep_until(self.instant_of(at)).await,
            None => std::future::pending().await,
        }
    }
}
