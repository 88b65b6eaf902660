//! A burst of pods created at once, and what it cost: shared by e2e
//! scenario 10 and the scale benchmark (benches/scale.rs).
//!
//! Times are the client's own `Instant`s (creationTimestamp has one-second
//! resolution): when each create returned, and when a watch on the
//! namespace first showed the pod with `spec.nodeName`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use futures::{StreamExt as _, TryStreamExt as _};
use gpugate::hami::keys::NODE_SCHEDULER_POLICY;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, watcher};
use serde_json::{Value, json};

use crate::fixtures::{create_node, create_pod, gpu_node, is_bound, ledger_matches, usage_by_gpu};
use crate::http::{gauge, metrics, samples};
use crate::wait::eventually;

/// The benchmark's node: 8 × V100 32 GB, each split 10 ways.
pub const MODEL: &str = "NVIDIA Tesla V100-SXM2-32GB";
pub const GPUS_PER_NODE: usize = 8;
pub const SPLIT: u32 = 10;
pub const GPU_MEM_MIB: u32 = 32768;
/// The benchmark's pod: one slice of 4096 MiB and 20 cores.
pub const POD_MEM_MIB: u32 = 4096;
pub const POD_CORES: u32 = 20;

/// Pods of the benchmark's shape that fit on one node: 5 per GPU (cores
/// run out first: 5 × 20), so 40.
pub fn pods_per_node() -> usize {
    let per_gpu = SPLIT.min(GPU_MEM_MIB / POD_MEM_MIB).min(100 / POD_CORES);
    per_gpu as usize * GPUS_PER_NODE
}

/// The fewest nodes that can hold `pods` of the benchmark's shape.
pub fn min_nodes(pods: usize) -> usize {
    pods.div_ceil(pods_per_node())
}

pub fn node(name: &str) -> Value {
    gpu_node(name, GPUS_PER_NODE, SPLIT, GPU_MEM_MIB, MODEL)
}

/// Creates the nodes (labelled with `scenario`), `concurrency` at a time.
pub async fn create_nodes(
    client: &Client,
    scenario: &str,
    names: &[String],
    concurrency: usize,
) -> anyhow::Result<()> {
    futures::stream::iter(names)
        .map(|name| async move { create_node(client, scenario, &node(name)).await })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Waits until gpugate's `gpugate_cluster_nodes` shows `n`.
pub async fn wait_gpugate_nodes(port: u16, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let want = n as f64;
    eventually("gpugate sees the nodes", timeout, || async move {
        let text = metrics(port).await.map_err(|e| e.to_string())?;
        match gauge(&text, "gpugate_cluster_nodes") {
            Some(got) if got == want => Ok(()),
            got => Err(format!("{got:?} nodes")),
        }
    })
    .await
}

#[derive(Clone, Debug)]
pub enum Workload {
    /// 1 GPU, 4096 MiB, 20 cores, with this node policy (`binpack` or
    /// `spread`); the webhook routes it to hami-scheduler.
    Gpu { node_policy: String },
    /// cpu 100m, memory 64Mi: left alone by the webhook, scheduled by
    /// `default-scheduler` (the benchmark's reference).
    #[allow(dead_code)]
    Plain,
    /// A plain pod with these annotations and labels, for which the scale
    /// benchmark replays HAMi's device-plugin protocol
    /// (`benches/support/protocol_replay.rs`).
    #[allow(dead_code)]
    Replayed { annotations: Value, labels: Value },
}

impl Workload {
    #[allow(dead_code)] // benches/scale.rs
    pub fn label(&self) -> String {
        match self {
            Workload::Gpu { node_policy } => format!("gpugate {node_policy}"),
            Workload::Plain => "kube-scheduler alone".to_string(),
            Workload::Replayed { .. } => "kube-scheduler alone + HAMi's protocol".to_string(),
        }
    }

    /// kube-scheduler's profile that schedules these pods.
    pub fn profile(&self) -> &'static str {
        match self {
            Workload::Gpu { .. } => "hami-scheduler",
            Workload::Plain | Workload::Replayed { .. } => "default-scheduler",
        }
    }

    pub fn pod(&self, name: &str) -> Value {
        let plain = json!({"requests": {"cpu": "100m", "memory": "64Mi"},
                           "limits": {"cpu": "100m", "memory": "64Mi"}});
        let (resources, annotations, labels) = match self {
            Workload::Gpu { node_policy } => (
                json!({"limits": {
                    "nvidia.com/gpu": "1",
                    "nvidia.com/gpumem": POD_MEM_MIB.to_string(),
                    "nvidia.com/gpucores": POD_CORES.to_string(),
                }}),
                json!({NODE_SCHEDULER_POLICY: node_policy}),
                json!({}),
            ),
            Workload::Plain => (plain, json!({}), json!({})),
            Workload::Replayed {
                annotations,
                labels,
            } => (plain, annotations.clone(), labels.clone()),
        };
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["sleep", "infinity"], "resources": resources}]}
        })
    }
}

pub struct Burst {
    pub ns: String,
    /// Pods are named `<prefix>-00000` on.
    pub prefix: String,
    pub pods: usize,
    /// Clients creating at the same time.
    pub creators: usize,
    pub workload: Workload,
    /// Longest wait, from the first create, for every pod to be bound.
    pub deadline: Duration,
}

pub struct Outcome {
    #[allow(dead_code)] // benches/scale.rs
    pub pods: usize,
    pub created: usize,
    /// Creates tried again after a transient refusal (429, 5xx, a webhook
    /// call that failed).
    pub create_retries: usize,
    pub bound: usize,
    /// Pods created but not bound by the deadline (at most 10 named).
    pub unbound: Vec<String>,
    pub unbound_count: usize,
    /// Create returned → first seen bound, per bound pod, sorted.
    pub latencies: Vec<Duration>,
    /// First create started → last pod bound.
    pub span: Duration,
    /// When each bound pod was first seen bound, sorted.
    #[allow(dead_code)] // benches/scale.rs
    pub bound_at: Vec<Instant>,
    /// First create started → last create returned.
    #[allow(dead_code)] // benches/scale.rs
    pub create_span: Duration,
}

impl Outcome {
    /// Pods bound / (last bound − first create start).
    pub fn pods_per_second(&self) -> f64 {
        let s = self.span.as_secs_f64();
        if s > 0.0 { self.bound as f64 / s } else { 0.0 }
    }

    /// The `q` quantile (0..=1, nearest rank) of create → bound.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank =
            ((q * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1]
    }

    pub fn max(&self) -> Duration {
        self.latencies.last().copied().unwrap_or_default()
    }
}

/// Creates `b.pods` pods with `b.creators` clients at once and waits until
/// a watch has shown each one bound, or the deadline.
pub async fn run(client: &Client, b: &Burst) -> anyhow::Result<Outcome> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &b.ns);
    // The watch is running (its first list done) before the first create,
    // so that every binding is seen when it happens.
    let bound_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (ready, listed) = tokio::sync::oneshot::channel::<()>();
    let mut watch = tokio::task::JoinSet::new();
    {
        let (api, bound_at) = (api.clone(), bound_at.clone());
        watch.spawn(async move {
            let mut ready = Some(ready);
            let mut events = watcher(api, watcher::Config::default().fields("spec.nodeName!="))
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => {
                        let now = Instant::now();
                        if let Some(name) = p.metadata.name {
                            bound_at.lock().unwrap().entry(name).or_insert(now);
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
    }
    tokio::time::timeout(Duration::from_secs(30), listed)
        .await
        .map_err(|_| anyhow!("the pod watch did not list in 30 s"))?
        .map_err(|_| anyhow!("the pod watch ended"))?;

    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let mut creators = tokio::task::JoinSet::new();
    for _ in 0..b.creators.max(1) {
        let (client, ns, next, retries) =
            (client.clone(), b.ns.clone(), next.clone(), retries.clone());
        let (prefix, workload, pods) = (b.prefix.clone(), b.workload.clone(), b.pods);
        creators.spawn(async move {
            let mut created = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= pods {
                    return anyhow::Ok(created);
                }
                let name = format!("{prefix}-{i:05}");
                create(&client, &ns, &workload.pod(&name), &retries).await?;
                created.push((name, Instant::now()));
            }
        });
    }
    let mut created: HashMap<String, Instant> = HashMap::new();
    while let Some(done) = creators.join_next().await {
        created.extend(done??);
    }
    let create_span = started.elapsed();

    // Every created pod bound, or the deadline.
    let deadline = started + b.deadline;
    loop {
        let bound = {
            let seen = bound_at.lock().unwrap();
            created.keys().filter(|n| seen.contains_key(*n)).count()
        };
        if bound == created.len() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watch.abort_all();

    let seen = bound_at.lock().unwrap().clone();
    let mut latencies = Vec::new();
    let mut unbound = BTreeSet::new();
    let mut last_bound = started;
    let mut bound_times = Vec::new();
    for (name, at) in &created {
        match seen.get(name) {
            Some(b) => {
                bound_times.push(*b);
                latencies.push(b.saturating_duration_since(*at));
                last_bound = last_bound.max(*b);
            }
            None => {
                unbound.insert(name.clone());
            }
        }
    }
    latencies.sort();
    bound_times.sort();
    Ok(Outcome {
        bound_at: bound_times,
        pods: b.pods,
        created: created.len(),
        create_retries: retries.load(Ordering::Relaxed),
        bound: latencies.len(),
        unbound_count: unbound.len(),
        unbound: unbound.into_iter().take(10).collect(),
        latencies,
        span: last_bound.saturating_duration_since(started),
        create_span,
    })
}

/// One create, tried again (up to 20 times, 200 ms apart) when the refusal
/// is transient; an `AlreadyExists` after such a retry means the earlier
/// try went through.
async fn create(
    client: &Client,
    ns: &str,
    pod: &Value,
    retries: &AtomicUsize,
) -> anyhow::Result<()> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let mut tries = 0;
    loop {
        let error = match create_pod(client, ns, pod).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && tries > 0 => return Ok(()),
            Err(kube::Error::Api(s))
                if matches!(s.code, 429 | 500 | 502 | 503 | 504)
                    || s.message.contains("failed calling webhook") =>
            {
                format!("{} {}", s.code, s.message)
            }
            Err(e @ kube::Error::Api(_)) => bail!("create {ns}/{name}: {e}"),
            // Connection-level trouble: worth another try.
            Err(e) => e.to_string(),
        };
        tries += 1;
        if tries >= 20 {
            bail!("create {ns}/{name}: still refused after {tries} tries: {error}");
        }
        retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// kube-scheduler's `scheduler_schedule_attempts_total` for one profile,
/// by result (`scheduled`, `unschedulable`, `error`).
pub fn schedule_attempts(text: &str, profile: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples(text, "scheduler_schedule_attempts_total") {
        if s.label("profile") == profile {
            *out.entry(s.label("result").to_string()).or_default() += s.value;
        }
    }
    out
}

/// gpugate's `gpugate_bind_total`, by `result/code`.
pub fn bind_outcomes(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples(text, "gpugate_bind_total") {
        *out.entry(format!("{}/{}", s.label("result"), s.label("code")))
            .or_default() += s.value;
    }
    out
}

/// `after − before`, series that did not move left out.
pub fn delta(
    after: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// `k=v, k=v` with whole numbers.
pub fn show(counts: &BTreeMap<String, f64>) -> String {
    if counts.is_empty() {
        return "none".to_string();
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}={v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where a burst's pods landed, and whether any GPU holds more than it has.
pub struct Placement {
    pub bound: usize,
    pub nodes_used: usize,
    pub gpus_used: usize,
    /// One line per GPU over its share count, memory or cores.
    pub overcommitted: Vec<String>,
    /// gpugate's ledger (its metrics) against the annotations, pod by pod:
    /// `None` when they match.
    pub ledger_mismatch: Option<String>,
}

impl Placement {
    /// All `pods` carry an allocation, no GPU over-committed, the ledger
    /// (when asked) equal to the annotations.
    pub fn check(&self, pods: usize) -> anyhow::Result<()> {
        if !self.overcommitted.is_empty() {
            bail!("over-committed GPUs: {:?}", self.overcommitted);
        }
        if self.bound != pods {
            bail!("{} pods carry an allocation", self.bound);
        }
        if let Some(mismatch) = &self.ledger_mismatch {
            bail!("{mismatch}");
        }
        Ok(())
    }
}

/// Lists the namespace's pods and checks the GPUs of the bound ones (when
/// `gpus`) against the benchmark node's capacity and, when a metrics port
/// is given, against gpugate's ledger (only meaningful once every pod is
/// bound: a bind in flight is in the ledger before it is on the pod).
pub async fn placement(
    client: &Client,
    ns: &str,
    gpus: bool,
    ledger_port: Option<u16>,
) -> anyhow::Result<Placement> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods = api.list(&ListParams::default()).await?.items;
    let nodes_used = pods
        .iter()
        .map(crate::fixtures::node_of)
        .filter(|n| !n.is_empty())
        .collect::<BTreeSet<_>>()
        .len();
    if !gpus {
        return Ok(Placement {
            bound: pods
                .iter()
                .filter(|p| !crate::fixtures::node_of(p).is_empty())
                .count(),
            nodes_used,
            gpus_used: 0,
            overcommitted: vec![],
            ledger_mismatch: None,
        });
    }
    let bound: Vec<Pod> = pods.into_iter().filter(is_bound).collect();
    let usage = usage_by_gpu(&bound)?;
    let overcommitted = usage
        .iter()
        .filter(|(_, (n, mem, cores))| *n > SPLIT || *mem > u64::from(GPU_MEM_MIB) || *cores > 100)
        .map(|(gpu, (n, mem, cores))| format!("{gpu}: {n} pods, {mem} MiB, {cores} cores"))
        .collect();
    let ledger_mismatch = match ledger_port {
        Some(port) => ledger_matches(port, ns, &bound, Duration::from_secs(30))
            .await
            .err()
            .map(|e| format!("{e:#}")),
        None => None,
    };
    Ok(Placement {
        bound: bound.len(),
        nodes_used,
        gpus_used: usage.len(),
        overcommitted,
        ledger_mismatch,
    })
}

/// Deletes every pod of the namespace (grace period 0: no kubelet would
/// confirm) and waits until they are gone and, if `ledger`, until gpugate's
/// ledger holds no allocation.
#[allow(dead_code)] // benches/scale.rs
pub async fn delete_pods(
    client: &Client,
    ns: &str,
    ledger: Option<u16>,
    timeout: Duration,
) -> anyhow::Result<()> {
    crate::fixtures::delete_all_pods(client, ns, timeout).await?;
    if let Some(port) = ledger {
        eventually("gpugate's ledger is empty", timeout, || async move {
            let text = metrics(port).await.map_err(|e| e.to_string())?;
            match gauge(&text, "gpugate_ledger_allocations") {
                Some(0.0) => Ok(()),
                n => Err(format!("{n:?} allocations")),
            }
        })
        .await?;
    }
    Ok(())
}
