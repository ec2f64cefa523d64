//! `somnus`: the command-line front end of every somnus tool. Each subcommand lives in
//! its own module; this file is only the command tree.

// First: its macros are used by every module below.
#[macro_use]
mod output;

mod allocator;
mod bench;
mod cluster;
mod demo;
mod layout;
mod logstore;
mod progress;
mod provenance;
mod report;
mod reproduce;
mod show;
mod sim;
mod trace;

/// mimalloc rather than the system's allocator: a simulated cluster makes about a
/// dozen small allocations per request, spread over hundreds of nodes' state, and
/// mimalloc's per-size pages keep them closer together (`somnus bench cluster` at
/// 300 servers: about 15% more requests per second than glibc's malloc). Its settings
/// are in `allocator`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// somnus: a storage cluster that lets idle disks and servers sleep without giving up
/// availability, durability or latency, and a simulator that replays real block traces
/// in virtual time to measure every power policy's energy and latency.
///
/// Start with `somnus demo`. Every command explains itself with `--help`.
#[derive(Parser)]
#[command(name = "somnus", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// somnus's main job in about two minutes: start a local cluster (an MDS, nine
    /// storage servers in three racks, an S3 gateway), drive a day of S3 traffic
    /// compressed into 72 s, print each interval's gear, servers asleep, DVL bytes and
    /// energy saved against every server on, then read every object back and compare
    /// it. Needs no files. The simulator's demo is `somnus sim demo`.
    Demo(demo::DemoArgs),
    /// Work with block I/O trace files: statistics, conversion, synthetic traces.
    Trace {
        #[command(subcommand)]
        command: trace::TraceCommand,
    },
    /// Replay traces in the discrete-event simulator.
    Sim {
        #[command(subcommand)]
        command: sim::SimCommand,
    },
    /// Measure somnus's own speed against a reference taken in the same run.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Analyse data layouts: Sierra's power-aware gear groups against the naive ones.
    Layout {
        #[command(subcommand)]
        command: layout::LayoutCommand,
    },
    /// Operate a logger's log directory: inspect, verify, crash-test, benchmark.
    Logstore {
        #[command(subcommand)]
        command: logstore::LogstoreCommand,
    },
    /// Start a complete local cluster (an MDS and 9 storage servers in 3 racks, r = 3,
    /// state in ./somnus-data, on 127.0.0.1 from port 7400) as child processes;
    /// Ctrl-C stops it, and its processes never outlive it.
    Up(cluster::up::UpArgs),
    /// Run a cluster's metadata service alone, from its cluster file.
    Mds(cluster::node::MdsArgs),
    /// Run one storage server alone, from its cluster file (`--id N`), or remove one
    /// for good (`somnus server remove ID`).
    Server(cluster::node::ServerArgs),
    /// Serve the S3 API of the running cluster (buckets, objects, listings, signed
    /// requests) on 127.0.0.1:9000, for the AWS CLI, boto3, rclone and other S3 tools;
    /// prints the access keys. Ctrl-C stops it.
    S3(cluster::s3::S3Args),
    /// Store a file as an object.
    Put(cluster::objects::PutArgs),
    /// Read an object back into a file.
    Get(cluster::objects::GetArgs),
    /// Delete an object.
    Rm(cluster::objects::KeyArgs),
    /// Print an object's size, chunks and chunk groups.
    Stat(cluster::objects::KeyArgs),
    /// List the objects (their sizes and names), or those under a prefix.
    Ls(cluster::objects::LsArgs),
    /// Show the running cluster: each server's rack, gear group, power state, watts,
    /// chunk groups and DVL bytes, the gear, and the energy saved so far. Exits
    /// non-zero when no cluster answers.
    Status(cluster::status::StatusArgs),
    /// Replay block traces open-loop against the running cluster (each device an
    /// object of 1 MiB chunks) and report latency, errors and energy in the
    /// simulator's shape.
    Replay(cluster::replay::ReplayArgs),
    /// Shift the cluster's gear (how many gear groups serve).
    Gear {
        #[command(subcommand)]
        command: cluster::status::GearCommand,
    },
    /// Run every experiment of a results document in one command, into one report
    /// directory with the paper's figures beside somnus's.
    Reproduce {
        #[command(subcommand)]
        command: reproduce::ReproduceCommand,
    },
    /// Show the built-in power profiles, topologies and synthetic trace presets.
    Show {
        #[command(subcommand)]
        command: show::ShowCommand,
    },
}

fn main() -> ExitCode {
    allocator::configure();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`somnus demo | head`): nothing is wrong.
        Err(error) if error.chain().any(|cause| cause.is::<output::StdoutClosed>()) => {
            ExitCode::SUCCESS
        }
        Err(error) => {
            output::note(format_args!("error: {}", output::error_message(&error)));
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Demo(args) => demo::run(args),
        Command::Trace { command } => trace::run(command),
        Command::Sim { command } => sim::run(command),
        Command::Bench { command } => bench::run(command),
        Command::Layout { command } => layout::run(command),
        Command::Logstore { command } => logstore::run(command),
        Command::Reproduce { command } => reproduce::run(command),
        Command::Show { command } => show::run(command),
        Command::Up(args) => cluster::up::run(args),
        Command::Mds(args) => cluster::node::run_mds(args),
        Command::Server(args) => cluster::node::run_server(args),
        Command::S3(args) => cluster::s3::run(args),
        Command::Put(args) => cluster::objects::put(args),
        Command::Get(args) => cluster::objects::get(args),
        Command::Rm(args) => cluster::objects::rm(args),
        Command::Stat(args) => cluster::objects::stat(args),
        Command::Ls(args) => cluster::objects::ls(args),
        Command::Status(args) => cluster::status::status(args),
        Command::Gear { command } => cluster::status::gear(command),
        Command::Replay(args) => cluster::replay::run(args),
    }
}
