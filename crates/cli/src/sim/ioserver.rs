//! `somnus sim ioserver`: 001 Table 2 from the shipped profiles: a 4-node cluster with
//! 1 to 4 nodes in max-perf and the rest in the io-server state.

use anyhow::Result;
use clap::Args;
use somnus_core::power::{builtin_profile, io_server_cluster_watts};

#[derive(Args, Debug)]
pub(crate) struct IoServerArgs {
    /// Nodes of the cluster (001's has 4).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    nodes: u32,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

/// The profiles of 001 Table 2's columns, with the paper's watts for 1..4 max-perf nodes.
const COLUMNS: [(&str, &str, [f64; 4]); 3] = [
    ("Default", "obelix", [585.0, 726.0, 867.0, 1008.0]),
    ("Ast-I", "asterix-i", [483.0, 658.0, 833.0, 1008.0]),
    ("Ast-II (proj.)", "asterix-ii", [369.0, 582.0, 795.0, 1008.0]),
];

pub(crate) fn run(args: &IoServerArgs) -> Result<()> {
    let mut rows = Vec::new();
    for (column, name, paper) in COLUMNS {
        let profile = builtin_profile(name)?;
        for max_perf in 1..=args.nodes {
            let watts = io_server_cluster_watts(&profile, args.nodes, max_perf).as_watts();
            let paper = (args.nodes == 4).then(|| paper[max_perf as usize - 1]);
            rows.push((column, name, max_perf, watts, paper));
        }
    }
    if args.json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(column, profile, k, watts, paper)| {
                serde_json::json!({"column": column, "profile": profile, "max_perf_nodes": k,
                    "nodes": args.nodes, "watts": watts, "paper_watts": paper})
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"schema": "somnus-ioserver", "rows": rows})
            )?
        )?;
        return Ok(());
    }
    outln!(
        "{} nodes: k in max-perf (252 W), the rest in the io-server state (001 Table 2)",
        args.nodes
    )?;
    outln!("{:<15} {:<11} {:>9} {:>9} {:>9}", "column", "profile", "max-perf", "watts", "001")?;
    for (column, name, k, watts, paper) in rows {
        let paper = paper.map_or("-".to_string(), |p| format!("{p:.0}"));
        outln!("{column:<15} {name:<11} {k:>9} {watts:>9.0} {paper:>9}")?;
    }
    Ok(())
}
