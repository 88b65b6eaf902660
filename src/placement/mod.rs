//! The placement rules between the protocols and the engine, as functions
//! of the cluster view and an explicit `now`: the namespace quota, gang
//! groups, steering around busy nodes, and the reservations that commit a
//! choice. `/filter`, `/prioritize`, both kinds of `/bind` and `gpugate
//! simulate` all place pods through here, so that they give the same
//! answers on the same cluster.
//!
//! - [`judge`]: every candidate node's verdict for one pod;
//! - [`Verdict::priorities`]: `/prioritize`'s 0..=10 levels;
//! - [`reserve`]: the GPUs on the chosen node, held under the pod's UID.

pub mod defrag;
pub mod gang;
pub mod pod;
pub mod preemption;
pub mod quota;
pub mod reason;
pub mod reserve;
pub mod scheduler_checks;
pub mod steering;
pub mod victims;
pub mod words;

use jiff::Timestamp;

use crate::cluster::ClusterView;
use crate::config::Config;
use crate::engine::NodePolicy;
use crate::engine::numa::NumaGrant;
use crate::engine::state::ranks_before;

pub use pod::PodToPlace;
pub use reason::{NodeReason, QuotaRefusal, ReasonCode, failure_notes};
pub use reserve::{ReserveError, assume, reserve};

/// A node that can hold the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Feasible {
    pub node: String,
    /// HAMi's node score before placement (0..=30).
    pub score: f64,
    /// The node policy's rank, with the NUMA score's for an aligned pod
    /// (0..=1, higher is better).
    pub rank: f64,
    /// The extender priority, 0..=10: the rank scaled.
    pub priority: u8,
    /// The NUMA zones of an aligned pod.
    pub numa: Option<NumaGrant>,
}

/// What the placement rules say of one pod on the candidate nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The pod asks for no GPU: every candidate will do.
    NoGpus,
    /// One reason holds for every candidate (the namespace quota, the
    /// pod's gang group).
    Everywhere(NodeReason),
    Nodes(NodeVerdicts),
}

/// The verdict on each candidate node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeVerdicts {
    /// Nodes that can hold the pod, in name order.
    pub feasible: Vec<Feasible>,
    /// The others, with why, in name order within each rule.
    pub rejected: Vec<(String, NodeReason)>,
    policy: NodePolicy,
}

impl NodeVerdicts {
    /// How the feasible nodes at positions `a` and `b` rank: highest rank
    /// first, then highest score for binpack and lowest for spread, then
    /// name (`feasible` is in name order).
    fn order(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let f = &self.feasible;
        let (ka, kb) = ((f[a].rank, f[a].score), (f[b].rank, f[b].score));
        if ranks_before(self.policy, ka, kb) {
            std::cmp::Ordering::Less
        } else if ranks_before(self.policy, kb, ka) {
            std::cmp::Ordering::Greater
        } else {
            a.cmp(&b)
        }
    }

    /// The best node: the first in [`Self::order`].
    pub fn best(&self) -> Option<&Feasible> {
        (0..self.feasible.len())
            .min_by(|&a, &b| self.order(a, b))
            .map(|i| &self.feasible[i])
    }

    /// The positions in `feasible` of the `k` nodes that rank first, best
    /// first, in [`Self::order`]: `filterMode: top`'s offer. In time
    /// linear in the feasible nodes (5,000 at scale), not a sort of them
    /// all.
    pub fn top_indices(&self, k: usize) -> Vec<usize> {
        let order = |&a: &usize, &b: &usize| self.order(a, b);
        if k == 0 {
            return Vec::new();
        }
        let mut top: Vec<usize> = (0..self.feasible.len()).collect();
        if k < top.len() {
            top.select_nth_unstable_by(k - 1, order);
            top.truncate(k);
        }
        top.sort_by(order);
        top
    }

    /// The 0..=10 priority of each feasible node, sharpened at the top:
    /// the level is coarse (under binpack a node holding one slice and one
    /// holding five share one), and kube-scheduler breaks such ties with
    /// its own scores (LeastAllocated: the emptier node), so a burst
    /// spread over many nodes. The node the policy ranks best keeps its
    /// level; the others of that level go one below.
    pub fn priorities(&self) -> impl Iterator<Item = (&str, u8)> {
        let best = self.best().map(|b| ((b.rank, b.score), b.priority));
        self.feasible.iter().map(move |f| {
            let level = match best {
                Some((at, top)) if f.priority == top && (f.rank, f.score) != at && top > 0 => {
                    top - 1
                }
                _ => f.priority,
            };
            (f.node.as_str(), level)
        })
    }
}

/// Judges `pod` on the `candidates` (every node of the view when `None`)
/// at `now`: the namespace quota and its gang group first (a reason that
/// holds for every node), then the engine's verdict on each node, a gang
/// member narrowed to the node its group's placement gives it, and busy
/// nodes set aside while others can hold the pod.
pub fn judge(
    view: &ClusterView,
    config: &Config,
    pod: &PodToPlace,
    candidates: Option<&[String]>,
    now: Timestamp,
) -> Verdict {
    let plan = &pod.plan;
    if !plan.request.has_gpus() {
        return Verdict::NoGpus;
    }
    if plan.numa.guaranteed && view.node_topologies_listing() {
        return Verdict::Everywhere(NodeReason::NumaTopologiesListing);
    }
    let namespace_quota = quota::of_pod(view, config, pod.namespace(), &pod.scope, &pod.plan);
    let judged = match quota::check_request(&namespace_quota, plan)
        .map_err(NodeReason::Quota)
        .and_then(|()| gang::judge(view, config, pod, candidates))
    {
        Ok(judged) => judged,
        Err(reason) => return Verdict::Everywhere(reason),
    };
    // A replacement of a pod defragmentation moved is judged with its
    // held place free, and sent there when it fits there.
    let destination = match (&judged.node, pod.gang()) {
        (None, Ok(None)) => defrag::held_destination(view, pod),
        _ => None,
    };
    let judged = match &destination {
        Some((key, _)) if view.destination_held(key) => {
            // A copy without the pods' allocations (evaluation reads only
            // the nodes' usage): a few ms at 5,000 nodes, not a whole copy.
            let mut state = match judged.state {
                std::borrow::Cow::Owned(s) => s,
                std::borrow::Cow::Borrowed(s) => s.copy_for_moves(std::iter::empty()),
            };
            state.remove_hold(key);
            gang::Judged {
                state: std::borrow::Cow::Owned(state),
                node: None,
            }
        }
        _ => judged,
    };
    let mut eval = judged.state.evaluate(plan, candidates);
    let mut rejected: Vec<(String, NodeReason)> = Vec::new();
    // Every feasible node but `place` set aside, with the reason.
    let mut keep_only =
        |eval: &mut crate::engine::state::Evaluation<'_>, place: &str, why: NodeReason| {
            for f in eval.feasible.iter().filter(|f| f.node != place) {
                rejected.push((f.node.to_string(), why.clone()));
            }
            eval.retain_feasible(|f| f.node == place);
        };
    if let Some((_, place)) = &destination
        && eval.feasible.iter().any(|f| f.node == place)
    {
        let why = NodeReason::MoveDestination {
            node: place.clone(),
        };
        keep_only(&mut eval, place, why);
    }
    if let Some(place) = &judged.node {
        // A group still being placed: this member goes where the group's
        // placement puts it, so that the rest still fit.
        let why = NodeReason::GangPlacement {
            node: place.clone(),
        };
        keep_only(&mut eval, place, why);
    }
    if config.scheduler.node_lock.enabled {
        // A lock kept past its expiry for a holder that waits for its
        // device plugin: no bind there can take it.
        for lock in view.locks_awaiting_allocation(now, crate::cluster::lock::rules(config)) {
            if eval.feasible.iter().any(|f| f.node == lock.node) {
                eval.retain_feasible(|f| f.node != lock.node);
                let node = lock.node.clone();
                let lock = Box::new(lock);
                rejected.push((node, NodeReason::NodeLockAwaitingAllocation { lock, now }));
            }
        }
    }
    if let Some(busy) = steering::busy_nodes(
        view,
        config,
        plan.node_policy,
        eval.feasible.iter().map(|f| f.node),
        now,
    ) {
        let set_aside: std::collections::HashSet<&str, foldhash::fast::RandomState> =
            busy.iter().map(|(n, _)| *n).collect();
        eval.retain_feasible(|f| !set_aside.contains(f.node));
        for (node, busy) in busy {
            rejected.push((node.to_string(), NodeReason::NodeLockBusy(busy)));
        }
    }
    rejected.extend(
        eval.rejected
            .into_iter()
            .map(|(node, r)| (node, NodeReason::Engine(r))),
    );
    Verdict::Nodes(NodeVerdicts {
        feasible: eval
            .feasible
            .iter()
            .map(|f| Feasible {
                node: f.node.to_string(),
                score: f.score,
                rank: f.rank,
                priority: f.priority,
                numa: f.numa.clone(),
            })
            .collect(),
        rejected,
        policy: plan.node_policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(cpu_request: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p"},
            "spec": {"containers": [{"name": "c", "resources": {
                "limits": {"cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "1"},
                "requests": {"cpu": cpu_request, "memory": "1Gi"}}}]},
        }))
        .unwrap()
    }

    /// `top_indices(k)` is the first `k` of every feasible node ordered as
    /// `best` picks (rank, then the policy on the score, then name), for
    /// every `k`, under both policies.
    #[test]
    fn top_is_the_first_of_best_order() {
        // (name, rank, score) in name order, as `feasible` is: ties in
        // rank and in both.
        let nodes = [
            ("n0", 0.9, 3.0),
            ("n1", 0.5, 12.0),
            ("n2", 0.5, 10.0),
            ("n3", 0.9, 3.0),
            ("n4", 0.1, 0.0),
            ("n5", 0.5, 10.0),
        ];
        for (policy, expected) in [
            (NodePolicy::Binpack, ["n0", "n3", "n1", "n2", "n5", "n4"]),
            (NodePolicy::Spread, ["n0", "n3", "n2", "n5", "n1", "n4"]),
        ] {
            let verdicts = NodeVerdicts {
                feasible: nodes
                    .iter()
                    .map(|(node, rank, score)| Feasible {
                        node: node.to_string(),
                        score: *score,
                        rank: *rank,
                        priority: 5,
                        numa: None,
                    })
                    .collect(),
                rejected: Vec::new(),
                policy,
            };
            assert_eq!(verdicts.best().unwrap().node, expected[0], "{policy}");
            for k in 0..=nodes.len() + 1 {
                let top: Vec<&str> = verdicts
                    .top_indices(k)
                    .into_iter()
                    .map(|i| verdicts.feasible[i].node.as_str())
                    .collect();
                assert_eq!(top, expected[..k.min(nodes.len())], "{policy}, k = {k}");
            }
        }
    }

    /// While NodeResourceTopology objects are being listed, a Guaranteed
    /// pod is refused everywhere (which nodes align it is unknown); a
    /// Burstable one is judged as usual.
    #[test]
    fn guaranteed_pods_wait_for_the_topologies_list() {
        let config = Config::default();
        let mut view = ClusterView::new();
        view.set_node_topologies_served(true);
        let now = Timestamp::now();
        let verdict = |view: &ClusterView, p: &Pod| {
            let p = PodToPlace::read(p.clone(), &config, view).unwrap();
            judge(view, &config, &p, None, now)
        };
        let guaranteed = pod("4");
        assert_eq!(
            verdict(&view, &guaranteed),
            Verdict::Everywhere(NodeReason::NumaTopologiesListing)
        );
        assert!(matches!(verdict(&view, &pod("1")), Verdict::Nodes(_)));
        view.node_topologies_listed();
        assert!(matches!(verdict(&view, &guaranteed), Verdict::Nodes(_)));
    }
}
