//! Topology on the committed fixture trees: an HGX H100 node, the development VM and the H200 VM.

mod common;

use common::fixture;
use numa::{CpuSet, Endpoint, GpuVendor, PathClass, Topology, WorkerTarget};

fn cpus(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

const SOCKET0: &str = "0-55,112-167";
const SOCKET1: &str = "56-111,168-223";

#[test]
fn hgx_inventory() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    let gpus: Vec<String> = t.gpus.iter().map(|g| g.pci.to_string()).collect();
    assert_eq!(
        gpus,
        [
            "0000:1b:00.0",
            "0000:43:00.0",
            "0000:52:00.0",
            "0000:61:00.0",
            "0000:9d:00.0",
            "0000:c3:00.0",
            "0000:d1:00.0",
            "0000:df:00.0"
        ]
    );
    assert!(
        t.gpus
            .iter()
            .all(|g| g.vendor == GpuVendor::Nvidia && g.device_id == 0x2330)
    );
    let nics: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        nics,
        [
            "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"
        ]
    );
    let nic0 = &t.nics[0];
    assert_eq!(nic0.pci.unwrap().to_string(), "0000:18:00.0");
    assert_eq!(nic0.netdevs, ["ibp24s0"]);
    assert_eq!(nic0.ports.len(), 1);
    assert_eq!(nic0.ports[0].state, "ACTIVE");
    assert_eq!(nic0.ports[0].link_layer, "InfiniBand");
    assert_eq!(nic0.ports[0].rate.as_deref(), Some("400 Gb/sec (4X NDR)"));
    assert_eq!(t.nics[7].netdevs, ["ibp220s0"]);
    // The X550 management port is a network function, not an RDMA NIC; the ASPEED VGA and the
    // NVSwitches are not GPUs.
    assert_eq!(t.net_functions.len(), 1);
    assert_eq!(t.net_functions[0].pci.to_string(), "0000:01:00.0");
    assert_eq!(t.net_functions[0].netdevs, ["eno1"]);
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.nodes[0].cpus, cpus(SOCKET0));
    assert_eq!(t.nodes[1].cpus, cpus(SOCKET1));
    assert_eq!(t.online_cpus.len(), 224);
    for (i, g) in t.gpus.iter().enumerate() {
        let node = if i < 4 { 0 } else { 1 };
        assert_eq!(g.numa_node, Some(node));
        assert_eq!(g.local_cpus, cpus(if i < 4 { SOCKET0 } else { SOCKET1 }));
        // Root port, switch upstream port, switch downstream port.
        assert_eq!(g.path.bridges.len(), 3);
    }
}

#[test]
fn hgx_gpu_i_is_pix_to_nic_i_only() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    for g in 0..8 {
        let closest = t.closest_nics(g).unwrap();
        assert_eq!(closest.len(), 1, "GPU{g}");
        assert_eq!(closest[0].index, g, "GPU{g}");
        let d = t.distance(Endpoint::Gpu(g), Endpoint::Nic(g)).unwrap();
        assert_eq!(d.class, PathClass::Pix);
        assert_eq!(d.bridges, 3);
        let ranking = t.nic_ranking(g).unwrap();
        assert_eq!(ranking.len(), 8);
        // Then the three other NICs of the socket (NODE), then the far socket (SYS).
        let classes: Vec<PathClass> = ranking.iter().map(|(_, d)| d.class).collect();
        use PathClass::*;
        assert_eq!(classes, [Pix, Node, Node, Node, Sys, Sys, Sys, Sys]);
    }
}

#[test]
fn hgx_classes_across_sockets() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    let class = |a, b| t.distance(a, b).unwrap().class;
    use Endpoint::{Gpu, Nic};
    assert_eq!(class(Gpu(0), Nic(4)), PathClass::Sys);
    assert_eq!(class(Gpu(7), Nic(0)), PathClass::Sys);
    assert_eq!(class(Gpu(0), Nic(3)), PathClass::Node);
    assert_eq!(class(Gpu(5), Nic(6)), PathClass::Node);
    assert_eq!(class(Gpu(0), Gpu(1)), PathClass::Node);
    assert_eq!(class(Gpu(3), Gpu(4)), PathClass::Sys);
    assert_eq!(class(Nic(1), Nic(2)), PathClass::Node);
    assert_eq!(class(Nic(1), Nic(6)), PathClass::Sys);
    // Symmetric.
    for a in 0..8 {
        for b in 0..8 {
            assert_eq!(class(Gpu(a), Nic(b)), class(Nic(b), Gpu(a)));
        }
    }
    let m = t.matrix().unwrap();
    assert_eq!(m.labels.len(), 16);
    assert_eq!(m.labels[8], "NIC0");
    assert_eq!(m.cells[0][0], None);
    assert_eq!(m.cells[0][8], Some(PathClass::Pix));
    assert_eq!(m.cells[12][4], Some(PathClass::Pix));
    assert_eq!(m.cells[12][3], Some(PathClass::Sys));
}

#[test]
fn hgx_worker_cores() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    for n in 0..8 {
        let expect = if n < 4 { SOCKET0 } else { SOCKET1 };
        assert_eq!(t.worker_cores(WorkerTarget::Nic(n)).unwrap(), cpus(expect));
    }
    assert_eq!(
        t.worker_cores(WorkerTarget::Node(1)).unwrap(),
        cpus(SOCKET1)
    );
    assert!(t.worker_cores(WorkerTarget::Node(2)).is_err());
    assert!(t.worker_cores(WorkerTarget::Nic(8)).is_err());
    let plan = t.worker_plan().unwrap();
    let targets: Vec<WorkerTarget> = plan.iter().map(|w| w.target).collect();
    assert_eq!(targets, (0..8).map(WorkerTarget::Nic).collect::<Vec<_>>());
    let cores: Vec<u32> = plan.iter().map(|w| w.core).collect();
    assert_eq!(cores, [1, 2, 3, 4, 56, 57, 58, 59]);
}

#[test]
fn dev_vm_has_no_gpu_and_no_nic() {
    let t = Topology::from_root(fixture("dev-vm")).unwrap();
    assert!(t.gpus.is_empty());
    assert!(t.nics.is_empty());
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].cpus, cpus("0-1"));
    // The virtio NIC (class 0x0200, vendor 0x1af4) carries eth0 but no RDMA device.
    assert_eq!(t.net_functions.len(), 1);
    assert_eq!(t.net_functions[0].pci.to_string(), "0000:00:03.0");
    assert_eq!(t.net_functions[0].netdevs, ["eth0"]);
    assert_eq!(t.net_functions[0].numa_node, Some(0));
    // No NIC: one worker per NUMA node, off CPU 0.
    let plan = t.worker_plan().unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].target, WorkerTarget::Node(0));
    assert_eq!(plan[0].cpus, cpus("0-1"));
    assert_eq!(plan[0].core, 1);
    assert!(t.closest_nics(0).is_err(), "there is no GPU0");
}

#[test]
fn h200_vm_one_gpu_no_nic() {
    let t = Topology::from_root(fixture("h200-vm")).unwrap();
    assert_eq!(t.gpus.len(), 1);
    let g = &t.gpus[0];
    assert_eq!(g.pci.to_string(), "0000:00:06.0");
    assert_eq!(g.vendor, GpuVendor::Nvidia);
    assert_eq!(g.device_id, 0x2335);
    assert_eq!(g.class, 0x030200);
    // numa_node reads -1; the machine has one node, so the effective node is 0, as nvidia-smi
    // prints it (nvidia-smi-topo.txt: NUMA Affinity 0, CPU Affinity 0-15).
    assert_eq!(g.numa_node, Some(0));
    assert_eq!(g.local_cpus, cpus("0-15"));
    assert!(g.path.bridges.is_empty(), "on the root bus");
    assert!(t.nics.is_empty());
    assert!(t.closest_nics(0).unwrap().is_empty());
    assert_eq!(t.net_functions.len(), 1);
    assert_eq!(t.net_functions[0].netdevs, ["eth0"]);
    let plan = t.worker_plan().unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].target, WorkerTarget::Node(0));
    assert_eq!(plan[0].cpus, cpus("0-15"));
    assert_eq!(plan[0].core, 1);
}
