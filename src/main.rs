//! The gpugate binary: parse the command line and run a command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use gpugate::cli::{Cli, Command, Output, SimulateArgs};
use gpugate::cluster::Snapshot;
use gpugate::config::Config;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpugate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(p) = args.node_policy {
        config.scheduler.node_scheduler_policy = p;
    }
    if let Some(p) = args.gpu_policy {
        config.scheduler.gpu_scheduler_policy = p;
    }
    let cluster = Snapshot::load(&args.cluster).context("--cluster")?;
    let pods = Snapshot::load(&args.pods).context("--pods")?;
    if !pods.nodes.is_empty() {
        anyhow::bail!(
            "--pods {}: holds {} Node objects; nodes belong in --cluster",
            args.pods.display(),
            pods.nodes.len()
        );
    }
    let report = gpugate::simulate::simulate(&cluster, &pods.pods, &config);
    match args.output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}
