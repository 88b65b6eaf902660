//! Loops beside the request handlers that act on the cluster on their own
//! schedule: gpugate's own preemption, and the end of holds whose time is
//! up. Each owns what it works through (its API handle, its events, its
//! metrics); `serve` starts them.

pub mod expiry;
pub mod preemption;
