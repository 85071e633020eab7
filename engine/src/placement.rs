//! Turning a [`Placement`] into the workers to start: a core (or none), and the NIC and NUMA
//! node each serves.
//!
//! `Auto` starts from `numa::Topology::worker_plan` — one slot per RDMA NIC (only the NICs
//! `EngineBuilder::nics` names, when it names any), or per NUMA node on a host without one,
//! with the CPUs near it — and widens every slot to **one worker per core of that slot the
//! process may run on** (its scheduler affinity, as `taskset` or a cgroup cpuset sets it),
//! capped at [`DEFAULT_WORKERS_PER_NIC`] per slot or the builder's `workers_per_nic`. Cores are
//! handed out lowest first, CPU 0 last (most housekeeping interrupts land there), round robin
//! between slots that share CPUs (two NICs on one node split its cores), and never twice while
//! a free one remains. A slot none of whose CPUs the process may use gets no worker; when that
//! leaves no worker at all (or sysfs is unreadable) the plan is one worker per allowed core
//! (capped), serving no particular NIC (or the named NICs in turn). `Workers(n)` and
//! `Cores(..)` serve no NIC unless `nics` names some; then their workers take the named NICs
//! in turn. It ignores SMT siblings and isolated cores (`isolcpus`); GPU locality is applied
//! per registration (`nic_plan`).

use crate::config::Placement;
use crate::error::EngineError;

/// Workers `Placement::Auto` starts per NIC (or per NUMA node without RDMA NICs) when the
/// builder does not say (`EngineBuilder::workers_per_nic`): at most this many, and never more
/// than the slot has allowed cores.
pub const DEFAULT_WORKERS_PER_NIC: usize = 16;

/// One worker to start (see [`crate::PlacementPlan::workers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannedWorker {
    /// Core to pin to (`None`: unpinned).
    pub core: Option<usize>,
    /// The RDMA device (libibverbs name) the worker serves, if the plan has one.
    pub nic: Option<String>,
    /// The NUMA node of its core or NIC, when known.
    pub numa_node: Option<u32>,
}

/// The engine's name for a planned worker.
pub(crate) type Slot = PlannedWorker;

impl Slot {
    fn unpinned() -> Self {
        Self {
            core: None,
            nic: None,
            numa_node: None,
        }
    }
}

/// The workers to start for `p`; `per_nic` caps `Auto`'s workers per slot. `topo` is the
/// host's topology (`None`: unreadable), `only` the indices of the NICs `EngineBuilder::nics`
/// named (empty: every NIC), `allowed` the cores the process may run on (empty: unknown).
pub(crate) fn plan(
    p: &Placement,
    per_nic: usize,
    topo: Option<&numa::Topology>,
    only: &[usize],
    allowed: &[u32],
) -> Result<Vec<Slot>, EngineError> {
    let mut slots = match p {
        Placement::Workers(0) => {
            return Err(EngineError::Config(
                "Placement::Workers(0): need at least one worker".into(),
            ));
        }
        Placement::Workers(n) => vec![Slot::unpinned(); *n],
        Placement::Cores(c) if c.is_empty() => {
            return Err(EngineError::Config(
                "Placement::Cores: empty core list".into(),
            ));
        }
        Placement::Cores(c) => c
            .iter()
            .map(|&c| Slot {
                core: Some(c),
                ..Slot::unpinned()
            })
            .collect(),
        Placement::Auto if per_nic == 0 => {
            return Err(EngineError::Config(
                "workers_per_nic must be at least 1".into(),
            ));
        }
        Placement::Auto => expand(&targets(topo, only), allowed, per_nic),
    };
    // Workers that serve no NIC take the named ones in turn.
    if let Some(topo) = topo {
        let named: Vec<&numa::Nic> = only.iter().filter_map(|&i| topo.nics.get(i)).collect();
        for (slot, nic) in slots
            .iter_mut()
            .filter(|s| s.nic.is_none())
            .zip(named.iter().cycle())
        {
            slot.nic = Some(nic.name.clone());
            slot.numa_node = slot.numa_node.or(nic.numa_node);
        }
    }
    Ok(slots)
}

/// The cores this thread (and so, normally, the process) may run on, in increasing order;
/// empty when the affinity cannot be read.
pub(crate) fn allowed_cores() -> Vec<u32> {
    let mut ids: Vec<u32> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| u32::try_from(c.id).ok())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The topology's worker slots, restricted to the NICs in `only` when it names any.
fn targets(topo: Option<&numa::Topology>, only: &[usize]) -> Vec<Target> {
    let Some(t) = topo else {
        return Vec::new();
    };
    let Ok(plan) = t.worker_plan() else {
        return Vec::new();
    };
    plan.into_iter()
        .filter(|w| match w.target {
            numa::WorkerTarget::Nic(i) => only.is_empty() || only.contains(&i),
            numa::WorkerTarget::Node(_) => only.is_empty(),
        })
        .map(|w| {
            let (nic, node) = match w.target {
                numa::WorkerTarget::Nic(i) => t
                    .nics
                    .get(i)
                    .map_or((None, None), |n| (Some(n.name.clone()), n.numa_node)),
                numa::WorkerTarget::Node(id) => (None, Some(id)),
            };
            Target {
                nic,
                numa_node: node,
                cpus: w.cpus.iter().collect(),
            }
        })
        .collect()
}

/// One slot of the topology's plan: what it serves and the CPUs near it.
#[derive(Debug, Clone)]
struct Target {
    nic: Option<String>,
    numa_node: Option<u32>,
    cpus: Vec<u32>,
}

/// Widens `targets` to workers on the `allowed` cores (all of a target's CPUs when `allowed`
/// is empty, i.e. unknown), at most `per_nic` per target.
fn expand(targets: &[Target], allowed: &[u32], per_nic: usize) -> Vec<Slot> {
    let usable = |c: &u32| allowed.is_empty() || allowed.contains(c);
    // Each target's usable CPUs, lowest first and CPU 0 last.
    let sets: Vec<Vec<u32>> = targets
        .iter()
        .map(|t| {
            let mut cpus: Vec<u32> = t.cpus.iter().copied().filter(usable).collect();
            cpus.sort_unstable_by_key(|&c| (c == 0, c));
            cpus
        })
        .collect();
    // Round robin, one core per target per round, so NICs sharing a node split its cores.
    let mut taken: Vec<u32> = Vec::new();
    let mut chosen: Vec<Vec<u32>> = vec![Vec::new(); targets.len()];
    loop {
        let mut moved = false;
        for (set, mine) in sets.iter().zip(chosen.iter_mut()) {
            if mine.len() >= per_nic {
                continue;
            }
            if let Some(&c) = set.iter().find(|c| !taken.contains(c)) {
                taken.push(c);
                mine.push(c);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out = Vec::new();
    for ((t, set), mut mine) in targets.iter().zip(&sets).zip(chosen) {
        // Every usable core already serves another NIC: share one rather than leave this NIC
        // without a worker.
        if mine.is_empty() {
            mine.extend(set.first());
        }
        out.extend(mine.into_iter().map(|c| Slot {
            core: usize::try_from(c).ok(),
            nic: t.nic.clone(),
            numa_node: t.numa_node,
        }));
    }
    if out.is_empty() {
        let mut cores = allowed.to_vec();
        cores.sort_unstable_by_key(|&c| (c == 0, c));
        out = cores
            .into_iter()
            .take(per_nic)
            .map(|c| Slot {
                core: usize::try_from(c).ok(),
                ..Slot::unpinned()
            })
            .collect();
    }
    if out.is_empty() {
        // Neither sysfs nor the affinity mask readable: one unpinned worker still works.
        out.push(Slot::unpinned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_placements() {
        let cores = |v: Vec<Slot>| v.into_iter().map(|s| s.core).collect::<Vec<_>>();
        let plan = |p: &Placement, n| plan(p, n, None, &[], &[]);
        assert_eq!(
            cores(plan(&Placement::Workers(2), 4).unwrap()),
            vec![None, None]
        );
        assert_eq!(
            cores(plan(&Placement::Cores(vec![1, 3]), 4).unwrap()),
            vec![Some(1), Some(3)]
        );
        assert!(plan(&Placement::Workers(0), 4).is_err());
        assert!(plan(&Placement::Cores(vec![]), 4).is_err());
        assert!(plan(&Placement::Auto, 0).is_err());
        assert!(!plan(&Placement::Auto, 4).unwrap().is_empty());
    }

    fn hgx() -> numa::Topology {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../numa/fixtures/hgx-h100");
        numa::Topology::from_root(root).unwrap()
    }

    #[test]
    fn named_nics_restrict_auto_and_are_dealt_to_explicit_workers() {
        let t = hgx();
        let all: Vec<u32> = t.online_cpus.iter().collect();
        let nics = |v: &[Slot]| v.iter().map(|s| s.nic.clone().unwrap()).collect::<Vec<_>>();
        // Auto over NICs 0 and 4 only (mlx5_0 on socket 0, mlx5_6 on socket 1).
        let p = plan(&Placement::Auto, 2, Some(&t), &[0, 4], &all).unwrap();
        assert_eq!(nics(&p), ["mlx5_0", "mlx5_0", "mlx5_6", "mlx5_6"]);
        assert_eq!(cores(&p), [1, 2, 56, 57].map(Some).to_vec());
        // Unrestricted: every NIC.
        assert_eq!(
            plan(&Placement::Auto, 1, Some(&t), &[], &all)
                .unwrap()
                .len(),
            8
        );
        // Workers(3) and Cores take the named NICs in turn, with their nodes.
        let p = plan(&Placement::Workers(3), 1, Some(&t), &[0, 4], &all).unwrap();
        assert_eq!(nics(&p), ["mlx5_0", "mlx5_6", "mlx5_0"]);
        assert_eq!(p[1].numa_node, Some(1));
        assert_eq!(p[1].core, None);
        let p = plan(&Placement::Cores(vec![7, 9]), 1, Some(&t), &[4], &all).unwrap();
        assert_eq!(nics(&p), ["mlx5_6", "mlx5_6"]);
        assert_eq!(cores(&p), [7, 9].map(Some).to_vec());
        // Without names they serve no NIC, as before.
        let p = plan(&Placement::Workers(2), 1, Some(&t), &[], &all).unwrap();
        assert!(p.iter().all(|s| s.nic.is_none()));
        // The process confined to socket 0's cores: the named socket-1 NIC still gets the
        // fallback workers rather than none.
        let p = plan(&Placement::Auto, 2, Some(&t), &[4], &[1, 2]).unwrap();
        assert_eq!(nics(&p), ["mlx5_6", "mlx5_6"]);
    }

    fn target(nic: Option<&str>, node: u32, cpus: std::ops::Range<u32>) -> Target {
        Target {
            nic: nic.map(str::to_owned),
            numa_node: Some(node),
            cpus: cpus.collect(),
        }
    }

    fn cores(v: &[Slot]) -> Vec<Option<usize>> {
        v.iter().map(|s| s.core).collect()
    }

    #[test]
    fn auto_uses_every_allowed_core_of_a_node_up_to_the_cap() {
        let node0 = [target(None, 0, 0..8)];
        // The process may run on cores 0-7: one worker each, CPU 0 last.
        let all: Vec<u32> = (0..8).collect();
        let p = expand(&node0, &all, 16);
        assert_eq!(
            cores(&p),
            [1, 2, 3, 4, 5, 6, 7, 0].map(Some).to_vec(),
            "one worker per allowed core"
        );
        assert!(p.iter().all(|s| s.numa_node == Some(0) && s.nic.is_none()));
        // `taskset -c 2-4`: three workers, on those cores.
        assert_eq!(
            cores(&expand(&node0, &[2, 3, 4], 16)),
            [2, 3, 4].map(Some).to_vec()
        );
        // The cap.
        assert_eq!(
            cores(&expand(&node0, &all, 3)),
            [1, 2, 3].map(Some).to_vec()
        );
    }

    #[test]
    fn auto_keeps_each_workers_nic_and_splits_shared_cores() {
        let nics = [
            target(Some("mlx5_0"), 0, 0..4),
            target(Some("mlx5_1"), 0, 0..4),
            target(Some("mlx5_2"), 1, 4..8),
        ];
        let allowed: Vec<u32> = (0..8).collect();
        let p = expand(&nics, &allowed, 2);
        let got: Vec<(Option<usize>, Option<&str>)> =
            p.iter().map(|s| (s.core, s.nic.as_deref())).collect();
        assert_eq!(
            got,
            vec![
                (Some(1), Some("mlx5_0")),
                (Some(3), Some("mlx5_0")),
                (Some(2), Some("mlx5_1")),
                (Some(0), Some("mlx5_1")),
                (Some(4), Some("mlx5_2")),
                (Some(5), Some("mlx5_2")),
            ]
        );
        assert_eq!(p[4].numa_node, Some(1));
        // Node 1's NIC with the process confined to node 0: that NIC gets no worker.
        let p = expand(&nics, &[0, 1, 2, 3], 16);
        assert!(p.iter().all(|s| s.nic.as_deref() != Some("mlx5_2")));
        assert_eq!(p.len(), 4, "two NICs split node 0's four cores");
        assert_eq!(
            p.iter()
                .filter(|s| s.nic.as_deref() == Some("mlx5_0"))
                .count(),
            2
        );
        // More NICs than cores: the last shares one rather than go without a worker.
        let p = expand(&nics[..2], &[1], 16);
        assert_eq!(cores(&p), [1, 1].map(Some).to_vec());
    }

    #[test]
    fn auto_falls_back_to_the_allowed_cores() {
        // Unreadable sysfs: one worker per allowed core, serving no particular NIC.
        let p = expand(&[], &[0, 5, 6], 16);
        assert_eq!(cores(&p), [5, 6, 0].map(Some).to_vec());
        assert!(p.iter().all(|s| s.nic.is_none()));
        // Nothing known at all: one unpinned worker.
        assert_eq!(cores(&expand(&[], &[], 16)), vec![None]);
        // A plan whose slots lie outside the affinity mask.
        let p = expand(&[target(None, 1, 8..16)], &[0, 1], 16);
        assert_eq!(cores(&p), [1, 0].map(Some).to_vec());
    }
}
