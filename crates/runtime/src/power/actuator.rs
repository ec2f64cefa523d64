//! Actuators: one per power unit of a server (its node, its disks, its CPUs), each
//! told to power down when the core sleeps the server and up when it is woken.
//!
//! The default is emulated: the unit does nothing, and the server's sleep is the
//! core's (it answers nothing but its wake channel) with the profile's timings. The
//! real backends run the Linux tools named in DEPENDENCIES.md §7 and need root; they
//! are chosen per server in the cluster file's `[server.power]` and are never run by
//! the tests.

use std::io;
use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// A unit that can be put to sleep and woken.
pub trait Actuator: Send + Sync {
    /// What the unit is, for logs and errors ("node (systemctl suspend)", "disk /dev/sdb").
    fn unit(&self) -> String;
    fn power_down(&self) -> io::Result<()>;
    fn power_up(&self) -> io::Result<()>;
}

/// How a server's node sleeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeBackend {
    /// The process stays up and stops serving; the wake takes the profile's time.
    #[default]
    Emulated,
    /// `systemctl suspend` (suspend to RAM); woken by a Wake-on-LAN packet.
    SystemctlSuspend,
    /// `rtcwake -m mem -s <rtcwake_seconds>`: suspend to RAM with a timed wake as a
    /// backstop; woken earlier by Wake-on-LAN.
    Rtcwake,
    /// The io-server state (HotPower): the node stays up with `cpus` offline.
    OfflineCpus,
}

/// How a server's disks spin down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskCommand {
    /// `hdparm -y` (ATA STANDBY IMMEDIATE; the next I/O spins the disk up).
    #[default]
    Hdparm,
    /// `sg_start --stop` / `sg_start --start` (SCSI START STOP UNIT).
    SgStart,
}

/// A server's `[server.power]` section: which backend each of its units uses.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSection {
    #[serde(default)]
    pub node: NodeBackend,
    /// The timed wake of `node = "rtcwake"`, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtcwake_seconds: Option<u32>,
    /// The MAC of the NIC that wakes the node: the MDS broadcasts a Wake-on-LAN packet
    /// for it to UDP port 9 as well as to the server's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Disks to spin down while the server sleeps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<PathBuf>,
    #[serde(default)]
    pub disk_command: DiskCommand,
    /// CPUs offlined while asleep with `node = "offline-cpus"` (cpu0 cannot be).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u32>,
}

impl PowerSection {
    /// Checks what the file cannot say in its types.
    pub fn check(&self) -> Result<(), String> {
        if let Some(mac) = &self.mac {
            parse_mac(mac)?;
        }
        if self.node == NodeBackend::Rtcwake && self.rtcwake_seconds.is_none_or(|s| s == 0) {
            return Err("node = \"rtcwake\" needs rtcwake_seconds above 0".into());
        }
        if self.node == NodeBackend::OfflineCpus && (self.cpus.is_empty() || self.cpus.contains(&0))
        {
            return Err("node = \"offline-cpus\" needs cpus to offline, not cpu 0".into());
        }
        Ok(())
    }

    /// The MAC server `id` wakes to: its NIC's, else the emulated one. A MAC the file
    /// gives is checked when the file loads (`check`).
    pub fn wake_mac(&self, id: u32) -> [u8; 6] {
        let configured = self.mac.as_deref().and_then(|mac| parse_mac(mac).ok());
        configured.unwrap_or_else(|| super::emulated_mac(id))
    }

    /// Whether the node's sleep is emulated (so the wake takes the profile's time).
    pub fn emulated(&self) -> bool {
        self.node == NodeBackend::Emulated
    }

    /// The actuators, in the order they power down (disks, then the node); they
    /// power up in the reverse order.
    pub fn actuators(&self) -> Vec<Box<dyn Actuator>> {
        let mut units: Vec<Box<dyn Actuator>> = Vec::new();
        for disk in &self.disks {
            let device = disk.display().to_string();
            units.push(Box::new(match self.disk_command {
                DiskCommand::Hdparm => {
                    Tool::new(&format!("disk {device}"), &["hdparm", "-y", &device], None)
                }
                DiskCommand::SgStart => Tool::new(
                    &format!("disk {device}"),
                    &["sg_start", "--stop", &device],
                    Some(&["sg_start", "--start", &device]),
                ),
            }));
        }
        match self.node {
            NodeBackend::Emulated => units.push(Box::new(Emulated)),
            NodeBackend::SystemctlSuspend => {
                units.push(Box::new(Tool::new("node", &["systemctl", "suspend"], None)))
            }
            NodeBackend::Rtcwake => {
                let seconds = self.rtcwake_seconds.unwrap_or(60).to_string();
                units.push(Box::new(Tool::new(
                    "node",
                    &["rtcwake", "-m", "mem", "-s", &seconds],
                    None,
                )))
            }
            NodeBackend::OfflineCpus => {
                units.push(Box::new(OfflineCpus { cpus: self.cpus.clone() }))
            }
        }
        units
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let bad = || format!("mac {text:?} is not six hexadecimal bytes like 52:54:00:12:34:56");
    let mut mac = [0u8; 6];
    let mut parts = text.split([':', '-']);
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(mac)
}

/// The emulated unit: nothing to do, the core's sleep is the whole of it.
struct Emulated;

impl Actuator for Emulated {
    fn unit(&self) -> String {
        "node (emulated)".into()
    }
    fn power_down(&self) -> io::Result<()> {
        Ok(())
    }
    fn power_up(&self) -> io::Result<()> {
        Ok(())
    }
}

/// A unit driven by a command line (`hdparm`, `sg_start`, `systemctl`, `rtcwake`).
struct Tool {
    unit: String,
    down: Vec<String>,
    up: Option<Vec<String>>,
}

impl Tool {
    fn new(unit: &str, down: &[&str], up: Option<&[&str]>) -> Tool {
        let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect();
        Tool { unit: format!("{unit} ({})", down.join(" ")), down: owned(down), up: up.map(owned) }
    }
}

fn run(args: &[String]) -> io::Result<()> {
    let (program, rest) = args.split_first().ok_or_else(|| io::Error::other("no command"))?;
    let status = Command::new(program).args(rest).status()?;
    if !status.success() {
        return Err(io::Error::other(format!("`{}` exited with {status}", args.join(" "))));
    }
    Ok(())
}

impl Actuator for Tool {
    fn unit(&self) -> String {
        self.unit.clone()
    }
    fn power_down(&self) -> io::Result<()> {
        run(&self.down)
    }
    fn power_up(&self) -> io::Result<()> {
        self.up.as_deref().map_or(Ok(()), run)
    }
}

/// The io-server state: CPUs offlined through sysfs, onlined on wake.
struct OfflineCpus {
    cpus: Vec<u32>,
}

impl OfflineCpus {
    fn set(&self, online: bool) -> io::Result<()> {
        for cpu in &self.cpus {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/online");
            std::fs::write(&path, if online { "1" } else { "0" })
                .map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
        }
        Ok(())
    }
}

impl Actuator for OfflineCpus {
    fn unit(&self) -> String {
        format!("cpus {:?} (offline)", self.cpus)
    }
    fn power_down(&self) -> io::Result<()> {
        self.set(false)
    }
    fn power_up(&self) -> io::Result<()> {
        self.set(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mac_parses_and_a_bad_one_is_named() {
        assert_eq!(parse_mac("52:54:00:12:34:5f"), Ok([0x52, 0x54, 0, 0x12, 0x34, 0x5f]));
        for bad in ["52:54:00:12:34", "52:54:00:12:34:56:78", "zz:54:00:12:34:56", ""] {
            let error = parse_mac(bad).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn each_backend_is_chosen_by_the_section_and_checked() {
        let section: PowerSection = toml::from_str(
            "node = \"systemctl-suspend\"\ndisks = [\"/dev/sdb\"]\ndisk_command = \"sg-start\"",
        )
        .unwrap();
        let units: Vec<String> = section.actuators().iter().map(|a| a.unit()).collect();
        assert_eq!(units, ["disk /dev/sdb (sg_start --stop /dev/sdb)", "node (systemctl suspend)"]);
        assert!(section.check().is_ok());
        let rtc: PowerSection = toml::from_str("node = \"rtcwake\"").unwrap();
        assert!(rtc.check().unwrap_err().contains("rtcwake_seconds"));
        let cpus: PowerSection = toml::from_str("node = \"offline-cpus\"\ncpus = [0, 1]").unwrap();
        assert!(cpus.check().unwrap_err().contains("cpu 0"));
        assert!(PowerSection::default().emulated());
        assert!(toml::from_str::<PowerSection>("node = \"hibernate\"").is_err());
    }
}
