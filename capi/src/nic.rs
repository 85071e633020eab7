//! `hipObjConfig_t.nicHint`: which RDMA device the engine's verbs fabric opens.
//!
//! The hint is a libibverbs device name (`mlx5_0`, `rxe0`, `ionic_0`) or the PCI address of
//! its function (`0000:3b:00.0`, or without the domain, `3b:00.0`), matched against
//! `/sys/class/infiniband/<name>/device`. A hint that names no device present is an error at
//! `hipObjInit` (`hipObjNicNotFound`), never a silent fall-back to another NIC.

use std::path::Path;

use crate::error::{CResult, Fail, OpError};

/// Where the kernel lists RDMA devices.
pub const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// The device name `hint` selects on this host.
pub fn resolve(hint: &str) -> CResult<String> {
    resolve_in(Path::new(SYSFS_INFINIBAND), hint)
}

/// [`resolve`] against the device list under `root` (a directory shaped like
/// `/sys/class/infiniband`).
pub fn resolve_in(root: &Path, hint: &str) -> CResult<String> {
    if hint.is_empty() {
        return Err(Fail::new(
            OpError::InvalidValue,
            "config.nicHint is empty (NULL picks the default device)",
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    if names.iter().any(|n| n == hint) {
        return Ok(hint.to_owned());
    }
    for n in &names {
        let Ok(target) = std::fs::read_link(root.join(n).join("device")) else {
            continue;
        };
        let Some(pci) = target.file_name().map(|f| f.to_string_lossy().into_owned()) else {
            continue;
        };
        if pci == hint || pci.strip_prefix("0000:") == Some(hint) {
            return Ok(n.clone());
        }
    }
    let present = if names.is_empty() {
        format!("this host lists no RDMA devices in {}", root.display())
    } else {
        format!("devices present: {}", names.join(", "))
    };
    Err(Fail::new(
        OpError::NicNotFound,
        format!("config.nicHint {hint:?} names no RDMA device by name or PCI address ({present})"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, pci) in [("mlx5_0", "0000:3b:00.0"), ("rxe0", "0000:00:03.0")] {
            let dev = d.path().join(name);
            std::fs::create_dir(&dev).unwrap();
            std::os::unix::fs::symlink(
                format!("../../../devices/pci0000:00/{pci}"),
                dev.join("device"),
            )
            .unwrap();
        }
        d
    }

    #[test]
    fn hint_by_name_or_pci_address() {
        let d = fake_sysfs();
        assert_eq!(resolve_in(d.path(), "rxe0").unwrap(), "rxe0");
        assert_eq!(resolve_in(d.path(), "0000:3b:00.0").unwrap(), "mlx5_0");
        assert_eq!(resolve_in(d.path(), "3b:00.0").unwrap(), "mlx5_0");
    }

    #[test]
    fn unknown_hint_is_nic_not_found_naming_the_devices() {
        let d = fake_sysfs();
        let e = resolve_in(d.path(), "bnxt_re0").unwrap_err();
        assert_eq!(e.op, OpError::NicNotFound);
        assert!(e.message.contains("mlx5_0, rxe0"), "{}", e.message);
        let none = tempfile::tempdir().unwrap();
        let e = resolve_in(&none.path().join("absent"), "mlx5_0").unwrap_err();
        assert_eq!(e.op, OpError::NicNotFound);
        assert!(e.message.contains("no RDMA devices"), "{}", e.message);
        assert_eq!(
            resolve_in(d.path(), "").unwrap_err().op,
            OpError::InvalidValue
        );
    }
}
