//! Ports for servers a test starts: free on 127.0.0.1 and below the
//! kernel's ephemeral range.
//!
//! A port the kernel hands out for `bind(0)` comes from the ephemeral range
//! (`net.ipv4.ip_local_port_range`), the same range every outgoing
//! connection's source port comes from. Chosen that way and given to a
//! server started later, it can be taken meanwhile by a connection of a
//! process already running (kube-apiserver to etcd, say), and the server
//! fails with "Address already in use". Ports below the range are never
//! handed out on their own, so one that binds now stays free until the
//! server takes it, unless another test takes it on purpose.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port tried; below it sit the well-known services.
const LOWEST: u32 = 10_000;

/// The next candidate, per process: starts at a place set by the process id
/// so that two test binaries running at once start apart.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A port below the ephemeral range that binds on 127.0.0.1 now; never the
/// same one twice in a process.
pub fn free_port() -> std::io::Result<u16> {
    let below = ephemeral_low().max(LOWEST + 1_000);
    let span = below - LOWEST;
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    let _ = NEXT.compare_exchange(0, start + 1, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let offset = (NEXT.fetch_add(1, Ordering::Relaxed) - 1) % span;
        let port = (LOWEST + offset) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free port on 127.0.0.1 in {LOWEST}..{below}"),
    ))
}

/// The first port of the kernel's ephemeral range (32768 when unreadable,
/// Linux's default).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .filter(|&low: &u32| low <= 65_535)
        .unwrap_or(32_768)
}
