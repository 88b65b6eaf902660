//! The gpugate binary: parse the command line, set up logging, run a command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;

use gpugate::cli::{
    CertsCommand, CertsGenerateArgs, Cli, Command, Output, ServeArgs, SimulateArgs, TopArgs,
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

fn top(args: TopArgs) -> anyhow::Result<()> {
    let snapshot = match (&args.cluster, &args.kubeconfig) {
        (Some(path), _) => Snapshot::load(path).context("--cluster")?,
        (None, Some(path)) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(async {
                let source = gpugate::cluster::client::ApiSource::Kubeconfig(path.clone());
                let client = gpugate::cluster::client::connect(&source).await?;
                gpugate::top::read_cluster(client)
                    .await
                    .context("reading Nodes and Pods from the API server")
            })?
        }
        (None, None) => anyhow::bail!("give --cluster FILE or --kubeconfig FILE"),
    };
    let (view, _) = snapshot.to_view();
    let report = gpugate::top::top(&view);
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
