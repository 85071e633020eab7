//! Small hand-built trees for cases the real fixtures do not contain: GPU audio functions, AMD
//! Instinct accelerators, Soft-RoCE, unknown NUMA nodes on multi-node hosts, ties, inactive ports.

mod common;

use std::path::Path;

use common::{link, pci, write};
use numa::{Endpoint, GpuVendor, PathClass, Topology, WorkerTarget};

fn nodes(root: &Path, lists: &[&str]) {
    for (i, l) in lists.iter().enumerate() {
        write(root, &format!("sys/devices/system/node/node{i}/cpulist"), l);
    }
}

fn rdma(root: &Path, pci_dir: &str, name: &str, state: &str) {
    let ib = format!("{pci_dir}/infiniband/{name}");
    let bdf = pci_dir.rsplit('/').next().unwrap();
    link(root, &format!("{ib}/device"), &format!("../../../{bdf}"));
    write(root, &format!("{ib}/ports/1/state"), state);
    write(root, &format!("{ib}/ports/1/link_layer"), "Ethernet");
    link(
        root,
        &format!("sys/class/infiniband/{name}"),
        &format!("../../{}", ib.strip_prefix("sys/").unwrap()),
    );
}

#[test]
fn audio_functions_are_not_gpus_and_mi300x_is() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    nodes(r, &["0-7"]);
    let h = "sys/devices/pci0000:00/0000:00:01.0";
    pci(r, h, 0x060400, 0x8086, 0, "0-7");
    pci(r, &format!("{h}/0000:01:00.0"), 0x030000, 0x10de, 0, "0-7"); // GeForce VGA
    pci(r, &format!("{h}/0000:01:00.1"), 0x040300, 0x10de, 0, "0-7"); // its HDMI audio
    let h2 = "sys/devices/pci0000:00/0000:00:02.0";
    pci(r, h2, 0x060400, 0x8086, 0, "0-7");
    pci(r, &format!("{h2}/0000:02:00.0"), 0x120000, 0x1002, 0, "0-7"); // MI300X
    pci(r, &format!("{h2}/0000:02:00.1"), 0x040300, 0x1002, 0, "0-7"); // AMD audio
    pci(r, &format!("{h2}/0000:02:00.2"), 0x030000, 0x1022, 0, "0-7"); // AMD CPU vendor id
    let t = Topology::from_root(r).unwrap();
    let found: Vec<(String, GpuVendor)> = t
        .gpus
        .iter()
        .map(|g| (g.pci.to_string(), g.vendor))
        .collect();
    assert_eq!(
        found,
        [
            ("0000:01:00.0".to_string(), GpuVendor::Nvidia),
            ("0000:02:00.0".to_string(), GpuVendor::Amd)
        ]
    );
    assert_eq!(
        t.distance(Endpoint::Gpu(0), Endpoint::Gpu(1))
            .unwrap()
            .class,
        PathClass::Phb
    );
}

#[test]
fn ties_are_kept_and_active_ports_come_first() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    nodes(r, &["0-3", "4-7"]);
    let rp = "sys/devices/pci0000:00/0000:00:01.0";
    let usp = format!("{rp}/0000:01:00.0");
    pci(r, rp, 0x060400, 0x8086, 0, "0-3");
    pci(r, &usp, 0x060400, 0x1000, 0, "0-3");
    for (dev, bdf) in [
        (0, "0000:03:00.0"),
        (1, "0000:04:00.0"),
        (2, "0000:05:00.0"),
    ] {
        pci(
            r,
            &format!("{usp}/0000:02:0{dev}.0"),
            0x060400,
            0x1000,
            0,
            "0-3",
        );
        pci(
            r,
            &format!("{usp}/0000:02:0{dev}.0/{bdf}"),
            0x020000,
            0x15b3,
            0,
            "0-3",
        );
    }
    pci(
        r,
        &format!("{usp}/0000:02:03.0"),
        0x060400,
        0x1000,
        0,
        "0-3",
    );
    pci(
        r,
        &format!("{usp}/0000:02:03.0/0000:06:00.0"),
        0x030200,
        0x10de,
        0,
        "0-3",
    );
    // Two NICs in the GPU's switch, the first one down; a third also there but named later.
    rdma(
        r,
        &format!("{usp}/0000:02:00.0/0000:03:00.0"),
        "mlx5_0",
        "1: DOWN",
    );
    rdma(
        r,
        &format!("{usp}/0000:02:01.0/0000:04:00.0"),
        "mlx5_1",
        "4: ACTIVE",
    );
    rdma(
        r,
        &format!("{usp}/0000:02:02.0/0000:05:00.0"),
        "mlx5_2",
        "4: ACTIVE",
    );
    let t = Topology::from_root(r).unwrap();
    let names: Vec<&str> = t
        .closest_nics(0)
        .unwrap()
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(names, ["mlx5_1", "mlx5_2", "mlx5_0"]);
    assert!(!t.nics[0].is_up());
}

#[test]
fn unknown_numa_on_two_nodes_is_sys_and_uses_all_cpus() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    nodes(r, &["0-3", "4-7"]);
    write(r, "sys/devices/system/cpu/online", "0-7");
    pci(
        r,
        "sys/devices/pci0000:00/0000:00:01.0",
        0x030200,
        0x10de,
        0,
        "0-3",
    );
    let nic = "sys/devices/pci0000:40/0000:40:01.0";
    pci(r, nic, 0x020000, 0x15b3, -1, "");
    rdma(r, nic, "mlx5_0", "4: ACTIVE");
    let t = Topology::from_root(r).unwrap();
    assert_eq!(t.nics[0].numa_node, None);
    assert_eq!(
        t.distance(Endpoint::Gpu(0), Endpoint::Nic(0))
            .unwrap()
            .class,
        PathClass::Sys
    );
    // No local_cpulist and no node: every online CPU.
    assert_eq!(
        t.worker_cores(WorkerTarget::Nic(0)).unwrap().to_string(),
        "0-7"
    );
    // With numa_node 1 the NODE/SYS answer changes to the node's CPUs.
    std::fs::write(r.join(format!("{nic}/numa_node")), "1\n").unwrap();
    let t = Topology::from_root(r).unwrap();
    assert_eq!(
        t.worker_cores(WorkerTarget::Nic(0)).unwrap().to_string(),
        "4-7"
    );
    std::fs::write(r.join(format!("{nic}/numa_node")), "0\n").unwrap();
    let t = Topology::from_root(r).unwrap();
    assert_eq!(
        t.distance(Endpoint::Gpu(0), Endpoint::Nic(0))
            .unwrap()
            .class,
        PathClass::Node
    );
}

#[test]
fn soft_roce_follows_its_parent_netdev() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    nodes(r, &["0-1"]);
    let virtio = "sys/devices/pci0000:00/0000:00:03.0";
    pci(r, virtio, 0x020000, 0x1af4, -1, "0-1");
    write(r, &format!("{virtio}/virtio2/net/eth0/type"), "1");
    link(
        r,
        "sys/class/net/eth0",
        "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0",
    );
    write(r, "sys/devices/virtual/infiniband/rxe0/parent", "eth0");
    write(
        r,
        "sys/devices/virtual/infiniband/rxe0/ports/1/state",
        "4: ACTIVE",
    );
    write(
        r,
        "sys/devices/virtual/infiniband/rxe0/ports/1/link_layer",
        "Ethernet",
    );
    link(
        r,
        "sys/class/infiniband/rxe0",
        "../../devices/virtual/infiniband/rxe0",
    );
    let t = Topology::from_root(r).unwrap();
    assert_eq!(t.nics.len(), 1);
    let n = &t.nics[0];
    assert_eq!(n.name, "rxe0");
    assert_eq!(n.pci.unwrap().to_string(), "0000:00:03.0");
    assert_eq!(n.netdevs, ["eth0"]);
    assert_eq!(n.numa_node, Some(0));
    assert!(
        t.net_functions.is_empty(),
        "the virtio function now backs an RDMA NIC"
    );
    let plan = t.worker_plan().unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].target, WorkerTarget::Nic(0));
    assert_eq!(plan[0].core, 1);
}

#[test]
fn too_deep_pci_tree_is_a_limit_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    nodes(r, &["0"]);
    let mut path = String::from("sys/devices/pci0000:00");
    for i in 0..40 {
        path.push_str(&format!("/0000:{i:02x}:00.0"));
    }
    pci(r, &path, 0x030200, 0x10de, 0, "0");
    assert!(matches!(
        Topology::from_root(r),
        Err(numa::TopoError::Limit {
            what: "PCI bridge depth",
            ..
        })
    ));
}
