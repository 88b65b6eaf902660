//! etcd, kube-apiserver, gpugate and kube-scheduler on 127.0.0.1, wired the
//! way deploy/ wires them in a cluster: gpugate and kube-scheduler run as
//! the `gpugate` ServiceAccount with deploy/'s RBAC, gpugate with deploy/'s
//! config, the webhooks with deploy/'s configurations, kube-scheduler with
//! deploy/'s KubeSchedulerConfiguration.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use crate::manifests;
use crate::pki::Pki;
use crate::procs::{Proc, free_port};
use crate::wait::eventually;

/// The test namespace gpugate's policy gateway gives defaults to (its
/// policy is added to deploy/'s config; see `gpugate_config`).
pub const POLICY_NAMESPACE: &str = "e2e-team";

/// The kinds of a rendered variant applied for real: who may do what, the
/// admission policy every scenario runs under, and gpugate's priority
/// level in kube-apiserver's priority and fairness.
const RIGHTS: [&str; 9] = [
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "PriorityLevelConfiguration",
    "FlowSchema",
];

pub struct ControlPlane {
    pub dir: PathBuf,
    pub pki: Pki,
    pub admin: Client,
    pub gpugate_port: u16,
    pub extender_port: u16,
    pub gpugate_admin_port: u16,
    /// kube-apiserver's secure port.
    pub api_port: u16,
    pub gpugate_bin: PathBuf,
    gpugate_args: Vec<String>,
    bin: PathBuf,
    /// deploy/'s KubeSchedulerConfiguration as run here (the extender on
    /// 127.0.0.1, the ServiceAccount's kubeconfig, explicit client QPS).
    pub scheduler_config: String,
    /// deploy/'s gpugate config as run here (with the suite's namespace
    /// policy).
    pub gpugate_config: String,
    /// kube-scheduler's secure port (its /metrics), new for each start.
    scheduler_port: Mutex<u16>,
    pub gpugate: Mutex<Option<Proc>>,
    pub scheduler: Mutex<Option<Proc>>,
    pub apiserver: Mutex<Option<Proc>>,
    pub etcd: Mutex<Option<Proc>>,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Reverse start order: the clients of the API server first.
        for p in [&self.scheduler, &self.gpugate, &self.apiserver, &self.etcd] {
            if let Ok(mut p) = p.lock() {
                drop(p.take());
            }
        }
    }
}

/// `GPUGATE_PROFILE` set: kube-apiserver and kube-scheduler serve CPU
/// profiles (`/debug/pprof/profile`), for the scale benchmark.
pub fn profiling() -> bool {
    std::env::var_os("GPUGATE_PROFILE").is_some()
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver, applies deploy/'s namespace and RBAC
    /// for real, then gpugate, the webhook configurations and kube-scheduler.
    pub async fn start(
        bin: &Path,
        gpugate_bin: &Path,
        dir: &Path,
        deployed: &[Value],
    ) -> anyhow::Result<ControlPlane> {
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let pki = Pki::make(&dir.join("pki"))?;

        let (etcd_port, peer_port) = (free_port()?, free_port()?);
        let etcd = Proc::spawn(
            "etcd",
            Command::new(bin.join("etcd")).args([
                "--name=default",
                &format!("--data-dir={}", dir.join("etcd").display()),
                &format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                &format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                &format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                &format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                &format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ]),
            &logs,
        )?;

        let api_port = free_port()?;
        let p = |n: &str| pki.path(n).display().to_string();
        let apiserver = Proc::spawn(
            "kube-apiserver",
            Command::new(bin.join("kube-apiserver")).args([
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", dir.join("apiserver-certs").display()),
                format!("--tls-cert-file={}", p("apiserver.crt")),
                format!("--tls-private-key-file={}", p("apiserver.key")),
                format!("--client-ca-file={}", p("ca.crt")),
                "--authorization-mode=RBAC".into(),
                format!("--service-account-issuer=https://127.0.0.1:{api_port}"),
                format!("--service-account-key-file={}", p("sa.pub")),
                format!("--service-account-signing-key-file={}", p("sa.key")),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--allow-privileged=true".into(),
                // No controller-manager, so no `default` ServiceAccount.
                "--disable-admission-plugins=ServiceAccount".into(),
                "--endpoint-reconciler-type=none".into(),
                format!("--profiling={}", profiling()),
            ]),
            &logs,
        )?;

        let admin_kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(
            &admin_kubeconfig,
            api_port,
            &pki.cluster.ca_cert_pem,
            json!({
                "client-certificate-data": b64(&pki.admin_cert_pem),
                "client-key-data": b64(&pki.admin_key_pem),
            }),
        )?;
        let admin = client_from(&admin_kubeconfig).await?;
        let mut cp = ControlPlane {
            dir: dir.to_path_buf(),
            pki,
            admin: admin.clone(),
            gpugate_port: free_port()?,
            extender_port: free_port()?,
            gpugate_admin_port: free_port()?,
            api_port,
            gpugate_bin: gpugate_bin.to_path_buf(),
            gpugate_args: vec![],
            bin: bin.to_path_buf(),
            scheduler_config: String::new(),
            gpugate_config: String::new(),
            scheduler_port: Mutex::new(0),
            gpugate: Mutex::new(None),
            scheduler: Mutex::new(None),
            apiserver: Mutex::new(Some(apiserver)),
            etcd: Mutex::new(Some(etcd)),
        };
        eventually("kube-apiserver /readyz", Duration::from_secs(90), || {
            let admin = admin.clone();
            let req = http::Request::get("/readyz").body(vec![]).unwrap();
            async move {
                match admin.request_text(req).await {
                    Ok(t) if t.trim() == "ok" => Ok(()),
                    Ok(t) => Err(t),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await
        .map_err(|e| cp.with_log("kube-apiserver", &cp.apiserver, e))?;

        // deploy/'s namespace, RBAC, admission policy and flow control, for
        // real: gpugate and kube-scheduler get exactly those rights, every
        // scenario runs with the policy guarding the scheduler-owned pod
        // keys, and their requests in gpugate's priority level.
        let discovery = Discovery::new(admin.clone()).run().await?;
        for o in deployed
            .iter()
            .filter(|o| manifests::kind(o) == "Namespace" || RIGHTS.contains(&manifests::kind(o)))
        {
            manifests::apply(&admin, &discovery, o, false).await?;
        }
        let sa_kubeconfig = dir.join("gpugate.kubeconfig");
        let token = service_account_token(&admin, "gpugate", "gpugate").await?;
        write_kubeconfig(
            &sa_kubeconfig,
            api_port,
            &cp.pki.cluster.ca_cert_pem,
            json!({"token": token}),
        )?;
        for ns in ["e2e-sentinel", POLICY_NAMESPACE] {
            ensure_namespace(&admin, ns).await?;
        }

        // gpugate, with deploy/'s config and the webhook serving
        // certificate as files (what the cert-manager variant mounts).
        let config_path = dir.join("gpugate.yaml");
        cp.gpugate_config = gpugate_config(deployed)?;
        std::fs::write(&config_path, &cp.gpugate_config)?;
        cp.gpugate_args = vec![
            "serve".into(),
            format!("--kubeconfig={}", sa_kubeconfig.display()),
            format!("--config={}", config_path.display()),
            format!("--listen=127.0.0.1:{}", cp.gpugate_port),
            format!("--extender-listen=127.0.0.1:{}", cp.extender_port),
            format!("--admin-listen=127.0.0.1:{}", cp.gpugate_admin_port),
            format!("--tls-cert={}", cp.pki.path("webhook.crt").display()),
            format!("--tls-key={}", cp.pki.path("webhook.key").display()),
            "--reload-seconds=1".into(),
        ];
        cp.start_gpugate().await?;

        for o in manifests::local_webhooks(deployed, cp.gpugate_port, &cp.pki.webhook.ca_cert_pem)?
        {
            manifests::apply(&admin, &discovery, &o, false).await?;
        }
        cp.wait_for_webhooks("nvidia.com/gpu").await?;

        cp.scheduler_config = cp.local_scheduler_config(deployed)?;
        let config = cp.scheduler_config.clone();
        cp.start_scheduler("kube-scheduler", &config).await?;
        Ok(cp)
    }

    /// A rendered KubeSchedulerConfiguration as run here (the extender on
    /// 127.0.0.1, the ServiceAccount's kubeconfig).
    pub fn local_scheduler_config(&self, objects: &[Value]) -> anyhow::Result<String> {
        manifests::local_scheduler_config(
            objects,
            &self.dir.join("gpugate.kubeconfig"),
            self.extender_port,
            &self.pki.path("webhook-ca.crt"),
        )
    }

    /// Runs the processes from other rendered objects (the Helm chart's),
    /// with this gpugate config: their RBAC applied for real, kube-scheduler
    /// stopped, gpugate restarted with the config, their webhook
    /// configurations applied (pointed at 127.0.0.1) and answering for the
    /// config's GPU resource, and kube-scheduler started with their
    /// configuration. `redeploy(deployed, &cp.gpugate_config)` goes back.
    pub async fn redeploy(&self, objects: &[Value], config: &str) -> anyhow::Result<()> {
        let gpu_resource = gpugate::config::Config::from_yaml(config, "the redeployed config")?
            .nvidia
            .resource_count_name;
        let discovery = Discovery::new(self.admin.clone()).run().await?;
        for o in objects
            .iter()
            .filter(|o| RIGHTS.contains(&manifests::kind(o)))
        {
            manifests::apply(&self.admin, &discovery, o, false).await?;
        }
        self.stop_scheduler();
        std::fs::write(self.dir.join("gpugate.yaml"), config)?;
        self.kill_gpugate();
        self.start_gpugate().await?;
        for o in
            manifests::local_webhooks(objects, self.gpugate_port, &self.pki.webhook.ca_cert_pem)?
        {
            manifests::apply(&self.admin, &discovery, &o, false).await?;
        }
        self.wait_for_webhooks(&gpu_resource).await?;
        let scheduler = self.local_scheduler_config(objects)?;
        self.start_scheduler("kube-scheduler", &scheduler).await
    }

    /// Starts kube-scheduler with this KubeSchedulerConfiguration (its log
    /// is `<name>.log`) and waits until it holds the Lease. Leader election
    /// is on, as shipped; the Lease is deploy/'s `gpugate/gpugate-scheduler`
    /// (the only one deploy/'s Role allows), so a previous kube-scheduler
    /// must have been stopped: the new one is ready once it, not the
    /// previous holder, holds the Lease.
    ///
    /// Its secure port serves `/metrics` to anyone (the always-allow paths,
    /// no delegated authentication lookup) with the cluster CA's
    /// certificate for 127.0.0.1, so that `scheduler_metrics` can read
    /// `scheduler_schedule_attempts_total`.
    pub async fn start_scheduler(&self, name: &str, config: &str) -> anyhow::Result<()> {
        let leases: Api<Lease> = Api::namespaced(self.admin.clone(), "gpugate");
        let holder = |l: Option<Lease>| {
            l.and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty())
        };
        let before = holder(leases.get_opt("gpugate-scheduler").await?);
        let path = self.dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config)?;
        let port = free_port()?;
        *self.scheduler_port.lock().unwrap() = port;
        let scheduler = Proc::spawn(
            name,
            &mut self.scheduler_command(&path, port),
            &self.log_dir(),
        )?;
        *self.scheduler.lock().unwrap() = Some(scheduler);
        // Held by this process (a new identity), not by a stopped one
        // whose Lease has not expired yet.
        let what = format!("{name} holds Lease gpugate/gpugate-scheduler");
        eventually(&what, Duration::from_secs(90), || {
            let (leases, before) = (leases.clone(), before.clone());
            async move {
                match leases.get_opt("gpugate-scheduler").await {
                    Ok(l) => match holder(l) {
                        Some(h) if Some(&h) != before.as_ref() => Ok(()),
                        Some(h) => Err(format!("still held by {h}")),
                        None => Err("no holder yet".into()),
                    },
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await
        .map_err(|e| self.with_log(name, &self.scheduler, e))
    }

    /// kube-scheduler with this configuration file, its secure port (its
    /// `/metrics`, see [`ControlPlane::scheduler_metrics_at`]) on `port`.
    pub fn scheduler_command(&self, config: &Path, port: u16) -> Command {
        let p = |n: &str| self.pki.path(n).display().to_string();
        let mut cmd = Command::new(self.bin.join("kube-scheduler"));
        cmd.args([
            format!("--config={}", config.display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            "--authentication-skip-lookup=true".into(),
            format!(
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics{}",
                if profiling() {
                    ",/debug/pprof/profile"
                } else {
                    ""
                }
            ),
            "--v=2".into(),
        ]);
        cmd
    }

    /// gpugate's arguments as this control plane runs it, with another
    /// kubeconfig and other ports.
    pub fn gpugate_args_with(
        &self,
        kubeconfig: &Path,
        (listen, extender, admin): (u16, u16, u16),
    ) -> Vec<String> {
        self.gpugate_args
            .iter()
            .map(|a| match a.split_once('=') {
                Some(("--kubeconfig", _)) => format!("--kubeconfig={}", kubeconfig.display()),
                Some(("--listen", _)) => format!("--listen=127.0.0.1:{listen}"),
                Some(("--extender-listen", _)) => format!("--extender-listen=127.0.0.1:{extender}"),
                Some(("--admin-listen", _)) => format!("--admin-listen=127.0.0.1:{admin}"),
                _ => a.clone(),
            })
            .collect()
    }

    /// Stops kube-scheduler (SIGTERM, then SIGKILL after 10 s).
    pub fn stop_scheduler(&self) {
        if let Some(mut p) = self.scheduler.lock().unwrap().take() {
            p.terminate(Duration::from_secs(10));
        }
    }

    /// kube-scheduler's secure port (the scale benchmark's profiles).
    #[allow(dead_code)]
    pub fn scheduler_port(&self) -> u16 {
        *self.scheduler_port.lock().unwrap()
    }

    /// kube-scheduler's own metrics (its secure port, `/metrics`).
    pub async fn scheduler_metrics(&self) -> anyhow::Result<String> {
        let port = *self.scheduler_port.lock().unwrap();
        self.scheduler_metrics_at(port).await
    }

    /// The `/metrics` of the kube-scheduler whose secure port is `port`.
    pub async fn scheduler_metrics_at(&self, port: u16) -> anyhow::Result<String> {
        let kubeconfig = self
            .dir
            .join(format!("scheduler-metrics-{port}.kubeconfig"));
        write_kubeconfig(&kubeconfig, port, &self.pki.cluster.ca_cert_pem, json!({}))?;
        let client = client_from(&kubeconfig).await?;
        let req = http::Request::get("/metrics").body(vec![])?;
        let text = tokio::time::timeout(Duration::from_secs(20), client.request_text(req))
            .await
            .context("kube-scheduler /metrics timed out")?
            .context("kube-scheduler /metrics")?;
        Ok(text)
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn with_log(&self, what: &str, p: &Mutex<Option<Proc>>, e: anyhow::Error) -> anyhow::Error {
        let tail = p
            .lock()
            .ok()
            .and_then(|p| p.as_ref().map(|p| p.log_tail(30)))
            .unwrap_or_default();
        anyhow!("{e:#}\n--- last lines of {what}'s log ---\n{tail}")
    }

    pub async fn start_gpugate(&self) -> anyhow::Result<()> {
        let proc = Proc::spawn(
            "gpugate",
            Command::new(&self.gpugate_bin)
                .args(&self.gpugate_args)
                .env("RUST_LOG", "info")
                // A pod's name is its hostname, as kube-scheduler's Lease
                // identity begins (hami_scheduler_is_leader).
                .env("POD_NAME", machine_hostname()),
            &self.log_dir(),
        )?;
        *self.gpugate.lock().unwrap() = Some(proc);
        wait_ready(
            "gpugate",
            &self.gpugate,
            self.gpugate_admin_port,
            Duration::from_secs(60),
        )
        .await
        .map_err(|e| self.with_log("gpugate", &self.gpugate, e))
    }

    /// Starts gpugate again if it is not running (a scenario that stopped it
    /// may have been cut short), so that one failure does not fail the rest.
    pub async fn ensure_gpugate(&self) -> anyhow::Result<()> {
        if !exited(&self.gpugate) {
            return Ok(());
        }
        self.kill_gpugate();
        self.start_gpugate().await
    }

    /// SIGKILL: no drain, binds cut wherever they are.
    pub fn kill_gpugate(&self) {
        if let Some(mut p) = self.gpugate.lock().unwrap().take() {
            p.kill();
        }
    }

    /// The API server's admission plugin learns webhook configurations
    /// through an informer: probe with server-side dry-run creates until
    /// both webhooks answer (envtest's sentinel).
    pub async fn wait_for_webhooks(&self, gpu_resource: &str) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), "e2e-sentinel");
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let gpu: Pod = serde_json::from_value(json!({
            "metadata": {"name": "sentinel"},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "resources": {"limits": {gpu_resource: "1"}}}]}
        }))?;
        let mut forged = gpu.clone();
        forged.metadata.annotations = Some(
            [("hami.io/vgpu-node".to_string(), "x".to_string())]
                .into_iter()
                .collect(),
        );
        eventually("the webhooks answer", Duration::from_secs(30), || {
            let (pods, dry, gpu, forged) = (pods.clone(), dry.clone(), gpu.clone(), forged.clone());
            async move {
                let mutated = pods.create(&dry, &gpu).await.map_err(|e| e.to_string())?;
                if mutated.spec.and_then(|s| s.scheduler_name).as_deref() != Some("hami-scheduler")
                {
                    return Err("mutating webhook not called yet".into());
                }
                match pods.create(&dry, &forged).await {
                    Err(kube::Error::Api(s)) if s.message.contains("hami.io/vgpu-node") => Ok(()),
                    other => Err(format!("validating webhook not called yet: {other:?}")),
                }
            }
        })
        .await
    }

    /// The tail of every process's log, for a failure report.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (name, p) in [
            ("gpugate", &self.gpugate),
            ("kube-scheduler", &self.scheduler),
            ("kube-apiserver", &self.apiserver),
        ] {
            let tail = p
                .lock()
                .ok()
                .and_then(|p| p.as_ref().map(|p| p.log_tail(25)))
                .unwrap_or_else(|| {
                    crate::procs::tail(&self.log_dir().join(format!("{name}.log")), 25)
                });
            out.push_str(&format!("--- last lines of {name}'s log ---\n{tail}\n"));
        }
        out
    }
}

/// Whether the process is gone (never started, or exited).
pub fn exited(p: &Mutex<Option<Proc>>) -> bool {
    p.lock()
        .unwrap()
        .as_mut()
        .is_none_or(|p| p.exited().is_some())
}

/// Until the gpugate in `proc` answers `/readyz` 200 on `admin_port`; fails
/// at once if it exits.
pub async fn wait_ready(
    name: &str,
    proc: &Mutex<Option<Proc>>,
    admin_port: u16,
    within: Duration,
) -> anyhow::Result<()> {
    eventually(&format!("{name} /readyz"), within, || async move {
        if let Some(status) = proc.lock().unwrap().as_mut().and_then(Proc::exited) {
            return Err(format!("{name} exited: {status}"));
        }
        match crate::http::get(admin_port, "/readyz").await {
            Ok((200, _)) => Ok(()),
            Ok((status, body)) => Err(format!("{status} {}", body.trim())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

/// Runs `tests/e2e/build-control-plane.sh` (Go modules, cached outside the
/// repository) and returns the directory of etcd, kube-apiserver and
/// kube-scheduler; `None` when there is no `go`.
pub fn build(root: &Path) -> anyhow::Result<Option<PathBuf>> {
    let out = Command::new(root.join("tests/e2e/build-control-plane.sh"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("run tests/e2e/build-control-plane.sh")?;
    match out.status.code() {
        Some(0) => {}
        Some(3) => return Ok(None),
        _ => bail!("build-control-plane.sh exited with {}", out.status),
    }
    let stdout = String::from_utf8(out.stdout)?;
    let bin = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
    if !bin.join("kube-apiserver").is_file() {
        bail!("build-control-plane.sh printed {stdout:?}, not a bin directory");
    }
    Ok(Some(bin))
}

/// `kustomize build deploy/<variant>` with the kustomize the build script
/// installed beside the binaries.
pub fn render(bin: &Path, root: &Path, variant: &str) -> anyhow::Result<Vec<Value>> {
    let kustomize = bin
        .parent()
        .context("bin has no parent")?
        .join("tools")
        .join("kustomize");
    manifests::render(&kustomize, &root.join("deploy").join(variant))
}

/// The Helm chart rendered with the helm the build script installed
/// beside the binaries.
pub fn render_chart(bin: &Path, root: &Path, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let helm = bin
        .parent()
        .context("bin has no parent")?
        .join("tools")
        .join("helm");
    manifests::helm_template(&helm, root, args)
}

/// deploy/'s gpugate config with one namespace policy added, so that the
/// policy gateway's defaults can be seen end to end.
fn gpugate_config(deployed: &[Value]) -> anyhow::Result<String> {
    let mut text = manifests::config_map_entry(deployed, "gpugate-config", "gpugate.yaml")?;
    if text.contains("\nnamespacePolicies:") {
        bail!("deploy/'s config already has namespacePolicies; the suite adds its own");
    }
    text.push_str(&format!(
        "namespacePolicies:
  - name: e2e-team
    namespaces: [{POLICY_NAMESPACE}]
    mode: enforce
    defaults:
      gpumem: 4096
      gpucores: 25
      nodeSchedulerPolicy: spread
      gpuSchedulerPolicy: binpack
  - name: e2e-defrag
    namespaces: [e2e-defrag, e2e-kueue-movable]
    movable: true
"
    ));
    // Defragmentation moves pods created more than 5 s ago (the scenario's
    // are seconds old), not 600.
    let Some(at) = format!("\n{text}").find("\nscheduler:\n") else {
        bail!("deploy/'s config has no scheduler section");
    };
    text.insert_str(
        at + "scheduler:\n".len(),
        "  defragmentation: {minSecondsBetweenMoves: 5}\n",
    );
    Ok(text)
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn write_kubeconfig(path: &Path, port: u16, ca_pem: &str, user: Value) -> anyhow::Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": format!("https://127.0.0.1:{port}"),
            "certificate-authority-data": b64(ca_pem),
        }}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        "current-context": "e2e",
    });
    std::fs::write(path, serde_yaml_ng::to_string(&config)?)?;
    Ok(())
}

impl ControlPlane {
    /// A client acting as the ServiceAccount `namespace/name` (a token
    /// from a TokenRequest), with exactly the rights RBAC gives it.
    pub async fn client_as_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Client> {
        let token = service_account_token(&self.admin, namespace, name).await?;
        let path = self.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        let kc = Kubeconfig::read_from(self.dir.join("admin.kubeconfig"))?;
        let server = kc
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .ok_or_else(|| anyhow!("admin.kubeconfig names no server"))?;
        let port: u16 = server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow!("no port in {server}"))?;
        write_kubeconfig(
            &path,
            port,
            &self.pki.cluster.ca_cert_pem,
            json!({"token": token}),
        )?;
        client_from(&path).await
    }

    /// A client of the admin's that impersonates `user` in `groups`, with
    /// exactly the rights RBAC gives that user.
    pub async fn client_as_user(&self, user: &str, groups: &[&str]) -> anyhow::Result<Client> {
        let kc = Kubeconfig::read_from(self.dir.join("admin.kubeconfig"))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
        Ok(Client::try_from(config)?)
    }
}

/// This machine's hostname, which kube-scheduler puts at the head of its
/// Lease identity.
pub fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn service_account_token(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    // Built from JSON: the Rust field types differ between API versions.
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"expirationSeconds": 24 * 3600}}))?;
    let tr = sas
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .with_context(|| format!("TokenRequest for {ns}/{name}"))?;
    serde_json::to_value(&tr)?["status"]["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("TokenRequest without a token"))
}

pub async fn ensure_namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(ns).await?.is_none() {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        api.create(&PostParams::default(), &n).await?;
    }
    Ok(())
}
