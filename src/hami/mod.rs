//! HAMi's wire formats: the annotations that HAMi's device plugin writes on
//! nodes and reads from pods. Every decoder returns a [`DecodeError`] naming
//! the annotation and the piece it could not understand; none panics.
//!
//! Formats are described in `../shared/hami-compat.md` sections 3 and 4 and
//! summarised in `docs/architecture.md`.

pub mod binding;
pub mod cordon;
#[doc(hidden)]
pub mod fuzzing;
pub mod handshake;
pub mod keys;
pub mod mig;
pub mod node_lock;
pub mod pair_scores;
pub mod pod_devices;
pub mod register;

pub use cordon::DeviceCordon;
pub use handshake::Handshake;
pub use node_lock::{LockHolder, NodeLock};
pub use pair_scores::PairScores;
pub use pod_devices::{ContainerDevice, PodDevices};
pub use register::DeviceInfo;

/// The longest excerpt of a bad piece quoted in an error message, so that a
/// megabyte of garbage does not become a megabyte of log line.
const MAX_PIECE_CHARS: usize = 80;

/// A HAMi annotation value that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {problem} (in {piece:?})")]
pub struct DecodeError {
    /// The annotation key, e.g. `hami.io/node-nvidia-register`.
    pub annotation: &'static str,
    /// The offending part of the value (truncated).
    pub piece: String,
    /// What is wrong with it.
    pub problem: String,
}

impl DecodeError {
    pub fn new(annotation: &'static str, piece: &str, problem: impl Into<String>) -> Self {
        let piece = if piece.chars().count() > MAX_PIECE_CHARS {
            let cut: String = piece.chars().take(MAX_PIECE_CHARS).collect();
            format!("{cut}...")
        } else {
            piece.to_string()
        };
        Self {
            annotation,
            piece,
            problem: problem.into(),
        }
    }

    /// The same error about another annotation of the same format (a
    /// device kind's register or score annotation: every kind registers
    /// in the same format under its own key).
    pub fn in_annotation(self, annotation: &'static str) -> Self {
        Self { annotation, ..self }
    }
}

/// Test helper: `result` must be an error about `annotation`.
#[cfg(test)]
pub(crate) fn expect_decode_error<T: std::fmt::Debug>(
    value: &str,
    result: Result<T, DecodeError>,
    annotation: &str,
) -> DecodeError {
    match result {
        Ok(v) => panic!("{value:?} decoded to {v:?}"),
        Err(e) => {
            assert_eq!(e.annotation, annotation);
            e
        }
    }
}
