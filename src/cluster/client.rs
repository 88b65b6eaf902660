//! The API server connection: from a kubeconfig file or the pod's service
//! account, with timeouts that fail fast instead of hanging a webhook.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Where the API server's address and credentials come from.
#[derive(Debug, Clone)]
pub enum ApiSource {
    Kubeconfig(PathBuf),
    InCluster,
}

/// A connection that cannot be set up, with where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--kubeconfig {path}: {problem}")]
    Kubeconfig { path: String, problem: String },
    #[error("in-cluster config (service account): {0}")]
    InCluster(String),
    #[error("API client: {0}")]
    Build(String),
}

/// How long to wait for a TCP+TLS connection to the API server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn connect(source: &ApiSource) -> Result<Client, ClientError> {
    let mut config = match source {
        ApiSource::Kubeconfig(path) => from_file(path).await?,
        ApiSource::InCluster => {
            Config::incluster().map_err(|e| ClientError::InCluster(e.to_string()))?
        }
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    // Watches hold a request open for minutes; kube's read timeout (longer
    // than its watch timeout) stays.
    Client::try_from(config).map_err(|e| ClientError::Build(e.to_string()))
}

async fn from_file(path: &Path) -> Result<Config, ClientError> {
    let err = |problem: String| ClientError::Kubeconfig {
        path: path.display().to_string(),
        problem,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_flag_and_the_file() {
        let Err(e) = connect(&ApiSource::Kubeconfig("/nonexistent/kubeconfig".into())).await else {
            panic!("a missing file was accepted");
        };
        let text = e.to_string();
        assert!(
            text.starts_with("--kubeconfig /nonexistent/kubeconfig:"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_garbled_kubeconfig_is_refused() {
        let dir = std::env::temp_dir().join(format!("gpugate-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, "clusters: [1, 2").unwrap();
        let Err(e) = connect(&ApiSource::Kubeconfig(path)).await else {
            panic!("a garbled file was accepted");
        };
        assert!(matches!(e, ClientError::Kubeconfig { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
