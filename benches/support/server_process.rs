//! A `gpugate serve` process for the benchmarks that measure it from the
//! outside (slow clients, memory at scale): started on free loopback ports
//! with certificates it makes itself, killed and its directory removed when
//! dropped; its memory read from /proc and its admin port asked over plain
//! HTTP.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub listen: SocketAddr,
    pub extender: SocketAddr,
    pub admin: SocketAddr,
    pub dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Starts `bin serve ARGS` with the webhooks, the extender (on its own
/// port, deploy/'s layout) and the admin port on free ports, certificates
/// in a fresh directory named after `name`, stderr in its `stderr.log`.
/// Does not wait for readiness (see [`wait_ready`]).
pub fn start(name: &str, bin: &Path, args: &[String], env: &[(String, String)]) -> Server {
    let dir = std::env::temp_dir().join(format!("gpugate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (listen, admin, extender) = (free_port(), free_port(), free_port());
    let child = Command::new(bin)
        .arg("serve")
        .args(args)
        .args(["--listen", &listen.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--extender-listen", &extender.to_string()])
        .arg("--cert-dir")
        .arg(dir.join("certs"))
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .spawn()
        .expect("start gpugate");
    Server {
        child,
        listen,
        extender,
        admin,
        dir,
    }
}

/// Waits until `/readyz` answers 200, up to `limit`; whether it did.
pub fn wait_ready(server: &Server, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if admin_get(server.admin, "/readyz").is_some_and(|(s, _)| s == 200) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// (VmRSS, VmHWM) in KiB.
pub fn rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// `GET path` on the plain-HTTP admin port: status and body.
pub fn admin_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    Some((
        status,
        text.split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string(),
    ))
}
