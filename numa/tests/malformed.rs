//! Malformed and hostile sysfs trees give typed errors that name the file, never panics.

mod common;

use std::path::Path;

use common::{scratch_copy, write};
use numa::{CpuListError, TopoError, Topology};

fn overwrite(root: &Path, rel: &str, text: &str) {
    std::fs::write(root.join(rel), text).unwrap();
}

const GPU0: &str = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0";

#[test]
fn numa_node_abc() {
    let dir = scratch_copy("hgx-h100");
    overwrite(dir.path(), &format!("{GPU0}/numa_node"), "abc\n");
    match Topology::from_root(dir.path()) {
        Err(TopoError::Malformed { path, what, detail }) => {
            assert!(
                path.ends_with(format!("{GPU0}/numa_node")),
                "{}",
                path.display()
            );
            assert_eq!(what, "numa_node");
            assert!(detail.contains("abc"), "{detail}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    // -2 and out-of-range ids are malformed too.
    for bad in ["-2", "4096", "", "1 2", "0x1"] {
        overwrite(dir.path(), &format!("{GPU0}/numa_node"), bad);
        assert!(
            matches!(
                Topology::from_root(dir.path()),
                Err(TopoError::Malformed {
                    what: "numa_node",
                    ..
                })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn reversed_cpulists() {
    let dir = scratch_copy("hgx-h100");
    overwrite(dir.path(), "sys/devices/system/node/node1/cpulist", "5-2\n");
    let err = Topology::from_root(dir.path()).unwrap_err();
    assert_eq!(
        err,
        TopoError::CpuList {
            path: dir
                .path()
                .canonicalize()
                .unwrap()
                .join("sys/devices/system/node/node1/cpulist"),
            source: CpuListError::Reversed { start: 5, end: 2 },
        }
    );
    assert!(err.to_string().contains("node1/cpulist"), "{err}");

    let dir = scratch_copy("hgx-h100");
    overwrite(dir.path(), &format!("{GPU0}/local_cpulist"), "5-2");
    assert!(matches!(
        Topology::from_root(dir.path()),
        Err(TopoError::CpuList {
            source: CpuListError::Reversed { start: 5, end: 2 },
            ..
        })
    ));
}

#[test]
fn bad_class_and_vendor() {
    for (file, text) in [
        ("class", "0x3"),
        ("class", "030200"),
        ("class", "0x1000000"),
        ("vendor", "zz"),
    ] {
        let dir = scratch_copy("h200-vm");
        overwrite(
            dir.path(),
            &format!("sys/devices/pci0000:00/0000:00:06.0/{file}"),
            text,
        );
        let err = Topology::from_root(dir.path()).unwrap_err();
        assert!(
            matches!(err, TopoError::Malformed { .. }),
            "{file}={text}: {err:?}"
        );
        assert!(err.to_string().contains(file), "{err}");
    }
}

#[test]
fn bad_port_state() {
    let dir = scratch_copy("hgx-h100");
    overwrite(
        dir.path(),
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/infiniband/mlx5_0/ports/1/state",
        "ACTIVE",
    );
    assert!(matches!(
        Topology::from_root(dir.path()),
        Err(TopoError::Malformed {
            what: "port state",
            ..
        })
    ));
}

#[test]
fn oversized_attribute_is_a_limit_error() {
    let dir = scratch_copy("dev-vm");
    let big = "0,".repeat(40_000);
    overwrite(dir.path(), "sys/devices/system/node/node0/cpulist", &big);
    assert!(matches!(
        Topology::from_root(dir.path()),
        Err(TopoError::Limit {
            what: "file size in bytes",
            ..
        })
    ));
}

#[test]
fn link_outside_root_is_refused() {
    let dir = scratch_copy("dev-vm");
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "0000:00:09.0/class", "0x030200");
    std::os::unix::fs::symlink(
        outside.path().join("0000:00:09.0"),
        dir.path().join("sys/bus/pci/devices/0000:00:09.0"),
    )
    .unwrap();
    assert!(matches!(
        Topology::from_root(dir.path()),
        Err(TopoError::OutsideRoot { .. })
    ));
}

#[test]
fn link_pointing_at_another_function_is_malformed() {
    let dir = scratch_copy("dev-vm");
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:00:03.0",
        dir.path().join("sys/bus/pci/devices/0000:00:07.0"),
    )
    .unwrap();
    assert!(matches!(
        Topology::from_root(dir.path()),
        Err(TopoError::Malformed {
            what: "PCI device link",
            ..
        })
    ));
}

#[test]
fn missing_root_and_missing_class_are_io_errors() {
    let err = Topology::from_root("/nonexistent/sysfs/root").unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let dir = scratch_copy("dev-vm");
    std::fs::remove_file(dir.path().join("sys/devices/pci0000:00/0000:00:03.0/class")).unwrap();
    let err = Topology::from_root(dir.path()).unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    assert!(err.to_string().contains("0000:00:03.0/class"), "{err}");
}

#[test]
fn no_numa_directory_falls_back_to_online_cpus() {
    let dir = scratch_copy("dev-vm");
    std::fs::remove_dir_all(dir.path().join("sys/devices/system/node")).unwrap();
    let t = Topology::from_root(dir.path()).unwrap();
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].id, 0);
    assert_eq!(t.nodes[0].cpus.to_string(), "0-1");
    // And with neither, the missing file is named.
    std::fs::remove_file(dir.path().join("sys/devices/system/cpu/online")).unwrap();
    let err = Topology::from_root(dir.path()).unwrap_err();
    assert!(err.to_string().contains("cpu/online"), "{err}");
}
