//! `gpugate serve` as a user runs it: a real process with self-made
//! certificates and a standalone cluster snapshot; readiness, metrics, a
//! review over TLS, and SIGTERM while a request is half sent (graceful
//! shutdown must finish it).

mod support {
    pub mod https;
    pub mod ports;
    pub mod process;
}

use std::io::Read as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A running `gpugate serve`, killed on drop.
struct Gpugate {
    child: Child,
    listen: SocketAddr,
    admin: SocketAddr,
    dir: PathBuf,
}

impl Drop for Gpugate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> SocketAddr {
    let port = support::ports::free_port().expect("a free port");
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn spawn(name: &str, extra: &[&str]) -> Gpugate {
    spawn_configured(name, None, extra)
}

/// Spawns with `--config DIR/gpugate.yaml` holding `config`, when given.
fn spawn_configured(name: &str, config: Option<&str>, extra: &[&str]) -> Gpugate {
    let dir = std::env::temp_dir().join(format!("gpugate-proc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (listen, admin) = (free_port(), free_port());
    let mut config_args = Vec::new();
    if let Some(text) = config {
        let path = dir.join("gpugate.yaml");
        std::fs::write(&path, text).unwrap();
        config_args = vec!["--config".to_string(), path.display().to_string()];
    }
    let child = Command::new(env!("CARGO_BIN_EXE_gpugate"))
        .arg("serve")
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--admin-listen")
        .arg(admin.to_string())
        .arg("--cert-dir")
        .arg(dir.join("certs"))
        .args(extra)
        .args(&config_args)
        .stdout(Stdio::null())
        // A file, not a pipe: nobody reads the log while the test runs, and
        // a full pipe would block the server.
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    Gpugate {
        child,
        listen,
        admin,
        dir,
    }
}

/// Plain HTTP GET on the admin port; (status, body).
fn admin_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((status, body))
}

fn wait_ready(g: &mut Gpugate) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = g.child.try_wait() {
            let err = std::fs::read_to_string(g.dir.join("stderr.log")).unwrap_or_default();
            panic!("gpugate exited early ({status}): {err}");
        }
        if admin_get(g.admin, "/readyz").is_some_and(|(s, _)| s == 200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("gpugate not ready within 30 s");
}

async fn connect(g: &Gpugate) -> tokio_rustls::client::TlsStream<TcpStream> {
    let ca = std::fs::read(g.dir.join("certs/ca.crt")).unwrap();
    support::https::connect_trusting(g.listen, &ca).await
}

fn review_body() -> Vec<u8> {
    review_of("gpu-only.yaml", "6a1b3c9e-0000-4000-8000-000000000001")
}

/// A CREATE review of the pod in tests/fixtures/pods/`fixture`.
fn review_of(fixture: &str, uid: &str) -> Vec<u8> {
    let path = Path::new(ROOT).join("tests/fixtures/pods").join(fixture);
    let pod: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "default",
            "userInfo": {"username": "test"},
            "object": pod,
        }
    }))
    .unwrap()
}

/// Reads one HTTP/1.1 response with a Content-Length body.
async fn read_response(tls: &mut tokio_rustls::client::TlsStream<TcpStream>) -> (u16, Value) {
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut raw)).await;
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn standalone_serve_is_ready_counts_the_snapshot_and_mutates_over_tls() {
    let mut g = spawn(
        "standalone",
        &["--cluster", &format!("{ROOT}/examples/demo/cluster.yaml")],
    );
    wait_ready(&mut g);
    let (_, metrics) = admin_get(g.admin, "/metrics").unwrap();
    assert!(metrics.contains("gpugate_cluster_synced 1"), "{metrics}");
    assert!(metrics.contains("gpugate_cluster_nodes 3"), "{metrics}");
    assert!(
        metrics.contains("gpugate_ledger_allocations 1"),
        "{metrics}"
    );

    let body = review_body();
    let mut tls = connect(&g).await;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body).await.unwrap();
    let (status, review) = read_response(&mut tls).await;
    assert_eq!(status, 200);
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
}

fn send_signal(g: &Gpugate, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &g.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal}");
}

/// Starts a POST of a review and sends half of its body.
async fn half_sent(
    g: &Gpugate,
    path: &str,
) -> (tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>) {
    let body = review_body();
    let mut tls = connect(g).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let half = body.len() / 2;
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body[..half]).await.unwrap();
    tls.flush().await.unwrap();
    (tls, body[half..].to_vec())
}

fn wait_exit(g: &mut Gpugate, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = g.child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "gpugate did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM as Kubernetes sends it: readiness turns false at once while
/// the server keeps answering (for server.shutdownDelaySeconds, while the
/// endpoints are removed), then the listener closes, the request in
/// flight is finished, and the process exits 0.
#[tokio::test]
async fn sigterm_keeps_serving_for_the_delay_then_drains_and_exits_cleanly() {
    let mut g = spawn_configured(
        "sigterm",
        Some("server:\n  shutdownDelaySeconds: 1.5\n  drainSeconds: 10\n"),
        &["--cluster", &format!("{ROOT}/examples/demo/cluster.yaml")],
    );
    wait_ready(&mut g);
    let (mut tls, rest) = half_sent(&g, "/validate").await;
    // Let the server start reading the request, then ask it to stop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    send_signal(&g, "TERM");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Readiness is off, but new requests are still answered.
    let (status, body) = admin_get(g.admin, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("shutting down"), "{body}");
    let (status, review) = post(&g, g.listen, "/mutate", &review_body()).await;
    assert_eq!(
        (status, &review["response"]["allowed"]),
        (200, &Value::Bool(true))
    );
    // After the delay the listener closes.
    let closed_at = loop {
        if std::net::TcpStream::connect_timeout(&g.listen, Duration::from_millis(200)).is_err() {
            break signalled.elapsed();
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(10),
            "listener still open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        closed_at >= Duration::from_millis(1400),
        "closed after {closed_at:?}"
    );
    // The request in flight is still finished.
    tls.write_all(&rest).await.unwrap();
    let (status, review) = read_response(&mut tls).await;
    assert_eq!(status, 200, "the request in flight must be answered");
    assert_eq!(review["response"]["allowed"], true);
    let exit = wait_exit(&mut g, Duration::from_secs(30));
    assert!(exit.success(), "exit status {exit}");
}

/// SIGHUP re-reads the config (and certificates) and never kills the
/// process: an upload in flight is finished, and a new config version is
/// put in force.
#[tokio::test]
async fn sighup_reloads_without_killing_anything() {
    let mut g = spawn_configured(
        "sighup",
        Some("scheduler:\n  name: before-hup\n"),
        &["--reload-seconds", "3600"],
    );
    let path = g.dir.join("gpugate.yaml");
    wait_ready(&mut g);
    let sha = |metrics: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with("gpugate_config_info{"))
            .map(str::to_string)
    };
    let (_, metrics) = admin_get(g.admin, "/metrics").unwrap();
    let first = sha(&metrics).expect("gpugate_config_info");
    let (mut tls, rest) = half_sent(&g, "/mutate").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::write(&path, "scheduler:\n  name: after-hup\n").unwrap();
    send_signal(&g, "HUP");
    tokio::time::sleep(Duration::from_millis(200)).await;
    tls.write_all(&rest).await.unwrap();
    let (status, review) = read_response(&mut tls).await;
    assert_eq!(status, 200, "the upload in flight must be answered");
    assert_eq!(review["response"]["allowed"], true);
    assert!(
        g.child.try_wait().unwrap().is_none(),
        "SIGHUP killed gpugate"
    );
    // The new version is in force within a second (two reads a moment
    // apart), long before the hour-long poll interval.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, metrics) = admin_get(g.admin, "/metrics").unwrap();
        if sha(&metrics).is_some_and(|s| s != first) {
            assert!(
                metrics.contains("gpugate_config_last_reload_successful 1"),
                "{metrics}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "config not reloaded on SIGHUP");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, review) = post(&g, g.listen, "/mutate", &review_body()).await;
    let patch = review["response"]["patch"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let patch = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).unwrap(),
    )
    .unwrap();
    assert!(patch.contains("after-hup"), "{patch}");
    // Many SIGHUPs in a row: still alive.
    for _ in 0..5 {
        send_signal(&g, "HUP");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        g.child.try_wait().unwrap().is_none(),
        "SIGHUP killed gpugate"
    );
    assert!(admin_get(g.admin, "/healthz").is_some_and(|(s, _)| s == 200));
}

#[test]
fn a_bad_snapshot_stops_serve_with_the_file_named() {
    let dir = std::env::temp_dir().join(format!("gpugate-proc-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("cluster.yaml");
    std::fs::write(&bad, "kind: Deployment\nmetadata: {name: x}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpugate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--cert-dir")
        .arg(dir.join("certs"))
        .arg("--cluster")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster.yaml") && err.contains("kind Deployment is not supported"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// POSTs `body` to `path` on `addr` over TLS (trusting the process's CA);
/// the status and the JSON body.
async fn post(g: &Gpugate, addr: SocketAddr, path: &str, body: &[u8]) -> (u16, Value) {
    let ca = std::fs::read(g.dir.join("certs/ca.crt")).unwrap();
    let mut tls = support::https::connect_trusting(addr, &ca).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    read_response(&mut tls).await
}

#[tokio::test]
async fn extender_listen_keeps_the_extender_off_the_webhook_port() {
    let extender = free_port();
    let mut g = spawn(
        "extender-listen",
        &[
            "--cluster",
            &format!("{ROOT}/examples/demo/cluster.yaml"),
            "--extender-listen",
            &extender.to_string(),
        ],
    );
    wait_ready(&mut g);
    let filter = std::fs::read(format!("{ROOT}/examples/demo/filter.json")).unwrap();
    let bind = std::fs::read(format!("{ROOT}/examples/demo/bind.json")).unwrap();
    // The webhook port (what the Service exposes): webhooks only.
    for (path, body) in [("/filter", &filter), ("/bind", &bind)] {
        let (status, _) = post(&g, g.listen, path, body).await;
        assert_eq!(status, 404, "{path} on --listen");
    }
    let (status, review) = post(&g, g.listen, "/mutate", &review_body()).await;
    assert_eq!(
        (status, &review["response"]["allowed"]),
        (200, &Value::Bool(true))
    );
    // The extender port: the extender only.
    let (status, result) = post(&g, extender, "/filter", &filter).await;
    assert_eq!(status, 200);
    assert_eq!(
        result["NodeNames"],
        serde_json::json!(["gpu-a100-1", "gpu-t4-1"]),
        "{result}"
    );
    let (status, _) = post(&g, extender, "/mutate", &review_body()).await;
    assert_eq!(status, 404, "/mutate on --extender-listen");
}

/// A stop signal during a start-up that waits (here: the first
/// self-managed certificate pass against an API server that is not there,
/// retried without end) ends the process at once, cleanly.
#[tokio::test]
async fn sigterm_during_start_up_exits_at_once() {
    let dir = std::env::temp_dir().join(format!("gpugate-unreachable-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let mut g = spawn(
        "startup",
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--self-signed-secret",
            "gpugate/gpugate-ca",
            "--dns",
            "gpugate.gpugate.svc",
        ],
    );
    // Let it reach the retry loop.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if let Some(status) = g.child.try_wait().unwrap() {
        let log = std::fs::read_to_string(g.dir.join("stderr.log")).unwrap_or_default();
        panic!("gpugate exited by itself ({status}): {log}");
    }
    let signalled = Instant::now();
    send_signal(&g, "TERM");
    let exit = wait_exit(&mut g, Duration::from_secs(5));
    assert!(exit.success(), "exit status {exit}");
    assert!(
        signalled.elapsed() < Duration::from_secs(2),
        "took {:?}",
        signalled.elapsed()
    );
    let log = std::fs::read_to_string(g.dir.join("stderr.log")).unwrap_or_default();
    assert!(log.contains("stopped during start-up"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pods of examples/demo/pods.yaml, each with a UID (kube-scheduler
/// binds by UID), and two more in the `serving` namespace, whose quota the
/// test adds: the second goes over it.
fn parity_pods() -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("examples/demo/pods.yaml")).unwrap();
    let mut pods: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect();
    for name in ["quota-1", "quota-2"] {
        pods.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "serving"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits":
                {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "10"}}}]}
        }));
    }
    for (i, pod) in pods.iter_mut().enumerate() {
        pod["metadata"]["uid"] = Value::String(format!("00000000-0000-4000-8000-{i:012}"));
    }
    pods
}

/// `gpugate simulate` and `gpugate serve --cluster` place through the same
/// rules: the same snapshot (with a ResourceQuota) and the same pods, one
/// by one through /filter, /prioritize (kube-scheduler's choice: the
/// highest priority, the first name among equals) and /bind, give the same
/// node and the same GPUs for every pod, and the same reasons for the pods
/// that fit nowhere.
#[tokio::test]
async fn simulate_and_serve_place_the_same_pods_the_same_way() {
    let dir = std::env::temp_dir().join(format!("gpugate-parity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = dir.join("cluster.yaml");
    let mut text =
        std::fs::read_to_string(Path::new(ROOT).join("examples/demo/cluster.yaml")).unwrap();
    text.push_str(
        "\n---\napiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: gpu\n  namespace: serving\n\
         spec:\n  hard:\n    limits.nvidia.com/gpumem: \"8000\"\n",
    );
    std::fs::write(&cluster, text).unwrap();
    let pods = parity_pods();
    let pods_file = dir.join("pods.yaml");
    let docs: Vec<String> = pods
        .iter()
        .map(|p| serde_yaml_ng::to_string(p).unwrap())
        .collect();
    std::fs::write(&pods_file, docs.join("---\n")).unwrap();

    let out = support::process::succeeds(
        Command::new(env!("CARGO_BIN_EXE_gpugate"))
            .args(["simulate", "--output", "json", "--cluster"])
            .arg(&cluster)
            .arg("--pods")
            .arg(&pods_file),
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    // pod -> node, or the reasons why nowhere.
    let mut simulated: std::collections::BTreeMap<String, Value> = Default::default();
    let mut simulated_devices = std::collections::BTreeSet::new();
    for p in report["placements"].as_array().unwrap() {
        let pod = p["pod"].as_str().unwrap().to_string();
        for d in p["devices"].as_array().unwrap() {
            simulated_devices.insert((
                pod.clone(),
                d["uuid"].as_str().unwrap().to_string(),
                d["memMiB"].as_u64().unwrap() * 1024 * 1024,
            ));
        }
        simulated.insert(pod, p["node"].clone());
    }
    for u in report["unschedulable"].as_array().unwrap() {
        simulated.insert(u["pod"].as_str().unwrap().to_string(), u["reasons"].clone());
    }
    assert!(
        report["unschedulable"]
            .to_string()
            .contains("ResourceQuotaNotFit"),
        "simulate must honour the quota: {report}"
    );

    let mut g = spawn("parity", &["--cluster", &cluster.display().to_string()]);
    wait_ready(&mut g);
    let nodes = ["cpu-1", "gpu-a100-1", "gpu-t4-1"];
    let mut served: std::collections::BTreeMap<String, Value> = Default::default();
    for pod in &pods {
        let meta = &pod["metadata"];
        let name = format!(
            "{}/{}",
            meta["namespace"].as_str().unwrap(),
            meta["name"].as_str().unwrap()
        );
        let args = serde_json::json!({"Pod": pod, "NodeNames": nodes}).to_string();
        let (status, filtered) = post(&g, g.listen, "/filter", args.as_bytes()).await;
        assert_eq!(status, 200, "{filtered}");
        let feasible = filtered["NodeNames"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let gpu_pod = pod.to_string().contains("nvidia.com/gpu");
        if !gpu_pod {
            continue;
        }
        if feasible.is_empty() {
            let mut reasons = serde_json::Map::new();
            for key in ["FailedNodes", "FailedAndUnresolvableNodes"] {
                if let Some(m) = filtered[key].as_object() {
                    reasons.extend(m.clone());
                }
            }
            served.insert(name, Value::Object(reasons));
            continue;
        }
        let (_, scores) = post(&g, g.listen, "/prioritize", args.as_bytes()).await;
        // As kube-scheduler adds them up: a feasible node not listed
        // scores 0.
        let listed: std::collections::HashMap<&str, i64> = scores
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["Host"].as_str().unwrap(), s["Score"].as_i64().unwrap()))
            .collect();
        let mut best: Option<(i64, String)> = None;
        for host in feasible.iter().filter_map(Value::as_str) {
            let score = listed.get(host).copied().unwrap_or(0);
            if best
                .as_ref()
                .is_none_or(|(b, n)| score > *b || (score == *b && host < n.as_str()))
            {
                best = Some((score, host.to_string()));
            }
        }
        let node = best.unwrap().1;
        let bind = serde_json::json!({
            "PodName": meta["name"], "PodNamespace": meta["namespace"],
            "PodUID": meta["uid"], "Node": node,
        });
        let (status, bound) = post(&g, g.listen, "/bind", bind.to_string().as_bytes()).await;
        assert_eq!(
            (status, bound["Error"].as_str().unwrap_or("")),
            (200, ""),
            "{name}"
        );
        served.insert(name, Value::String(node));
    }
    // Reasons are compared on the nodes both know (simulate judges the
    // registered nodes, /filter every candidate).
    for (pod, want) in &simulated {
        let got = served
            .get(pod)
            .unwrap_or_else(|| panic!("{pod}: not placed by serve"));
        match (want, got) {
            (Value::Object(w), Value::Object(g)) => {
                for (node, reason) in w {
                    assert_eq!(g.get(node), Some(reason), "{pod} on {node}");
                }
            }
            _ => assert_eq!(got, want, "{pod}"),
        }
    }
    assert_eq!(served.len(), simulated.len(), "{served:?}");

    let (_, metrics) = admin_get(g.admin, "/metrics").unwrap();
    let mut served_devices = std::collections::BTreeSet::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("hami_vgpu_memory_allocated_bytes{"))
    {
        let label = |k: &str| {
            let at = line.find(&format!("{k}=\"")).unwrap() + k.len() + 2;
            line[at..].split('"').next().unwrap().to_string()
        };
        let pod = format!("{}/{}", label("namespace"), label("pod"));
        let bytes: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        if simulated.contains_key(&pod) {
            served_devices.insert((pod, label("device_uuid"), bytes));
        }
    }
    assert_eq!(served_devices, simulated_devices);
    assert!(!simulated_devices.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gpugate serve` configured from GPUGATE_* variables alone, logging JSON:
/// a denied review and an extender call each leave a log line whose span
/// carries the request's uid, the pod and the outcome.
#[tokio::test]
async fn settings_from_the_environment_and_json_logs_with_request_spans() {
    let dir = std::env::temp_dir().join(format!("gpugate-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (listen, admin) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_gpugate"))
        .arg("serve")
        .env("GPUGATE_LISTEN", listen.to_string())
        .env("GPUGATE_ADMIN_LISTEN", admin.to_string())
        .env("GPUGATE_CERT_DIR", dir.join("certs"))
        .env(
            "GPUGATE_CLUSTER",
            format!("{ROOT}/examples/demo/cluster.yaml"),
        )
        .env("GPUGATE_LOG_FORMAT", "json")
        .env("GPUGATE_LOG_LEVEL", "info,gpugate=debug")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut g = Gpugate {
        child,
        listen,
        admin,
        dir,
    };
    wait_ready(&mut g);

    let uid = "6a1b3c9e-0000-4000-8000-0000000000aa";
    let (status, review) = post(&g, g.listen, "/validate", &review_of("node-name.yaml", uid)).await;
    assert_eq!(status, 200);
    assert_eq!(review["response"]["allowed"], false, "{review}");
    let pod = serde_json::json!({
        "metadata": {"name": "p", "namespace": "ml", "uid": "u-filter-1"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    });
    let args = serde_json::json!({"Pod": pod, "NodeNames": ["gpu-a100-1"]});
    let (status, _) = post(&g, g.listen, "/filter", args.to_string().as_bytes()).await;
    assert_eq!(status, 200);

    // The log is written as it happens; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut review_line, mut filter_line) = (None, None);
    while Instant::now() < deadline && (review_line.is_none() || filter_line.is_none()) {
        let log = std::fs::read_to_string(g.dir.join("stderr.log")).unwrap();
        for line in log.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
            let span = &v["span"];
            if span["name"] == "review" && span["uid"] == uid {
                review_line = Some(v.clone());
            }
            if span["name"] == "extender" && span["uid"] == "u-filter-1" {
                filter_line = Some(v.clone());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let review_line = review_line.expect("a log line in the review's span");
    let span = &review_line["span"];
    assert_eq!(span["webhook"], "validate", "{review_line}");
    assert_eq!(span["namespace"], "default", "{review_line}");
    assert_eq!(span["outcome"], "denied", "{review_line}");
    assert_eq!(span["reason"], "node_name", "{review_line}");
    assert_eq!(review_line["level"], "INFO", "{review_line}");
    let filter_line = filter_line.expect("a log line in the filter call's span");
    let span = &filter_line["span"];
    assert_eq!(span["verb"], "filter", "{filter_line}");
    assert_eq!(span["namespace"], "ml", "{filter_line}");
    assert_eq!(span["pod"], "p", "{filter_line}");
    assert_eq!(span["outcome"], "ok", "{filter_line}");
    // And the connection the calls came on.
    assert!(
        filter_line["spans"].as_array().is_some_and(|s| s
            .iter()
            .any(|s| s["name"] == "connection" && s["listener"] == "webhook")),
        "{filter_line}"
    );
}
