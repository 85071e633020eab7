//! PCI functions: addresses, class codes, and the chain of bridges above a device.
//!
//! The ancestry comes from the device's real path: `/sys/bus/pci/devices/0000:1b:00.0` links to
//! `/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0`. The last
//! `pciDDDD:BB` component is the host bridge (root complex); the `DDDD:BB:DD.F` components after it
//! are, in order, the root port, the bridges below it, and the device itself.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::cpulist::CpuSet;
use crate::error::TopoError;
use crate::sysfs::Sysfs;

/// Most bridges we accept between a host bridge and a device. Real systems have at most a few
/// cascaded switches (two levels per switch); 32 levels means a corrupt or hostile tree.
pub const MAX_PCI_DEPTH: usize = 32;

/// PCI vendor id of NVIDIA.
pub const VENDOR_NVIDIA: u16 = 0x10de;
/// PCI vendor id of AMD/ATI graphics (AMD CPUs and chipsets use 0x1022, not GPUs).
pub const VENDOR_AMD: u16 = 0x1002;
/// PCI vendor id of Mellanox/NVIDIA networking.
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// A PCI function address `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..=31).
    pub device: u8,
    /// Function number (0..=7).
    pub function: u8,
}

impl FromStr for PciAddr {
    type Err = String;

    /// Parses `0000:1b:00.0` (the sysfs spelling; the domain may have 4 to 8 hex digits, as
    /// Hyper-V and VMD domains do).
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a PCI address (DDDD:BB:DD.F)");
        let mut parts = s.split(':');
        let (Some(dom), Some(bus), Some(devfn), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let (dev, func) = devfn.split_once('.').ok_or_else(bad)?;
        let hex = |t: &str, min: usize, max: usize| -> Result<u32, String> {
            if t.len() < min || t.len() > max || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(t, 16).map_err(|_| bad())
        };
        let domain = hex(dom, 4, 8)?;
        let bus = hex(bus, 2, 2)?;
        let device = hex(dev, 2, 2)?;
        let function = hex(func, 1, 1)?;
        if device > 31 || function > 7 {
            return Err(bad());
        }
        Ok(PciAddr {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Where a PCI function sits: its host bridge and the bridges between that and the function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct PciPath {
    /// The root-relative path of the host bridge directory (`sys/devices/pci0000:15`). The whole
    /// prefix is kept, not just the name, because on Hyper-V every VMBus device has its own
    /// `pciXXXX:00` below a different parent.
    pub host_bridge: String,
    /// Bridges from the root port (index 0) down to the device's parent.
    pub bridges: Vec<PciAddr>,
    /// The function itself.
    pub device: PciAddr,
}

impl PciPath {
    /// Builds the path from a root-relative real path such as
    /// `sys/devices/pci0000:15/0000:15:01.0/0000:17:00.0/0000:18:00.0`. Components after the
    /// device (`net/eth0`, `virtio2`) must already be stripped.
    pub fn from_real_path(sysfs: &Sysfs, real: &Path) -> Result<Self, TopoError> {
        let comps: Vec<&str> = real.iter().filter_map(|c| c.to_str()).collect();
        let host_idx = comps
            .iter()
            .rposition(|c| is_host_bridge_name(c))
            .ok_or_else(|| {
                TopoError::malformed(
                    sysfs.abs(real),
                    "PCI device path",
                    "no pciDDDD:BB host bridge component",
                )
            })?;
        let mut addrs = Vec::new();
        for c in comps.iter().skip(host_idx + 1) {
            if addrs.len() > MAX_PCI_DEPTH {
                return Err(TopoError::Limit {
                    path: sysfs.abs(real),
                    what: "PCI bridge depth",
                    limit: MAX_PCI_DEPTH,
                });
            }
            let a = c.parse::<PciAddr>().map_err(|detail| {
                TopoError::malformed(sysfs.abs(real), "PCI device path", detail)
            })?;
            addrs.push(a);
        }
        let device = addrs.pop().ok_or_else(|| {
            TopoError::malformed(
                sysfs.abs(real),
                "PCI device path",
                "ends at the host bridge",
            )
        })?;
        let host: PathBuf = comps.iter().take(host_idx + 1).collect();
        Ok(PciPath {
            host_bridge: host.to_string_lossy().into_owned(),
            bridges: addrs,
            device,
        })
    }

    /// Number of bridges shared with `other` from the root port down (0 when they hang off
    /// different root ports, or different host bridges).
    pub fn common_bridges(&self, other: &PciPath) -> usize {
        if self.host_bridge != other.host_bridge {
            return 0;
        }
        self.bridges
            .iter()
            .zip(&other.bridges)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

/// True for a host bridge directory name: `pci` followed by `DDDD:BB` in hex.
pub(crate) fn is_host_bridge_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("pci") else {
        return false;
    };
    let Some((dom, bus)) = rest.split_once(':') else {
        return false;
    };
    (4..=8).contains(&dom.len())
        && bus.len() == 2
        && dom
            .bytes()
            .chain(bus.bytes())
            .all(|b| b.is_ascii_hexdigit())
}

/// Identity and locality attributes of one PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Where it sits.
    pub path: PciPath,
    /// 24-bit class code (`0x030200` = 3D controller).
    pub class: u32,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device_id: u16,
    /// `numa_node` as read; `None` for the kernel's `-1` ("no affinity known").
    pub numa_node: Option<u32>,
    /// `local_cpulist`; empty when the file is absent.
    pub local_cpus: CpuSet,
}

/// Largest NUMA node id we accept in `numa_node` (Linux `MAX_NUMNODES` is at most 1024).
pub const MAX_NUMA_NODE: u32 = 1023;

/// Parses a fixed-width hex attribute as the kernel prints it (`0x%06x` for class, `0x%04x` for
/// ids); any other width is malformed.
fn parse_hex_attr(
    sysfs: &Sysfs,
    rel: &Path,
    what: &'static str,
    width: usize,
) -> Result<u32, TopoError> {
    let text = sysfs.read_attr(rel)?;
    let digits = text
        .strip_prefix("0x")
        .ok_or_else(|| TopoError::malformed(sysfs.abs(rel), what, format!("`{text}` lacks 0x")))?;
    let v = if digits.len() == width && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        u32::from_str_radix(digits, 16).ok()
    } else {
        None
    };
    v.ok_or_else(|| {
        TopoError::malformed(
            sysfs.abs(rel),
            what,
            format!("`{text}` is not 0x followed by {width} hex digits"),
        )
    })
}

/// Parses a `numa_node` attribute: a decimal node id, or `-1` for unknown.
pub fn parse_numa_node(sysfs: &Sysfs, rel: &Path) -> Result<Option<u32>, TopoError> {
    let text = sysfs.read_attr(rel)?;
    if text == "-1" {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(n) if n <= MAX_NUMA_NODE && text.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(n)),
        _ => Err(TopoError::malformed(
            sysfs.abs(rel),
            "numa_node",
            format!("`{text}` is neither -1 nor a node id <= {MAX_NUMA_NODE}"),
        )),
    }
}

impl PciFunction {
    /// Reads a function given its root-relative real directory.
    pub fn read(sysfs: &Sysfs, real: &Path) -> Result<Self, TopoError> {
        let path = PciPath::from_real_path(sysfs, real)?;
        let class = parse_hex_attr(sysfs, &real.join("class"), "PCI class", 6)?;
        let vendor = parse_hex_attr(sysfs, &real.join("vendor"), "PCI vendor", 4)? as u16;
        let device_id = parse_hex_attr(sysfs, &real.join("device"), "PCI device id", 4)? as u16;
        // Absent on kernels built without NUMA support: same meaning as -1.
        let numa_node = if sysfs.exists(&real.join("numa_node")) {
            parse_numa_node(sysfs, &real.join("numa_node"))?
        } else {
            None
        };
        let local_cpus = if sysfs.exists(&real.join("local_cpulist")) {
            sysfs.read_cpulist(&real.join("local_cpulist"))?
        } else {
            CpuSet::new()
        };
        Ok(PciFunction {
            path,
            class,
            vendor,
            device_id,
            numa_node,
            local_cpus,
        })
    }

    /// True for a GPU: an NVIDIA or AMD function whose class is a display controller (VGA
    /// `0x0300`, 3D `0x0302`, other `0x0380`) or a processing accelerator (`0x1200`, which AMD
    /// Instinct MI300 reports). The HDMI/DP audio functions of the same cards (`0x0403`) and
    /// NVSwitch bridges (`0x0680`) are excluded by class.
    pub fn is_gpu(&self) -> bool {
        let base_sub = self.class >> 8;
        matches!(self.vendor, VENDOR_NVIDIA | VENDOR_AMD)
            && matches!(base_sub, 0x0300 | 0x0302 | 0x0380 | 0x1200)
    }

    /// True for a network controller: Ethernet `0x0200` or InfiniBand `0x0207`.
    pub fn is_network(&self) -> bool {
        matches!(self.class >> 8, 0x0200 | 0x0207)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addr_round_trip() {
        let a: PciAddr = "0000:1b:00.0".parse().unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x1b, 0, 0));
        assert_eq!(a.to_string(), "0000:1b:00.0");
        let b: PciAddr = "10001:c3:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "10001:c3:1f.7");
        for bad in [
            "",
            "0000:1b:00",
            "0000:1b:20.0",
            "0000:1b:00.8",
            "00:1b:00.0",
            "0000:1g:00.0",
            "pci0000:00",
            "0000:1b:00.0:1",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn host_bridge_names() {
        assert!(is_host_bridge_name("pci0000:00"));
        assert!(is_host_bridge_name("pci10001:00"));
        assert!(!is_host_bridge_name("pci_express"));
        assert!(!is_host_bridge_name("0000:00:01.0"));
        assert!(!is_host_bridge_name("pci0000:0"));
    }
}
