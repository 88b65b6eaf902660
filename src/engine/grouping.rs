//! How a container's several devices must sit together on a node, for the
//! kinds whose device plugin needs it (`devices::Grouping`; hami-vendors.md
//! 2.5): Ascend 910 NPUs from the largest network group (one HCCS ring)
//! first, Ascend 910C NPUs by whole cards of two.
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

/// Chooses `n` of `candidates` (node positions with what each takes)
/// under `grouping`: their indexes into `candidates`, or the number the
/// rule could take when it cannot take `n`.
pub fn choose(
    node: &Node,
    usage: &[Usage],
    candidates: &[(usize, Usage)],
    n: usize,
    grouping: Grouping,
    (policy, weights): (GpuPolicy, ScoringWeights),
) -> Result<Vec<usize>, usize> {
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
            let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
            for &c in &order {
                let id = gpu(c).network().unwrap_or_default();
                match groups.iter_mut().find(|(g, _)| *g == id) {
                    Some((_, members)) => members.push(c),
                    None => groups.push((id, vec![c])),
                }
            }
            // Largest first; among equals, the one the policy reached first.
            groups.sort_by_key(|(_, members)| std::cmp::Reverse(members.len()));
            Ok(groups.into_iter().flat_map(|(_, m)| m).take(n).collect())
        }
        Grouping::CardPairs => {
            let mut cards: Vec<(u32, Vec<usize>)> = Vec::new();
            for &c in &order {
                let card = gpu(c).index / 2;
                match cards.iter_mut().find(|(id, _)| *id == card) {
                    Some((_, members)) => members.push(c),
                    None => cards.push((card, vec![c])),
                }
            }
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
                Err(taken.len())
            }
        }
    }
}
