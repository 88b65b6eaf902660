//! HAMi v2.10's GPU policy chains: `binpack,numa`, `spread,numa`, bare
//! `numa` (hami-compat.md 6.2).
//!
//! A policy that contains a comma, or is exactly `numa`, is a chain of sort
//! keys read in the order written: `binpack` (fullest GPU first), `spread`
//! (emptiest first), `numa` (highest NUMA id first). A key written twice
//! counts once. `mutex` and `topology-aware` in a chain are no sort keys;
//! they keep their meaning as rules (`mutex`: only unused GPUs;
//! `topology-aware`: choose by pair scores). A chain without a sort key
//! sorts as `spread`. GPUs equal under every key go highest device index
//! first.
//!
//! Why "highest NUMA id" and "highest index": HAMi sorts the GPUs
//! ascending by these keys and then tries them from the end of the list, so
//! the GPU it tries first is the greatest under the keys. gpugate places
//! chained pods as HAMi does, because a chain is how a HAMi user spells a
//! precise order; the single-name policies keep gpugate's own, documented
//! tie rule (lowest index first).

use std::cmp::Ordering;
use std::fmt;

/// One word of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainWord {
    Binpack,
    Spread,
    Numa,
    Mutex,
    TopologyAware,
}

impl ChainWord {
    const BY_NAME: [(&'static str, ChainWord); 5] = [
        ("binpack", ChainWord::Binpack),
        ("spread", ChainWord::Spread),
        ("numa", ChainWord::Numa),
        ("mutex", ChainWord::Mutex),
        ("topology-aware", ChainWord::TopologyAware),
    ];

    fn parse(word: &str) -> Option<Self> {
        Self::BY_NAME
            .iter()
            .find(|(name, _)| *name == word)
            .map(|(_, w)| *w)
    }

    pub fn as_str(self) -> &'static str {
        Self::BY_NAME
            .iter()
            .find(|(_, w)| *w == self)
            .map_or("", |(name, _)| name)
    }

    fn is_sort_key(self) -> bool {
        matches!(
            self,
            ChainWord::Binpack | ChainWord::Spread | ChainWord::Numa
        )
    }
}

/// Why a chain cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("empty word in the chain")]
    EmptyWord,
    #[error("{0:?} is not a chain word")]
    UnknownWord(String),
}

/// A GPU policy chain, its words deduplicated in the order written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SortChain {
    words: [Option<ChainWord>; 5],
}

/// What the chain compares of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainCandidate {
    /// HAMi's device score (fuller is higher).
    pub score: f64,
    pub numa: i32,
    pub index: u32,
}

impl SortChain {
    /// Whether `policy` is a chain in HAMi's sense: it has a comma or is
    /// exactly `numa`.
    pub fn is_chain(policy: &str) -> bool {
        policy.contains(',') || policy.trim() == "numa"
    }

    /// Reads a chain; every word must be known, none empty.
    pub fn parse(policy: &str) -> Result<Self, ChainError> {
        let mut words = [None; 5];
        let mut len = 0;
        for word in policy.split(',').map(str::trim) {
            if word.is_empty() {
                return Err(ChainError::EmptyWord);
            }
            let w = ChainWord::parse(word).ok_or_else(|| ChainError::UnknownWord(word.into()))?;
            if !words[..len].contains(&Some(w)) {
                words[len] = Some(w);
                len += 1;
            }
        }
        Ok(SortChain { words })
    }

    fn words(&self) -> impl Iterator<Item = ChainWord> + '_ {
        self.words.iter().map_while(|w| *w)
    }

    fn has(&self, word: ChainWord) -> bool {
        self.words().any(|w| w == word)
    }

    /// `mutex` in the chain: only GPUs nobody uses.
    pub fn mutex(&self) -> bool {
        self.has(ChainWord::Mutex)
    }

    /// `topology-aware` in the chain: GPUs are chosen by pair scores.
    pub fn topology(&self) -> bool {
        self.has(ChainWord::TopologyAware)
    }

    /// The sort keys in order; `spread` when the chain names none.
    fn keys(&self) -> impl Iterator<Item = ChainWord> + '_ {
        let none = !self.words().any(ChainWord::is_sort_key);
        self.words()
            .filter(|w| w.is_sort_key())
            .chain(none.then_some(ChainWord::Spread))
    }

    /// The order in which HAMi v2.10 tries two GPUs: `Less` when `a` is
    /// tried before `b`. With numa-bind, `numa` counts as the first key.
    pub fn try_order(&self, a: &ChainCandidate, b: &ChainCandidate, numa_first: bool) -> Ordering {
        let numa = |a: &ChainCandidate, b: &ChainCandidate| b.numa.cmp(&a.numa);
        let first = if numa_first {
            numa(a, b)
        } else {
            Ordering::Equal
        };
        self.keys()
            .fold(first, |order, key| {
                order.then_with(|| match key {
                    ChainWord::Binpack => b.score.total_cmp(&a.score),
                    ChainWord::Numa => numa(a, b),
                    _ => a.score.total_cmp(&b.score),
                })
            })
            .then_with(|| b.index.cmp(&a.index))
    }
}

impl fmt::Display for SortChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.words().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(w.as_str())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, numa: i32, score: f64) -> ChainCandidate {
        ChainCandidate { score, numa, index }
    }

    /// The indexes of `gpus` in the order the chain tries them.
    fn tried(chain: &str, gpus: &[ChainCandidate], numa_first: bool) -> Vec<u32> {
        let c = SortChain::parse(chain).unwrap();
        let mut g = gpus.to_vec();
        g.sort_by(|a, b| c.try_order(a, b, numa_first));
        g.iter().map(|g| g.index).collect()
    }

    #[test]
    fn chains_are_recognised_as_hami_does() {
        assert!(SortChain::is_chain("binpack,numa"));
        assert!(SortChain::is_chain("numa"));
        assert!(SortChain::is_chain(" numa "));
        assert!(!SortChain::is_chain("binpack"));
        assert!(!SortChain::is_chain("numa-bind"));
    }

    #[test]
    fn parse_dedupes_and_refuses_unknown_or_empty_words() {
        let c = SortChain::parse(" binpack , numa,binpack").unwrap();
        assert_eq!(c.to_string(), "binpack,numa");
        assert_eq!(
            SortChain::parse("binpack,fast"),
            Err(ChainError::UnknownWord("fast".into()))
        );
        assert_eq!(SortChain::parse("binpack,"), Err(ChainError::EmptyWord));
        assert_eq!(
            SortChain::parse("Binpack,numa"),
            Err(ChainError::UnknownWord("Binpack".into()))
        );
        let c = SortChain::parse("mutex,topology-aware").unwrap();
        assert!(c.mutex() && c.topology());
    }

    /// Two NUMA nodes, GPUs 0 and 1 on NUMA 0, GPUs 2 and 3 on NUMA 1; GPU 0
    /// and GPU 2 carry the same load, GPU 1 and GPU 3 are idle.
    fn two_numa() -> Vec<ChainCandidate> {
        vec![
            gpu(0, 0, 5.0),
            gpu(1, 0, 0.0),
            gpu(2, 1, 5.0),
            gpu(3, 1, 0.0),
        ]
    }

    /// hami-compat.md 6.2: keys in the order written, `binpack` score
    /// ascending, `numa` NUMA ascending, index ascending last; HAMi tries the
    /// sorted list from its end.
    #[test]
    fn binpack_numa_fullest_first_then_highest_numa() {
        assert_eq!(tried("binpack,numa", &two_numa(), false), [2, 0, 3, 1]);
    }

    #[test]
    fn spread_numa_emptiest_first_then_highest_numa() {
        assert_eq!(tried("spread,numa", &two_numa(), false), [3, 1, 2, 0]);
    }

    #[test]
    fn numa_first_then_score_keys() {
        // `numa,binpack`: the NUMA id decides before the load.
        assert_eq!(tried("numa,binpack", &two_numa(), false), [2, 3, 0, 1]);
        // Bare `numa` has no score key: highest NUMA, then highest index,
        // whatever the load.
        assert_eq!(tried("numa", &two_numa(), false), [3, 2, 1, 0]);
    }

    #[test]
    fn a_chain_without_sort_key_sorts_as_spread() {
        assert_eq!(
            tried("mutex,topology-aware", &two_numa(), false),
            [3, 1, 2, 0]
        );
    }

    #[test]
    fn numa_bind_puts_numa_first() {
        assert_eq!(tried("binpack,numa", &two_numa(), true), [2, 3, 0, 1]);
        assert_eq!(tried("spread", &two_numa(), true), [3, 2, 1, 0]);
    }
}
