//! Fuzz target `admission_review`: the check lives in
//! `gpugate::admission::fuzzing`, shared with the corpus replay test
//! (`tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpugate::admission::fuzzing::check_admission_review(data);
});
