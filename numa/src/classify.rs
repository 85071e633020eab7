//! NCCL-style path classes between two PCI functions.
//!
//! # The rule
//!
//! Given the two functions' [`PciPath`]s and their effective NUMA nodes:
//!
//! 1. **Different host bridges** (the `pciDDDD:BB` directories differ): [`PathClass::Node`] when
//!    both NUMA nodes are known and equal, otherwise [`PathClass::Sys`]. An unknown node on a
//!    multi-node machine is treated as remote: the conservative answer.
//! 2. **Same host bridge, no common bridge** (they hang off different root ports, or sit on the
//!    root bus): [`PathClass::Phb`].
//! 3. **Same root port tree**: count the *bridge units* on the path between them, where a unit is
//!    the root port or one PCIe switch. Below a root port, PCIe switches appear in sysfs as two
//!    levels (upstream port, then downstream port), so a bridge at depth `i` (root port = 0)
//!    belongs to unit `(i + 1) / 2`. With `c` shared bridges, the path crosses units
//!    `unit(c-1) ..= unit(len-1)` on each side, the shared unit counted once.
//!    One unit: [`PathClass::Pix`]; more: [`PathClass::Pxb`].
//!
//! This is the same grouping NCCL makes when it builds its topology from sysfs (it climbs two
//! path components at a time, treating an upstream and a downstream port as one switch), so a GPU
//! and a NIC on different downstream ports of one switch are PIX, as `nvidia-smi topo -m` shows on
//! HGX systems. The parity assumption fails only for legacy PCI-to-PCI bridges inside a tree,
//! which GPU servers do not use.

use serde::Serialize;

use crate::pci::PciPath;

/// How far apart two devices are, best first. The order of the variants is the order of
/// preference (`Pix < Pxb < Phb < Node < Sys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PathClass {
    /// At most one PCIe bridge unit (one switch) between them.
    #[serde(rename = "PIX")]
    Pix,
    /// Several bridge units, without crossing the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the host bridge (root complex) they share.
    #[serde(rename = "PHB")]
    Phb,
    /// Between host bridges of one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across NUMA nodes (the SMP interconnect, e.g. UPI or Infinity Fabric).
    #[serde(rename = "SYS")]
    Sys,
}

impl PathClass {
    /// The label `nvidia-smi topo -m` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            PathClass::Pix => "PIX",
            PathClass::Pxb => "PXB",
            PathClass::Phb => "PHB",
            PathClass::Node => "NODE",
            PathClass::Sys => "SYS",
        }
    }
}

impl std::fmt::Display for PathClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Bridge unit of the bridge at `depth` below the host bridge (root port = unit 0, then one unit
/// per upstream/downstream pair).
fn unit(depth: usize) -> usize {
    depth.div_ceil(2)
}

/// The classification result with the detail used to break ties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distance {
    /// The class.
    pub class: PathClass,
    /// Bridges crossed (0 when the path leaves the root port tree): finer than the class, used
    /// only to order NICs of equal class.
    pub bridges: usize,
}

/// Classifies the path between `a` (on NUMA node `numa_a`) and `b`. See the module docs for the
/// rule. `a == b` is PIX with zero bridges; callers print `X` for the diagonal.
pub fn classify(a: &PciPath, numa_a: Option<u32>, b: &PciPath, numa_b: Option<u32>) -> Distance {
    if a.host_bridge != b.host_bridge {
        let class = match (numa_a, numa_b) {
            (Some(x), Some(y)) if x == y => PathClass::Node,
            _ => PathClass::Sys,
        };
        return Distance { class, bridges: 0 };
    }
    if a == b {
        return Distance {
            class: PathClass::Pix,
            bridges: 0,
        };
    }
    let common = a.common_bridges(b);
    if common == 0 {
        return Distance {
            class: PathClass::Phb,
            bridges: 0,
        };
    }
    let shared = unit(common - 1);
    // Each side's deepest bridge is at len-1 >= common-1, so these never underflow.
    let units_a = unit(a.bridges.len() - 1) - shared;
    let units_b = unit(b.bridges.len() - 1) - shared;
    let units = 1 + units_a + units_b;
    let bridges = 1 + (a.bridges.len() - common) + (b.bridges.len() - common);
    let class = if units <= 1 {
        PathClass::Pix
    } else {
        PathClass::Pxb
    };
    Distance { class, bridges }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pci::PciAddr;

    fn path(host: &str, chain: &[&str]) -> PciPath {
        let mut addrs: Vec<PciAddr> = chain.iter().map(|s| s.parse().unwrap()).collect();
        let device = addrs.pop().unwrap();
        PciPath {
            host_bridge: format!("sys/devices/{host}"),
            bridges: addrs,
            device,
        }
    }

    const RP: &str = "0000:15:01.0";
    const USP: &str = "0000:16:00.0";

    #[test]
    fn same_switch_is_pix() {
        let gpu = path("pci0000:15", &[RP, USP, "0000:17:03.0", "0000:1b:00.0"]);
        let nic = path("pci0000:15", &[RP, USP, "0000:17:00.0", "0000:18:00.0"]);
        let d = classify(&gpu, Some(0), &nic, Some(0));
        assert_eq!(d.class, PathClass::Pix);
        assert_eq!(d.bridges, 3); // DSP, USP, DSP
        // Two functions of one dual-port NIC.
        let nic1 = path("pci0000:15", &[RP, USP, "0000:17:00.0", "0000:18:00.1"]);
        assert_eq!(
            classify(&nic, Some(0), &nic1, Some(0)).class,
            PathClass::Pix
        );
    }

    #[test]
    fn cascaded_switches_are_pxb() {
        let nic = path("pci0000:15", &[RP, USP, "0000:17:00.0", "0000:18:00.0"]);
        let gpu = path(
            "pci0000:15",
            &[
                RP,
                USP,
                "0000:17:01.0",
                "0000:19:00.0",
                "0000:1a:00.0",
                "0000:1b:00.0",
            ],
        );
        let d = classify(&gpu, Some(0), &nic, Some(0));
        assert_eq!(d.class, PathClass::Pxb);
        assert_eq!(d.bridges, 5);
        // A device right below the root port and one behind a switch under it.
        let direct = path("pci0000:15", &[RP, "0000:16:00.1"]);
        assert_eq!(classify(&direct, None, &nic, None).class, PathClass::Pxb);
    }

    #[test]
    fn different_root_ports_are_phb() {
        let a = path("pci0000:00", &["0000:00:01.0", "0000:01:00.0"]);
        let b = path("pci0000:00", &["0000:00:02.0", "0000:02:00.0"]);
        assert_eq!(classify(&a, Some(0), &b, Some(0)).class, PathClass::Phb);
        // Root-bus devices (virtual machines) meet at the host bridge too.
        let c = path("pci0000:00", &["0000:00:03.0"]);
        let d = path("pci0000:00", &["0000:00:06.0"]);
        assert_eq!(classify(&c, None, &d, None).class, PathClass::Phb);
    }

    #[test]
    fn host_bridges_and_sockets() {
        let a = path("pci0000:15", &[RP, "0000:16:00.0"]);
        let b = path("pci0000:37", &["0000:37:01.0", "0000:38:00.0"]);
        assert_eq!(classify(&a, Some(0), &b, Some(0)).class, PathClass::Node);
        assert_eq!(classify(&a, Some(0), &b, Some(1)).class, PathClass::Sys);
        assert_eq!(classify(&a, None, &b, Some(0)).class, PathClass::Sys);
        assert!(PathClass::Pix < PathClass::Pxb && PathClass::Node < PathClass::Sys);
    }
}
