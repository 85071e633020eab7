//! Reading a [`Topology`] from a sysfs tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cpulist::CpuSet;
use crate::error::TopoError;
use crate::model::{Gpu, GpuVendor, NetFunction, Nic, NumaNode, RdmaPort, Topology};
use crate::pci::{PciAddr, PciFunction, VENDOR_NVIDIA, is_host_bridge_name};
use crate::sysfs::Sysfs;

/// Most ports one RDMA device may list (real devices have 1 or 2).
pub const MAX_PORTS: usize = 256;

impl Topology {
    /// Reads the live system (`/`).
    pub fn from_system() -> Result<Self, TopoError> {
        Self::from_root("/")
    }

    /// Reads the sysfs tree below `root` (`<root>/sys/...`).
    pub fn from_root(root: impl AsRef<Path>) -> Result<Self, TopoError> {
        let sysfs = Sysfs::new(root)?;
        let nodes = read_nodes(&sysfs)?;
        let online_cpus = match sysfs.read_attr_opt(Path::new("sys/devices/system/cpu/online"))? {
            Some(_) => sysfs.read_cpulist(Path::new("sys/devices/system/cpu/online"))?,
            None => nodes
                .iter()
                .fold(CpuSet::new(), |acc, n| acc.union(&n.cpus)),
        };
        let single_node = match nodes.as_slice() {
            [only] => Some(only.id),
            _ => None,
        };
        let effective = |f: &PciFunction| f.numa_node.or(single_node);

        let functions = read_pci(&sysfs)?;
        let netdevs = read_netdevs(&sysfs)?;
        let rdma = read_rdma(&sysfs, &netdevs)?;

        let mut gpus: Vec<Gpu> = Vec::new();
        for (addr, (_, f)) in &functions {
            if !f.is_gpu() {
                continue;
            }
            gpus.push(Gpu {
                index: gpus.len(),
                pci: *addr,
                vendor: if f.vendor == VENDOR_NVIDIA {
                    GpuVendor::Nvidia
                } else {
                    GpuVendor::Amd
                },
                device_id: f.device_id,
                class: f.class,
                numa_node: effective(f),
                local_cpus: f.local_cpus.clone(),
                path: f.path.clone(),
            });
        }

        let mut nics = Vec::new();
        for (i, dev) in rdma.into_iter().enumerate() {
            let func = match &dev.pci_real {
                Some(real) => Some(match functions.iter().find(|(_, (r, _))| r == real) {
                    Some((_, (_, f))) => f.clone(),
                    None => PciFunction::read(&sysfs, real)?,
                }),
                None => None,
            };
            let mut names = dev.parent_netdev.into_iter().collect::<Vec<_>>();
            if let Some(real) = &dev.pci_real {
                names.extend(netdevs.get(real).into_iter().flatten().cloned());
            }
            names.sort();
            names.dedup();
            nics.push(Nic {
                index: i,
                name: dev.name,
                pci: func.as_ref().map(|f| f.path.device),
                vendor: func.as_ref().map(|f| f.vendor),
                netdevs: names,
                ports: dev.ports,
                numa_node: func.as_ref().and_then(effective).or(single_node),
                local_cpus: func
                    .as_ref()
                    .map(|f| f.local_cpus.clone())
                    .unwrap_or_default(),
                path: func.map(|f| f.path),
            });
        }

        let mut net_functions = Vec::new();
        for (addr, (real, f)) in &functions {
            if !f.is_network() || nics.iter().any(|n| n.pci == Some(*addr)) {
                continue;
            }
            net_functions.push(NetFunction {
                pci: *addr,
                vendor: f.vendor,
                netdevs: netdevs.get(real).cloned().unwrap_or_default(),
                numa_node: effective(f),
            });
        }

        Ok(Topology {
            root: sysfs.root().to_path_buf(),
            nodes,
            online_cpus,
            gpus,
            nics,
            net_functions,
        })
    }
}

/// `/sys/devices/system/node/node<N>/cpulist` for every node; a kernel without NUMA has no such
/// directory, and then all online CPUs form node 0.
fn read_nodes(sysfs: &Sysfs) -> Result<Vec<NumaNode>, TopoError> {
    let dir = Path::new("sys/devices/system/node");
    let mut nodes = Vec::new();
    for name in sysfs.list_dir(dir)? {
        let Some(id) = name.strip_prefix("node") else {
            continue;
        };
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let id: u32 = id
            .parse()
            .ok()
            .filter(|n| *n <= crate::pci::MAX_NUMA_NODE)
            .ok_or_else(|| TopoError::malformed(sysfs.abs(&dir.join(&name)), "node id", &name))?;
        let cpus = sysfs.read_cpulist(&dir.join(&name).join("cpulist"))?;
        nodes.push(NumaNode { id, cpus });
    }
    if nodes.is_empty() {
        let cpus = sysfs.read_cpulist(Path::new("sys/devices/system/cpu/online"))?;
        nodes.push(NumaNode { id: 0, cpus });
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

/// Every function under `/sys/bus/pci/devices`, keyed by address, with its real path.
fn read_pci(sysfs: &Sysfs) -> Result<BTreeMap<PciAddr, (PathBuf, PciFunction)>, TopoError> {
    let dir = Path::new("sys/bus/pci/devices");
    let mut out = BTreeMap::new();
    for name in sysfs.list_dir(dir)? {
        let link = dir.join(&name);
        let addr: PciAddr = name.parse().map_err(|detail: String| {
            TopoError::malformed(sysfs.abs(&link), "PCI address", detail)
        })?;
        let real = sysfs.resolve(&link)?;
        let f = PciFunction::read(sysfs, &real)?;
        if f.path.device != addr {
            return Err(TopoError::malformed(
                sysfs.abs(&link),
                "PCI device link",
                format!("points at {}", real.display()),
            ));
        }
        out.insert(addr, (real, f));
    }
    Ok(out)
}

/// The root-relative real path of the PCI function a device path sits under: the deepest
/// `DDDD:BB:DD.F` component that follows a host bridge component. `None` for virtual devices.
fn pci_ancestor(real: &Path) -> Option<PathBuf> {
    let comps: Vec<&str> = real.iter().filter_map(|c| c.to_str()).collect();
    let host = comps.iter().rposition(|c| is_host_bridge_name(c))?;
    let mut last = None;
    for (i, c) in comps.iter().enumerate().skip(host + 1) {
        if c.parse::<PciAddr>().is_ok() {
            last = Some(i);
        } else {
            break;
        }
    }
    let last = last?;
    Some(comps.iter().take(last + 1).collect())
}

/// Netdevs under `/sys/class/net`, grouped by the real path of their PCI function. Virtual
/// interfaces (`lo`, bridges, veths) have no PCI ancestor and are left out. An entry whose link
/// no longer resolves is skipped: interfaces come and go (containers), and one vanishing while we
/// scan is not an error.
fn read_netdevs(sysfs: &Sysfs) -> Result<BTreeMap<PathBuf, Vec<String>>, TopoError> {
    let dir = Path::new("sys/class/net");
    let mut out: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    for name in sysfs.list_dir(dir)? {
        let real = match sysfs.resolve(&dir.join(&name)) {
            Ok(r) => r,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        if let Some(pci) = pci_ancestor(&real) {
            out.entry(pci).or_default().push(name);
        }
    }
    Ok(out)
}

/// One `/sys/class/infiniband` entry before it is joined with PCI data.
struct RdmaDev {
    name: String,
    pci_real: Option<PathBuf>,
    parent_netdev: Option<String>,
    ports: Vec<RdmaPort>,
}

fn natural_key(name: &str) -> (String, u64, String) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (
        head.to_string(),
        tail.parse().unwrap_or(0),
        name.to_string(),
    )
}

fn read_rdma(
    sysfs: &Sysfs,
    netdevs: &BTreeMap<PathBuf, Vec<String>>,
) -> Result<Vec<RdmaDev>, TopoError> {
    let dir = Path::new("sys/class/infiniband");
    let mut names = sysfs.list_dir(dir)?;
    names.sort_by_key(|n| natural_key(n));
    let mut out = Vec::new();
    for name in names {
        let base = dir.join(&name);
        let dev_link = base.join("device");
        let mut parent_netdev = None;
        let pci_real = if sysfs.exists(&dev_link) {
            let real = sysfs.resolve(&dev_link)?;
            match pci_ancestor(&real) {
                Some(p) if p == real => Some(p),
                _ => {
                    return Err(TopoError::malformed(
                        sysfs.abs(&dev_link),
                        "RDMA device link",
                        format!("{} is not a PCI function", real.display()),
                    ));
                }
            }
        } else if let Some(parent) = sysfs.read_attr_opt(&base.join("parent"))? {
            // Soft-RoCE (rxe) and siw name their parent netdev instead of linking a device.
            let found = netdevs
                .iter()
                .find(|(_, names)| names.contains(&parent))
                .map(|(p, _)| p.clone());
            parent_netdev = Some(parent);
            found
        } else {
            None
        };
        let ports = read_ports(sysfs, &base.join("ports"))?;
        out.push(RdmaDev {
            name,
            pci_real,
            parent_netdev,
            ports,
        });
    }
    Ok(out)
}

fn read_ports(sysfs: &Sysfs, dir: &Path) -> Result<Vec<RdmaPort>, TopoError> {
    let mut ports = Vec::new();
    for name in sysfs.list_dir(dir)? {
        let port: u32 = name
            .parse()
            .map_err(|_| TopoError::malformed(sysfs.abs(&dir.join(&name)), "port number", &name))?;
        if ports.len() >= MAX_PORTS {
            return Err(TopoError::Limit {
                path: sysfs.abs(dir),
                what: "RDMA ports",
                limit: MAX_PORTS,
            });
        }
        let p = dir.join(&name);
        let state_raw = sysfs.read_attr(&p.join("state"))?;
        // "4: ACTIVE" -> "ACTIVE".
        let state = match state_raw.split_once(':') {
            Some((num, s)) if num.trim().parse::<u8>().is_ok() && !s.trim().is_empty() => {
                s.trim().to_string()
            }
            _ => {
                return Err(TopoError::malformed(
                    sysfs.abs(&p.join("state")),
                    "port state",
                    format!("`{state_raw}` is not `N: NAME`"),
                ));
            }
        };
        let link_layer = sysfs.read_attr(&p.join("link_layer"))?;
        let rate = sysfs.read_attr_opt(&p.join("rate"))?;
        ports.push(RdmaPort {
            port,
            state,
            link_layer,
            rate,
        });
    }
    ports.sort_by_key(|p| p.port);
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["mlx5_10", "mlx5_2", "mlx5_0", "rxe0", "bnxt_re1"];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(v, ["bnxt_re1", "mlx5_0", "mlx5_2", "mlx5_10", "rxe0"]);
    }

    #[test]
    fn pci_ancestor_of_netdev() {
        let p = Path::new("sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0");
        assert_eq!(
            pci_ancestor(p),
            Some(PathBuf::from("sys/devices/pci0000:00/0000:00:03.0"))
        );
        assert_eq!(pci_ancestor(Path::new("sys/devices/virtual/net/lo")), None);
    }
}
