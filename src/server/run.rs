//! `gpugate serve`: certificates, the TLS webhook port and the admin port,
//! until SIGTERM or Ctrl-C.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::cluster::client::{self, ApiSource};
use crate::cluster::watch::{self as cluster_watch, WatchSet};
use crate::cluster::{SharedCluster, Snapshot};
use crate::config::Config;

use super::config_reload::ConfigFile;

use super::certs::{self, CertSpec, Ensured};
use super::metrics::Metrics;
use super::routes::{AppState, admin_router, webhook_router};
use super::serve_tls::{Timeouts, serve_tls};
use super::tls::{self, ReloadingCert};

/// Lifetime of self-made serving certificates.
const SELF_MADE_DAYS: u32 = 90;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    tls::install_default_provider();
    let (config_file, config) = match &args.config {
        Some(path) => {
            let (file, config) = ConfigFile::load(path.clone())?;
            (Some(file), config)
        }
        None => (None, Config::default()),
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let (cert_path, key_path) = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        _ => {
            let spec = CertSpec::local_and(&args.dns, SELF_MADE_DAYS);
            let dir = args.cert_dir.clone();
            let (what, renew_at) = certs::ensure_dir(&dir, &spec, time::OffsetDateTime::now_utc())
                .with_context(|| format!("--cert-dir {}", dir.display()))?;
            tracing::info!(dir = %dir.display(), ?what, %renew_at, "self-made certificate");
            tokio::spawn(renew_loop(dir.clone(), spec, renew_at, stopped()));
            (dir.join(certs::TLS_CERT), dir.join(certs::TLS_KEY))
        }
    };
    let cert = ReloadingCert::from_files(&cert_path, &key_path)?;
    tokio::spawn(tls::watch(
        cert.clone(),
        Duration::from_secs(args.reload_seconds),
        stopped(),
    ));
    let tls_config = Arc::new(tls::server_config(cert.clone())?);

    let metrics = Metrics::new(Some(cert.clone()));
    let cluster = cluster_view(&args, &metrics, stopped()).await?;
    let metrics = match &cluster {
        Some(c) => metrics.observing(c.clone()),
        None => metrics,
    };
    let state = AppState::with_cluster(config, metrics, cluster);
    if let Some(file) = config_file {
        let errors = state.metrics.config_reload_errors.clone();
        tokio::spawn(file.watch(
            state.config.clone(),
            Duration::from_secs(args.reload_seconds),
            move || {
                errors.inc();
            },
            stopped(),
        ));
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}", args.listen))?;
    let admin = TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("--admin-listen {}", args.admin_listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        admin = %admin.local_addr()?,
        cert = %cert_path.display(),
        "gpugate serving"
    );

    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("stopping: finishing requests in flight");
        let _ = stop_tx.send(true);
    });
    let admin_server =
        axum::serve(admin, admin_router(state.clone())).with_graceful_shutdown(stopped());
    let webhook_server = serve_tls(
        listener,
        tls_config,
        webhook_router(state),
        Timeouts::default(),
        stopped(),
    );
    let (admin_result, ()) = tokio::join!(admin_server, webhook_server);
    admin_result.context("admin server")?;
    Ok(())
}

/// The cluster view: loaded from `--cluster`, or watched through the API
/// server (`--kubeconfig`, `--in-cluster`); none without those flags (the
/// webhooks then judge each pod alone, without quotas).
async fn cluster_view(
    args: &ServeArgs,
    metrics: &Metrics,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Arc<SharedCluster>>> {
    if let Some(path) = &args.cluster {
        let snapshot = Snapshot::load(path)?;
        let (view, report) = snapshot.to_view();
        for problem in report
            .unregistered_nodes
            .iter()
            .chain(&report.unaccounted_pods)
        {
            tracing::warn!(%problem, "snapshot");
        }
        let counts = view.counts();
        tracing::info!(
            file = %path.display(),
            nodes = counts.nodes,
            gpus = counts.gpus,
            allocations = counts.allocations,
            "standalone cluster loaded"
        );
        return Ok(Some(Arc::new(SharedCluster::new(view, true))));
    }
    let source = match (&args.kubeconfig, args.in_cluster) {
        (Some(path), _) => ApiSource::Kubeconfig(path.clone()),
        (None, true) => ApiSource::InCluster,
        (None, false) => return Ok(None),
    };
    let client = client::connect(&source).await?;
    let shared = Arc::new(SharedCluster::default());
    tokio::spawn(cluster_watch::run(
        client,
        shared.clone(),
        WatchSet { namespaces: false },
        Arc::new(metrics.watch.clone()),
        stop,
    ));
    Ok(Some(shared))
}

/// Renews the self-made serving certificate at two thirds of its life; the
/// file watcher then puts it in service.
async fn renew_loop(
    dir: std::path::PathBuf,
    spec: CertSpec,
    mut renew_at: time::OffsetDateTime,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let wait = (renew_at - time::OffsetDateTime::now_utc())
            .try_into()
            .unwrap_or(Duration::ZERO)
            // Re-check at least hourly: timers drift across suspends.
            .min(Duration::from_secs(3600));
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match certs::ensure_dir(&dir, &spec, time::OffsetDateTime::now_utc()) {
            Ok((what, next)) => {
                if what != Ensured::Reused {
                    tracing::info!(?what, renew_at = %next, "serving certificate renewed");
                }
                renew_at = next;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot renew the serving certificate; retrying in a minute");
                renew_at = time::OffsetDateTime::now_utc() + time::Duration::minutes(1);
            }
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
