//! `somnus show`: the built-in data a user starts from.

use anyhow::Result;
use clap::Subcommand;
use somnus_core::power::{PowerState, builtin_profile, builtin_profile_names};
use somnus_sim::topology::Topology;
use somnus_trace::SyntheticConfig;
use somnus_trace::synthetic::PRESETS;

#[derive(Subcommand)]
pub(crate) enum ShowCommand {
    /// List the built-in power profiles, or print one in full.
    Profile {
        /// The profile to print; without it, all are listed with their watts.
        name: Option<String>,
    },
    /// Print the built-in MSR Cambridge topology (004 Table 4) as TOML, a starting
    /// point for `somnus sim offload --topology FILE`.
    Topology,
    /// List the built-in synthetic trace presets, or print one's knobs as TOML (a
    /// starting point for `somnus trace generate --config FILE`).
    Preset {
        /// The preset to print; without it, all are listed.
        name: Option<String>,
    },
}

pub(crate) fn run(command: ShowCommand) -> Result<()> {
    match command {
        ShowCommand::Profile { name: None } => {
            outln!(
                "{:<28} {:>8} {:>8} {:>8} {:>10} {:>10}",
                "profile",
                "active W",
                "idle W",
                "standby W",
                "wake s",
                "kind"
            )?;
            for name in builtin_profile_names() {
                let profile = builtin_profile(name)?;
                outln!(
                    "{:<28} {:>8.1} {:>8.1} {:>9.1} {:>10.1} {:>10}",
                    name,
                    profile.watts(PowerState::Active).as_watts(),
                    profile.watts(PowerState::Idle).as_watts(),
                    profile.watts(PowerState::Standby).as_watts(),
                    profile.wake_duration().as_secs_f64(),
                    profile.kind.name(),
                )?;
            }
        }
        ShowCommand::Profile { name: Some(name) } => {
            let profile = builtin_profile(&name)?;
            outln!("{name}: {}", profile.source)?;
            for state in PowerState::EVERY.into_iter().filter(|s| profile.has_state(*s)) {
                outln!("  {:<9} {:>7.2} W", state.name(), profile.watts(state).as_watts())?;
            }
            for to in [PowerState::Standby, PowerState::IoServer, PowerState::Off] {
                for (from, to) in [(PowerState::Idle, to), (to, PowerState::Idle)] {
                    let Some(transition) = profile.transition(from, to) else { continue };
                    outln!(
                        "  {} -> {}: {:.1} s, {:.1} J",
                        from.name(),
                        to.name(),
                        transition.duration.as_secs_f64(),
                        transition.energy.as_joules()
                    )?;
                }
            }
        }
        ShowCommand::Topology => out!("{}", Topology::msr_cambridge_text())?,
        ShowCommand::Preset { name: None } => {
            for (name, description, _) in PRESETS {
                outln!("{name:<12} {description}")?;
            }
        }
        ShowCommand::Preset { name: Some(name) } => {
            out!("{}", SyntheticConfig::preset_text(&name)?)?;
        }
    }
    Ok(())
}
