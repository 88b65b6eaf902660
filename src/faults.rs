//! Fault points for the high-availability tests (tests/e2e, issue 27):
//! places where a test makes gpugate fail on purpose, the way a crash or
//! a broken stream would, at a moment it chooses. Off unless `serve` runs
//! with the hidden `--fault-injection` flag; then `POST /faults/<point>` on
//! the admin port arms a point once. Never set it in production.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};

use tokio::sync::Notify;

/// A place a test can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// The cluster watch task panics.
    WatchPanic,
    /// A bind aborts the process after taking HAMi's node lock, before
    /// the Binding (a leader killed mid-bind).
    BindAbortAfterLock,
    /// A bind aborts the process right after the Binding is written.
    BindAbortAfterBinding,
}

impl FromStr for Point {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "watch-panic" => Ok(Point::WatchPanic),
            "bind-abort-after-lock" => Ok(Point::BindAbortAfterLock),
            "bind-abort-after-binding" => Ok(Point::BindAbortAfterBinding),
            other => Err(format!(
                "unknown fault point {other:?} (watch-panic, bind-abort-after-lock, bind-abort-after-binding)"
            )),
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static ARMED: LazyLock<Mutex<HashSet<Point>>> = LazyLock::new(Mutex::default);
static WAKE: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Turns fault injection on for this process (`--fault-injection`).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    tracing::warn!(
        "fault injection is on: POST /faults/<point> on the admin port makes gpugate fail on purpose"
    );
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Arms `point` once. Refused unless fault injection is on.
pub fn arm(point: Point) -> Result<(), String> {
    if !enabled() {
        return Err("fault injection is off (serve --fault-injection)".to_string());
    }
    ARMED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(point);
    tracing::warn!(?point, "fault armed");
    WAKE.notify_waiters();
    Ok(())
}

/// Whether `point` was armed; disarms it.
pub fn take(point: Point) -> bool {
    enabled()
        && ARMED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&point)
}

/// Resolves when `point` is armed (and disarms it); never when fault
/// injection is off.
pub async fn armed(point: Point) {
    if !enabled() {
        return std::future::pending().await;
    }
    loop {
        let woken = WAKE.notified();
        if take(point) {
            return;
        }
        woken.await;
    }
}

/// Aborts the process when `point` is armed: what SIGKILL would leave.
pub fn abort_if_armed(point: Point) {
    if take(point) {
        tracing::error!(?point, "fault injection: aborting the process");
        std::process::abort();
    }
}
