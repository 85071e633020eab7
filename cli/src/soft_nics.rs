//! `hipobj bench --soft-nics N`: a host topology with N soft RDMA "NICs", for runs of the soft
//! fabric with one device per NIC on a host that has no RDMA NIC.
//!
//! The engine plans its workers per RDMA NIC and stripes large range-gets across the NICs a
//! registration is bound to (`engine/src/stripe.rs`); both read the host's topology from sysfs
//! (`EngineBuilder::sysfs_root`). This module writes a small sysfs tree in a temporary
//! directory: one NUMA node holding every online CPU of this host (read from the real
//! `/sys/devices/system/cpu/online`), and N RoCE NICs (`softnic0` …) behind one PCIe switch on
//! that node, every port ACTIVE — the shape of `engine/tests/workers_striping.rs`'s fixture,
//! with this host's CPUs. Nothing else is faked: each NIC's workers run on their own cores (the
//! engine splits a node's cores between its NICs), each worker pairs its own soft queue pair
//! with the server, and bytes per NIC come from `Engine::nic_bytes`.

use std::fs;
use std::path::Path;

/// Most soft NICs a synthesized topology holds.
pub const MAX_SOFT_NICS: usize = 16;

/// The name of soft NIC `i` in a synthesized topology.
#[must_use]
pub fn nic_name(i: usize) -> String {
    format!("softnic{i}")
}

/// A synthesized topology; the tree is removed when this is dropped.
#[derive(Debug)]
pub struct SoftNicTopology {
    dir: tempfile::TempDir,
    nics: usize,
}

impl SoftNicTopology {
    /// Writes the tree for `nics` soft NICs on one node with CPUs `cpulist` (kernel cpulist
    /// syntax, e.g. `0-15`).
    ///
    /// # Errors
    /// `nics` outside `1..=MAX_SOFT_NICS`, an empty `cpulist`, or a failed write.
    pub fn write(nics: usize, cpulist: &str) -> Result<Self, String> {
        if !(1..=MAX_SOFT_NICS).contains(&nics) {
            return Err(format!("--soft-nics {nics}: expected 1 to {MAX_SOFT_NICS}"));
        }
        let cpus = cpulist.trim();
        if cpus.is_empty() {
            return Err("--soft-nics: this host lists no online CPUs".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("hipobj-soft-nics.")
            .tempdir()
            .map_err(|e| format!("--soft-nics: temporary directory: {e}"))?;
        build_tree(dir.path(), nics, cpus)
            .map_err(|e| format!("--soft-nics: writing the topology: {e}"))?;
        Ok(Self { dir, nics })
    }

    /// The same, with this host's online CPUs (`/sys/devices/system/cpu/online`).
    ///
    /// # Errors
    /// As [`SoftNicTopology::write`], or when the CPU list cannot be read.
    pub fn for_this_host(nics: usize) -> Result<Self, String> {
        let online = fs::read_to_string("/sys/devices/system/cpu/online")
            .map_err(|e| format!("--soft-nics: reading the online CPUs: {e}"))?;
        Self::write(nics, &online)
    }

    /// The root to hand to `EngineBuilder::sysfs_root`.
    #[must_use]
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The NIC names, in order.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        (0..self.nics).map(nic_name).collect()
    }
}

fn put(root: &Path, rel: &str, text: &str) -> std::io::Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(p, format!("{text}\n"))
}

fn link(root: &Path, rel: &str, target: &str) -> std::io::Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent)?;
    }
    std::os::unix::fs::symlink(target, p)
}

/// A PCI function at the root-relative directory `dir` (`sys/devices/pci…/…`) on node 0.
fn pci(root: &Path, dir: &str, class: u32, vendor: u16, cpus: &str) -> std::io::Result<()> {
    put(root, &format!("{dir}/class"), &format!("0x{class:06x}"))?;
    put(root, &format!("{dir}/vendor"), &format!("0x{vendor:04x}"))?;
    put(root, &format!("{dir}/device"), "0x1234")?;
    put(root, &format!("{dir}/numa_node"), "0")?;
    put(root, &format!("{dir}/local_cpulist"), cpus)?;
    let name = dir.rsplit('/').next().unwrap_or(dir);
    let real = dir.strip_prefix("sys/").unwrap_or(dir);
    link(
        root,
        &format!("sys/bus/pci/devices/{name}"),
        &format!("../../../{real}"),
    )
}

fn build_tree(r: &Path, nics: usize, cpus: &str) -> std::io::Result<()> {
    put(r, "sys/devices/system/node/node0/cpulist", cpus)?;
    put(r, "sys/devices/system/cpu/online", cpus)?;
    let rp = "sys/devices/pci0000:10/0000:10:01.0";
    let usp = format!("{rp}/0000:11:00.0");
    for b in [rp, usp.as_str()] {
        pci(r, b, 0x06_0400, 0x1000, cpus)?;
    }
    for i in 0..nics {
        let name = nic_name(i);
        let bus = 0x13 + i;
        let dsp = format!("{usp}/0000:12:{i:02x}.0");
        let nic = format!("{dsp}/0000:{bus:02x}:00.0");
        pci(r, &dsp, 0x06_0400, 0x1000, cpus)?;
        pci(r, &nic, 0x02_0000, 0x15b3, cpus)?;
        let ib = format!("{nic}/infiniband/{name}");
        link(
            r,
            &format!("{ib}/device"),
            &format!("../../../0000:{bus:02x}:00.0"),
        )?;
        put(r, &format!("{ib}/ports/1/state"), "4: ACTIVE")?;
        put(r, &format!("{ib}/ports/1/link_layer"), "Ethernet")?;
        let real = ib.strip_prefix("sys/").unwrap_or(&ib);
        link(
            r,
            &format!("sys/class/infiniband/{name}"),
            &format!("../../{real}"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_lists_every_soft_nic_on_node_zero() {
        let t = SoftNicTopology::write(3, "0-1").unwrap();
        let topo = numa::Topology::from_root(t.root()).unwrap();
        let names: Vec<String> = topo.nics.iter().map(|n| n.name.clone()).collect();
        assert_eq!(names.len(), 3, "{topo:?}");
        for n in t.names() {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert!(topo.nics.iter().all(|n| n.numa_node == Some(0)), "{topo:?}");
    }

    #[test]
    fn out_of_range_counts_are_refused() {
        assert!(SoftNicTopology::write(0, "0-1").is_err());
        assert!(SoftNicTopology::write(MAX_SOFT_NICS + 1, "0-1").is_err());
        assert!(SoftNicTopology::write(2, " ").is_err());
    }
}
