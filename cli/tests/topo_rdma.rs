//! `hipobj topo` lists RDMA devices with their ports, GID tables and the GID the engine would
//! choose (RoCEv2 IPv4 first), on a fixture: the dev VM's tree plus a Soft-RoCE device.

use std::path::Path;
use std::process::Command;

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

#[test]
fn topo_lists_rdma_ports_and_the_chosen_gid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tree = tempfile::tempdir().unwrap();
    copy_tree(&root.join("numa/fixtures/dev-vm"), tree.path());
    let ib = tree.path().join("sys/class/infiniband");
    std::fs::create_dir_all(&ib).unwrap();
    copy_tree(
        &root.join("engine/tests/fixtures/verbs/rxe/sys/class/infiniband"),
        &ib,
    );
    let port = ib.join("rxe0/ports/1");
    std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["topo", "--sysfs-root"])
        .arg(tree.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("RDMA devices:"), "{text}");
    assert!(text.contains("port 1: ACTIVE Ethernet"), "{text}");
    let chosen: Vec<&str> = text.lines().filter(|l| l.contains("<- chosen")).collect();
    assert_eq!(chosen.len(), 1, "{text}");
    assert!(
        chosen[0].contains("index 1 RoceV2") && chosen[0].contains("ffff:c000:0201"),
        "{text}"
    );
}
