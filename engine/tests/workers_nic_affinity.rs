//! Which NICs and workers a registration's operations use, on fixture topologies: HGX 8 GPU /
//! 8 NIC, the H200 VM, a two-socket host with two NICs and an MI300X host with `bnxt_re` /
//! `ionic` NICs (`numa/fixtures`). Planned with [`PlacementPlan`] as the engine plans
//! (`Placement::Auto`, every CPU of the fixture allowed), then end to end: an engine built on a
//! small two-node tree binds a GPU registration (its PCI address from the runtime) and a host
//! registration (its first page's NUMA node) to the near NIC, and every operation on a bound
//! buffer runs on that NIC's workers while unbound ones spread over all.
#![allow(unsafe_code)]

mod common;
#[path = "../../numa/tests/common/mod.rs"]
mod sysfs_tree;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::test_gpu::{TestGpu, dev_base};
use common::{S3sFs, put_file};
use engine::gpu::DevicePtr;
use engine::{EngineError, Fabric, Locality, Placement, PlacementPlan, RegisterOptions};
use numa::{PathClass, PciAddr, Topology};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../numa/fixtures")
        .join(name)
}

/// `Placement::Auto` with `per_nic` workers per NIC on fixture `name`, the process allowed on
/// every online CPU of the fixture, restricted to `nics` when given.
fn plan(name: &str, per_nic: usize, nics: &[&str]) -> Result<PlacementPlan, EngineError> {
    let t = Topology::from_root(fixture(name)).unwrap();
    let allowed: Vec<u32> = t.online_cpus.iter().collect();
    let nics: Vec<String> = nics.iter().map(|s| s.to_string()).collect();
    PlacementPlan::new(Some(t), &Placement::Auto, per_nic, &nics, &allowed)
}

fn gpu_pci(p: &PlacementPlan, gpu: usize) -> PciAddr {
    p.topology().unwrap().gpus[gpu].pci
}

/// For each GPU: its NICs, their class, and the NICs of the workers it would use.
fn for_gpu(p: &PlacementPlan, gpu: usize) -> Option<(Vec<String>, Option<PathClass>, Vec<usize>)> {
    let a = p.for_gpu(gpu_pci(p, gpu))?;
    assert_eq!(a.locality, Locality::Gpu(gpu_pci(p, gpu)));
    for &w in &a.workers {
        let nic = p.workers()[w].nic.clone().unwrap();
        assert!(
            a.nics.contains(&nic),
            "worker {w} serves {nic}, not {:?}",
            a.nics
        );
    }
    Some((a.nics, a.class, a.workers))
}

fn nic_names(p: &PlacementPlan) -> Vec<Option<String>> {
    p.workers().iter().map(|w| w.nic.clone()).collect()
}

#[test]
fn hgx_each_gpu_uses_its_own_nics_workers() {
    let p = plan("hgx-h100", 2, &[]).unwrap();
    let nics = [
        "mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11",
    ];
    // Two workers per NIC, in NIC order, on the NIC's socket.
    let planned = nic_names(&p);
    assert_eq!(planned.len(), 16);
    for (i, w) in p.workers().iter().enumerate() {
        assert_eq!(w.nic.as_deref(), Some(nics[i / 2]));
        assert_eq!(w.numa_node, Some(u32::from(i >= 8)));
        let core = w.core.unwrap();
        assert_eq!(
            core < 56 || (112..168).contains(&core),
            i < 8,
            "worker {i} on {core}"
        );
    }
    for (g, nic) in nics.iter().enumerate() {
        assert_eq!(
            for_gpu(&p, g),
            Some((
                vec![nic.to_string()],
                Some(PathClass::Pix),
                vec![2 * g, 2 * g + 1]
            ))
        );
    }
    // Host memory: the NICs of the node, and their workers.
    let a = p.for_node(1).unwrap();
    assert_eq!(a.nics, nics[4..]);
    assert_eq!(a.workers, (8..16).collect::<Vec<_>>());
    assert_eq!(a.class, None);
    assert!(p.for_node(7).is_none());
}

#[test]
fn hgx_nic_hints_restrict_placement_and_never_cross_sockets_needlessly() {
    // By name and by PCI address (mlx5_0 is 0000:18:00.0).
    let p = plan("hgx-h100", 2, &["mlx5_6", "18:00.0"]).unwrap();
    assert_eq!(
        nic_names(&p),
        ["mlx5_0", "mlx5_0", "mlx5_6", "mlx5_6"].map(|s| Some(s.to_string()))
    );
    // GPU0: its own NIC. GPU1's NIC has no worker: the same socket's mlx5_0 (NODE), never
    // mlx5_6 across the sockets. GPU5: mlx5_6 (NODE).
    assert_eq!(for_gpu(&p, 0).unwrap().0, ["mlx5_0"]);
    let (nics, class, workers) = for_gpu(&p, 1).unwrap();
    assert_eq!(
        (nics, class, workers),
        (vec!["mlx5_0".into()], Some(PathClass::Node), vec![0, 1])
    );
    let (nics, class, _) = for_gpu(&p, 5).unwrap();
    assert_eq!(
        (nics, class),
        (vec!["mlx5_6".into()], Some(PathClass::Node))
    );
    // Only one socket's NIC named: the far socket's GPUs use it (nothing nearer has a worker).
    let p = plan("hgx-h100", 1, &["mlx5_3"]).unwrap();
    assert_eq!(for_gpu(&p, 6).unwrap().1, Some(PathClass::Sys));
}

#[test]
fn a_nic_hint_that_names_nothing_is_a_typed_error_listing_the_nics() {
    match plan("hgx-h100", 1, &["mlx5_0", "bnxt_re0"]) {
        Err(EngineError::NicNotFound { hint, available }) => {
            assert_eq!(hint, "bnxt_re0");
            assert_eq!(available.len(), 8);
            assert_eq!(available[1], "mlx5_3");
        }
        other => panic!("{other:?}"),
    }
    let e = plan("mi300x", 1, &["0000:99:00.0"]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("\"0000:99:00.0\""), "{msg}");
    assert!(msg.contains("bnxt_re0, bnxt_re1"), "{msg}");
    let e = plan("h200-vm", 1, &["mlx5_0"]).unwrap_err();
    assert!(
        matches!(&e, EngineError::NicNotFound { available, .. } if available.is_empty()),
        "{e:?}"
    );
    assert!(e.to_string().contains("this host has no RDMA NIC"), "{e}");
    assert!(matches!(
        plan("hgx-h100", 1, &[""]),
        Err(EngineError::Config(_))
    ));
}

#[test]
fn h200_vm_buffers_use_any_worker() {
    let p = plan("h200-vm", 4, &[]).unwrap();
    assert_eq!(p.workers().len(), 4);
    assert!(
        p.workers()
            .iter()
            .all(|w| w.nic.is_none() && w.numa_node == Some(0))
    );
    assert_eq!(for_gpu(&p, 0), None, "no RDMA NIC: unbound");
    assert!(p.for_node(0).is_none());
}

#[test]
fn two_socket_host_with_two_nics() {
    let p = plan("two-socket-2nic", 3, &[]).unwrap();
    assert_eq!(
        nic_names(&p),
        ["mlx5_0", "mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1", "mlx5_1"].map(|s| Some(s.to_string()))
    );
    use PathClass::*;
    let expect = [
        ("mlx5_0", Pix, [0, 1, 2]),
        ("mlx5_0", Node, [0, 1, 2]),
        ("mlx5_1", Phb, [3, 4, 5]),
        ("mlx5_1", Node, [3, 4, 5]),
    ];
    for (g, (nic, class, workers)) in expect.iter().enumerate() {
        assert_eq!(
            for_gpu(&p, g),
            Some((vec![nic.to_string()], Some(*class), workers.to_vec())),
            "GPU{g}"
        );
    }
    assert_eq!(p.for_node(0).unwrap().nics, ["mlx5_0"]);
}

#[test]
fn mi300x_gpus_use_their_bnxt_or_ionic_nic() {
    let p = plan("mi300x", 1, &[]).unwrap();
    let nics = [
        "bnxt_re0", "bnxt_re1", "bnxt_re2", "bnxt_re3", "ionic_0", "ionic_1", "ionic_2", "ionic_3",
    ];
    for (g, nic) in nics.iter().enumerate() {
        assert_eq!(
            for_gpu(&p, g),
            Some((vec![nic.to_string()], Some(PathClass::Pxb), vec![g])),
            "GPU{g}"
        );
    }
    // Restricted to the ionic NICs: socket 0's GPUs cross (SYS) since nothing nearer is served.
    let p = plan("mi300x", 1, &["ionic_0", "ionic_1"]).unwrap();
    let (nics, class, _) = for_gpu(&p, 0).unwrap();
    assert_eq!(
        (nics, class),
        (
            vec!["ionic_0".into(), "ionic_1".into()],
            Some(PathClass::Sys)
        )
    );
    assert_eq!(for_gpu(&p, 5).unwrap().0, ["ionic_1"]);
}

#[test]
fn a_down_nic_is_passed_over_for_an_up_one_of_the_next_tier() {
    let dir = scratch_copy(&fixture("hgx-h100"));
    sysfs_tree::write(
        dir.path(),
        "sys/class/infiniband/mlx5_9/ports/1/state",
        "1: DOWN",
    );
    let t = Topology::from_root(dir.path()).unwrap();
    let allowed: Vec<u32> = t.online_cpus.iter().collect();
    let p = PlacementPlan::new(Some(t), &Placement::Auto, 1, &[], &allowed).unwrap();
    // GPU5's own NIC is down: the three other NICs of socket 1, never socket 0's.
    let (nics, class, workers) = for_gpu(&p, 5).unwrap();
    assert_eq!(nics, ["mlx5_6", "mlx5_10", "mlx5_11"]);
    assert_eq!(class, Some(PathClass::Node));
    assert_eq!(workers, [4, 6, 7]);
}

/// A writable copy of a fixture tree.
fn scratch_copy(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    sysfs_tree::copy_tree(from, dir.path());
    dir
}

// ---- End to end: an engine on a two-node tree -------------------------------------------

/// A two-node host shaped to this machine's two CPUs: node N = CPU N, one RoCE NIC and one
/// GPU per node on a shared switch (PIX).
fn two_node_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    for (node, hb, nic_name) in [(0u32, 0x10u8, "mlx5_0"), (1, 0x90, "mlx5_1")] {
        let cpus = node.to_string();
        sysfs_tree::write(
            r,
            &format!("sys/devices/system/node/node{node}/cpulist"),
            &cpus,
        );
        let rp = format!("sys/devices/pci0000:{hb:02x}/0000:{hb:02x}:01.0");
        let usp = format!("{rp}/0000:{:02x}:00.0", hb + 1);
        let dsp0 = format!("{usp}/0000:{:02x}:00.0", hb + 2);
        let dsp1 = format!("{usp}/0000:{:02x}:01.0", hb + 2);
        let nic = format!("{dsp0}/0000:{:02x}:00.0", hb + 3);
        let gpu = format!("{dsp1}/0000:{:02x}:00.0", hb + 4);
        let n = node as i32;
        for b in [&rp, &usp, &dsp0, &dsp1] {
            sysfs_tree::pci(r, b, 0x060400, 0x1000, n, &cpus);
        }
        sysfs_tree::pci(r, &nic, 0x020000, 0x15b3, n, &cpus);
        sysfs_tree::pci(r, &gpu, 0x030200, 0x10de, n, &cpus);
        let ib = format!("{nic}/infiniband/{nic_name}");
        sysfs_tree::link(
            r,
            &format!("{ib}/device"),
            &format!("../../../0000:{:02x}:00.0", hb + 3),
        );
        sysfs_tree::write(r, &format!("{ib}/ports/1/state"), "4: ACTIVE");
        sysfs_tree::write(r, &format!("{ib}/ports/1/link_layer"), "Ethernet");
        sysfs_tree::link(
            r,
            &format!("sys/class/infiniband/{nic_name}"),
            &format!("../../{}", ib.strip_prefix("sys/").unwrap()),
        );
    }
    sysfs_tree::write(r, "sys/devices/system/cpu/online", "0-1");
    dir
}

#[test]
fn engine_binds_gpu_and_host_registrations_to_the_near_nic() {
    let server = S3sFs::start();
    let tree = two_node_tree();
    let t = Topology::from_root(tree.path()).unwrap();
    let gpus: Vec<PciAddr> = t.gpus.iter().map(|g| g.pci).collect();
    assert_eq!(gpus.len(), 2);
    // Ordinal 0 is the GPU on node 1, ordinal 1 the one on node 0: binding must follow the PCI
    // address, not the ordinal. Device addresses are never dereferenced: no operation here
    // touches device memory.
    let rt = TestGpu::pci_only(vec![gpus[1], gpus[0]]);
    let engine = common::builder(&server)
        .placement(Placement::Auto)
        .sysfs_root(tree.path())
        .fabric(Fabric::Http)
        .gpu(rt.as_dyn())
        .build()
        .unwrap();
    let workers = engine.workers();
    let nics: Vec<Option<&str>> = workers.iter().map(|w| w.nic.as_deref()).collect();
    assert_eq!(nics, [Some("mlx5_0"), Some("mlx5_1")]);
    assert!(
        workers
            .iter()
            .all(|w| w.rdma_device.is_none() && w.runs_ops)
    );
    // SAFETY: the runtime double's device ranges are never dereferenced (no op is submitted
    // on these handles), and they stay "allocated" for the test's life.
    let on_node1 = unsafe {
        engine.register_device(
            DevicePtr {
                addr: dev_base(0),
                ordinal: 0,
            },
            1 << 20,
        )
    }
    .unwrap();
    // SAFETY: as above.
    let on_node0 = unsafe {
        engine.register_device(
            DevicePtr {
                addr: dev_base(1) + 4096,
                ordinal: 1,
            },
            4096,
        )
    }
    .unwrap();
    let a = engine.buffer_nics(on_node1).unwrap();
    assert_eq!(
        (a.locality, a.nics.clone(), a.class, a.workers.clone()),
        (
            Locality::Gpu(gpus[1]),
            vec!["mlx5_1".to_string()],
            Some(PathClass::Pix),
            vec![1]
        )
    );
    let a = engine.buffer_nics(on_node0).unwrap();
    assert_eq!(
        (a.nics.clone(), a.workers.clone()),
        (vec!["mlx5_0".to_string()], vec![0])
    );
    // Host memory: this process's pages are on node 0 of this machine (the tree's node 0).
    let host = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let a = engine
        .buffer_nics(host)
        .expect("host buffer bound by its node (get_mempolicy)");
    assert_eq!(a.locality, Locality::Node(0));
    assert_eq!((a.nics, a.workers), (vec!["mlx5_0".to_string()], vec![0]));
    assert_eq!(
        engine.placement().for_gpu(gpus[0]).unwrap().nics,
        ["mlx5_0"]
    );
    engine.deregister(on_node1, Duration::from_secs(5)).unwrap();
    assert!(engine.buffer_nics(on_node1).is_none());

    // Every range-get into the bound host buffer runs on worker 0 (mlx5_0's), none on 1.
    let data = common::pattern(1 << 20, 3);
    put_file(&server, "aff", "obj.bin", &data);
    let before: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    range_gets(&engine, host, "aff", &data, 200);
    let ran: Vec<u64> = engine
        .workers()
        .iter()
        .zip(&before)
        .map(|(w, b)| w.ops - b)
        .collect();
    assert_eq!(
        ran,
        [200, 0],
        "ops on a node-0 buffer left mlx5_0's workers"
    );
}

#[test]
fn unbound_buffers_spread_over_every_worker() {
    // The same engine shape without NICs in its tree: nothing binds, ops spread as before.
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    for node in 0..2 {
        sysfs_tree::write(
            dir.path(),
            &format!("sys/devices/system/node/node{node}/cpulist"),
            &node.to_string(),
        );
    }
    let engine = common::builder(&server)
        .placement(Placement::Auto)
        .sysfs_root(dir.path())
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    assert_eq!(engine.workers().len(), 2);
    let host = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    assert!(engine.buffer_nics(host).is_none());
    let data = common::pattern(1 << 20, 4);
    put_file(&server, "spread", "obj.bin", &data);
    range_gets(&engine, host, "spread", &data, 200);
    let ran: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    assert_eq!(ran.iter().sum::<u64>(), 200);
    assert!(ran.iter().all(|&n| n > 0), "{ran:?}");
}

#[test]
fn engine_build_fails_on_a_nic_hint_that_names_nothing() {
    let server = S3sFs::start();
    let tree = two_node_tree();
    let e = common::builder(&server)
        .sysfs_root(tree.path())
        .nics(["mlx5_1", "ionic_7"])
        .build()
        .unwrap_err();
    match e {
        EngineError::NicNotFound { hint, available } => {
            assert_eq!(hint, "ionic_7");
            assert_eq!(available, ["mlx5_0", "mlx5_1"]);
        }
        other => panic!("{other:?}"),
    }
    // Named by PCI address: only that NIC's worker.
    let nic1 = Topology::from_root(tree.path()).unwrap().nics[1]
        .pci
        .unwrap()
        .to_string();
    let engine = common::builder(&server)
        .placement(Placement::Auto)
        .sysfs_root(tree.path())
        .fabric(Fabric::Http)
        .nics([nic1])
        .build()
        .unwrap();
    let nics: Vec<Option<String>> = engine.workers().into_iter().map(|w| w.nic).collect();
    assert_eq!(nics, [Some("mlx5_1".to_string())]);
}

/// `ops` range-gets of `bucket/obj.bin` into `buf` (`common::range_gets_into`).
fn range_gets(
    engine: &engine::Engine,
    buf: ring_api::BufHandle,
    bucket: &str,
    data: &[u8],
    ops: usize,
) {
    common::range_gets_into(engine, buf, bucket, "obj.bin", data, ops);
}
