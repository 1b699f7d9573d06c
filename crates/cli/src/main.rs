//! `atoll`: run WebAssembly programs on per-core kernels.
//!
//! `run`, `ps` and `kill` talk to a running node (`atoll node`) when there is
//! one, and otherwise start an embedded node for the length of the command.

mod commands;
mod json;
mod stdin;
mod top;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "atoll",
    version,
    about = "A multikernel layer that runs WebAssembly processes on per-core kernels"
)]
struct Cli {
    /// Where prepared modules and compiled code are cached
    /// [default: $ATOLL_CACHE, else $XDG_CACHE_HOME/atoll, else ~/.cache/atoll]
    #[arg(long, global = true, value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Control socket of a running node [default: $ATOLL_SOCKET, else $XDG_RUNTIME_DIR/atoll.sock]
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// More log output (-v info, -vv debug); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program as an atoll process and exit with its status
    Run(commands::RunArgs),
    /// Run a node: kernels plus a control socket for run, ps and kill
    Node(commands::NodeArgs),
    /// List the processes of the running node
    Ps(commands::PsArgs),
    /// Show the load tree (DQDT) of the running node's cluster
    Top(top::TopArgs),
    /// End a process of the running node
    Kill(commands::KillArgs),
    /// Move a running process of the running node to another kernel, live
    Migrate(commands::MigrateArgs),
    /// Write a process of the running node to a file
    Checkpoint(commands::CheckpointArgs),
    /// Run a checkpoint file on the running node, attached to this terminal
    Restore(commands::RestoreArgs),
    /// Create, list and end domains (isolation compartments for IPC)
    Domain(commands::DomainArgs),
    /// Per-kernel IPC counters of the running node
    Ipc(commands::IpcArgs),
    /// The URL of the running node's dashboard (`atoll node --http`)
    Dashboard(commands::DashboardArgs),
    /// Make a wasm32-wasi module migratable (safepoints + Asyncify)
    Prepare(commands::PrepareArgs),
    /// Make the cluster's certificate authority and issue node certificates
    Ca(commands::CaArgs),
    /// Measure atoll against the Linux alternatives, side by side
    Bench(atoll_bench::BenchArgs),
    /// The JSON Schema of a `--json` output (docs/json/)
    Schema(json::SchemaArgs),
}

fn main() {
    let cli = Cli::parse();
    let filter = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let ctx = commands::Context::new(cli.cache, cli.socket);
    let result = match cli.command {
        Command::Run(a) => commands::run(&ctx, a),
        Command::Node(a) => commands::node(&ctx, a).map(|()| 0),
        Command::Ps(a) => commands::ps(&ctx, a).map(|()| 0),
        Command::Top(a) => top::top(&ctx, a).map(|()| 0),
        Command::Kill(a) => commands::kill(&ctx, a).map(|()| 0),
        Command::Migrate(a) => commands::migrate(&ctx, a).map(|()| 0),
        Command::Checkpoint(a) => commands::checkpoint(&ctx, a).map(|()| 0),
        Command::Restore(a) => commands::restore(&ctx, a),
        Command::Domain(a) => commands::domain(&ctx, a).map(|()| 0),
        Command::Ipc(a) => commands::ipc(&ctx, a).map(|()| 0),
        Command::Dashboard(a) => commands::dashboard(&ctx, a).map(|()| 0),
        Command::Prepare(a) => commands::prepare(a).map(|()| 0),
        Command::Ca(a) => commands::ca(a).map(|()| 0),
        Command::Bench(a) => atoll_bench::run(&ctx.cache, a).map(|()| 0),
        Command::Schema(a) => json::schema_command(a).map(|()| 0),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("atoll: {}", atoll_node::report(&e));
            std::process::exit(1);
        }
    }
}
