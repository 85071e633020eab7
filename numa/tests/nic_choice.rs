//! Which NICs a GPU's (or a NUMA node's) buffers use, on every fixture: HGX 8 GPU / 8 NIC, the
//! H200 VM, a two-socket host with two NICs and an MI300X host with `bnxt_re` / `ionic` NICs.
//! A farther NIC is never chosen while a nearer usable one is up; NIC hints resolve by name,
//! netdev or PCI address.

mod common;

use common::{fixture, scratch_copy, write};
use numa::{NicTier, PathClass, Topology};

fn names(t: &Topology, tier: &NicTier) -> Vec<String> {
    tier.nics.iter().map(|&i| t.nics[i].name.clone()).collect()
}

fn nearest(t: &Topology, gpu: usize) -> (Option<PathClass>, Vec<String>) {
    let tier = t.nearest_nics(gpu, |_| true).unwrap();
    (tier.class, names(t, &tier))
}

#[test]
fn hgx_each_gpu_uses_its_switch_nic() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    let expect = [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11",
    ];
    for (g, nic) in expect.iter().enumerate() {
        assert_eq!(
            nearest(&t, g),
            (Some(PathClass::Pix), vec![nic.to_string()])
        );
    }
}

/// Takes port 1 of `nic` down in a scratch copy of fixture `name`.
fn with_port_down(name: &str, nics: &[&str]) -> (tempfile::TempDir, Topology) {
    let dir = scratch_copy(name);
    for nic in nics {
        write(
            dir.path(),
            &format!("sys/class/infiniband/{nic}/ports/1/state"),
            "1: DOWN",
        );
    }
    let t = Topology::from_root(dir.path()).unwrap();
    (dir, t)
}

#[test]
fn hgx_a_down_nic_moves_its_gpu_to_the_same_socket_never_across() {
    let (_d, t) = with_port_down("hgx-h100", &["mlx5_0"]);
    // GPU0's PIX NIC is down: the other three NICs of socket 0 (NODE), none of socket 1.
    assert_eq!(
        nearest(&t, 0),
        (
            Some(PathClass::Node),
            vec!["mlx5_3".into(), "mlx5_4".into(), "mlx5_5".into()]
        )
    );
    // Everyone else keeps their own.
    assert_eq!(nearest(&t, 1).1, ["mlx5_3"]);
    // A whole socket down: only then the far socket.
    let (_d, t) = with_port_down("hgx-h100", &["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5"]);
    let (class, nics) = nearest(&t, 2);
    assert_eq!(class, Some(PathClass::Sys));
    assert_eq!(nics, ["mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]);
    // Every NIC down: the nearest by distance (its worker falls back to HTTP), not nothing.
    let all = [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11",
    ];
    let (_d, t) = with_port_down("hgx-h100", &all);
    assert_eq!(
        nearest(&t, 5),
        (Some(PathClass::Pix), vec!["mlx5_9".into()])
    );
}

#[test]
fn hgx_unusable_nics_are_skipped_for_the_next_tier() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    // The engine passes "has a worker": here mlx5_6 (GPU4's) has none.
    let tier = t.nearest_nics(4, |n| n.name != "mlx5_6").unwrap();
    assert_eq!(tier.class, Some(PathClass::Node));
    assert_eq!(names(&t, &tier), ["mlx5_9", "mlx5_10", "mlx5_11"]);
    let tier = t.nearest_nics(4, |_| false).unwrap();
    assert_eq!(
        tier,
        NicTier {
            class: None,
            nics: vec![]
        }
    );
    assert!(t.nearest_nics(8, |_| true).is_err(), "no GPU8");
}

#[test]
fn hgx_host_memory_uses_the_nics_of_its_node() {
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    assert_eq!(
        names(&t, &t.node_nics(0, |_| true)),
        ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5"]
    );
    assert_eq!(
        names(&t, &t.node_nics(1, |_| true)),
        ["mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    );
    assert!(t.node_nics(2, |_| true).nics.is_empty());
    let (_d, t) = with_port_down("hgx-h100", &["mlx5_6"]);
    assert_eq!(
        names(&t, &t.node_nics(1, |_| true)),
        ["mlx5_9", "mlx5_10", "mlx5_11"]
    );
}

#[test]
fn h200_vm_has_no_nic_to_choose() {
    let t = Topology::from_root(fixture("h200-vm")).unwrap();
    assert_eq!(nearest(&t, 0), (None, vec![]));
    assert!(t.node_nics(0, |_| true).nics.is_empty());
    let gpu = t.gpu_at("0000:00:06.0".parse().unwrap()).unwrap();
    assert_eq!(gpu.index, 0);
    assert!(t.find_nic("mlx5_0").is_none());
}

#[test]
fn two_socket_tiers() {
    let t = Topology::from_root(fixture("two-socket-2nic")).unwrap();
    let nics: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nics, ["mlx5_0", "mlx5_1"]);
    let gpus: Vec<String> = t.gpus.iter().map(|g| g.pci.to_string()).collect();
    assert_eq!(
        gpus,
        [
            "0000:14:00.0",
            "0000:31:00.0",
            "0000:91:00.0",
            "0000:b1:00.0"
        ]
    );
    use PathClass::*;
    assert_eq!(nearest(&t, 0), (Some(Pix), vec!["mlx5_0".into()]));
    assert_eq!(nearest(&t, 1), (Some(Node), vec!["mlx5_0".into()]));
    assert_eq!(nearest(&t, 2), (Some(Phb), vec!["mlx5_1".into()]));
    assert_eq!(nearest(&t, 3), (Some(Node), vec!["mlx5_1".into()]));
    assert_eq!(t.gpu_nic_class(0, 1).unwrap(), Sys);
    assert_eq!(t.gpu_nic_class(3, 0).unwrap(), Sys);
    // mlx5_1 down: socket 1's GPUs cross to mlx5_0, as there is nothing nearer that is up.
    let (_d, t) = with_port_down("two-socket-2nic", &["mlx5_1"]);
    assert_eq!(nearest(&t, 2), (Some(Sys), vec!["mlx5_0".into()]));
    assert_eq!(nearest(&t, 0), (Some(Pix), vec!["mlx5_0".into()]));
}

#[test]
fn mi300x_bnxt_and_ionic() {
    let t = Topology::from_root(fixture("mi300x")).unwrap();
    let nics: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        nics,
        [
            "bnxt_re0", "bnxt_re1", "bnxt_re2", "bnxt_re3", "ionic_0", "ionic_1", "ionic_2",
            "ionic_3"
        ]
    );
    assert_eq!(t.gpus.len(), 8);
    assert!(t.gpus.iter().all(|g| g.vendor == numa::GpuVendor::Amd));
    for (g, nic) in nics.iter().enumerate() {
        assert_eq!(
            nearest(&t, g),
            (Some(PathClass::Pxb), vec![nic.to_string()]),
            "GPU{g}"
        );
    }
    assert_eq!(t.nics[0].vendor, Some(0x14e4));
    assert_eq!(t.nics[7].vendor, Some(0x1dd8));
    let (_d, t) = with_port_down("mi300x", &["ionic_3"]);
    let (class, nics) = nearest(&t, 7);
    assert_eq!(class, Some(PathClass::Node));
    assert_eq!(nics, ["ionic_0", "ionic_1", "ionic_2"]);
}

#[test]
fn nic_hints_by_name_netdev_and_pci_address() {
    let t = Topology::from_root(fixture("mi300x")).unwrap();
    let find = |h: &str| t.find_nic(h).map(|n| n.name.as_str());
    assert_eq!(find("ionic_0"), Some("ionic_0"));
    assert_eq!(find("bnxt_re2"), Some("bnxt_re2"));
    assert_eq!(find("enp144s0np0"), Some("ionic_0"));
    let pci = t.nics[5].pci.unwrap().to_string();
    assert_eq!(find(&pci), Some("ionic_1"));
    assert_eq!(find(&pci[5..]), Some("ionic_1"), "short form {}", &pci[5..]);
    assert_eq!(find(&pci.to_ascii_uppercase()), Some("ionic_1"));
    for bad in ["mlx5_0", "", "ionic_", "0000:ff:00.0"] {
        assert_eq!(find(bad), None, "{bad}");
    }
    let t = Topology::from_root(fixture("hgx-h100")).unwrap();
    assert_eq!(t.find_nic("0000:18:00.0").map(|n| n.index), Some(0));
    assert_eq!(t.find_nic("18:00.0").map(|n| n.index), Some(0));
    assert_eq!(
        t.find_nic("ibp220s0").map(|n| n.name.as_str()),
        Some("mlx5_11")
    );
}
