//! Topology-aware GPU choice over a node's pairwise scores (higher = better
//! connected, e.g. NVLink), as hami-compat.md 5.4.3 describes:
//! - one GPU: the candidate with the lowest sum of scores to the other
//!   candidates, which keeps the best-connected GPUs free for larger pods;
//! - N GPUs: the set with the highest sum of scores over its pairs.
//!
//! Ties go to the lowest device index (for sets: the lexicographically
//! smallest list of indexes). The exact search enumerates all sets when there
//! are at most [`EXACT_LIMIT`] of them (every node with up to 16 GPUs);
//! beyond that a greedy build plus single-swap improvement keeps the cost
//! bounded.

/// Most sets enumerated exactly; C(16, 8) = 12,870 fits.
pub const EXACT_LIMIT: u64 = 20_000;

/// Bounded rounds of swap improvement in the greedy search.
const MAX_SWAP_ROUNDS: usize = 32;

/// Number of k-subsets of n, saturating.
pub fn binomial(n: usize, k: usize) -> u64 {
    if k > n {
        return 0;
    }
    let k = k.min(n - k) as u64;
    let mut acc: u64 = 1;
    for i in 0..k {
        // acc * (n - i) / (i + 1) is exact at every step.
        acc = match acc.checked_mul(n as u64 - i) {
            Some(v) => v / (i + 1),
            None => return u64::MAX,
        };
    }
    acc
}

/// Chooses `n` of `candidates` (device positions in ascending index order).
/// `score(a, b)` is the pair score of two positions. Returns `None` when
/// there are fewer than `n` candidates.
pub fn choose(
    candidates: &[usize],
    n: usize,
    score: impl Fn(usize, usize) -> i64,
) -> Option<Vec<usize>> {
    if n == 0 {
        return Some(Vec::new());
    }
    if candidates.len() < n {
        return None;
    }
    if candidates.len() == n {
        return Some(candidates.to_vec());
    }
    if n == 1 {
        let mut best: Option<(i64, usize)> = None;
        for &c in candidates {
            let sum: i64 = candidates
                .iter()
                .filter(|&&o| o != c)
                .map(|&o| score(c, o))
                .sum();
            if best.is_none_or(|(s, _)| sum < s) {
                best = Some((sum, c));
            }
        }
        return best.map(|(_, c)| vec![c]);
    }
    if binomial(candidates.len(), n) <= EXACT_LIMIT {
        Some(exact(candidates, n, &score))
    } else {
        Some(greedy(candidates, n, &score))
    }
}

/// Sum of pair scores of a set of positions.
pub fn set_score(set: &[usize], score: impl Fn(usize, usize) -> i64) -> i64 {
    let mut sum = 0;
    for (i, &a) in set.iter().enumerate() {
        for &b in &set[i + 1..] {
            sum += score(a, b);
        }
    }
    sum
}

/// All n-subsets in lexicographic order; the first best wins.
fn exact(candidates: &[usize], n: usize, score: &impl Fn(usize, usize) -> i64) -> Vec<usize> {
    let m = candidates.len();
    let mut idx: Vec<usize> = (0..n).collect();
    let mut best_sum = i64::MIN;
    let mut best = Vec::new();
    let mut set = vec![0; n];
    loop {
        for (slot, &i) in set.iter_mut().zip(&idx) {
            *slot = candidates[i];
        }
        let s = set_score(&set, score);
        if s > best_sum {
            best_sum = s;
            best.clone_from(&set);
        }
        // Next combination.
        let Some(pos) = (0..n).rev().find(|&p| idx[p] != p + m - n) else {
            return best;
        };
        idx[pos] += 1;
        for p in pos + 1..n {
            idx[p] = idx[p - 1] + 1;
        }
    }
}

/// Best pair, then repeatedly the candidate adding the most; then swaps that
/// strictly improve, for a bounded number of rounds.
fn greedy(candidates: &[usize], n: usize, score: &impl Fn(usize, usize) -> i64) -> Vec<usize> {
    let mut best_pair = (i64::MIN, 0, 1);
    for i in 0..candidates.len() {
        for j in i + 1..candidates.len() {
            let s = score(candidates[i], candidates[j]);
            if s > best_pair.0 {
                best_pair = (s, i, j);
            }
        }
    }
    let mut chosen = vec![best_pair.1, best_pair.2];
    let gain = |set: &[usize], c: usize| -> i64 {
        set.iter()
            .map(|&o| score(candidates[c], candidates[o]))
            .sum()
    };
    while chosen.len() < n {
        let mut pick: Option<(i64, usize)> = None;
        for c in 0..candidates.len() {
            if chosen.contains(&c) {
                continue;
            }
            let g = gain(&chosen, c);
            if pick.is_none_or(|(bg, _)| g > bg) {
                pick = Some((g, c));
            }
        }
        match pick {
            Some((_, c)) => chosen.push(c),
            None => break,
        }
    }
    for _ in 0..MAX_SWAP_ROUNDS {
        let mut improved = false;
        for slot in 0..chosen.len() {
            let others: Vec<usize> = chosen
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != slot)
                .map(|(_, &c)| c)
                .collect();
            let current = gain(&others, chosen[slot]);
            for c in 0..candidates.len() {
                if chosen.contains(&c) {
                    continue;
                }
                if gain(&others, c) > current {
                    chosen[slot] = c;
                    improved = true;
                    break;
                }
            }
        }
        if !improved {
            break;
        }
    }
    chosen.sort_unstable();
    chosen.into_iter().map(|i| candidates[i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HAMi's design example: 0-1 100, 0-2 100, 0-3 200, 1-2 200, 1-3 100, 2-3 200.
    fn example(a: usize, b: usize) -> i64 {
        match (a.min(b), a.max(b)) {
            (0, 1) | (0, 2) | (1, 3) => 100,
            (0, 3) | (1, 2) | (2, 3) => 200,
            _ => 0,
        }
    }

    #[test]
    fn hami_example_one_gpu_takes_the_least_connected() {
        // sums: gpu0 400, gpu1 400, gpu2 500, gpu3 500 -> gpu0 (lowest index of the tie)
        assert_eq!(choose(&[0, 1, 2, 3], 1, example), Some(vec![0]));
        assert_eq!(choose(&[1, 2, 3], 1, example), Some(vec![1]));
    }

    #[test]
    fn hami_example_three_gpus_take_a_best_set() {
        // {1,2,3} and {0,2,3} both sum 500; the lexicographically first wins.
        let set = choose(&[0, 1, 2, 3], 3, example).unwrap();
        assert_eq!(set, vec![0, 2, 3]);
        assert_eq!(set_score(&set, example), 500);
        assert_eq!(set_score(&[1, 2, 3], example), 500);
    }

    #[test]
    fn edge_cases() {
        assert_eq!(choose(&[0, 1], 3, example), None);
        assert_eq!(choose(&[2, 3], 2, example), Some(vec![2, 3]));
        assert_eq!(choose(&[2, 3], 0, example), Some(vec![]));
        assert_eq!(binomial(16, 8), 12_870);
        assert_eq!(binomial(4, 5), 0);
        assert_eq!(binomial(200, 100), u64::MAX);
    }

    #[test]
    fn greedy_finds_an_obvious_clique_on_a_large_node() {
        // 64 GPUs; GPUs 40..48 are fully NVLinked, everything else weak.
        let cands: Vec<usize> = (0..64).collect();
        let score = |a: usize, b: usize| {
            if (40..48).contains(&a) && (40..48).contains(&b) {
                600
            } else {
                10
            }
        };
        assert!(binomial(64, 8) > EXACT_LIMIT);
        assert_eq!(choose(&cands, 8, score), Some((40..48).collect()));
    }

    proptest::proptest! {
        /// The exact search really returns a maximum.
        #[test]
        fn exact_is_optimal(scores in proptest::collection::vec(0i64..300, 36), n in 2usize..6) {
            let s = |a: usize, b: usize| scores[a.min(b) * 6 + a.max(b)];
            let cands: Vec<usize> = (0..6).collect();
            let best = choose(&cands, n, s).unwrap();
            let best_sum = set_score(&best, s);
            // brute force over bitmasks
            for mask in 0u32..64 {
                if mask.count_ones() as usize == n {
                    let set: Vec<usize> = (0..6).filter(|i| mask & (1 << i) != 0).collect();
                    proptest::prop_assert!(set_score(&set, s) <= best_sum);
                }
            }
        }
    }
}
