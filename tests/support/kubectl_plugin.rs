//! The gpugate binary as the kubectl plugin `kubectl-gpugate`.

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
