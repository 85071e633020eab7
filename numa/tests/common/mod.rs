//! Helpers shared by the fixture tests.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

/// The committed fixture tree `name` (`hgx-h100`, `dev-vm`, `h200-vm`, `two-socket-2nic`,
/// `mi300x`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Copies a tree, recreating symlinks with their original targets.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ty = entry.file_type().unwrap();
        if ty.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A writable copy of a fixture in a temporary directory.
pub fn scratch_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture(name), dir.path());
    dir
}

/// Writes `text` plus a newline at `root/rel`, creating parents.
pub fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, format!("{text}\n")).unwrap();
}

/// Creates a symlink `root/rel -> target`, creating parents.
pub fn link(root: &Path, rel: &str, target: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, p).unwrap();
}

/// Adds a PCI function at root-relative real directory `dir` (`sys/devices/pci0000:00/...`)
/// with its `sys/bus/pci/devices` link.
pub fn pci(root: &Path, dir: &str, class: u32, vendor: u16, numa: i32, cpus: &str) {
    write(root, &format!("{dir}/class"), &format!("0x{class:06x}"));
    write(root, &format!("{dir}/vendor"), &format!("0x{vendor:04x}"));
    write(root, &format!("{dir}/device"), "0x1234");
    write(root, &format!("{dir}/numa_node"), &numa.to_string());
    write(root, &format!("{dir}/local_cpulist"), cpus);
    let name = dir.rsplit('/').next().unwrap();
    link(
        root,
        &format!("sys/bus/pci/devices/{name}"),
        &format!("../../../{}", dir.strip_prefix("sys/").unwrap()),
    );
}
