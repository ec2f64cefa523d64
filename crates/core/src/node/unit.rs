//! A power unit: the disks of one volume, which spin down and up together. The unit
//! decides what a power request means given the I/O it serves: a spin-down waits until
//! the I/O already issued to the disks drains (the logger's traffic from other
//! managers included); I/O for disks that do not spin waits for a spin-up, which the
//! unit asks for. The shell only ever sees I/O for spinning disks (a shell I/O to a
//! sleeping unit is a bug, and the shell asserts it).

/// The unit's power, as far as the node knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitPower {
    Active,
    SpinningDown,
    Standby,
    SpinningUp,
}

/// What the node must do after a change to the unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnitCommand {
    None,
    SpinDown,
    SpinUp,
}

#[derive(Clone, Debug)]
pub(crate) struct PowerUnit {
    power: UnitPower,
    /// A spin-down was asked for while I/O was in flight: it starts when the I/O drains.
    spin_down_pending: bool,
    /// Something needs the disks while they spin down: spin up once down.
    wake_after_down: bool,
    /// Disk I/O issued to the shell and not yet completed.
    ios_in_flight: u32,
}

impl PowerUnit {
    pub(crate) fn new(power: UnitPower) -> PowerUnit {
        assert!(matches!(power, UnitPower::Active | UnitPower::Standby), "a unit starts at rest");
        PowerUnit { power, spin_down_pending: false, wake_after_down: false, ios_in_flight: 0 }
    }

    pub(crate) fn power(&self) -> UnitPower {
        self.power
    }

    /// Spinning, with no spin-down asked for: what "awake" means for the logger on it.
    pub(crate) fn is_awake(&self) -> bool {
        self.power == UnitPower::Active && !self.spin_down_pending
    }

    /// Whether I/O may go to the disks now.
    pub(crate) fn serves_io(&self) -> bool {
        self.power == UnitPower::Active
    }

    pub(crate) fn ios_in_flight(&self) -> u32 {
        self.ios_in_flight
    }

    /// An I/O is issued to the disks (they spin).
    pub(crate) fn io_started(&mut self) {
        assert!(self.serves_io(), "I/O issued to a unit that does not spin ({:?})", self.power);
        self.ios_in_flight += 1;
    }

    /// An I/O completed: a pending spin-down may start now.
    pub(crate) fn io_finished(&mut self) -> UnitCommand {
        assert!(self.ios_in_flight > 0, "a completion with no I/O in flight");
        self.ios_in_flight -= 1;
        if self.ios_in_flight == 0 && self.spin_down_pending {
            self.spin_down_pending = false;
            self.power = UnitPower::SpinningDown;
            return UnitCommand::SpinDown;
        }
        UnitCommand::None
    }

    /// The manager wants the disks down.
    pub(crate) fn spin_down_requested(&mut self) -> UnitCommand {
        assert_eq!(self.power, UnitPower::Active, "O3: spin-down of a unit not spinning");
        if self.ios_in_flight > 0 {
            // Logger I/O from other managers finishes first; the logger already counts
            // as asleep, so no new write is sent here.
            self.spin_down_pending = true;
            return UnitCommand::None;
        }
        self.power = UnitPower::SpinningDown;
        UnitCommand::SpinDown
    }

    /// Someone needs the disks spinning: a spin-up now, after a spin-down under way, or
    /// nothing if they spin or are spinning up. (A spin-down pending on spinning disks
    /// stands: I/O is served until it drains, and the manager that asked for the
    /// spin-down asks for a spin-up once the disks rest, if it needs them.)
    pub(crate) fn wake(&mut self) -> UnitCommand {
        match self.power {
            UnitPower::Standby => {
                self.power = UnitPower::SpinningUp;
                UnitCommand::SpinUp
            }
            UnitPower::SpinningDown => {
                self.wake_after_down = true;
                UnitCommand::None
            }
            UnitPower::Active | UnitPower::SpinningUp => UnitCommand::None,
        }
    }

    /// The shell reports the end of a transition; `waiting` says whether I/O waits for
    /// the disks.
    pub(crate) fn rested(&mut self, active: bool, waiting: bool) -> UnitCommand {
        let expected = if active { UnitPower::SpinningUp } else { UnitPower::SpinningDown };
        assert_eq!(self.power, expected, "a transition the unit did not start ended");
        if active {
            self.power = UnitPower::Active;
            self.wake_after_down = false;
            return UnitCommand::None;
        }
        self.power = UnitPower::Standby;
        if std::mem::take(&mut self.wake_after_down) || waiting {
            self.power = UnitPower::SpinningUp;
            return UnitCommand::SpinUp;
        }
        UnitCommand::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spin_down_waits_for_the_io_in_flight_and_io_wakes_the_disks() {
        // Goal: the unit defers a spin-down until its I/O drains (no longer awake
        // meanwhile), and a wake during a spin-down spins the disks up once they rest.
        let mut unit = PowerUnit::new(UnitPower::Active);
        unit.io_started();
        assert_eq!(unit.spin_down_requested(), UnitCommand::None);
        assert!(!unit.is_awake() && unit.serves_io());
        assert_eq!(unit.io_finished(), UnitCommand::SpinDown);
        assert_eq!(unit.power(), UnitPower::SpinningDown);
        assert_eq!(unit.wake(), UnitCommand::None);
        assert_eq!(unit.rested(false, false), UnitCommand::SpinUp, "woken while going down");
        assert_eq!(unit.rested(true, false), UnitCommand::None);
        assert!(unit.is_awake());
    }
}
