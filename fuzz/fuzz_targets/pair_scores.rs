//! Fuzz target `pair_scores`: the check lives in `gpugate::hami::fuzzing` (listed in `gpugate::fuzzing`), shared
//! with the corpus replay test (`tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpugate::hami::fuzzing::check_pair_scores(data);
});
