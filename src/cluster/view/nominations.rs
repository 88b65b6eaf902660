//! GPUs freed by gpugate's own preemption, kept for the pod they were
//! freed for: while its victims terminate they still hold their GPUs; the
//! moment the last of them is gone from the ledger, the pod's allocation on
//! the node is assumed (as `/prioritize` assumes one), so that no other
//! pod's `/filter` is given the freed GPUs before the pod's next
//! scheduling cycle.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;

use crate::engine::PodPlan;

use super::ClusterView;

/// A pod waiting for its victims to go.
#[derive(Debug, Clone)]
pub struct Nomination {
    pod: Pod,
    plan: PodPlan,
    node: String,
    /// Victims still holding GPUs, by UID.
    victims: HashSet<String>,
    /// Until when (Unix ms) the nomination, then the freed GPUs, are kept.
    until_ms: i64,
    /// The freed GPUs are assumed for the pod.
    held: bool,
    /// The pod whose preemption this is part of (a gang's members share
    /// it).
    group: String,
}

#[derive(Debug, Clone, Default)]
pub struct Nominations {
    by_pod: HashMap<String, Nomination>,
}

impl ClusterView {
    /// Keeps what `victims` free on `node` for the pod `uid` until
    /// `until_ms`, once they are all gone; `group` names the preemption it
    /// is part of (the pod it was made for).
    #[allow(clippy::too_many_arguments)]
    pub fn nominate(
        &mut self,
        uid: &str,
        group: &str,
        pod: &Pod,
        plan: &PodPlan,
        node: &str,
        victims: &[String],
        until_ms: i64,
    ) {
        let victims: HashSet<String> = victims
            .iter()
            .filter(|v| self.held_allocation(v).is_some())
            .cloned()
            .collect();
        let empty = victims.is_empty();
        self.nominations.by_pod.insert(
            uid.to_string(),
            Nomination {
                pod: pod.clone(),
                plan: plan.clone(),
                node: node.to_string(),
                victims,
                until_ms,
                held: false,
                group: group.to_string(),
            },
        );
        if empty {
            self.hold_freed(uid);
        }
    }

    /// Whether the pod `key` is a victim some nominated pod waits for.
    pub fn is_nominated_victim(&self, key: &str) -> bool {
        self.nominations
            .by_pod
            .values()
            .any(|n| n.victims.contains(key))
    }

    /// Whether the pod `uid` is nominated, and whether its victims' GPUs
    /// are held for it already.
    pub fn nomination(&self, uid: &str) -> Option<(&str, bool)> {
        self.nominations
            .by_pod
            .get(uid)
            .map(|n| (n.node.as_str(), n.held))
    }

    /// Forgets the pod's nomination (bound, gone, or its time is up).
    pub fn drop_nomination(&mut self, uid: &str) {
        self.nominations.by_pod.remove(uid);
    }

    /// Ends nominations whose time is up; returns how many. (What they
    /// assumed ends with the assumption's own time.)
    pub(super) fn expire_nominations(&mut self, now_ms: i64) -> usize {
        let before = self.nominations.by_pod.len();
        self.nominations.by_pod.retain(|_, n| n.until_ms > now_ms);
        before - self.nominations.by_pod.len()
    }

    /// Nominated pods whose GPUs are held, as are those of every pod of
    /// the same preemption (a gang's members are tried again together).
    pub fn nominated_ready(&self) -> Vec<&str> {
        let waiting: std::collections::HashSet<&str> = self
            .nominations
            .by_pod
            .values()
            .filter(|n| !n.held)
            .map(|n| n.group.as_str())
            .collect();
        self.nominations
            .by_pod
            .iter()
            .filter(|(_, n)| n.held && !waiting.contains(n.group.as_str()))
            .map(|(uid, _)| uid.as_str())
            .collect()
    }

    /// Forgets the nominations of the preemption `group`, and gives back
    /// the GPUs held for them (the preemption failed).
    pub fn abandon_nominations(&mut self, group: &str) {
        let uids: Vec<String> = self
            .nominations
            .by_pod
            .iter()
            .filter(|(_, n)| n.group == group)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            self.nominations.by_pod.remove(&uid);
            self.drop_assumed(&uid);
        }
    }

    /// `namespace/name` of a nominated pod.
    pub fn nominated_name(&self, uid: &str) -> Option<String> {
        self.nominations
            .by_pod
            .get(uid)
            .map(|n| crate::cluster::pod_name(&n.pod))
    }

    pub fn nomination_count(&self) -> usize {
        self.nominations.by_pod.len()
    }

    /// The pod `key` no longer holds GPUs: if it was a victim, and the last
    /// of a nomination's, its GPUs are assumed for the nominated pod.
    pub(super) fn victim_freed(&mut self, key: &str) {
        if self.nominations.by_pod.is_empty() {
            return;
        }
        let done: Vec<String> = self
            .nominations
            .by_pod
            .iter_mut()
            .filter_map(|(uid, n)| {
                (n.victims.remove(key) && n.victims.is_empty()).then(|| uid.clone())
            })
            .collect();
        for uid in done {
            self.hold_freed(&uid);
        }
    }

    /// Assumes the nominated pod's allocation on its node, if it fits.
    fn hold_freed(&mut self, uid: &str) {
        let Some(n) = self.nominations.by_pod.get(uid) else {
            return;
        };
        let (pod, until) = (n.pod.clone(), n.until_ms);
        let Ok(allocation) = self.state.assign(&n.plan, &n.node) else {
            tracing::info!(pod = %crate::cluster::pod_name(&pod), node = %n.node, "preemption: the freed GPUs do not hold the pod (taken meanwhile); not held");
            return;
        };
        if self.assume(uid, &pod, allocation, until)
            && let Some(n) = self.nominations.by_pod.get_mut(uid)
        {
            n.held = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::hami::keys;
    use k8s_openapi::api::core::v1::Node as K8sNode;
    use serde_json::json;

    fn pod(name: &str, mib: u32, node: Option<&str>) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ml", "uid": name},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {
                "nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()}}}]},
        });
        if let Some(node) = node {
            p["metadata"]["annotations"] = json!({
                keys::VGPU_NODE: node,
                keys::VGPU_DEVICES_ALLOCATED: format!("{node}-0,NVIDIA,{mib},0:;")});
            p["spec"]["nodeName"] = json!(node);
            p["status"] = json!({"phase": "Running"});
        }
        serde_json::from_value(p).unwrap()
    }

    /// The victims' GPUs are held for the pod from the moment the last of
    /// them is gone, not before, and not for anyone else.
    #[test]
    fn freed_gpus_are_held_once_the_last_victim_is_gone() {
        let mut v = ClusterView::new();
        let mut n = K8sNode::default();
        n.metadata.name = Some("n".into());
        n.metadata.annotations = Some(
            [(
                crate::devices::nvidia::NODE_REGISTER.to_string(),
                r#"[{"id":"n-0","index":0,"count":10,"devmem":16000,"devcore":100,"type":"T4","health":true}]"#.to_string(),
            )]
            .into(),
        );
        v.upsert_node(&n);
        for (name, mib) in [("a", 6000), ("b", 6000)] {
            assert_eq!(v.upsert_pod(name, &pod(name, mib, Some("n"))), None);
        }
        let config = Config::default();
        let urgent = pod("urgent", 12000, None);
        let plan = crate::cluster::convert::pod_plan(&urgent, &config).unwrap();
        v.nominate(
            "urgent",
            "urgent",
            &urgent,
            &plan,
            "n",
            &["a".into(), "b".into()],
            i64::MAX,
        );
        assert!(v.is_nominated_victim("a") && !v.is_nominated_victim("urgent"));
        assert!(v.nominated_ready().is_empty());
        assert_eq!(v.nomination("urgent"), Some(("n", false)));
        v.delete_pod("a");
        assert!(!v.is_assumed("urgent"));
        // Another pod could take what a's going freed meanwhile.
        let other = pod("other", 4000, None);
        let other_plan = crate::cluster::convert::pod_plan(&other, &config).unwrap();
        assert!(v.state().assign(&other_plan, "n").is_ok());
        v.delete_pod("b");
        assert!(v.is_assumed("urgent"));
        assert_eq!(v.nomination("urgent"), Some(("n", true)));
        assert_eq!(v.nominated_ready(), ["urgent"]);
        // 12,000 of 16,000 MiB held for urgent: 4,000 left, not 4,001.
        let big = pod("big", 4001, None);
        let big_plan = crate::cluster::convert::pod_plan(&big, &config).unwrap();
        assert!(v.state().assign(&big_plan, "n").is_err());
        assert_eq!(v.expire_nominations(i64::MAX - 1), 0);
        // A failed preemption gives the held GPUs back.
        v.abandon_nominations("urgent");
        assert_eq!(v.nomination_count(), 0);
        assert!(!v.is_assumed("urgent"));
        assert!(v.state().assign(&big_plan, "n").is_ok());
    }
}
