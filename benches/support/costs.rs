//! What a phase of the scale benchmark cost the control plane (issue 26):
//! CPU seconds of each process (`/proc/<pid>/stat`), kube-apiserver's
//! requests by verb and resource and the watch events it sent by resource
//! (its own `/metrics`), and gpugate's extender calls and request bytes
//! (gpugate's `/metrics`). Sampled before and after a phase; the
//! difference is divided by the pods bound.

use std::collections::BTreeMap;

use crate::control_plane::ControlPlane;
use crate::http::samples;
use crate::proc_cpu::cpu_seconds;

/// One look at every counter.
#[derive(Debug, Default, Clone)]
pub struct Sample {
    /// CPU seconds (user + system) by process.
    pub cpu: BTreeMap<String, f64>,
    /// `apiserver_request_total` by `VERB resource[/subresource]`.
    pub requests: BTreeMap<String, f64>,
    /// `apiserver_watch_events_total` by resource (kind).
    pub watch_events: BTreeMap<String, f64>,
    /// kube-apiserver's `etcd_requests_total` by `operation type`: a write
    /// to an object changed since kube-apiserver's cache saw it costs one
    /// more `get` (the update is retried against etcd's copy).
    pub etcd_requests: BTreeMap<String, f64>,
    /// `apiserver_watch_events_sizes` sum (bytes) by resource.
    pub watch_bytes: BTreeMap<String, f64>,
    /// gpugate's `gpugate_extender_requests_total` by verb.
    pub extender_calls: BTreeMap<String, f64>,
    /// gpugate's `gpugate_extender_body_bytes_total` by `verb direction`.
    pub extender_bytes: BTreeMap<String, f64>,
    /// gpugate's `gpugate_events_dropped_total` (its event queue full).
    pub events_dropped: f64,
    /// gpugate's `gpugate_api_client_wait_seconds_sum`: seconds its
    /// requests waited for its client-side limit (`api.qps`).
    pub client_wait: f64,
}

fn pid_of(p: &std::sync::Mutex<Option<crate::procs::Proc>>) -> Option<u32> {
    p.lock().ok()?.as_ref().map(|p| p.pid())
}

/// Samples every counter now. kube-scheduler's CPU is `None` (absent)
/// while none runs.
pub async fn sample(cp: &ControlPlane) -> anyhow::Result<Sample> {
    let mut s = Sample::default();
    for (name, pid) in [
        ("etcd", pid_of(&cp.etcd)),
        ("kube-apiserver", pid_of(&cp.apiserver)),
        ("kube-scheduler", pid_of(&cp.scheduler)),
        ("gpugate", pid_of(&cp.gpugate)),
        ("harness", Some(std::process::id())),
    ] {
        if let Some(secs) = pid.and_then(cpu_seconds) {
            s.cpu.insert(name.to_string(), secs);
        }
    }
    let req = http::Request::get("/metrics").body(vec![])?;
    let text = cp.admin.request_text(req).await?;
    for x in samples(&text, "apiserver_request_total") {
        let sub = x.label("subresource");
        let key = if sub.is_empty() {
            format!("{} {}", x.label("verb"), x.label("resource"))
        } else {
            format!("{} {}/{sub}", x.label("verb"), x.label("resource"))
        };
        *s.requests.entry(key).or_default() += x.value;
    }
    let resource = |x: &crate::http::Sample| {
        let r = x.label("resource");
        if r.is_empty() {
            x.label("kind").to_string()
        } else {
            r.to_string()
        }
    };
    for x in samples(&text, "apiserver_watch_events_total") {
        *s.watch_events.entry(resource(&x)).or_default() += x.value;
    }
    for x in samples(&text, "etcd_requests_total") {
        // `resource` since Kubernetes 1.32 (`type` before).
        let resource = match x.label("resource") {
            "" => x.label("type"),
            r => r,
        };
        let key = format!("{} {resource}", x.label("operation"));
        *s.etcd_requests.entry(key).or_default() += x.value;
    }
    for x in samples(&text, "apiserver_watch_events_sizes_sum") {
        *s.watch_bytes.entry(resource(&x)).or_default() += x.value;
    }
    let text = crate::http::metrics(cp.gpugate_admin_port).await?;
    for x in samples(&text, "gpugate_extender_requests_total") {
        *s.extender_calls
            .entry(x.label("verb").to_string())
            .or_default() += x.value;
    }
    s.events_dropped = samples(&text, "gpugate_events_dropped_total")
        .iter()
        .map(|x| x.value)
        .sum();
    s.client_wait = samples(&text, "gpugate_api_client_wait_seconds_sum")
        .iter()
        .map(|x| x.value)
        .sum();
    for x in samples(&text, "gpugate_extender_body_bytes_total") {
        let key = format!("{} {}", x.label("verb"), x.label("direction"));
        *s.extender_bytes.entry(key).or_default() += x.value;
    }
    Ok(s)
}

/// After − before, per bound pod.
#[derive(Debug, Default, Clone)]
pub struct PerPod {
    pub cpu_ms: BTreeMap<String, f64>,
    pub requests: BTreeMap<String, f64>,
    pub watch_events: BTreeMap<String, f64>,
    pub etcd_requests: BTreeMap<String, f64>,
    pub watch_kib: BTreeMap<String, f64>,
    pub extender_calls: BTreeMap<String, f64>,
    /// Mean body bytes per call, by `verb direction`.
    pub bytes_per_call: BTreeMap<String, f64>,
    /// gpugate's events dropped (queue full), per pod.
    pub events_dropped: f64,
    /// Milliseconds gpugate's requests waited for its client-side limit,
    /// per pod.
    pub client_wait_ms: f64,
}

impl PerPod {
    pub fn of(before: &Sample, after: &Sample, pods: usize) -> PerPod {
        let n = pods.max(1) as f64;
        let per = |a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, scale: f64| {
            a.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        (v - b.get(k).copied().unwrap_or(0.0)) * scale / n,
                    )
                })
                .filter(|(_, v)| *v > 0.0005)
                .collect::<BTreeMap<_, _>>()
        };
        PerPod {
            cpu_ms: per(&after.cpu, &before.cpu, 1000.0),
            requests: per(&after.requests, &before.requests, 1.0),
            watch_events: per(&after.watch_events, &before.watch_events, 1.0),
            etcd_requests: per(&after.etcd_requests, &before.etcd_requests, 1.0),
            watch_kib: per(&after.watch_bytes, &before.watch_bytes, 1.0 / 1024.0),
            extender_calls: per(&after.extender_calls, &before.extender_calls, 1.0),
            events_dropped: (after.events_dropped - before.events_dropped) / n,
            client_wait_ms: (after.client_wait - before.client_wait) * 1000.0 / n,
            bytes_per_call: after
                .extender_bytes
                .iter()
                .filter_map(|(k, bytes)| {
                    let verb = k.split(' ').next()?;
                    let calls = after.extender_calls.get(verb)?
                        - before.extender_calls.get(verb).copied().unwrap_or(0.0);
                    let b0 = before.extender_bytes.get(k).copied().unwrap_or(0.0);
                    (calls > 0.0).then(|| (k.clone(), (bytes - b0) / calls))
                })
                .collect(),
        }
    }

    /// CPU ms per pod of every control-plane process (not the harness).
    pub fn control_plane_cpu_ms(&self) -> f64 {
        self.cpu_ms
            .iter()
            .filter(|(k, _)| k.as_str() != "harness")
            .map(|(_, v)| v)
            .sum()
    }

    pub fn total_requests(&self) -> f64 {
        self.requests.values().sum()
    }

    pub fn total_watch_events(&self) -> f64 {
        self.watch_events.values().sum()
    }
}
