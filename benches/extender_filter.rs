//! Load test of the scheduler extender's `/filter` over real TLS keep-alive
//! connections on 127.0.0.1, with 5,000 candidate node names per call as
//! kube-scheduler sends them to a `nodeCacheCapable` extender.
//! Run: `cargo bench --bench extender_filter` (about a minute).
//!
//! The cluster is the engine benchmark's (5,000 nodes x 8 GPUs, 40,000
//! running vGPU pods), built as Kubernetes Node and Pod objects with HAMi's
//! annotations and read into the cluster view as the server reads the API
//! server's. The server is gpugate's router and accept loop on its own
//! runtime (as `gpugate serve` runs it); the client runs on another runtime
//! in the same process and shares the machine's cores.
//!
//! Before loading, one answer per case is checked against the engine: the
//! feasible names, the rejected names, and that the k8s-built view agrees
//! with the engine benchmark's directly built state. Under load, an answer
//! that differs from that checked one by a byte counts as an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpugate::cluster::SharedCluster;
use gpugate::config::{Config, FilterMode};
use gpugate::engine::ClusterState;
use gpugate::extender::filter;
use gpugate::extender::wire::ExtenderArgs;
use gpugate::placement::PodToPlace;
use gpugate::server::metrics::Metrics;
use gpugate::server::routes::{AppState, webhook_router};
use gpugate::server::tls;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

#[allow(dead_code)]
#[path = "support/big_cluster.rs"]
mod big_cluster;
#[allow(dead_code)]
#[path = "support/pod_review.rs"]
mod pod_review;
#[allow(dead_code)]
#[path = "support/tls_load.rs"]
mod tls_load;

use big_cluster::{NODES, node_name};
use tls_load::{Run, SelfSigned, Stats, connect, connector, load, ms, post, start};

const RUN: Run = Run {
    warmup: Duration::from_secs(1),
    duration: Duration::from_secs(8),
};
/// In-process calls of the handler per case, for the "handler alone" column.
const HANDLER_CALLS: usize = 200;

/// The pending pod kube-scheduler hands the extender: the admission
/// benchmarks' vLLM pod as the API server stored it after gpugate's
/// mutation, asking `gpus` GPUs of 8,000 MiB and 20 cores each (the engine
/// benchmark's request).
fn pending_pod(gpus: u32, annotations: Value) -> Value {
    let mut pod = pod_review::vllm_pod();
    let meta = &mut pod["metadata"];
    meta["uid"] = json!("3f1c9a52-8e0b-4f57-9d1e-5b7a2c4e6d10");
    meta["resourceVersion"] = json!("48213377");
    meta["creationTimestamp"] = json!("2026-11-21T08:14:03Z");
    meta["annotations"] = annotations;
    meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "inference-7d9f8b6c5", "uid": "9a0e7c1d-2b3f-4e5a-8c6d-7f8091a2b3c4",
        "controller": true, "blockOwnerDeletion": true}]);
    let spec = &mut pod["spec"];
    spec["schedulerName"] = json!("hami-scheduler");
    spec["priority"] = json!(0);
    spec["serviceAccountName"] = json!("default");
    spec["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]);
    let container = &mut spec["containers"][0];
    container["resources"]["limits"] = json!({
        "nvidia.com/gpu": gpus.to_string(), "nvidia.com/gpumem": "8000",
        "nvidia.com/gpucores": "20", "cpu": "4", "memory": "16Gi"});
    container["env"] = json!([
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
        {"name": "HF_HOME", "value": "/models/cache"},
        {"name": "VLLM_PORT", "value": "8000"}
    ]);
    pod["status"] = json!({"phase": "Pending", "qosClass": "Burstable", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "lastTransitionTime": "2026-11-21T08:14:03Z",
         "message": "0/5000 nodes are available: waiting for the extender."}]});
    pod
}

/// kube-scheduler's `ExtenderArgs` as Go encodes it (field names without
/// JSON tags): the pod, no Node objects, the candidate names.
fn extender_args(pod: &Value, names: &[String]) -> Bytes {
    Bytes::from(json!({"Pod": pod, "Nodes": null, "NodeNames": names}).to_string())
}

struct Case {
    label: &'static str,
    pod: Value,
    config: Config,
}

fn cases() -> Vec<Case> {
    let mode = |m| {
        let mut c = Config::default();
        c.scheduler.filter_mode = m;
        c
    };
    vec![
        Case {
            label: "1 GPU, spread",
            pod: pending_pod(1, json!({})),
            config: Config::default(),
        },
        Case {
            label: "4 GPUs, topology-aware",
            pod: pending_pod(4, json!({"hami.io/gpu-scheduler-policy": "topology-aware"})),
            config: Config::default(),
        },
        Case {
            label: "1 GPU, spread, filterMode best",
            pod: pending_pod(1, json!({})),
            config: mode(FilterMode::Best),
        },
        Case {
            label: "1 GPU, spread, filterMode top (10)",
            pod: pending_pod(1, json!({})),
            config: mode(FilterMode::Top),
        },
    ]
}

/// What one case's answer must be, from the engine; panics on any
/// difference. Returns (feasible, rejected) counts.
fn check_answer(
    case: &Case,
    answer: &[u8],
    cluster: &SharedCluster,
    reference: &ClusterState,
    names: &[String],
) -> (usize, usize) {
    let pod: Pod = serde_json::from_value(case.pod.clone()).expect("pod");
    let plan = gpugate::cluster::convert::pod_plan(&pod, &case.config).expect("plan");
    assert!(plan.request.has_gpus());
    let view = cluster.read();
    let eval = view.state().evaluate(&plan, Some(names));
    // The view built from Node and Pod objects is the engine benchmark's
    // cluster: same verdicts, same scores.
    let direct = reference.evaluate(&plan, Some(names));
    let verdicts = |e: &gpugate::engine::Evaluation| {
        (
            e.feasible
                .iter()
                .map(|f| (f.node.to_string(), f.score, f.priority))
                .collect::<Vec<_>>(),
            e.rejected
                .iter()
                .map(|(n, r)| (n.clone(), r.to_string()))
                .collect::<Vec<_>>(),
        )
    };
    assert!(
        verdicts(&eval) == verdicts(&direct),
        "{}: view and engine state disagree",
        case.label
    );
    assert!(
        !eval.feasible.is_empty(),
        "{}: no feasible node",
        case.label
    );

    let answer: Value = serde_json::from_slice(answer).expect("answer is JSON");
    assert!(answer.get("Error").is_none(), "{}: {answer}", case.label);
    let keys = |field: &str| -> Vec<String> {
        answer[field]
            .as_object()
            .expect("a map")
            .keys()
            .cloned()
            .collect()
    };
    let (failed, unresolvable) = (keys("FailedNodes"), keys("FailedAndUnresolvableNodes"));
    let got: Vec<&str> = answer["NodeNames"]
        .as_array()
        .expect("NodeNames")
        .iter()
        .map(|v| v.as_str().expect("a name"))
        .collect();
    // Some node is offered: the reasons stay out of the answer
    // (kube-scheduler reads them only when none is).
    assert!(
        failed.is_empty() && unresolvable.is_empty(),
        "{}: reasons sent beside feasible nodes",
        case.label
    );
    match case.config.scheduler.filter_mode {
        FilterMode::All => {
            let feasible: Vec<&str> = eval.feasible.iter().map(|f| f.node).collect();
            assert_eq!(got, feasible, "{}: NodeNames", case.label);
        }
        FilterMode::Best => {
            let best = eval.best().expect("a best node").node;
            assert_eq!(got, [best], "{}: NodeNames", case.label);
        }
        FilterMode::Top => {
            let k = case.config.scheduler.filter_top_nodes;
            assert_eq!(got.len(), k.min(eval.feasible.len()), "{}", case.label);
            let best = eval.best().expect("a best node").node;
            assert!(got.contains(&best), "{}: the best node offered", case.label);
        }
    }
    (eval.feasible.len(), eval.rejected.len())
}

/// The handler without TLS or HTTP, whole and by stage: read the args,
/// judge the candidates, write the JSON. Medians of `HANDLER_CALLS` calls.
struct Alone {
    whole_p50: Duration,
    whole_p99: Duration,
    parse: Duration,
    judge: Duration,
    write: Duration,
}

fn handler_alone(state: &AppState, cluster: &SharedCluster, config: &Config, body: &[u8]) -> Alone {
    fn median(mut times: Vec<Duration>) -> Duration {
        times.sort();
        tls_load::pct(&times, 0.5)
    }
    let extender = state.extender.as_ref().expect("extender");
    let mut whole: Vec<Duration> = (0..HANDLER_CALLS)
        .map(|_| {
            let t = Instant::now();
            let result = extender.filter(config, body);
            let json = serde_json::to_vec(&result.answer).expect("JSON");
            std::hint::black_box(json);
            t.elapsed()
        })
        .collect();
    whole.sort();
    let args = ExtenderArgs::parse(body).expect("args");
    let pod = PodToPlace::read(args.pod.clone(), config, &cluster.read()).expect("plan");
    let now = jiff::Timestamp::now();
    let result = filter::filter(&cluster.read(), config, &pod, &args.candidates, now).answer;
    Alone {
        whole_p50: tls_load::pct(&whole, 0.5),
        whole_p99: tls_load::pct(&whole, 0.99),
        parse: median(
            (0..HANDLER_CALLS)
                .map(|_| {
                    // The args, and the pod read into a plan.
                    let t = Instant::now();
                    let args = ExtenderArgs::parse(body).expect("args");
                    let pod = PodToPlace::read(args.pod, config, &cluster.read());
                    std::hint::black_box((args.candidates, pod.expect("plan")));
                    t.elapsed()
                })
                .collect(),
        ),
        judge: median(
            (0..HANDLER_CALLS)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(filter::filter(
                        &cluster.read(),
                        config,
                        &pod,
                        &args.candidates,
                        now,
                    ));
                    t.elapsed()
                })
                .collect(),
        ),
        write: median(
            (0..HANDLER_CALLS)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(serde_json::to_vec(&result).expect("JSON"));
                    t.elapsed()
                })
                .collect(),
        ),
    }
}

fn main() {
    tls::install_default_provider();
    let t = Instant::now();
    let (view, report) = big_cluster::k8s_objects(8, 4).to_view();
    assert!(
        report.unregistered_nodes.is_empty() && report.unaccounted_pods.is_empty(),
        "{report:?}"
    );
    assert_eq!(view.counts().allocations, big_cluster::RUNNING_PODS);
    let cluster = Arc::new(SharedCluster::new(view, true));
    let reference = big_cluster::engine_state(8, 4);
    // kube-scheduler lists the candidates in its own node order, not by
    // name: a fixed scramble of the names (2,053 is coprime to 5,000).
    let names: Vec<String> = (0..NODES).map(|i| node_name(i * 2053 % NODES)).collect();
    eprintln!(
        "cluster: {NODES} nodes, {} running pods, built in {:.1} s",
        big_cluster::RUNNING_PODS,
        t.elapsed().as_secs_f64()
    );

    // The server's runtime, as `gpugate serve` builds it (one worker per
    // core); the client gets its own, like a separate kube-scheduler.
    let server = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("server runtime");
    let client = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let certs = SelfSigned::generate("extender-filter");
    let ca = &certs.bundle.ca_cert_pem;

    // `EXTENDER_FILTER_HANDLER_ONLY=1`: the in-process handler timings
    // alone, for profiling.
    let load_too = std::env::var_os("EXTENDER_FILTER_HANDLER_ONLY").is_none();
    let mut summary = Vec::new();
    let mut rows = Vec::new();
    for case in cases() {
        let state = AppState::with_cluster(
            case.config.clone(),
            Metrics::new(Some(certs.cert.clone())),
            Some(cluster.clone()),
        );
        let (addr, _stop) =
            server.block_on(start(webhook_router(state.clone()), certs.cert.clone()));
        let body = extender_args(&case.pod, &names);
        let answer = client.block_on(async {
            let mut sender = connect(addr, &connector(ca)).await;
            let (status, answer) = post(&mut sender, "/filter", body.clone())
                .await
                .expect("filter call");
            assert_eq!(status, 200);
            answer
        });
        let (feasible, rejected) = check_answer(&case, &answer, &cluster, &reference, &names);
        let alone = handler_alone(&state, &cluster, &case.config, &body);
        summary.push(format!(
            "| {} | {:.1} KB | {:.1} KB | {feasible} | {rejected} | {} | {} | {} | {} | {} |",
            case.label,
            body.len() as f64 / 1000.0,
            answer.len() as f64 / 1000.0,
            ms(alone.whole_p50),
            ms(alone.whole_p99),
            ms(alone.parse),
            ms(alone.judge),
            ms(alone.write),
        ));
        eprintln!("{}", summary.last().expect("a line"));
        let connections: &[usize] = if load_too { &[1, 4] } else { &[] };
        for &connections in connections {
            let s: Stats = client.block_on(load(
                addr,
                ca,
                "/filter",
                body.clone(),
                Some(answer.clone()),
                connections,
                RUN,
            ));
            let row = format!(
                "| {} | {connections} | {:.0} | {} | {} | {} | {} |",
                case.label,
                s.rate(),
                ms(s.pct(0.50)),
                ms(s.pct(0.99)),
                ms(s.max()),
                s.errors,
            );
            eprintln!("{row}");
            rows.push(row);
            assert_eq!(s.errors, 0, "{}: errors under load", case.label);
        }
    }
    println!(
        "| case | request | answer | feasible | rejected | handler p50 | handler p99 | parse | judge | write |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for line in summary {
        println!("{line}");
    }
    println!();
    println!("| case | connections | req/s | p50 | p99 | max | errors |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
