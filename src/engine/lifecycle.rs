//! When a pod's containers run, and so what a pod holds at its peak:
//! Kubernetes' pod resource rule, sidecars included (KEP-753, "Pod
//! resources" in the sidecar containers documentation).
//!
//! - Init containers run one at a time, each beside the sidecars started
//!   before it.
//! - A sidecar (an init container with `restartPolicy: Always`) starts in
//!   init order and keeps running for the pod's life: it adds to every
//!   container started after it, app containers included.
//! - App containers run together, beside every sidecar.
//!
//! The pod holds the larger of its init phase's peak and its running phase.
//! This is the one place the rule is written; placement, the ledger,
//! quotas and namespace policy limits all count through [`pod_peak`].

/// The part a container plays in a pod's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ContainerKind {
    /// An init container that runs to completion.
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    /// A container of `spec.containers`.
    #[default]
    App,
}

impl ContainerKind {
    /// The kind of a container listed under `initContainers` (`init`) or
    /// `containers`, with its `restartPolicy`. Only init containers can be
    /// sidecars; a restart policy on an app container changes nothing here.
    pub fn of(init: bool, restart_policy: Option<&str>) -> Self {
        match (init, restart_policy) {
            (true, Some("Always")) => ContainerKind::Sidecar,
            (true, _) => ContainerKind::Init,
            (false, _) => ContainerKind::App,
        }
    }

    /// Whether the container is listed under `initContainers`.
    pub fn is_init_list(self) -> bool {
        matches!(self, ContainerKind::Init | ContainerKind::Sidecar)
    }

    /// Whether the container runs beside the app containers (an app
    /// container or a sidecar), as opposed to before them.
    pub fn runs_with_app(self) -> bool {
        matches!(self, ContainerKind::Sidecar | ContainerKind::App)
    }
}

/// An amount that adds up when containers run side by side and takes the
/// larger when they run one after another.
pub trait Amount: Copy + Default {
    fn plus(self, other: Self) -> Self;
    fn larger(self, other: Self) -> Self;
}

impl Amount for u64 {
    fn plus(self, other: Self) -> Self {
        self.saturating_add(other)
    }

    fn larger(self, other: Self) -> Self {
        self.max(other)
    }
}

/// What a pod holds at its peak, from each container's amount in pod
/// order (init containers first, as listed, then app containers).
pub fn pod_peak<A: Amount>(containers: impl IntoIterator<Item = (ContainerKind, A)>) -> A {
    let mut sidecars = A::default();
    let mut init_peak = A::default();
    let mut app = A::default();
    for (kind, amount) in containers {
        match kind {
            ContainerKind::Init => init_peak = init_peak.larger(sidecars.plus(amount)),
            ContainerKind::Sidecar => {
                sidecars = sidecars.plus(amount);
                init_peak = init_peak.larger(sidecars);
            }
            ContainerKind::App => app = app.plus(amount),
        }
    }
    init_peak.larger(app.plus(sidecars))
}

#[cfg(test)]
mod tests {
    use super::ContainerKind::{App, Init, Sidecar};
    use super::*;

    #[test]
    fn kinds_from_the_spec() {
        assert_eq!(ContainerKind::of(true, Some("Always")), Sidecar);
        assert_eq!(ContainerKind::of(true, None), Init);
        assert_eq!(ContainerKind::of(true, Some("OnFailure")), Init);
        assert_eq!(ContainerKind::of(false, Some("Always")), App);
        assert_eq!(ContainerKind::of(false, None), App);
    }

    #[test]
    fn without_sidecars_init_peak_against_app_sum() {
        assert_eq!(pod_peak([(Init, 9u64), (Init, 2), (App, 3), (App, 4)]), 9);
        assert_eq!(pod_peak([(Init, 5u64), (App, 3), (App, 4)]), 7);
        assert_eq!(pod_peak(Vec::<(ContainerKind, u64)>::new()), 0);
    }

    #[test]
    fn a_sidecar_adds_to_the_app_containers_not_to_the_init_peak() {
        // The pod: a 10,000 MiB sidecar beside a 10,000 MiB app.
        assert_eq!(pod_peak([(Sidecar, 10_000u64), (App, 10_000)]), 20_000);
        // An init container after a sidecar runs beside it.
        assert_eq!(pod_peak([(Sidecar, 4u64), (Init, 10), (App, 1)]), 14);
        // One before it does not.
        assert_eq!(pod_peak([(Init, 10u64), (Sidecar, 4), (App, 1)]), 10);
        // Kubernetes' documented example shape: sidecars accumulate.
        assert_eq!(
            pod_peak([
                (Sidecar, 1u64),
                (Init, 2),
                (Sidecar, 3),
                (Init, 5),
                (App, 1)
            ]),
            9
        );
    }

    proptest::proptest! {
        /// The peak is at least what any single phase needs: every app
        /// container and sidecar together, and each init container with
        /// the sidecars started before it.
        #[test]
        fn peak_covers_every_phase(
            list in proptest::collection::vec((0u8..3, 0u64..1000), 0..8)
        ) {
            let kinds = [Init, Sidecar, App];
            let containers: Vec<(ContainerKind, u64)> =
                list.iter().map(|&(k, a)| (kinds[usize::from(k)], a)).collect();
            // Init-list containers come first, in order.
            let mut ordered: Vec<_> = containers.iter().copied().filter(|c| c.0 != App).collect();
            ordered.extend(containers.iter().copied().filter(|c| c.0 == App));
            let peak = pod_peak(ordered.iter().copied());
            let running: u64 = ordered.iter().filter(|c| c.0.runs_with_app()).map(|c| c.1).sum();
            proptest::prop_assert!(peak >= running);
            let mut before = 0;
            for &(kind, amount) in &ordered {
                match kind {
                    Init => proptest::prop_assert!(peak >= before + amount),
                    Sidecar => before += amount,
                    App => {}
                }
            }
            // And it is exactly one of those phases.
            let mut phases = vec![running];
            let mut before = 0;
            for &(kind, amount) in &ordered {
                match kind {
                    Init => phases.push(before + amount),
                    Sidecar => { before += amount; phases.push(before); }
                    App => {}
                }
            }
            proptest::prop_assert_eq!(Some(peak), phases.into_iter().max());
        }
    }
}
