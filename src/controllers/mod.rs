//! Loops beside the request handlers that act on the cluster on their own
//! schedule: gpugate's own preemption, the end of holds whose time is
//! up, and node locks a dead bind left behind (Kueue's admission check is
//! `kueue::controller`). Each owns what it works through (its API handle, its events, its
//! metrics); `serve` starts them.

pub mod defragmentation;
pub mod expiry;
pub mod orphaned_locks;
pub mod preemption;
