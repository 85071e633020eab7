//! Naming NICs (`mlx5_0`, `0000:17:00.0`) and choosing the NICs a buffer should use: the
//! nearest usable NICs of a GPU by PCIe distance, or the NICs of a NUMA node.

use serde::Serialize;

use crate::classify::PathClass;
use crate::error::TopoError;
use crate::model::{Gpu, Nic, Topology};
use crate::pci::PciAddr;
use crate::placement::Endpoint;

/// The NICs chosen for a buffer: every usable NIC of the best distance tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicTier {
    /// The tier's path class (`None` when chosen by NUMA node rather than PCIe distance).
    pub class: Option<PathClass>,
    /// Indices into [`Topology::nics`], in [`Topology::nic_ranking`] order.
    pub nics: Vec<usize>,
}

/// Parses a PCI address as users write it: `0000:17:00.0`, without the domain (`17:00.0`,
/// domain 0), any letter case.
pub fn parse_pci_hint(hint: &str) -> Option<PciAddr> {
    let lower = hint.trim().to_ascii_lowercase();
    lower
        .parse()
        .ok()
        .or_else(|| format!("0000:{lower}").parse().ok())
}

impl Topology {
    /// The NIC `hint` names: its RDMA device name (`mlx5_0`, `rxe0`, `bnxt_re0`, `ionic_0`),
    /// one of its netdevs (`ibp24s0`), or its PCI address (`0000:17:00.0`, `17:00.0`).
    pub fn find_nic(&self, hint: &str) -> Option<&Nic> {
        let hint = hint.trim();
        if hint.is_empty() {
            return None;
        }
        if let Some(n) = self.nics.iter().find(|n| n.name == hint) {
            return Some(n);
        }
        if let Some(n) = self
            .nics
            .iter()
            .find(|n| n.netdevs.iter().any(|d| d == hint))
        {
            return Some(n);
        }
        let addr = parse_pci_hint(hint)?;
        self.nics.iter().find(|n| n.pci == Some(addr))
    }

    /// The GPU at PCI address `pci` (as `cuDeviceGetPCIBusId` / `hipDeviceGetPCIBusId` report
    /// it).
    pub fn gpu_at(&self, pci: PciAddr) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.pci == pci)
    }

    /// The NICs GPU `gpu`'s buffers should use, among those `usable` accepts (the engine passes
    /// "has a worker"): the best path class among usable NICs with an ACTIVE port, all ties
    /// kept; only when no usable NIC is up, the best class among the usable ones that are down
    /// (their workers fall back to HTTP). So a farther NIC is never chosen while a nearer usable
    /// one is up. Empty when nothing is usable.
    pub fn nearest_nics(
        &self,
        gpu: usize,
        usable: impl Fn(&Nic) -> bool,
    ) -> Result<NicTier, TopoError> {
        let ranking: Vec<_> = self
            .nic_ranking(gpu)?
            .into_iter()
            .filter(|(n, _)| usable(n))
            .collect();
        let any_up = ranking.iter().any(|(n, _)| n.is_up());
        let candidates: Vec<_> = ranking
            .into_iter()
            .filter(|(n, _)| !any_up || n.is_up())
            .collect();
        let Some(best) = candidates.first().map(|(_, d)| d.class) else {
            return Ok(NicTier {
                class: None,
                nics: Vec::new(),
            });
        };
        Ok(NicTier {
            class: Some(best),
            nics: candidates
                .iter()
                .take_while(|(_, d)| d.class == best)
                .map(|(n, _)| n.index)
                .collect(),
        })
    }

    /// The NICs on NUMA node `node` that `usable` accepts, those with an ACTIVE port only
    /// unless none is up; in NIC order. For host memory on that node.
    pub fn node_nics(&self, node: u32, usable: impl Fn(&Nic) -> bool) -> NicTier {
        let on_node: Vec<&Nic> = self
            .nics
            .iter()
            .filter(|n| n.numa_node == Some(node) && usable(n))
            .collect();
        let any_up = on_node.iter().any(|n| n.is_up());
        NicTier {
            class: None,
            nics: on_node
                .iter()
                .filter(|n| !any_up || n.is_up())
                .map(|n| n.index)
                .collect(),
        }
    }

    /// Path class between GPU `gpu` and NIC `nic` (a shorthand for [`Topology::distance`]).
    pub fn gpu_nic_class(&self, gpu: usize, nic: usize) -> Result<PathClass, TopoError> {
        Ok(self.distance(Endpoint::Gpu(gpu), Endpoint::Nic(nic))?.class)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_hints() {
        let full: PciAddr = "0000:17:00.0".parse().unwrap();
        assert_eq!(parse_pci_hint("0000:17:00.0"), Some(full));
        assert_eq!(parse_pci_hint("17:00.0"), Some(full));
        assert_eq!(parse_pci_hint("0000:17:00.0 "), Some(full));
        let upper: PciAddr = "0000:c3:00.1".parse().unwrap();
        assert_eq!(parse_pci_hint("C3:00.1"), Some(upper));
        assert_eq!(parse_pci_hint("00000000:C3:00.1"), Some(upper));
        for bad in ["", "mlx5_0", "17:00", "0000:17:00.9", ":17:00.0"] {
            assert_eq!(parse_pci_hint(bad), None, "{bad}");
        }
    }
}
