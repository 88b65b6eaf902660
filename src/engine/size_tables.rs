//! A device plugin's tables on a node, by number of devices a pod takes
//! (`devices::NodePreference::SizeTables`; Metax GPU's topology losses
//! and scores, hami-vendors.md 5.2): read from the node's annotations
//! into its extras, ranked by `super::node_preference`.

use std::collections::BTreeMap;

/// A device plugin's tables on a node (`NodePreference::SizeTables`): by
/// number of devices a pod takes, the topology's loss and score.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SizeTables {
    pub losses: BTreeMap<u32, i64>,
    pub scores: BTreeMap<u32, i64>,
}

impl SizeTables {
    pub fn is_empty(&self) -> bool {
        self.losses.is_empty() && self.scores.is_empty()
    }
}

/// The most devices a table entry may name: more than any node holds.
const MOST_DEVICES: u32 = 1024;

/// Reads one table: a JSON object from a number of devices (`"1"` to
/// `"1024"`) to a whole number (`{"1":100,"2":200}`).
pub fn decode_size_table(text: &str) -> Result<BTreeMap<u32, i64>, String> {
    let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(text)
        .map_err(|e| format!("not a JSON object of device counts to numbers: {e}"))?;
    map.into_iter()
        .map(|(k, v)| {
            let n = k
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MOST_DEVICES).contains(n))
                .ok_or_else(|| {
                    format!("key {k:?} is not a number of devices (1 to {MOST_DEVICES})")
                })?;
            let value = v
                .as_i64()
                .ok_or_else(|| format!("the value for {k:?} is {v}, not a whole number"))?;
            Ok((n, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_read_as_metax_writes_them() {
        let t = decode_size_table(r#"{"1":100,"2":200,"8":-5}"#).unwrap();
        assert_eq!(t, BTreeMap::from([(1, 100), (2, 200), (8, -5)]));
        assert_eq!(decode_size_table("{}").unwrap(), BTreeMap::new());
        for (bad, says) in [
            ("[1,2]", "not a JSON object"),
            (r#"{"one":1}"#, "is not a number of devices"),
            (r#"{"0":1}"#, "is not a number of devices"),
            (r#"{"1025":1}"#, "is not a number of devices"),
            (r#"{"1":1.5}"#, "not a whole number"),
            (r#"{"1":"100"}"#, "not a whole number"),
            ("", "not a JSON object"),
        ] {
            let e = decode_size_table(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
