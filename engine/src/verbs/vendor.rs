//! What differs between the RDMA NICs the engine targets, in one table.
//!
//! Sources: hipObject's `configureBnxtQp` / `configureIonicQp` (hipObject's vendor hooks set the same
//! values as the defaults), rdma-core provider names, PCI vendor IDs. Nothing in this table has
//! been measured on bnxt_re, ionic or mlx5 hardware here; only rxe has run (see
//! `docs/verbs.md`). Values that are "the default" are the RC parameters of
//! docs/verbs.md, RC parameters (timeout 14, retry 7, RNR retry 7).

use std::path::Path;

/// A known RDMA provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Vendor {
    /// Broadcom NetXtreme-E / Thor-2 (`bnxt_re`).
    BnxtRe,
    /// AMD Pensando Pollara (`ionic`).
    Ionic,
    /// NVIDIA ConnectX (`mlx5`).
    Mlx5,
    /// Soft-RoCE (`rdma_rxe`), no PCI device.
    Rxe,
    /// Anything else: the defaults.
    Other,
}

/// Per-vendor choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VendorProfile {
    /// Which vendor.
    pub vendor: Vendor,
    /// PCI vendor ID (`/sys/class/infiniband/<dev>/device/vendor`).
    pub pci_vendor: Option<u16>,
    /// Device-name prefixes the kernel driver uses.
    pub name_prefixes: &'static [&'static str],
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// The ACK timeout of a QP that posts RDMA READs (`QpCaps::posts_reads`: the gateway's
    /// rc-persistent QPs, which READ PUT payloads): a READ that lost a response packet may
    /// wait this long before it asks again.
    pub read_timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Ask for `IBV_ACCESS_RELAXED_ORDERING` on registrations (an optional flag: providers
    /// that lack it ignore it, so this only records where it is known to matter).
    pub relaxed_ordering: bool,
    /// dmabuf registration expected to work (GPU memory without a peer-memory module).
    pub dmabuf: bool,
    /// The most packets (of the path MTU) one RDMA READ work request should ask for, where
    /// the device wants large READs cut up; `None`: any size (a NIC paces its READ responses).
    pub max_read_packets: Option<u32>,
    /// Why this row differs from the defaults.
    pub note: &'static str,
}

/// The table.
pub const PROFILES: &[VendorProfile] = &[
    VendorProfile {
        vendor: Vendor::BnxtRe,
        pci_vendor: Some(0x14e4),
        name_prefixes: &["bnxt_re"],
        timeout: 14,
        read_timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        relaxed_ordering: true,
        dmabuf: true,
        max_read_packets: None,
        note: "hipObject's configureBnxtQp uses the defaults; not run here",
    },
    VendorProfile {
        vendor: Vendor::Ionic,
        pci_vendor: Some(0x1dd8),
        name_prefixes: &["ionic"],
        timeout: 14,
        read_timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        relaxed_ordering: true,
        dmabuf: true,
        max_read_packets: None,
        note: "hipObject's configureIonicQp uses the defaults; not run here",
    },
    VendorProfile {
        vendor: Vendor::Mlx5,
        pci_vendor: Some(0x15b3),
        name_prefixes: &["mlx5_"],
        timeout: 14,
        read_timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        relaxed_ordering: true,
        dmabuf: true,
        max_read_packets: None,
        note: "relaxed ordering matters for PCIe peer-to-peer to GPUs; not run here",
    },
    VendorProfile {
        vendor: Vendor::Rxe,
        pci_vendor: None,
        name_prefixes: &["rxe"],
        // Under qemu TCG an emulated round trip takes milliseconds and a loaded 2-core host
        // stalls vCPUs for longer: 2^18 × 4.096 µs ≈ 1.07 s instead of ≈ 67 ms.
        timeout: 18,
        // But not for READs: rxe's completer (kernel 6.1, `check_psn`) drops every READ
        // response after a lost one without asking again, so each lost response packet
        // stalls its READ for the whole ACK timeout (a lost WRITE packet is NAKed by the
        // responder at once). The VM lane's emulated link loses ~0.2% of packets: ~130 lost
        // responses made a striped 64 MiB PUT take 77-92 s at 1.07 s (docs/verbs.md, "Why the
        // rc-persistent PUT stalled"). A READ timeout that fires while the peer VM is merely
        // stalled only sends the request again (rxe takes retry_cnt 7 as "retry forever"); the
        // short timeout on every QP made WRITEs re-send 2-3x their packets in the lane.
        read_timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        relaxed_ordering: false,
        dmabuf: false,
        // rxe's responder sends all of a READ's response packets at once (its requester keeps
        // at most 128 WRITE packets unacknowledged): READs of 128 packets keep to the burst
        // its WRITEs keep to, and a lost response costs a re-send of the rest of 128 KiB, not
        // of 1 MiB.
        max_read_packets: Some(128),
        note: "software; active MTU 1024; no dmabuf; longer ACK timeout for emulated VMs, except for READs, cut to 128 packets",
    },
    OTHER,
];

/// The row for unknown providers.
const OTHER: VendorProfile = VendorProfile {
    vendor: Vendor::Other,
    pci_vendor: None,
    name_prefixes: &[],
    timeout: 14,
    read_timeout: 14,
    retry_cnt: 7,
    rnr_retry: 7,
    relaxed_ordering: false,
    dmabuf: false,
    max_read_packets: None,
    note: "unknown provider: protocol defaults",
};

/// The profile of a vendor.
#[must_use]
pub fn profile(vendor: Vendor) -> &'static VendorProfile {
    PROFILES
        .iter()
        .find(|p| p.vendor == vendor)
        .unwrap_or(&OTHER)
}

/// Identifies a device: PCI vendor ID first (names can be changed by udev rules), then the
/// device-name prefix.
#[must_use]
pub fn identify(device_name: &str, pci_vendor: Option<u16>) -> Vendor {
    if let Some(id) = pci_vendor
        && let Some(p) = PROFILES.iter().find(|p| p.pci_vendor == Some(id))
    {
        return p.vendor;
    }
    PROFILES
        .iter()
        .find(|p| p.name_prefixes.iter().any(|n| device_name.starts_with(n)))
        .map_or(Vendor::Other, |p| p.vendor)
}

/// Parses sysfs `device/vendor` text (`0x15b3`).
#[must_use]
pub fn parse_pci_vendor(text: &str) -> Option<u16> {
    let t = text.trim();
    u16::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// Reads `<sys_root>/class/infiniband/<dev>/device/vendor` and identifies the device.
#[must_use]
pub fn identify_sysfs(sys_root: &Path, device_name: &str) -> Vendor {
    let path = sys_root
        .join("class/infiniband")
        .join(device_name)
        .join("device/vendor");
    let id = std::fs::read_to_string(path)
        .ok()
        .as_deref()
        .and_then(parse_pci_vendor);
    identify(device_name, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifies_by_pci_id_then_name() {
        assert_eq!(identify("bnxt_re0", Some(0x14e4)), Vendor::BnxtRe);
        assert_eq!(identify("renamed0", Some(0x1dd8)), Vendor::Ionic);
        assert_eq!(identify("mlx5_3", None), Vendor::Mlx5);
        assert_eq!(identify("rxe0", None), Vendor::Rxe);
        assert_eq!(identify("siw0", None), Vendor::Other);
        assert_eq!(identify("mlx5_0", Some(0x8086)), Vendor::Mlx5);
    }

    #[test]
    fn parses_vendor_text_and_reads_fixture() {
        assert_eq!(parse_pci_vendor("0x15b3\n"), Some(0x15b3));
        assert_eq!(parse_pci_vendor("zz"), None);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verbs/mixed/sys");
        assert_eq!(identify_sysfs(&root, "mlx5_0"), Vendor::Mlx5);
        let rxe = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/verbs/rxe/sys");
        assert_eq!(identify_sysfs(&rxe, "rxe0"), Vendor::Rxe);
    }

    #[test]
    fn only_rxe_differs_in_timeout_and_every_row_is_in_range() {
        for p in PROFILES {
            assert!(
                p.timeout <= 31 && p.read_timeout <= 31 && p.retry_cnt <= 7 && p.rnr_retry <= 7,
                "{p:?}"
            );
            let expect = if p.vendor == Vendor::Rxe { 18 } else { 14 };
            assert_eq!(p.timeout, expect, "{:?}", p.vendor);
            // rxe too: a READ that lost a response packet waits its whole ACK timeout.
            assert_eq!(p.read_timeout, 14, "{:?}", p.vendor);
        }
        assert!(!profile(Vendor::Rxe).dmabuf);
        for p in PROFILES {
            let expect = (p.vendor == Vendor::Rxe).then_some(128);
            assert_eq!(p.max_read_packets, expect, "{:?}", p.vendor);
        }
        assert_eq!(profile(Vendor::Other).vendor, Vendor::Other);
    }
}
