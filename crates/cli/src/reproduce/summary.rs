//! `summary.md` of `reproduce fast08`: the tables of docs/results/offload.md, computed
//! from this run, with the paper's figures (004: Narayanan et al., FAST'08) beside.

use std::fmt::Write as _;

use somnus_sim::engine::ConfigKind;
use somnus_sim::experiment::{ConfigReport, OffloadResult};

use super::findings::{Findings, LEAST_IDLE, MOST_IDLE};
use super::paper::{
    PAPER_REMOTE_READS, PAPER_WRITES_OFFLOADED, concurrency, config, paper_energy, paper_peak,
};
use crate::sim::replay::ReplayOutcome;

/// The summary document, but for its part on the preset (`summary_fast08`).
pub(super) fn markdown(findings: &Findings, seeds: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Write off-loading (FAST'08): reproduction by somnus {}\n\n\
         Written by `somnus reproduce fast08` ({seeds} seed(s) of the synthetic data center). \
         Energy and power are % of the baseline; response times in ms. The paper's figures \
         are 004's (Narayanan et al., FAST'08). Each experiment's report (tables, JSON with \
         what produced it, CSV, plots) is in the directory named beside it.\n",
        crate::provenance::SOMNUS_VERSION
    );
    msr_stats(&mut out, findings);
    paper_days(&mut out, findings);
    every_day(&mut out, findings);
    others(&mut out, findings);
    demo(&mut out, findings);
    out
}

fn percent(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// 004 section 2's analysis of the MSR set, next to the paper's 36 volumes.
fn msr_stats(out: &mut String, findings: &Findings) {
    let Some(stats) = &findings.msr_stats else { return };
    let _ = writeln!(out, "## The MSR set (`msr-stats.json`), next to the paper's section 2\n");
    let _ = writeln!(out, "| | these traces | the paper's 36 volumes |\n|---|---|---|");
    let rows: [(&str, String, &str); 6] = [
        ("volumes", stats.volume_count.to_string(), "36"),
        (
            "mean / median share of time active",
            format!(
                "{} / {}",
                percent(stats.active_share_mean),
                percent(stats.active_share_median)
            ),
            "60 % / 80 %",
        ),
        (
            "counting reads only",
            format!(
                "{} / {}",
                percent(stats.read_active_share_mean),
                percent(stats.read_active_share_median)
            ),
            "21 % / 14 %",
        ),
        ("concurrently active volumes, mean / p99 / max", concurrency(stats), "21.7 / 27 / 31"),
        ("least idle day", stats.least_idle_day.clone().unwrap_or_default(), "Mon 26 Feb"),
        ("most idle day", stats.most_idle_day.clone().unwrap_or_default(), "Sun 25 Feb"),
    ];
    for (what, ours, paper) in rows {
        let _ = writeln!(out, "| {what} | {ours} | {paper} |");
    }
    let _ = writeln!(out);
}

fn ms(report: &ConfigReport, read: bool) -> String {
    let l = if read { &report.read_ms } else { &report.write_ms };
    if l.count == 0 {
        return "-".to_string();
    }
    format!("{:.2} / {:.1} / {:.0}", l.p50, l.p99, l.max)
}

/// 004's least and most idle days on the MSR set, next to the paper.
fn paper_days(out: &mut String, findings: &Findings) {
    let (Some(least), Some(most)) = (&findings.msr_least_idle, &findings.msr_most_idle) else {
        return;
    };
    let _ = writeln!(
        out,
        "## Least and most idle day, next to the paper (`msr-{LEAST_IDLE}/`, `msr-{MOST_IDLE}/`)\n\n\
         | day | config | energy % | paper | peak power % | paper | read ms p50 / p99 / max | \
         write ms p50 / p99 / max | delayed r / w % | writes off-loaded % |\n\
         |---|---|---|---|---|---|---|---|---|---|"
    );
    for (label, outcome) in [(LEAST_IDLE, least), (MOST_IDLE, most)] {
        for (index, kind) in ConfigKind::ALL.into_iter().enumerate() {
            let c = config(&outcome.result, kind);
            let (energy_paper, peak_paper) = match kind {
                ConfigKind::Baseline => ("100", "100"),
                _ => (paper_energy(label == LEAST_IDLE, kind), paper_peak(kind)),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {energy_paper} | {:.1} | {peak_paper} | {} | {} | {:.2} / {:.2} | {:.1} |",
                if index == 0 { label } else { "" },
                kind.name(),
                c.energy_pct,
                c.peak_power_pct,
                ms(c, true),
                ms(c, false),
                c.spinup_delayed_reads_pct,
                c.spinup_delayed_writes_pct,
                c.writes_offloaded_pct
            );
        }
    }
    let _ = writeln!(out);
}

/// Every day of the MSR set and the whole week, both logger-host rules.
fn every_day(out: &mut String, findings: &Findings) {
    let _ = writeln!(
        out,
        "## Every day and the whole set (`msr-days/`, `msr-week/`)\n\n\
         | window | vanilla | machine | rack | machine, cheapest host | write p99 ms baseline / machine / rack |\n\
         |---|---|---|---|---|---|"
    );
    let mut rows: Vec<(String, &ReplayOutcome, Option<&ReplayOutcome>)> = Vec::new();
    if let Some(week) = &findings.msr_week {
        rows.push(("whole set".to_string(), week, None));
    }
    for (index, (any, cheapest)) in findings.msr_days.iter().enumerate() {
        let window = &any.provenance.window;
        rows.push((
            format!(
                "day {index}, {} .. {} ({:.1} h)",
                window.start,
                window.end,
                window.span_s / 3600.0
            ),
            any,
            Some(cheapest),
        ));
    }
    for (label, outcome, cheapest) in rows {
        let energy = |kind| config(&outcome.result, kind).energy_pct;
        let p99 = |kind| config(&outcome.result, kind).write_ms.p99;
        let cheap = cheapest.map_or_else(
            || "-".to_string(),
            |c| format!("{:.1}", config(&c.result, ConfigKind::Machine).energy_pct),
        );
        let _ = writeln!(
            out,
            "| {label} | {:.1} | {:.1} | {:.1} | {cheap} | {:.2} / {:.2} / {:.2} |",
            energy(ConfigKind::Vanilla),
            energy(ConfigKind::Machine),
            energy(ConfigKind::Rack),
            p99(ConfigKind::Baseline),
            p99(ConfigKind::Machine),
            p99(ConfigKind::Rack)
        );
    }
    if let Some(week) = &findings.msr_week {
        let rack = config(&week.result, ConfigKind::Rack);
        let _ = writeln!(
            out,
            "\nOver the whole set, rack level: {:.1} % of writes off-loaded (paper: {PAPER_WRITES_OFFLOADED} %), \
             {:.2} % of reads from a remote logger (paper: {PAPER_REMOTE_READS} %).",
            rack.writes_offloaded_pct, rack.remote_reads_pct
        );
        kept_awake(out, &week.result);
    }
    let _ = writeln!(out);
}

/// The volumes an off-load configuration kept awake for want of a logger elsewhere.
fn kept_awake(out: &mut String, result: &OffloadResult) {
    for kind in [ConfigKind::Machine, ConfigKind::Rack] {
        let volumes: Vec<String> = config(result, kind)
            .volumes
            .iter()
            .filter(|v| v.sleep_blocked_pct >= crate::report::KEPT_AWAKE_PCT_MIN)
            .map(|v| format!("{} ({:.1} %)", v.name, v.sleep_blocked_pct))
            .collect();
        if !volumes.is_empty() {
            let _ = writeln!(
                out,
                "{}: kept awake, idle, for want of an awake logger on other disks (share of the window): {}.",
                kind.name(),
                volumes.join(", ")
            );
        }
    }
}

fn others(out: &mut String, findings: &Findings) {
    let _ = writeln!(
        out,
        "## The other real trace sets (`other-traces/`)\n\n\
         | trace | span | energy % vanilla / machine / rack | baseline read ms p50 / p99 / max |\n\
         |---|---|---|---|"
    );
    for (name, outcome) in &findings.others {
        let energy = |kind| config(&outcome.result, kind).energy_pct;
        let _ = writeln!(
            out,
            "| {name} | {:.0} s | {:.1} / {:.1} / {:.1} | {} |",
            outcome.result.span_s,
            energy(ConfigKind::Vanilla),
            energy(ConfigKind::Machine),
            energy(ConfigKind::Rack),
            ms(config(&outcome.result, ConfigKind::Baseline), true)
        );
    }
    let _ = writeln!(out);
}

fn demo(out: &mut String, findings: &Findings) {
    let Some(demo) = &findings.demo else { return };
    let _ = writeln!(
        out,
        "## The synthetic day (`demo/`; synthetic)\n\n\
         | config | energy % | write p99 ms | reads delayed % | writes off-loaded % |\n|---|---|---|---|---|"
    );
    for kind in ConfigKind::ALL {
        let c = config(&demo.result, kind);
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.2} | {:.2} | {:.1} |",
            kind.name(),
            c.energy_pct,
            c.write_ms.p99,
            c.spinup_delayed_reads_pct,
            c.writes_offloaded_pct
        );
    }
    let _ = writeln!(out);
}
