//! The fixture the striping tests share: a host with two NICs on one NUMA node, an engine with
//! one worker per NIC on it, a host buffer bound to both, and a check that every operation
//! completes exactly once.
#![allow(dead_code)]

#[path = "../../../numa/tests/common/mod.rs"]
mod sysfs_tree;

use std::time::Duration;

use engine::{Dialect, Engine, EngineBuilder, Fabric, Placement, RegisterOptions};
use hipobj_gateway::RunningGateway;
use ring_api::Cqe;

/// A one-node host shaped to this machine's two CPUs, with two RoCE NICs on one PCIe switch:
/// host memory on node 0 is bound to both.
pub fn two_nic_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    sysfs_tree::write(r, "sys/devices/system/node/node0/cpulist", "0-1");
    sysfs_tree::write(r, "sys/devices/system/cpu/online", "0-1");
    let rp = "sys/devices/pci0000:10/0000:10:01.0";
    let usp = format!("{rp}/0000:11:00.0");
    for b in [rp, usp.as_str()] {
        sysfs_tree::pci(r, b, 0x060400, 0x1000, 0, "0-1");
    }
    for (i, name) in ["mlx5_0", "mlx5_1"].into_iter().enumerate() {
        let dsp = format!("{usp}/0000:12:0{i}.0");
        let nic = format!("{dsp}/0000:{:02x}:00.0", 0x13 + i);
        sysfs_tree::pci(r, &dsp, 0x060400, 0x1000, 0, "0-1");
        sysfs_tree::pci(r, &nic, 0x020000, 0x15b3, 0, "0-1");
        let ib = format!("{nic}/infiniband/{name}");
        sysfs_tree::link(
            r,
            &format!("{ib}/device"),
            &format!("../../../0000:{:02x}:00.0", 0x13 + i),
        );
        sysfs_tree::write(r, &format!("{ib}/ports/1/state"), "4: ACTIVE");
        sysfs_tree::write(r, &format!("{ib}/ports/1/link_layer"), "Ethernet");
        sysfs_tree::link(
            r,
            &format!("sys/class/infiniband/{name}"),
            &format!("../../{}", ib.strip_prefix("sys/").unwrap()),
        );
    }
    dir
}

/// One worker per NIC of the two-NIC tree.
pub fn on_two_nics(b: EngineBuilder, tree: &tempfile::TempDir) -> EngineBuilder {
    b.placement(Placement::Auto)
        .workers_per_nic(1)
        .sysfs_root(tree.path())
}

/// A host buffer of `len` bytes, bound to both NICs (its pages are on node 0).
pub fn bound_buffer(engine: &Engine, len: u64) -> ring_api::BufHandle {
    let buf = engine
        .register_host(len as usize, RegisterOptions::pageable())
        .unwrap();
    let a = engine
        .buffer_nics(buf)
        .expect("host buffer bound by its node (get_mempolicy)");
    assert_eq!(a.nics, ["mlx5_0", "mlx5_1"]);
    assert_eq!(a.workers, [0, 1]);
    buf
}

/// Waits for `n` completions, then checks that no other arrives within `quiet`.
pub fn exactly(q: &mut engine::Queue, n: usize, quiet: Duration) -> Vec<Cqe> {
    assert_eq!(q.wait(n, Some(Duration::from_secs(60))), n, "completions");
    let mut got: Vec<Cqe> = q.completion().collect();
    std::thread::sleep(quiet);
    got.extend(q.completion());
    assert_eq!(
        got.len(),
        n,
        "an operation completed more than once: {got:?}"
    );
    got.sort_by_key(Cqe::user_data);
    got
}

/// PCI address of the GPU of [`two_nic_tree_with_gpu`].
pub const GPU_PCI: &str = "0000:15:00.0";

/// [`two_nic_tree`] with a GPU ([`GPU_PCI`]) on the NICs' PCIe switch: its memory is bound to
/// both NICs (one distance tier).
pub fn two_nic_tree_with_gpu() -> tempfile::TempDir {
    let dir = two_nic_tree();
    let usp = "sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0";
    let dsp = format!("{usp}/0000:12:02.0");
    sysfs_tree::pci(dir.path(), &dsp, 0x060400, 0x1000, 0, "0-1");
    sysfs_tree::pci(
        dir.path(),
        &format!("{dsp}/{GPU_PCI}"),
        0x030200,
        0x10de,
        0,
        "0-1",
    );
    dir
}

/// A gateway in process (bucket `stripe` made) and an engine over it with one worker per NIC
/// of the two-NIC fixture tree, on the soft RDMA fabric; the engine is dropped before the
/// gateway shuts down.
pub struct TwoNicSoft {
    _dir: tempfile::TempDir,
    _tree: tempfile::TempDir,
    gw: Option<RunningGateway>,
    engine: Option<Engine>,
}

impl TwoNicSoft {
    /// `gw` serves `dir`; `configure` adds to the engine's builder before it is built.
    pub fn start(
        dir: tempfile::TempDir,
        gw: RunningGateway,
        dialect: Dialect,
        configure: impl FnOnce(EngineBuilder) -> EngineBuilder,
    ) -> Self {
        let addr = gw.local_addr();
        assert_eq!(
            crate::raw::call(addr, "PUT", "/stripe", "", &[], b"").status(),
            200
        );
        let tree = two_nic_tree();
        let b = on_two_nics(crate::rig::engine_builder(addr), &tree)
            .fabric(Fabric::Soft)
            .dialect(dialect);
        let engine = configure(b).build().unwrap();
        Self {
            _dir: dir,
            _tree: tree,
            gw: Some(gw),
            engine: Some(engine),
        }
    }

    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.gw.as_ref().unwrap().local_addr()
    }
}

impl Drop for TwoNicSoft {
    fn drop(&mut self) {
        drop(self.engine.take());
        if let Some(gw) = self.gw.take() {
            gw.shutdown();
        }
    }
}
