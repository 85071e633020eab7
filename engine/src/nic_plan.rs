//! Which NICs and workers a registration's operations use.
//!
//! A [`PlacementPlan`] is the engine's workers ([`crate::placement`]) together with the host
//! topology they were planned from. A registration is bound to NICs by locality:
//!
//! - **device memory**: the GPU's PCI address (`cuDeviceGetPCIBusId` / `hipDeviceGetPCIBusId`)
//!   locates it in the topology; its NICs are every usable NIC of the best PCIe distance tier
//!   (`PIX < PXB < PHB < NODE < SYS`, [`numa::Topology::nearest_nics`]) — usable meaning some
//!   worker of the engine serves the NIC and runs operations (its verbs device opened, when
//!   the fabric uses verbs), with NICs whose port is ACTIVE chosen before any that is down. A
//!   farther NIC is therefore never chosen while a nearer usable one is up.
//! - **host memory**: the NUMA node of the buffer's first page (`get_mempolicy`, module
//!   [`crate::mempolicy`]) and the usable NICs of that node.
//!
//! Operations on a bound registration are handed only to the workers of its NICs (least
//! loaded first). No topology, no GPU match, a node without NICs, or an engine whose workers
//! serve no NIC (this includes every host without RDMA NICs) leaves the registration unbound:
//! its operations go to any worker, as before.

use std::collections::HashSet;
use std::sync::Arc;

use numa::{PathClass, PciAddr, Topology};

use crate::config::Placement;
use crate::error::EngineError;
use crate::placement::{self, PlannedWorker};

/// The engine's workers and the topology they were planned from.
#[derive(Debug, Clone)]
pub struct PlacementPlan {
    topology: Option<Arc<Topology>>,
    workers: Vec<PlannedWorker>,
    /// Workers operations may be handed to (`None`: all).
    eligible: Option<Vec<usize>>,
}

/// What a registration was bound by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Locality {
    /// Device memory of the GPU at this PCI address.
    Gpu(PciAddr),
    /// Host memory whose first page is on this NUMA node.
    Node(u32),
}

/// The NICs (and so the workers) a registration's operations use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NicAffinity {
    /// What the choice was made from.
    pub locality: Locality,
    /// RDMA device names, nearest first (all of one distance tier).
    pub nics: Vec<String>,
    /// The tier's PCIe path class (GPU memory; `None` for host memory, chosen by node).
    pub class: Option<PathClass>,
    /// Indices of the workers ([`crate::Engine::workers`]) that run its operations.
    pub workers: Vec<usize>,
}

impl PlacementPlan {
    /// No workers and no topology: the plan of an engine attached to a daemon (the daemon's
    /// own plan is its business).
    pub(crate) fn detached() -> Self {
        Self {
            topology: None,
            workers: Vec::new(),
            eligible: None,
        }
    }

    /// Plans the workers for `placement` on `topology` (`None`: sysfs unreadable) for a process
    /// allowed to run on `allowed_cores` (empty: unknown), restricted to the NICs `nics` names
    /// (RDMA device names, netdevs or PCI addresses; empty: every NIC).
    ///
    /// Errors: [`EngineError::NicNotFound`] for a hint that names no NIC of `topology` (it
    /// lists the NICs present), [`EngineError::Config`] for an empty hint or an invalid
    /// placement.
    pub fn new(
        topology: Option<Topology>,
        placement: &Placement,
        workers_per_nic: usize,
        nics: &[String],
        allowed_cores: &[u32],
    ) -> Result<Self, EngineError> {
        let only = match &topology {
            Some(t) => resolve_hints(t, nics)?,
            None if nics.is_empty() => Vec::new(),
            None => {
                resolve_hints(&empty_topology(), nics)?;
                Vec::new()
            }
        };
        let workers = placement::plan(
            placement,
            workers_per_nic,
            topology.as_ref(),
            &only,
            allowed_cores,
        )?;
        Ok(Self {
            topology: topology.map(Arc::new),
            workers,
            eligible: None,
        })
    }

    /// [`PlacementPlan::new`] for this process: the cores its scheduler affinity allows.
    pub fn for_process(
        topology: Option<Topology>,
        placement: &Placement,
        workers_per_nic: usize,
        nics: &[String],
    ) -> Result<Self, EngineError> {
        Self::new(
            topology,
            placement,
            workers_per_nic,
            nics,
            &placement::allowed_cores(),
        )
    }

    /// The workers, in the order the engine starts them.
    #[must_use]
    pub fn workers(&self) -> &[PlannedWorker] {
        &self.workers
    }

    /// The topology the plan was made from.
    #[must_use]
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_deref()
    }

    /// Only these workers run operations (the engine calls it once the NICs' verbs devices
    /// are open): NICs of other workers are no longer usable for bindings.
    pub(crate) fn set_eligible(&mut self, eligible: Vec<usize>) {
        self.eligible = Some(eligible);
    }

    fn runs_ops(&self, i: usize) -> bool {
        self.eligible.as_ref().is_none_or(|e| e.contains(&i))
    }

    /// Names of the NICs served by at least one worker that runs operations.
    fn usable_nics(&self) -> HashSet<&str> {
        self.workers
            .iter()
            .enumerate()
            .filter(|(i, _)| self.runs_ops(*i))
            .filter_map(|(_, w)| w.nic.as_deref())
            .collect()
    }

    fn affinity(
        &self,
        topo: &Topology,
        locality: Locality,
        tier: numa::NicTier,
    ) -> Option<NicAffinity> {
        let nics: Vec<String> = tier
            .nics
            .iter()
            .filter_map(|&i| topo.nics.get(i).map(|n| n.name.clone()))
            .collect();
        let workers: Vec<usize> = self
            .workers
            .iter()
            .enumerate()
            .filter(|(i, w)| self.runs_ops(*i) && w.nic.as_ref().is_some_and(|n| nics.contains(n)))
            .map(|(i, _)| i)
            .collect();
        (!workers.is_empty()).then_some(NicAffinity {
            locality,
            nics,
            class: tier.class,
            workers,
        })
    }

    /// The NICs and workers for device memory of the GPU at `pci`; `None` when the GPU is not
    /// in the topology or no worker serves a NIC.
    #[must_use]
    pub fn for_gpu(&self, pci: PciAddr) -> Option<NicAffinity> {
        let topo = self.topology.as_deref()?;
        let gpu = topo.gpu_at(pci)?;
        let usable = self.usable_nics();
        if usable.is_empty() {
            return None;
        }
        let tier = topo
            .nearest_nics(gpu.index, |n| usable.contains(n.name.as_str()))
            .ok()?;
        self.affinity(topo, Locality::Gpu(pci), tier)
    }

    /// The NICs and workers for host memory on NUMA node `node`; `None` when no worker serves
    /// a NIC of that node.
    #[must_use]
    pub fn for_node(&self, node: u32) -> Option<NicAffinity> {
        let topo = self.topology.as_deref()?;
        let usable = self.usable_nics();
        if usable.is_empty() {
            return None;
        }
        let tier = topo.node_nics(node, |n| usable.contains(n.name.as_str()));
        self.affinity(topo, Locality::Node(node), tier)
    }

    /// Whether any binding is possible (some worker serves a NIC): when not, registration
    /// skips the locality lookups.
    pub(crate) fn binds(&self) -> bool {
        self.topology.is_some() && self.workers.iter().any(|w| w.nic.is_some())
    }
}

/// The builder's plan, and a device every worker must open instead of its NIC's (a
/// `verbs_device` that the topology does not list: libibverbs may still know it).
pub(crate) fn plan_for_builder(
    b: &crate::config::EngineBuilder,
) -> Result<(PlacementPlan, Option<String>), EngineError> {
    let topology = Topology::from_root(&b.sysfs_root);
    let mut hints = b.nics.clone();
    let mut forced = None;
    if hints.is_empty()
        && let Some(name) = &b.verbs_device
    {
        match &topology {
            Ok(t) if t.find_nic(name).is_some() => hints.push(name.clone()),
            _ => forced = Some(name.clone()),
        }
    }
    let topology = match topology {
        Ok(t) => Some(t),
        Err(e) if !hints.is_empty() => return Err(EngineError::Topology(e)),
        Err(_) => None,
    };
    let plan = PlacementPlan::for_process(topology, &b.placement, b.workers_per_nic, &hints)?;
    Ok((plan, forced))
}

/// Opens one verbs device per NIC named by `slots` (each once, shared by that NIC's workers)
/// and the default one (`forced`, else `EngineBuilder::verbs_device`, else the first listed)
/// for workers without a NIC; returns each worker's device. `forced` overrides every worker's
/// NIC (a `verbs_device` the topology does not list).
///
/// `Fabric::Verbs` with no device opened at all fails with [`EngineError::VerbsUnavailable`]
/// (the first failure's reason); devices that fail beside one that opened are logged (a
/// `tracing` WARN event) and their workers run no operations ([`eligible_workers`]).
/// `Fabric::Auto` opens devices quietly when libibverbs lists any; `None` means the soft
/// fabric. Other fabrics open nothing.
pub(crate) fn open_devices(
    fabric: crate::fabric::rdma::Fabric,
    slots: &[PlannedWorker],
    forced: Option<&str>,
    b: &crate::config::EngineBuilder,
) -> Result<Vec<Option<crate::fabric::rc::RcDevice>>, EngineError> {
    use crate::fabric::rc::RcDevice;
    use crate::fabric::rdma::Fabric;
    let open_any = match fabric {
        Fabric::Verbs => true,
        // `Auto` probes libibverbs once for the engine, not once per NIC (a probe opens every
        // device).
        Fabric::Auto => crate::verbs::probe().is_available(),
        _ => false,
    };
    let mut opened: std::collections::HashMap<Option<String>, Option<RcDevice>> =
        std::collections::HashMap::new();
    let mut first_failure = None;
    let devices: Vec<Option<RcDevice>> = slots
        .iter()
        .map(|s| {
            let name = forced
                .map(str::to_owned)
                .or_else(|| s.nic.clone())
                .or_else(|| b.verbs_device.clone());
            opened
                .entry(name)
                .or_insert_with_key(|n| {
                    if !open_any {
                        return None;
                    }
                    match RcDevice::open_verbs(n.as_deref()) {
                        Ok(d) => Some(d),
                        Err(e) => {
                            if fabric == Fabric::Verbs {
                                first_failure.get_or_insert((n.clone(), e));
                            }
                            None
                        }
                    }
                })
                .clone()
        })
        .collect();
    match first_failure {
        Some((device, e)) if devices.iter().all(Option::is_none) => {
            Err(verbs_unavailable(device, &e, &b.sysfs_root))
        }
        Some((device, e)) => {
            tracing::warn!(
                "rdma: {} ({e}); its workers run no operations",
                device.as_deref().unwrap_or("the default verbs device")
            );
            Ok(devices)
        }
        None => Ok(devices),
    }
}

/// The typed error for `Fabric::Verbs` when opening `device` failed with `e`: what is missing,
/// with the OS error where a verb gave one. "libibverbs lists no device" is refined by what
/// `<sysfs_root>/sys/class/infiniband` holds (no RDMA device at all, or devices without a
/// usable provider / `uverbs` node).
fn verbs_unavailable(
    device: Option<String>,
    e: &crate::fabric::rc::RcError,
    sysfs_root: &std::path::Path,
) -> EngineError {
    use crate::fabric::rc::RcError;
    use crate::verbs::{Error, Unavailable};
    let reason = match e {
        RcError::Verbs(Error::Unavailable(Unavailable::NoDevice)) => {
            let class = sysfs_root.join("sys/class/infiniband");
            let mut present: Vec<String> = std::fs::read_dir(&class)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            present.sort();
            if present.is_empty() {
                format!(
                    "no RDMA device in {} (no RDMA NIC, and no Soft-RoCE link: `rdma link add \
                     rxe0 type rxe netdev <if>`)",
                    class.display()
                )
            } else {
                format!(
                    "{} lists {} but libibverbs opens none of them (no provider for it in \
                     ibverbs-providers, or no ib_uverbs / /dev/infiniband/uverbs* access)",
                    class.display(),
                    present.join(", ")
                )
            }
        }
        other => error_chain(other),
    };
    EngineError::VerbsUnavailable {
        device,
        reason,
        errno: e.errno(),
    }
}

/// `e` and its sources, `: `-separated (the verbs errors keep the errno in their source).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// Which workers run operations: those whose verbs device opened when any did, else every
/// worker (HTTP and the soft fabric use no NIC of their own).
pub(crate) fn eligible_workers(opened: &[bool]) -> Vec<usize> {
    let with: Vec<usize> = (0..opened.len())
        .filter(|&i| opened.get(i).copied().unwrap_or(false))
        .collect();
    if with.is_empty() {
        (0..opened.len()).collect()
    } else {
        with
    }
}

/// A topology with nothing in it (hints are then checked against no NIC at all).
fn empty_topology() -> Topology {
    Topology {
        root: std::path::PathBuf::from("/"),
        nodes: Vec::new(),
        online_cpus: numa::CpuSet::new(),
        gpus: Vec::new(),
        nics: Vec::new(),
        net_functions: Vec::new(),
    }
}

/// The NIC indices `hints` name, each once, in hint order.
fn resolve_hints(t: &Topology, hints: &[String]) -> Result<Vec<usize>, EngineError> {
    let mut out = Vec::with_capacity(hints.len());
    for hint in hints {
        if hint.trim().is_empty() {
            return Err(EngineError::Config(
                "EngineBuilder::nics: an empty NIC name".into(),
            ));
        }
        let nic = t.find_nic(hint).ok_or_else(|| EngineError::NicNotFound {
            hint: hint.clone(),
            available: t.nics.iter().map(|n| n.name.clone()).collect(),
        })?;
        if !out.contains(&nic.index) {
            out.push(nic.index);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_go_to_the_workers_whose_verbs_device_opened() {
        // Workers of two NICs, the second NIC's device failed to open.
        assert_eq!(eligible_workers(&[true, false, true]), vec![0, 2]);
        assert_eq!(eligible_workers(&[false, true]), vec![1]);
        // No device at all (HTTP, soft fabric, no RDMA NIC): every worker.
        assert_eq!(eligible_workers(&[false, false, false]), vec![0, 1, 2]);
        assert_eq!(eligible_workers(&[]), Vec::<usize>::new());
    }
}
