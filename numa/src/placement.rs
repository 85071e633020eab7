//! Choosing NICs for a GPU and cores for workers.

use serde::Serialize;

use crate::classify::{Distance, PathClass, classify};
use crate::cpulist::CpuSet;
use crate::error::TopoError;
use crate::model::{Nic, Topology};
use crate::pci::PciPath;

/// A device in the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// `GPU<index>`.
    Gpu(usize),
    /// `NIC<index>`.
    Nic(usize),
}

/// What a worker serves: a NIC, or a whole NUMA node on a host without RDMA NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerTarget {
    /// The NIC with this index.
    Nic(usize),
    /// The NUMA node with this id.
    Node(u32),
}

/// One planned worker thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Worker {
    /// What it serves.
    pub target: WorkerTarget,
    /// The CPUs it may run on ([`Topology::worker_cores`]).
    pub cpus: CpuSet,
    /// The core to pin it to.
    pub core: u32,
}

/// The class of every pair of devices, GPUs first then NICs, as `nvidia-smi topo -m` lays it
/// out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Matrix {
    /// Row and column labels: `GPU0..`, then `NIC0..`.
    pub labels: Vec<String>,
    /// `cells[row][col]`; `None` on the diagonal.
    pub cells: Vec<Vec<Option<PathClass>>>,
}

impl Topology {
    fn endpoint(&self, e: Endpoint) -> Result<(Option<&PciPath>, Option<u32>), TopoError> {
        match e {
            Endpoint::Gpu(i) => self
                .gpus
                .get(i)
                .map(|g| (Some(&g.path), g.numa_node))
                .ok_or_else(|| unknown("GPU", i)),
            Endpoint::Nic(i) => self
                .nics
                .get(i)
                .map(|n| (n.path.as_ref(), n.numa_node))
                .ok_or_else(|| unknown("NIC", i)),
        }
    }

    /// Distance between two devices ([`classify`]). A NIC that is not on PCI is SYS to
    /// everything but itself.
    pub fn distance(&self, a: Endpoint, b: Endpoint) -> Result<Distance, TopoError> {
        let (pa, na) = self.endpoint(a)?;
        let (pb, nb) = self.endpoint(b)?;
        Ok(match (pa, pb) {
            (Some(pa), Some(pb)) => classify(pa, na, pb, nb),
            _ if a == b => Distance {
                class: PathClass::Pix,
                bridges: 0,
            },
            _ => Distance {
                class: PathClass::Sys,
                bridges: 0,
            },
        })
    }

    /// Every NIC with its distance from GPU `gpu`, best first. Order: class; then NICs with an
    /// ACTIVE port before those without; then fewer bridges crossed; then NIC index.
    pub fn nic_ranking(&self, gpu: usize) -> Result<Vec<(&Nic, Distance)>, TopoError> {
        // Checked up front: an unknown GPU on a host without NICs must still be an error.
        self.endpoint(Endpoint::Gpu(gpu))?;
        let mut out = Vec::with_capacity(self.nics.len());
        for nic in &self.nics {
            out.push((
                nic,
                self.distance(Endpoint::Gpu(gpu), Endpoint::Nic(nic.index))?,
            ));
        }
        out.sort_by_key(|(n, d)| (d.class, !n.is_up(), d.bridges, n.index));
        Ok(out)
    }

    /// The NICs closest to GPU `gpu`: every NIC of the best class (ties kept), in the order of
    /// [`Topology::nic_ranking`]. The engine spreads load over the returned NICs; it is empty on a
    /// host without RDMA NICs.
    pub fn closest_nics(&self, gpu: usize) -> Result<Vec<&Nic>, TopoError> {
        let ranking = self.nic_ranking(gpu)?;
        let Some(best) = ranking.first().map(|(_, d)| d.class) else {
            return Ok(Vec::new());
        };
        Ok(ranking
            .into_iter()
            .take_while(|(_, d)| d.class == best)
            .map(|(n, _)| n)
            .collect())
    }

    /// The CPUs of a NUMA node that are online.
    pub fn node_cpus(&self, node: u32) -> Result<CpuSet, TopoError> {
        let n = self
            .nodes
            .iter()
            .find(|n| n.id == node)
            .ok_or_else(|| unknown("NUMA node", node))?;
        Ok(n.cpus.intersection(&self.online_cpus))
    }

    /// The CPUs a worker for `target` may run on, all restricted to online CPUs:
    /// - a NIC: its `local_cpulist` (what the kernel says is near the device); if empty, the
    ///   CPUs of its NUMA node; if the node is unknown, every online CPU;
    /// - a NUMA node: the node's CPUs.
    pub fn worker_cores(&self, target: WorkerTarget) -> Result<CpuSet, TopoError> {
        match target {
            WorkerTarget::Node(id) => self.node_cpus(id),
            WorkerTarget::Nic(i) => {
                let nic = self.nics.get(i).ok_or_else(|| unknown("NIC", i))?;
                let local = nic.local_cpus.intersection(&self.online_cpus);
                if !local.is_empty() {
                    return Ok(local);
                }
                if let Some(node) = nic.numa_node {
                    let cpus = self.node_cpus(node).unwrap_or_default();
                    if !cpus.is_empty() {
                        return Ok(cpus);
                    }
                }
                Ok(self.online_cpus.clone())
            }
        }
    }

    /// One worker per RDMA NIC (each NIC sits on one NUMA node, so this is one per
    /// (NIC, node)); on a host without RDMA NICs, one per NUMA node that has CPUs. Each worker is
    /// pinned to the lowest CPU of its set not taken by an earlier worker, avoiding CPU 0 (where
    /// most housekeeping interrupts and timers land) while another CPU is free; when every CPU of
    /// the set is taken, workers share the lowest.
    pub fn worker_plan(&self) -> Result<Vec<Worker>, TopoError> {
        let targets: Vec<WorkerTarget> = if self.nics.is_empty() {
            self.nodes
                .iter()
                .filter(|n| !n.cpus.intersection(&self.online_cpus).is_empty())
                .map(|n| WorkerTarget::Node(n.id))
                .collect()
        } else {
            self.nics
                .iter()
                .map(|n| WorkerTarget::Nic(n.index))
                .collect()
        };
        let mut taken: Vec<u32> = Vec::new();
        let mut plan = Vec::with_capacity(targets.len());
        for target in targets {
            let cpus = self.worker_cores(target)?;
            let free = |c: &u32| !taken.contains(c);
            let core = cpus
                .iter()
                .find(|c| *c != 0 && free(c))
                .or_else(|| cpus.iter().find(free))
                .or_else(|| cpus.iter().next());
            let Some(core) = core else {
                continue;
            };
            taken.push(core);
            plan.push(Worker { target, cpus, core });
        }
        Ok(plan)
    }

    /// The full class matrix over GPUs then NICs.
    pub fn matrix(&self) -> Result<Matrix, TopoError> {
        let eps: Vec<Endpoint> = (0..self.gpus.len())
            .map(Endpoint::Gpu)
            .chain((0..self.nics.len()).map(Endpoint::Nic))
            .collect();
        let labels = eps
            .iter()
            .map(|e| match e {
                Endpoint::Gpu(i) => format!("GPU{i}"),
                Endpoint::Nic(i) => format!("NIC{i}"),
            })
            .collect();
        let mut cells = Vec::with_capacity(eps.len());
        for a in &eps {
            let mut row = Vec::with_capacity(eps.len());
            for b in &eps {
                row.push(if a == b {
                    None
                } else {
                    Some(self.distance(*a, *b)?.class)
                });
            }
            cells.push(row);
        }
        Ok(Matrix { labels, cells })
    }
}

fn unknown(kind: &'static str, name: impl ToString) -> TopoError {
    TopoError::Unknown {
        kind,
        name: name.to_string(),
    }
}
