//! Memory of `gpugate serve` at 5,000 nodes x 8 GPUs and 40,000 running
//! vGPU pods (benches/support/big_cluster.rs), as a separate release
//! process: VmRSS sampled from /proc every 50 ms while it loads, VmHWM (the
//! kernel's peak), RSS once idle, and RSS after `/filter` calls with all
//! 5,000 candidate names and after `/metrics` scrapes.
//!
//! Two modes:
//! - `--mode file` (default): the cluster written as a snapshot file, as
//!   `kubectl get nodes,pods -A -o yaml` writes one (a single `List`
//!   document; `--format json` for `-o json`, `--format docs` for one
//!   document per object), served with `gpugate serve --cluster FILE`.
//! - `--mode api`: etcd and kube-apiserver from the e2e suite's cache
//!   (tests/e2e/build-control-plane.sh), the cluster created through the
//!   API (64 requests at a time; pods created already bound, no scheduler,
//!   no webhooks), then `gpugate serve --kubeconfig` watching it. Sampled
//!   until `gpugate_cluster_synced 1` (`/metrics` read every 250 ms) and
//!   for `--idle-seconds` after. The
//!   populated etcd is kept in `--api-dir` (default
//!   `$TMPDIR/gpugate-memory-api`) and reused by the next run; delete the
//!   directory to build it again.
//!
//! `--write-snapshot PATH` only writes the snapshot file and exits;
//! `--gpugate PATH` measures another build (e.g. an older commit's).
//!
//! Run: `cargo bench --bench memory_scale [-- --mode api]`. Results go to
//! docs/benchmarks.md ("Memory at 5,000 nodes x 8 GPUs and 40,000 pods").

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use serde::Serialize;
use serde_json::{Value, json};

#[allow(dead_code)]
#[path = "support/big_cluster.rs"]
mod big_cluster;
#[allow(dead_code)]
#[path = "support/pod_review.rs"]
mod pod_review;
#[allow(dead_code)]
#[path = "support/server_process.rs"]
mod server_process;
#[allow(dead_code)]
#[path = "support/tls_load.rs"]
mod tls_load;
use server_process::{Server, admin_get, free_port, rss};

use big_cluster::{NODES, RUNNING_PODS, node_name};

const GPUS_PER_NODE: u32 = 8;
const NUMA_GROUP: u32 = 4;
const MIB: f64 = 1024.0;

#[derive(Debug, Clone)]
struct Options {
    mode: String,
    format: String,
    write_snapshot: Option<PathBuf>,
    idle_seconds: u64,
    filter_calls: usize,
    metrics_scrapes: usize,
    api_dir: PathBuf,
    concurrency: usize,
    env: Vec<(String, String)>,
    /// Another gpugate binary (an older build, to compare).
    gpugate: Option<PathBuf>,
}

fn options() -> Options {
    let mut o = Options {
        mode: "file".into(),
        format: "list".into(),
        write_snapshot: None,
        idle_seconds: 10,
        filter_calls: 20,
        metrics_scrapes: 5,
        api_dir: std::env::temp_dir().join("gpugate-memory-api"),
        concurrency: 64,
        env: Vec::new(),
        gpugate: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--mode" => o.mode = value(),
            "--format" => o.format = value(),
            "--write-snapshot" => o.write_snapshot = Some(value().into()),
            "--idle-seconds" => o.idle_seconds = value().parse().expect("--idle-seconds"),
            "--filter-calls" => o.filter_calls = value().parse().expect("--filter-calls"),
            "--metrics-scrapes" => o.metrics_scrapes = value().parse().expect("--metrics-scrapes"),
            "--api-dir" => o.api_dir = value().into(),
            "--concurrency" => o.concurrency = value().parse().expect("--concurrency"),
            "--gpugate" => o.gpugate = Some(value().into()),
            // An environment variable for the server, e.g.
            // `--server-env MALLOC_ARENA_MAX=2`.
            "--server-env" => {
                let v = value();
                let (k, v) = v.split_once('=').expect("--server-env NAME=VALUE");
                o.env.push((k.into(), v.into()));
            }
            // cargo bench passes --bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn main() {
    gpugate::server::tls::install_default_provider();
    let o = options();
    if let Some(path) = &o.write_snapshot {
        let t = Instant::now();
        write_snapshot(path, &o.format);
        eprintln!(
            "wrote {} ({:.1} MiB) in {:.1} s",
            path.display(),
            file_mib(path),
            t.elapsed().as_secs_f64()
        );
        return;
    }
    match o.mode.as_str() {
        "file" => file_mode(&o),
        "api" => api_mode(&o),
        other => panic!("--mode {other}: file or api"),
    }
}

fn file_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / MIB / MIB)
}

// --- the snapshot file ------------------------------------------------------

/// Writes the cluster the way kubectl does: `list` is one `List` document
/// (`-o yaml`), `json` the same as JSON (`-o json`), `docs` one YAML
/// document per object.
fn write_snapshot(path: &Path, format: &str) {
    let snapshot = big_cluster::k8s_objects(GPUS_PER_NODE, NUMA_GROUP);
    let items: Vec<Value> = snapshot
        .nodes
        .iter()
        .map(|n| serde_json::to_value(n).unwrap())
        .chain(
            snapshot
                .pods
                .iter()
                .map(|p| serde_json::to_value(p).unwrap()),
        )
        .collect();
    drop(snapshot);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    match format {
        "json" => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": items,
                              "metadata": {"resourceVersion": ""}});
            let mut ser = serde_json::Serializer::pretty(&mut out);
            list.serialize(&mut ser).unwrap();
        }
        "list" => {
            writeln!(out, "apiVersion: v1\nitems:").unwrap();
            for item in &items {
                let text = serde_yaml_ng::to_string(item).unwrap();
                for (i, line) in text.lines().enumerate() {
                    let prefix = if i == 0 { "- " } else { "  " };
                    writeln!(out, "{prefix}{line}").unwrap();
                }
            }
            writeln!(out, "kind: List\nmetadata:\n  resourceVersion: \"\"").unwrap();
        }
        "docs" => {
            for item in &items {
                writeln!(out, "---\n{}", serde_yaml_ng::to_string(item).unwrap()).unwrap();
            }
        }
        other => panic!("--format {other}: list, json or docs"),
    }
    out.flush().unwrap();
}

// --- the server process and its memory --------------------------------------

fn start_server(source: &[String], o: &Options) -> Server {
    let bin = o
        .gpugate
        .clone()
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_gpugate").into());
    server_process::start("memory-scale", &bin, source, &o.env)
}

fn mib(kib: u64) -> String {
    format!("{:.0} MiB", kib as f64 / MIB)
}

/// Samples VmRSS every 50 ms in a thread; the highest sample so far.
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss(pid).0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Sampler { peak, stop }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Waits until `ready` says so (asked every `every`), up to `limit`.
fn wait_until(
    server: &mut Server,
    limit: Duration,
    every: Duration,
    ready: impl Fn(&Server) -> bool,
) -> Duration {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Ok(Some(status)) = server.child.try_wait() {
            let log = std::fs::read_to_string(server.dir.join("stderr.log")).unwrap_or_default();
            panic!("gpugate exited with {status}:\n{log}");
        }
        if ready(server) {
            return t.elapsed();
        }
        std::thread::sleep(every);
    }
    panic!("gpugate not ready within {limit:?}");
}

/// The pending pod kube-scheduler hands the extender: 1 GPU of 8,000 MiB
/// and 20 cores.
fn filter_body() -> Bytes {
    let mut pod = pod_review::vllm_pod();
    pod["metadata"]["uid"] = json!("3f1c9a52-8e0b-4f57-9d1e-5b7a2c4e6d10");
    pod["spec"]["containers"][0]["resources"]["limits"] = json!({
        "nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"});
    let names: Vec<String> = (0..NODES).map(node_name).collect();
    Bytes::from(json!({"Pod": pod, "Nodes": null, "NodeNames": names}).to_string())
}

/// `calls` /filter calls, one at a time over one connection; returns the
/// number of feasible nodes of the last answer.
fn filter_calls(server: &Server, calls: usize) -> usize {
    let ca = std::fs::read_to_string(server.dir.join("certs/ca.crt")).expect("CA");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let body = filter_body();
    runtime.block_on(async {
        let mut sender = tls_load::connect(server.extender, &tls_load::connector(&ca)).await;
        let mut feasible = 0;
        for _ in 0..calls {
            let (status, answer) = tls_load::post(&mut sender, "/filter", body.clone())
                .await
                .expect("filter");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
            let answer: Value = serde_json::from_slice(&answer).unwrap();
            feasible = answer["NodeNames"].as_array().map_or(0, Vec::len);
        }
        feasible
    })
}

/// After the server is loaded: idle RSS, then RSS after /filter calls.
fn measure_after_load(server: &Server, sampler: &Sampler, loaded_in: Duration, o: &Options) {
    let pid = server.child.id();
    let (at_ready, _) = rss(pid);
    std::thread::sleep(Duration::from_secs(o.idle_seconds));
    let (idle, hwm_idle) = rss(pid);
    let t = Instant::now();
    let feasible = filter_calls(server, o.filter_calls);
    let filter_time = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (after_filter, _) = rss(pid);
    // What Prometheus does every 15-60 s: the text has a series per GPU
    // and per vGPU (HAMi's gauges), 57 MB here.
    let t = Instant::now();
    let mut metrics_bytes = 0;
    for _ in 0..o.metrics_scrapes {
        metrics_bytes = admin_get(server.admin, "/metrics").map_or(0, |(_, t)| t.len());
    }
    let scrape_time = t.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (after_scrapes, hwm) = rss(pid);
    println!("loaded in {:.1} s", loaded_in.as_secs_f64());
    println!("RSS when loaded:                {}", mib(at_ready));
    println!(
        "RSS idle {:>2} s later:           {}",
        o.idle_seconds,
        mib(idle)
    );
    println!("VmHWM (peak) after load:        {}", mib(hwm_idle));
    println!(
        "RSS after {} /filter calls:     {} ({} feasible of {NODES}; {:.0} ms each)",
        o.filter_calls,
        mib(after_filter),
        feasible,
        filter_time.as_secs_f64() * 1000.0 / o.filter_calls.max(1) as f64
    );
    println!(
        "RSS after {} /metrics scrapes:   {} ({:.1} MiB of text; {:.0} ms each)",
        o.metrics_scrapes,
        mib(after_scrapes),
        metrics_bytes as f64 / MIB / MIB,
        scrape_time.as_secs_f64() * 1000.0 / o.metrics_scrapes.max(1) as f64
    );
    println!("VmHWM (peak) at the end:        {}", mib(hwm));
    println!("highest 50 ms VmRSS sample:     {}", mib(sampler.peak()));
}

fn file_mode(o: &Options) {
    let ext = if o.format == "json" { "json" } else { "yaml" };
    let path = std::env::temp_dir().join(format!("gpugate-big-cluster-{}.{ext}", o.format));
    if !path.is_file() {
        write_snapshot(&path, &o.format);
    }
    println!(
        "mode file: gpugate serve --cluster {} ({:.1} MiB, format {}: {NODES} nodes x {GPUS_PER_NODE} GPUs, {RUNNING_PODS} pods)",
        path.display(),
        file_mib(&path),
        o.format
    );
    if !o.env.is_empty() {
        println!("server environment: {:?}", o.env);
    }
    let mut server = start_server(&["--cluster".into(), path.display().to_string()], o);
    let sampler = Sampler::start(server.child.id());
    let loaded_in = wait_until(
        &mut server,
        Duration::from_secs(600),
        Duration::from_millis(50),
        |s| admin_get(s.admin, "/readyz").is_some_and(|(status, _)| status == 200),
    );
    measure_after_load(&server, &sampler, loaded_in, o);
}

// --- API mode: a real kube-apiserver -----------------------------------------

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(dir: &Path, name: &str, cmd: &mut Command) -> Proc {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    Proc(child)
}

/// The control plane's bin directory, built (or found cached) by the e2e
/// suite's script.
fn control_plane_bin() -> PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(format!("{root}/tests/e2e/build-control-plane.sh"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/e2e/build-control-plane.sh");
    assert!(
        out.status.success(),
        "build-control-plane.sh failed (needs go)"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(stdout.lines().last().unwrap_or("").trim())
}

/// Files of a control plane that survive runs: PKI, token file, ports.
fn api_files(dir: &Path) -> (u16, u16, u16) {
    let ports = dir.join("ports");
    if let Ok(text) = std::fs::read_to_string(&ports) {
        let p: Vec<u16> = text
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        return (p[0], p[1], p[2]);
    }
    std::fs::create_dir_all(dir).unwrap();
    let bundle = gpugate::server::certs::generate(
        &gpugate::server::certs::CertSpec::local_and(&[], 365),
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let sa = rcgen::KeyPair::generate().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("ca.crt", &bundle.ca_cert_pem);
    write("apiserver.crt", &bundle.cert_pem);
    write("apiserver.key", &bundle.key_pem);
    write("sa.key", &sa.serialize_pem());
    write("sa.pub", &sa.public_key_pem());
    write(
        "tokens.csv",
        "memory-bench-admin-token,admin,admin,\"system:masters\"\n",
    );
    let p = (free_port().port(), free_port().port(), free_port().port());
    write("ports", &format!("{} {} {}", p.0, p.1, p.2));
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {
            "server": format!("https://127.0.0.1:{}", p.2),
            "certificate-authority": dir.join("ca.crt").display().to_string()}}],
        "users": [{"name": "admin", "user": {"token": "memory-bench-admin-token"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "admin"}}],
        "current-context": "bench",
    });
    write("admin.kubeconfig", &kubeconfig.to_string());
    p
}

fn start_control_plane(bin: &Path, dir: &Path) -> (Proc, Proc) {
    let (etcd_port, peer_port, api_port) = api_files(dir);
    let f = |n: &str| dir.join(n).display().to_string();
    let etcd = spawn(
        dir,
        "etcd",
        Command::new(bin.join("etcd")).args([
            "--name=default".to_string(),
            format!("--data-dir={}", f("etcd")),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync=true".into(),
            "--quota-backend-bytes=8589934592".into(),
            "--log-level=warn".into(),
        ]),
    );
    let apiserver = spawn(
        dir,
        "kube-apiserver",
        Command::new(bin.join("kube-apiserver")).args([
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", f("apiserver-certs")),
            format!("--tls-cert-file={}", f("apiserver.crt")),
            format!("--tls-private-key-file={}", f("apiserver.key")),
            format!("--token-auth-file={}", f("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer=https://127.0.0.1:{api_port}"),
            format!("--service-account-key-file={}", f("sa.pub")),
            format!("--service-account-signing-key-file={}", f("sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--endpoint-reconciler-type=none".into(),
            // Many writers at once, well above the defaults' 400/200.
            "--max-requests-inflight=2000".into(),
            "--max-mutating-requests-inflight=1000".into(),
            "--profiling=false".into(),
        ]),
    );
    (etcd, apiserver)
}

async fn admin_client(dir: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(dir.join("admin.kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn wait_for_apiserver(client: &kube::Client) {
    let t = Instant::now();
    loop {
        let req = http::Request::get("/readyz").body(vec![]).unwrap();
        if client
            .request_text(req)
            .await
            .is_ok_and(|t| t.trim() == "ok")
        {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "kube-apiserver not ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates the cluster through the API, `concurrency` requests at a time.
async fn populate(client: &kube::Client, concurrency: usize) {
    let snapshot = big_cluster::k8s_objects(GPUS_PER_NODE, NUMA_GROUP);
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for i in 0..20 {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": format!("team-{i}")}})).unwrap();
        match namespaces.create(&pp, &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("namespace: {e}"),
        }
    }
    let t = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let created = futures::stream::iter(snapshot.nodes.iter())
        .map(|n| {
            let (nodes, pp) = (nodes.clone(), pp.clone());
            async move { create(&nodes, &pp, n).await }
        })
        .buffer_unordered(concurrency)
        .count()
        .await;
    eprintln!(
        "created {created} nodes in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let done = AtomicU64::new(0);
    let created = futures::stream::iter(snapshot.pods.iter())
        .map(|p| {
            let pods: Api<Pod> =
                Api::namespaced(client.clone(), p.metadata.namespace.as_deref().unwrap());
            let pp = pp.clone();
            let done = &done;
            async move {
                let mut p = p.clone();
                p.metadata.uid = None;
                p.status = None;
                for c in &mut p.spec.as_mut().unwrap().containers {
                    c.image = Some("registry.k8s.io/pause:3.10".into());
                }
                create(&pods, &pp, &p).await;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(5000) {
                    eprintln!("  {n} pods ({:.0} s)", t.elapsed().as_secs_f64());
                }
            }
        })
        .buffer_unordered(concurrency)
        .count()
        .await;
    eprintln!(
        "created {created} pods in {:.0} s",
        t.elapsed().as_secs_f64()
    );
}

async fn create<K>(api: &Api<K>, pp: &PostParams, obj: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
{
    let mut tries = 0;
    loop {
        match api.create(pp, obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => return,
            Err(e) if tries < 10 => {
                tries += 1;
                eprintln!("create failed ({e}); retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("create: {e}"),
        }
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn api_mode(o: &Options) {
    let bin = control_plane_bin();
    let dir = &o.api_dir;
    let populated = dir.join(".populated");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (_etcd, _apiserver) = start_control_plane(&bin, dir);
    let client = runtime.block_on(admin_client(dir));
    runtime.block_on(wait_for_apiserver(&client));
    if populated.is_file() {
        println!(
            "mode api: reusing the cluster in {} (populated {})",
            dir.display(),
            std::fs::read_to_string(&populated)
                .unwrap_or_default()
                .trim()
        );
    } else {
        let t = Instant::now();
        runtime.block_on(populate(&client, o.concurrency));
        let took = format!(
            "in {:.0} s, {} requests at a time",
            t.elapsed().as_secs_f64(),
            o.concurrency
        );
        std::fs::write(&populated, &took).unwrap();
        println!("mode api: created {NODES} nodes and {RUNNING_PODS} pods {took}");
    }
    drop(client);
    drop(runtime);
    if !o.env.is_empty() {
        println!("server environment: {:?}", o.env);
    }
    let kubeconfig = dir.join("admin.kubeconfig").display().to_string();
    let mut server = start_server(&["--kubeconfig".into(), kubeconfig], o);
    let sampler = Sampler::start(server.child.id());
    let synced_in = wait_until(
        &mut server,
        Duration::from_secs(900),
        Duration::from_millis(250),
        |s| {
            admin_get(s.admin, "/metrics")
                .and_then(|(_, text)| metric(&text, "gpugate_cluster_synced"))
                == Some(1.0)
        },
    );
    let metrics = admin_get(server.admin, "/metrics").map(|(_, t)| t);
    if let Some(text) = &metrics {
        for line in text.lines().filter(|l| {
            l.starts_with("gpugate_cluster_nodes")
                || l.starts_with("gpugate_cluster_allocations")
                || l.starts_with("gpugate_cluster_gpus")
        }) {
            println!("  {line}");
        }
    }
    measure_after_load(&server, &sampler, synced_in, o);
}
