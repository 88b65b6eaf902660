//! Fuzz target `extender_args`: kube-scheduler's extender arguments as
//! gpugate's hand-written reader takes them. The check lives in
//! `gpugate::extender::fuzzing`, shared with the corpus replay test
//! (`tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpugate::extender::fuzzing::check_extender_args(data);
});
