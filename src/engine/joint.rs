//! Joint placement of a pod's GPU containers on one node, for when the
//! container-by-container pass fails.
//!
//! The pass in [`super::fit`] gives each container, in pod order, the GPUs
//! its policy prefers, and never revisits a choice. With two or more GPU
//! containers that can reject a node on which a valid assignment exists:
//! GPU 0 has 10 GiB free and GPU 1 has 20 GiB; under `spread` a first
//! container of 8 GiB takes GPU 1, and a second of 15 GiB then fits
//! nowhere, although 8 GiB on GPU 0 and 15 GiB on GPU 1 would do.
//!
//! The search here tries every container's possible GPU sets in turn,
//! depth first, with the same per-GPU checks (and the same usage rules:
//! sidecars and app containers add up, an init container runs beside what
//! started before it), so a node is rejected only when no assignment exists.
//! It is exact unless it needs more than [`JOINT_BUDGET`] steps (GPU sets
//! tried) on the node, or the evaluation of all nodes has spent
//! [`JOINT_TOTAL_BUDGET`]; then the node is rejected with the first pass's
//! reasons. So one pod with many GPU containers that fits nowhere costs a
//! bounded amount per filter, however large the cluster. HAMi places
//! containers greedily, one by one, and has no such search. On MIG GPUs a
//! container may take several instances of one GPU, in the search as in
//! the first pass.

use super::checks::ZoneRule;
use super::checks::check_gpu;
use super::device::{Node, Usage};
use super::lifecycle::ContainerKind;
use super::plan::PodPlan;
use super::request::GpuRequest;

/// Most GPU sets tried per pod and node.
pub const JOINT_BUDGET: usize = 2_000;

/// Most GPU sets tried per pod over one evaluation of every node.
pub const JOINT_TOTAL_BUDGET: usize = 100_000;

/// One container's share of the answer: (container index, GPU position,
/// what it takes).
pub type Grant = (usize, usize, Usage);

/// An assignment of GPUs to every GPU container of `plan` on `node` that
/// passes every check and each container's zone rule (`rules[i]` for
/// container `i`; none means any GPU), or `None` when there is none (or
/// `budget` steps ran out first); and the steps spent.
pub fn assign_jointly(
    node: &Node,
    plan: &PodPlan,
    rules: &[ZoneRule],
    budget: usize,
) -> (Option<Vec<Grant>>, usize) {
    let containers: Vec<(usize, &GpuRequest, ContainerKind, ZoneRule)> = plan
        .request
        .containers
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let rule = rules.get(i).copied().unwrap_or_default();
            let gpu = c.gpu.as_ref().filter(|_| rule != ZoneRule::Skip)?;
            Some((i, gpu, c.kind, rule))
        })
        .collect();
    // A container that cannot be placed even on the node's own usage
    // cannot be placed beside others (every check only gets harder as
    // usage grows): no search.
    let hopeless = containers.iter().any(|&(_, req, _, rule)| {
        candidates(node, &node.usage, req, plan, rule).len() < req.count as usize
    });
    if hopeless {
        return (None, 0);
    }
    let mut search = Search {
        node,
        plan,
        containers,
        usage: node.usage.clone(),
        grants: Vec::new(),
        steps: 0,
        budget,
    };
    let found = search.from(0);
    (found.then_some(search.grants), search.steps.min(budget))
}

struct Search<'a> {
    node: &'a Node,
    plan: &'a PodPlan,
    containers: Vec<(usize, &'a GpuRequest, ContainerKind, ZoneRule)>,
    /// The node's usage plus the sidecars and app containers chosen so far.
    usage: Vec<Usage>,
    grants: Vec<Grant>,
    steps: usize,
    budget: usize,
}

impl Search<'_> {
    /// Whether containers `k..` can all be given GPUs on top of the
    /// choices so far (kept in `grants` when they can).
    fn from(&mut self, k: usize) -> bool {
        let Some(&(container, req, kind, rule)) = self.containers.get(k) else {
            return true;
        };
        let n = req.count as usize;
        let candidates = candidates(self.node, &self.usage, req, self.plan, rule);
        if candidates.len() < n {
            return false;
        }
        // Index combinations of `n` of the candidates, in lexicographic order.
        let mut pick: Vec<usize> = (0..n).collect();
        loop {
            self.steps += 1;
            if self.steps > self.budget {
                return false;
            }
            let one_numa = pick
                .windows(2)
                .all(|w| self.numa(candidates[w[0]].0) == self.numa(candidates[w[1]].0));
            // A GPU's later instance was chosen beside its earlier ones:
            // a set with it and without the one before it is a set of the
            // same GPUs already tried.
            let stacked_in_order = pick.iter().all(|&i| {
                i == 0 || candidates[i - 1].0 != candidates[i].0 || pick.contains(&(i - 1))
            });
            if stacked_in_order && (!self.plan.selection.numa_bind || one_numa) {
                let mark = self.grants.len();
                // An init container's GPUs are free again when it ends: the
                // next containers see the usage without them.
                let adds_up = kind != ContainerKind::Init;
                let mut before = Vec::with_capacity(n);
                for &i in &pick {
                    let (pos, take) = candidates[i];
                    if adds_up && let Some(u) = self.usage.get_mut(pos) {
                        before.push((pos, *u));
                        u.add(&take);
                    }
                    self.grants.push((container, pos, take));
                }
                if self.from(k + 1) {
                    return true;
                }
                // Last first: a GPU given two instances was saved twice,
                // and its first saved usage is the one to put back.
                for (pos, u) in before.into_iter().rev() {
                    self.usage[pos] = u;
                }
                self.grants.truncate(mark);
                // Whichever GPUs an init container takes, the next
                // containers see the same usage: one try is enough.
                if !adds_up {
                    return false;
                }
            }
            if !next_combination(&mut pick, candidates.len()) {
                return false;
            }
        }
    }

    fn numa(&self, pos: usize) -> i32 {
        self.node.gpus[pos].numa
    }
}

/// What a container may take of each GPU on `usage`, by GPU: its share of
/// every GPU that passes the checks and, on a MIG GPU, further instances
/// of it (each chosen beside the ones before it, up to the container's
/// count), right after its first. A container may take several instances
/// of one MIG GPU (HAMi v2.10, PR #2724), so a combination of these may
/// stack them: any subset of one GPU's instances fits on it, as they do
/// not overlap. Grouped by GPU, the search tries stacking on the first
/// GPUs first, as HAMi's `Fit` takes instances of a MIG GPU until it has
/// enough or the GPU has no more.
fn candidates(
    node: &Node,
    usage: &[Usage],
    req: &GpuRequest,
    plan: &PodPlan,
    rule: ZoneRule,
) -> Vec<(usize, Usage)> {
    let mut out = Vec::new();
    for (pos, gpu) in node.gpus.iter().enumerate() {
        if !rule.allows(gpu) {
            continue;
        }
        let mut used = usage.get(pos).copied().unwrap_or_default();
        let mut taken = 0;
        while taken < req.count.max(1) {
            match check_gpu(gpu, &used, req, &plan.selection, plan.gpu_policy.is_mutex()) {
                Ok(take) => {
                    out.push((pos, take));
                    used.add(&take);
                    taken += 1;
                }
                Err(_) => break,
            }
            if !gpu.is_mig() {
                break;
            }
        }
    }
    out
}

/// The next `pick.len()`-combination of `0..m` in lexicographic order;
/// false after the last.
pub fn next_combination(pick: &mut [usize], m: usize) -> bool {
    let n = pick.len();
    let Some(i) = (0..n).rev().find(|&i| pick[i] < m - n + i) else {
        return false;
    };
    pick[i] += 1;
    for j in i + 1..n {
        pick[j] = pick[j - 1] + 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::Gpu;
    use crate::engine::fit::{Scratch, fit_pod};
    use crate::engine::policy::{GpuPolicy, NodePolicy};
    use crate::engine::request::{ContainerRequest, Memory, PodRequest};

    /// `containers` app containers of one whole GPU each.
    fn whole_gpus(containers: usize) -> PodPlan {
        let c = |i: usize| ContainerRequest {
            name: format!("c{i}"),
            kind: ContainerKind::App,
            gpu: Some(GpuRequest {
                count: 1,
                memory: Memory::Mib(1000),
                cores: 100,
            }),
        };
        PodPlan::new(
            PodRequest {
                device_kind: Default::default(),
                also: Vec::new(),
                containers: (0..containers).map(c).collect(),
            },
            NodePolicy::Binpack,
            GpuPolicy::Spread,
        )
    }

    fn node(gpus: u32) -> Node {
        let cap = Usage {
            slices: 0,
            unreserved: 0,
            unreadable: 0,
            slots: 10,
            mem_mib: 40960,
            cores: 100,
        };
        Node::new(
            "n",
            (0..gpus)
                .map(|i| Gpu::new(format!("GPU-{i}"), i, "NVIDIA A100", cap))
                .collect(),
        )
    }

    /// Nine whole-GPU containers on eight GPUs: no assignment, and the
    /// search gives up within its budget instead of trying 8^8 sets.
    #[test]
    fn the_search_stops_at_its_budget() {
        let (found, spent) = assign_jointly(&node(8), &whole_gpus(9), &[], JOINT_BUDGET);
        assert!(found.is_none());
        assert_eq!(spent, JOINT_BUDGET);
        // Eight fit, one per GPU.
        let (found, _) = assign_jointly(&node(8), &whole_gpus(8), &[], JOINT_BUDGET);
        assert_eq!(found.map(|g| g.len()), Some(8));
        // Over many nodes, one scratch spends at most the total budget.
        let n = node(8);
        let mut scratch = Scratch::default();
        for _ in 0..200 {
            assert!(fit_pod(&n, &whole_gpus(9), &mut scratch).is_err());
        }
        assert_eq!(scratch.joint_spent, JOINT_TOTAL_BUDGET);
    }

    #[test]
    fn combinations_in_lexicographic_order() {
        let mut pick = vec![0, 1];
        let mut all = vec![pick.clone()];
        while next_combination(&mut pick, 4) {
            all.push(pick.clone());
        }
        assert_eq!(
            all,
            [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]].map(|p| p.to_vec())
        );
        let mut none: Vec<usize> = vec![];
        assert!(!next_combination(&mut none, 3));
    }
}
