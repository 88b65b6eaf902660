//! How a container's several devices must sit together on a node, for the
//! kinds whose device plugin needs it (`devices::Grouping`; hami-vendors.md
//! 2.5, 8.5, 10.5): Ascend 910 NPUs from the largest network group (one
//! HCCS ring) first, Ascend 910C NPUs by whole cards of two, Kunlunxin
//! cards on an eight-card board's wings and links, AWS Neuron devices in
//! windows of consecutive idle ones.
//!
//! The fitting devices are first put in the GPU policy's order (binpack:
//! the fullest first; spread: the emptiest first; then the lowest index),
//! and the rule takes from that order, so that among groups of one size
//! and within a group the policy decides. HAMi breaks those ties by Go
//! map order, which is random (2.7); gpugate's choice is the same every
//! time.

use crate::devices::Grouping;

use super::device::{Node, Usage};
use super::policy::{GpuPolicy, ScoringWeights, device_score};
use super::reason::Reason;

/// Chooses `n` of `candidates` (node positions with what each takes)
/// under `grouping`: their indexes into `candidates`, or, when the rule
/// cannot take `n`, the reason and how many devices it counts.
pub fn choose(
    node: &Node,
    usage: &[Usage],
    candidates: &[(usize, Usage)],
    n: usize,
    grouping: Grouping,
    (policy, weights): (GpuPolicy, ScoringWeights),
) -> Result<Vec<usize>, (Reason, u32)> {
    let mut ranked: Vec<(f64, usize)> = candidates
        .iter()
        .enumerate()
        .map(|(c, (pos, take))| {
            let used = usage.get(*pos).copied().unwrap_or_default();
            let score = device_score(&node.gpus[*pos].capacity, &used, take, weights);
            (
                if policy == GpuPolicy::Binpack {
                    -score
                } else {
                    score
                },
                c,
            )
        })
        .collect();
    // Candidates are in index order: a stable sort keeps the lowest first.
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let order: Vec<usize> = ranked.into_iter().map(|(_, c)| c).collect();
    let gpu = |c: usize| &node.gpus[candidates[c].0];
    match grouping {
        Grouping::Any => Ok(order.into_iter().take(n).collect()),
        Grouping::NetworkGroups => {
            // HAMi groups only when every device says its group (2.5).
            if n <= 1 || order.iter().any(|&c| gpu(c).network().is_none()) {
                return Ok(order.into_iter().take(n).collect());
            }
            let mut groups = grouped(&order, |c| u32::from(gpu(c).network().unwrap_or_default()));
            // Largest first; among equals, the one the policy reached first.
            groups.sort_by_key(|(_, members)| std::cmp::Reverse(members.len()));
            Ok(groups.into_iter().flat_map(|(_, m)| m).take(n).collect())
        }
        Grouping::CardPairs => {
            let cards = grouped(&order, |c| gpu(c).index / 2);
            let mut taken = Vec::with_capacity(n);
            for (_, members) in cards.into_iter().filter(|(_, m)| m.len() == 2) {
                if taken.len() >= n {
                    break;
                }
                taken.extend(members);
            }
            if taken.len() == n {
                Ok(taken)
            } else {
                let took = u32::try_from(taken.len()).unwrap_or(u32::MAX);
                Err((Reason::AllocatedCardsInsufficientRequest, took))
            }
        }
        Grouping::Windows => {
            // Idle devices by index (HAMi: by place in its list, where
            // every Neuron device scores 0; 10.5 and 10.7).
            let idle: std::collections::BTreeMap<u32, usize> = (0..candidates.len())
                .filter(|&c| usage.get(candidates[c].0).is_none_or(|u| u.slots == 0))
                .map(|c| (gpu(c).index, c))
                .collect();
            // Devices on a ring share a network group (cluster::convert).
            let ring = order.first().is_some_and(|&c| gpu(c).network().is_some());
            let step = if ring {
                1
            } else if matches!(n, 4 | 8 | 16) {
                n as u32
            } else {
                return Err((Reason::NumaNotFit, 1));
            };
            let last = idle.keys().next_back().copied().unwrap_or(0);
            let mut start = 0u32;
            while start.saturating_add(n as u32) <= last.saturating_add(1) {
                let window: Option<Vec<usize>> = (start..start + n as u32)
                    .map(|i| idle.get(&i).copied())
                    .collect();
                if let Some(w) = window {
                    return Ok(w);
                }
                start += step;
            }
            Err((Reason::NumaNotFit, 1))
        }
        Grouping::Board8 => {
            // Boards of eight by index (HAMi assumes one; 8.5), each tried
            // in turn; on a board, the fitting cards by position 0..8 in
            // the policy's order.
            let boards: std::collections::BTreeSet<u32> =
                order.iter().map(|&c| gpu(c).index / 8).collect();
            for board in boards {
                let mut at: [Option<usize>; 8] = [None; 8];
                for &c in &order {
                    let index = gpu(c).index;
                    if index / 8 == board && at[(index % 8) as usize].is_none() {
                        at[(index % 8) as usize] = Some(c);
                    }
                }
                if let Some(chosen) = board_pick(&at, &order, n, |c| gpu(c).index % 8) {
                    return Ok(chosen);
                }
            }
            Err((Reason::NumaNotFit, 1))
        }
    }
}

/// `order` split by `key`, each group in `order`'s order, the groups in
/// the order their first members come.
fn grouped(order: &[usize], key: impl Fn(usize) -> u32) -> Vec<(u32, Vec<usize>)> {
    let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
    for &c in order {
        let k = key(c);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(c),
            None => groups.push((k, vec![c])),
        }
    }
    groups
}

/// Kunlun's eight-card rule on one board (hami-vendors.md 8.5), by card
/// position (gpugate reads positions as indexes; HAMi as places in its
/// sorted list, 8.8): `at[p]` is the fitting candidate at position `p`.
fn board_pick(
    at: &[Option<usize>; 8],
    order: &[usize],
    n: usize,
    position: impl Fn(usize) -> u32,
) -> Option<Vec<usize>> {
    let fits = |p: usize| at[p].is_some();
    let take = |ps: &[usize]| -> Option<Vec<usize>> { ps.iter().map(|&p| at[p]).collect() };
    match n {
        8 => take(&[0, 1, 2, 3, 4, 5, 6, 7]),
        1 | 2 | 4 => {
            // A wing whose fitting cards number exactly `num`, trying the
            // tightest first (1 tries 1, 3, 2, 4; HAMi's order), left wing
            // before right: its first `n` in the policy's order.
            let nums: &[usize] = match n {
                1 => &[1, 3, 2, 4],
                2 => &[2, 3, 4],
                _ => &[4],
            };
            for &num in nums {
                for wing in [0..4u32, 4..8u32] {
                    let in_wing: Vec<usize> = order
                        .iter()
                        .copied()
                        .filter(|&c| at[position(c) as usize] == Some(c))
                        .filter(|&c| wing.contains(&position(c)))
                        .collect();
                    if in_wing.len() == num {
                        return Some(in_wing.into_iter().take(n).collect());
                    }
                }
            }
            // Across the wings, over the links (8.5, `interconnect`).
            match n {
                2 => [[0, 4], [1, 5], [2, 6], [3, 7]]
                    .iter()
                    .find(|pair| pair.iter().all(|&p| fits(p)))
                    .and_then(|pair| take(pair)),
                4 => {
                    const GROUPS: [[usize; 4]; 6] = [
                        [0, 1, 4, 5],
                        [2, 3, 6, 7],
                        [0, 2, 4, 6],
                        [1, 3, 5, 7],
                        [0, 3, 4, 7],
                        [1, 2, 5, 6],
                    ];
                    let free: Vec<&[usize; 4]> = GROUPS
                        .iter()
                        .filter(|g| g.iter().all(|&p| fits(p)))
                        .collect();
                    let fitting = (0..8).filter(|&p| fits(p)).count();
                    // With six fitting, prefer a group that leaves a linked
                    // pair (across, or in one wing) for a later pod.
                    let linked = |a: usize, b: usize| a / 4 == b / 4 || a.abs_diff(b) == 4;
                    let best = if fitting == 6 {
                        free.iter()
                            .find(|g| {
                                let rest: Vec<usize> =
                                    (0..8).filter(|&p| fits(p) && !g.contains(&p)).collect();
                                rest.len() == 2 && linked(rest[0], rest[1])
                            })
                            .or(free.last())
                    } else {
                        free.first()
                    };
                    best.and_then(|g| take(&g[..]))
                }
                _ => None,
            }
        }
        _ => None,
    }
}
