//! The span of one extender call, its fields declared and recorded here
//! only: a field recorded under a name the span does not declare is
//! silently dropped by `tracing`, so no other module names them.

use k8s_openapi::api::core::v1::Pod;
use tracing::field::Empty;

use crate::cluster::pod_namespace;

use super::wire::BindingArgs;

/// The verb, then the pod (and for `/bind` the node) once its arguments
/// are read, then the outcome.
pub fn call_span(verb: &'static str) -> tracing::Span {
    tracing::info_span!(
        "extender",
        verb,
        uid = Empty,
        namespace = Empty,
        pod = Empty,
        node = Empty,
        outcome = Empty,
    )
}

/// Names the pod in the current span (the extender call's).
pub fn record_pod(pod: &Pod) {
    let span = tracing::Span::current();
    span.record("namespace", pod_namespace(pod));
    if let Some(name) = pod.metadata.name.as_deref() {
        span.record("pod", name);
    }
    if let Some(uid) = pod.metadata.uid.as_deref() {
        span.record("uid", uid);
    }
}

/// Names the pod and node of a bind in the current span.
pub fn record_binding(args: &BindingArgs) {
    let span = tracing::Span::current();
    span.record("namespace", args.pod_namespace.as_str());
    span.record("pod", args.pod_name.as_str());
    span.record("uid", args.pod_uid.as_str());
    span.record("node", args.node.as_str());
}

/// The call's outcome in the current span.
pub fn record_outcome(ok: bool) {
    tracing::Span::current().record("outcome", if ok { "ok" } else { "error" });
}
