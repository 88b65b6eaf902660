//! A process's CPU time from `/proc/<pid>/stat`, for the benchmarks that
//! report CPU spent per request or per pod.

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`).
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system CPU seconds of a process, its children not counted.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: fields start after the
    // last ')'. utime and stime are fields 14 and 15 (1-based), so the
    // 12th and 13th after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}
