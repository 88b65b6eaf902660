//! The gpugate binary: parse the command line, set up logging, run a command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use gpugate::cli::{
    CertsCommand, CertsGenerateArgs, Cli, ClusterSource, Command, DefragArgs, ExplainArgs, Output,
    ServeArgs, SimulateArgs, TopArgs,
};
use gpugate::cluster::Snapshot;
use gpugate::config::Config;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = gpugate::log::init(&cli.log) {
        eprintln!("gpugate: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Simulate(args) => simulate(args),
        Command::Serve(args) => serve(*args),
        Command::Certs(CertsCommand::Generate(args)) => certs_generate(args),
        Command::Top(args) => top(args),
        Command::Capacity(args) => capacity(args),
        Command::Explain(args) => explain(args),
        Command::Defrag(args) => defrag(args),
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
    let report = gpugate::simulate::simulate(&cluster, &pods.pods, &config, jiff::Timestamp::now());
    match args.output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

fn certs_generate(args: CertsGenerateArgs) -> anyhow::Result<()> {
    use gpugate::server::certs;
    let spec = certs::CertSpec {
        dns: args.dns,
        ips: args.ips,
        days: args.days,
    };
    let bundle = certs::generate(&spec, time::OffsetDateTime::now_utc())?;
    certs::write_dir(&args.out, &bundle)?;
    println!(
        "wrote {0}/ca.crt, {0}/tls.crt, {0}/tls.key and {0}/ca.key (valid {1} days)",
        args.out.display(),
        args.days
    );
    Ok(())
}

/// The cluster from a snapshot file, or read once from the API server.
fn read_cluster(source: &ClusterSource) -> anyhow::Result<Snapshot> {
    match (&source.cluster, &source.kubeconfig) {
        (Some(path), _) => Ok(Snapshot::load(path).context("--cluster")?),
        (None, Some(path)) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let (snapshot, unread) = runtime.block_on(async {
                let source = gpugate::cluster::client::ApiSource::Kubeconfig(path.clone());
                let client = gpugate::cluster::client::connect(&source).await?;
                gpugate::cluster::read_once::read_cluster(client)
                    .await
                    .context("reading Nodes and Pods from the API server")
            })?;
            for what in unread {
                eprintln!("gpugate: could not read {what}; judged without them");
            }
            Ok(snapshot)
        }
        (None, None) => anyhow::bail!("give --cluster FILE or --kubeconfig FILE"),
    }
}

fn top(args: TopArgs) -> anyhow::Result<()> {
    let (view, _) = read_cluster(&args.source)?.to_view();
    let report = gpugate::top::top(&view);
    match args.output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

fn capacity(args: TopArgs) -> anyhow::Result<()> {
    let (view, _) = read_cluster(&args.source)?.to_view();
    let report = gpugate::capacity::CapacityReport::of(view.state());
    match args.output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let Some((namespace, name)) = args.pod.split_once('/') else {
        anyhow::bail!("{:?}: give the pod as NAMESPACE/NAME", args.pod);
    };
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let cluster = read_cluster(&args.source)?;
    let explanation =
        gpugate::explain::explain(&cluster, namespace, name, &config, jiff::Timestamp::now())?;
    match args.output {
        Output::Json => println!("{}", explanation.to_json()),
        Output::Table => print!("{}", explanation.to_table()),
    }
    Ok(())
}

fn defrag(args: DefragArgs) -> anyhow::Result<()> {
    let only = match &args.pod {
        Some(pod) => match pod.split_once('/') {
            Some((ns, name)) => Some((ns.to_string(), name.to_string())),
            None => anyhow::bail!("{pod:?}: give the pod as NAMESPACE/NAME"),
        },
        None => None,
    };
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let cluster = read_cluster(&args.source)?;
    let only = only.as_ref().map(|(ns, name)| (ns.as_str(), name.as_str()));
    let report = gpugate::explain::defrag_plans(&cluster, only, &config, jiff::Timestamp::now())?;
    match args.output {
        Output::Json => println!("{}", report.to_json()),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(())
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(gpugate::serve::run(args))
}
