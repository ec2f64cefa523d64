//! Power, for real (docs/runtime.md, "Power"): each server's actuators, its wake
//! channel and its energy meter, driven by one task beside the server's.
//!
//! The core decides when a server sleeps (`ServerAction::Sleep`) and the MDS when it
//! wakes (`MdsAction::WakeServer`); this module only carries that out: the
//! actuators power down, the meter charges the profile's transition, and the wake
//! listener waits for a magic packet; then the actuators power up, an emulated node
//! waits the profile's wake time (in the cluster's clock), and the core is told
//! `Woken`.

mod actuator;
mod meter;
mod wake;

pub use actuator::{Actuator, DiskCommand, NodeBackend, PowerSection, parse_mac};
pub use meter::{NodeMeter, PowerReading, RAPL_ROOT, Rapl};
pub use wake::{MAGIC_PACKET_BYTES, WakeListener, Waker, emulated_mac, is_magic_for, magic_packet};

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use crate::clock::Clock;

/// The power task's inputs and outputs.
pub struct PowerDriver {
    pub server: u32,
    pub actuators: Vec<Box<dyn Actuator>>,
    /// The node sleeps for real (suspend, offlined CPUs): its wake takes what it takes,
    /// not the profile's time.
    pub emulated: bool,
    pub meter: Arc<Mutex<NodeMeter>>,
    pub listener: WakeListener,
    pub clock: Clock,
    /// Told once per `ServerAction::Sleep` (one at most is pending: a sleeping core
    /// asks for no other).
    pub sleeps: mpsc::Receiver<()>,
    /// The server's wake channel: `Woken` for the core (one pending covers any more).
    pub woken: mpsc::Sender<()>,
    pub shutdown: watch::Receiver<bool>,
}

impl PowerDriver {
    /// Runs until shutdown. An actuator that fails leaves its unit on (the server uses
    /// more power than modelled, never less safety); the failure is printed.
    pub async fn run(mut self) {
        loop {
            tokio::select! {
                Some(()) = self.sleeps.recv() => {
                    self.lock_meter().sleep(self.clock.now());
                    self.actuate(false).await;
                }
                packet = self.listener.next() => {
                    if let Err(error) = packet {
                        eprintln!("server {}: the wake channel failed: {error}", self.server);
                        return;
                    }
                    // The core's rule: a late packet for a server already on does
                    // nothing.
                    let Some(on_at) = self.lock_meter().wake_packet(self.clock.now()) else {
                        continue;
                    };
                    self.actuate(true).await;
                    if self.emulated {
                        tokio::select! {
                            () = self.clock.sleep_until(Some(on_at)) => {}
                            _ = self.shutdown.changed() => return,
                        }
                    }
                    let _ = self.woken.try_send(());
                }
                _ = self.shutdown.changed() => return,
            }
        }
    }

    fn lock_meter(&self) -> std::sync::MutexGuard<'_, NodeMeter> {
        // The meter holds no invariant a panic elsewhere could break.
        self.meter.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Powers every unit down (in order) or up (in reverse), off the async workers.
    async fn actuate(&mut self, up: bool) {
        let actuators = std::mem::take(&mut self.actuators);
        let server = self.server;
        let joined = tokio::task::spawn_blocking(move || {
            let order: Box<dyn Iterator<Item = &Box<dyn Actuator>>> =
                if up { Box::new(actuators.iter().rev()) } else { Box::new(actuators.iter()) };
            for unit in order {
                let result = if up { unit.power_up() } else { unit.power_down() };
                if let Err(error) = result {
                    let verb = if up { "power up" } else { "power down" };
                    eprintln!("server {server}: cannot {verb} {}: {error}", unit.unit());
                }
            }
            actuators
        })
        .await;
        if let Ok(actuators) = joined {
            self.actuators = actuators;
        }
    }
}
