//! A kind's preference among the nodes that can hold a pod, from the
//! devices the pod would take on each (`devices::NodePreference`; HAMi's
//! vendor `ScoreNode`, hami-vendors.md 1.7): a number in 0..=1, higher
//! better, whatever the node policy. The evaluation ranks nodes by it
//! first and by the node policy among equals ([`prefer`]).
//!
//! HAMi adds a vendor's score to its node score raw, so a bonus meant to
//! help a node hurts it under `spread`, which keeps the lowest total; only
//! Metax's tables are read by the policy. gpugate's preference means the
//! same under both policies.

use std::collections::BTreeMap;

use crate::devices::{KindId, NodePreference};

use super::device::{Node, Usage};
use super::plan::PodPlan;
use super::policy::NodePolicy;
use super::size_tables::SizeTables;
use super::tenancy::AppClass;

/// The preference of `node` for a pod whose devices there are the
/// positions of `grants` (all its kinds, with what each takes), before
/// they are placed (the node's usage is without them): the rule of the
/// first of the pod's `plans` (its first kind, then the others) whose
/// kind has one decides. `None` when none has a rule, or the rule says
/// nothing of this pod; that depends on the pod alone, never on the node,
/// so that every node of one evaluation is ranked on one scale.
pub fn preference<'p>(
    node: &Node,
    plans: impl IntoIterator<Item = &'p PodPlan>,
    grants: &[(usize, usize, Usage)],
    policy: NodePolicy,
) -> Option<f64> {
    let plan = plans
        .into_iter()
        .find(|p| p.selection.kind.kind().node_preference != NodePreference::None)?;
    let kind = plan.selection.kind;
    let mine =
        |&&(_, pos, _): &&(usize, usize, Usage)| node.gpus.get(pos).is_some_and(|g| g.kind == kind);
    let taken = positions(grants.iter().filter(mine));
    match kind.kind().node_preference {
        NodePreference::None => None,
        NodePreference::Wings => Some(wings(node, kind, &taken)),
        NodePreference::SizeTables { .. } => {
            let n = u32::try_from(taken.len()).unwrap_or(u32::MAX);
            Some(tables(node.size_tables(kind), n, policy))
        }
        NodePreference::NetworkShare => {
            // A container of one device is in one group wherever it goes.
            let several = plan
                .request
                .containers
                .iter()
                .any(|c| c.gpu.is_some_and(|g| g.count > 1));
            several.then(|| network_share(node, grants.iter().filter(mine)))
        }
        NodePreference::Tenants { .. } => {
            // The devices a container takes whole (all 100 cores).
            let whole = positions(
                grants
                    .iter()
                    .filter(mine)
                    .filter(|(_, _, take)| take.cores >= 100),
            );
            tenants(node, kind, plan, &taken, &whole)
        }
    }
}

/// The node positions of `grants`, each once, in order.
fn positions<'g>(grants: impl Iterator<Item = &'g (usize, usize, Usage)>) -> Vec<usize> {
    let mut out: Vec<usize> = grants.map(|&(_, pos, _)| pos).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Kunlunxin's bubbles (hami-vendors.md 8.6) on the node's used cards
/// before and after the pod: per board of eight (by index), 1 when no card
/// is used, else each wing's (0-3, 4-7) count of used cards weighed
/// 4 → 0, 1 → 2, any other → 1. One bubble fewer is best (1.0), as many
/// 2/3, one more 1/3, two or more 0.
///
/// HAMi compares the used cards before the pod with the pod's own cards
/// alone, and adds the score raw; the comparison here is of the node
/// before and after, the same under both policies.
fn wings(node: &Node, kind: KindId, taken: &[usize]) -> f64 {
    let bubbles = |with_pod: bool| -> i64 {
        // Used cards per board: (board, [left, right]).
        let mut boards: BTreeMap<u32, [u32; 2]> = BTreeMap::new();
        for (pos, g) in node.gpus.iter().enumerate() {
            if g.kind != kind {
                continue;
            }
            let used = node.usage.get(pos).is_some_and(|u| u.slots > 0)
                || (with_pod && taken.binary_search(&pos).is_ok());
            let wings = boards.entry(g.index / 8).or_default();
            if used {
                wings[usize::from(g.index % 8 >= 4)] += 1;
            }
        }
        let weigh = |used: u32| match used {
            4 => 0,
            1 => 2,
            _ => 1,
        };
        boards
            .values()
            .map(|&[l, r]| if l + r == 0 { 1 } else { weigh(l) + weigh(r) })
            .sum()
    };
    match bubbles(true) - bubbles(false) {
        d if d <= -1 => 1.0,
        0 => 2.0 / 3.0,
        1 => 1.0 / 3.0,
        _ => 0.0,
    }
}

/// Metax's tables (hami-vendors.md 5.5) for a pod of `n` devices: under
/// binpack the loss, the lower the better (0 is 1.0, 1,000 is 0.5);
/// under spread the score, the higher the better (1,000 is 0.5). A node
/// without its table or without `n` in it is 0, after every node that has
/// one. (HAMi adds `2000 − losses[n]` or `2000 − scores[n]` raw, and 0 for
/// a node without them, which spread then prefers to all.)
fn tables(tables: Option<&SizeTables>, n: u32, policy: NodePolicy) -> f64 {
    let Some(t) = tables else {
        return 0.0;
    };
    match policy {
        NodePolicy::Binpack => t
            .losses
            .get(&n)
            .map_or(0.0, |&loss| 1000.0 / (1000.0 + loss.max(0) as f64)),
        NodePolicy::Spread => t.scores.get(&n).map_or(0.0, |&score| {
            let score = score.max(0) as f64;
            score / (score + 1000.0)
        }),
    }
}

/// Ascend 910's score (hami-vendors.md 2.5): per container of several
/// devices, the share of its devices in the network group most of them
/// are in, averaged over those containers (HAMi sums every container's,
/// × 10, raw); 0 when one of their devices has no group, as in HAMi.
fn network_share<'g>(node: &Node, grants: impl Iterator<Item = &'g (usize, usize, Usage)>) -> f64 {
    // (container, group) of each device taken.
    let mut taken: Vec<(usize, Option<u16>)> = grants
        .map(|&(c, pos, _)| (c, node.gpus.get(pos).and_then(|g| g.network())))
        .collect();
    taken.sort_unstable();
    let several: Vec<&[(usize, Option<u16>)]> = taken
        .chunk_by(|a, b| a.0 == b.0)
        .filter(|devices| devices.len() > 1)
        .collect();
    if several.is_empty()
        || several
            .iter()
            .flat_map(|d| d.iter())
            .any(|(_, g)| g.is_none())
    {
        return 0.0;
    }
    let shares = several.iter().map(|devices| {
        let most = devices
            .chunk_by(|a, b| a.1 == b.1)
            .map(<[_]>::len)
            .max()
            .unwrap_or(0);
        most as f64 / devices.len() as f64
    });
    shares.sum::<f64>() / several.len() as f64
}

/// Metax sGPU's score (hami-vendors.md 5.5), policy-neutral as in HAMi:
///
/// - a latency-sensitive (`online`) pod: per device it takes, −100 per
///   batch pod when the device runs only batch pods, else −20 per
///   latency-sensitive and −2 per batch pod; summed, 0 is 1.0 and −100 is
///   0.5;
/// - else a pod taking whole devices, with links on
///   (`PodPlan::links`): with `S(x)` 10 per pair of devices of `x` in
///   one network group (MetaLink zone), `10·S(taken) − (S(idle) −
///   S(taken) − S(idle but not taken))` over the devices idle before the
///   pod: links kept within the pod, less those it breaks; 0 is 0.5,
///   +100 is 0.75, −100 is 0.25 (`0.5 + atan(raw / 100) / π`);
/// - any other pod: none, the node policy alone.
fn tenants(
    node: &Node,
    kind: KindId,
    plan: &PodPlan,
    taken: &[usize],
    whole: &[usize],
) -> Option<f64> {
    if plan.selection.tenancy.class == AppClass::Online {
        let raw: i64 = taken
            .iter()
            .map(|&pos| {
                let t = node.tenants(pos);
                let (online, offline) = (i64::from(t.online), i64::from(t.offline));
                if offline > 0 && online == 0 {
                    -100 * offline
                } else {
                    -20 * online - 2 * offline
                }
            })
            .sum();
        return Some(100.0 / (100.0 - raw.min(0) as f64));
    }
    if whole.is_empty() || plan.links != Some(true) {
        return None;
    }
    let zone = |pos: usize| {
        node.gpus
            .get(pos)
            .and_then(|g| g.network())
            .filter(|z| *z > 0)
    };
    let links = |devices: &[usize]| -> i64 {
        let mut n = 0;
        for (i, &a) in devices.iter().enumerate() {
            for &b in &devices[i + 1..] {
                if zone(a).is_some() && zone(a) == zone(b) {
                    n += 10;
                }
            }
        }
        n
    };
    let idle: Vec<usize> = (0..node.gpus.len())
        .filter(|&pos| node.gpus[pos].kind == kind)
        .filter(|&pos| node.usage.get(pos).is_none_or(|u| u.slots == 0))
        .collect();
    let rest: Vec<usize> = idle
        .iter()
        .copied()
        .filter(|pos| whole.binary_search(pos).is_err())
        .collect();
    let kept = links(whole);
    let raw = 10 * kept - (links(&idle) - kept - links(&rest));
    Some(0.5 + (raw as f64 / 100.0).atan() / std::f64::consts::PI)
}

/// How finely a preference is told apart: preferences closer than one
/// part in a million rank as equal, and the node policy decides.
const LEVELS: f64 = 1_000_000.0;

/// A feasible node's rank with the kind's preference `p` ahead of its
/// rank by the node policy (`rank`, 0..=1): the preference first, the
/// policy's rank among equal preferences. In 0..=1.
pub fn prefer(p: f64, rank: f64) -> f64 {
    let level = (p.clamp(0.0, 1.0) * LEVELS).round();
    // Half the policy's rank, so that the best rank of one level stays
    // below the worst of the next.
    (level + rank.clamp(0.0, 1.0) / 2.0) / (LEVELS + 0.5)
}

/// The preference level (0 to a million) of a rank made by [`prefer`].
fn level_of(rank: f64) -> f64 {
    // The policy's half adds 0 to 0.5 to the level.
    (rank * (LEVELS + 0.5) - 0.25).round()
}

/// The extender priorities (0..=10) of the feasible nodes of one
/// evaluation ranked by [`prefer`], each given as its node policy's
/// priority: the nodes at the best preference keep the node policy's
/// order in the upper half (`5 + priority / 2`), the others go below in
/// the order of their preference (0..=4). So kube-scheduler, which adds
/// the priorities to its own scores, sees the preference first and the
/// node policy among the best, as gpugate ranks them.
pub fn band_priorities<T>(
    nodes: &mut [T],
    rank: impl Fn(&T) -> f64,
    priority: impl Fn(&mut T) -> &mut u8,
) {
    let best = nodes.iter().map(|n| level_of(rank(n))).fold(0.0, f64::max);
    for node in nodes {
        let level = level_of(rank(node));
        let priority = priority(node);
        *priority = if level >= best {
            5 + (*priority).min(10) / 2
        } else {
            // `level / best` is below 1, so this is 0..=4.
            (5.0 * level / best).floor().min(4.0) as u8
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_rank_under_binpack_and_scores_under_spread() {
        let t = SizeTables {
            losses: BTreeMap::from([(1, 0), (2, 1000)]),
            scores: BTreeMap::from([(1, 1000), (2, 3000)]),
        };
        assert_eq!(tables(Some(&t), 1, NodePolicy::Binpack), 1.0);
        assert_eq!(tables(Some(&t), 2, NodePolicy::Binpack), 0.5);
        assert_eq!(tables(Some(&t), 1, NodePolicy::Spread), 0.5);
        assert_eq!(tables(Some(&t), 2, NodePolicy::Spread), 0.75);
        // No entry for 4, or no table: after every node with one.
        assert_eq!(tables(Some(&t), 4, NodePolicy::Binpack), 0.0);
        assert_eq!(tables(None, 1, NodePolicy::Spread), 0.0);
        // A negative loss is none.
        let negative = SizeTables {
            losses: BTreeMap::from([(1, -50)]),
            scores: BTreeMap::new(),
        };
        assert_eq!(tables(Some(&negative), 1, NodePolicy::Binpack), 1.0);
    }

    #[test]
    fn the_preference_ranks_first_and_the_policy_among_equals() {
        // A better preference wins over any rank by the policy.
        assert!(prefer(0.500001, 0.0) > prefer(0.5, 1.0));
        // Equal preferences: the policy's rank decides.
        assert!(prefer(0.5, 0.7) > prefer(0.5, 0.6));
        assert_eq!(prefer(0.0, 0.0), 0.0);
        assert_eq!(prefer(1.0, 1.0), 1.0);
        // Out of range is clamped, never beyond 0..=1.
        assert_eq!(prefer(2.0, 2.0), prefer(1.0, 1.0));
        assert!(prefer(-1.0, -1.0) >= 0.0);
        // The level is read back from the rank, whatever the policy's.
        for (p, rank) in [
            (0.0, 0.0),
            (0.25, 1.0),
            (0.5, 0.0),
            (0.999999, 1.0),
            (1.0, 0.3),
        ] {
            assert_eq!(
                level_of(prefer(p, rank)),
                (p * LEVELS).round(),
                "{p} {rank}"
            );
        }
    }

    #[test]
    fn priorities_keep_the_policy_at_the_best_preference_and_the_preference_below() {
        // (preference, node policy's rank, node policy's priority)
        let nodes = [
            (1.0, 0.9, 9),
            (1.0, 0.2, 2),
            (0.5, 1.0, 10),
            (0.25, 1.0, 10),
            (0.0, 1.0, 10),
        ];
        let mut ranked: Vec<(f64, u8)> =
            nodes.iter().map(|&(p, r, pr)| (prefer(p, r), pr)).collect();
        band_priorities(&mut ranked, |n| n.0, |n| &mut n.1);
        let priorities: Vec<u8> = ranked.iter().map(|(_, p)| *p).collect();
        assert_eq!(priorities, [9, 6, 2, 1, 0]);
        // Every node at one preference: the node policy's order, halved.
        let mut same: Vec<(f64, u8)> = [(0.0, 0), (0.0, 10)]
            .iter()
            .map(|&(r, p)| (prefer(0.4, r), p))
            .collect();
        band_priorities(&mut same, |n| n.0, |n| &mut n.1);
        assert_eq!((same[0].1, same[1].1), (5, 10));
        // No preference anywhere (all 0): all at the best.
        let mut none: Vec<(f64, u8)> = vec![(prefer(0.0, 0.5), 4)];
        band_priorities(&mut none, |n| n.0, |n| &mut n.1);
        assert_eq!(none[0].1, 7);
    }
}
