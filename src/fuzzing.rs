//! Every fuzz target (`fuzz/fuzz_targets/<name>.rs`, corpus in
//! `fuzz/corpus/<name>/`) with its check, shared with the corpus replay test
//! (`tests/fuzz_corpus.rs`). A check takes raw bytes and panics when an
//! invariant breaks, which is what a fuzzer reports.
//!
//! Not part of gpugate's API.

use crate::hami::fuzzing as hami;

/// A check over raw bytes; panics on failure.
pub type Check = fn(&[u8]);

pub const TARGETS: &[(&str, Check)] = &[
    ("node_register", hami::check_node_register),
    ("pair_scores", hami::check_pair_scores),
    ("pod_devices", hami::check_pod_devices),
    ("node_lock", hami::check_node_lock),
    ("handshake", hami::check_handshake),
    ("device_cordon", hami::check_device_cordon),
    ("mig_allocations", hami::check_mig_allocations),
    (
        "admission_review",
        crate::admission::fuzzing::check_admission_review,
    ),
    (
        "extender_args",
        crate::extender::fuzzing::check_extender_args,
    ),
];

/// The check of the named target; `None` for an unknown name.
pub fn check_for(target: &str) -> Option<Check> {
    TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, check)| *check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        let mut names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TARGETS.len());
        for (name, _) in TARGETS {
            assert!(check_for(name).is_some());
        }
        assert!(check_for("nope").is_none());
    }
}
