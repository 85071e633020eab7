//! `numa`: GPU, NIC and CPU topology read from sysfs, for placing engine workers.
//!
//! Everything comes from text files and symlinks under a configurable root (`/` on a live
//! system, a fixture tree in tests): PCI functions under `sys/bus/pci/devices`, RDMA devices under
//! `sys/class/infiniband`, netdevs under `sys/class/net`, NUMA nodes under
//! `sys/devices/system/node`. No C library (hwloc) is needed at build or run time.
//!
//! ```no_run
//! let topo = numa::Topology::from_system()?;
//! for gpu in &topo.gpus {
//!     let nics = topo.closest_nics(gpu.index)?;
//!     println!("GPU{} -> {:?}", gpu.index, nics.iter().map(|n| &n.name).collect::<Vec<_>>());
//! }
//! # Ok::<(), numa::TopoError>(())
//! ```
//!
//! Path classes follow NCCL (`PIX < PXB < PHB < NODE < SYS`); the exact rule is in [`classify`].
#![forbid(unsafe_code)]

pub mod classify;
pub mod cpulist;
mod discover;
mod error;
mod model;
pub mod pci;
mod placement;
mod select;
pub mod sysfs;

pub use classify::{Distance, PathClass};
pub use cpulist::{CpuListError, CpuSet};
pub use discover::MAX_PORTS;
pub use error::TopoError;
pub use model::{Gpu, GpuVendor, NetFunction, Nic, NumaNode, RdmaPort, Topology};
pub use pci::{PciAddr, PciPath};
pub use placement::{Endpoint, Matrix, Worker, WorkerTarget};
pub use select::{NicTier, parse_pci_hint};
