//! gpugate: GPU-sharing admission webhook, policy gateway and kube-scheduler
//! extender for Kubernetes, wire-compatible with HAMi's device plugin.
//!
//! The placement engine ([`engine`]) is pure and synchronous; HAMi's wire
//! formats live in [`hami`]; reading files and talking to Kubernetes happen
//! at the edges ([`cluster`], [`simulate`]).
#![forbid(unsafe_code)]

pub mod admission;
pub mod bind;
pub mod capacity;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controllers;
pub mod devices;
pub mod engine;
pub mod explain;
pub mod extender;
pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod hami;
pub mod kueue;
pub mod log;
pub mod placement;
pub mod serve;
pub mod server;
pub mod simulate;
pub mod supervisor;
pub mod top;
