//! The GPUDirect tier: device memory handed to the RDMA device as a dmabuf, so the NIC writes
//! VRAM itself instead of a host bounce buffer.
//!
//! At [`crate::Engine::register_device`] the engine decides each registration's tier
//! ([`GpuTier`]) under the builder's [`GpuDirect`] mode:
//!
//! 1. the engine must have an RDMA fabric whose dialect can carry a direct window
//!    (`rc-persistent`, alone or first under `Dialect::Auto`); else [`GpuDirectError::NoRdmaFabric`];
//! 2. the GPU runtime exports the range as a dmabuf ([`GpuRuntime::export_dmabuf`]:
//!    `cuMemGetHandleForAddressRange` / `hipMemGetHandleForAddressRange`); else
//!    [`GpuDirectError::Export`] with the driver's error;
//! 3. the engine's RDMA device registers the whole export once, as a probe
//!    (`ibv_reg_dmabuf_mr` on verbs; a `MAP_SHARED` mapping on the soft device); else
//!    [`GpuDirectError::Refused`] with the errno. The probe is deregistered at once: each
//!    operation registers its own exact window later (see below).
//!
//! All three hold: [`GpuTier::Direct`], and the registration keeps the dmabuf fd
//! ([`DirectSource`]). Otherwise `Require` fails the registration with the error, `Auto` logs
//! it at `debug` and counts it ([`GpuDirectCounters::fallbacks`]) and the registration is
//! [`GpuTier::Staged`] (as with `Off`).
//!
//! On a direct registration, an `rc-persistent` GET / RangeGet registers its window from the
//! dmabuf (offset of the op's first byte in the export, iova = its device address) instead of
//! the host bounce range; its completion waits for nothing but the RDMA exchange (no copy into
//! VRAM). Everything else on the registration stages as before: PUTs (the request carries a
//! CRC64NVME of the source, computed on the host from the bytes copied out of VRAM),
//! `hipobj-rc-v2` (it checksums the window through host memory), cuObject (its provider
//! describes a host range), and any attempt that goes over HTTP.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{DevicePtr, DmabufRegion, GpuError, GpuRuntime};
use crate::fabric::rc::{Access, RcDevice};

/// Whether device registrations may use the GPUDirect tier (`EngineBuilder::gpu_direct`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GpuDirect {
    /// Direct when possible, else staged (a `debug` event and a counted fallback).
    #[default]
    Auto,
    /// Direct or fail: `register_device` returns [`crate::EngineError::GpuDirect`] saying why.
    Require,
    /// Always staged through pinned host memory.
    Off,
}

impl GpuDirect {
    /// Parses `auto`, `require`, `off`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "auto" => Some(Self::Auto),
            "require" => Some(Self::Require),
            "off" => Some(Self::Off),
            _ => None,
        }
    }
}

/// How a device registration moves bytes ([`crate::Engine::gpu_tier`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GpuTier {
    /// RDMA GETs land in VRAM through a dmabuf window (other paths stage, see the module).
    Direct,
    /// Every operation goes through pinned host memory and a copy on the GPU's stream.
    Staged,
}

impl GpuTier {
    /// `direct` / `staged` (logs, `--json`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Staged => "staged",
        }
    }
}

/// Why a registration could not get the GPUDirect tier.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuDirectError {
    /// The engine has no RDMA fabric that carries direct windows.
    #[error("GPUDirect needs an RDMA fabric: {0}")]
    NoRdmaFabric(&'static str),
    /// The GPU runtime did not export the range (the driver's error).
    #[error("GPUDirect: the GPU runtime cannot export the range as a dmabuf: {0}")]
    Export(#[source] GpuError),
    /// The RDMA device refused the dmabuf registration.
    #[error("GPUDirect: {device} refused the dmabuf registration{}: {detail}",
        .errno.map(|e| format!(" (errno {e}: {})", std::io::Error::from_raw_os_error(e))).unwrap_or_default())]
    Refused {
        /// The device (`soft:<ip>` or the verbs device name).
        device: String,
        /// The errno, when the device reported one.
        errno: Option<i32>,
        /// The device's error.
        detail: String,
    },
}

impl GpuDirectError {
    /// The errno of a refusal by the RDMA device.
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Refused { errno, .. } => *errno,
            _ => None,
        }
    }
}

/// What the engine's device registrations got and did ([`crate::Engine::gpu_direct_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GpuDirectCounters {
    /// Registrations given the direct tier.
    pub direct_registrations: u64,
    /// Registrations given the staged tier (mode `Off`, or an `Auto` fallback).
    pub staged_registrations: u64,
    /// `Auto` registrations that wanted the direct tier and fell back to staging.
    pub fallbacks: u64,
    /// GET / RangeGet operations whose bytes the RDMA device wrote into VRAM directly.
    pub direct_ops: u64,
    /// Their bytes.
    pub direct_bytes: u64,
}

/// The counters behind [`GpuDirectCounters`].
#[derive(Debug, Default)]
pub(crate) struct DirectStats {
    direct: AtomicU64,
    staged: AtomicU64,
    fallbacks: AtomicU64,
    ops: AtomicU64,
    bytes: AtomicU64,
}

impl DirectStats {
    /// An operation landed directly in VRAM.
    pub(crate) fn landed(&self, bytes: u64) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> GpuDirectCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GpuDirectCounters {
            direct_registrations: g(&self.direct),
            staged_registrations: g(&self.staged),
            fallbacks: g(&self.fallbacks),
            direct_ops: g(&self.ops),
            direct_bytes: g(&self.bytes),
        }
    }
}

/// The engine's GPUDirect configuration: the mode, the device that probes registrations (or
/// why there is none), and the counters.
#[derive(Debug)]
pub(crate) struct DirectConfig {
    mode: GpuDirect,
    device: Result<RcDevice, &'static str>,
    pub(crate) stats: DirectStats,
}

impl DirectConfig {
    /// `device`: the RDMA device the engine's direct windows would be registered on, or why
    /// the engine has none that carries them ([`rdma_device_for_direct`]).
    pub(crate) fn new(mode: GpuDirect, device: Result<RcDevice, &'static str>) -> Self {
        Self {
            mode,
            device,
            stats: DirectStats::default(),
        }
    }

    /// The tier of a new registration of `len` bytes at `ptr` (module docs): `Ok(Some(..))`
    /// direct, `Ok(None)` staged, `Err` only under `Require`.
    pub(crate) fn decide(
        &self,
        rt: &Arc<dyn GpuRuntime>,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<Option<DirectSource>, GpuDirectError> {
        if self.mode == GpuDirect::Off {
            self.stats.staged.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        match self.try_direct(rt, ptr, len) {
            Ok(src) => {
                self.stats.direct.fetch_add(1, Ordering::Relaxed);
                Ok(Some(src))
            }
            Err(e) if self.mode == GpuDirect::Require => Err(e),
            Err(e) => {
                tracing::debug!(
                    "gpu: {len} bytes at {:#x} (device {}) staged: {e}",
                    ptr.addr,
                    ptr.ordinal
                );
                self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.stats.staged.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    fn try_direct(
        &self,
        rt: &Arc<dyn GpuRuntime>,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<DirectSource, GpuDirectError> {
        let device = self
            .device
            .as_ref()
            .map_err(|why| GpuDirectError::NoRdmaFabric(why))?;
        let dmabuf = rt.export_dmabuf(ptr, len).map_err(GpuDirectError::Export)?;
        let src = DirectSource {
            dmabuf,
            iova: ptr.addr,
        };
        let refused = |e: crate::fabric::rc::RcError| GpuDirectError::Refused {
            device: device.name(),
            errno: e.errno(),
            detail: e.to_string(),
        };
        let pd = device.alloc_pd().map_err(refused)?;
        let span = src.span(0, len as u64).ok_or(GpuDirectError::NoRdmaFabric(
            "registration larger than the address space",
        ))?;
        let mr = pd
            .register_dmabuf(span.fd, span.offset, span.len, span.iova, window_access())
            .map_err(refused)?;
        pd.deregister(mr).map_err(refused)?;
        Ok(src)
    }
}

/// The rights of a direct window (what `rc-persistent` windows ask for).
pub(crate) fn window_access() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
}

/// Why the engine has no RDMA device for direct windows, or the one it has: `verbs` (the
/// engine's verbs device) when the fabric opened one, else the soft device; none when payloads
/// go over HTTP or the dialect cannot carry a direct window.
pub(crate) fn rdma_device_for_direct(
    fabric: crate::fabric::rdma::Fabric,
    dialect: crate::fabric::rdma::Dialect,
    verbs: Option<&RcDevice>,
) -> Result<RcDevice, &'static str> {
    use crate::fabric::rdma::{Dialect, Fabric};
    match (fabric, dialect) {
        (Fabric::Http, _) | (_, Dialect::Http) => Err("the engine's payloads go over HTTP"),
        (_, Dialect::RcV2) => {
            Err("dialect hipobj-rc-v2 checksums each window through host memory, so it stages")
        }
        (_, Dialect::CuObject) => {
            Err("dialect cuObject's descriptor provider describes host memory, so it stages")
        }
        (Fabric::Verbs, _) if verbs.is_none() => {
            Err("Fabric::Verbs without a usable verbs device (payloads go over HTTP)")
        }
        _ => Ok(verbs
            .cloned()
            .unwrap_or_else(|| RcDevice::soft(std::net::Ipv4Addr::LOCALHOST))),
    }
}

/// A direct registration's dmabuf: the export and the device address of the registration's
/// byte 0 (the iova its windows are addressed from).
#[derive(Debug)]
pub(crate) struct DirectSource {
    dmabuf: DmabufRegion,
    iova: u64,
}

/// Bytes `off..off+len` of a direct registration as `ibv_reg_dmabuf_mr` arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DmabufSpan<'a> {
    pub(crate) fd: BorrowedFd<'a>,
    /// Offset of the first byte in the dmabuf.
    pub(crate) offset: u64,
    pub(crate) len: usize,
    /// Device address of the first byte.
    pub(crate) iova: u64,
}

impl DirectSource {
    /// The `ibv_reg_dmabuf_mr` arguments of the registration's bytes `off..off+len`; `None`
    /// when that leaves the registration or overflows.
    pub(crate) fn span(&self, off: u64, len: u64) -> Option<DmabufSpan<'_>> {
        let (offset, len, iova) = span_args(
            self.dmabuf.offset,
            self.dmabuf.len,
            self.dmabuf.exported_size,
            self.iova,
            off,
            len,
        )?;
        Some(DmabufSpan {
            fd: self.dmabuf.fd.as_fd(),
            offset,
            len,
            iova,
        })
    }
}

/// The pure argument computation of [`DirectSource::span`]: the registration's byte 0 is at
/// `base` in an export of `exported` bytes and has `reg_len` bytes and device address `iova`;
/// bytes `off..off+len` of it are `(offset in the dmabuf, len, iova)`.
fn span_args(
    base: u64,
    reg_len: u64,
    exported: u64,
    iova: u64,
    off: u64,
    len: u64,
) -> Option<(u64, usize, u64)> {
    let end = off.checked_add(len)?;
    if len == 0 || end > reg_len {
        return None;
    }
    let offset = base.checked_add(off)?;
    if offset.checked_add(len)? > exported {
        return None;
    }
    Some((offset, usize::try_from(len).ok()?, iova.checked_add(off)?))
}

#[cfg(test)]
mod tests {
    use super::super::dmabuf::window;
    use super::*;

    #[test]
    fn window_arguments_follow_the_export_window() {
        // A 1000-byte sub-allocation at base + 5000 of a 2 MiB allocation: exported pages
        // [4096, 8192), caller's bytes at offset 904.
        let alloc = 0x7f00_0000_0000_u64;
        let w = window(alloc + 5000, 1000, 4096, alloc, 2 << 20).unwrap();
        let (base, exported, iova) = (w.offset, w.size, alloc + 5000);
        // Bytes 100..400 of the registration: offset 904 + 100 in the dmabuf, iova + 100.
        assert_eq!(
            span_args(base, 1000, exported, iova, 100, 300),
            Some((1004, 300, iova + 100))
        );
        // The whole registration.
        assert_eq!(
            span_args(base, 1000, exported, iova, 0, 1000),
            Some((904, 1000, iova))
        );
        // Past the registration, empty, overflowing: refused.
        assert_eq!(span_args(base, 1000, exported, iova, 900, 101), None);
        assert_eq!(span_args(base, 1000, exported, iova, 0, 0), None);
        assert_eq!(span_args(base, 1000, exported, iova, u64::MAX, 2), None);
        assert_eq!(span_args(base, 1000, exported, u64::MAX, 1, 1), None);
        // An export smaller than it claims to cover is caught too.
        assert_eq!(span_args(base, 1000, 1000, iova, 0, 1000), None);
    }

    #[test]
    fn direct_needs_a_fabric_and_a_dialect_that_carry_windows() {
        use crate::fabric::rdma::{Dialect, Fabric};
        let soft = |f, d| rdma_device_for_direct(f, d, None).map(|d| d.kind());
        assert_eq!(
            soft(Fabric::Auto, Dialect::Auto),
            Ok(crate::fabric::rc::RcKind::Soft)
        );
        assert_eq!(
            soft(Fabric::Soft, Dialect::RcPersistent),
            Ok(crate::fabric::rc::RcKind::Soft)
        );
        for (f, d) in [
            (Fabric::Http, Dialect::Auto),
            (Fabric::Soft, Dialect::Http),
            (Fabric::Soft, Dialect::RcV2),
            (Fabric::Soft, Dialect::CuObject),
            (Fabric::Verbs, Dialect::Auto),
        ] {
            assert!(soft(f, d).is_err(), "{f:?} {d:?}");
        }
        assert_eq!(GpuDirect::parse("require"), Some(GpuDirect::Require));
        assert_eq!(GpuDirect::parse("sometimes"), None);
    }
}
