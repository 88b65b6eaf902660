//! wrk (https://github.com/wg/wrk, Debian's `wrk` package) as the load
//! client: a separate process, so the client's work is not scheduled on the
//! runtime of the servers it measures, as it is with [`super::tls_load`]'s
//! in-process client. The request body is posted from a Lua script; wrk's
//! own summary is parsed for the rate, the latency percentiles and the
//! failures.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::proc_cpu::cpu_seconds;

/// Whether `wrk` can be run.
pub fn available() -> bool {
    Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok_and(|o| !o.stdout.is_empty() || !o.stderr.is_empty())
}

/// A Lua script that POSTs the contents of `body` as JSON; written next to
/// it.
pub fn script(body: &Path) -> PathBuf {
    let script = body.with_extension("lua");
    // A Lua long string: no escapes to get wrong in the path.
    let lua = format!(
        "local f = assert(io.open([==[{}]==], \"rb\"))\n\
         wrk.method = \"POST\"\n\
         wrk.body = f:read(\"*a\")\n\
         f:close()\n\
         wrk.headers[\"Content-Type\"] = \"application/json\"\n\
         wrk.headers[\"Host\"] = \"localhost\"\n",
        body.display()
    );
    std::fs::write(&script, lua).expect("write the wrk script");
    script
}

/// What one wrk run reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct Report {
    pub rate: f64,
    /// The requests wrk completed.
    pub requests: u64,
    pub p50: Duration,
    pub p99: Duration,
    /// Socket errors and non-2xx answers.
    pub errors: u64,
    /// The CPU time the server's process spent per request while wrk ran
    /// (set by [`run`] when given the server's pid).
    pub cpu_per_request: Option<Duration>,
}

/// Runs wrk against `url` with `connections` keep-alive connections (and
/// as many threads, at most `threads`) for `duration`, POSTing what
/// `script` sets. With `server`'s pid, the CPU time that process spent
/// meanwhile is divided by the requests wrk counted.
pub fn run(
    url: &str,
    script: &Path,
    connections: usize,
    threads: usize,
    duration: Duration,
    server: Option<u32>,
) -> Report {
    let cpu_before = server.and_then(cpu_seconds);
    let out = Command::new("wrk")
        .arg(format!("-t{}", threads.clamp(1, connections.max(1))))
        .arg(format!("-c{}", connections.max(1)))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency")
        .arg("-s")
        .arg(script)
        .arg(url)
        .output()
        .expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wrk failed: {}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut report = parse(&text).unwrap_or_else(|| panic!("cannot read wrk's report:\n{text}"));
    let cpu = server.and_then(cpu_seconds).zip(cpu_before);
    report.cpu_per_request = cpu.and_then(|(after, before)| {
        (report.requests > 0)
            .then(|| Duration::from_secs_f64((after - before).max(0.0) / report.requests as f64))
    });
    report
}

/// Reads wrk's summary (with `--latency`).
pub fn parse(text: &str) -> Option<Report> {
    let mut report = Report::default();
    let (mut rate, mut p50, mut p99) = (None, None, None);
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", r] => rate = r.parse().ok(),
            [n, "requests", "in", ..] => report.requests = n.parse().ok()?,
            ["50%", d] => p50 = duration(d),
            ["99%", d] => p99 = duration(d),
            ["Non-2xx", "or", "3xx", "responses:", n] => report.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                // connect N, read N, write N, timeout N
                for pair in rest.chunks(2) {
                    if let [_, n] = pair {
                        report.errors += n.trim_end_matches(',').parse::<u64>().ok()?;
                    }
                }
            }
            _ => {}
        }
    }
    // All three are required: a run without `--latency` (or a wrk that
    // prints them otherwise) must not read as 0 ms.
    report.rate = rate?;
    report.p50 = p50?;
    report.p99 = p99?;
    Some(report)
}

/// wrk's durations: `812.00us`, `1.23ms`, `2.00s`, `1.50m`, `1.00h`.
fn duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = text.split_at(split);
    let n: f64 = n.parse().ok()?;
    let seconds = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(seconds))
}
