//! Fitting a pod on one node: the choice of GPUs under the GPU policy, on
//! the per-GPU checks of [`super::checks`].

use super::chain::ChainCandidate;
pub use super::checks::{ZoneRule, check_gpu};
use super::device::{Gpu, Node, Usage};
use super::grouping;
use super::joint;
use super::lifecycle::ContainerKind;
use super::plan::PodPlan;
use super::policy::{GpuPolicy, ScoringWeights, device_score};
use super::reason::{Reason, ReasonCounts, Rejection};
use super::request::GpuRequest;
use super::topology;
use crate::devices::Grouping;

/// Reusable buffers so that evaluating thousands of nodes allocates nothing
/// per node.
#[derive(Debug, Default)]
pub struct Scratch {
    app_usage: Vec<Usage>,
    candidates: Vec<(usize, Usage)>,
    ranked: Vec<(f64, usize)>,
    /// Candidates with their sort keys under a policy chain.
    chained: Vec<(ChainCandidate, usize)>,
    chosen: Vec<usize>,
    pool: Vec<usize>,
    /// (container index, GPU position, what it takes) of the last fit.
    pub(crate) grants: Vec<(usize, usize, Usage)>,
    /// Steps the joint search has spent with this scratch (one evaluation
    /// of all nodes), against [`joint::JOINT_TOTAL_BUDGET`].
    pub(crate) joint_spent: usize,
    /// The last container fitted asked for a profile none of the node's
    /// gives (`resolve_on`): its failure is `ModeNotFit`.
    mode_not_fit: bool,
}

/// Fits every container of `plan` on `node`, any GPU for any container
/// ([`fit_pod_in`] without zone rules).
pub fn fit_pod(node: &Node, plan: &PodPlan, scratch: &mut Scratch) -> Result<(), Rejection> {
    fit_pod_in(node, plan, &[], scratch)
}

/// Fits every container of `plan` on `node`, container `i` under
/// `rules[i]` (beyond its end: any GPU). On success `scratch.grants`
/// holds the chosen GPUs. Containers are fitted beside what runs with them
/// (see [`super::lifecycle`]): sidecars and app containers add up on the
/// node's usage, in pod order; each init container starts from the node's
/// usage plus the sidecars started before it (init containers run one
/// after another).
pub fn fit_pod_in(
    node: &Node,
    plan: &PodPlan,
    rules: &[ZoneRule],
    scratch: &mut Scratch,
) -> Result<(), Rejection> {
    scratch.grants.clear();
    if node.gpus.is_empty() {
        return Err(Rejection::NodeUnregistered);
    }
    let available = u32::try_from(node.gpus.len()).unwrap_or(u32::MAX);
    // The node's usage plus the sidecars and app containers fitted so far:
    // copied from the node only once a container's GPUs must count for a
    // later one (most pods have one GPU container, and the copy of every
    // node's usage was a sixth of an evaluation).
    let mut app = std::mem::take(&mut scratch.app_usage);
    app.clear();
    let mut copied = false;
    let rule_of = |ci: usize| rules.get(ci).copied().unwrap_or_default();
    let gpu_container =
        |i: usize| plan.request.containers[i].gpu.is_some() && rule_of(i) != ZoneRule::Skip;
    let containers = plan.request.containers.len();
    for (ci, container) in plan.request.containers.iter().enumerate() {
        let rule = rule_of(ci);
        let Some(req) = container.gpu.as_ref().filter(|_| rule != ZoneRule::Skip) else {
            continue;
        };
        if req.count > available {
            // MIG GPUs may give one container several instances. Only the
            // pod's kind of device counts (hami-vendors.md 1.3).
            let most = most_grants(node, plan.selection.kind);
            if req.count > most {
                scratch.app_usage = app;
                return Err(Rejection::NodeInsufficientDevice {
                    container: container.name.clone(),
                    requested: req.count,
                    available: most,
                });
            }
        }
        let usage: &[Usage] = if copied { &app } else { &node.usage };
        let before = scratch.grants.len();
        let result = fit_container(node, usage, (ci, rule), req, plan, scratch);
        // An init container's GPUs are its own (init containers run one
        // after another); an app container's or sidecar's count for the
        // GPU containers after it.
        if result.is_ok()
            && container.kind != ContainerKind::Init
            && (ci + 1..containers).any(gpu_container)
        {
            if !copied {
                app.extend_from_slice(&node.usage);
                copied = true;
            }
            for &(_, pos, take) in &scratch.grants[before..] {
                if let Some(u) = app.get_mut(pos) {
                    u.add(&take);
                }
            }
        }
        if let Err(counts) = result {
            if std::mem::take(&mut scratch.mode_not_fit) {
                scratch.app_usage = app;
                return Err(mode_not_fit(node, req, &container.name));
            }
            // Containers chosen one by one can miss an assignment that
            // exists when chosen together (see super::joint).
            let gpu_containers = plan
                .request
                .containers
                .iter()
                .enumerate()
                .filter(|(i, c)| c.gpu.is_some() && rule_of(*i) != ZoneRule::Skip)
                .count();
            let budget = joint::JOINT_BUDGET
                .min(joint::JOINT_TOTAL_BUDGET.saturating_sub(scratch.joint_spent));
            // The joint search knows no grouping rule (super::grouping),
            // nor the rules applied after the per-GPU loop (one size per
            // device, core masks, compute units, shared devices, profiles).
            let r = plan.selection.rules;
            let free = r.grouping == Grouping::Any && !r.after_loop;
            if gpu_containers > 1 && budget > 0 && free {
                let (found, spent) = joint::assign_jointly(node, plan, rules, budget);
                scratch.joint_spent += spent;
                if let Some(grants) = found {
                    scratch.grants = grants;
                    scratch.app_usage = app;
                    return other_kinds(node, plan, rules, scratch);
                }
            }
            scratch.app_usage = app;
            return Err(Rejection::Devices {
                container: container.name.clone(),
                gpus: available,
                counts,
            });
        }
    }
    scratch.app_usage = app;
    other_kinds(node, plan, rules, scratch)
}

/// The request the per-GPU checks see for a container of a kind split
/// into profiles on `node` (the profile's; on a node without profiles one
/// device, which the per-GPU checks refuse by kind), or `None` when no
/// profile of the node's gives it. Out of line: the fit of every other
/// kind only tests whether it is needed.
#[cold]
#[inline(never)]
fn resolve_on(node: &Node, req: &GpuRequest) -> Option<GpuRequest> {
    if !node.has_profiles() {
        return Some(GpuRequest {
            count: 1,
            memory: super::request::Memory::Mib(0),
            cores: 0,
        });
    }
    node.profiles().resolve(req).map(|(resolved, _)| resolved)
}

/// Why no profile of the node's gives a container's request.
#[cold]
#[inline(never)]
fn mode_not_fit(node: &Node, req: &GpuRequest, container: &str) -> Rejection {
    let names: Vec<&str> = node
        .profiles()
        .profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    Rejection::ModeNotFit {
        container: container.to_string(),
        request: *req,
        profiles: names.join(", "),
    }
}

/// Done for a pod of one kind; the pod's other kinds fitted after its
/// first ([`fit_other_kinds`]) otherwise.
#[inline(always)]
fn other_kinds(
    node: &Node,
    plan: &PodPlan,
    rules: &[ZoneRule],
    scratch: &mut Scratch,
) -> Result<(), Rejection> {
    if plan.also.is_empty() {
        Ok(())
    } else {
        fit_other_kinds(node, plan, rules, scratch)
    }
}

/// The pod's other kinds (`PodPlan::also`), after its first kind's grants
/// (in `scratch.grants`): each on the same node, its grants added. Devices
/// of different kinds are different devices, so the node's usage is what
/// each fits on. Out of line: most pods ask for one kind, and their fit
/// stays as it was (docs/benchmarks.md, "Counted, not timed").
#[cold]
#[inline(never)]
fn fit_other_kinds(
    node: &Node,
    plan: &PodPlan,
    rules: &[ZoneRule],
    scratch: &mut Scratch,
) -> Result<(), Rejection> {
    let mut grants = std::mem::take(&mut scratch.grants);
    for other in &plan.also {
        let fitted = fit_pod_in(node, other, rules, scratch);
        grants.append(&mut scratch.grants);
        if let Err(rejection) = fitted {
            scratch.grants.clear();
            return Err(Rejection::OfKind {
                kind: other.selection.kind,
                rejection: Box::new(rejection),
            });
        }
    }
    scratch.grants = grants;
    Ok(())
}

/// Chooses the container's GPUs on `usage` (the node's, with what runs
/// beside it) into `s.grants`; the caller counts them for what follows.
fn fit_container(
    node: &Node,
    usage: &[Usage],
    (container, rule): (usize, ZoneRule),
    req: &GpuRequest,
    plan: &PodPlan,
    s: &mut Scratch,
) -> Result<(), ReasonCounts> {
    let mut counts = ReasonCounts::default();
    s.candidates.clear();
    let rules = plan.selection.rules;
    // A kind's own rules (`KindRules::after_loop`): the request the loop
    // sees, then the rules applied after it, both out of line, so that
    // the per-GPU loop every NVIDIA evaluation runs pays one test.
    let asked = *req;
    let mut cores_ignored = false;
    let req = &if rules.after_loop {
        cores_ignored = ignores_cores(&plan.selection);
        match loop_request(node, req, &plan.selection) {
            Some(r) => r,
            None => {
                s.mode_not_fit = true;
                return Err(counts);
            }
        }
    } else {
        *req
    };
    if cores_ignored {
        per_gpu::<true>(node, usage, rule, req, plan, s, &mut counts);
    } else {
        per_gpu::<false>(node, usage, rule, req, plan, s, &mut counts);
    }
    if rules.after_loop {
        after_loop(node, usage, (&asked, req), &plan.selection, s, &mut counts);
    }
    let n = req.count as usize;
    if s.candidates.len() < n {
        more_mig_instances(node, usage, req, plan, n, s);
    }
    let found = u32::try_from(s.candidates.len()).unwrap_or(u32::MAX);
    if s.candidates.len() < n {
        if found > 0 {
            counts.add(Reason::AllocatedCardsInsufficientRequest, found);
        }
        return Err(counts);
    }
    s.chosen.clear();
    let grouping = rules.grouping;
    let ok = if grouping != Grouping::Any && (n > 1 || grouping == Grouping::Board8) {
        let policy = (plan.gpu_policy, plan.scoring_weights);
        match grouping::choose(node, usage, &s.candidates, n, grouping, policy) {
            Ok(chosen) => {
                s.chosen = chosen;
                true
            }
            Err((reason, count)) => {
                counts.add(reason, count);
                return Err(counts);
            }
        }
    } else if plan.selection.numa_bind {
        choose_numa_bound(node, usage, n, (plan.gpu_policy, plan.scoring_weights), s)
    } else {
        let mut pool = std::mem::take(&mut s.pool);
        pool.clear();
        pool.extend(0..s.candidates.len());
        let chosen = choose_among(
            node,
            usage,
            &pool,
            n,
            (plan.gpu_policy, plan.scoring_weights),
            s,
        )
        .is_some();
        s.pool = pool;
        chosen
    };
    if !ok {
        counts.add(Reason::NumaNotFit, found);
        return Err(counts);
    }
    for i in 0..s.chosen.len() {
        let (pos, take) = s.candidates[s.chosen[i]];
        s.grants.push((container, pos, take));
    }
    Ok(())
}

/// The per-GPU checks of a container: each GPU's take into
/// `s.candidates`, the others counted by reason. `CORES_IGNORED`: the
/// cores already taken of a device do not count (a latency-sensitive
/// Metax sGPU pod, which takes none and shares any device of its class,
/// hami-vendors.md 5.5).
#[inline(always)]
fn per_gpu<const CORES_IGNORED: bool>(
    node: &Node,
    usage: &[Usage],
    rule: ZoneRule,
    req: &GpuRequest,
    plan: &PodPlan,
    s: &mut Scratch,
    counts: &mut ReasonCounts,
) {
    let mutex = plan.gpu_policy.is_mutex();
    for (pos, gpu) in node.gpus.iter().enumerate() {
        if !rule.allows(gpu) {
            counts.add(Reason::NumaZoneInsufficientGPU, 1);
            continue;
        }
        let mut used = usage.get(pos).copied().unwrap_or_default();
        if CORES_IGNORED {
            used.cores = 0;
        }
        match check_gpu(gpu, &used, req, &plan.selection, mutex) {
            Ok(take) => s.candidates.push((pos, take)),
            Err(reason) => counts.add(reason, 1),
        }
    }
}

/// Whether a pod's cores are out of the per-GPU checks: a
/// latency-sensitive pod of a kind with tenancy rules (Metax sGPU, 5.5:
/// HAMi checks no cores for it and grants it none).
#[cold]
#[inline(never)]
fn ignores_cores(sel: &super::selection::Selection) -> bool {
    sel.rules.tenancy && sel.tenancy.class == super::tenancy::AppClass::Online
}

/// The request a kind's per-GPU loop sees (`KindRules::after_loop`):
/// compute units are checked after the loop (AMD, 11.5), so the loop sees
/// no core request and none of its core rules apply; a kind split into
/// the node's profiles sees the profile's request (`resolve_on`; `None`
/// when no profile gives it); a pod whose cores are ignored
/// (`ignores_cores`) asks for none.
#[cold]
#[inline(never)]
fn loop_request(
    node: &Node,
    req: &GpuRequest,
    sel: &super::selection::Selection,
) -> Option<GpuRequest> {
    let rules = sel.rules;
    if rules.compute_units || ignores_cores(sel) {
        Some(GpuRequest { cores: 0, ..*req })
    } else if rules.profiles {
        resolve_on(node, req)
    } else {
        Some(*req)
    }
}

/// A kind's rules applied to the loop's candidates (`KindRules::
/// after_loop`), after the loop so that the per-GPU loop every NVIDIA
/// evaluation runs stays as it was (inside it, the one-size check cost 3%
/// of an evaluation). `asked` is the container's request as written,
/// `req` the one the loop saw.
#[cold]
#[inline(never)]
fn after_loop(
    node: &Node,
    usage: &[Usage],
    (asked, req): (&GpuRequest, &GpuRequest),
    sel: &super::selection::Selection,
    s: &mut Scratch,
    counts: &mut ReasonCounts,
) {
    let rules = sel.rules;
    // A device split into one size at a time (Kunlun vXPU, 8.5).
    if rules.one_size {
        s.candidates.retain(|(pos, take)| {
            let used = usage.get(*pos).copied().unwrap_or_default();
            let same = same_size(&used, take);
            if !same {
                counts.add(Reason::CardTemplateMismatch, 1);
            }
            same
        });
    }
    // A core of a device whose cores are a mask is its free bit (AWS
    // Neuron, 10.5).
    if rules.core_masks {
        for (pos, take) in &mut s.candidates {
            let used = usage.get(*pos).copied().unwrap_or_default();
            take.cores = super::core_masks::mask_taken(used.cores, take.cores);
        }
    }
    // A profile takes its slices of one device (Enflame DRS, 9.5).
    if rules.profiles {
        profile_slices(node, usage, req, s, counts);
    }
    // Every container on the devices of the pod's first (Mthreads, 7.5).
    if rules.same_devices {
        same_devices(node, s, counts);
    }
    // Pods of one class per device (Metax sGPU, 5.5).
    if rules.tenancy {
        tenancy_rules(node, (asked, req.count as usize), sel, s, counts);
    }
    // Compute units, per device (AMD, 11.5).
    if rules.compute_units {
        let percent = asked.cores;
        s.candidates.retain_mut(|(pos, take)| {
            let used = usage.get(*pos).copied().unwrap_or_default();
            let cap = node.gpus.get(*pos).map_or(0, |g| g.capacity.cores);
            match super::core_masks::compute_units(cap, used.cores, percent) {
                Some(n) => {
                    take.cores = n;
                    true
                }
                None => {
                    counts.add(Reason::CardInsufficientCore, 1);
                    false
                }
            }
        });
    }
}

/// A profile takes its slices of one device (Enflame DRS, 9.5): the
/// candidates with all of them free, where HAMi v2.10 asks for one (9.7);
/// `req` is the profile's (`resolve_on`). Out of line,
/// after the loop, so that the per-GPU loop of every other kind stays as
/// it was (docs/benchmarks.md, "Counted, not timed").
fn profile_slices(
    node: &Node,
    usage: &[Usage],
    req: &GpuRequest,
    s: &mut Scratch,
    counts: &mut ReasonCounts,
) {
    let mem = u32::try_from(req.mem_on(0)).unwrap_or(u32::MAX);
    let slices = node
        .profiles()
        .taken(mem, req.cores)
        .map_or(1, |p| p.slices);
    s.candidates.retain_mut(|(pos, take)| {
        let used = usage.get(*pos).copied().unwrap_or_default();
        let cap = node.gpus.get(*pos).map_or(0, |g| g.capacity.slots);
        take.slots = slices;
        let free = cap.saturating_sub(used.slots) >= take.slots;
        if !free {
            counts.add(Reason::CardTimeSlicingExhausted, 1);
        }
        free
    });
}

/// A kind whose pods share a device by class (Metax sGPU, hami-vendors.md
/// 5.5; `super::tenancy`): the candidates whose pods' class and policy
/// take the pod; then, when more than `n` remain, HAMi's preference among
/// them: a latency-sensitive pod takes the devices with the fewest
/// latency-sensitive pods (`Tenants::online_order`), an unclassed pod
/// taking whole devices takes them from one MetaLink zone
/// (`link_zones`). The GPU policy chooses among what is left.
fn tenancy_rules(
    node: &Node,
    (asked, n): (&GpuRequest, usize),
    sel: &super::selection::Selection,
    s: &mut Scratch,
    counts: &mut ReasonCounts,
) {
    use super::tenancy::AppClass;
    let Some(keys) = sel.kind.kind().tenancy else {
        return;
    };
    // Idle is the ledger's: the pod's own earlier containers on a device
    // share its class and policy (HAMi sets the device's policy to the
    // pod's between containers, 5.5).
    s.candidates.retain(|(pos, _)| {
        let idle = node.usage.get(*pos).is_none_or(|u| u.slots == 0);
        let registered = node.gpus.get(*pos).map_or("", |g| g.mode());
        let refused =
            node.tenants(*pos)
                .refuses(keys, (sel.tenancy, asked.cores), idle, registered);
        if let Some(reason) = refused {
            counts.add(reason, 1);
        }
        refused.is_none()
    });
    if s.candidates.len() <= n {
        return;
    }
    match sel.tenancy.class {
        // One device (a classed pod asks for one, 5.4): the devices of the
        // best order, the GPU policy choosing among them, as HAMi's
        // candidates come in its policy's order and its sort keeps equal
        // ones in order. More (a pod that bypassed the webhook): the best
        // `n` by order, ties by index.
        AppClass::Online if n == 1 => {
            let best = s
                .candidates
                .iter()
                .map(|(pos, _)| node.tenants(*pos).online_order())
                .min();
            s.candidates
                .retain(|(pos, _)| Some(node.tenants(*pos).online_order()) == best);
        }
        AppClass::Online => {
            s.candidates
                .sort_by_key(|(pos, _)| node.tenants(*pos).online_order());
            s.candidates.truncate(n);
        }
        AppClass::Unclassed if asked.cores >= 100 => link_zones(node, n, s),
        _ => {}
    }
}

/// Whole devices for an unclassed pod (HAMi's `prioritizeExclusiveDevices`,
/// 5.5): the candidates of the smallest MetaLink zone (`Gpu::network`)
/// that holds `n`; else `n` taken zone by zone, smallest zone first, and
/// devices in no zone last. HAMi breaks ties between zones of one size
/// at random (a Go map's order); here the lower zone.
fn link_zones(node: &Node, n: usize, s: &mut Scratch) {
    let zone = |pos: usize| node.gpus.get(pos).and_then(Gpu::network);
    let mut sizes: std::collections::BTreeMap<u16, usize> = Default::default();
    for (pos, _) in &s.candidates {
        if let Some(z) = zone(*pos) {
            *sizes.entry(z).or_default() += 1;
        }
    }
    let fits = sizes
        .iter()
        .filter(|(_, size)| **size >= n)
        .min_by_key(|(z, size)| (**size, **z))
        .map(|(z, _)| *z);
    if let Some(z) = fits {
        s.candidates.retain(|(pos, _)| zone(*pos) == Some(z));
        return;
    }
    s.candidates.sort_by_key(|(pos, _)| match zone(*pos) {
        Some(z) => (false, sizes.get(&z).copied().unwrap_or(0), z),
        None => (true, 0, 0),
    });
    s.candidates.truncate(n);
}

/// Whether a device holding `used` holds only slices of `take`'s size
/// (or none).
fn same_size(used: &Usage, take: &Usage) -> bool {
    used.slots == 0 || u64::from(used.mem_mib) == u64::from(take.mem_mib) * u64::from(used.slots)
}

/// The most GPUs (grants) one container could get on the node: one per
/// GPU, and on a MIG GPU as many instances as its split count.
fn most_grants(node: &Node, kind: crate::devices::KindId) -> u32 {
    node.gpus
        .iter()
        .filter(|g| g.kind == kind)
        .map(Gpu::most_grants)
        .fold(0u32, u32::saturating_add)
}

/// Keeps only the candidates on devices of the kind that containers of
/// the pod before this one took, when they took any; the others are
/// counted `CardNotFoundCustomFilterRule` (HAMi's reason, 7.5).
#[cold]
fn same_devices(node: &Node, s: &mut Scratch, counts: &mut ReasonCounts) {
    let kind_of = |pos: usize| node.gpus.get(pos).map(|g| g.kind);
    let Some(kind) = s.candidates.first().and_then(|(pos, _)| kind_of(*pos)) else {
        return;
    };
    let taken: Vec<usize> = s
        .grants
        .iter()
        .map(|&(_, pos, _)| pos)
        .filter(|&pos| kind_of(pos) == Some(kind))
        .collect();
    if taken.is_empty() {
        return;
    }
    s.candidates.retain(|(pos, _)| {
        let keep = taken.contains(pos);
        if !keep {
            counts.add(Reason::CardNotFoundCustomFilterRule, 1);
        }
        keep
    });
}

/// A container that asks for more GPUs than have a free slice may take
/// several MIG instances of one GPU, as HAMi v2.10 allows (PR #2724):
/// adds to `s.candidates` further instances of the MIG GPUs already there,
/// each chosen on the GPU's usage with the instances before it, until the
/// container has `n` or no MIG GPU has another. Separate GPUs come first:
/// this runs only when they are too few. Every subset of one GPU's
/// instances fits on it (they do not overlap, and the memory and cores of
/// all of them do).
fn more_mig_instances(
    node: &Node,
    usage: &[Usage],
    req: &GpuRequest,
    plan: &PodPlan,
    n: usize,
    s: &mut Scratch,
) {
    let firsts = s.candidates.len();
    for c in 0..firsts {
        let (pos, first) = s.candidates[c];
        let gpu = &node.gpus[pos];
        if !gpu.is_mig() {
            continue;
        }
        let mut used = usage.get(pos).copied().unwrap_or_default();
        used.add(&first);
        while s.candidates.len() < n {
            match check_gpu(gpu, &used, req, &plan.selection, plan.gpu_policy.is_mutex()) {
                Ok(take) => {
                    used.add(&take);
                    s.candidates.push((pos, take));
                }
                Err(_) => break,
            }
        }
        if s.candidates.len() >= n {
            return;
        }
    }
}

/// Chooses `n` of the candidates listed by `pool` (indexes into
/// `s.candidates`) into `s.chosen`; returns the quality of the choice
/// (higher is better) so that NUMA groups can be compared.
fn choose_among(
    node: &Node,
    usage: &[Usage],
    pool: &[usize],
    n: usize,
    (policy, weights): (GpuPolicy, ScoringWeights),
    s: &mut Scratch,
) -> Option<f64> {
    if pool.len() < n {
        return None;
    }
    s.chosen.clear();
    match policy {
        _ if policy.is_topology() => {
            // Ties go to the least-used GPUs (the device score, with what
            // the container takes), then to the lowest index.
            let mut ranked: Vec<(f64, usize)> = pool
                .iter()
                .map(|&c| {
                    let (pos, take) = s.candidates[c];
                    let used = usage.get(pos).copied().unwrap_or_default();
                    (
                        device_score(&node.gpus[pos].capacity, &used, &take, weights),
                        pos,
                    )
                })
                .collect();
            ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let positions: Vec<usize> = ranked.into_iter().map(|(_, p)| p).collect();
            let score = |a: usize, b: usize| i64::from(node.pair_score(a, b));
            let set = topology::choose(&positions, n, score)?;
            let quality = if n == 1 {
                -(positions
                    .iter()
                    .filter(|&&p| p != set[0])
                    .map(|&p| score(set[0], p))
                    .sum::<i64>() as f64)
            } else {
                topology::set_score(&set, score) as f64
            };
            // A GPU may be in the set more than once (MIG instances of
            // one GPU): each time another of its candidates.
            for p in set {
                if let Some(c) = pool
                    .iter()
                    .copied()
                    .find(|&c| s.candidates[c].0 == p && !s.chosen.contains(&c))
                {
                    s.chosen.push(c);
                }
            }
            Some(quality)
        }
        GpuPolicy::Chain(chain) => {
            s.chained.clear();
            for &c in pool {
                let (pos, take) = s.candidates[c];
                let gpu = &node.gpus[pos];
                let used = usage.get(pos).copied().unwrap_or_default();
                let key = ChainCandidate {
                    score: device_score(&gpu.capacity, &used, &take, weights),
                    numa: gpu.numa,
                    index: gpu.index,
                };
                s.chained.push((key, c));
            }
            s.chained.sort_by(|a, b| chain.try_order(&a.0, &b.0, false));
            s.chosen.extend(s.chained.iter().take(n).map(|&(_, c)| c));
            // Chains pick the first NUMA group that fits (choose_numa_bound),
            // so the quality is not compared.
            Some(0.0)
        }
        // (TopologyAware is taken by the first arm; named for the match.)
        GpuPolicy::Binpack | GpuPolicy::Spread | GpuPolicy::Mutex | GpuPolicy::TopologyAware => {
            s.ranked.clear();
            for &c in pool {
                let (pos, take) = s.candidates[c];
                let used = usage.get(pos).copied().unwrap_or_default();
                let score = device_score(&node.gpus[pos].capacity, &used, &take, weights);
                // Binpack tries the fullest GPU first, spread the emptiest.
                let key = if policy == GpuPolicy::Binpack {
                    -score
                } else {
                    score
                };
                s.ranked.push((key, c));
            }
            // Candidates are in index order, so a stable sort keeps the lowest
            // index first among equal scores.
            s.ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut quality = 0.0;
            for &(key, c) in s.ranked.iter().take(n) {
                quality -= key;
                s.chosen.push(c);
            }
            Some(quality)
        }
    }
}

/// numa-bind: all GPUs of the container on one NUMA node; the best group
/// under the policy wins, the lowest NUMA id among equals. A sort chain
/// (not topology-aware) takes the first group that fits, highest NUMA id
/// first, as HAMi v2.10 does when it puts `numa` first in the chain.
fn choose_numa_bound(
    node: &Node,
    usage: &[Usage],
    n: usize,
    policy: (GpuPolicy, ScoringWeights),
    s: &mut Scratch,
) -> bool {
    let mut numas: Vec<i32> = s
        .candidates
        .iter()
        .map(|(p, _)| node.gpus[*p].numa)
        .collect();
    numas.sort_unstable();
    numas.dedup();
    if matches!(policy.0, GpuPolicy::Chain(_)) && !policy.0.is_topology() {
        return numas.iter().rev().any(|&numa| {
            let pool: Vec<usize> = (0..s.candidates.len())
                .filter(|&c| node.gpus[s.candidates[c].0].numa == numa)
                .collect();
            choose_among(node, usage, &pool, n, policy, s).is_some()
        });
    }
    let mut best: Option<(f64, Vec<usize>)> = None;
    for numa in numas {
        let pool: Vec<usize> = (0..s.candidates.len())
            .filter(|&c| node.gpus[s.candidates[c].0].numa == numa)
            .collect();
        if let Some(q) = choose_among(node, usage, &pool, n, policy, s)
            && best.as_ref().is_none_or(|(bq, _)| q > *bq)
        {
            best = Some((q, s.chosen.clone()));
        }
    }
    match best {
        Some((_, chosen)) => {
            s.chosen = chosen;
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::device::Gpu;
    use crate::engine::policy::NodePolicy;
    use crate::engine::request::{ContainerRequest, Memory, PodRequest};
    use crate::engine::selection::ModelPattern;
    use crate::engine::selection::Selection;

    const A100: &str = "NVIDIA A100-SXM4-40GB";

    fn cap(mem_mib: u64) -> Usage {
        Usage {
            slices: 0,
            unreserved: 0,
            unreadable: 0,
            slots: 10,
            mem_mib: u32::try_from(mem_mib).unwrap(),
            cores: 100,
        }
    }

    fn gpu(i: u32) -> Gpu {
        Gpu::new(format!("GPU-{i}"), i, A100, cap(40960))
    }

    fn used(slots: u32, mem_mib: u64, cores: u32) -> Usage {
        Usage {
            slices: 0,
            unreserved: 0,
            unreadable: 0,
            slots,
            mem_mib: u32::try_from(mem_mib).unwrap(),
            cores,
        }
    }

    fn req(count: u32, mem: u64, cores: u32) -> GpuRequest {
        GpuRequest {
            count,
            memory: Memory::Mib(mem),
            cores,
        }
    }

    fn check(g: &Gpu, u: Usage, r: GpuRequest) -> Result<Usage, Reason> {
        check_gpu(g, &u, &r, &Selection::default(), false)
    }

    #[test]
    fn each_fit_rule_has_its_reason() {
        let g = gpu(0);
        let free = Usage::default();
        assert_eq!(check(&g, free, req(1, 1000, 10)), Ok(used(1, 1000, 10)));

        let mut sick = gpu(0);
        sick.healthy = false;
        assert_eq!(check(&sick, free, req(1, 1, 0)), Err(Reason::CardNotHealth));

        let mut cordoned = gpu(0);
        cordoned.cordoned = true;
        assert_eq!(
            check(&cordoned, free, req(1, 1, 0)),
            Err(Reason::CardCordoned)
        );

        let t4_only = Selection {
            use_models: vec![ModelPattern::parse("T4").unwrap()],
            ..Default::default()
        };
        assert_eq!(
            check_gpu(&g, &free, &req(1, 1, 0), &t4_only, false),
            Err(Reason::CardTypeMismatch)
        );
        let mut mig = gpu(0);
        mig.set_mode("mig", Vec::new());
        assert_eq!(
            check(&mig, free, req(1, 1, 0)),
            Err(Reason::CardTypeMismatch)
        );

        let not_this = Selection {
            avoid_uuids: vec!["GPU-0".into()],
            ..Default::default()
        };
        assert_eq!(
            check_gpu(&g, &free, &req(1, 1, 0), &not_this, false),
            Err(Reason::CardUuidMismatch)
        );

        assert_eq!(
            check_gpu(
                &g,
                &used(1, 1, 1),
                &req(1, 1, 0),
                &Selection::default(),
                GpuPolicy::Mutex.is_mutex()
            ),
            Err(Reason::ExclusiveDeviceAllocateConflict)
        );
        // What one 40,000 MiB GPU answers, given what is used and asked.
        use Reason::*;
        let answers = |u: Usage, r: GpuRequest, want: Result<Usage, Reason>| {
            assert_eq!(check(&g, u, r), want, "used {u:?}, asked {r:?}");
        };
        answers(used(10, 0, 0), req(1, 1, 0), Err(CardTimeSlicingExhausted));
        answers(
            used(1, 40000, 0),
            req(1, 1000, 0),
            Err(CardInsufficientMemory),
        );
        answers(used(1, 0, 90), req(1, 1000, 20), Err(CardInsufficientCore));
        // gpucores 100 needs a GPU nobody uses, even one using no cores.
        answers(
            used(1, 1000, 0),
            req(1, 1000, 100),
            Err(ExclusiveDeviceAllocateConflict),
        );
        // gpucores 0 cannot land where every core is taken.
        answers(
            used(1, 1000, 100),
            req(1, 1000, 0),
            Err(CardComputeUnitsExhausted),
        );
        answers(used(1, 1000, 99), req(1, 1000, 0), Ok(used(1, 1000, 0)));
    }

    #[test]
    fn first_failing_check_wins() {
        let mut g = gpu(0);
        g.healthy = false;
        g.cordoned = true;
        assert_eq!(
            check(&g, used(10, 40960, 100), req(1, 1, 0)),
            Err(Reason::CardNotHealth)
        );
        assert_eq!(
            check(&gpu(0), used(10, 40960, 100), req(1, 1, 0)),
            Err(Reason::CardTimeSlicingExhausted)
        );
    }

    #[test]
    fn percentage_resolves_against_each_gpu() {
        let small = Gpu::new("GPU-S", 0, "NVIDIA-Tesla T4", cap(15360));
        let big = gpu(1);
        let r = GpuRequest {
            count: 1,
            memory: Memory::Percent(50),
            cores: 0,
        };
        assert_eq!(
            check(&small, Usage::default(), r).map(|u| u.mem_mib),
            Ok(7680)
        );
        assert_eq!(
            check(&big, Usage::default(), r).map(|u| u.mem_mib),
            Ok(20480)
        );
        assert_eq!(
            check(&small, used(1, 8000, 0), r),
            Err(Reason::CardInsufficientMemory)
        );
    }

    /// A plan of init (`true`) and app containers.
    fn plan(containers: Vec<(bool, Option<GpuRequest>)>, gpu_policy: GpuPolicy) -> PodPlan {
        let kinds = containers
            .into_iter()
            .map(|(init, gpu)| (ContainerKind::of(init, None), gpu))
            .collect();
        plan_of_kinds(kinds, gpu_policy)
    }

    fn plan_of_kinds(
        containers: Vec<(ContainerKind, Option<GpuRequest>)>,
        gpu_policy: GpuPolicy,
    ) -> PodPlan {
        PodPlan::new(
            PodRequest {
                device_kind: Default::default(),
                also: Vec::new(),
                containers: containers
                    .into_iter()
                    .enumerate()
                    .map(|(i, (kind, gpu))| ContainerRequest {
                        name: format!("c{i}"),
                        kind,
                        gpu,
                    })
                    .collect(),
            },
            NodePolicy::Binpack,
            gpu_policy,
        )
    }

    fn node(n: u32) -> Node {
        Node::new("n", (0..n).map(gpu).collect())
    }

    fn grants(s: &Scratch) -> Vec<(usize, usize)> {
        s.grants.iter().map(|(c, p, _)| (*c, *p)).collect()
    }

    #[test]
    fn reasons_aggregate_per_gpu_like_hami() {
        let mut n = node(4);
        n.add_usage(0, &used(1, 40000, 0));
        n.gpus_mut()[1].model = "NVIDIA-Tesla T4".into();
        n.gpus_mut()[1].model_words =
            crate::engine::device::model_words("NVIDIA-Tesla T4").into_boxed_slice();
        n.gpus_mut()[2].healthy = false;
        n.gpus_mut()[3].healthy = false;
        let mut p = plan(vec![(false, Some(req(2, 2000, 0)))], GpuPolicy::Spread);
        p.selection.use_models = vec![ModelPattern::parse("A100").unwrap()];
        let mut s = Scratch::default();
        let e = fit_pod(&n, &p, &mut s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1/4 CardInsufficientMemory, 2/4 CardNotHealth, 1/4 CardTypeMismatch"
        );
        // Partial success adds AllocatedCardsInsufficientRequest.
        n.gpus_mut()[2].healthy = true;
        let e = fit_pod(&n, &p, &mut s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1/4 AllocatedCardsInsufficientRequest, 1/4 CardInsufficientMemory, 1/4 CardNotHealth, 1/4 CardTypeMismatch"
        );
    }

    #[test]
    fn too_many_gpus_for_the_node_is_unresolvable() {
        let p = plan(vec![(false, Some(req(5, 1, 0)))], GpuPolicy::Spread);
        let e = fit_pod(&node(4), &p, &mut Scratch::default()).unwrap_err();
        assert!(matches!(
            e,
            Rejection::NodeInsufficientDevice {
                requested: 5,
                available: 4,
                ..
            }
        ));
        assert!(e.is_unresolvable());
        let e = fit_pod(&Node::new("x", vec![]), &p, &mut Scratch::default()).unwrap_err();
        assert_eq!(e, Rejection::NodeUnregistered);
    }

    #[test]
    fn binpack_fills_the_fullest_gpu_spread_the_emptiest() {
        // HAMi's design document: GPU1 used 10 cores / 2000 MiB, GPU2 70 / 6000
        // (8000 MiB each); a pod of 20 cores / 1000 MiB.
        let mut n = Node::new(
            "n",
            (0..2)
                .map(|i| Gpu::new(format!("GPU-{i}"), i, A100, cap(8000)))
                .collect(),
        );
        n.add_usage(0, &used(1, 2000, 10));
        n.add_usage(1, &used(1, 6000, 70));
        let mut s = Scratch::default();
        let bin = plan(vec![(false, Some(req(1, 1000, 20)))], GpuPolicy::Binpack);
        fit_pod(&n, &bin, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 1)]);
        let spread = plan(vec![(false, Some(req(1, 1000, 20)))], GpuPolicy::Spread);
        fit_pod(&n, &spread, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0)]);
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        let mut s = Scratch::default();
        for policy in [GpuPolicy::Binpack, GpuPolicy::Spread, GpuPolicy::Mutex] {
            fit_pod(
                &node(4),
                &plan(vec![(false, Some(req(2, 1, 0)))], policy),
                &mut s,
            )
            .unwrap();
            assert_eq!(grants(&s), [(0, 0), (0, 1)], "{policy}");
        }
    }

    #[test]
    fn app_containers_add_up_and_never_share_a_gpu_within_a_container() {
        let mut s = Scratch::default();
        // Two containers of 30000 MiB on 40960 MiB GPUs cannot share one.
        let p = plan(
            vec![
                (false, Some(req(1, 30000, 0))),
                (false, Some(req(1, 30000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        fit_pod(&node(2), &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (1, 1)]);
        let e = fit_pod(&node(1), &p, &mut s).unwrap_err();
        assert_eq!(e.to_string(), "1/1 CardInsufficientMemory");
        // A container's GPUs are distinct.
        let p = plan(vec![(false, Some(req(2, 100, 0)))], GpuPolicy::Binpack);
        fit_pod(&node(2), &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (0, 1)]);
    }

    #[test]
    fn init_containers_do_not_add_up() {
        let mut s = Scratch::default();
        // Two init containers of 30000 MiB run one after another on one GPU,
        // then an app container of 30000 MiB.
        let p = plan(
            vec![
                (true, Some(req(1, 30000, 0))),
                (true, Some(req(1, 30000, 0))),
                (false, Some(req(1, 30000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        fit_pod(&node(1), &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (1, 0), (2, 0)]);
    }

    #[test]
    fn a_sidecar_runs_beside_the_app_containers() {
        use ContainerKind::{App, Init, Sidecar};
        // The pod on one 40,960 MiB GPU: a 30,000 MiB sidecar and a
        // 30,000 MiB app container cannot share it, whatever the policy.
        for policy in [GpuPolicy::Binpack, GpuPolicy::Spread] {
            let p = plan_of_kinds(
                vec![
                    (Sidecar, Some(req(1, 30000, 0))),
                    (App, Some(req(1, 30000, 0))),
                ],
                policy,
            );
            let e = fit_pod(&node(1), &p, &mut Scratch::default()).unwrap_err();
            assert!(
                matches!(e, Rejection::Devices { ref container, .. } if container == "c1"),
                "{e}"
            );
            // On two GPUs each gets its own.
            let mut s = Scratch::default();
            fit_pod(&node(2), &p, &mut s).unwrap();
            let g = grants(&s);
            assert_eq!(g.len(), 2);
            assert_ne!(g[0].1, g[1].1, "{policy:?}: {g:?}");
        }
        // An init container runs beside the sidecars started before it:
        // after a 30,000 MiB sidecar, a 20,000 MiB init container does not
        // fit on the one GPU; before it, it does.
        let after = plan_of_kinds(
            vec![
                (Sidecar, Some(req(1, 30000, 0))),
                (Init, Some(req(1, 20000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        assert!(fit_pod(&node(1), &after, &mut Scratch::default()).is_err());
        let before = plan_of_kinds(
            vec![
                (Init, Some(req(1, 20000, 0))),
                (Sidecar, Some(req(1, 30000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        fit_pod(&node(1), &before, &mut Scratch::default()).unwrap();
        // Small slices of both share the GPU by the normal fit rules.
        let small = plan_of_kinds(
            vec![
                (Sidecar, Some(req(1, 10000, 0))),
                (App, Some(req(1, 10000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        let mut s = Scratch::default();
        fit_pod(&node(1), &small, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (1, 0)]);
    }

    #[test]
    fn an_init_container_that_fits_nowhere_fails_the_node() {
        // HAMi: "init request larger than any card filters the node", even
        // when the app containers would fit.
        let p = plan(
            vec![
                (true, Some(req(1, 50000, 0))),
                (false, Some(req(1, 1000, 0))),
            ],
            GpuPolicy::Binpack,
        );
        let e = fit_pod(&node(2), &p, &mut Scratch::default()).unwrap_err();
        assert_eq!(e.to_string(), "2/2 CardInsufficientMemory");
        assert!(matches!(e, Rejection::Devices { ref container, .. } if container == "c0"));
    }

    #[test]
    fn numa_bind_keeps_a_container_on_one_numa_node() {
        let mut n = node(4);
        for (i, numa) in [0, 1, 0, 1].into_iter().enumerate() {
            n.gpus_mut()[i].numa = numa;
        }
        let mut p = plan(vec![(false, Some(req(2, 100, 0)))], GpuPolicy::Spread);
        p.selection.numa_bind = true;
        let mut s = Scratch::default();
        fit_pod(&n, &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (0, 2)]);
        // Without numa-bind the lowest indexes win.
        p.selection.numa_bind = false;
        fit_pod(&n, &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (0, 1)]);
        // One free GPU per NUMA node: numa-bind cannot place two.
        p.selection.numa_bind = true;
        n.gpus_mut()[0].healthy = false;
        n.gpus_mut()[1].healthy = false;
        let e = fit_pod(&n, &p, &mut s).unwrap_err();
        assert_eq!(e.to_string(), "2/4 CardNotHealth, 2/4 NumaNotFit");
    }

    #[test]
    fn topology_aware_uses_pair_scores() {
        let mut n = node(4);
        for (a, b, sc) in [
            (0, 1, 100),
            (0, 2, 100),
            (0, 3, 200),
            (1, 2, 200),
            (1, 3, 100),
            (2, 3, 200),
        ] {
            assert!(n.set_pair_score(&format!("GPU-{a}"), &format!("GPU-{b}"), sc));
        }
        let mut s = Scratch::default();
        // The GPUs a topology-aware pod of `count` GPUs gets on `n`.
        let mut topology_aware = |n: &Node, count: u32| {
            let p = plan(
                vec![(false, Some(req(count, 100, 0)))],
                GpuPolicy::TopologyAware,
            );
            fit_pod(n, &p, &mut s).unwrap();
            grants(&s)
        };
        assert_eq!(topology_aware(&n, 1), [(0, 0)]);
        assert_eq!(topology_aware(&n, 3), [(0, 0), (0, 2), (0, 3)]);
        // With gpu0 taken exclusively, the other best set remains.
        n.add_usage(0, &used(1, 40960, 100));
        assert_eq!(topology_aware(&n, 3), [(0, 1), (0, 2), (0, 3)]);
    }

    /// Equal pair scores: the least-used GPUs win the tie (HAMi tries the
    /// least used first), then the lowest index.
    #[test]
    fn topology_ties_go_to_the_least_used_gpus() {
        let mut n = node(4);
        for a in 0..4 {
            for b in a + 1..4 {
                assert!(n.set_pair_score(&format!("GPU-{a}"), &format!("GPU-{b}"), 100));
            }
        }
        n.add_usage(0, &used(1, 20000, 30));
        n.add_usage(2, &used(1, 4000, 10));
        let mut s = Scratch::default();
        let mut topology_aware = |count: u32| {
            let p = plan(
                vec![(false, Some(req(count, 100, 0)))],
                GpuPolicy::TopologyAware,
            );
            fit_pod(&n, &p, &mut s).unwrap();
            let mut g: Vec<usize> = grants(&s).into_iter().map(|(_, p)| p).collect();
            g.sort_unstable();
            g
        };
        assert_eq!(topology_aware(1), [1]);
        assert_eq!(topology_aware(2), [1, 3]);
        assert_eq!(topology_aware(3), [1, 2, 3]);
    }
    /// A node of four GPUs, 0 and 1 on NUMA 0, 2 and 3 on NUMA 1, with
    /// GPU 0 and GPU 2 holding the same slice.
    fn two_numa_node() -> Node {
        let mut n = node(4);
        n.gpus_mut()[2].numa = 1;
        n.gpus_mut()[3].numa = 1;
        n.add_usage(0, &used(1, 4096, 10));
        n.add_usage(2, &used(1, 4096, 10));
        n
    }

    /// The GPU positions a one-container pod of `count` GPUs gets under
    /// the chain `policy`.
    fn chained(n: &Node, policy: &str, count: u32, numa_bind: bool) -> Vec<usize> {
        let mut p = plan(
            vec![(false, Some(req(count, 100, 0)))],
            policy.parse().unwrap(),
        );
        p.selection.numa_bind = numa_bind;
        let mut s = Scratch::default();
        fit_pod(n, &p, &mut s).unwrap();
        s.grants.iter().map(|g| g.1).collect()
    }

    /// hami-compat.md 6.2 (HAMi v2.10 `gpu_policy.go`, chain mode): sort keys
    /// in the order written, `binpack` score ascending, `spread` descending,
    /// `numa` NUMA id ascending, device index ascending last; Fit tries the
    /// sorted list from its end.
    #[test]
    fn policy_chains_place_as_hami_v2_10() {
        let n = two_numa_node();
        // Fullest first; GPUs 0 and 2 tie, the higher NUMA wins.
        assert_eq!(chained(&n, "binpack,numa", 1, false), [2]);
        // Grants are listed in the order HAMi collects them.
        assert_eq!(chained(&n, "binpack,numa", 2, false), [2, 0]);
        // Emptiest first; GPUs 1 and 3 tie, the higher NUMA wins.
        assert_eq!(chained(&n, "spread,numa", 1, false), [3]);
        assert_eq!(chained(&n, "spread,numa", 3, false), [3, 1, 2]);
        // Bare `numa`: highest NUMA, then highest index, load aside.
        assert_eq!(chained(&n, "numa", 1, false), [3]);
        assert_eq!(chained(&n, "numa", 2, false), [3, 2]);
        // `mutex` stays a rule: only the idle GPUs 1 and 3.
        assert_eq!(chained(&n, "mutex,numa", 2, false), [3, 1]);
        let p = plan(
            vec![(false, Some(req(3, 100, 0)))],
            "mutex,numa".parse().unwrap(),
        );
        let e = fit_pod(&n, &p, &mut Scratch::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "2/4 AllocatedCardsInsufficientRequest, 2/4 ExclusiveDeviceAllocateConflict"
        );
    }

    /// With numa-bind HAMi puts `numa` first in the chain and takes the
    /// first NUMA group that holds the whole request, highest id first.
    #[test]
    fn policy_chains_with_numa_bind_take_the_first_group_that_fits() {
        let mut n = two_numa_node();
        assert_eq!(chained(&n, "binpack,numa", 2, true), [2, 3]);
        // A single-name policy is no chain and keeps gpugate's rule: the
        // best group (here both are equal), the lowest NUMA id among equals.
        assert_eq!(chained(&n, "spread", 1, true), [1]);
        // NUMA 1 full: the pod goes to NUMA 0 although NUMA 1 comes first.
        n.add_usage(3, &used(10, 0, 0));
        assert_eq!(chained(&n, "spread,numa", 2, true), [1, 0]);
        assert_eq!(chained(&n, "spread,numa", 1, true), [2]);
    }
    /// engine/joint.rs's example: one by one, spread gives the 8 GiB
    /// container the emptier GPU 1 and the 15 GiB one then fits nowhere;
    /// together, 8 GiB go to GPU 0 and 15 GiB to GPU 1.
    #[test]
    fn containers_placed_jointly_when_one_by_one_fails() {
        let mut n = node(2);
        n.add_usage(0, &used(1, 40960 - 10240, 0));
        n.add_usage(1, &used(1, 40960 - 20480, 0));
        let p = plan(
            vec![
                (false, Some(req(1, 8192, 0))),
                (false, Some(req(1, 15360, 0))),
            ],
            GpuPolicy::Spread,
        );
        let mut s = Scratch::default();
        fit_pod(&n, &p, &mut s).unwrap();
        assert_eq!(grants(&s), [(0, 0), (1, 1)]);
        // Too much for any assignment: the first pass's reasons.
        let p = plan(
            vec![
                (false, Some(req(1, 12288, 0))),
                (false, Some(req(1, 15360, 0))),
            ],
            GpuPolicy::Spread,
        );
        let e = fit_pod(&n, &p, &mut s).unwrap_err();
        assert_eq!(e.to_string(), "2/2 CardInsufficientMemory");
    }
}
