//! The view's rules, fed object by object as the watchers and snapshots do.

use super::*;
use crate::devices::KindId;
use crate::engine::{QuotaAmount, QuotaLimits};
use crate::hami::keys;
use k8s_openapi::api::core::v1::ResourceQuotaSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const REGISTER: &str = r#"[{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true},{"id":"GPU-1","index":1,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}]"#;

fn node(name: &str, register: &str) -> K8sNode {
    let mut n = K8sNode::default();
    n.metadata.name = Some(name.into());
    n.metadata.annotations = Some(
        [(
            crate::devices::nvidia::NODE_REGISTER.to_string(),
            register.to_string(),
        )]
        .into(),
    );
    n
}

fn pod(ns: &str, name: &str, node: &str, devices: &str, phase: &str) -> Pod {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": phase},
    }))
    .unwrap();
    p.metadata.annotations = Some(
        [
            (keys::VGPU_NODE.to_string(), node.to_string()),
            (
                keys::VGPU_DEVICES_ALLOCATED.to_string(),
                devices.to_string(),
            ),
        ]
        .into(),
    );
    p
}

fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> ResourceQuota {
    let mut q = ResourceQuota::default();
    q.metadata.name = Some(name.into());
    q.metadata.namespace = Some(ns.into());
    q.spec = Some(ResourceQuotaSpec {
        hard: Some(
            hard.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        ),
        ..Default::default()
    });
    q
}

fn used_mem(view: &ClusterView, node: &str, gpu: usize) -> u64 {
    u64::from(view.state().node(node).unwrap().usage[gpu].mem_mib)
}

#[test]
fn pods_take_and_free_gpus_and_quota() {
    let mut v = ClusterView::new();
    assert!(v.upsert_node(&node("n1", REGISTER)).is_empty());
    let p = pod("team", "a", "n1", "GPU-1,NVIDIA,4000,30:;", "Running");
    assert_eq!(v.upsert_pod("uid-a", &p), None);
    assert_eq!(used_mem(&v, "n1", 1), 4000);
    assert_eq!(
        v.quotas().used("team").of(KindId::NVIDIA),
        QuotaAmount {
            mem_mib: 4000,
            cores: 30
        }
    );
    // A status update changes nothing; finishing frees everything.
    assert_eq!(v.upsert_pod("uid-a", &p), None);
    assert_eq!(used_mem(&v, "n1", 1), 4000);
    let done = pod("team", "a", "n1", "GPU-1,NVIDIA,4000,30:;", "Succeeded");
    v.upsert_pod("uid-a", &done);
    assert_eq!(used_mem(&v, "n1", 1), 0);
    assert!(v.quotas().used("team").is_zero());
    assert_eq!(v.counts().allocations, 0);
}

#[test]
fn terminating_pods_keep_their_gpus_until_deleted() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let mut p = pod("team", "a", "n1", "GPU-0,NVIDIA,1000,0:;", "Running");
    v.upsert_pod("uid-a", &p);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::UNIX_EPOCH,
    ));
    v.upsert_pod("uid-a", &p);
    assert_eq!(used_mem(&v, "n1", 0), 1000);
    v.delete_pod("uid-a");
    assert_eq!(used_mem(&v, "n1", 0), 0);
}

#[test]
fn allocations_on_unknown_nodes_wait_and_count_when_the_node_registers() {
    let mut v = ClusterView::new();
    let p = pod("team", "a", "late", "GPU-0,NVIDIA,2000,10:;", "Running");
    let why = v.upsert_pod("uid-a", &p).unwrap();
    assert!(why.contains("unknown node late"), "{why}");
    assert_eq!(v.unaccounted().len(), 1);
    // Quota still counts what the pod holds.
    assert_eq!(v.quotas().used("team").of(KindId::NVIDIA).mem_mib, 2000);
    v.upsert_node(&node("late", REGISTER));
    assert!(v.unaccounted().is_empty());
    assert_eq!(used_mem(&v, "late", 0), 2000);
}

#[test]
fn a_node_that_loses_a_gpu_reports_the_pods_on_it() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.upsert_pod(
        "uid-a",
        &pod("team", "a", "n1", "GPU-1,NVIDIA,2000,10:;", "Running"),
    );
    let one_gpu = r#"[{"id":"GPU-0","index":0,"count":10,"devmem":16384,"devcore":100,"type":"NVIDIA T4","health":true}]"#;
    v.upsert_node(&node("n1", one_gpu));
    let unaccounted = v.unaccounted();
    assert_eq!(unaccounted.len(), 1);
    assert!(unaccounted[0].1.contains("no longer reports"));
    // Back again: counted again.
    v.upsert_node(&node("n1", REGISTER));
    assert_eq!(used_mem(&v, "n1", 1), 2000);
}

#[test]
fn unreadable_allocations_are_reported_not_dropped() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let why = v
        .upsert_pod("uid-a", &pod("team", "a", "n1", "garbage", "Running"))
        .unwrap();
    assert!(why.contains("team/a"), "{why}");
    assert_eq!(v.counts().unaccounted, 1);
    v.delete_pod("uid-a");
    assert_eq!(v.counts().unaccounted, 0);
}

#[test]
fn node_updates_that_keep_the_gpu_annotations_are_unchanged() {
    let mut v = ClusterView::new();
    let n = node("n1", REGISTER);
    assert!(!v.node_unchanged(&n));
    v.upsert_node(&n);
    let mut status_only = n.clone();
    status_only.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    assert!(v.node_unchanged(&status_only));
    let mut cordoned = n.clone();
    cordoned
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(keys::DEVICE_CORDON.to_string(), String::new());
    assert!(
        !v.node_unchanged(&cordoned),
        "an empty annotation is not none"
    );
    let one_gpu = REGISTER.split("},{").next().unwrap().to_string() + "}]";
    assert!(!v.node_unchanged(&node("n1", &one_gpu)));
    v.delete_node("n1");
    assert!(!v.node_unchanged(&n));
}

#[test]
fn garbled_inventory_keeps_the_node_known_without_gpus() {
    let mut v = ClusterView::new();
    let problems = v.upsert_node(&node("n1", "not a register"));
    assert_eq!(problems.len(), 1);
    assert!(v.state().node("n1").unwrap().gpus.is_empty());
    assert!(v.node_problems().contains_key("n1"));
    v.upsert_node(&node("n1", REGISTER));
    assert!(v.node_problems().is_empty());
    v.delete_node("n1");
    assert!(v.state().node("n1").is_none());
}

#[test]
fn pods_on_a_deleted_node_are_reported_until_it_returns() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.upsert_pod(
        "uid-a",
        &pod("team", "a", "n1", "GPU-0,NVIDIA,2000,10:;", "Running"),
    );
    v.delete_node("n1");
    assert!(v.unaccounted()[0].1.contains("was deleted"));
    v.upsert_node(&node("n1", REGISTER));
    assert!(v.unaccounted().is_empty());
    assert_eq!(used_mem(&v, "n1", 0), 2000);
}

#[test]
fn quota_limits_are_the_tightest_and_bad_values_are_named() {
    let mut v = ClusterView::new();
    v.upsert_quota(&quota(
        "team",
        "big",
        &[
            ("limits.nvidia.com/gpumem", "40000"),
            ("limits.nvidia.com/gpucores", "abc"),
            ("requests.nvidia.com/gpumem", "1"),
        ],
    ));
    v.upsert_quota(&quota(
        "team",
        "small",
        &[("limits.nvidia.com/gpumem", "20000")],
    ));
    let (limits, problems) = v
        .quotas()
        .limits("team", "nvidia.com/gpumem", "nvidia.com/gpucores");
    assert_eq!(
        limits,
        QuotaLimits {
            mem_mib: Some(20000),
            cores: None
        }
    );
    assert_eq!(problems.len(), 1);
    assert!(problems[0].contains("team/big") && problems[0].contains("\"abc\""));
    v.delete_quota("team", "small");
    v.delete_quota("team", "big");
    assert!(
        v.quotas()
            .limits("team", "nvidia.com/gpumem", "nvidia.com/gpucores")
            .0
            .is_empty()
    );
}

/// A quota with a `scopeSelector` (PriorityClass `high` only) counts and
/// limits only the pods it covers; an unscoped one every pod; the
/// tightest that covers a pod refuses it, by name (HAMi master skips
/// scoped quotas, #3094).
#[test]
fn scoped_quotas_count_and_limit_only_the_pods_they_cover() {
    use crate::engine::ScopeFacts;
    let nv = crate::engine::request::DeviceConfig::default();
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.upsert_quota(&quota(
        "team",
        "all",
        &[("limits.nvidia.com/gpumem", "30000")],
    ));
    let mut high = quota("team", "high", &[("limits.nvidia.com/gpumem", "8000")]);
    high.spec.as_mut().unwrap().scope_selector = Some(
        serde_json::from_value(serde_json::json!({"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}))
        .unwrap(),
    );
    v.upsert_quota(&high);
    let with_class = |name: &str, devices: &str, class: Option<&str>| {
        let mut p = pod("team", name, "n1", devices, "Running");
        p.spec.as_mut().unwrap().priority_class_name = class.map(str::to_string);
        p
    };
    v.upsert_pod(
        "uid-h",
        &with_class("h", "GPU-0,NVIDIA,6000,0:;", Some("high")),
    );
    v.upsert_pod(
        "uid-l",
        &with_class("l", "GPU-1,NVIDIA,16000,0:;", Some("low")),
    );
    let facts = |class: &str| ScopeFacts {
        priority_class: Some(class.to_string()),
        best_effort: true,
        ..Default::default()
    };
    let ask = |mem_mib| QuotaAmount { mem_mib, cores: 0 };
    let (for_high, _) = v.quotas().quota("team", &facts("high"), &nv);
    let named: Vec<(&str, u64)> = for_high
        .quotas
        .iter()
        .map(|q| (q.name.as_str(), q.used.mem_mib))
        .collect();
    assert_eq!(named, [("all", 22000), ("high", 6000)]);
    assert_eq!(for_high.check(ask(2000)), Ok(()));
    assert_eq!(for_high.check(ask(3000)).unwrap_err().quota, "high");
    let (for_low, _) = v.quotas().quota("team", &facts("low"), &nv);
    assert_eq!(for_low.quotas.len(), 1);
    assert_eq!(for_low.check(ask(8000)), Ok(()));
    assert_eq!(for_low.check(ask(9000)).unwrap_err().quota, "all");
    // The gauges' limits leave the scoped quota out, as HAMi master does.
    let (limits, _) = v
        .quotas()
        .limits("team", "nvidia.com/gpumem", "nvidia.com/gpucores");
    assert_eq!(limits.mem_mib, Some(30000));
    assert_eq!(v.quotas().used("team").of(KindId::NVIDIA).mem_mib, 22000);
    // The high pod gone: the scoped quota has its room back.
    v.delete_pod("uid-h");
    let (for_high, _) = v.quotas().quota("team", &facts("high"), &nv);
    assert_eq!(for_high.check(ask(8000)), Ok(()));
    assert_eq!(v.quotas().used("team").of(KindId::NVIDIA).mem_mib, 16000);
}

/// An allocation the decoder refuses fails closed: the GPUs it names
/// (every GPU of its node when it names none) take no new pod, with a
/// notice, until it can be read or the pod is gone; a node that registers
/// later is blocked then.
#[test]
fn unreadable_allocations_block_their_gpus() {
    let blocked = |v: &ClusterView, node: &str| -> Vec<bool> {
        v.state()
            .node(node)
            .unwrap()
            .usage
            .iter()
            .map(|u| u.unreadable > 0)
            .collect()
    };
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let bad = pod("team", "a", "n1", "GPU-1,NVIDIA,lots,0:;", "Running");
    let why = v.upsert_pod("uid-a", &bad).unwrap();
    assert!(why.contains("mem \"lots\""), "{why}");
    assert_eq!(blocked(&v, "n1"), [false, true]);
    assert_eq!(v.counts().unreadable_allocations, 1);
    assert_eq!(v.counts().unreadable_blocked_gpus, 1);
    assert_eq!(v.unaccounted().len(), 1);
    let notices = v.take_notices();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].reason, "AllocationUnreadable");
    assert!(notices[0].problem.contains("take no new pod"));
    // Seen again unchanged (a status update): not told again.
    assert_eq!(v.upsert_pod("uid-a", &bad), Some(why));
    assert!(!v.has_notices());
    // Readable at last: it counts what it holds, and the block is gone.
    v.upsert_pod(
        "uid-a",
        &pod("team", "a", "n1", "GPU-1,NVIDIA,3000,0:;", "Running"),
    );
    assert_eq!(blocked(&v, "n1"), [false, false]);
    assert_eq!(used_mem(&v, "n1", 1), 3000);
    assert_eq!(v.counts().unreadable_allocations, 0);
    // Naming no GPU of the node: the whole node.
    v.upsert_pod("uid-b", &pod("team", "b", "n1", "garbage", "Running"));
    assert_eq!(blocked(&v, "n1"), [true, true]);
    v.delete_pod("uid-b");
    assert_eq!(blocked(&v, "n1"), [false, false]);
    // A node not known yet: blocked once it registers.
    let why = v
        .upsert_pod(
            "uid-c",
            &pod("team", "c", "late", "GPU-0,NVIDIA,1,0,0:;", "Running"),
        )
        .unwrap();
    assert!(why.contains("slots"), "{why}");
    v.upsert_node(&node("late", REGISTER));
    assert_eq!(blocked(&v, "late"), [true, false]);
    // Finished: it holds nothing.
    v.upsert_pod(
        "uid-c",
        &pod("team", "c", "late", "GPU-0,NVIDIA,1,0,0:;", "Succeeded"),
    );
    assert_eq!(blocked(&v, "late"), [false, false]);
}

/// A pod deleted and created again under its name is a new pod (HAMi
/// #2968): the ledger is keyed by UID, so the old one's delete, arriving
/// late, frees only what the old one held, and the node lock's holder name
/// finds the new one.
#[test]
fn a_pod_created_again_under_its_name_is_a_new_pod() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let mut old = pod("team", "train", "n1", "GPU-0,NVIDIA,4000,0:;", "Running");
    old.metadata.uid = Some("uid-old".into());
    old.spec.as_mut().unwrap().node_name = Some("n1".into());
    v.upsert_pod("uid-old", &old);
    let mut new = pod("team", "train", "n1", "GPU-1,NVIDIA,6000,0:;", "Running");
    new.metadata.uid = Some("uid-new".into());
    new.spec.as_mut().unwrap().node_name = Some("n1".into());
    v.upsert_pod("uid-new", &new);
    assert_eq!((used_mem(&v, "n1", 0), used_mem(&v, "n1", 1)), (4000, 6000));
    v.delete_pod("uid-old");
    assert_eq!((used_mem(&v, "n1", 0), used_mem(&v, "n1", 1)), (0, 6000));
    assert!(v.holds_on("team", "train", "n1"));
    assert_eq!(v.held_name("uid-new").as_deref(), Some("team/train"));
    assert_eq!(v.quotas().used("team").of(KindId::NVIDIA).mem_mib, 6000);
}

/// A pod that has finished frees its GPUs, with its annotations or
/// without them (HAMi #2959: stripped annotations left them held).
#[test]
fn a_finished_pod_frees_its_gpus_even_without_its_annotations() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let p = pod("team", "a", "n1", "GPU-0,NVIDIA,4000,0:;", "Running");
    v.upsert_pod("uid-a", &p);
    assert_eq!(used_mem(&v, "n1", 0), 4000);
    let mut done = p.clone();
    done.metadata.annotations = None;
    done.status.as_mut().unwrap().phase = Some("Failed".into());
    v.upsert_pod("uid-a", &done);
    assert_eq!(used_mem(&v, "n1", 0), 0);
    assert_eq!(v.counts().allocations, 0);
    assert_eq!(v.quotas().used("team").of(KindId::NVIDIA).mem_mib, 0);
}

#[test]
fn a_reservation_survives_events_that_do_not_show_it_yet() {
    let mut view = ClusterView::new();
    view.upsert_node(&node("n1", REGISTER));
    let mut p = pod("ns", "p", "n1", "GPU-0,NVIDIA,1000,10:;", "Pending");
    let allocation = crate::cluster::pod_allocation(&p).unwrap().unwrap();
    let before = p.clone();
    p.metadata.annotations = None;
    let r = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    // The pod as it was before the patch, and a re-list without it.
    assert_eq!(view.upsert_pod("uid-p", &p), None);
    view.pod_holds_nothing("uid-p");
    view.pod_missing_from_list("uid-p");
    assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
    // Bound: still held until the pod shows it, then settled.
    r.bound(&mut view);
    view.pod_missing_from_list("uid-p");
    assert!(view.held_allocation("uid-p").is_none());
    let r = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    r.bound(&mut view);
    view.upsert_pod("uid-p", &p);
    assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
    // The pod shows the annotations, unbound: still ours. Bound: settled,
    // and from then on the pod is the truth.
    view.upsert_pod("uid-p", &before);
    assert!(view.is_reserved("uid-p"));
    let mut bound_before = before.clone();
    bound_before.spec.as_mut().unwrap().node_name = Some("n1".into());
    view.upsert_pod("uid-p", &bound_before);
    assert!(!view.is_reserved("uid-p"));
    assert_eq!(view.held_allocation("uid-p"), Some(&allocation));
    view.upsert_pod("uid-p", &p);
    assert!(
        view.held_allocation("uid-p").is_none(),
        "settled: the pod is the truth"
    );
    // A failed bind releases only an in-flight reservation, and only its
    // own: a stale handle cannot undo a later bind's reservation.
    let r = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    assert!(r.release(&mut view));
    assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);
    let stale = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    let current = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    assert!(!stale.release(&mut view));
    assert!(view.is_binding("uid-p"));
    assert!(current.release(&mut view));
    // Bound, then the pod fails before the watch showed it bound: freed.
    let r = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    r.bound(&mut view);
    let mut failed = before.clone();
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    view.upsert_pod("uid-p", &failed);
    assert!(view.held_allocation("uid-p").is_none());
    // In flight, and the pod shows up bound: the pod is the truth.
    let r = view.reserve("uid-p", &p, allocation.clone()).unwrap();
    let mut bound = p.clone();
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    view.upsert_pod("uid-p", &bound);
    assert!(view.held_allocation("uid-p").is_none());
    assert!(!view.is_reserved("uid-p"));
    assert!(!r.release(&mut view), "not in flight any more");
}

/// Why a bind to `node` would wait, from the view's promised nodes.
fn promised(
    view: &ClusterView,
    node: &str,
    now: jiff::Timestamp,
    expiry: std::time::Duration,
) -> Option<String> {
    view.promised_nodes(now, expiry)
        .get(node)
        .and_then(|w| w.describe())
}

/// gpugate's binds (assumed, running, unconfirmed) per node.
fn binds(view: &ClusterView) -> HashMap<String, u32> {
    view.promised_nodes(jiff::Timestamp::now(), std::time::Duration::from_secs(300))
        .into_iter()
        .filter(|(_, w)| w.binds > 0)
        .map(|(n, w)| (n.to_string(), w.binds))
        .collect()
}

#[test]
fn assumed_allocations_count_until_a_bind_replaces_them_or_they_expire() {
    let mut view = ClusterView::new();
    view.upsert_node(&node("n1", REGISTER));
    view.upsert_node(&node("n2", REGISTER));
    let mut p = pod("ns", "p", "n1", "GPU-0,NVIDIA,1000,10:;", "Pending");
    let on_n1 = crate::cluster::pod_allocation(&p).unwrap().unwrap();
    p.metadata.annotations = None;
    let now = jiff::Timestamp::now();
    let expiry = std::time::Duration::from_secs(300);
    assert_eq!(promised(&view, "n1", now, expiry), None);

    assert!(view.assume("uid-p", &p, on_n1.clone(), 1_000));
    assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 1);
    let unsettled = binds(&view);
    assert_eq!(unsettled.get("n1"), Some(&1));
    assert!(promised(&view, "n1", now, expiry).is_some());
    assert_eq!(promised(&view, "n2", now, expiry), None);
    // Only a pod that holds nothing is assumed; watch events of the
    // unbound pod keep it.
    assert!(!view.assume("uid-p", &p, on_n1.clone(), 2_000));
    view.upsert_pod("uid-p", &p);
    view.pod_holds_nothing("uid-p");
    assert!(view.is_assumed("uid-p"));
    assert!(view.has_assumed());
    // Not yet due; then due: dropped, nothing left.
    assert_eq!(view.expire_assumed(999), 0);
    assert_eq!(view.expire_assumed(1_000), 1);
    assert!(view.held_allocation("uid-p").is_none());
    assert!(binds(&view).is_empty());
    assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);

    // The bind chooses another node: its reservation replaces the
    // assumption, and confirming it leaves nothing unsettled.
    assert!(view.assume("uid-p", &p, on_n1.clone(), 1_000));
    let mut on_n2 = on_n1.clone();
    on_n2.node = "n2".into();
    let r = view.reserve("uid-p", &p, on_n2.clone()).unwrap();
    assert!(!view.is_assumed("uid-p"));
    assert_eq!(view.state().node("n1").unwrap().usage[0].slots, 0);
    assert_eq!(binds(&view).get("n2"), Some(&1));
    assert_eq!(view.expire_assumed(i64::MAX), 0, "a bind is not assumed");
    r.settle(&mut view);
    assert!(binds(&view).is_empty());

    // A new cycle of the pod drops what its last prioritize assumed.
    let q = pod("ns", "q", "n1", "", "Pending");
    assert!(view.assume("uid-q", &q, on_n1.clone(), 1_000));
    assert!(view.drop_assumed("uid-q"));
    assert!(!view.drop_assumed("uid-q"));
    assert!(!view.has_assumed());
}

#[test]
fn a_node_is_busy_while_its_lock_is_held_and_not_expired() {
    let mut view = ClusterView::new();
    let mut n = node("n1", REGISTER);
    n.metadata.resource_version = Some("7".into());
    view.upsert_node(&n);
    view.note_node_lock(&n);
    let seen = view.seen_lock("n1").unwrap();
    assert_eq!(seen.value, None);
    assert_eq!(seen.resource_version.as_deref(), Some("7"));
    let expiry = std::time::Duration::from_secs(300);
    let now = jiff::Timestamp::now();
    let lock = |value: &str| {
        let mut n = n.clone();
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::NODE_LOCK.into(), value.into());
        n
    };
    view.note_node_lock(&lock(&format!("{now},ml,holder")));
    let why = promised(&view, "n1", now, expiry).unwrap();
    assert!(why.contains("ml/holder"), "{why}");
    // Expired, or unreadable (bind reports it): not steered around.
    view.note_node_lock(&lock("2020-01-01T00:00:00Z,ml,old"));
    assert_eq!(promised(&view, "n1", now, expiry), None);
    view.note_node_lock(&lock("garbage"));
    assert_eq!(promised(&view, "n1", now, expiry), None);
    // A write's answer updates only nodes the watch has shown.
    view.note_node_lock_if_watched(&lock(&format!("{now},ml,other")));
    assert!(promised(&view, "n1", now, expiry).is_some());
    let mut stranger = lock(&format!("{now},ml,other"));
    stranger.metadata.name = Some("n9".into());
    view.note_node_lock_if_watched(&stranger);
    assert!(view.seen_lock("n9").is_none());
    view.delete_node("n1");
    assert!(view.seen_lock("n1").is_none());
}

/// An expired lock is reported kept while the view shows its holder bound
/// to the node, Pending with bind-phase allocating; not once the holder is
/// admitted, running, bound elsewhere or gone, nor before it expires.
#[test]
fn expired_locks_kept_for_holders_awaiting_their_device_plugin() {
    use crate::hami::node_lock::LockRules;
    let rules = LockRules {
        expiry: std::time::Duration::from_secs(300),
        unbound_after: std::time::Duration::from_secs(30),
    };
    let mut view = ClusterView::new();
    let mut n = node("n1", REGISTER);
    view.upsert_node(&n);
    n.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(keys::NODE_LOCK.into(), "2026-01-01T00:00:00Z,ml,p".into());
    view.note_node_lock(&n);
    let holder = |phase: &str, bind_phase: &str, bound_to: &str| {
        let mut p = pod("ml", "p", "n1", "GPU-0,NVIDIA,1000,0:;", phase);
        p.spec.as_mut().unwrap().node_name = Some(bound_to.into());
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(keys::BIND_PHASE.into(), bind_phase.into());
        p
    };
    let at = |t: &str| -> jiff::Timestamp { t.parse().unwrap() };
    let later = at("2026-01-01T00:20:00Z");
    view.upsert_pod("uid-p", &holder("Pending", "allocating", "n1"));
    let kept = view.locks_awaiting_allocation(later, rules);
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (kept[0].node.as_str(), kept[0].uid.as_str()),
        ("n1", "uid-p")
    );
    assert!(
        kept[0]
            .describe(later)
            .starts_with("node n1 is waiting for its device plugin to admit pod ml/p for 20 min"),
        "{}",
        kept[0].describe(later)
    );
    // Not expired yet: a live lock, steered around, not kept.
    assert!(
        view.locks_awaiting_allocation(at("2026-01-01T00:04:00Z"), rules)
            .is_empty()
    );
    for (phase, bind_phase, node) in [
        ("Pending", "success", "n1"),
        ("Running", "allocating", "n1"),
        ("Pending", "allocating", "n2"),
    ] {
        view.upsert_pod("uid-p", &holder(phase, bind_phase, node));
        assert!(
            view.locks_awaiting_allocation(later, rules).is_empty(),
            "{phase} {bind_phase} {node}"
        );
    }
    view.upsert_pod("uid-p", &holder("Pending", "allocating", "n1"));
    assert_eq!(view.locks_awaiting_allocation(later, rules).len(), 1);
    view.delete_pod("uid-p");
    assert!(view.locks_awaiting_allocation(later, rules).is_empty());
}

/// A pod named into a group only by `spec.schedulingGroup.podGroupName`
/// (Kubernetes 1.36) is a member like one with the label, and its group's
/// PodGroup gives the count.
#[test]
fn the_scheduling_group_field_makes_a_member() {
    let mut view = ClusterView::new();
    view.set_pod_groups_served(true);
    view.pod_groups_listed();
    let group = GangKey {
        namespace: "ns".into(),
        name: "train".into(),
    };
    view.upsert_pod_group(
        group.clone(),
        crate::engine::gang::PodGroupSpec {
            min_member: 2,
            schedule_timeout_seconds: None,
        },
    );
    let mut p = pod("ns", "a", "n1", "", "Pending");
    p.metadata.annotations = None;
    p.spec.as_mut().unwrap().scheduling_group =
        Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some("train".into()),
        });
    view.upsert_pod("uid-a", &p);
    assert_eq!(view.gang_of("uid-a"), Some(&group));
    let label = crate::engine::gang::gang_label(
        "ns",
        crate::cluster::convert::membership(&p),
        view.pod_groups(),
    );
    assert_eq!(label.unwrap().unwrap().min_available, 2);
}

#[test]
fn gang_members_and_holds_follow_their_pods() {
    let mut view = ClusterView::new();
    view.upsert_node(&node("n1", REGISTER));
    let member = |name: &str, phase: &str| {
        let mut p = pod("ns", name, "n1", "", phase);
        p.metadata.annotations = None;
        p.metadata.labels = Some(
            [
                (crate::engine::gang::GROUP_NAME.to_string(), "g".to_string()),
                (
                    crate::engine::gang::GROUP_MIN_AVAILABLE.to_string(),
                    "2".to_string(),
                ),
            ]
            .into(),
        );
        p
    };
    let group = GangKey {
        namespace: "ns".into(),
        name: "g".into(),
    };
    view.upsert_pod("uid-a", &member("a", "Pending"));
    view.upsert_pod("uid-b", &member("b", "Pending"));
    assert_eq!(view.gang_members(&group).unwrap().len(), 2);
    let a = pod("ns", "a", "n1", "GPU-1,NVIDIA,16384,100:;", "Pending");
    let alloc = crate::cluster::pod_allocation(&a).unwrap().unwrap();
    view.hold_for_gang("uid-a", &group, alloc, 1_000).unwrap();
    assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 16384);
    assert_eq!(
        view.state_without_gang_holds(&group)
            .node("n1")
            .unwrap()
            .usage[1]
            .mem_mib,
        0
    );
    // Finished and deleted members leave the group; holds go with them.
    view.upsert_pod("uid-b", &member("b", "Succeeded"));
    assert_eq!(view.gang_members(&group).unwrap().len(), 1);
    view.delete_pod("uid-a");
    assert!(view.gang_members(&group).is_none());
    assert_eq!(view.gang_hold_count(), 0);
    assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 0);
    // Holds end at their time.
    let a = pod("ns", "a", "n1", "GPU-1,NVIDIA,16384,100:;", "Pending");
    let alloc = crate::cluster::pod_allocation(&a).unwrap().unwrap();
    view.hold_for_gang("uid-a", &group, alloc, 1_000).unwrap();
    assert_eq!(view.expire_gang_holds(999), 0);
    assert_eq!(view.expire_gang_holds(1_000), 1);
    assert_eq!(view.state().node("n1").unwrap().usage[1].mem_mib, 0);
}

/// A Guaranteed pod of 4 CPUs and 1 GiB on `node`'s GPU-0, recorded on
/// NUMA zone 0, started by the kubelet at `started` (`None`: not yet).
fn aligned_pod(name: &str, node: &str, started: Option<&str>) -> Pod {
    let mut p: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {
            "cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending", "startTime": started},
    }))
    .unwrap();
    p.metadata.annotations = Some(
        [
            (keys::VGPU_NODE.to_string(), node.to_string()),
            (
                keys::VGPU_DEVICES_ALLOCATED.to_string(),
                "GPU-0,NVIDIA,1000,0:;".to_string(),
            ),
            (
                crate::cluster::pod_annotations::NUMA_ZONES.to_string(),
                "0".to_string(),
            ),
        ]
        .into(),
    );
    p
}

/// Zone 0 with `cpus` available, written at `written`.
fn nrt(cpus: &str, written: &str) -> crate::cluster::node_topology::NrtObject {
    serde_yaml_ng::from_str(&format!(
        r#"
metadata:
  name: n1
  managedFields: [{{manager: nfd-topology-updater, operation: Update, time: "{written}"}}]
attributes: [{{name: topologyManagerPolicy, value: single-numa-node}}]
zones:
  - name: node-0
    type: Node
    resources:
      - {{name: cpu, capacity: "16", allocatable: "16", available: "{cpus}"}}
      - {{name: memory, capacity: 64Gi, allocatable: 64Gi, available: 64Gi}}
"#
    ))
    .unwrap()
}

fn apply_nrt(v: &mut ClusterView, cpus: &str, written: &str) {
    let o = nrt(cpus, written);
    let (t, problems) = o.topology();
    assert!(problems.is_empty(), "{problems:?}");
    v.upsert_node_topology("n1", t, o.written());
}

/// The stale-data rule: what gpugate placed in a zone counts on top of the
/// object until an object written after the kubelet admitted the pod.
#[test]
fn zone_takes_count_until_an_object_written_after_the_pod_started() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.set_node_topologies_served(true);
    apply_nrt(&mut v, "16", "2026-11-25T10:00:00Z");
    assert_eq!(v.upsert_pod("uid-a", &aligned_pod("a", "n1", None)), None);
    let counted = |v: &ClusterView| v.state().unsettled_zone_takes("n1");
    assert_eq!(counted(&v), ["uid-a"]);
    // The exporter writes again before the kubelet admitted the pod: the
    // object cannot show it yet.
    apply_nrt(&mut v, "16", "2026-11-25T10:01:00Z");
    assert_eq!(counted(&v), ["uid-a"]);
    // Admitted at 10:01:30; the object of 10:01:00 still predates that.
    v.upsert_pod(
        "uid-a",
        &aligned_pod("a", "n1", Some("2026-11-25T10:01:30Z")),
    );
    assert_eq!(counted(&v), ["uid-a"]);
    // Written 3 s after: within the margin (the exporter may have read
    // the node before the kubelet admitted the pod).
    apply_nrt(&mut v, "16", "2026-11-25T10:01:33Z");
    assert_eq!(counted(&v), ["uid-a"]);
    // An object written after: it shows the pod's CPUs; stop counting.
    apply_nrt(&mut v, "12", "2026-11-25T10:02:00Z");
    assert!(counted(&v).is_empty());

    // Seen admitted after the object that shows it arrived: settled then.
    v.upsert_pod("uid-b", &aligned_pod("b", "n1", None));
    assert_eq!(counted(&v), ["uid-b"]);
    apply_nrt(&mut v, "8", "2026-11-25T10:05:00Z");
    assert_eq!(counted(&v), ["uid-b"]);
    v.upsert_pod(
        "uid-b",
        &aligned_pod("b", "n1", Some("2026-11-25T10:04:00Z")),
    );
    assert!(counted(&v).is_empty());

    // A pod that goes away stops counting at once.
    v.upsert_pod("uid-c", &aligned_pod("c", "n1", None));
    v.delete_pod("uid-c");
    assert!(counted(&v).is_empty());
    // When the kind stops being served, placement forgets the topologies.
    assert!(v.state().topology("n1").is_some());
    v.set_node_topologies_served(false);
    assert!(v.state().topology("n1").is_none());
}

/// Counted takes are taken off the zone placement sees: a second pod
/// cannot have the CPUs the first one took until the object shows them.
#[test]
fn a_counted_take_keeps_the_zone_from_a_second_pod() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.set_node_topologies_served(true);
    apply_nrt(&mut v, "6", "2026-11-25T10:00:00Z");
    let config = crate::config::Config::default();
    let mut second = aligned_pod("b", "n1", None);
    second.metadata.annotations = None;
    let plan = crate::cluster::convert::pod_plan(&second, &config).unwrap();
    assert!(plan.numa.guaranteed);
    assert!(v.state().assign(&plan, "n1").is_ok());
    v.upsert_pod("uid-a", &aligned_pod("a", "n1", None));
    let e = v.state().assign(&plan, "n1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "1/1 NumaZoneInsufficientCPU (one NUMA zone for container c)"
    );
    // The object catches up (6 - 4 = 2 CPUs left): still no room, now by
    // the object alone.
    v.upsert_pod(
        "uid-a",
        &aligned_pod("a", "n1", Some("2026-11-25T10:00:30Z")),
    );
    apply_nrt(&mut v, "2", "2026-11-25T10:01:00Z");
    assert!(v.state().unsettled_zone_takes("n1").is_empty());
    assert!(v.state().assign(&plan, "n1").is_err());
    // The first pod leaves and the object shows its CPUs back.
    apply_nrt(&mut v, "6", "2026-11-25T10:02:00Z");
    assert!(v.state().assign(&plan, "n1").is_ok());
}

/// A snapshot made with `kubectl get` has no managedFields: its objects
/// show the pods the kubelet had admitted when it was made, whichever
/// comes first in the file; pods not admitted yet still count.
#[test]
fn snapshot_objects_without_write_times_show_admitted_pods() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    v.set_node_topologies_served(true);
    let mut o = nrt("16", "2026-11-25T10:00:00Z");
    o.metadata.managed_fields = None;
    assert_eq!(o.written(), None);
    v.upsert_pod(
        "uid-a",
        &aligned_pod("a", "n1", Some("2026-11-25T09:00:00Z")),
    );
    v.upsert_pod("uid-b", &aligned_pod("b", "n1", None));
    let (t, _) = o.topology();
    v.upsert_node_topology("n1", t, o.written());
    v.node_topologies_listed();
    v.settle_shown_takes();
    assert_eq!(v.state().unsettled_zone_takes("n1"), ["uid-b"]);
    // Only the exporter's own writes count (the entry owning zones).
    let o: crate::cluster::node_topology::NrtObject = serde_yaml_ng::from_str(
        r#"
metadata:
  name: n1
  managedFields:
    - {manager: nfd-topology-updater, operation: Update, time: "2026-11-25T10:00:00Z", fieldsType: FieldsV1, fieldsV1: {"f:zones": {}}}
    - {manager: kubectl-label, operation: Update, time: "2026-11-25T11:00:00Z", fieldsType: FieldsV1, fieldsV1: {"f:metadata": {}}}
"#,
    )
    .unwrap();
    assert_eq!(o.written().unwrap().to_string(), "2026-11-25T10:00:00Z");
}

/// Until the first list of NodeResourceTopology completes, which nodes
/// align a pod is unknown.
#[test]
fn topologies_listing_until_the_first_list() {
    let mut v = ClusterView::new();
    assert!(!v.node_topologies_listing());
    v.set_node_topologies_served(true);
    assert!(v.node_topologies_listing());
    v.node_topologies_listed();
    assert!(!v.node_topologies_listing());
    v.set_node_topologies_served(false);
    v.set_node_topologies_served(true);
    assert!(v.node_topologies_listing());
}

/// HAMi v2.10's two MIG inconsistencies, as the watch meets them: a pod
/// with a MIG entry on a hami-core GPU, and a pod holding a share of a MIG
/// GPU without its entry. Each is counted (the GPU takes no new pod, the
/// gauge counts it) and noticed once for an event; deleting the pod
/// clears the GPU.
#[test]
fn mig_instances_inconsistent_with_their_gpu_are_counted_and_noticed() {
    let mig_register = r#"[{"id":"GPU-m","index":0,"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1}]}]}]"#;
    let mut v = ClusterView::new();
    v.upsert_node(&node("core", REGISTER));
    v.upsert_node(&node("mig", mig_register));
    assert_eq!(v.counts().mig_inconsistent_gpus, 0);

    let mut stale = pod("ns", "stale", "core", "GPU-0,NVIDIA,4864,15:;", "Running");
    stale.metadata.annotations.as_mut().unwrap().insert(
        keys::VGPU_MIG_ALLOCATIONS.to_string(),
        r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0","profile":"1g.5gb","placement":{"start":0,"size":1}}]"#.to_string(),
    );
    assert_eq!(
        v.upsert_pod("uid-stale", &stale),
        None,
        "counted on its node"
    );
    let unreserved = pod(
        "ns",
        "unreserved",
        "mig",
        "GPU-m,NVIDIA,4864,15:;",
        "Running",
    );
    assert_eq!(v.upsert_pod("uid-unreserved", &unreserved), None);

    assert_eq!(v.counts().mig_inconsistent_gpus, 2);
    assert_eq!(used_mem(&v, "core", 0), 4864, "its memory still counts");
    let notices = v.take_notices();
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert_eq!(
        (notices[0].uid.as_str(), notices[0].name.as_str()),
        ("uid-stale", "stale")
    );
    assert!(
        notices[0].problem.contains("GPU-0 is not in MIG mode"),
        "{notices:?}"
    );
    assert!(
        notices[1].problem.contains("GPU-m is in MIG mode"),
        "{notices:?}"
    );
    assert!(!v.has_notices(), "told once");
    // A status update of the same pod is not a new notice.
    assert_eq!(v.upsert_pod("uid-stale", &stale), None);
    assert!(!v.has_notices());

    v.delete_pod("uid-stale");
    v.delete_pod("uid-unreserved");
    assert_eq!(v.counts().mig_inconsistent_gpus, 0);

    // The watch may show the pod before its node: the notice comes when
    // the node registers and the pod is counted on it.
    let mut v = ClusterView::new();
    assert!(v.upsert_pod("uid-stale", &stale).is_some(), "no node yet");
    assert!(!v.has_notices());
    v.upsert_node(&node("core", REGISTER));
    let notices = v.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].problem.contains("GPU-0 is not in MIG mode"));
    assert_eq!(v.counts().mig_inconsistent_gpus, 1);
}

/// HAMi's lock names its holder `namespace/name`: the ledger finds it by
/// that name while the pod holds GPUs on the node, and forgets the name
/// with the pod (finished, deleted, or a new pod of the same name).
#[test]
fn lock_holders_are_found_by_name_while_they_hold_gpus_there() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let p = pod("team", "a", "n1", "GPU-0,NVIDIA,1000,0:;", "Running");
    v.upsert_pod("uid-a", &p);
    assert!(v.holds_on("team", "a", "n1"));
    assert!(!v.holds_on("team", "a", "n2"));
    assert!(!v.holds_on("other", "a", "n1"));
    v.upsert_pod(
        "uid-a",
        &pod("team", "a", "n1", "GPU-0,NVIDIA,1000,0:;", "Succeeded"),
    );
    assert!(!v.holds_on("team", "a", "n1"));
    // The same name again, a new UID; the old UID's deletion leaves it.
    v.upsert_pod("uid-a", &p);
    v.upsert_pod("uid-a2", &p);
    v.delete_pod("uid-a");
    assert!(v.holds_on("team", "a", "n1"));
    v.delete_pod("uid-a2");
    assert!(!v.holds_on("team", "a", "n1"));
    assert!(v.held_names.is_empty());
}

/// A pod only assumed on a node (by `/filter` or `/prioritize`), or bound
/// to another node than its annotations name, is not taken as the node
/// lock's live holder from the view: the API server is asked.
#[test]
fn assumed_or_elsewhere_bound_pods_are_not_lock_holders() {
    let mut v = ClusterView::new();
    v.upsert_node(&node("n1", REGISTER));
    let mut p = pod("team", "a", "n1", "GPU-0,NVIDIA,1000,0:;", "Pending");
    let on_n1 = crate::cluster::pod_allocation(&p).unwrap().unwrap();
    assert!(v.assume("uid-a", &p, on_n1, i64::MAX));
    assert!(!v.holds_on("team", "a", "n1"));
    assert!(v.drop_assumed("uid-a"));
    p.spec.as_mut().unwrap().node_name = Some("n2".into());
    v.upsert_pod("uid-a", &p);
    assert!(!v.holds_on("team", "a", "n1"));
    p.spec.as_mut().unwrap().node_name = Some("n1".into());
    v.upsert_pod("uid-a", &p);
    assert!(v.holds_on("team", "a", "n1"));
}
