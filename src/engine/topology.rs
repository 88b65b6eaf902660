//! Topology-aware GPU choice over a node's pairwise scores (higher = better
//! connected, e.g. NVLink), as hami-compat.md 5.4.3 describes:
//! - one GPU: the candidate with the lowest sum of scores to the other
//!   candidates, which keeps the best-connected GPUs free for larger pods;
//! - N GPUs: the set with the highest sum of scores over its pairs.
//!
//! Ties go to the candidate listed first (for sets: the lexicographically
//! smallest list of positions in the candidates' order). The fit lists
//! candidates least used first (HAMi's device score), then by index, so
//! that equal sets go to the least-used GPUs as in HAMi.
//!
//! The set search is a depth-first branch and bound in lexicographic order,
//! seeded with a greedy answer. A branch is cut when even the best
//! conceivable completion (each remaining pick adds its largest gain towards
//! the GPUs already chosen, and every remaining pair the largest pair score)
//! cannot beat the best set so far. The search is exact unless it needs more
//! than [`SEARCH_BUDGET`] steps; then it returns the best set found, which is
//! never worse than the greedy one.

/// Most search steps (partial sets visited) per choice.
pub const SEARCH_BUDGET: usize = 20_000;

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

/// Chooses `n` of `candidates` (device positions, in the order ties go).
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
    Some(branch_and_bound(candidates, n, &score))
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

/// State of the depth-first search over candidate indexes `0..m`.
struct Search<'a> {
    m: usize,
    n: usize,
    /// `pair[i * m + j]`: score between candidates i and j.
    pair: &'a [i64],
    max_pair: i64,
    /// `gain[c]`: sum of c's scores towards the chosen candidates.
    gain: Vec<i64>,
    chosen: Vec<usize>,
    best: Vec<usize>,
    best_sum: i64,
    /// The best set is still the greedy seed: an equal sum found in
    /// lexicographic order may replace it (it is not lexicographically later).
    best_is_seed: bool,
    steps: usize,
    gains: Vec<i64>,
}

impl Search<'_> {
    fn run(&mut self, start: usize, sum: i64) {
        if self.steps >= SEARCH_BUDGET {
            return;
        }
        self.steps += 1;
        let r = self.n - self.chosen.len();
        if r == 0 {
            if sum > self.best_sum || (sum == self.best_sum && self.best_is_seed) {
                self.best_sum = sum;
                self.best.clone_from(&self.chosen);
                self.best_is_seed = false;
            }
            return;
        }
        if self.m - start < r {
            return;
        }
        // Bound: the r largest gains towards the chosen set, plus every pair
        // among the r picks at the largest pair score.
        self.gains.clear();
        self.gains.extend_from_slice(&self.gain[start..]);
        self.gains.sort_unstable_by(|a, b| b.cmp(a));
        let pairs_left = (r * (r - 1) / 2) as i64;
        let bound = sum + self.gains[..r].iter().sum::<i64>() + pairs_left * self.max_pair;
        if bound < self.best_sum || (bound == self.best_sum && !self.best_is_seed) {
            return;
        }
        for c in start..=self.m - r {
            let add = self.gain[c];
            self.chosen.push(c);
            for j in 0..self.m {
                self.gain[j] += self.pair[c * self.m + j];
            }
            self.run(c + 1, sum + add);
            for j in 0..self.m {
                self.gain[j] -= self.pair[c * self.m + j];
            }
            self.chosen.pop();
            if self.steps >= SEARCH_BUDGET {
                return;
            }
        }
    }
}

fn branch_and_bound(
    candidates: &[usize],
    n: usize,
    score: &impl Fn(usize, usize) -> i64,
) -> Vec<usize> {
    let m = candidates.len();
    let mut pair = vec![0i64; m * m];
    let mut max_pair = i64::MIN;
    for i in 0..m {
        for j in 0..m {
            if i != j {
                let s = score(candidates[i], candidates[j]);
                pair[i * m + j] = s;
                max_pair = max_pair.max(s);
            }
        }
    }
    // A greedy seed prunes well but costs a little; small searches start
    // from the first set in lexicographic order instead.
    let seed = if binomial(m, n) > 256 {
        greedy(candidates, n, score)
    } else {
        candidates[..n].to_vec()
    };
    let seed_idx: Vec<usize> = seed
        .iter()
        .filter_map(|p| candidates.iter().position(|c| c == p))
        .collect();
    let mut search = Search {
        m,
        n,
        pair: &pair,
        max_pair,
        gain: vec![0; m],
        chosen: Vec::with_capacity(n),
        best_sum: set_score(&seed, score),
        best: seed_idx,
        best_is_seed: true,
        steps: 0,
        gains: Vec::with_capacity(m),
    };
    search.run(0, 0);
    search.best.iter().map(|&i| candidates[i]).collect()
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
    fn finds_an_obvious_clique_on_a_large_node() {
        // 64 GPUs; GPUs 40..48 are fully NVLinked, everything else weak.
        let cands: Vec<usize> = (0..64).collect();
        let score = |a: usize, b: usize| {
            if (40..48).contains(&a) && (40..48).contains(&b) {
                600
            } else {
                10
            }
        };
        assert!(binomial(64, 8) > SEARCH_BUDGET as u64);
        assert_eq!(choose(&cands, 8, score), Some((40..48).collect()));
    }

    #[test]
    fn uniform_scores_take_the_lowest_indexes() {
        let cands: Vec<usize> = (0..16).collect();
        assert_eq!(choose(&cands, 8, |_, _| 600), Some((0..8).collect()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]

        /// Past 256 sets the search starts from the greedy answer; it must
        /// still find the lexicographically first best set.
        #[test]
        fn greedy_seeded_search_is_exact(
            scores in proptest::collection::vec(proptest::prop_oneof![0i64..50, proptest::strategy::Just(20i64)], 144),
        ) {
            let s = |a: usize, b: usize| scores[a.min(b) * 12 + a.max(b)];
            let cands: Vec<usize> = (0..12).collect();
            proptest::prop_assert!(binomial(12, 6) > 256);
            let best = choose(&cands, 6, s).unwrap();
            let mut sets: Vec<Vec<usize>> = (0u32..4096)
                .filter(|m| m.count_ones() == 6)
                .map(|m| (0..12).filter(|i| m & (1 << i) != 0).collect())
                .collect();
            sets.sort();
            let first_max = sets.iter().max_by(|a, b| set_score(a, s).cmp(&set_score(b, s)).then(b.cmp(a))).unwrap();
            proptest::prop_assert_eq!(&best, first_max);
        }
    }

    proptest::proptest! {
        /// The exact search really returns a maximum.
        #[test]
        fn search_is_exact_and_lexicographically_first(
            scores in proptest::collection::vec(proptest::prop_oneof![0i64..300, proptest::strategy::Just(100i64)], 81),
            n in 2usize..8,
        ) {
            let s = |a: usize, b: usize| scores[a.min(b) * 9 + a.max(b)];
            let cands: Vec<usize> = (0..9).collect();
            let best = choose(&cands, n, s).unwrap();
            let best_sum = set_score(&best, s);
            // brute force over bitmasks, in lexicographic order of index lists
            let mut sets: Vec<Vec<usize>> = (0u32..512)
                .filter(|m| m.count_ones() as usize == n)
                .map(|m| (0..9).filter(|i| m & (1 << i) != 0).collect())
                .collect();
            sets.sort();
            let first_max = sets.iter().max_by(|a, b| set_score(a, s).cmp(&set_score(b, s)).then(b.cmp(a))).unwrap();
            proptest::prop_assert_eq!(best_sum, set_score(first_max, s));
            proptest::prop_assert_eq!(&best, first_max);
        }
    }
}
