//! Re-reading the config file while serving. A file is taken only once it
//! is stable: read the same on two polls in a row, so that a file caught
//! half written (truncated, then rewritten slowly) is never parsed, let
//! alone put in force. A stable, valid file replaces the config at once;
//! an invalid one (an empty file included) is refused with its error, once
//! per version, and the last good config stays in force. What is in force
//! is observable: its SHA-256 and load time, in the log and in metrics.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

use crate::config::{Config, ConfigError};

/// The version of the config in force.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigStamp {
    /// SHA-256 of the file's bytes, lowercase hex.
    pub sha256: String,
    /// When it was put in force (Unix seconds).
    pub loaded_at: i64,
}

impl ConfigStamp {
    fn of(bytes: &[u8]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        Self {
            sha256: digest.as_ref().iter().map(|b| format!("{b:02x}")).collect(),
            loaded_at: jiff::Timestamp::now().as_second(),
        }
    }

    /// The first 12 hex digits, for logs.
    pub fn short(&self) -> &str {
        &self.sha256[..12.min(self.sha256.len())]
    }
}

/// A config file and what was read of it.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The bytes of the version in force, and its stamp.
    loaded: Vec<u8>,
    stamp: ConfigStamp,
    /// New bytes read once, taken if the next poll reads them again.
    candidate: Option<Vec<u8>>,
    /// The last version refused, so that it is reported once.
    refused: Option<Vec<u8>>,
}

/// What one poll found.
#[derive(Debug, PartialEq)]
pub enum Polled {
    /// The file holds the version in force.
    Unchanged,
    /// The file holds the version in force again, after a version that
    /// was refused.
    Restored,
    /// The file changed; it is taken if the next poll reads the same.
    Settling,
    /// A new version is in force.
    Applied(ConfigStamp),
    /// The file still holds a version refused before.
    StillRefused,
}

/// How long a first load waits for the file to stop changing.
const FIRST_LOAD_SETTLE: Duration = Duration::from_millis(100);
const FIRST_LOAD_ATTEMPTS: usize = 50;
/// After SIGHUP: the second read that confirms a changed file.
const SIGNAL_SETTLE: Duration = Duration::from_millis(500);

impl ConfigFile {
    /// Loads the file for the first time, once two reads a moment apart
    /// agree.
    pub async fn load(path: PathBuf) -> Result<(Self, Config), ConfigError> {
        let mut bytes = read(&path)?;
        let mut stable = false;
        for _ in 0..FIRST_LOAD_ATTEMPTS {
            tokio::time::sleep(FIRST_LOAD_SETTLE).await;
            let again = read(&path)?;
            if again == bytes {
                stable = true;
                break;
            }
            bytes = again;
        }
        if !stable {
            return Err(ConfigError::Invalid {
                path: path.display().to_string(),
                problem: format!(
                    "the file kept changing for {:?}; not taken",
                    FIRST_LOAD_SETTLE * FIRST_LOAD_ATTEMPTS as u32
                ),
            });
        }
        let config = parse(&path, &bytes)?;
        let stamp = ConfigStamp::of(&bytes);
        Ok((
            ConfigFile {
                path,
                state: Mutex::new(State {
                    loaded: bytes,
                    stamp,
                    candidate: None,
                    refused: None,
                }),
            },
            config,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version in force.
    pub fn stamp(&self) -> ConfigStamp {
        self.lock().stamp.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the file once; stores a stable, valid new version into
    /// `target`. An error is a version refused (or a file that cannot be
    /// read); the config in force stays.
    pub fn poll(&self, target: &ArcSwap<Config>) -> Result<Polled, ConfigError> {
        let bytes = read(&self.path)?;
        let mut state = self.lock();
        if bytes == state.loaded {
            state.candidate = None;
            return Ok(if state.refused.take().is_some() {
                Polled::Restored
            } else {
                Polled::Unchanged
            });
        }
        if state.refused.as_ref() == Some(&bytes) {
            state.candidate = None;
            return Ok(Polled::StillRefused);
        }
        if state.candidate.as_ref() != Some(&bytes) {
            state.candidate = Some(bytes);
            return Ok(Polled::Settling);
        }
        state.candidate = None;
        match parse(&self.path, &bytes) {
            Ok(config) => {
                target.store(Arc::new(config));
                state.stamp = ConfigStamp::of(&bytes);
                state.loaded = bytes;
                state.refused = None;
                Ok(Polled::Applied(state.stamp.clone()))
            }
            Err(e) => {
                state.refused = Some(bytes);
                Err(e)
            }
        }
    }

    /// Polls every `interval`, and at once on `now` (SIGHUP) with a second
    /// read shortly after, until `stop` resolves. `report` hears of every
    /// version put in force or refused.
    pub async fn watch(
        self: Arc<Self>,
        target: Arc<ArcSwap<Config>>,
        interval: Duration,
        now: Arc<Notify>,
        report: impl Fn(Result<&ConfigStamp, &ConfigError>) + Send,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut timer = tokio::time::interval(interval);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut follow_up: Option<tokio::time::Instant> = None;
        let mut last_read_error: Option<String> = None;
        // The last outcome reported was a refusal or a read error.
        let mut failing = false;
        loop {
            let settle = async {
                match follow_up {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = &mut stop => return,
                _ = timer.tick() => {}
                () = now.notified() => {
                    follow_up = Some(tokio::time::Instant::now() + SIGNAL_SETTLE);
                }
                () = settle => follow_up = None,
            }
            match self.poll(&target) {
                Ok(Polled::Applied(stamp)) => {
                    last_read_error = None;
                    failing = false;
                    tracing::info!(
                        path = %self.path.display(),
                        sha256 = stamp.short(),
                        "config reloaded: this version is in force"
                    );
                    report(Ok(&stamp));
                }
                Ok(Polled::Unchanged | Polled::Restored) if failing => {
                    // Back to the version in force: nothing is refused now.
                    last_read_error = None;
                    failing = false;
                    let stamp = self.stamp();
                    tracing::info!(
                        path = %self.path.display(),
                        sha256 = stamp.short(),
                        "config file holds the version in force again"
                    );
                    report(Ok(&stamp));
                }
                Ok(Polled::Settling) => {
                    // Confirm soon rather than a whole interval later.
                    follow_up.get_or_insert(tokio::time::Instant::now() + SIGNAL_SETTLE);
                }
                Ok(Polled::Unchanged | Polled::Restored | Polled::StillRefused) => {
                    last_read_error = None;
                }
                Err(e) => {
                    let is_read = matches!(e, ConfigError::Read { .. });
                    let message = e.to_string();
                    if is_read && last_read_error.as_ref() == Some(&message) {
                        continue;
                    }
                    last_read_error = is_read.then(|| message.clone());
                    failing = true;
                    let in_force = self.stamp();
                    tracing::error!(
                        error = %message,
                        in_force_sha256 = in_force.short(),
                        in_force_since = in_force.loaded_at,
                        "config not reloaded; the version in force stays"
                    );
                    report(Err(&e));
                }
            }
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Config, ConfigError> {
    let origin = path.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::Invalid {
        path: origin.clone(),
        problem: format!("not UTF-8: {e}"),
    })?;
    Config::from_file_text(text, &origin)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    /// SHA-256 of the config file in force (from the operator's file,
    /// never from a request; one series at a time).
    pub sha256: String,
}

/// Which config is in force, since when, and the versions refused.
#[derive(Debug, Clone)]
pub struct ConfigMetrics {
    pub reload_errors: Counter,
    info: Family<ConfigLabels, Gauge>,
    loaded_at: Gauge,
    last_reload_ok: Gauge,
}

impl Default for ConfigMetrics {
    fn default() -> Self {
        let m = Self {
            reload_errors: Default::default(),
            info: Default::default(),
            loaded_at: Default::default(),
            last_reload_ok: Default::default(),
        };
        m.last_reload_ok.set(1);
        m
    }
}

impl ConfigMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "gpugate_config_reload_errors",
            "Config file versions refused on reload (the version in force stays)",
            self.reload_errors.clone(),
        );
        registry.register(
            "gpugate_config_info",
            "1 for the config file in force, labelled with its SHA-256",
            self.info.clone(),
        );
        registry.register(
            "gpugate_config_loaded_timestamp_seconds",
            "When the config in force was loaded (Unix time)",
            self.loaded_at.clone(),
        );
        registry.register(
            "gpugate_config_last_reload_successful",
            "1 if the last version of the config file read was put in force, 0 if refused",
            self.last_reload_ok.clone(),
        );
    }

    /// Records the config version put in force.
    pub fn in_force(&self, stamp: &ConfigStamp) {
        self.info.clear();
        self.info
            .get_or_create(&ConfigLabels {
                sha256: stamp.sha256.clone(),
            })
            .set(1);
        self.loaded_at.set(stamp.loaded_at);
        self.last_reload_ok.set(1);
    }

    /// Records a config version refused (the one in force stays).
    pub fn refused(&self) {
        self.reload_errors.inc();
        self.last_reload_ok.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gpugate-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("gpugate.yaml")
    }

    /// Polls until the file's state settles (at most three polls).
    fn settle(file: &ConfigFile, target: &ArcSwap<Config>) -> Result<Polled, ConfigError> {
        let mut last = file.poll(target);
        for _ in 0..2 {
            if !matches!(last, Ok(Polled::Settling)) {
                break;
            }
            last = file.poll(target);
        }
        last
    }

    #[tokio::test]
    async fn stable_valid_changes_apply_and_refused_ones_keep_the_last_good() {
        let path = temp("apply");
        std::fs::write(&path, "scheduler:\n  name: one\n").unwrap();
        let (file, config) = ConfigFile::load(path.clone()).await.unwrap();
        let first = file.stamp();
        let target = ArcSwap::from_pointee(config);
        assert_eq!(file.poll(&target).unwrap(), Polled::Unchanged);

        std::fs::write(&path, "scheduler:\n  name: two\n").unwrap();
        // Seen once: not yet taken.
        assert_eq!(file.poll(&target).unwrap(), Polled::Settling);
        assert_eq!(target.load().scheduler.name, "one");
        let Polled::Applied(stamp) = file.poll(&target).unwrap() else {
            panic!("not applied")
        };
        assert_eq!(target.load().scheduler.name, "two");
        assert_ne!(stamp.sha256, first.sha256);
        assert_eq!(stamp.sha256.len(), 64);

        std::fs::write(&path, "scheduler:\n  nmae: three\n").unwrap();
        let e = settle(&file, &target).unwrap_err();
        assert!(e.to_string().contains("nmae"), "{e}");
        assert_eq!(target.load().scheduler.name, "two");
        // Reported once, not at every poll.
        assert_eq!(file.poll(&target).unwrap(), Polled::StillRefused);
        assert_eq!(file.stamp(), stamp);
        // Put back as it was: nothing is refused any more, and the same
        // bad version is reported again if it comes back.
        std::fs::write(&path, "scheduler:\n  name: two\n").unwrap();
        assert_eq!(file.poll(&target).unwrap(), Polled::Restored);
        assert_eq!(file.poll(&target).unwrap(), Polled::Unchanged);
        std::fs::write(&path, "scheduler:\n  nmae: three\n").unwrap();
        assert!(settle(&file, &target).is_err());

        std::fs::remove_file(&path).unwrap();
        assert!(file.poll(&target).is_err());
        assert_eq!(target.load().scheduler.name, "two");

        std::fs::write(&path, "namespacePolicies: []\nscheduler:\n  name: four\n").unwrap();
        assert!(matches!(settle(&file, &target), Ok(Polled::Applied(_))));
        assert_eq!(target.load().scheduler.name, "four");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// The case: an empty file on reload dropped every namespace
    /// policy; a file truncated and rewritten slowly with a typo left the
    /// server on the empty file's defaults.
    #[tokio::test]
    async fn an_empty_or_half_written_file_never_replaces_the_config() {
        let path = temp("truncated");
        let good =
            "namespacePolicies:\n  - name: ml\n    namespaces: [ml]\n    limits: {gpusPerPod: 2}\n";
        std::fs::write(&path, good).unwrap();
        let (file, config) = ConfigFile::load(path.clone()).await.unwrap();
        let target = ArcSwap::from_pointee(config);

        // Truncated: refused once stable, policies stay.
        std::fs::write(&path, "").unwrap();
        let e = settle(&file, &target).unwrap_err();
        assert!(e.to_string().contains("the file is empty"), "{e}");
        assert_eq!(target.load().namespace_policies.len(), 1);

        // Rewritten slowly: every poll sees a different prefix, none is
        // taken, not even one that parses (the first line alone).
        let typo =
            "namespacePolicies:\n  - name: ml\n    namespaces: [ml]\n    limits: {gpusPerPd: 2}\n";
        for end in [19, 34, 55, typo.len()] {
            std::fs::write(&path, &typo[..end]).unwrap();
            assert_eq!(file.poll(&target).unwrap(), Polled::Settling, "{end}");
            assert_eq!(target.load().namespace_policies.len(), 1);
        }
        // Finished, with its typo: refused; the good config stays.
        let e = file.poll(&target).unwrap_err();
        assert!(e.to_string().contains("gpusPerPd"), "{e}");
        assert_eq!(
            target.load().namespace_policies[0].limits.gpus_per_pod,
            Some(2)
        );
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    /// What the watcher reports, as the metrics hear it: a refused version
    /// (gauge 0), then the file put back (gauge 1 again), then a new one.
    #[tokio::test]
    async fn the_watcher_reports_refusals_and_recoveries() {
        let path = temp("watch");
        std::fs::write(&path, "scheduler:\n  name: one\n").unwrap();
        let (file, config) = ConfigFile::load(path.clone()).await.unwrap();
        let first = file.stamp();
        let target = Arc::new(ArcSwap::from_pointee(config));
        let heard = Arc::new(Mutex::new(Vec::<Result<String, String>>::new()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let log = heard.clone();
        let watcher = tokio::spawn(Arc::new(file).watch(
            target.clone(),
            Duration::from_millis(30),
            Arc::default(),
            move |outcome| {
                log.lock().unwrap().push(match outcome {
                    Ok(stamp) => Ok(stamp.sha256.clone()),
                    Err(e) => Err(e.to_string()),
                });
            },
            async {
                let _ = stop_rx.await;
            },
        ));
        let wait_for = |n: usize| {
            let heard = heard.clone();
            async move {
                for _ in 0..200 {
                    if heard.lock().unwrap().len() >= n {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("heard {:?}", heard.lock().unwrap());
            }
        };
        std::fs::write(&path, "scheduler:\n  nmae: typo\n").unwrap();
        wait_for(1).await;
        std::fs::write(&path, "scheduler:\n  name: one\n").unwrap();
        wait_for(2).await;
        std::fs::write(&path, "scheduler:\n  name: two\n").unwrap();
        wait_for(3).await;
        let _ = stop_tx.send(());
        watcher.await.unwrap();
        let heard = heard.lock().unwrap().clone();
        assert!(
            heard[0].as_ref().is_err_and(|e| e.contains("nmae")),
            "{heard:?}"
        );
        assert_eq!(
            heard[1],
            Ok(first.sha256.clone()),
            "back to the version in force"
        );
        assert!(
            heard[2].as_ref().is_ok_and(|s| *s != first.sha256),
            "{heard:?}"
        );
        assert_eq!(target.load().scheduler.name, "two");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[tokio::test]
    async fn an_empty_file_is_refused_at_start() {
        let path = temp("empty-start");
        std::fs::write(&path, "# nothing yet\n").unwrap();
        let e = ConfigFile::load(path.clone()).await.unwrap_err();
        assert!(e.to_string().contains("the file is empty"), "{e}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
