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
    /// Serve the admission webhooks over TLS (and health on the admin port).
    Serve(Box<ServeArgs>),
    /// Certificates for the webhook and extender endpoints.
    #[command(subcommand)]
    Certs(CertsCommand),
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// gpugate config file (defaults: HAMi's NVIDIA defaults).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TLS address for the webhooks.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9443")]
    pub listen: std::net::SocketAddr,
    /// Serve the scheduler extender (/filter, /prioritize, /bind, /preempt)
    /// on this TLS address only, and the webhooks alone on --listen. Use a
    /// loopback address (127.0.0.1:9444) when kube-scheduler runs in the
    /// same pod: whoever can reach /bind can bind pods with gpugate's
    /// rights. Without it, both are served on --listen.
    #[arg(long, value_name = "ADDR")]
    pub extender_listen: Option<std::net::SocketAddr>,
    /// Plain HTTP address for /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:9090")]
    pub admin_listen: std::net::SocketAddr,
    /// Serving certificate (PEM); reloaded when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Serving key (PEM); reloaded when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Without --tls-cert/--tls-key: where gpugate makes, reuses and renews
    /// its own CA and serving certificate.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "certs",
        conflicts_with = "tls_cert"
    )]
    pub cert_dir: PathBuf,
    /// Extra DNS names for the self-made certificate (repeatable); localhost
    /// and 127.0.0.1 are always included.
    #[arg(long = "dns", value_name = "NAME")]
    pub dns: Vec<String>,
    /// How often the certificate files and the config file are re-read, in
    /// seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub reload_seconds: u64,
    /// Standalone: read Nodes, Pods, Namespaces and ResourceQuotas from this
    /// snapshot file (the format of `simulate --cluster`) instead of an API
    /// server.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["kubeconfig", "in_cluster"])]
    pub cluster: Option<PathBuf>,
    /// Watch the cluster through the API server of this kubeconfig file.
    #[arg(long, value_name = "FILE", conflicts_with = "in_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch the cluster through the API server of the pod's service account.
    #[arg(long)]
    pub in_cluster: bool,
    /// Self-managed certificates: keep the CA in this Secret
    /// (NAMESPACE/NAME), patch the caBundle of gpugate's webhook
    /// configurations (config `webhooks`), and sign the serving certificate
    /// into --cert-dir. Needs --kubeconfig or --in-cluster.
    /// The Service's DNS name (`--dns gpugate.gpugate.svc`) is required:
    /// kube-apiserver checks it.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        conflicts_with = "tls_cert",
        requires = "dns"
    )]
    pub self_signed_secret: Option<crate::server::cert_secret::SecretRef>,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a CA and a serving certificate signed by it: writes ca.crt,
    /// tls.crt, tls.key (and ca.key, to sign renewals with the same CA).
    Generate(CertsGenerateArgs),
}

#[derive(Debug, clap::Args)]
pub struct CertsGenerateArgs {
    /// Directory to write into (created if needed).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// DNS names of the serving certificate (repeatable), e.g.
    /// gpugate.gpugate.svc.
    #[arg(long = "dns", value_name = "NAME", required_unless_present = "ips")]
    pub dns: Vec<String>,
    /// IP addresses of the serving certificate (repeatable).
    #[arg(long = "ip", value_name = "IP")]
    pub ips: Vec<std::net::IpAddr>,
    /// Lifetime of the serving certificate in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub days: u32,
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
