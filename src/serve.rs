//! `gpugate serve`: certificates, the TLS webhook port and the admin port,
//! until SIGTERM or Ctrl-C; SIGHUP re-reads the config and certificates.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::bind::ApiBinder;
use crate::cli::ServeArgs;
use crate::cluster::api::{ApiCalls, ClientLimit};
use crate::cluster::client::{self, ApiSource};
use crate::cluster::events::EventSink;
use crate::cluster::watch::{self as cluster_watch, WatchSet};
use crate::cluster::{SharedCluster, snapshot};
use crate::config::Config;
use crate::config::api::ApiLimits;
use crate::controllers::preemption::Preemptor;
use crate::extender::BindMode;
use crate::supervisor::{Supervisor, TaskMetrics};

use crate::server::config_reload::ConfigFile;

use crate::config::server::ServerConfig;
use crate::server::cert_secret::{InClusterCerts, Pass};
use crate::server::certs::{self, CertSpec, Ensured};
use crate::server::limits::{MAX_BODY_BYTES, MAX_EXTENDER_BODY_BYTES};
use crate::server::listener::{self, Listener, Transport};
use crate::server::metrics::Metrics;
use crate::server::routes::{
    AppState, admin_router, admission_router, extender_router, webhook_router,
};
use crate::server::signals::Signals;
use crate::server::tls::{self, ReloadingCert};

/// Lifetime of self-made serving certificates.
const SELF_MADE_DAYS: u32 = 90;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    // First of all: from here on SIGHUP reloads instead of killing.
    let mut signals = Signals::register().context("signal handlers")?;
    if args.server.fault_injection {
        crate::faults::enable();
    }
    tls::install_default_provider();
    let (config_file, config) = match &args.server.config {
        Some(path) => {
            let (file, config) = ConfigFile::load(path.clone()).await?;
            tracing::info!(
                path = %path.display(),
                sha256 = file.stamp().short(),
                "config loaded"
            );
            (Some(file), config)
        }
        None => (None, Config::default()),
    };
    let server_config = config.server.clone();
    let tls_listeners = if args.server.extender_listen.is_some() {
        2
    } else {
        1
    };
    match crate::server::limits::raise_open_file_limit(
        server_config.descriptors_needed(tls_listeners),
    ) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(problem) => tracing::warn!("{problem}"),
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks = TaskMetrics::default();
    let supervisor = Supervisor::new(stop_rx, tasks.clone());
    let stopped = || supervisor.stopped();
    let lifecycle = Lifecycle::default();
    let reload = Reload {
        config: signals.reload_config.clone(),
        cert: signals.reload_cert.clone(),
    };
    let mut forward_hangups = signals.hangup_forwarder();
    supervisor.spawn("sighup", move |_| forward_hangups());
    {
        // A restarted signal task answers the signals still to come.
        let signals = Arc::new(tokio::sync::Mutex::new(signals));
        let (lifecycle, delay) = (lifecycle.clone(), server_config.shutdown_delay());
        supervisor.spawn("signals", move |_| {
            let (signals, stop, lifecycle) = (signals.clone(), stop_tx.clone(), lifecycle.clone());
            async move { answer_signals(&mut *signals.lock().await, stop, lifecycle, delay).await }
        });
    }
    // Start-up can wait a long time (the API server, the first
    // self-managed certificate pass): a stop signal ends it at once.
    let started = tokio::select! {
        started = start(&args, config_file, config, reload, &supervisor, &lifecycle, tasks) => started?,
        () = stopped() => {
            tracing::info!("stopped during start-up");
            return Ok(());
        }
    };
    lifecycle.serving.store(true, Ordering::Relaxed);
    started.serve(&server_config, &stopped).await;
    tracing::info!("stopped");
    Ok(())
}

/// What the signal task and the server share about the process's life.
#[derive(Clone, Debug, Default)]
struct Lifecycle {
    /// Set on SIGTERM: `/readyz` answers 503 (`AppState::shutting_down`).
    shutting_down: Arc<AtomicBool>,
    /// The listeners are open: SIGTERM then waits for the endpoints.
    serving: Arc<AtomicBool>,
}

/// Whom SIGHUP wakes.
struct Reload {
    config: Arc<tokio::sync::Notify>,
    cert: Arc<tokio::sync::Notify>,
}

/// SIGTERM: readiness off, serve on for `delay` (not during start-up, not
/// for Ctrl-C, not after a second signal), then stop; a third signal
/// exits at once.
async fn answer_signals(
    signals: &mut Signals,
    stop: watch::Sender<bool>,
    lifecycle: Lifecycle,
    delay: Duration,
) {
    let which = signals.terminated().await;
    // Readiness off first: the pod leaves the Service's endpoints while it
    // keeps answering whoever still routes to it. Ctrl-C (SIGINT) is a
    // person at a terminal: no endpoints to wait for.
    lifecycle.shutting_down.store(true, Ordering::Relaxed);
    let delay = if which == "SIGTERM" && lifecycle.serving.load(Ordering::Relaxed) {
        delay
    } else {
        Duration::ZERO
    };
    tracing::info!(
        signal = which,
        serving_for = ?delay,
        "stopping: readiness off, still serving while endpoints are removed"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        which = signals.terminated() => {
            tracing::info!(signal = which, "second signal: stopping now");
        }
    }
    tracing::info!("stopping: no new connections, finishing requests in flight");
    let _ = stop.send(true);
    let which = signals.terminated().await;
    tracing::warn!(
        signal = which,
        "third signal: exiting without finishing requests in flight"
    );
    std::process::exit(1);
}

/// Everything `serve` needs once start-up is done: the state, the bound
/// ports and the TLS configuration.
struct Started {
    state: Arc<AppState>,
    webhook_tcp: TcpListener,
    admin: TcpListener,
    extender: Option<TcpListener>,
    tls_config: Arc<rustls::ServerConfig>,
}

/// Start-up: the API client, certificates, the cluster view, the state,
/// the config and certificate watchers, and the ports.
async fn start(
    args: &ServeArgs,
    config_file: Option<ConfigFile>,
    config: Config,
    reload: Reload,
    supervisor: &Supervisor,
    lifecycle: &Lifecycle,
    tasks: TaskMetrics,
) -> anyhow::Result<Started> {
    let client = match api_source(args)? {
        Some(source) => Some(client::connect(&source).await?),
        None => None,
    };
    // Shared with the handlers and the config file watcher, so that the
    // certificate loop sees the current webhook names.
    let config = Arc::new(ArcSwap::from_pointee(config));
    let config_now = {
        let c = config.clone();
        move || c.load().webhooks.clone()
    };
    let (cert_path, key_path) = match (
        &args.tls.tls_cert,
        &args.tls.tls_key,
        &args.tls.self_signed_secret,
    ) {
        (Some(c), Some(k), _) => (c.clone(), k.clone()),
        (_, _, Some(secret)) => {
            let Some(client) = client.clone() else {
                anyhow::bail!("--self-signed-secret needs --kubeconfig or --in-cluster");
            };
            let spec = CertSpec::local_and(&args.tls.dns, SELF_MADE_DAYS);
            let certs = Arc::new(InClusterCerts::new(
                client,
                secret.clone(),
                spec,
                args.tls.cert_dir.clone(),
            ));
            let renew_at = first_in_cluster_pass(&certs, &config_now).await?;
            let dir = args.tls.cert_dir.clone();
            let renew = move || {
                let certs = certs.clone();
                let names = config_now();
                async move {
                    let pass = certs
                        .ensure(&names, time::OffsetDateTime::now_utc())
                        .await
                        .map_err(|e| e.to_string())?;
                    log_pass(&pass);
                    Ok(pass.renew_at)
                }
            };
            supervisor.spawn("certificate-renewal", move |stopped| {
                renew_loop(renew_at, IN_CLUSTER_RECHECK, stopped, renew.clone())
            });
            (dir.join(certs::TLS_CERT), dir.join(certs::TLS_KEY))
        }
        _ => {
            let spec = CertSpec::local_and(&args.tls.dns, SELF_MADE_DAYS);
            let dir = args.tls.cert_dir.clone();
            let (what, renew_at) = certs::ensure_dir(&dir, &spec, time::OffsetDateTime::now_utc())
                .with_context(|| format!("--cert-dir {}", dir.display()))?;
            tracing::info!(dir = %dir.display(), ?what, %renew_at, "self-made certificate");
            let renew_dir = dir.clone();
            let renew = move || {
                let result = certs::ensure_dir(&renew_dir, &spec, time::OffsetDateTime::now_utc())
                    .map(|(what, next)| {
                        if what != Ensured::Reused {
                            tracing::info!(?what, renew_at = %next, "serving certificate renewed");
                        }
                        next
                    })
                    .map_err(|e| e.to_string());
                std::future::ready(result)
            };
            supervisor.spawn("certificate-renewal", move |stopped| {
                renew_loop(renew_at, LOCAL_RECHECK, stopped, renew.clone())
            });
            (dir.join(certs::TLS_CERT), dir.join(certs::TLS_KEY))
        }
    };
    let cert = ReloadingCert::from_files(&cert_path, &key_path)?;
    {
        let (cert, every, now) = (
            cert.clone(),
            Duration::from_secs(args.server.reload_seconds),
            reload.cert,
        );
        supervisor.spawn("certificate-reload", move |stopped| {
            tls::watch(cert.clone(), every, now.clone(), stopped)
        });
    }
    let tls_config = Arc::new(tls::server_config(cert.clone())?);

    let metrics = Metrics::new(Some(cert.clone())).with_tasks(tasks);
    let cluster = cluster_view(
        args,
        &config.load().api,
        client.clone(),
        &metrics,
        supervisor,
    )?;
    let metrics = match &cluster {
        Some(c) => metrics.observing(c.clone(), config.clone()),
        None => metrics,
    };
    // Only against a live API server: are the webhook configurations still
    // sending gpugate the pods of its configured resources? Does this
    // replica's kube-scheduler lead (`hami_scheduler_is_leader`)?
    if let (None, Some(client)) = (&args.cluster.cluster, &client) {
        let (client, config, scope, gauge) = (
            client.clone(),
            config.clone(),
            metrics.webhook_scope.clone(),
            metrics.leader_gauge(),
        );
        let (lease_client, lease_config) = (client.clone(), config.clone());
        // With a Lease to read, no replica leads until it has read it: a
        // standby must not act as the leader (Kueue's admission check)
        // for the moment before its first read.
        if config.load().scheduler.leader_lease().is_some() {
            gauge.set(0);
        }
        supervisor.spawn("webhook-scope", move |stopped| {
            crate::cluster::webhook_scope::watch(
                client.clone(),
                config.clone(),
                scope.clone(),
                stopped,
            )
        });
        supervisor.spawn("leader-lease", move |stopped| {
            crate::cluster::leader::watch_lease(
                lease_client.clone(),
                lease_config.clone(),
                gauge.clone(),
                stopped,
            )
        });
    }
    // Binds, gpugate's own preemption and the orphan sweep go through the
    // API server each with its own handle, behind one client-side limit
    // (none unless `api.qps` sets one), and with one event sink.
    let api_limits = config.load().api.clone();
    let client_limit = ClientLimit::new(&api_limits, &metrics.api_client);
    let (bind_mode, preemptor, events) = match (&args.cluster.cluster, &client) {
        (None, Some(client)) => {
            let scheduler = config.load().scheduler.name.clone();
            let instance = std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .ok();
            let events = EventSink::spawn(
                supervisor,
                client.clone(),
                &scheduler,
                instance,
                metrics.events.clone(),
            );
            let preemptor = Arc::new(Preemptor::new(
                ApiCalls::new(client.clone(), &api_limits, client_limit.clone()),
                events.clone(),
                metrics.preemption.clone(),
            ));
            let binder = ApiBinder::new(
                ApiCalls::new(client.clone(), &api_limits, client_limit.clone()),
                events.clone(),
                metrics.bind.clone(),
            );
            (BindMode::Api(Arc::new(binder)), Some(preemptor), events)
        }
        _ => (BindMode::Ledger, None, EventSink::none()),
    };
    if let Some(cluster) = &cluster {
        let (cluster, expired, events) = (
            cluster.clone(),
            metrics.bind.assumed_expired.clone(),
            events.clone(),
        );
        supervisor.spawn("expiry", move |stopped| {
            crate::controllers::expiry::run(
                cluster.clone(),
                expired.clone(),
                events.clone(),
                stopped,
            )
        });
    }
    if let (Some(preemptor), Some(cluster)) = (&preemptor, &cluster) {
        let (preemptor, cluster, config) = (preemptor.clone(), cluster.clone(), config.clone());
        supervisor.spawn("preemption", move |stopped| {
            preemptor
                .clone()
                .run(cluster.clone(), config.clone(), stopped)
        });
    }
    if let (None, Some(client), Some(cluster)) = (&args.cluster.cluster, &client, &cluster) {
        let api = Arc::new(ApiCalls::new(
            client.clone(),
            &api_limits,
            client_limit.clone(),
        ));
        let (cluster, config, bind_metrics, events) = (
            cluster.clone(),
            config.clone(),
            metrics.bind.clone(),
            events.clone(),
        );
        supervisor.spawn("orphan-sweep", move |stopped| {
            crate::controllers::orphaned_locks::run(
                api.clone(),
                cluster.clone(),
                config.clone(),
                (bind_metrics.clone(), events.clone()),
                stopped,
            )
        });
    }
    // Kueue's admission check, where the config names its controller:
    // read at start (turning it on or off takes a restart).
    if let (None, Some(client), Some(cluster), true) = (
        &args.cluster.cluster,
        &client,
        &cluster,
        config.load().kueue.enabled(),
    ) {
        let check = (
            client.clone(),
            cluster.clone(),
            config.clone(),
            metrics.leader_gauge(),
            metrics.kueue.clone(),
            events.clone(),
        );
        // It moves pods through gpugate's own defragmentation (one limit of
        // moves per minute for both).
        let defrag = preemptor.as_ref().map(|p| p.defragmenter());
        let (limits, limit) = (api_limits.clone(), client_limit.clone());
        supervisor.spawn("kueue-admission-check", move |stopped| {
            let (client, cluster, config, leader, kueue, events) = check.clone();
            let api = ApiCalls::new(client.clone(), &limits, limit.clone());
            let check = crate::kueue::controller::AdmissionCheck::new(
                client, cluster, config, leader, kueue, events,
            );
            match &defrag {
                Some(d) => check.with_defragmentation(d.clone(), api),
                None => check,
            }
            .run(stopped)
        });
    }
    let state = AppState::assemble(
        config,
        metrics,
        cluster,
        (bind_mode, preemptor),
        lifecycle.shutting_down.clone(),
    );
    if let Some(file) = config_file {
        state.metrics.config.in_force(&file.stamp());
        let file = Arc::new(file);
        let (reporter, target, every, now) = (
            state.clone(),
            state.config.clone(),
            Duration::from_secs(args.server.reload_seconds),
            reload.config,
        );
        supervisor.spawn("config-reload", move |stopped| {
            let reporter = reporter.clone();
            file.clone().watch(
                target.clone(),
                every,
                now.clone(),
                move |outcome| match outcome {
                    Ok(stamp) => reporter.metrics.config.in_force(stamp),
                    Err(_) => reporter.metrics.config.refused(),
                },
                stopped,
            )
        });
    }
    let webhook_tcp = TcpListener::bind(args.server.listen)
        .await
        .with_context(|| format!("--listen {}", args.server.listen))?;
    let admin = TcpListener::bind(args.admin.admin_listen)
        .await
        .with_context(|| format!("--admin-listen {}", args.admin.admin_listen))?;
    let extender = match args.server.extender_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("--extender-listen {addr}"))?,
        ),
        None => None,
    };
    tracing::info!(
        listen = %webhook_tcp.local_addr()?,
        extender = %extender
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map_or_else(|| "on --listen".to_string(), |a| a.to_string()),
        admin = %admin.local_addr()?,
        cert = %cert_path.display(),
        "gpugate serving"
    );
    Ok(Started {
        state,
        webhook_tcp,
        admin,
        extender,
        tls_config,
    })
}

impl Started {
    /// Serves every port until `stopped` resolves, drains them, and waits
    /// for bind transactions still running.
    async fn serve<S, F>(self, server_config: &ServerConfig, stopped: &S)
    where
        S: Fn() -> F,
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Started {
            state,
            webhook_tcp,
            admin,
            extender,
            tls_config,
        } = self;
        let kept = state.clone();

        let metrics = state.metrics.connections.clone();
        let tls_listener = |name: &'static str, max_body: usize| Listener {
            name,
            limits: server_config.limits(max_body),
            metrics: metrics.clone(),
        };
        let admin_server = listener::serve(
            admin,
            Transport::Plain,
            admin_router(state.clone()),
            Listener {
                name: "admin",
                limits: server_config.admin_limits(),
                metrics: metrics.clone(),
            },
            stopped(),
        );
        let (webhooks, webhook_max_body, extender_server) = match extender {
            Some(extender) => (
                admission_router(state.clone()),
                MAX_BODY_BYTES,
                Some(listener::serve(
                    extender,
                    Transport::Tls(tls_config.clone()),
                    extender_router(state),
                    tls_listener("extender", MAX_EXTENDER_BODY_BYTES),
                    stopped(),
                )),
            ),
            None => (webhook_router(state), MAX_EXTENDER_BODY_BYTES, None),
        };
        let webhook_server = listener::serve(
            webhook_tcp,
            Transport::Tls(tls_config),
            webhooks,
            tls_listener("webhook", webhook_max_body),
            stopped(),
        );
        let extender_server = async {
            if let Some(server) = extender_server {
                server.await;
            }
        };
        tokio::join!(admin_server, webhook_server, extender_server);
        if let Some(binder) = kept.extender.as_ref().and_then(|x| x.api_binder())
            && !binder.wait_for_binds(server_config.drain()).await
        {
            tracing::warn!("stopped with bind transactions still running after the drain timeout");
        }
    }
}

/// Where the API server is, if gpugate talks to one.
fn api_source(args: &ServeArgs) -> anyhow::Result<Option<ApiSource>> {
    Ok(match (&args.cluster.kubeconfig, args.cluster.in_cluster) {
        (Some(path), _) => Some(ApiSource::Kubeconfig(path.clone())),
        (None, true) => Some(ApiSource::InCluster),
        (None, false) => None,
    })
}

/// The first in-cluster certificate pass must succeed before the port
/// opens; transient API errors are retried every few seconds.
async fn first_in_cluster_pass(
    certs: &InClusterCerts,
    names: &impl Fn() -> crate::config::WebhookConfigNames,
) -> anyhow::Result<time::OffsetDateTime> {
    let mut wait = Duration::from_secs(1);
    loop {
        match certs
            .ensure(&names(), time::OffsetDateTime::now_utc())
            .await
        {
            Ok(pass) => {
                log_pass(&pass);
                return Ok(pass.renew_at);
            }
            Err(e) => {
                tracing::error!(error = %e, retry_in = ?wait, "self-managed certificates");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

fn log_pass(pass: &Pass) {
    if pass.ca_made {
        tracing::warn!("made a new CA in the Secret");
    }
    for hook in &pass.patched {
        tracing::info!(%hook, "caBundle written");
    }
    for config in &pass.missing {
        tracing::warn!(%config, "webhook configuration not found; caBundle not written (will retry)");
    }
    if pass.serving != Ensured::Reused {
        tracing::info!(renew_at = %pass.renew_at, "serving certificate signed");
    }
}

/// The cluster view: loaded from `--cluster`, or watched through the API
/// server (`--kubeconfig`, `--in-cluster`); none without those flags (the
/// webhooks then judge each pod alone, without quotas).
fn cluster_view(
    args: &ServeArgs,
    api: &ApiLimits,
    client: Option<kube::Client>,
    metrics: &Metrics,
    supervisor: &Supervisor,
) -> anyhow::Result<Option<Arc<SharedCluster>>> {
    if let Some(path) = &args.cluster.cluster {
        // Streamed: one object at a time, never the whole file.
        let (view, report) = snapshot::load_view(path)?;
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
    let Some(client) = client else {
        return Ok(None);
    };
    let shared = Arc::new(SharedCluster::watched(Duration::from_secs(
        api.stale_after_seconds,
    )));
    // Namespace labels serve namespace policies' selectors; watching
    // them always lets a reloaded config add a selector without a
    // restart (RBAC: namespaces get/list/watch).
    let set = WatchSet {
        namespaces: true,
        resync: Duration::from_secs(api.resync_seconds),
    };
    let observer: Arc<dyn cluster_watch::WatchObserver> = Arc::new(metrics.watch.clone());
    {
        let (client, shared) = (client.clone(), shared.clone());
        supervisor.spawn("watch", move |stopped| {
            cluster_watch::run(
                client.clone(),
                shared.clone(),
                set,
                observer.clone(),
                stopped,
            )
        });
    }
    {
        let shared = shared.clone();
        supervisor.spawn("api-probe", move |stopped| {
            let probe = cluster_watch::probe(client.clone(), shared.clone());
            async move {
                tokio::select! {
                    () = probe => {}
                    () = stopped => {}
                }
            }
        });
    }
    Ok(Some(shared))
}

/// How often self-made certificate files are re-checked at most.
const LOCAL_RECHECK: Duration = Duration::from_secs(3600);
/// How often the in-cluster CA Secret and caBundles are re-checked: a
/// webhook configuration re-applied without caBundle is repaired this fast.
const IN_CLUSTER_RECHECK: Duration = Duration::from_secs(60);

/// Runs `renew` at `renew_at` (at two thirds of the certificate's life) and
/// at least every `recheck`; the file watcher then puts a new certificate
/// in service. A failure is retried a minute later.
async fn renew_loop<F, Fut>(
    mut renew_at: time::OffsetDateTime,
    recheck: Duration,
    stop: impl std::future::Future<Output = ()>,
    mut renew: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<time::OffsetDateTime, String>>,
{
    tokio::pin!(stop);
    loop {
        let wait = (renew_at - time::OffsetDateTime::now_utc())
            .try_into()
            .unwrap_or(Duration::ZERO)
            // Timers drift across suspends; re-check regularly.
            .min(recheck);
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
        }
        match renew().await {
            Ok(next) => renew_at = next,
            Err(e) => {
                tracing::error!(error = %e, "cannot renew the serving certificate; retrying in a minute");
                renew_at = time::OffsetDateTime::now_utc() + time::Duration::minutes(1);
            }
        }
    }
}
