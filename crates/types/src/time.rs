//! Virtual time in nanoseconds. The simulator advances it event by event; the runtime
//! maps it onto a (possibly scaled) real clock. Neither type reads a clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in virtual time, in nanoseconds since the start of the run.
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct VirtualInstant(pub u64);

/// A span of virtual time in nanoseconds.
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct VirtualDuration(pub u64);

const NANOS_PER_MICRO: u64 = 1_000;
const NANOS_PER_MILLI: u64 = 1_000_000;
const NANOS_PER_SECOND: u64 = 1_000_000_000;

impl VirtualInstant {
    pub const ZERO: VirtualInstant = VirtualInstant(0);
    pub const MAX: VirtualInstant = VirtualInstant(u64::MAX);

    pub fn as_nanos(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SECOND as f64
    }

    /// The time elapsed since `earlier`; panics if `earlier` is later, which would be
    /// a bug in event ordering.
    pub fn duration_since(self, earlier: VirtualInstant) -> VirtualDuration {
        assert!(earlier.0 <= self.0, "time went backwards: {earlier:?} > {self:?}");
        VirtualDuration(self.0 - earlier.0)
    }

    /// The time elapsed since `earlier`, or zero if `earlier` is in the future.
    pub fn saturating_duration_since(self, earlier: VirtualInstant) -> VirtualDuration {
        VirtualDuration(self.0.saturating_sub(earlier.0))
    }

    pub fn saturating_add(self, duration: VirtualDuration) -> VirtualInstant {
        VirtualInstant(self.0.saturating_add(duration.0))
    }
}

impl VirtualDuration {
    pub const ZERO: VirtualDuration = VirtualDuration(0);
    pub const MAX: VirtualDuration = VirtualDuration(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> VirtualDuration {
        VirtualDuration(nanos)
    }

    pub const fn from_micros(micros: u64) -> VirtualDuration {
        VirtualDuration(micros * NANOS_PER_MICRO)
    }

    pub const fn from_millis(millis: u64) -> VirtualDuration {
        VirtualDuration(millis * NANOS_PER_MILLI)
    }

    pub const fn from_secs(secs: u64) -> VirtualDuration {
        VirtualDuration(secs * NANOS_PER_SECOND)
    }

    /// Rounds a non-negative, finite number of seconds to the nearest nanosecond.
    /// Returns `None` for negative, non-finite or out-of-range input, so that a
    /// config parser can name the offending key.
    pub fn try_from_secs_f64(secs: f64) -> Option<VirtualDuration> {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        let nanos = (secs * NANOS_PER_SECOND as f64).round();
        (nanos < u64::MAX as f64).then_some(VirtualDuration(nanos as u64))
    }

    pub fn as_nanos(self) -> u64 {
        self.0
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SECOND as f64
    }

    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_MILLI as f64
    }

    pub fn saturating_sub(self, other: VirtualDuration) -> VirtualDuration {
        VirtualDuration(self.0.saturating_sub(other.0))
    }
}

impl Add<VirtualDuration> for VirtualInstant {
    type Output = VirtualInstant;
    fn add(self, rhs: VirtualDuration) -> VirtualInstant {
        let sum = self.0.checked_add(rhs.0);
        assert!(sum.is_some(), "virtual time overflow: {self:?} + {rhs:?}");
        VirtualInstant(sum.unwrap_or(u64::MAX))
    }
}

impl AddAssign<VirtualDuration> for VirtualInstant {
    fn add_assign(&mut self, rhs: VirtualDuration) {
        *self = *self + rhs;
    }
}

impl Sub<VirtualInstant> for VirtualInstant {
    type Output = VirtualDuration;
    fn sub(self, rhs: VirtualInstant) -> VirtualDuration {
        self.duration_since(rhs)
    }
}

impl Add for VirtualDuration {
    type Output = VirtualDuration;
    fn add(self, rhs: VirtualDuration) -> VirtualDuration {
        let sum = self.0.checked_add(rhs.0);
        assert!(sum.is_some(), "duration overflow: {self:?} + {rhs:?}");
        VirtualDuration(sum.unwrap_or(u64::MAX))
    }
}

impl AddAssign for VirtualDuration {
    fn add_assign(&mut self, rhs: VirtualDuration) {
        *self = *self + rhs;
    }
}

impl fmt::Debug for VirtualInstant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={:.9}s", self.as_secs_f64())
    }
}

impl fmt::Debug for VirtualDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_to_nanoseconds() {
        // Goal: config values like 10.9 s become exact nanosecond counts, and bad
        // values are refused instead of wrapping.
        assert_eq!(VirtualDuration::try_from_secs_f64(10.9), Some(VirtualDuration(10_900_000_000)));
        assert_eq!(VirtualDuration::try_from_secs_f64(0.0), Some(VirtualDuration::ZERO));
        assert_eq!(VirtualDuration::try_from_secs_f64(-1.0), None);
        assert_eq!(VirtualDuration::try_from_secs_f64(f64::NAN), None);
        assert_eq!(VirtualDuration::try_from_secs_f64(1e30), None);
    }

    #[test]
    fn instants_subtract_to_durations() {
        let a = VirtualInstant::ZERO + VirtualDuration::from_secs(60);
        let b = a + VirtualDuration::from_millis(10);
        assert_eq!(b - a, VirtualDuration::from_millis(10));
        assert_eq!(a.saturating_duration_since(b), VirtualDuration::ZERO);
    }
}
