//! Command line: `gpugate <command> [flags]`. Every flag can also be set
//! from a `GPUGATE_…` environment variable (the flag wins); `serve`'s flags
//! come in groups, as `--help` shows them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::engine::{GpuPolicy, NodePolicy};
use crate::server::cert_secret::SecretRef;

#[derive(Debug, Parser)]
#[command(
    name = "gpugate",
    version,
    about = "GPU-sharing admission webhook and scheduler extender for Kubernetes, wire-compatible with HAMi"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Place pods on a cluster snapshot and show the result.
    Simulate(SimulateArgs),
    /// Serve the admission webhooks and the scheduler extender over TLS
    /// (and health and metrics on the admin port).
    Serve(Box<ServeArgs>),
    /// Certificates for the webhook and extender endpoints.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Each node's GPUs: slices, memory and cores in use and free, from a
    /// snapshot file or the API server (read once, with your kubeconfig).
    Top(TopArgs),
    /// What the cluster can still take, per kind of device and per node:
    /// free memory and cores, the largest slice one device can still give
    /// and whole devices free; to compare with a quota (a Kueue
    /// ClusterQueue) that counts only totals.
    Capacity(TopArgs),
    /// Why a pod is pending: each node's verdict in words, the nearest
    /// nodes and what they lack, the pods whose eviction would make room,
    /// and quota or namespace policy refusals.
    Explain(ExplainArgs),
    /// Defragmentation's plans, acting on nothing: for a pending pod (or
    /// every pending GPU pod), the pods whose moving to other nodes lets it
    /// fit, from a snapshot file or the API server (read once).
    Defrag(DefragArgs),
}

/// Logging, for every command.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// What to log: a level (error, warn, info, debug, trace) or a
    /// tracing filter (`info,gpugate=debug`). Without it RUST_LOG is read,
    /// then `info`.
    #[arg(long, global = true, value_name = "FILTER", env = "GPUGATE_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// `plain` lines for a person, or `json`: one object per line with the
    /// fields of the spans it happened in (request uid, pod, verb, outcome).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = LogFormat::Plain,
        env = "GPUGATE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// What gpugate serves, and its config.
#[derive(Debug, Args)]
#[command(next_help_heading = "Server")]
pub struct ServerArgs {
    /// gpugate config file (defaults: HAMi's NVIDIA defaults).
    #[arg(long, value_name = "FILE", env = "GPUGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// TLS address for the webhooks.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:9443",
        env = "GPUGATE_LISTEN"
    )]
    pub listen: SocketAddr,
    /// Serve the scheduler extender (/filter, /prioritize, /bind, /preempt)
    /// on this TLS address only, and the webhooks alone on --listen. Use a
    /// loopback address (127.0.0.1:9444) when kube-scheduler runs in the
    /// same pod: whoever can reach /bind can bind pods with gpugate's
    /// rights. Without it, both are served on --listen.
    #[arg(long, value_name = "ADDR", env = "GPUGATE_EXTENDER_LISTEN")]
    pub extender_listen: Option<SocketAddr>,
    /// How often the certificate files and the config file are re-read, in
    /// seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..=3600),
        env = "GPUGATE_RELOAD_SECONDS"
    )]
    pub reload_seconds: u64,
    /// Testing only: `POST /faults/<point>` on the admin port makes this
    /// process fail on purpose (src/faults.rs). Never in production.
    #[arg(long, hide = true, env = "GPUGATE_FAULT_INJECTION")]
    pub fault_injection: bool,
}

/// The serving certificate.
#[derive(Debug, Args)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// Serving certificate (PEM); reloaded when the file changes.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "GPUGATE_TLS_CERT"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Serving key (PEM); reloaded when the file changes.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "GPUGATE_TLS_KEY"
    )]
    pub tls_key: Option<PathBuf>,
    /// Without --tls-cert/--tls-key: where gpugate makes, reuses and renews
    /// its own CA and serving certificate.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "certs",
        conflicts_with = "tls_cert",
        env = "GPUGATE_CERT_DIR"
    )]
    pub cert_dir: PathBuf,
    /// Extra DNS names for the self-made certificate (repeatable; in the
    /// variable, comma-separated); localhost and 127.0.0.1 are always
    /// included.
    #[arg(
        long = "dns",
        value_name = "NAME",
        env = "GPUGATE_DNS",
        value_delimiter = ','
    )]
    pub dns: Vec<String>,
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
        requires = "dns",
        env = "GPUGATE_SELF_SIGNED_SECRET"
    )]
    pub self_signed_secret: Option<SecretRef>,
}

/// Health, readiness and metrics.
#[derive(Debug, Args)]
#[command(next_help_heading = "Admin")]
pub struct AdminArgs {
    /// Plain HTTP address for /healthz, /readyz and /metrics.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "0.0.0.0:9090",
        env = "GPUGATE_ADMIN_LISTEN"
    )]
    pub admin_listen: SocketAddr,
}

/// Where the cluster state comes from.
#[derive(Debug, Args)]
#[command(next_help_heading = "Cluster")]
pub struct ClusterArgs {
    /// Standalone: read Nodes, Pods, Namespaces and ResourceQuotas from this
    /// snapshot file (the format of `simulate --cluster`) instead of an API
    /// server.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["kubeconfig", "in_cluster"],
        env = "GPUGATE_CLUSTER"
    )]
    pub cluster: Option<PathBuf>,
    /// Watch the cluster through the API server of this kubeconfig file.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "in_cluster",
        env = "GPUGATE_KUBECONFIG"
    )]
    pub kubeconfig: Option<PathBuf>,
    /// Watch the cluster through the API server of the pod's service account.
    #[arg(long, env = "GPUGATE_IN_CLUSTER")]
    pub in_cluster: bool,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Make a CA and a serving certificate signed by it: writes ca.crt,
    /// tls.crt, tls.key (and ca.key, to sign renewals with the same CA).
    Generate(CertsGenerateArgs),
}

#[derive(Debug, Args)]
pub struct CertsGenerateArgs {
    /// Directory to write into (created if needed).
    #[arg(long, value_name = "DIR", env = "GPUGATE_CERTS_OUT")]
    pub out: PathBuf,
    /// DNS names of the serving certificate (repeatable; in the variable,
    /// comma-separated), e.g. gpugate.gpugate.svc.
    #[arg(
        long = "dns",
        value_name = "NAME",
        required_unless_present = "ips",
        env = "GPUGATE_DNS",
        value_delimiter = ','
    )]
    pub dns: Vec<String>,
    /// IP addresses of the serving certificate (repeatable; in the
    /// variable, comma-separated).
    #[arg(
        long = "ip",
        value_name = "IP",
        env = "GPUGATE_IPS",
        value_delimiter = ','
    )]
    pub ips: Vec<std::net::IpAddr>,
    /// Lifetime of the serving certificate in days.
    #[arg(
        long,
        default_value_t = 365,
        value_parser = clap::value_parser!(u32).range(1..=3650),
        env = "GPUGATE_CERTS_DAYS"
    )]
    pub days: u32,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Multi-document YAML of Node objects (HAMi register annotations) and
    /// running Pod objects (HAMi allocation annotations).
    #[arg(long, value_name = "CLUSTER.yaml", env = "GPUGATE_CLUSTER")]
    pub cluster: PathBuf,
    /// Multi-document YAML of Pod objects, placed one after another.
    #[arg(long, value_name = "PODS.yaml", env = "GPUGATE_PODS")]
    pub pods: PathBuf,
    /// gpugate config file (defaults: HAMi's NVIDIA defaults).
    #[arg(long, value_name = "gpugate.yaml", env = "GPUGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Default node policy (a pod's hami.io/node-scheduler-policy wins).
    #[arg(long, value_parser = parse_node_policy, env = "GPUGATE_NODE_POLICY")]
    pub node_policy: Option<NodePolicy>,
    /// Default GPU policy (a pod's hami.io/gpu-scheduler-policy wins).
    #[arg(long, value_parser = parse_gpu_policy, env = "GPUGATE_GPU_POLICY")]
    pub gpu_policy: Option<GpuPolicy>,
    #[arg(long, value_enum, default_value_t = Output::Table, env = "GPUGATE_OUTPUT")]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub source: ClusterSource,
    #[arg(long, value_enum, default_value_t = Output::Table, env = "GPUGATE_OUTPUT")]
    pub output: Output,
}

/// Where `top` and `explain` read the cluster: a snapshot file, or the API
/// server once.
#[derive(Debug, Args)]
pub struct ClusterSource {
    /// A cluster snapshot file (the format of `simulate --cluster`).
    #[arg(
        long,
        value_name = "CLUSTER.yaml",
        conflicts_with = "kubeconfig",
        required_unless_present = "kubeconfig",
        env = "GPUGATE_CLUSTER"
    )]
    pub cluster: Option<PathBuf>,
    /// Read the cluster once through the API server of this kubeconfig
    /// file, with its user's rights: Nodes and Pods, and Namespaces,
    /// ResourceQuotas and NodeResourceTopology where readable.
    #[arg(long, value_name = "FILE", env = "GPUGATE_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The pod, as NAMESPACE/NAME.
    #[arg(value_name = "NAMESPACE/POD", env = "GPUGATE_EXPLAIN_POD")]
    pub pod: String,
    #[command(flatten)]
    pub source: ClusterSource,
    /// gpugate config file: namespace policies and defaults, as the
    /// server uses them (defaults: HAMi's NVIDIA defaults).
    #[arg(long, value_name = "gpugate.yaml", env = "GPUGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Output::Table, env = "GPUGATE_OUTPUT")]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct DefragArgs {
    /// Print the plans (the one thing `defrag` does from the command line:
    /// `gpugate serve` acts on them, for namespaces that opted in).
    #[arg(long, required = true, env = "GPUGATE_DEFRAG_PLAN")]
    pub plan: bool,
    /// The pending pod, as NAMESPACE/NAME; every pending GPU pod without it.
    #[arg(value_name = "NAMESPACE/POD", env = "GPUGATE_DEFRAG_POD")]
    pub pod: Option<String>,
    #[command(flatten)]
    pub source: ClusterSource,
    /// gpugate config file: which namespaces opted in, and the limits.
    #[arg(long, value_name = "gpugate.yaml", env = "GPUGATE_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Output::Table, env = "GPUGATE_OUTPUT")]
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn the_definitions_hold_together() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_flag_has_a_gpugate_variable() {
        fn walk(cmd: &clap::Command, path: &str) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                let env = arg.get_env().and_then(|e| e.to_str());
                assert!(
                    env.is_some_and(|e| e.starts_with("GPUGATE_")),
                    "{path} --{id} has no GPUGATE_ variable"
                );
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()));
            }
        }
        walk(&Cli::command(), "gpugate");
    }

    #[test]
    fn serve_keeps_its_flags_in_groups() {
        let cli = Cli::try_parse_from([
            "gpugate",
            "serve",
            "--listen",
            "127.0.0.1:1",
            "--admin-listen",
            "127.0.0.1:2",
            "--dns",
            "a.svc",
            "--dns",
            "b.svc",
            "--cluster",
            "c.yaml",
            "--log-format",
            "json",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command else {
            panic!("not serve");
        };
        assert_eq!(args.server.listen.to_string(), "127.0.0.1:1");
        assert_eq!(args.admin.admin_listen.to_string(), "127.0.0.1:2");
        assert_eq!(args.tls.dns, ["a.svc", "b.svc"]);
        assert_eq!(args.cluster.cluster, Some(PathBuf::from("c.yaml")));
        assert_eq!(cli.log.log_format, LogFormat::Json);
        // The constraints of before still hold.
        for bad in [
            &["gpugate", "serve", "--tls-cert", "x"][..],
            &["gpugate", "serve", "--cluster", "c", "--in-cluster"],
            &["gpugate", "serve", "--self-signed-secret", "ns/n"],
            &["gpugate", "serve", "--reload-seconds", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
