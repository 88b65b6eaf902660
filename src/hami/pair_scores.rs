//! Pairwise GPU topology scores, `hami.io/node-nvidia-score`
//! (hami-compat.md 3.2): `[{"uuid":"GPU-0","score":{"GPU-1":100}}, ...]`.
//!
//! HAMi's device plugin writes every pair in both directions with the same
//! score. The wire form is kept as written (keyed by the declaring GPU) so
//! that encoding what was decoded gives the same pairs back; lookups are
//! symmetric.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::DecodeError;
use super::register::json_string;
use crate::devices::nvidia::NODE_SCORE as NODE_NVIDIA_SCORE;

/// Topology scores between pairs of GPUs, by UUID. Higher is closer
/// (NVLink 100 per link, same switch 50, ..., across CPUs 10).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PairScores {
    /// declaring uuid -> other uuid -> score. Never holds an empty inner
    /// map, a self pair or an empty uuid.
    scores: BTreeMap<String, BTreeMap<String, i32>>,
}

impl PairScores {
    /// The score between `a` and `b`, in either direction; 0 when unknown.
    /// When both directions are present and differ, the direction declared
    /// by the lexicographically smaller uuid wins, so the answer does not
    /// depend on the argument order.
    pub fn get(&self, a: &str, b: &str) -> i32 {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        self.declared(lo, hi)
            .or_else(|| self.declared(hi, lo))
            .unwrap_or(0)
    }

    fn declared(&self, from: &str, to: &str) -> Option<i32> {
        self.scores.get(from).and_then(|m| m.get(to)).copied()
    }

    /// Records the score `a` declares for `b` (replacing an earlier one).
    /// Pairs the wire form cannot carry, a GPU with itself or an empty uuid,
    /// are ignored.
    pub fn insert(&mut self, a: &str, b: &str, score: i32) {
        if a == b || a.is_empty() || b.is_empty() {
            return;
        }
        self.scores
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string(), score);
    }

    /// No pair has a score.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// Every unordered pair once, as `(smaller uuid, larger uuid, score)`,
    /// sorted, with the score [`PairScores::get`] gives.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, i32)> {
        let mut pairs: BTreeMap<(&str, &str), i32> = BTreeMap::new();
        for (a, others) in &self.scores {
            for (b, &score) in others {
                if a < b {
                    pairs.insert((a.as_str(), b.as_str()), score);
                } else {
                    pairs.entry((b.as_str(), a.as_str())).or_insert(score);
                }
            }
        }
        pairs.into_iter().map(|((a, b), s)| (a, b, s))
    }
}

fn err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(NODE_NVIDIA_SCORE, piece, problem)
}

/// Decodes `hami.io/node-nvidia-score`. An empty value, `null` and `[]` mean
/// no scores. Unknown fields are ignored; a missing or `null` `score` is an
/// empty one. A GPU declared twice, a GPU paired with itself, an empty uuid
/// and a score that is not a 32-bit whole number are errors.
pub fn decode_pair_scores(value: &str) -> Result<PairScores, DecodeError> {
    let mut out = PairScores::default();
    if value.trim().is_empty() {
        return Ok(out);
    }
    let parsed: Value =
        serde_json::from_str(value).map_err(|e| err(value, format!("not valid JSON: {e}")))?;
    let items = match parsed {
        Value::Null => return Ok(out),
        Value::Array(items) => items,
        _ => return Err(err(value, "expected a JSON array")),
    };
    let mut declared = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let Value::Object(obj) = item else {
            return Err(err(
                &item.to_string(),
                format!("entry {i}: expected a JSON object"),
            ));
        };
        let uuid = match obj.get("uuid") {
            Some(Value::String(s)) if !s.is_empty() => s.as_str(),
            _ => {
                return Err(err(
                    &item.to_string(),
                    format!("entry {i}: \"uuid\" must be a non-empty string"),
                ));
            }
        };
        if !declared.insert(uuid) {
            return Err(err(uuid, format!("entry {i}: GPU declared twice")));
        }
        let scores = match obj.get("score") {
            None | Some(Value::Null) => continue,
            Some(Value::Object(scores)) => scores,
            Some(other) => {
                return Err(err(
                    &other.to_string(),
                    format!("entry {i} ({uuid:?}): \"score\" must be an object"),
                ));
            }
        };
        for (other, score) in scores {
            let piece = || format!("{}:{score}", json_string(other));
            if other.is_empty() {
                return Err(err(&piece(), format!("entry {i} ({uuid:?}): empty uuid")));
            }
            if other == uuid {
                return Err(err(&piece(), format!("entry {i} ({uuid:?}): self pair")));
            }
            let score = score
                .as_i64()
                .and_then(|s| i32::try_from(s).ok())
                .ok_or_else(|| {
                    err(
                        &piece(),
                        format!("entry {i} ({uuid:?}): score must be a 32-bit whole number"),
                    )
                })?;
            out.insert(uuid, other, score);
        }
    }
    Ok(out)
}

/// HAMi's JSON form, sorted by uuid.
pub fn encode_pair_scores(scores: &PairScores) -> String {
    let mut out = String::from("[");
    for (i, (uuid, others)) in scores.scores.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{{\"uuid\":{},\"score\":{{", json_string(uuid)));
        for (j, (other, score)) in others.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str(&format!("{}:{score}", json_string(other)));
        }
        out.push_str("}}");
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_err(value: &str) -> DecodeError {
        crate::hami::expect_decode_error(value, decode_pair_scores(value), NODE_NVIDIA_SCORE)
    }

    #[test]
    fn hami_example() {
        let v =
            r#"[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}]"#;
        let s = decode_pair_scores(v).unwrap();
        assert_eq!(s.get("GPU-0", "GPU-1"), 100);
        assert_eq!(s.get("GPU-1", "GPU-0"), 100);
        assert_eq!(s.get("GPU-0", "GPU-2"), 0);
        assert_eq!(s.get("GPU-0", "GPU-0"), 0);
        assert_eq!(encode_pair_scores(&s), v);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![("GPU-0", "GPU-1", 100)]);
    }

    #[test]
    fn one_direction_is_symmetric() {
        let s = decode_pair_scores(r#"[{"uuid":"B","score":{"A":60,"C":-5}}]"#).unwrap();
        assert_eq!(s.get("A", "B"), 60);
        assert_eq!(s.get("B", "A"), 60);
        assert_eq!(s.get("C", "B"), -5);
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            vec![("A", "B", 60), ("B", "C", -5)]
        );
    }

    #[test]
    fn conflicting_directions_are_deterministic() {
        let mut s = PairScores::default();
        s.insert("B", "A", 10);
        s.insert("A", "B", 20);
        assert_eq!(s.get("A", "B"), 20);
        assert_eq!(s.get("B", "A"), 20);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![("A", "B", 20)]);
    }

    #[test]
    fn insert_ignores_unrepresentable_pairs() {
        let mut s = PairScores::default();
        s.insert("A", "A", 1);
        s.insert("", "A", 1);
        s.insert("A", "", 1);
        assert!(s.is_empty());
        assert_eq!(encode_pair_scores(&s), "[]");
    }

    #[test]
    fn empty_forms() {
        for v in [
            "",
            "  ",
            "[]",
            "null",
            r#"[{"uuid":"A"}]"#,
            r#"[{"uuid":"A","score":{}}]"#,
        ] {
            assert!(decode_pair_scores(v).unwrap().is_empty(), "{v:?}");
        }
        let s = decode_pair_scores(r#"[{"uuid":"A","score":null,"extra":[1]}]"#).unwrap();
        assert!(s.is_empty());
    }

    #[test]
    fn errors() {
        let e = decode_err(r#"[{"uuid":"A","score":{"A":1}}]"#);
        assert_eq!(e.piece, r#""A":1"#);
        assert!(e.problem.contains("self pair"), "{e}");

        let e = decode_err(r#"[{"uuid":"A","score":{"B":2147483648}}]"#);
        assert_eq!(e.piece, r#""B":2147483648"#);
        let e = decode_err(r#"[{"uuid":"A","score":{"B":1.5}}]"#);
        assert_eq!(e.piece, r#""B":1.5"#);
        let e = decode_err(r#"[{"uuid":"A","score":{"B":"1"}}]"#);
        assert_eq!(e.piece, r#""B":"1""#);
        let e = decode_err(r#"[{"uuid":"A","score":{"":1}}]"#);
        assert_eq!(e.piece, r#""":1"#);

        let e = decode_err(r#"[{"uuid":"A","score":{"B":1}},{"uuid":"A","score":{"C":1}}]"#);
        assert_eq!(e.piece, "A");
        assert!(e.problem.contains("entry 1"), "{e}");

        let e = decode_err(r#"[{"score":{"B":1}}]"#);
        assert_eq!(e.piece, r#"{"score":{"B":1}}"#);
        let e = decode_err(r#"[{"uuid":"","score":{}}]"#);
        assert!(e.problem.contains("uuid"), "{e}");
        let e = decode_err(r#"[{"uuid":"A","score":[1]}]"#);
        assert_eq!(e.piece, "[1]");
        let e = decode_err(r#"["A"]"#);
        assert_eq!(e.piece, r#""A""#);
        let e = decode_err(r#"{"uuid":"A"}"#);
        assert_eq!(e.problem, "expected a JSON array");
        let e = decode_err(r#"[{"uuid":"A","score":{"B":1}"#);
        assert!(e.problem.starts_with("not valid JSON"), "{e}");
    }
}
