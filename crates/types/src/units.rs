//! Power and energy with exact integer arithmetic.
//!
//! Power is held in microwatts and energy in femtojoules (1 uW x 1 ns = 1 fJ), so the
//! energy of any state held for any number of nanoseconds is an exact integer product.
//! A week at 1 kW is 6.0e23 fJ, far inside `u128`. Floating point appears only when a
//! figure is printed.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use crate::VirtualDuration;

/// Electrical power, in microwatts.
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Power(pub u64);

/// Energy, in femtojoules (microwatt-nanoseconds).
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Energy(pub u128);

const MICROWATTS_PER_WATT: f64 = 1e6;
const FEMTOJOULES_PER_JOULE: f64 = 1e15;

impl Power {
    pub const ZERO: Power = Power(0);

    /// Rounds watts to the nearest microwatt; `None` for negative or non-finite input.
    pub fn try_from_watts(watts: f64) -> Option<Power> {
        if !watts.is_finite() || watts < 0.0 {
            return None;
        }
        let micro = (watts * MICROWATTS_PER_WATT).round();
        (micro < u64::MAX as f64).then_some(Power(micro as u64))
    }

    pub fn as_watts(self) -> f64 {
        self.0 as f64 / MICROWATTS_PER_WATT
    }

    /// The exact energy drawn at this power over `duration`.
    pub fn over(self, duration: VirtualDuration) -> Energy {
        Energy(u128::from(self.0) * u128::from(duration.as_nanos()))
    }
}

impl Energy {
    pub const ZERO: Energy = Energy(0);

    /// Rounds joules to the nearest femtojoule; `None` for negative or non-finite input.
    pub fn try_from_joules(joules: f64) -> Option<Energy> {
        if !joules.is_finite() || joules < 0.0 {
            return None;
        }
        let femto = (joules * FEMTOJOULES_PER_JOULE).round();
        (femto < u128::MAX as f64).then_some(Energy(femto as u128))
    }

    pub fn as_joules(self) -> f64 {
        self.0 as f64 / FEMTOJOULES_PER_JOULE
    }

    /// The mean power that draws this energy over `duration` (zero for an empty span).
    pub fn mean_power_watts(self, duration: VirtualDuration) -> f64 {
        if duration.as_nanos() == 0 {
            return 0.0;
        }
        self.0 as f64 / duration.as_nanos() as f64 / MICROWATTS_PER_WATT
    }

    pub fn saturating_sub(self, other: Energy) -> Energy {
        Energy(self.0.saturating_sub(other.0))
    }
}

impl Add for Energy {
    type Output = Energy;
    fn add(self, rhs: Energy) -> Energy {
        Energy(self.0 + rhs.0)
    }
}

impl AddAssign for Energy {
    fn add_assign(&mut self, rhs: Energy) {
        self.0 += rhs.0;
    }
}

impl Sub for Energy {
    type Output = Energy;
    fn sub(self, rhs: Energy) -> Energy {
        assert!(rhs.0 <= self.0, "energy underflow: {self:?} - {rhs:?}");
        Energy(self.0 - rhs.0)
    }
}

impl fmt::Debug for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}W", self.as_watts())
    }
}

impl fmt::Debug for Energy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}J", self.as_joules())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_is_exact_power_times_time() {
        // Goal: 12 W for one week is exactly 7,257,600 J, with no rounding, and 2.6 W
        // (not representable in binary floating point) survives the trip to microwatts.
        let week = VirtualDuration::from_secs(7 * 24 * 3600);
        let idle = Power::try_from_watts(12.0).unwrap();
        assert_eq!(idle.over(week), Energy(7_257_600 * 1_000_000_000_000_000));
        let standby = Power::try_from_watts(2.6).unwrap();
        assert_eq!(standby, Power(2_600_000));
        assert_eq!(standby.over(VirtualDuration::from_secs(10)).as_joules(), 26.0);
        assert_eq!(Power::try_from_watts(-0.1), None);
    }
}
