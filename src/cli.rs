//! Command line: `gpugate <command> [flags]`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::engine::{GpuPolicy, NodePolicy};

#[derive(Debug, Parser)]
#[command(
    name = "gpugate",
    version,
    about = "GPU-sharing admission webhook and scheduler extender for Kubernetes, wire-compatible with HAMi"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Place pods on a cluster snapshot and show the result.
    Simulate(SimulateArgs),
}

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Multi-document YAML of Node objects (HAMi register annotations) and
    /// running Pod objects (HAMi allocation annotations).
    #[arg(long, value_name = "CLUSTER.yaml")]
    pub cluster: PathBuf,
    /// Multi-document YAML of Pod objects, placed one after another.
    #[arg(long, value_name = "PODS.yaml")]
    pub pods: PathBuf,
    /// gpugate config file (defaults: HAMi's NVIDIA defaults).
    #[arg(long, value_name = "gpugate.yaml")]
    pub config: Option<PathBuf>,
    /// Default node policy (a pod's hami.io/node-scheduler-policy wins).
    #[arg(long, value_parser = parse_node_policy)]
    pub node_policy: Option<NodePolicy>,
    /// Default GPU policy (a pod's hami.io/gpu-scheduler-policy wins).
    #[arg(long, value_parser = parse_gpu_policy)]
    pub gpu_policy: Option<GpuPolicy>,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

fn parse_node_policy(s: &str) -> Result<NodePolicy, String> {
    s.parse()
        .map_err(|e: crate::engine::policy::UnknownPolicy| e.to_string())
}

fn parse_gpu_policy(s: &str) -> Result<GpuPolicy, String> {
    s.parse()
        .map_err(|e: crate::engine::policy::UnknownPolicy| e.to_string())
}
