//! The synthetic data center's part of `summary.md`: the preset's calibration against
//! 004 section 2, and its results over the seeds (median and range) beside the paper.

use std::fmt::Write as _;

use somnus_sim::engine::ConfigKind;

use super::findings::{Fast08Seed, Findings, LEAST_IDLE, MOST_IDLE};
use super::paper::{concurrency, config, paper_energy, paper_peak};
use crate::sim::replay::ReplayOutcome;

/// Median and range of `values`, as `median (min-max)`.
fn spread(mut values: Vec<f64>, decimals: usize) -> String {
    if values.is_empty() {
        return "-".to_string();
    }
    values.sort_by(f64::total_cmp);
    let median = values[values.len() / 2];
    let (min, max) = (values[0], values[values.len() - 1]);
    if values.len() == 1 {
        return format!("{median:.decimals$}");
    }
    format!("{median:.decimals$} ({min:.decimals$}-{max:.decimals$})")
}

pub(super) fn fast08(out: &mut String, findings: &Findings) {
    let seeds = &findings.fast08;
    if seeds.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "## The paper's data center, synthetic (`fast08/`; the msr-fast08 preset, seeds 0-{})\n",
        seeds.len() - 1
    );
    calibration(out, seeds);
    results(out, seeds);
}

fn calibration(out: &mut String, seeds: &[Fast08Seed]) {
    let range = |f: &dyn Fn(&Fast08Seed) -> f64| spread(seeds.iter().map(f).collect(), 1);
    let _ = writeln!(
        out,
        "| | paper (004 section 2) | msr-fast08, median (range) over seeds |\n|---|---|---|\n\
         | share of time active, mean | 60 % | {} % |\n\
         | share of time active, median | 80 % | {} % |\n\
         | counting reads only, mean | 21 % | {} % |\n\
         | concurrently active volumes (seed {}: mean / p99 / max) | 21.7 / 27 / 31 | {} |\n",
        range(&|s| s.stats.active_share_mean * 100.0),
        range(&|s| s.stats.active_share_median * 100.0),
        range(&|s| s.stats.read_active_share_mean * 100.0),
        seeds[0].seed,
        concurrency(&seeds[0].stats),
    );
}

fn results(out: &mut String, seeds: &[Fast08Seed]) {
    let _ = writeln!(
        out,
        "| window | config | energy % | paper | peak power % | paper | write p99 / baseline's | writes off-loaded % | reads delayed % |\n\
         |---|---|---|---|---|---|---|---|---|"
    );
    type Pick = fn(&Fast08Seed) -> &ReplayOutcome;
    let windows: [(&str, Option<bool>, Pick); 3] = [
        (LEAST_IDLE, Some(true), |s| &s.least_idle),
        (MOST_IDLE, Some(false), |s| &s.most_idle),
        ("whole week", None, |s| &s.week),
    ];
    for (label, least_idle, pick) in windows {
        for (index, kind) in
            [ConfigKind::Vanilla, ConfigKind::Machine, ConfigKind::Rack].into_iter().enumerate()
        {
            let of = |f: &dyn Fn(&somnus_sim::experiment::ConfigReport) -> f64, decimals| {
                spread(seeds.iter().map(|s| f(config(&pick(s).result, kind))).collect(), decimals)
            };
            let ratio = spread(
                seeds
                    .iter()
                    .map(|s| {
                        let baseline = config(&pick(s).result, ConfigKind::Baseline).write_ms.p99;
                        config(&pick(s).result, kind).write_ms.p99 / baseline.max(f64::MIN_POSITIVE)
                    })
                    .collect(),
                2,
            );
            let (energy_paper, peak_paper) = match least_idle {
                Some(least) => (paper_energy(least, kind), paper_peak(kind)),
                None => ("", ""),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {energy_paper} | {} | {peak_paper} | {ratio} | {} | {} |",
                if index == 0 { label } else { "" },
                kind.name(),
                of(&|c| c.energy_pct, 1),
                of(&|c| c.peak_power_pct, 1),
                of(&|c| c.writes_offloaded_pct, 1),
                of(&|c| c.spinup_delayed_reads_pct, 2),
            );
        }
    }
    ordering(out, seeds);
}

/// Whether the paper's energy ordering holds in every run, and where the variants are.
fn ordering(out: &mut String, seeds: &[Fast08Seed]) {
    let ordered = seeds.iter().all(|s| {
        [&s.least_idle, &s.most_idle, &s.week].iter().all(|o| {
            let e = |kind| config(&o.result, kind).energy_pct;
            e(ConfigKind::Rack) < e(ConfigKind::Machine)
                && e(ConfigKind::Machine) < e(ConfigKind::Vanilla)
                && e(ConfigKind::Vanilla) < e(ConfigKind::Baseline)
        })
    });
    let _ = writeln!(
        out,
        "\nThe paper's ordering rack < machine < vanilla < baseline {} in all {} runs \
         ({} seed(s) x 3 windows).",
        if ordered { "holds" } else { "does NOT hold" },
        seeds.len() * 3,
        seeds.len()
    );
    // The variants run with seed 1, so only when two seeds or more were asked for.
    if seeds.len() > 1 {
        let _ = writeln!(
            out,
            "\nSeed 1's variants (`fast08/seed1-*-no-cache.json`, `seed1-*-10g.json`) and \
             `fast08/quarter-seed7-no-cache.json` are the runs docs/results/offload.md \
             discusses."
        );
    }
}
