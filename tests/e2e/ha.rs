//! Two replicas as deploy/ runs them (issue 27): each a kube-scheduler
//! with leader election on deploy/'s one Lease and a gpugate beside it on
//! its own ports, the extender called over 127.0.0.1 by its own
//! kube-scheduler. Each replica reaches the API server through its own
//! loopback TCP proxy, which a scenario can cut (a partition: bytes stop,
//! connections hang) or reset (every connection closed mid-stream). The
//! webhooks reach the gpugates through a loopback balancer that, like a
//! Service's endpoints, sends new connections only to replicas whose
//! `/readyz` answers 200.
//!
//! A scenario stops the suite's own gpugate and kube-scheduler, runs the
//! pair, and puts the suite's processes back at its end, whatever happened.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::discovery::Discovery;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::burst;
use crate::control_plane::{ControlPlane, exited};
use crate::device_plugin::DevicePlugin;
use crate::http::{metrics, samples};
use crate::manifests;
use crate::procs::{Proc, free_port};
use crate::scenarios::Ctx;
use crate::wait::eventually;

/// gpugate's `api.staleAfterSeconds` (its default, deploy/'s config) and
/// the probe period: a replica cut off turns not ready within their sum.
const STALE_AFTER: Duration = Duration::from_secs(10);
const PROBE_PERIOD: Duration = Duration::from_secs(2);

// The proxy ---------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProxyState {
    /// Bytes stop both ways; connections hang, new ones are held.
    cut: bool,
    /// Bumped to close every connection open now.
    generation: u64,
    /// New connections are closed at once (an API server restarting).
    refuse: bool,
}

/// A loopback TCP proxy in front of kube-apiserver.
pub struct ApiProxy {
    pub port: u16,
    state: watch::Sender<ProxyState>,
    tasks: JoinSet<()>,
}

impl ApiProxy {
    pub async fn start(upstream: u16) -> anyhow::Result<ApiProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (state, _) = watch::channel(ProxyState {
            cut: false,
            generation: 0,
            refuse: false,
        });
        let mut tasks = JoinSet::new();
        let accepting = state.clone();
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                conns.spawn(proxy_one(client, upstream, accepting.subscribe()));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(ApiProxy { port, state, tasks })
    }

    /// A partition: nothing passes until [`ApiProxy::restore`].
    pub fn cut(&self) {
        self.state.send_modify(|s| s.cut = true);
    }

    /// Ends the partition; connections that hung through it are closed.
    pub fn restore(&self) {
        self.state.send_modify(|s| s.cut = false);
    }

    /// Closes every connection open now (watch streams cut mid-body).
    pub fn reset(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    /// While on, new connections are closed at once.
    pub fn refuse(&self, on: bool) {
        self.state.send_modify(|s| s.refuse = on);
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

async fn proxy_one(mut client: TcpStream, upstream: u16, mut state: watch::Receiver<ProxyState>) {
    let generation = state.borrow().generation;
    if state.borrow().refuse {
        return;
    }
    if state.borrow().cut {
        let _ = state.wait_for(|s| !s.cut).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let cut = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
        s = state.wait_for(|s| s.cut || s.generation != generation) => s.is_ok_and(|s| s.cut),
    };
    if cut {
        // Held open, silent, until the partition ends; then closed.
        let _ = state.wait_for(|s| !s.cut).await;
    }
}

// The balancer ------------------------------------------------------------

/// How often the balancer looks at each replica's `/readyz`: a
/// readinessProbe's `periodSeconds`, shorter than gpugate's
/// `server.shutdownDelaySeconds` (5) as docs/operations.md asks (deploy/
/// uses 5; 2 keeps the suite fast).
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Sends each new connection to the next replica whose `/readyz` said 200
/// at its last look (every [`PROBE_EVERY`]); with none ready, closes it.
pub struct Balancer {
    pub port: u16,
    /// Connections sent to a replica that was no longer listening (a
    /// Service routing to a pod that stopped before it left the endpoints).
    pub refused: Arc<AtomicUsize>,
    tasks: JoinSet<()>,
}

impl Balancer {
    /// `backends`: (webhook port, admin port) of each replica.
    pub async fn start(backends: Vec<(u16, u16)>) -> anyhow::Result<Balancer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let ready: Arc<Vec<AtomicBool>> =
            Arc::new(backends.iter().map(|_| AtomicBool::new(false)).collect());
        let mut tasks = JoinSet::new();
        {
            let (ready, backends) = (ready.clone(), backends.clone());
            tasks.spawn(async move {
                loop {
                    for (i, (_, admin)) in backends.iter().enumerate() {
                        let ok = matches!(
                            tokio::time::timeout(
                                Duration::from_millis(500),
                                crate::http::get(*admin, "/readyz")
                            )
                            .await,
                            Ok(Ok((200, _)))
                        );
                        ready[i].store(ok, Ordering::Relaxed);
                    }
                    tokio::time::sleep(PROBE_EVERY).await;
                }
            });
        }
        let refused = Arc::new(AtomicUsize::new(0));
        let counted = refused.clone();
        tasks.spawn(async move {
            let next = AtomicUsize::new(0);
            let mut conns = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let n = backends.len();
                let start = next.fetch_add(1, Ordering::Relaxed);
                let Some(i) = (0..n)
                    .map(|k| (start + k) % n)
                    .find(|i| ready[*i].load(Ordering::Relaxed))
                else {
                    continue; // no endpoint: the connection is closed
                };
                let (port, refused) = (backends[i].0, counted.clone());
                conns.spawn(async move {
                    match TcpStream::connect(("127.0.0.1", port)).await {
                        Ok(mut server) => {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Balancer {
            port,
            refused,
            tasks,
        })
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

// A replica ---------------------------------------------------------------

pub struct Replica {
    pub name: &'static str,
    pub webhook: u16,
    pub extender: u16,
    pub admin: u16,
    /// Its kube-scheduler's secure port (its /metrics).
    pub scheduler_port: u16,
    pub proxy: ApiProxy,
    gpugate_args: Vec<String>,
    scheduler_config: PathBuf,
    pub gpugate: Mutex<Option<Proc>>,
    pub scheduler: Mutex<Option<Proc>>,
}

impl Replica {
    async fn new(cp: &ControlPlane, name: &'static str) -> anyhow::Result<Replica> {
        let proxy = ApiProxy::start(cp.api_port).await?;
        // The ServiceAccount's kubeconfig, through this replica's proxy.
        let kubeconfig = cp.dir.join(format!("gpugate-{name}.kubeconfig"));
        let text = std::fs::read_to_string(cp.dir.join("gpugate.kubeconfig"))?;
        std::fs::write(
            &kubeconfig,
            text.replace(
                &format!("https://127.0.0.1:{}", cp.api_port),
                &format!("https://127.0.0.1:{}", proxy.port),
            ),
        )?;
        let (webhook, extender, admin) = (free_port()?, free_port()?, free_port()?);
        let mut gpugate_args = cp.gpugate_args_with(&kubeconfig, (webhook, extender, admin));
        gpugate_args.push("--fault-injection".into());
        let mut config: Value = serde_json::from_str(&cp.scheduler_config)?;
        config["clientConnection"]["kubeconfig"] = kubeconfig.display().to_string().into();
        config["extenders"][0]["urlPrefix"] = format!("https://127.0.0.1:{extender}").into();
        let scheduler_config = cp.dir.join(format!("kube-scheduler-{name}.yaml"));
        std::fs::write(&scheduler_config, serde_json::to_string_pretty(&config)?)?;
        Ok(Replica {
            name,
            webhook,
            extender,
            admin,
            scheduler_port: free_port()?,
            proxy,
            gpugate_args,
            scheduler_config,
            gpugate: Mutex::new(None),
            scheduler: Mutex::new(None),
        })
    }

    /// Starts its gpugate and waits until `/readyz` answers 200.
    pub async fn start_gpugate(&self, cp: &ControlPlane) -> anyhow::Result<()> {
        let proc = Proc::spawn(
            &format!("gpugate-{}", self.name),
            std::process::Command::new(&cp.gpugate_bin)
                .args(&self.gpugate_args)
                .env("RUST_LOG", "info")
                // The panic hook runs before unwinding: printing a
                // backtrace of this debug build took 10 s once, and the
                // view reads current until the watch task's guard drops.
                // deploy/ does not set it either.
                .env_remove("RUST_BACKTRACE"),
            &cp.log_dir(),
        )?;
        *self.gpugate.lock().unwrap() = Some(proc);
        self.wait_ready(Duration::from_secs(60)).await
    }

    pub async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let name = format!("gpugate-{}", self.name);
        crate::control_plane::wait_ready(&name, &self.gpugate, self.admin, within).await
    }

    pub fn start_scheduler(&self, cp: &ControlPlane) -> anyhow::Result<()> {
        let proc = Proc::spawn(
            &format!("kube-scheduler-{}", self.name),
            &mut cp.scheduler_command(&self.scheduler_config, self.scheduler_port),
            &cp.log_dir(),
        )?;
        *self.scheduler.lock().unwrap() = Some(proc);
        Ok(())
    }

    /// Whether its kube-scheduler says it leads (`leader_election_master_status`).
    pub async fn leads(&self, cp: &ControlPlane) -> bool {
        if exited(&self.scheduler) {
            return false;
        }
        match cp.scheduler_metrics_at(self.scheduler_port).await {
            // Its one election (client-go names it after the component).
            Ok(text) => samples(&text, "leader_election_master_status")
                .iter()
                .any(|s| s.value == 1.0),
            Err(_) => false,
        }
    }

    /// SIGKILL, both processes.
    pub fn kill(&self) {
        for p in [&self.scheduler, &self.gpugate] {
            if let Some(mut p) = p.lock().unwrap().take() {
                p.kill();
            }
        }
    }

    /// SIGTERM both (kube-scheduler first, so that it gives up the Lease),
    /// waiting for each without blocking the runtime.
    pub async fn terminate(&self) {
        for p in [&self.scheduler, &self.gpugate] {
            let proc = p.lock().unwrap().take();
            if let Some(proc) = proc {
                sigterm(&proc);
                wait_exit(proc).await;
            }
        }
    }

    pub fn gpugate_exited(&self) -> bool {
        exited(&self.gpugate)
    }

    pub async fn arm(&self, point: &str) -> anyhow::Result<()> {
        let (status, body) = post_plain(self.admin, &format!("/faults/{point}")).await?;
        ensure!(status == 200, "arming {point}: {status} {body}");
        Ok(())
    }

    pub async fn metrics(&self) -> anyhow::Result<String> {
        metrics(self.admin).await
    }
}

fn sigterm(proc: &Proc) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &proc.pid().to_string()])
        .status();
}

/// Waits up to 40 s for the process to end, then kills it.
async fn wait_exit(mut proc: Proc) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while proc.exited().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proc.kill();
}

async fn post_plain(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw)).await??;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {text:?}"))?;
    Ok((status, text))
}

// The pair ----------------------------------------------------------------

pub struct Pair {
    pub a: Replica,
    pub b: Replica,
    pub balancer: Balancer,
}

impl Pair {
    /// Stops the suite's gpugate and kube-scheduler, starts both replicas
    /// (a's kube-scheduler first: it leads, b's stands by) and points the
    /// webhooks at the balancer.
    pub async fn start(ctx: &Ctx) -> anyhow::Result<Pair> {
        ctx.cp.stop_scheduler();
        ctx.cp.kill_gpugate();
        match Self::start_replicas(ctx).await {
            Ok(pair) => Ok(pair),
            Err(e) => {
                // The replicas are dropped (stopped) by now.
                if let Err(restore) = restore_suite(ctx).await {
                    return Err(e.context(format!("and putting the suite back: {restore:#}")));
                }
                Err(e)
            }
        }
    }

    async fn start_replicas(ctx: &Ctx) -> anyhow::Result<Pair> {
        let cp = &ctx.cp;
        let (a, b) = (Replica::new(cp, "a").await?, Replica::new(cp, "b").await?);
        a.start_gpugate(cp).await?;
        b.start_gpugate(cp).await?;
        let balancer = Balancer::start(vec![(a.webhook, a.admin), (b.webhook, b.admin)]).await?;
        let pair = Pair { a, b, balancer };
        pair.point_webhooks(ctx, pair.balancer.port).await?;
        pair.a.start_scheduler(cp)?;
        eventually(
            "kube-scheduler-a leads",
            Duration::from_secs(60),
            || async {
                if pair.a.leads(cp).await {
                    Ok(())
                } else {
                    Err("not yet".to_string())
                }
            },
        )
        .await?;
        pair.b.start_scheduler(cp)?;
        Ok(pair)
    }

    async fn point_webhooks(&self, ctx: &Ctx, port: u16) -> anyhow::Result<()> {
        point_webhooks(ctx, port).await
    }

    /// Until both gpugates know `n` nodes.
    pub async fn wait_nodes(&self, n: usize) -> anyhow::Result<()> {
        for r in [&self.a, &self.b] {
            burst::wait_gpugate_nodes(r.admin, n, Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// The replica whose kube-scheduler leads now, and the other.
    pub async fn leader(&self, cp: &ControlPlane) -> anyhow::Result<(&Replica, &Replica)> {
        eventually(
            "one kube-scheduler leads",
            Duration::from_secs(60),
            || async {
                if self.a.leads(cp).await {
                    Ok((&self.a, &self.b))
                } else if self.b.leads(cp).await {
                    Ok((&self.b, &self.a))
                } else {
                    Err("none yet".to_string())
                }
            },
        )
        .await
    }

    /// Both replicas running again (a stopped one started as a standby).
    pub async fn heal(&self, cp: &ControlPlane) -> anyhow::Result<()> {
        for r in [&self.a, &self.b] {
            r.proxy.restore();
            if r.gpugate_exited() {
                r.start_gpugate(cp).await?;
            } else {
                r.wait_ready(Duration::from_secs(60)).await?;
            }
            if exited(&r.scheduler) {
                r.start_scheduler(cp)?;
            }
        }
        self.leader(cp).await.map(|_| ())
    }

    /// Stops both replicas and puts the suite's gpugate, webhooks and
    /// kube-scheduler back.
    pub async fn stop(self, ctx: &Ctx) -> anyhow::Result<()> {
        self.a.terminate().await;
        self.b.terminate().await;
        drop(self);
        restore_suite(ctx).await
    }
}

/// The suite's own gpugate, webhooks and kube-scheduler, as before a pair.
async fn restore_suite(ctx: &Ctx) -> anyhow::Result<()> {
    ctx.cp.ensure_gpugate().await?;
    point_webhooks(ctx, ctx.cp.gpugate_port).await?;
    let config = ctx.cp.scheduler_config.clone();
    ctx.cp.start_scheduler("kube-scheduler", &config).await
}

async fn point_webhooks(ctx: &Ctx, port: u16) -> anyhow::Result<()> {
    let discovery = Discovery::new(ctx.cp.admin.clone()).run().await?;
    for o in manifests::local_webhooks(&ctx.variants[0].1, port, &ctx.cp.pki.webhook.ca_cert_pem)? {
        manifests::apply(&ctx.cp.admin, &discovery, &o, false).await?;
    }
    ctx.cp.wait_for_webhooks("nvidia.com/gpu").await
}

// Checks ------------------------------------------------------------------

/// Nodes of the scenario whose `hami.io/mutex.lock` is set, with the value.
pub async fn held_locks(
    cp: &ControlPlane,
    scenario: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let nodes: Api<Node> = Api::all(cp.admin.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{}={scenario}", crate::fixtures::NODE_LABEL)))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|n| {
            let value = n
                .metadata
                .annotations
                .as_ref()?
                .get(gpugate::hami::keys::NODE_LOCK)?
                .clone();
            Some((n.metadata.name.unwrap_or_default(), value))
        })
        .collect())
}

pub async fn no_lock_held(
    cp: &ControlPlane,
    scenario: &str,
    within: Duration,
) -> anyhow::Result<()> {
    eventually("no node lock held", within, || async {
        match held_locks(cp, scenario).await {
            Ok(held) if held.is_empty() => Ok(()),
            Ok(held) => Err(format!("{held:?}")),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// `POST /filter` to a replica's extender with one GPU pod and the nodes:
/// the answer's `Error`, empty when it placed.
pub async fn filter_error(
    cp: &ControlPlane,
    r: &Replica,
    nodes: &[&str],
) -> anyhow::Result<String> {
    let pod = json!({
        "metadata": {"name": "probe", "namespace": "e2e-ha", "uid": "ha-probe-uid"},
        "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024"}}}]}
    });
    let body = json!({"Pod": pod, "NodeNames": nodes});
    let answer = https_post(cp, r.extender, "/filter", &body).await?;
    Ok(answer["Error"].as_str().unwrap_or_default().to_string())
}

async fn https_post(
    cp: &ControlPlane,
    port: u16,
    path: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    use rustls::pki_types::pem::PemObject as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        rustls::pki_types::CertificateDer::pem_slice_iter(cp.pki.webhook.ca_cert_pem.as_bytes())
    {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    let mut tls = connector
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1")?.to_owned(),
            tcp,
        )
        .await?;
    let body = serde_json::to_vec(body)?;
    tls.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await?;
    tls.write_all(&body).await?;
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw);
    let (_, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("no HTTP answer: {text:?}"))?;
    serde_json::from_str(body.trim()).with_context(|| format!("answer {body:?}"))
}

/// The sum of every sample of `name`.
pub fn total(text: &str, name: &str) -> f64 {
    samples(text, name).iter().map(|s| s.value).sum()
}

pub fn counter(text: &str, name: &str, label: (&str, &str)) -> f64 {
    samples(text, name)
        .iter()
        .filter(|s| s.label(label.0) == label.1)
        .map(|s| s.value)
        .sum()
}

// The scenarios -----------------------------------------------------------

/// Starts a pair, runs `body`, stops the pair whatever happened.
macro_rules! on_pair {
    ($ctx:expr, |$pair:ident| $body:expr) => {{
        let $pair = Pair::start($ctx).await?;
        let result: anyhow::Result<()> = async { $body }.await;
        let stopped = $pair.stop($ctx).await;
        result?;
        stopped
    }};
}

/// The suite's device plugin answers at once; here Allocate takes a while,
/// as on a node. Put back whatever happens.
struct PluginDelay<'a>(&'a DevicePlugin, Duration);

impl<'a> PluginDelay<'a> {
    fn set(plugin: &'a DevicePlugin, delay: Duration) -> Self {
        let before = plugin.delay();
        plugin.set_delay(delay);
        PluginDelay(plugin, before)
    }
}

impl Drop for PluginDelay<'_> {
    fn drop(&mut self) {
        self.0.set_delay(self.1);
    }
}

async fn bound_in(cp: &ControlPlane, ns: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(cp.admin.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(crate::fixtures::is_bound)
        .collect())
}

/// Until `n` pods of the namespace are bound; returns them.
async fn n_bound(
    cp: &ControlPlane,
    ns: &str,
    n: usize,
    within: Duration,
) -> anyhow::Result<Vec<Pod>> {
    eventually(&format!("{n} pods bound"), within, || async {
        let bound = bound_in(cp, ns).await.map_err(|e| e.to_string())?;
        if bound.len() == n {
            Ok(bound)
        } else {
            Err(format!("{} bound", bound.len()))
        }
    })
    .await
}

/// Until the replica's gpugate has exited (a fault point aborted it).
async fn aborted(r: &Replica) -> anyhow::Result<()> {
    let what = format!("gpugate-{} aborts at the fault point", r.name);
    eventually(&what, Duration::from_secs(60), || async {
        if r.gpugate_exited() {
            Ok(())
        } else {
            Err("running".to_string())
        }
    })
    .await
}

fn slice_pod(name: &str) -> Value {
    crate::fixtures::gpu_pod(
        name,
        &[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem", "1024"),
            ("nvidia.com/gpucores", "5"),
        ],
    )
}

/// Scenario: the leader's kube-scheduler and gpugate SIGKILLed in the
/// middle of a 200-pod burst.
pub async fn leader_killed_mid_burst(
    ctx: &Ctx,
    plugin: &DevicePlugin,
    ns: &str,
    scenario: &str,
) -> anyhow::Result<()> {
    const NODES: usize = 10;
    const PODS: usize = 200;
    const KILL_AFTER: usize = 60;
    let cp = &ctx.cp;
    let names: Vec<String> = (0..NODES).map(|i| format!("ha-kill-{i:02}")).collect();
    burst::create_nodes(&cp.admin, scenario, &names, 10).await?;
    on_pair!(ctx, |pair| {
        pair.wait_nodes(NODES).await?;
        let _delay = PluginDelay::set(plugin, Duration::from_millis(200));
        let (leader, survivor) = pair.leader(cp).await?;
        let spec = burst::Burst {
            ns: ns.to_string(),
            prefix: "ha".into(),
            pods: PODS,
            creators: 16,
            workload: burst::Workload::Gpu {
                node_policy: "binpack".into(),
            },
            deadline: Duration::from_secs(240),
        };
        let run = burst::run(&cp.admin, &spec);
        let kill = async {
            eventually(
                "60 pods bound before the kill",
                Duration::from_secs(120),
                || async {
                    let n = bound_in(cp, ns).await.map_err(|e| e.to_string())?.len();
                    if n >= KILL_AFTER {
                        Ok(n)
                    } else {
                        Err(format!("{n}"))
                    }
                },
            )
            .await
            .map(|n| {
                leader.kill();
                (Instant::now(), n)
            })
        };
        let (outcome, killed) = tokio::join!(run, kill);
        let (outcome, (killed_at, bound_at_kill)) = (outcome?, killed?);
        ensure!(
            outcome.unbound_count == 0,
            "{} of {PODS} pods not bound, e.g. {:?}",
            outcome.unbound_count,
            outcome.unbound
        );
        let placed = burst::placement(&cp.admin, ns, true, Some(survivor.admin)).await?;
        placed
            .check(PODS)
            .context("after the failover (the survivor's ledger)")?;
        // A bind the kill cut after its lock is released by the survivor's
        // orphan sweep (or taken over by the pod's retry): none stays.
        no_lock_held(cp, scenario, Duration::from_secs(60)).await?;
        let first = outcome
            .bound_at
            .iter()
            .find(|t| **t > killed_at)
            .map(|t| t.duration_since(killed_at).as_secs_f64());
        let last = outcome
            .bound_at
            .last()
            .map(|t| t.saturating_duration_since(killed_at).as_secs_f64());
        println!(
            "    failover: {} killed with {bound_at_kill} of {PODS} pods bound; kill → first bind by the new leader {:.1} s, kill → last pod bound {:.1} s; {} creates retried; {} pods on {} GPUs, none over-committed, the survivor's ledger equals the annotations, no node lock left",
            leader.name,
            first.unwrap_or(f64::NAN),
            last.unwrap_or(f64::NAN),
            outcome.create_retries,
            placed.bound,
            placed.gpus_used,
        );
        Ok(())
    })
}

/// Scenario: a rolling restart (SIGTERM one replica, start it again,
/// then the other) while pods are created with `failurePolicy: Fail`.
pub async fn rolling_restart(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let cp = &ctx.cp;
    let names: Vec<String> = (0..6).map(|i| format!("ha-roll-{i}")).collect();
    burst::create_nodes(&cp.admin, scenario, &names, 5).await?;
    on_pair!(ctx, |pair| {
        pair.wait_nodes(names.len()).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let created = Arc::new(AtomicUsize::new(0));
        let mut creators = JoinSet::new();
        for c in 0..3 {
            let (client, ns, stop, failures, created) = (
                cp.admin.clone(),
                ns.to_string(),
                stop.clone(),
                failures.clone(),
                created.clone(),
            );
            creators.spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let name = format!("roll-{c}-{i:04}");
                    // Never retried: a refusal is a failed create.
                    match crate::fixtures::create_pod(&client, &ns, &slice_pod(&name)).await {
                        Ok(_) => {
                            created.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failures.lock().unwrap().push(format!("{name}: {e}")),
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            });
        }
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut restarts = Vec::new();
        for r in [&pair.a, &pair.b] {
            let t = Instant::now();
            let scheduler = r.scheduler.lock().unwrap().take();
            if let Some(scheduler) = scheduler {
                sigterm(&scheduler);
                wait_exit(scheduler).await;
            }
            let gpugate = r
                .gpugate
                .lock()
                .unwrap()
                .take()
                .context("gpugate not running")?;
            sigterm(&gpugate);
            // The shutdown sequence, as an endpoint controller sees it:
            // not ready at once, still serving webhooks meanwhile.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let readiness = crate::http::get(r.admin, "/readyz").await;
            ensure!(
                matches!(&readiness, Ok((503, _))),
                "gpugate-{} after SIGTERM: /readyz {readiness:?}, expected 503",
                r.name
            );
            let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "sigterm-probe", "operation": "CREATE",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": ns, "object": slice_pod("sigterm-probe")}});
            let answer = https_post(cp, r.webhook, "/mutate", &review)
                .await
                .with_context(|| format!("gpugate-{} after SIGTERM: no webhook answer", r.name))?;
            ensure!(
                answer["response"]["allowed"] == json!(true),
                "gpugate-{} after SIGTERM answered {answer}",
                r.name
            );
            wait_exit(gpugate).await;
            r.start_gpugate(cp).await?;
            r.start_scheduler(cp)?;
            restarts.push((r.name, t.elapsed().as_secs_f64()));
            // Back in the endpoints before the other one goes.
            tokio::time::sleep(PROBE_EVERY + Duration::from_millis(500)).await;
        }
        pair.leader(cp).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        while creators.join_next().await.is_some() {}
        let failures = failures.lock().unwrap().clone();
        let created = created.load(Ordering::Relaxed);
        // Each replica left the endpoints before it stopped listening
        // (readiness off at SIGTERM, serving on for shutdownDelaySeconds).
        // kube-apiserver retries a webhook call that cannot connect, so a
        // create would not show it; the balancer does.
        let refused = pair.balancer.refused.load(Ordering::Relaxed);
        ensure!(
            refused == 0,
            "{refused} webhook connections were sent to a replica that had stopped listening"
        );
        ensure!(
            failures.is_empty(),
            "{} of {} creates failed during the rolling restart: {:?}",
            failures.len(),
            created + failures.len(),
            &failures[..failures.len().min(5)]
        );
        // Every pod went through the mutating webhook: none reaches a
        // scheduler without its rewrite.
        let api: Api<Pod> = Api::namespaced(cp.admin.clone(), ns);
        let pods = api.list(&ListParams::default()).await?.items;
        let unrouted: Vec<String> = pods
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) != Some("hami-scheduler")
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        ensure!(
            unrouted.is_empty(),
            "pods without the webhook's rewrite: {unrouted:?}"
        );
        ensure!(
            pods.len() == created,
            "{} pods for {created} creates",
            pods.len()
        );
        let (leader, _) = pair.leader(cp).await?;
        let bound = n_bound(cp, ns, created, Duration::from_secs(120)).await?;
        let usage = crate::fixtures::usage_by_gpu(&bound)?;
        for (gpu, (n, mem, cores)) in &usage {
            ensure!(
                *n <= 10 && *mem <= 32768 && *cores <= 100,
                "{gpu} over-committed: {n} pods, {mem} MiB, {cores} cores"
            );
        }
        crate::fixtures::ledger_matches(leader.admin, ns, &bound, Duration::from_secs(30)).await?;
        println!(
            "    rolling restart: {created} pods created over {:.0} s, 0 creates failed, 0 pods without the webhook's rewrite, 0 connections to a stopped replica; each gpugate not ready and still answering webhooks 0.5 s after SIGTERM; replica restarts {:?} s",
            started.elapsed().as_secs_f64(),
            restarts
        );
        Ok(())
    })
}

/// Scenario: the leading replica cut off from the API server.
pub async fn cut_off(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let cp = &ctx.cp;
    let names: Vec<String> = (0..2).map(|i| format!("ha-cut-{i}")).collect();
    burst::create_nodes(&cp.admin, scenario, &names, 2).await?;
    on_pair!(ctx, |pair| {
        pair.wait_nodes(names.len()).await?;
        let (cut, other) = pair.leader(cp).await?;
        let binds = |text: &str| total(text, "gpugate_bind_total");
        let binds_before = binds(&cut.metrics().await?);
        let other_before = binds(&other.metrics().await?);
        let cut_at = Instant::now();
        cut.proxy.cut();
        let bound = STALE_AFTER + PROBE_PERIOD + Duration::from_secs(3);
        let reason = eventually("the cut replica turns not ready", bound * 2, || async {
            match crate::http::get(cut.admin, "/readyz").await {
                Ok((503, body)) => Ok(body),
                Ok((status, body)) => Err(format!("{status} {}", body.trim())),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        let not_ready = cut_at.elapsed();
        ensure!(
            not_ready <= bound,
            "not ready only after {:.1} s (bound {:.0} s)",
            not_ready.as_secs_f64(),
            bound.as_secs_f64()
        );
        ensure!(
            reason.contains("API server has not answered"),
            "readiness gives another reason: {reason}"
        );
        let refused = filter_error(cp, cut, &["ha-cut-0", "ha-cut-1"]).await?;
        ensure!(
            refused.contains("API server has not answered") && refused.contains("not placing"),
            "/filter on the cut replica answered {refused:?}"
        );
        eventually(
            "the other replica leads",
            Duration::from_secs(60),
            || async {
                if other.leads(cp).await {
                    Ok(())
                } else {
                    Err("not yet".to_string())
                }
            },
        )
        .await?;
        let takeover = cut_at.elapsed();
        for i in 0..6 {
            crate::fixtures::create_pod(&cp.admin, ns, &slice_pod(&format!("cut-{i}"))).await?;
        }
        let bound_pods = n_bound(cp, ns, 6, Duration::from_secs(60)).await?;
        ensure!(
            binds(&cut.metrics().await?) == binds_before,
            "the cut replica took part in binds while cut off"
        );
        // The count is read right: the other replica's moved by the 6.
        let other_binds = binds(&other.metrics().await?) - other_before;
        ensure!(
            other_binds >= 6.0,
            "the other replica counted {other_binds} binds for the 6 pods"
        );
        let restored_at = Instant::now();
        cut.proxy.restore();
        cut.wait_ready(Duration::from_secs(60)).await?;
        let caught_up = restored_at.elapsed();
        // Caught up: its ledger holds what the other bound meanwhile.
        crate::fixtures::ledger_matches(cut.admin, ns, &bound_pods, Duration::from_secs(30))
            .await?;
        println!(
            "    cut off: replica {} not ready {:.1} s after the cut (bound {:.0} s: api.staleAfterSeconds {} + probe {} s + 3), /filter refused, replica {} led {:.1} s after the cut and bound 6 pods, none through the cut one; ready again {:.1} s after the proxy forwarded again, its ledger caught up",
            cut.name,
            not_ready.as_secs_f64(),
            bound.as_secs_f64(),
            STALE_AFTER.as_secs(),
            PROBE_PERIOD.as_secs(),
            other.name,
            takeover.as_secs_f64(),
            caught_up.as_secs_f64(),
        );
        Ok(())
    })
}

/// Scenario: watch streams cut by the API server's side, then the watch
/// task ended by a fault.
pub async fn watch_faults(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let cp = &ctx.cp;
    burst::create_nodes(&cp.admin, scenario, &["ha-watch-0".to_string()], 1).await?;
    // ha-watch-1 is created during the outage.
    on_pair!(ctx, |pair| {
        pair.wait_nodes(1).await?;
        let (r, _) = pair.leader(cp).await?;
        let stale = |text: &str, cause: &str| {
            counter(text, "gpugate_cluster_view_stale_total", ("cause", cause))
        };
        let restarts = |text: &str| counter(text, "gpugate_task_restarts_total", ("task", "watch"));
        let before = r.metrics().await?;

        // (Streams merely closed mid-body are resumed by kube's watcher from
        // their resourceVersion: nothing is lost, the view stays current.)
        // The API server restarting: streams closed, connections refused
        // for a while. The watches fail, the view is stale until each
        // kind has relisted, and what changed meanwhile is in the view.
        let outage_at = Instant::now();
        r.proxy.refuse(true);
        r.proxy.reset();
        let stale_seen = eventually("the view goes stale", Duration::from_secs(20), || async {
            let text = r.metrics().await.map_err(|e| e.to_string())?;
            let failed = stale(&text, "watch_failed") > stale(&before, "watch_failed");
            match crate::http::get(r.admin, "/readyz").await {
                Ok((503, body)) if failed => Ok(body),
                Ok((status, body)) => Err(format!(
                    "{status} {}, failure counted: {failed}",
                    body.trim()
                )),
                Err(e) => Err(e.to_string()),
            }
        })
        .await?;
        crate::fixtures::create_node(&cp.admin, scenario, &burst::node("ha-watch-1")).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        r.proxy.refuse(false);
        r.wait_ready(Duration::from_secs(30)).await?;
        let relisted = outage_at.elapsed();
        burst::wait_gpugate_nodes(r.admin, 2, Duration::from_secs(10)).await?;

        // The watch task panics: stale at once, restarted by the supervisor.
        let panic_at = Instant::now();
        r.arm("watch-panic").await?;
        let refused = eventually(
            "/filter refuses while the watch is down",
            Duration::from_secs(5),
            || async {
                match filter_error(cp, r, &["ha-watch-0"]).await {
                    Ok(e) if e.contains("watch task ended") => Ok(e),
                    Ok(e) => Err(format!("answered {e:?}")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
        ensure!(refused.contains("not placing"), "{refused}");
        eventually(
            "the watch task is restarted",
            Duration::from_secs(20),
            || async {
                let text = r.metrics().await.map_err(|e| e.to_string())?;
                let n = restarts(&text);
                if n > restarts(&before) {
                    Ok(())
                } else {
                    Err(format!("{n}"))
                }
            },
        )
        .await?;
        r.wait_ready(Duration::from_secs(30)).await?;
        let back = panic_at.elapsed();
        let text = r.metrics().await?;
        ensure!(
            stale(&text, "watch_task_ended") > stale(&before, "watch_task_ended"),
            "the end of the watch task was not counted"
        );
        // The restarted watch serves: pods bind, its ledger matches.
        for i in 0..3 {
            crate::fixtures::create_pod(&cp.admin, ns, &slice_pod(&format!("watch-{i}"))).await?;
        }
        let bound = n_bound(cp, ns, 3, Duration::from_secs(60)).await?;
        crate::fixtures::ledger_matches(r.admin, ns, &bound, Duration::from_secs(30)).await?;
        println!(
            "    watch faults: streams cut and connections refused for 2 s → not ready ({}), relisted and ready {:.1} s after the outage began, the node created meanwhile known; watch task panicked → /filter refused ({refused:?}), task restarted and ready in {:.1} s; 3 pods bound after",
            stale_seen.trim(),
            relisted.as_secs_f64(),
            back.as_secs_f64(),
        );
        Ok(())
    })
}

/// Scenario: binds a dying leader left half-done.
pub async fn half_done_binds(ctx: &Ctx, ns: &str, scenario: &str) -> anyhow::Result<()> {
    let cp = &ctx.cp;
    burst::create_nodes(&cp.admin, scenario, &["ha-half-0".to_string()], 1).await?;
    on_pair!(ctx, |pair| {
        pair.wait_nodes(1).await?;
        let pods: Api<Pod> = Api::namespaced(cp.admin.clone(), ns);

        // 1. Lock taken, Binding not written: the process dies.
        let (leader, survivor) = pair.leader(cp).await?;
        leader.arm("bind-abort-after-lock").await?;
        crate::fixtures::create_pod(&cp.admin, ns, &slice_pod("half-lock")).await?;
        aborted(leader).await?;
        let aborted_at = Instant::now();
        leader.kill();
        let held = held_locks(cp, scenario).await?;
        ensure!(
            held.len() == 1 && held[0].1.contains("half-lock"),
            "expected the lock of half-lock on ha-half-0, found {held:?}"
        );
        // The pod is gone before anyone retries it: only the survivor's
        // orphan sweep frees the node.
        pods.delete("half-lock", &DeleteParams::default().grace_period(0))
            .await?;
        // The sweep releases a lock whose holder is gone once it is older
        // than the longest bind (deploy/'s bindTimeoutSeconds, + 5 s), at
        // its next pass (every 5 s); 5 s more for the watches.
        let bind_timeout = gpugate::config::Config::from_yaml(&cp.gpugate_config, "e2e")?
            .scheduler
            .bind_timeout_seconds;
        let sweep_bound = Duration::from_secs_f64(bind_timeout + 5.0 + 5.0 + 5.0);
        no_lock_held(cp, scenario, sweep_bound * 2).await?;
        let released = aborted_at.elapsed();
        ensure!(
            released <= sweep_bound,
            "the left lock was released {:.1} s after the abort (bound {:.0} s)",
            released.as_secs_f64(),
            sweep_bound.as_secs_f64()
        );
        let swept = total(
            &survivor.metrics().await?,
            "gpugate_orphaned_node_locks_released_total",
        );
        ensure!(swept >= 1.0, "the survivor's sweep released {swept} locks");

        // 2. Binding written, then the process dies: nothing to undo.
        pair.heal(cp).await?;
        let (leader, survivor) = pair.leader(cp).await?;
        leader.arm("bind-abort-after-binding").await?;
        crate::fixtures::create_pod(&cp.admin, ns, &slice_pod("half-bound")).await?;
        aborted(leader).await?;
        leader.kill();
        let bound = bound_in(cp, ns).await?;
        ensure!(
            bound.len() == 1 && crate::fixtures::node_of(&bound[0]) == "ha-half-0",
            "half-bound not bound with its allocation: {:?}",
            bound
                .iter()
                .map(|p| p.metadata.name.clone())
                .collect::<Vec<_>>()
        );
        crate::fixtures::ledger_matches(survivor.admin, ns, &bound, Duration::from_secs(30))
            .await?;
        // The device plugin releases the lock, as after every bind.
        no_lock_held(cp, scenario, Duration::from_secs(30)).await?;
        println!(
            "    half-done binds: a lock left by a bind killed before its Binding released by the survivor {:.1} s after (bound {:.0} s); a bind killed after its Binding left the pod bound with its allocation, in the survivor's ledger",
            released.as_secs_f64(),
            sweep_bound.as_secs_f64()
        );
        Ok(())
    })
}
