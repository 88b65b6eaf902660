//! Fuzz target `mig_allocations`: `hami.io/vgpu-mig-allocations`. The
//! check lives in `gpugate::hami::fuzzing`, shared with the corpus replay
//! test (`tests/fuzz_corpus.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    gpugate::hami::fuzzing::check_mig_allocations(data);
});
