//! Preemption victims on one node, for `/preempt` and `gpugate explain`:
//! which pods must go together (a gang member only with its whole group),
//! and the fewest GPU holders below a priority whose going lets a pod fit.

use std::collections::HashSet;

use crate::cluster::ClusterView;
use crate::engine::joint::next_combination;
use crate::engine::{Allocation, ClusterState, PodPlan};

/// Further victims on a node, and how many PodDisruptionBudgets their
/// eviction breaks (after the victims already taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Victims {
    pub pods: Vec<String>,
    pub violations: u32,
}

/// With the pods `taken` gone from `node` (kube-scheduler's victims, each
/// with its gang group), the fewest further GPU holders there with a
/// priority below `below` whose going too lets the pod fit, lowest priority
/// first and breaking no PodDisruptionBudget where that can be; empty when
/// `taken` is enough, `None` when even every such holder is not.
pub fn gpu_victims(
    view: &ClusterView,
    plan: &PodPlan,
    node: &str,
    taken: &[String],
    below: i32,
) -> Option<Victims> {
    gpu_victims_on(view, view.state(), plan, node, taken, below)
}

/// [`gpu_victims`] on `state`, the view's state as a plan of several
/// evictions and placements has changed it (the pods it holds are the
/// holders there; the view says who they are).
pub fn gpu_victims_on(
    view: &ClusterView,
    state: &ClusterState,
    plan: &PodPlan,
    node: &str,
    taken: &[String],
    below: i32,
) -> Option<Victims> {
    let taken_set: HashSet<&str> = taken.iter().map(String::as_str).collect();
    let removed: Vec<(&str, &Allocation)> = taken
        .iter()
        .filter_map(|uid| Some((uid.as_str(), gpu_allocation_on(state, uid, node)?)))
        .collect();
    // Further GPU holders on the node that the preemptor may evict, a gang
    // group as one unit with all its members: pods the view holds, bound
    // and settled (not a plan's own placements, nor a bind or assumption
    // in flight, nor a pending pod with annotations a failed bind left),
    // and not evicted already for a pod gpugate preempted for (their GPUs
    // are promised).
    let mut extra: Vec<Unit> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    for (uid, _) in state.allocations() {
        if taken_set.contains(uid)
            || seen.contains(uid)
            || view.held_allocation(uid).is_none()
            || view.is_reserved(uid)
            || !view.held_bound(uid)
            || view.is_nominated_victim(uid)
            || gpu_allocation_on(state, uid, node).is_none()
        {
            continue;
        }
        let Some(members) = victim_unit(view, uid, node, below) else {
            continue;
        };
        seen.extend(members.iter().cloned());
        let priority = members
            .iter()
            .map(|m| view.held_priority(m).unwrap_or(0))
            .max()
            .unwrap_or(0);
        let pods: Vec<(String, Option<&Allocation>)> = members
            .into_iter()
            .map(|m| {
                let a = gpu_allocation_on(state, &m, node);
                (m, a)
            })
            .collect();
        extra.push(Unit { priority, pods });
    }
    // Lowest priority first, single pods before groups, then by UID, so
    // the answer is stable.
    extra.sort_by(|x, y| {
        (x.priority, x.pods.len(), &x.pods[0].0).cmp(&(y.priority, y.pods.len(), &y.pods[0].0))
    });
    fewest_extra(view, state, plan, node, (taken, &removed), &extra)
}

/// Pods evicted together: one pod, or every bound member of a gang group.
struct Unit<'v> {
    /// The highest priority among them.
    priority: i32,
    /// UIDs, with the GPUs each holds on the node.
    pods: Vec<(String, Option<&'v Allocation>)>,
}

/// The pods that must go if `uid` goes from `node`: itself, or, for a
/// gang member, every bound member of its group. `None` when that cannot
/// happen here: a member is bound to another node, or a priority is not
/// below the preemptor's.
pub fn victim_unit(view: &ClusterView, uid: &str, node: &str, below: i32) -> Option<Vec<String>> {
    let Some(group) = view.gang_of(uid) else {
        // (A pod gpugate does not hold, such as kube-scheduler's CPU-only
        // victim, has no priority known here: kube-scheduler chose it.)
        let lower = view.held_priority(uid).is_none_or(|p| p < below);
        return lower.then(|| vec![uid.to_string()]);
    };
    let members = view.gang_members(group)?;
    let mut unit = Vec::new();
    for (member, pod) in members {
        let spec = pod.spec.as_ref();
        let Some(bound) = spec.and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        if bound != node || priority >= below {
            return None;
        }
        unit.push(member.clone());
    }
    if !unit.iter().any(|m| m == uid) {
        unit.push(uid.to_string());
    }
    Some(unit)
}

/// The pod's allocation in `state` when it holds at least one GPU on
/// `node`.
fn gpu_allocation_on<'s>(state: &'s ClusterState, uid: &str, node: &str) -> Option<&'s Allocation> {
    state
        .allocation(uid)
        .filter(|a| a.node == node && a.grant_count() > 0)
}

/// Sets of further victims up to this size are tried exhaustively.
const EXACT_SIZE: usize = 3;
/// Most sets tried exhaustively per node; beyond, the greedy pass.
const EXACT_BUDGET: usize = 20_000;

/// With `removed` gone, the fewest units of `extra` (lowest priority
/// first) whose removal too lets the pod fit, preferring sets that break
/// no PodDisruptionBudget as kube-scheduler does (it gives violating pods
/// back first); `None` when even all of them are not enough.
///
/// Every set of one, then two, then three units is tried; of the smallest
/// size where some set fits and breaks no budget, the set with the lowest
/// highest priority, then the lowest sum of priorities, is the answer. Past that size, or past the budget, units that break no budget
/// on their own are added before the others until the pod fits, and every
/// one it does not need is given back (highest first); the set breaking
/// fewer budgets wins, the exact search's on a tie.
fn fewest_extra(
    view: &ClusterView,
    state: &ClusterState,
    plan: &PodPlan,
    node: &str,
    (taken, removed): (&[String], &[(&str, &Allocation)]),
    extra: &[Unit<'_>],
) -> Option<Victims> {
    let fits = |added: &[usize]| {
        let mut gone: Vec<(&str, &Allocation)> = removed.to_vec();
        for &i in added {
            gone.extend(
                extra[i]
                    .pods
                    .iter()
                    .filter_map(|(uid, a)| Some((uid.as_str(), (*a)?))),
            );
        }
        state.fit_without(plan, node, &gone).is_ok()
    };
    let pods = |set: &[usize]| -> Vec<String> {
        set.iter()
            .flat_map(|&i| extra[i].pods.iter().map(|(uid, _)| uid.clone()))
            .collect()
    };
    // Budgets broken by the set's pods, evicted after `taken`.
    let breaks = |set: &[usize]| -> u32 {
        let mut uids: Vec<&str> = taken.iter().map(String::as_str).collect();
        let first = uids.len();
        for &i in set {
            uids.extend(extra[i].pods.iter().map(|(uid, _)| uid.as_str()));
        }
        let v = view.budget_violations(&uids);
        u32::try_from(v[first..].iter().filter(|b| **b).count()).unwrap_or(u32::MAX)
    };
    let answer = |set: &[usize], violations: u32| Victims {
        pods: pods(set),
        violations,
    };
    if fits(&[]) {
        return Some(answer(&[], 0));
    }
    // Among the sets of one size that fit: fewest budgets broken, then the
    // lowest highest priority, then the lowest sum (kube-scheduler's order
    // of candidates), then the first found.
    let rank = |set: &[usize], v: u32| -> (u32, i32, i64) {
        (
            v,
            set.iter().map(|&i| extra[i].priority).max().unwrap_or(0),
            set.iter().map(|&i| i64::from(extra[i].priority)).sum(),
        )
    };
    let mut best: Option<(u32, Vec<usize>)> = None;
    let mut tried = 0;
    for size in 1..=EXACT_SIZE.min(extra.len()) {
        let mut of_size: Option<((u32, i32, i64), Vec<usize>)> = None;
        let mut out_of_budget = false;
        let mut pick: Vec<usize> = (0..size).collect();
        loop {
            tried += 1;
            if tried > EXACT_BUDGET {
                out_of_budget = true;
                break;
            }
            if fits(&pick) {
                let r = rank(&pick, breaks(&pick));
                if of_size.as_ref().is_none_or(|(b, _)| r < *b) {
                    of_size = Some((r, pick.clone()));
                }
            }
            if !next_combination(&mut pick, extra.len()) {
                break;
            }
        }
        if let Some(((v, ..), set)) = of_size {
            if v == 0 {
                return Some(answer(&set, 0));
            }
            if best.as_ref().is_none_or(|(b, _)| v < *b) {
                best = Some((v, set));
            }
        }
        if out_of_budget {
            break;
        }
    }
    // Units that break no budget on their own first, each group in order.
    let mut order: Vec<usize> = (0..extra.len()).collect();
    order.sort_by_key(|&i| breaks(&[i]) > 0);
    let mut taken: Vec<usize> = Vec::new();
    let mut rest = order.into_iter();
    while !fits(&taken) {
        taken.push(rest.next()?);
    }
    let mut i = taken.len();
    while i > 0 {
        i -= 1;
        let without: Vec<usize> = taken
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, v)| *v)
            .collect();
        if fits(&without) {
            taken = without;
        }
    }
    let greedy = breaks(&taken);
    match best {
        Some((v, set)) if v <= greedy => Some(answer(&set, v)),
        _ => Some(answer(&taken, greedy)),
    }
}
