//! Kueue's admission check (docs/install.md, "Kueue"): Kueue asks whether
//! a workload that has reserved quota can be placed; gpugate answers from
//! its placement engine and holds the places (`check`). The Workload as
//! read and written is in `workload`; the loop that watches and answers,
//! on the leading replica, is `controller`.

pub mod check;
pub mod controller;
pub mod workload;
