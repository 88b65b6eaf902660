//! The node lock, `hami.io/mutex.lock` (hami-compat.md 4.3):
//! `<RFC 3339 time>,<pod namespace>,<pod name>`, or just `<RFC 3339 time>`
//! as written by old HAMi versions.
//!
//! HAMi v2.10 writes the time in the scheduler's local time zone with whole
//! seconds (Go's `time.RFC3339`), HAMi master with nanoseconds
//! (`time.RFC3339Nano`); gpugate reads both and writes UTC (`Z`) with whole
//! seconds, which every HAMi version reads.
//!
//! [`NodeLock::takeover`] is the one rule for when a lock held by another
//! pod may be taken over (a bind) or released (the orphan sweep): never
//! while its holder is bound to the node and still waits for its device
//! plugin, which finds the pod an `Allocate` is for through this lock
//! (HAMi issue #3096: a lock taken over there gave one pod's container the
//! other pod's devices).

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::DecodeError;
use super::keys::NODE_LOCK;

/// The pod that took a node lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub namespace: String,
    pub name: String,
}

/// A node lock: when it was taken and, unless written by an old HAMi, by
/// which pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLock {
    pub time: Timestamp,
    pub holder: Option<LockHolder>,
}

impl NodeLock {
    /// A lock taken at `time` by the pod `namespace/name`.
    pub fn new(time: Timestamp, namespace: &str, name: &str) -> Self {
        Self {
            time,
            holder: Some(LockHolder {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
        }
    }

    /// The lock is older than `timeout` at `now` (HAMi: age > timeout). A
    /// lock from the future (clock skew) is not expired.
    pub fn is_expired(&self, now: Timestamp, timeout: Duration) -> bool {
        match SignedDuration::try_from(timeout) {
            Ok(timeout) => now.duration_since(self.time) > timeout,
            // A timeout beyond jiff's range never passes.
            Err(_) => false,
        }
    }

    /// How long from `now` until the lock is older than `timeout` (zero
    /// once it is; `None` when that is beyond reach).
    pub fn expires_in(&self, now: Timestamp, timeout: Duration) -> Option<Duration> {
        let timeout = SignedDuration::try_from(timeout).ok()?;
        let left = timeout.checked_sub(now.duration_since(self.time))?;
        Some(Duration::try_from(left).unwrap_or(Duration::ZERO))
    }

    /// The lock names the pod `namespace/name` as its holder.
    pub fn is_held_by(&self, namespace: &str, name: &str) -> bool {
        self.holder
            .as_ref()
            .is_some_and(|h| h.namespace == namespace && h.name == name)
    }

    /// Whether another pod may take this lock over at `now`, its holder
    /// being `holder` (HAMi master #3127, and the orphan sweep's rule):
    ///
    /// - a holder that is gone, has finished or is bound to another node
    ///   will never be allocated here: at once;
    /// - a holder not bound anywhere: once no bind can still be running
    ///   for it (`unbound_after`), or the lock has expired;
    /// - a holder bound here: once the lock has expired, unless it still
    ///   waits for its device plugin; then never, however old the lock;
    /// - a lock that names nobody: once expired.
    pub fn takeover(&self, holder: &HolderState, now: Timestamp, rules: LockRules) -> Takeover {
        let who = self.holder.as_ref().map_or_else(String::new, |h| {
            format!("holder {}/{}", h.namespace, h.name)
        });
        let expired = self.is_expired(now, rules.expiry);
        let expired_why = || {
            format!(
                "expired (taken {}, expiry {} s)",
                encode_time(self.time),
                rules.expiry.as_secs()
            )
        };
        match holder {
            HolderState::Gone => Takeover::Allowed(format!("{who} is gone")),
            HolderState::Finished => Takeover::Allowed(format!("{who} has finished")),
            HolderState::BoundElsewhere(other) => {
                Takeover::Allowed(format!("{who} is bound to node {other}"))
            }
            HolderState::Unbound if self.is_expired(now, rules.unbound_after) => {
                Takeover::Allowed(format!(
                    "{who} is not bound {} s after the lock was taken: its bind ended without a Binding",
                    now.duration_since(self.time).as_secs()
                ))
            }
            HolderState::BoundHere {
                awaiting_allocation: true,
            } if expired => Takeover::Kept(Kept::AwaitingAllocation),
            HolderState::Unnamed | HolderState::Unbound | HolderState::BoundHere { .. }
                if expired =>
            {
                Takeover::Allowed(expired_why())
            }
            HolderState::Unnamed | HolderState::Unbound | HolderState::BoundHere { .. } => {
                Takeover::Kept(Kept::Live)
            }
        }
    }
}

/// What is known of the pod a lock names, read when another pod's bind
/// finds the lock held (or when the orphan sweep looks at it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderState {
    /// The lock names no pod (written by an old HAMi): only its age says
    /// anything.
    Unnamed,
    /// No pod of that name.
    Gone,
    /// Succeeded or Failed.
    Finished,
    /// Bound to another node than the lock's.
    BoundElsewhere(String),
    /// Not bound to any node.
    Unbound,
    /// Bound to the lock's node. `awaiting_allocation` while it is still
    /// `Pending` with `hami.io/bind-phase: allocating`: the kubelet has not
    /// admitted it, and when it does, HAMi's device plugin finds the pod
    /// through this lock.
    BoundHere { awaiting_allocation: bool },
}

/// How long a lock lives: [`NodeLock::takeover`]'s settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRules {
    /// `nodeLock.expirySeconds`: a lock older than this is stale, unless
    /// its holder waits for its device plugin.
    pub expiry: Duration,
    /// Longer than any bind may run (`bindTimeoutSeconds` and a margin): a
    /// holder still not bound after this never will be by that bind.
    pub unbound_after: Duration,
}

/// Whether a lock held by another pod may be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Takeover {
    /// It may: why.
    Allowed(String),
    /// Its holder keeps it.
    Kept(Kept),
}

/// Why a holder keeps its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Its bind, or its device plugin, will release it.
    Live,
    /// Expired, but the holder is bound to the node and still waits for
    /// its device plugin: taken over, the lock would make the plugin give
    /// the holder's containers the next pod's devices.
    AwaitingAllocation,
}

fn err(piece: &str, problem: impl Into<String>) -> DecodeError {
    DecodeError::new(NODE_LOCK, piece, problem)
}

/// Decodes `hami.io/mutex.lock`. The time may carry any offset and
/// fractional seconds; its UTC year must be 0000 to 9999 so that it can be
/// written back. With a `,` the value must have exactly three parts and
/// non-empty namespace and name.
pub fn decode_node_lock(value: &str) -> Result<NodeLock, DecodeError> {
    let Some((time, rest)) = value.split_once(',') else {
        return Ok(NodeLock {
            time: parse_time(value)?,
            holder: None,
        });
    };
    let mut parts = rest.split(',');
    let (Some(namespace), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(err(
            value,
            "expected <time>,<namespace>,<name> (exactly three comma-separated parts)",
        ));
    };
    if namespace.is_empty() {
        return Err(err(value, "empty holder namespace"));
    }
    if name.is_empty() {
        return Err(err(value, "empty holder name"));
    }
    Ok(NodeLock::new(parse_time(time)?, namespace, name))
}

fn parse_time(text: &str) -> Result<Timestamp, DecodeError> {
    let time: Timestamp = text
        .parse()
        .map_err(|e| err(text, format!("not an RFC 3339 time: {e}")))?;
    if !(0..=9999).contains(&TimeZone::UTC.to_datetime(time).year()) {
        return Err(err(text, "time out of range (UTC year 0000 to 9999)"));
    }
    Ok(time)
}

/// Encodes a lock as HAMi does, the time in UTC with whole seconds
/// (`2006-01-02T15:04:05Z`); sub-second precision is dropped.
pub fn encode_node_lock(lock: &NodeLock) -> String {
    let time = encode_time(lock.time);
    match &lock.holder {
        Some(h) => format!("{time},{},{}", h.namespace, h.name),
        None => time,
    }
}

fn encode_time(time: Timestamp) -> String {
    let t = TimeZone::UTC.to_datetime(time);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn decode_err(value: &str) -> DecodeError {
        crate::hami::expect_decode_error(value, decode_node_lock(value), NODE_LOCK)
    }

    #[test]
    fn hami_value_with_local_offset() {
        let l = decode_node_lock("2024-09-28T15:04:05+08:00,default,train-0").unwrap();
        assert_eq!(l.time, ts("2024-09-28T07:04:05Z"));
        assert!(l.is_held_by("default", "train-0"));
        assert!(!l.is_held_by("default", "train-1"));
        assert!(!l.is_held_by("kube-system", "train-0"));
        assert_eq!(encode_node_lock(&l), "2024-09-28T07:04:05Z,default,train-0");
    }

    #[test]
    fn legacy_time_only() {
        let l = decode_node_lock("2024-09-28T07:04:05Z").unwrap();
        assert_eq!(l.holder, None);
        assert!(!l.is_held_by("", ""));
        assert_eq!(encode_node_lock(&l), "2024-09-28T07:04:05Z");
    }

    #[test]
    fn fractional_seconds_are_read_and_dropped_on_write() {
        let l = decode_node_lock("2024-09-28T07:04:05.999999999-00:30,ns,p").unwrap();
        assert_eq!(l.time, ts("2024-09-28T07:34:05.999999999Z"));
        assert_eq!(encode_node_lock(&l), "2024-09-28T07:34:05Z,ns,p");
    }

    #[test]
    fn round_trip_whole_seconds() {
        for l in [
            NodeLock::new(ts("2025-01-01T00:00:00Z"), "a", "b"),
            NodeLock::new(ts("0000-01-01T00:00:00Z"), "a", "b"),
            NodeLock {
                time: ts("9999-12-30T22:00:00Z"),
                holder: None,
            },
        ] {
            assert_eq!(decode_node_lock(&encode_node_lock(&l)).unwrap(), l);
        }
    }

    #[test]
    fn expiry() {
        let l = NodeLock::new(ts("2025-01-01T00:00:00Z"), "a", "b");
        let five = Duration::from_secs(300);
        assert!(!l.is_expired(ts("2025-01-01T00:05:00Z"), five));
        assert!(l.is_expired(ts("2025-01-01T00:05:00.000000001Z"), five));
        assert!(!l.is_expired(ts("2024-12-31T00:00:00Z"), five));
        assert!(!l.is_expired(ts("2025-01-01T00:05:01Z"), Duration::MAX));
        assert!(l.is_expired(ts("2025-01-01T00:00:01Z"), Duration::ZERO));
    }

    /// HAMi master writes lock times with nanoseconds (RFC 3339 Nano, in
    /// the scheduler's zone); they are read to the nanosecond, and expiry
    /// counts from there.
    #[test]
    fn hami_master_nanosecond_times() {
        let l = decode_node_lock("2026-10-09T16:15:42.123456789+08:00,ml,train-0").unwrap();
        assert_eq!(l.time, ts("2026-10-09T08:15:42.123456789Z"));
        assert!(l.is_held_by("ml", "train-0"));
        let five = Duration::from_secs(300);
        assert!(!l.is_expired(ts("2026-10-09T08:20:42.123456789Z"), five));
        assert!(l.is_expired(ts("2026-10-09T08:20:42.12345679Z"), five));
        let l = decode_node_lock("2026-10-09T08:15:42.5Z").unwrap();
        assert_eq!(l.time, ts("2026-10-09T08:15:42.5Z"));
        assert_eq!(l.holder, None);
        // Go's RFC3339Nano drops trailing zeros, and may drop the fraction.
        for v in [
            "2026-10-09T08:15:42.1Z,a,b",
            "2026-10-09T08:15:42.000000001Z,a,b",
            "2026-10-09T08:15:42Z,a,b",
        ] {
            assert!(decode_node_lock(v).is_ok(), "{v}");
        }
    }

    /// The takeover rule, holder state by holder state, before and after
    /// the lock expires and the bind budget passes.
    #[test]
    fn takeover_rule() {
        let l = NodeLock::new(ts("2026-01-01T00:00:00Z"), "ml", "p");
        let rules = LockRules {
            expiry: Duration::from_secs(300),
            unbound_after: Duration::from_secs(30),
        };
        let young = ts("2026-01-01T00:00:10Z");
        let past_budget = ts("2026-01-01T00:01:00Z");
        let expired = ts("2026-01-01T00:05:01Z");
        let years = ts("2030-01-01T00:00:00Z");
        let allowed = |t: Takeover| match t {
            Takeover::Allowed(why) => Some(why),
            Takeover::Kept(_) => None,
        };
        let here = |awaiting_allocation| HolderState::BoundHere {
            awaiting_allocation,
        };
        for now in [young, past_budget, expired] {
            for (state, needle) in [
                (HolderState::Gone, "holder ml/p is gone"),
                (HolderState::Finished, "has finished"),
                (HolderState::BoundElsewhere("n2".into()), "bound to node n2"),
            ] {
                let why = allowed(l.takeover(&state, now, rules)).unwrap();
                assert!(why.contains(needle), "{why}");
            }
        }
        // Unbound: a bind may still be running, until its budget is past.
        assert_eq!(
            l.takeover(&HolderState::Unbound, young, rules),
            Takeover::Kept(Kept::Live)
        );
        let why = allowed(l.takeover(&HolderState::Unbound, past_budget, rules)).unwrap();
        assert!(why.contains("not bound 60 s after"), "{why}");
        // Bound here: live until expiry; then taken over unless it still
        // waits for its device plugin, which it keeps the lock for.
        for now in [young, past_budget] {
            for awaiting in [false, true] {
                assert_eq!(
                    l.takeover(&here(awaiting), now, rules),
                    Takeover::Kept(Kept::Live)
                );
            }
        }
        let why = allowed(l.takeover(&here(false), expired, rules)).unwrap();
        assert!(
            why.starts_with("expired (taken 2026-01-01T00:00:00Z, expiry 300 s)"),
            "{why}"
        );
        for now in [expired, years] {
            assert_eq!(
                l.takeover(&here(true), now, rules),
                Takeover::Kept(Kept::AwaitingAllocation)
            );
        }
        // A lock naming nobody: only its age counts.
        let legacy = NodeLock {
            time: l.time,
            holder: None,
        };
        assert_eq!(
            legacy.takeover(&HolderState::Unnamed, past_budget, rules),
            Takeover::Kept(Kept::Live)
        );
        assert!(allowed(legacy.takeover(&HolderState::Unnamed, expired, rules)).is_some());
    }

    #[test]
    fn errors() {
        let cases = [
            ("", "", "RFC 3339"),
            ("yesterday", "yesterday", "RFC 3339"),
            ("2024-09-28T07:04:05", "2024-09-28T07:04:05", "RFC 3339"),
            (
                "2024-09-28T07:04:05Z,ns",
                "2024-09-28T07:04:05Z,ns",
                "three",
            ),
            (
                "2024-09-28T07:04:05Z,ns,p,x",
                "2024-09-28T07:04:05Z,ns,p,x",
                "three",
            ),
            (
                "2024-09-28T07:04:05Z,,p",
                "2024-09-28T07:04:05Z,,p",
                "namespace",
            ),
            (
                "2024-09-28T07:04:05Z,ns,",
                "2024-09-28T07:04:05Z,ns,",
                "name",
            ),
            (",ns,p", "", "RFC 3339"),
            (
                "2024-02-30T00:00:00Z,ns,p",
                "2024-02-30T00:00:00Z",
                "RFC 3339",
            ),
            (
                "0000-01-01T00:00:00+01:00",
                "0000-01-01T00:00:00+01:00",
                "range",
            ),
            (
                "9999-12-31T23:00:00-05:00",
                "9999-12-31T23:00:00-05:00",
                "RFC 3339",
            ),
        ];
        for (value, piece, needle) in cases {
            let e = decode_err(value);
            assert_eq!(e.piece, piece, "{value:?}");
            assert!(e.problem.contains(needle), "{value:?}: {e}");
        }
    }
}
