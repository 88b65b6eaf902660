//! Defragmentation's search: for a pod that fits on none of its nodes only
//! because the free GPU is scattered, the fewest movable pods whose going
//! lets it fit on one node while every one of them fits elsewhere at the
//! same time (a move, never a kill). Pure and deterministic: the state,
//! the pods the caller allows to move and two rules in, a plan out.
//!
//! The search goes by the number of moves, 1 to `max_moves`. For a size
//! `k`, every target node (one of the pod's, where it fits once all its
//! movable pods are gone) and every set of its movable pods (`t` of them,
//! `k` first) after whose going the pod fits there is tried, with `k - t`
//! movable pods of other nodes that free room for the first ones'
//! replacements (a chain). A set is valid when it breaks no
//! PodDisruptionBudget, the pod is placed on the target, and each moved
//! pod is then placed, in key order, on a node other than its own:
//! every node is tried for each (depth first), so a set is found valid
//! whenever some choice of destinations makes it so. Of the valid sets of
//! the smallest size, the one moving the lowest priorities (highest, then
//! sum), then the least recently moved, then the lowest keys wins.
//!
//! The work is bounded by `budget`, counted in node fits (an evaluation of
//! every node counts each): when it runs out, the best plan found at that
//! size is the answer (still the fewest moves, since every smaller size
//! was searched through), or none.

use super::joint::next_combination;
use super::state::ranks_before;
use super::{Allocation, ClusterState, PodPlan};

/// A pod the search may move: the caller has checked that it may (its
/// namespace opted in, a controller recreates it, its priority is not
/// above the pending pod's, it was not moved too recently, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Movable {
    /// Its key in the state (the pod's UID).
    pub key: String,
    /// The node it runs on now.
    pub node: String,
    /// Its replacement's plan: the same pod, created again.
    pub plan: PodPlan,
    pub priority: i32,
    /// When it last moved (Unix seconds): when it was created, as a moved
    /// pod's replacement is a new pod.
    pub since: i64,
}

/// What else a plan must respect.
pub struct Rules<'r> {
    /// Plans of more moves are not searched.
    pub max_moves: usize,
    /// Node fits tried at most (see the module's doc).
    pub budget: u64,
    /// Whether evicting these pods (keys) together breaks a
    /// PodDisruptionBudget.
    pub breaks_budget: &'r dyn Fn(&[&str]) -> bool,
    /// Whether the movable pod's replacement may land on the node (its own
    /// node is never offered): kube-scheduler's own filters.
    pub may_land: &'r dyn Fn(&Movable, &str) -> bool,
    /// Asked as the budget is spent: true stops the search as if the
    /// budget ran out (the caller's clock; the search itself reads none).
    pub stop: &'r dyn Fn() -> bool,
}

/// One pod moved: evicted from `from`, its replacement placed on `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub key: String,
    pub from: String,
    pub to: String,
    /// The replacement's GPUs on `to`.
    pub allocation: Allocation,
}

/// Where the pending pod goes once `moves` are made.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub node: String,
    pub allocation: Allocation,
    /// In the order they were placed (key order).
    pub moves: Vec<Move>,
}

/// What the search came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// The pod fits on one of its nodes now: nothing to move.
    FitsNow,
    Found(Plan),
    /// No plan of at most `max_moves` moves: `exhaustive` when every set
    /// was tried, not when the budget ran out first.
    NoPlan {
        exhaustive: bool,
    },
}

/// Key in the state of the pending pod while a set is tried.
const PENDING_KEY: &str = "defrag/pending";

/// The search for `pending`, which may go to `nodes` (every node when
/// `None`), moving some of `movable`, on `state` (changed while it runs
/// and given back as it was: a copy, [`ClusterState::copy_for_moves`] of
/// the movable pods' keys, is enough).
pub fn search(
    state: &mut ClusterState,
    pending: &PodPlan,
    nodes: Option<&[String]>,
    movable: &[Movable],
    rules: &Rules<'_>,
) -> Search {
    search_spending(state, pending, nodes, movable, rules).0
}

/// [`search`], and the node fits it spent.
fn search_spending(
    state: &mut ClusterState,
    pending: &PodPlan,
    nodes: Option<&[String]>,
    movable: &[Movable],
    rules: &Rules<'_>,
) -> (Search, u64) {
    if state.evaluate(pending, nodes).best().is_some() {
        return (Search::FitsNow, 0);
    }
    let mut s = Searcher {
        work: state,
        pending,
        movable,
        rules,
        spent: 0,
        out_of_budget: false,
    };
    let found = s.run(nodes);
    (found, s.spent)
}

impl Searcher<'_, '_> {
    fn run(&mut self, nodes: Option<&[String]>) -> Search {
        let (movable, rules) = (self.movable, self.rules);
        let s = self;
        // Preference order: lowest priority, least recently moved, key.
        let mut order: Vec<usize> = (0..movable.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&movable[a], &movable[b]);
            (x.priority, x.since, &x.key).cmp(&(y.priority, y.since, &y.key))
        });
        let allowed = |node: &str| nodes.is_none_or(|ns| ns.iter().any(|n| n == node));
        // Targets: the pod's nodes where it fits once every movable pod there
        // is gone, in name order, each with its movable pods.
        let mut by_node: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for &i in &order {
            let node = movable[i].node.as_str();
            if allowed(node) {
                by_node.entry(node).or_default().push(i);
            }
        }
        let mut targets: Vec<(&str, Vec<usize>)> = by_node.into_iter().collect();
        targets.retain(|(node, on)| s.fits_without(node, on));
        let is_target: std::collections::HashSet<&str> = targets.iter().map(|(n, _)| *n).collect();
        if s.out_of_budget {
            return Search::NoPlan { exhaustive: false };
        }
        // One move: the first valid in preference order is the best one.
        if rules.max_moves >= 1 {
            for &i in &order {
                let node = movable[i].node.as_str();
                if !is_target.contains(node) {
                    continue;
                }
                if s.fits_without(node, &[i])
                    && let Some(plan) = s.try_set(node, &[i])
                {
                    return Search::Found(plan);
                }
                if s.out_of_budget {
                    return Search::NoPlan { exhaustive: false };
                }
            }
        }
        for k in 2..=rules.max_moves.min(movable.len()) {
            let mut best: Option<(Preference, Plan)> = None;
            'sizes: for t in (1..=k).rev() {
                for (node, on) in &targets {
                    if on.len() < t {
                        continue;
                    }
                    let others: Vec<usize> = order
                        .iter()
                        .copied()
                        .filter(|&i| movable[i].node != *node)
                        .collect();
                    if others.len() < k - t {
                        continue;
                    }
                    let mut pick: Vec<usize> = (0..t).collect();
                    loop {
                        let first: Vec<usize> = pick.iter().map(|&p| on[p]).collect();
                        if s.fits_without(node, &first) {
                            s.try_chains(node, &first, &others, k - t, &mut best);
                        }
                        if s.out_of_budget {
                            break 'sizes;
                        }
                        if !next_combination(&mut pick, on.len()) {
                            break;
                        }
                    }
                }
            }
            if let Some((_, plan)) = best {
                return Search::Found(plan);
            }
            if s.out_of_budget {
                return Search::NoPlan { exhaustive: false };
            }
        }
        Search::NoPlan { exhaustive: true }
    }
}

/// A gang's plan: where each member goes, and the moves that make room.
#[derive(Debug, Clone, PartialEq)]
pub struct GangPlan {
    /// Each member's place, by its key, once the moves are made.
    pub places: Vec<(String, Allocation)>,
    /// Every move of the plan, in the order they were found.
    pub moves: Vec<Move>,
}

/// What the search for a gang came to.
#[derive(Debug, Clone, PartialEq)]
pub enum GangSearch {
    /// Every member fits now: nothing to move.
    FitsNow,
    Found(GangPlan),
    /// Some member found no plan within what is left of `max_moves`:
    /// `exhaustive` when every set was tried for it.
    NoPlan {
        exhaustive: bool,
    },
}

/// The search for a gang whose members must all be placed at once
/// (`pending[i]` among `candidates[i]`, every node when `None` or
/// missing): the members are placed largest first
/// ([`super::gang::placing_order`], the order of
/// [`super::gang::place_gang`]), each on the best node under its policy
/// where it fits; a member that fits nowhere gets a [`search`] on the
/// state as the members before it and the moves found for them left it,
/// among the movable pods not moved yet, within the moves left of
/// `rules.max_moves` and the node fits left of `rules.budget`. Greedy
/// (one member after the other, never revisited): a plan is valid, not
/// always the smallest. `state` is given back as it was.
pub fn search_gang(
    state: &mut ClusterState,
    pending: &[(String, PodPlan)],
    candidates: &[Option<&[String]>],
    movable: &[Movable],
    rules: &Rules<'_>,
) -> GangSearch {
    let mut places: Vec<(String, Allocation)> = Vec::new();
    let mut moves: Vec<Move> = Vec::new();
    // What was taken out of `state` (the moved pods), to put back.
    let mut removed: Vec<(String, Allocation)> = Vec::new();
    let mut spent = 0u64;
    let mut outcome = None;
    for i in super::gang::placing_order(pending.iter().map(|(_, p)| p)) {
        let (key, plan) = &pending[i];
        let nodes = candidates.get(i).copied().flatten();
        let best = state
            .evaluate(plan, nodes)
            .best()
            .map(|f| f.node.to_string());
        if let Some(node) = best
            && let Ok(allocation) = state.assign(plan, &node)
            && state.apply_hold(key, allocation.clone()).is_ok()
        {
            places.push((key.clone(), allocation));
            continue;
        }
        let left: Vec<Movable> = movable
            .iter()
            .filter(|m| !moves.iter().any(|x| x.key == m.key))
            .cloned()
            .collect();
        // A PodDisruptionBudget counts every pod the gang's plan moves, not
        // only the set tried for this member.
        let chosen: Vec<&str> = moves.iter().map(|m| m.key.as_str()).collect();
        let breaks = |keys: &[&str]| {
            let all: Vec<&str> = chosen.iter().chain(keys).copied().collect();
            (rules.breaks_budget)(&all)
        };
        let sub = Rules {
            max_moves: rules.max_moves.saturating_sub(moves.len()),
            budget: rules.budget.saturating_sub(spent),
            breaks_budget: &breaks,
            ..*rules
        };
        let (found, used) = search_spending(state, plan, nodes, &left, &sub);
        spent = spent.saturating_add(used);
        // (FitsNow cannot come: the member fit nowhere just above, unless
        // its assignment failed; either way no plan.)
        let Search::Found(p) = found else {
            outcome = Some(GangSearch::NoPlan {
                exhaustive: matches!(found, Search::NoPlan { exhaustive: true }),
            });
            break;
        };
        // The moves made in the state, the member placed: what the next
        // members are placed on.
        let mut applied = true;
        for m in &p.moves {
            if let Some(a) = state.remove(&m.key) {
                removed.push((m.key.clone(), a));
            }
            applied &= state
                .apply_hold(&move_key(&m.key), m.allocation.clone())
                .is_ok();
        }
        applied &= state.apply_hold(key, p.allocation.clone()).is_ok();
        places.push((key.clone(), p.allocation));
        moves.extend(p.moves);
        if !applied {
            outcome = Some(GangSearch::NoPlan { exhaustive: false });
            break;
        }
    }
    for (key, _) in &places {
        state.remove_hold(key);
    }
    for m in &moves {
        state.remove_hold(&move_key(&m.key));
    }
    for (key, allocation) in removed {
        // Put back exactly what was removed: cannot fail.
        let _ = state.apply(&key, allocation);
    }
    match outcome {
        Some(o) => o,
        None if moves.is_empty() => GangSearch::FitsNow,
        None => GangSearch::Found(GangPlan { places, moves }),
    }
}

/// How a valid set ranks among those of its size (lower is better).
type Preference = (i32, i64, i64, Vec<String>);

struct Searcher<'a, 'r> {
    /// The state the sets are tried on; every try leaves it as it was.
    work: &'a mut ClusterState,
    pending: &'a PodPlan,
    movable: &'a [Movable],
    rules: &'a Rules<'r>,
    /// Node fits counted so far.
    spent: u64,
    out_of_budget: bool,
}

impl Searcher<'_, '_> {
    /// Counts `fits` node fits; false (and out of budget) past the budget.
    fn spend(&mut self, fits: u64) -> bool {
        self.spent += fits;
        if self.spent > self.rules.budget || (self.rules.stop)() {
            self.out_of_budget = true;
        }
        !self.out_of_budget
    }

    /// Whether the pending pod fits on `node` with the movable pods `gone`
    /// (counted as one fit per GPU of the node: a pod of many GPUs tries
    /// many sets of them).
    fn fits_without(&mut self, node: &str, gone: &[usize]) -> bool {
        let gpus = self.work.node(node).map_or(1, |n| n.gpus.len().max(1)) as u64;
        if !self.spend(gpus) {
            return false;
        }
        let removed: Vec<(&str, &Allocation)> = gone
            .iter()
            .filter_map(|&i| {
                let key = self.movable[i].key.as_str();
                Some((key, self.work.allocation(key)?))
            })
            .collect();
        self.work.fit_without(self.pending, node, &removed).is_ok()
    }

    /// The set `first` (on `node`) with every choice of `extra` further
    /// pods from `others`, each tried; the best valid one kept in `best`.
    fn try_chains(
        &mut self,
        node: &str,
        first: &[usize],
        others: &[usize],
        extra: usize,
        best: &mut Option<(Preference, Plan)>,
    ) {
        let mut pick: Vec<usize> = (0..extra).collect();
        loop {
            let mut set = first.to_vec();
            set.extend(pick.iter().map(|&p| others[p]));
            if let Some(plan) = self.try_set(node, &set) {
                let pref = self.preference(&set);
                if best.as_ref().is_none_or(|(b, _)| pref < *b) {
                    *best = Some((pref, plan));
                }
            }
            if self.out_of_budget || extra == 0 || !next_combination(&mut pick, others.len()) {
                return;
            }
        }
    }

    fn preference(&self, set: &[usize]) -> Preference {
        let pods = set.iter().map(|&i| &self.movable[i]);
        let mut keys: Vec<String> = pods.clone().map(|m| m.key.clone()).collect();
        keys.sort();
        (
            pods.clone().map(|m| m.priority).max().unwrap_or(0),
            pods.clone().map(|m| i64::from(m.priority)).sum(),
            pods.map(|m| m.since).max().unwrap_or(0),
            keys,
        )
    }

    /// Whether moving `set` lets the pending pod onto `node`, and where
    /// each moved pod goes then.
    fn try_set(&mut self, node: &str, set: &[usize]) -> Option<Plan> {
        let keys: Vec<&str> = set.iter().map(|&i| self.movable[i].key.as_str()).collect();
        if (self.rules.breaks_budget)(&keys) || !self.spend(1) {
            return None;
        }
        let removed: Vec<(String, Allocation)> = set
            .iter()
            .filter_map(|&i| {
                let key = &self.movable[i].key;
                Some((key.clone(), self.work.remove(key)?))
            })
            .collect();
        let mut in_key_order = set.to_vec();
        in_key_order.sort_by(|&a, &b| self.movable[a].key.cmp(&self.movable[b].key));
        let plan = self.place_pending(node, &in_key_order);
        for (key, allocation) in removed {
            // Put back exactly what was removed: cannot fail.
            let _ = self.work.apply(&key, allocation);
        }
        plan
    }

    fn place_pending(&mut self, node: &str, set: &[usize]) -> Option<Plan> {
        let allocation = self.work.assign(self.pending, node).ok()?;
        self.work.apply(PENDING_KEY, allocation.clone()).ok()?;
        let mut moves = Vec::with_capacity(set.len());
        let placed = self.place_moved(set, &mut moves);
        for m in &moves {
            self.work.remove(&move_key(&m.key));
        }
        self.work.remove(PENDING_KEY);
        placed.then(|| Plan {
            node: node.to_string(),
            allocation,
            moves,
        })
    }

    /// Places the moved pods `set[moves.len()..]` depth first, each on
    /// every node it may land on, best ranked first; whether all were.
    /// On success `moves` holds every placement (left applied in the
    /// work state for the caller to remove).
    fn place_moved(&mut self, set: &[usize], moves: &mut Vec<Move>) -> bool {
        let Some(&i) = set.get(moves.len()) else {
            return true;
        };
        let m = &self.movable[i];
        if !self.spend(self.work.nodes().count() as u64) {
            return false;
        }
        let eval = self.work.evaluate(&m.plan, None);
        let mut nodes: Vec<(String, f64, f64)> = eval
            .feasible
            .iter()
            .filter(|f| f.node != m.node && (self.rules.may_land)(m, f.node))
            .map(|f| (f.node.to_string(), f.rank, f.score))
            .collect();
        drop(eval);
        let policy = m.plan.node_policy;
        nodes.sort_by(|a, b| {
            if ranks_before(policy, (a.1, a.2), (b.1, b.2)) {
                std::cmp::Ordering::Less
            } else if ranks_before(policy, (b.1, b.2), (a.1, a.2)) {
                std::cmp::Ordering::Greater
            } else {
                a.0.cmp(&b.0)
            }
        });
        for (to, ..) in nodes {
            if !self.spend(1) {
                return false;
            }
            let m = &self.movable[i];
            let Ok(allocation) = self.work.assign(&m.plan, &to) else {
                continue;
            };
            let key = move_key(&m.key);
            if self.work.apply(&key, allocation.clone()).is_err() {
                continue;
            }
            moves.push(Move {
                key: m.key.clone(),
                from: m.node.clone(),
                to,
                allocation,
            });
            if self.place_moved(set, moves) {
                return true;
            }
            moves.pop();
            self.work.remove(&key);
            if self.out_of_budget {
                return false;
            }
        }
        false
    }
}

/// Key in the state of a moved pod's replacement while a set is tried.
fn move_key(key: &str) -> String {
    format!("defrag/move/{key}")
}
