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

/// A temporary directory holding `kubectl-gpugate`, a link to the gpugate
/// binary (how kubectl finds its plugin), for `test`; removed on drop.
pub struct KubectlPlugin {
    pub dir: std::path::PathBuf,
    pub path: std::path::PathBuf,
}

impl KubectlPlugin {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("gpugate-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubectl-gpugate");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gpugate"), &path).unwrap();
        KubectlPlugin { dir, path }
    }

    /// The binary as gpugate, then as the kubectl plugin.
    pub fn both(&self) -> [std::path::PathBuf; 2] {
        [
            std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpugate")),
            self.path.clone(),
        ]
    }
}

impl Drop for KubectlPlugin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
