//! Defragmentation's cost on the large cluster: 5,000 nodes x 8 GPUs
//! (A100 40 GB) and 40,000 running pods, one per GPU, every one movable
//! (owned by a ReplicaSet, in a namespace that opted in, created a day
//! ago): the worst case for the search, which may move any of them.
//! Run: `cargo bench --bench defrag`.
//!
//! - `under_lock`: what `serve` does under the view's read lock: which of
//!   the 40,000 pods may move by the view's rules, and the copy of the state
//!   the search runs on (`copy_for_moves`); the rest holds no lock;
//! - `full_state_copy`: for comparison, a whole copy of the state;
//! - `plans_of_movers`: the replacements' plans (no lock);
//! - `plan/whole_gpu`: a pod of one whole GPU, which fits nowhere (every
//!   GPU holds a slice): found in one move;
//! - `plan/eight_whole_gpus`: a pod of 8 whole GPUs (a whole node), which
//!   needs 8 moves: no plan within `maxMoves` 4, the search bounded by
//!   `searchBudget`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use gpugate::cluster::{ClusterView, Snapshot};
use gpugate::config::Config;
use gpugate::placement::PodToPlace;
use gpugate::placement::defrag::{Inputs, Outcome, finish_movers, held_movers, movers, plan_among};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

#[allow(dead_code)]
#[path = "support/big_cluster.rs"]
mod big_cluster;

fn config() -> Config {
    Config::from_yaml(
        "namespacePolicies:\n- name: all\n  namespaces: ['*']\n  movable: true\n",
        "bench",
    )
    .unwrap()
}

/// The cluster's objects, every pod owned by a ReplicaSet per app and
/// created a day ago.
fn cluster() -> Snapshot {
    let mut s = big_cluster::k8s_objects(8, 4);
    let yesterday: jiff::Timestamp = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24);
    for p in &mut s.pods {
        let app = p.metadata.labels.as_ref().unwrap()["app"].clone();
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: app.clone(),
            uid: format!("rs-{app}"),
            controller: Some(true),
            ..Default::default()
        }]);
        p.metadata.creation_timestamp = Some(Time(yesterday));
    }
    s
}

fn pending(view: &ClusterView, config: &Config, gpus: u32) -> PodToPlace {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pending", "namespace": "team-0", "uid": "pending"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {
            "nvidia.com/gpu": gpus.to_string(), "nvidia.com/gpumem": "40960"}}}]},
    }))
    .unwrap();
    PodToPlace::read(pod, config, view).unwrap()
}

fn benches(c: &mut Criterion) {
    let snapshot = cluster();
    let (view, _) = snapshot.to_view();
    let config = config();
    let now = jiff::Timestamp::now();
    let one = pending(&view, &config, 1);
    let eight = pending(&view, &config, 8);
    let inputs = Inputs {
        nodes: None,
        pods: &snapshot.pods,
        node_objects: Some(&snapshot.nodes),
        barred: &[],
    };
    let all = movers(&view, &config, &one, &snapshot.pods, now);
    assert_eq!(all.len(), 40_000);
    // What each search comes to without the time bound (the node-fit
    // budget only), printed once.
    for (name, pod) in [("whole_gpu", &one), ("eight_whole_gpus", &eight)] {
        let started = std::time::Instant::now();
        let outcome = plan_among(&view, &config, pod, all.clone(), &inputs, &|| false);
        let took = started.elapsed();
        let what = match &outcome {
            Outcome::Plan(p) => p.describe(),
            other => format!("{other:?}"),
        };
        println!("defrag {name}: {what} ({took:.2?})");
    }
    let mut g = c.benchmark_group("defrag_5000x8_40000pods");
    g.bench_function("under_lock", |b| {
        b.iter(|| {
            let held = held_movers(&view, &config, &one, &snapshot.pods, now);
            let keys = held
                .iter()
                .filter_map(|(i, _)| snapshot.pods[*i].metadata.uid.as_deref());
            black_box((view.state().copy_for_moves(keys), held.len()))
        })
    });
    // One namespace of the 20 opted in (2,000 pods): serve lists only
    // opted-in namespaces' pods.
    let team0: Vec<Pod> = snapshot
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some("team-0"))
        .cloned()
        .collect();
    g.bench_function("under_lock_one_namespace", |b| {
        b.iter(|| {
            let held = held_movers(&view, &config, &one, &team0, now);
            let keys = held
                .iter()
                .filter_map(|(i, _)| team0[*i].metadata.uid.as_deref());
            black_box((view.state().copy_for_moves(keys), held.len()))
        })
    });
    g.bench_function("held_movers", |b| {
        b.iter(|| black_box(held_movers(&view, &config, &one, &snapshot.pods, now).len()))
    });
    g.bench_function("full_state_copy", |b| {
        b.iter(|| black_box(view.state().clone()))
    });
    let held = held_movers(&view, &config, &one, &snapshot.pods, now);
    g.bench_function("plans_of_movers", |b| {
        b.iter(|| black_box(finish_movers(&config, &snapshot.pods, held.clone()).len()))
    });
    // As `serve` runs it: bounded by searchMillis (500 ms) too.
    let millis = config.scheduler.defragmentation.search_millis;
    for (name, pod) in [("whole_gpu", &one), ("eight_whole_gpus", &eight)] {
        g.bench_function(format!("plan/{name}"), |b| {
            b.iter(|| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(millis);
                let stop = || std::time::Instant::now() >= deadline;
                black_box(plan_among(&view, &config, pod, all.clone(), &inputs, &stop))
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = defrag;
    config = Criterion::default().sample_size(10);
    targets = benches
}

fn main() {
    defrag();
    Criterion::default().configure_from_args().final_summary();
}
