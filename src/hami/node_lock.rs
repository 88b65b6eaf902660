//! The node lock, `hami.io/mutex.lock` (hami-compat.md 4.3):
//! `<RFC 3339 time>,<pod namespace>,<pod name>`, or just `<RFC 3339 time>`
//! as written by old HAMi versions.
//!
//! HAMi writes the time in the scheduler's local time zone with whole
//! seconds (Go's `time.RFC3339`); gpugate writes UTC (`Z`), which HAMi reads
//! equally well.

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
