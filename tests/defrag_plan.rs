//! `gpugate defrag --plan` and the defragmentation part of `gpugate
//! explain` on the worked example in tests/fixtures/defrag (docs/policies.md,
//! "Defragmentation"): the plans, who may and may not move and why, and
//! that nothing moves for a namespace that has not opted in.

use std::process::Command;

use gpugate::cluster::Snapshot;
use gpugate::config::Config;
use gpugate::explain::{DefragReport, defrag_plans, explain};

mod support {
    pub mod process;
}

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/defrag");

fn snapshot() -> Snapshot {
    Snapshot::load(&std::path::Path::new(DIR).join("cluster.yaml")).unwrap()
}

fn opted_in() -> Config {
    Config::load(&std::path::Path::new(DIR).join("gpugate.yaml")).unwrap()
}

/// 150 s after serve-7d9f-d was created (it may not move for 600 s).
fn now() -> jiff::Timestamp {
    "2026-11-25T12:00:30Z".parse().unwrap()
}

/// A moved pod, its node and its destination.
type Moved = (String, String, String);

/// `(pending pod, node, moves)` of every plan.
fn plans(report: &DefragReport) -> Vec<(String, String, Vec<Moved>)> {
    report
        .pods
        .iter()
        .filter_map(|p| {
            let d = p.defragmentation.as_ref()?;
            Some((
                p.pod.clone(),
                d.node.clone()?,
                d.moves
                    .iter()
                    .map(|m| (m.pod.clone(), m.from.clone(), m.to.clone()))
                    .collect(),
            ))
        })
        .collect()
}

fn m(pod: &str, from: &str, to: &str) -> Moved {
    (pod.into(), from.into(), to.into())
}

/// The whole-GPU pod fits on gpu-1 once serve-7d9f-a (the least recently
/// moved of the equals) goes to gpu-2; the two-GPU pod once serve-7d9f-b
/// goes too; the small one fits now. Not moved: the notebook (a bare pod),
/// serve-7d9f-d (created 150 s ago), etl (its namespace did not opt in).
#[test]
fn the_worked_example() {
    let report = defrag_plans(&snapshot(), None, &opted_in(), now()).unwrap();
    assert_eq!(
        plans(&report),
        [
            (
                "research/train".to_string(),
                "gpu-1".to_string(),
                vec![m("inference/serve-7d9f-a", "gpu-1", "gpu-2")]
            ),
            (
                "research/train-2gpu".to_string(),
                "gpu-1".to_string(),
                vec![
                    m("inference/serve-7d9f-a", "gpu-1", "gpu-2"),
                    m("inference/serve-7d9f-b", "gpu-1", "gpu-3")
                ]
            ),
        ]
    );
    let small = report
        .pods
        .iter()
        .find(|p| p.pod == "research/small")
        .unwrap();
    assert_eq!(small.verdict, "fits now: nothing to move");
    for p in &report.pods {
        if let Some(d) = &p.defragmentation {
            assert!(d.enabled && d.opt_in.is_empty(), "{p:?}");
            for moved in &d.moves {
                assert!(moved.pod.starts_with("inference/serve-7d9f-"), "{moved:?}");
                assert_ne!(moved.pod, "inference/serve-7d9f-d");
            }
        }
    }
}

/// Without the opt-in the same plans are shown, not acted on, naming the
/// namespace that would have to opt in; with serve-7d9f's pods kept (the
/// switch off, or everything opted in but them), the StatefulSet's pod in batch is
/// what a plan would move.
#[test]
fn without_the_opt_in_the_plan_is_shown_and_not_acted_on() {
    let report = defrag_plans(
        &snapshot(),
        Some(("research", "train")),
        &Config::default(),
        now(),
    )
    .unwrap();
    let d = report.pods[0].defragmentation.as_ref().unwrap();
    assert!(!d.enabled);
    assert_eq!(d.opt_in, ["inference"]);
    assert!(
        d.verdict.contains("if namespace inference opted in"),
        "{}",
        d.verdict
    );
    let e = explain(&snapshot(), "research", "train", &Config::default(), now()).unwrap();
    assert!(e.summary.contains("defragmentation: it fits on node gpu-1 after moving 1 pod: inference/serve-7d9f-a (gpu-1 → gpu-2) if namespace inference opted in"), "{}", e.summary);
    assert!(
        e.to_table()
            .contains("not acted on: their namespaces have not opted in")
    );

    // serve-7d9f's pods opted out: the StatefulSet's pod on gpu-3 goes to the
    // fullest node it fits on (binpack), gpu-2.
    let yaml = std::fs::read_to_string(std::path::Path::new(DIR).join("cluster.yaml"))
        .unwrap()
        .replace("  annotations:\n    hami.io/vgpu-node", "  annotations:\n    gpugate.io/movable: \"false\"\n    hami.io/vgpu-node")
        .replace("  name: etl-x2k\n  namespace: batch\n  uid: uid-etl-x2k\n  creationTimestamp: \"2026-11-25T11:00:00Z\"\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: StatefulSet, name: etl, uid: uid-etl, controller: true}\n  annotations:\n    gpugate.io/movable: \"false\"\n", "  name: etl-x2k\n  namespace: batch\n  uid: uid-etl-x2k\n  creationTimestamp: \"2026-11-25T11:00:00Z\"\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: StatefulSet, name: etl, uid: uid-etl, controller: true}\n  annotations:\n");
    let snapshot = Snapshot::from_yaml(&yaml, "test").unwrap();
    let report = defrag_plans(
        &snapshot,
        Some(("research", "train")),
        &Config::default(),
        now(),
    )
    .unwrap();
    assert_eq!(
        plans(&report),
        [(
            "research/train".to_string(),
            "gpu-3".to_string(),
            vec![m("batch/etl-x2k", "gpu-3", "gpu-2")]
        )]
    );
    // With the switch off, explain says gpugate does not act.
    let mut off = opted_in();
    off.scheduler.defragmentation.enabled = false;
    let e = explain(&self::snapshot(), "research", "train", &off, now()).unwrap();
    assert!(!e.defragmentation.unwrap().enabled);
}

/// The command line, table and JSON; a pod not in the cluster is an
/// error; `--plan` is required.
#[test]
fn defrag_plan_on_the_command_line() {
    let bin = env!("CARGO_BIN_EXE_gpugate");
    let cluster = format!("{DIR}/cluster.yaml");
    let config = format!("{DIR}/gpugate.yaml");
    let out = stdout(support::process::succeeds(Command::new(bin).args([
        "defrag",
        "--plan",
        "--cluster",
        &cluster,
        "--config",
        &config,
    ])));
    assert!(out.contains("research/train: fits on node gpu-1 after moving 1 pod: inference/serve-7d9f-a (gpu-1 → gpu-2)"), "{out}");
    assert!(
        out.contains("research/small: fits now: nothing to move"),
        "{out}"
    );
    let json = stdout(support::process::succeeds(Command::new(bin).args([
        "defrag",
        "--plan",
        "research/train-2gpu",
        "--cluster",
        &cluster,
        "--config",
        &config,
        "--output",
        "json",
    ])));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["pods"][0]["defragmentation"]["moves"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{json}"
    );
    let missing = Command::new(bin)
        .args(["defrag", "--plan", "research/nope", "--cluster", &cluster])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("pod research/nope is not in the cluster")
    );
    let no_plan_flag = Command::new(bin)
        .args(["defrag", "--cluster", &cluster])
        .output()
        .unwrap();
    assert!(!no_plan_flag.status.success());
}

fn stdout(out: std::process::Output) -> String {
    String::from_utf8(out.stdout).unwrap()
}
