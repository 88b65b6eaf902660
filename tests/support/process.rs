//! Running the gpugate binary in a test.

use std::process::{Command, Output};

/// Runs `cmd` to its end; it must succeed, else the test fails with its
/// stderr.
pub fn succeeds(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
