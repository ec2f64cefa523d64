//! `somnus mds` and `somnus server`: one role of a cluster each, from its cluster file
//! (the processes `somnus up` starts), and `somnus server remove`.

use anyhow::{Context, Result};
use clap::Args;
use somnus_runtime::process;

use super::access::{ClusterArg, runtime};
use super::children::stop_with_parent;

#[derive(Args)]
pub(crate) struct MdsArgs {
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct ServerArgs {
    #[command(subcommand)]
    action: Option<ServerCommand>,
    /// The server to run: its entry in the cluster file.
    #[arg(long, required = true)]
    id: Option<u32>,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(clap::Subcommand)]
pub(crate) enum ServerCommand {
    /// Remove a server for good: the MDS declares it lost and rebuilds a copy of each
    /// of its chunk groups on the other servers, so every group has r copies again.
    Remove {
        /// The server's id.
        id: u32,
        #[command(flatten)]
        cluster: ClusterArg,
    },
}

pub(crate) fn run_mds(args: MdsArgs) -> Result<()> {
    stop_with_parent()?;
    let path = args.cluster.path();
    runtime()?
        .block_on(process::run_mds(&path))
        .with_context(|| format!("the MDS of {}", path.display()))
}

pub(crate) fn run_server(args: ServerArgs) -> Result<()> {
    if let Some(ServerCommand::Remove { id, cluster }) = args.action {
        return super::status::remove_server(id, &cluster);
    }
    stop_with_parent()?;
    // clap requires --id without a subcommand.
    let id = args.id.unwrap_or_default();
    let path = args.cluster.path();
    runtime()?
        .block_on(process::run_server(&path, id))
        .with_context(|| format!("server {id} of {}", path.display()))
}
