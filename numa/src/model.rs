//! The topology model: NUMA nodes, GPUs, RDMA NICs and plain network functions.

use std::path::PathBuf;

use serde::Serialize;

use crate::cpulist::CpuSet;
use crate::pci::{PciAddr, PciPath};

/// Serializes PCI ids and class codes in the hex spelling of `lspci -n` and sysfs (`0x10de`).
mod hex {
    use serde::Serializer;

    pub fn u16<S: Serializer>(v: &u16, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{v:04x}"))
    }

    pub fn opt_u16<S: Serializer>(v: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => u16(v, s),
            None => s.serialize_none(),
        }
    }

    pub fn class<S: Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("0x{v:06x}"))
    }
}

/// One NUMA node and its CPUs (`/sys/devices/system/node/nodeN/cpulist`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NumaNode {
    /// Node id.
    pub id: u32,
    /// CPUs of the node (empty for a memory-only node).
    pub cpus: CpuSet,
}

/// Who made a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GpuVendor {
    /// PCI vendor 0x10de.
    Nvidia,
    /// PCI vendor 0x1002.
    Amd,
}

/// A GPU (one PCI function).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// Position in [`Topology::gpus`] (`GPU<index>` in the matrix); GPUs are ordered by PCI
    /// address, as `nvidia-smi` and `CUDA_DEVICE_ORDER=PCI_BUS_ID` order them.
    pub index: usize,
    /// PCI address.
    pub pci: PciAddr,
    /// Vendor.
    pub vendor: GpuVendor,
    /// PCI device id (`0x2335` = H200 SXM).
    #[serde(serialize_with = "hex::u16")]
    pub device_id: u16,
    /// 24-bit PCI class code.
    #[serde(serialize_with = "hex::class")]
    pub class: u32,
    /// Effective NUMA node: the device's `numa_node`, or the only node of a single-node machine
    /// when the kernel reports -1 (what `nvidia-smi` prints as NUMA affinity then). `None` when
    /// unknown on a multi-node machine.
    pub numa_node: Option<u32>,
    /// `local_cpulist` of the device.
    pub local_cpus: CpuSet,
    /// PCIe ancestry.
    pub path: PciPath,
}

/// One port of an RDMA device (`/sys/class/infiniband/<dev>/ports/<n>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaPort {
    /// Port number (from 1).
    pub port: u32,
    /// Logical state name (`ACTIVE`, `DOWN`, `INIT`, ...), the part after `4: `.
    pub state: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// `rate` as printed by the kernel (`400 Gb/sec (4X NDR)`), if present.
    pub rate: Option<String>,
}

impl RdmaPort {
    /// True when the port can carry traffic.
    pub fn is_active(&self) -> bool {
        self.state == "ACTIVE"
    }
}

/// An RDMA NIC: one device under `/sys/class/infiniband`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Position in [`Topology::nics`] (`NIC<index>` in the matrix); NICs are ordered by RDMA
    /// device name in natural order (`mlx5_2` before `mlx5_10`).
    pub index: usize,
    /// RDMA device name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// PCI function, when the device (or, for Soft-RoCE, its parent netdev) sits on PCI.
    pub pci: Option<PciAddr>,
    /// PCI vendor id of that function.
    #[serde(serialize_with = "hex::opt_u16")]
    pub vendor: Option<u16>,
    /// Network interfaces of the same PCI function (`ibp24s0`), or the parent netdev of a
    /// software device.
    pub netdevs: Vec<String>,
    /// Ports, in port order.
    pub ports: Vec<RdmaPort>,
    /// Effective NUMA node, as for [`Gpu::numa_node`].
    pub numa_node: Option<u32>,
    /// `local_cpulist` of the PCI function (empty when not on PCI).
    pub local_cpus: CpuSet,
    /// PCIe ancestry; `None` for a device not on PCI (then it is SYS to everything).
    pub path: Option<PciPath>,
}

impl Nic {
    /// True when at least one port is ACTIVE.
    pub fn is_up(&self) -> bool {
        self.ports.iter().any(RdmaPort::is_active)
    }
}

/// A PCI network controller (class 0x0200/0x0207) with no RDMA device: a management Ethernet
/// port or a virtio NIC. Listed for completeness; it carries no RDMA traffic, so it is not a
/// [`Nic`] and gets no worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetFunction {
    /// PCI address.
    pub pci: PciAddr,
    /// PCI vendor id.
    #[serde(serialize_with = "hex::u16")]
    pub vendor: u16,
    /// Network interfaces found through `/sys/class/net`.
    pub netdevs: Vec<String>,
    /// Effective NUMA node.
    pub numa_node: Option<u32>,
}

/// Everything the engine needs to place workers: read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// The sysfs root it was read from (`/` on a live system).
    pub root: PathBuf,
    /// NUMA nodes in id order.
    pub nodes: Vec<NumaNode>,
    /// Online CPUs (`/sys/devices/system/cpu/online`, else the union of the nodes' CPUs).
    pub online_cpus: CpuSet,
    /// GPUs in PCI address order.
    pub gpus: Vec<Gpu>,
    /// RDMA NICs in natural name order.
    pub nics: Vec<Nic>,
    /// Network controllers without an RDMA device.
    pub net_functions: Vec<NetFunction>,
}
