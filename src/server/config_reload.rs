//! Re-reading the config file while serving: a new valid file replaces the
//! config at once; an invalid one is refused with its error and the last
//! good config (namespace policies included) stays in force.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::{Config, ConfigError};

/// A config file and the bytes of the version in force.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    loaded: Mutex<Vec<u8>>,
}

impl ConfigFile {
    /// Loads the file for the first time.
    pub fn load(path: PathBuf) -> Result<(Self, Config), ConfigError> {
        let bytes = std::fs::read(&path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let config = parse(&path, &bytes)?;
        Ok((
            ConfigFile {
                path,
                loaded: Mutex::new(bytes),
            },
            config,
        ))
    }

    /// Re-reads the file; stores a changed, valid config into `target`.
    /// Returns whether it was replaced.
    pub fn reload(&self, target: &ArcSwap<Config>) -> Result<bool, ConfigError> {
        let bytes = std::fs::read(&self.path).map_err(|source| ConfigError::Read {
            path: self.path.display().to_string(),
            source,
        })?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if *loaded == bytes {
            return Ok(false);
        }
        let config = parse(&self.path, &bytes)?;
        target.store(std::sync::Arc::new(config));
        *loaded = bytes;
        Ok(true)
    }

    /// Reloads every `interval` until `stop` resolves, logging the outcome.
    pub async fn watch(
        self,
        target: std::sync::Arc<ArcSwap<Config>>,
        interval: Duration,
        on_error: impl Fn() + Send,
        stop: impl std::future::Future<Output = ()>,
    ) {
        super::poll::every(interval, stop, || match self.reload(&target) {
            Ok(true) => tracing::info!(path = %self.path.display(), "config reloaded"),
            Ok(false) => {}
            Err(e) => {
                on_error();
                tracing::error!(
                    error = %e,
                    "config not reloaded; the previous config stays in force"
                );
            }
        })
        .await;
    }
}

fn parse(path: &std::path::Path, bytes: &[u8]) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::Invalid {
        path: origin.clone(),
        problem: format!("not UTF-8: {e}"),
    })?;
    Config::from_yaml(text, &origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_changes_apply_and_invalid_ones_keep_the_last_good() {
        let dir = std::env::temp_dir().join(format!("gpugate-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gpugate.yaml");
        std::fs::write(&path, "scheduler:\n  name: one\n").unwrap();
        let (file, config) = ConfigFile::load(path.clone()).unwrap();
        let target = ArcSwap::from_pointee(config);
        assert!(!file.reload(&target).unwrap(), "unchanged");

        std::fs::write(&path, "scheduler:\n  name: two\n").unwrap();
        assert!(file.reload(&target).unwrap());
        assert_eq!(target.load().scheduler.name, "two");

        std::fs::write(&path, "scheduler:\n  nmae: three\n").unwrap();
        let e = file.reload(&target).unwrap_err();
        assert!(e.to_string().contains("nmae"), "{e}");
        assert_eq!(target.load().scheduler.name, "two");

        std::fs::remove_file(&path).unwrap();
        assert!(file.reload(&target).is_err());
        assert_eq!(target.load().scheduler.name, "two");

        std::fs::write(&path, "namespacePolicies: []\nscheduler:\n  name: four\n").unwrap();
        assert!(file.reload(&target).unwrap());
        assert_eq!(target.load().scheduler.name, "four");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
