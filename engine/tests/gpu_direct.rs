//! The GPUDirect tier end to end against our gateway (in process, soft RDMA target), on hosts
//! without a GPU: a test GPU runtime whose "VRAM" is a sealed memfd mapped into this process
//! ([`HostDmabuf`]) and whose dmabuf export hands back a udmabuf of it (`*_udmabuf` tests,
//! which need `/dev/udmabuf` and are ignored elsewhere) or the memfd itself (mapped by the soft
//! device exactly as a dmabuf; runs everywhere).
//!
//! - `rc-persistent` GETs and RangeGets into a direct registration land in the fake VRAM through
//!   the dmabuf window, byte exact, with no copy into the device (`gpu_staging` unchanged) and
//!   no bounce bytes touched; PUT from it stages (its CRC64NVME is computed on the host) and
//!   stores the device's bytes;
//! - `Require` fails with a typed error naming why (HTTP fabric, the runtime cannot export with
//!   the driver's error, the device refused the dmabuf with the errno); `Auto` stages, counted;
//!   `Off` always stages.
#![allow(unsafe_code)]

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use engine::gpu::dmabuf::{host_page_size, window};
use engine::gpu::{
    Backend, Capabilities, DevicePtr, DmabufRegion, GpuDirect, GpuDirectError, GpuError,
    GpuRuntime, GpuTier, PointerKind, RawEvent, RawStream,
};
use engine::soft::udmabuf::{ExportKind, HostDmabuf};
use engine::{Dialect, EngineError, Fabric};
use numa::{GpuVendor, PciAddr};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath};

/// How the test runtime answers `export_dmabuf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Export {
    /// A dmabuf (or memfd) of the fake VRAM.
    Of(ExportKind),
    /// The driver error of a runtime without the export (as CUDA before 11.7).
    Unsupported,
    /// An fd the RDMA device cannot register (a pipe: no size, no mmap — as CUDA's VRAM
    /// dmabufs are unmappable for the soft device).
    Unmappable,
}

/// A `GpuRuntime` whose device memory is a mapped memfd; copies run synchronously.
#[derive(Debug)]
struct DmabufTestGpu {
    vram: HostDmabuf,
    next: AtomicUsize,
    export: Export,
    pinned: Mutex<Vec<(usize, usize)>>,
    h2d: AtomicU64,
    d2h: AtomicU64,
    exports: AtomicU64,
    handles: AtomicUsize,
}

impl DmabufTestGpu {
    fn new(vram: usize, export: Export) -> Arc<Self> {
        Arc::new(Self {
            vram: HostDmabuf::new(vram).unwrap(),
            next: AtomicUsize::new(0),
            export,
            pinned: Mutex::new(Vec::new()),
            h2d: AtomicU64::new(0),
            d2h: AtomicU64::new(0),
            exports: AtomicU64::new(0),
            handles: AtomicUsize::new(1),
        })
    }

    fn base(&self) -> u64 {
        self.vram.as_ptr() as u64
    }

    /// The fake VRAM bytes at `ptr..ptr+len`.
    fn device_bytes(&self, ptr: DevicePtr, len: usize) -> Vec<u8> {
        assert!(
            ptr.addr >= self.base()
                && ptr.addr + len as u64 <= self.base() + self.vram.len() as u64
        );
        // SAFETY: inside the live mapping (asserted); no operation is in flight on it.
        unsafe { std::slice::from_raw_parts(ptr.addr as usize as *const u8, len).to_vec() }
    }

    fn fill(&self, ptr: DevicePtr, data: &[u8]) {
        assert!(
            ptr.addr >= self.base()
                && ptr.addr + data.len() as u64 <= self.base() + self.vram.len() as u64
        );
        // SAFETY: as in `device_bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.addr as usize as *mut u8, data.len())
        };
    }

    fn as_dyn(self: &Arc<Self>) -> Arc<dyn GpuRuntime> {
        Arc::clone(self) as Arc<dyn GpuRuntime>
    }
}

impl GpuRuntime for DmabufTestGpu {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }
    fn name(&self) -> String {
        "memfd-backed test double".into()
    }
    fn vendor(&self) -> GpuVendor {
        GpuVendor::Nvidia
    }
    fn version(&self) -> i32 {
        0
    }
    fn device_count(&self) -> u32 {
        1
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    fn device_name(&self, _: u32) -> Result<String, GpuError> {
        Ok("test double".into())
    }
    fn pci_bus_id(&self, _: u32) -> Result<PciAddr, GpuError> {
        Err(GpuError::InvalidArgument("no PCI address".into()))
    }
    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError> {
        let inside = addr >= self.base() && addr < self.base() + self.vram.len() as u64;
        Ok(if inside {
            PointerKind::Device { ordinal: 0 }
        } else {
            PointerKind::Unknown
        })
    }
    fn alloc_device(&self, _: u32, len: usize) -> Result<DevicePtr, GpuError> {
        let at = self.next.fetch_add(len, Ordering::Relaxed);
        if at + len > self.vram.len() {
            return Err(GpuError::InvalidArgument("test VRAM exhausted".into()));
        }
        Ok(DevicePtr {
            addr: self.base() + at as u64,
            ordinal: 0,
        })
    }
    unsafe fn free_device(&self, _: DevicePtr) -> Result<(), GpuError> {
        Ok(())
    }
    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError> {
        let p = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        self.pinned.lock().unwrap().push((p as usize, len));
        Ok(p)
    }
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError> {
        let mut v = self.pinned.lock().unwrap();
        let i = v
            .iter()
            .position(|&(p, _)| p == ptr as usize)
            .ok_or_else(|| GpuError::InvalidArgument("double free".into()))?;
        let (_, len) = v.swap_remove(i);
        // SAFETY: allocated by `alloc_pinned` as a boxed slice of this length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        Ok(())
    }
    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError> {
        Ok(RawStream {
            handle: self.handles.fetch_add(1, Ordering::Relaxed),
            ordinal,
        })
    }
    unsafe fn destroy_stream(&self, _: RawStream) -> Result<(), GpuError> {
        Ok(())
    }
    unsafe fn stream_synchronize(&self, _: RawStream) -> Result<(), GpuError> {
        Ok(())
    }
    fn create_event(&self, ordinal: u32, _: bool) -> Result<RawEvent, GpuError> {
        Ok(RawEvent {
            handle: self.handles.fetch_add(1, Ordering::Relaxed),
            ordinal,
        })
    }
    unsafe fn destroy_event(&self, _: RawEvent) -> Result<(), GpuError> {
        Ok(())
    }
    unsafe fn record_event(&self, _: RawEvent, _: RawStream) -> Result<(), GpuError> {
        Ok(())
    }
    unsafe fn event_query(&self, _: RawEvent) -> Result<bool, GpuError> {
        Ok(true)
    }
    unsafe fn event_synchronize(&self, _: RawEvent) -> Result<(), GpuError> {
        Ok(())
    }
    unsafe fn event_elapsed_ms(&self, _: RawEvent, _: RawEvent) -> Result<f32, GpuError> {
        Ok(0.0)
    }
    unsafe fn memcpy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        _: RawStream,
    ) -> Result<(), GpuError> {
        self.h2d.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract (copies run at once here).
        unsafe { self.memcpy_h2d(dst, src, len) }
    }
    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        _: RawStream,
    ) -> Result<(), GpuError> {
        self.d2h.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract.
        unsafe { self.memcpy_d2h(dst, src, len) }
    }
    unsafe fn memcpy_h2d(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract; device memory is the mapping.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.addr as usize as *mut u8, len) };
        Ok(())
    }
    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.addr as usize as *const u8, dst, len) };
        Ok(())
    }
    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufRegion, GpuError> {
        self.exports.fetch_add(1, Ordering::Relaxed);
        let kind = match self.export {
            Export::Of(k) => k,
            Export::Unsupported => {
                return Err(GpuError::Unsupported {
                    backend: Backend::Cuda,
                    what: "dmabuf export",
                    why: "driver lacks cuMemGetHandleForAddressRange".into(),
                });
            }
            Export::Unmappable => {
                let (r, _w) = std::io::pipe().unwrap();
                return Ok(DmabufRegion {
                    fd: OwnedFd::from(r),
                    offset: 0,
                    len: len as u64,
                    exported_size: len as u64,
                });
            }
        };
        // The page-aligned window the real runtimes export (engine's dmabuf.rs arithmetic).
        let w = window(
            ptr.addr,
            len as u64,
            host_page_size(),
            self.base(),
            self.vram.len() as u64,
        )?;
        let start = w.start - self.base();
        let io = |e: std::io::Error| GpuError::InvalidArgument(format!("export: {e}"));
        let (fd, offset, exported_size) = match kind {
            ExportKind::Udmabuf => (
                self.vram.export(kind, start, w.size).map_err(io)?,
                w.offset,
                w.size,
            ),
            // The memfd is the whole buffer: offsets count from its byte 0.
            ExportKind::Memfd => (
                self.vram.export(kind, start, w.size).map_err(io)?,
                start + w.offset,
                self.vram.len() as u64,
            ),
        };
        Ok(DmabufRegion {
            fd,
            offset,
            len: len as u64,
            exported_size,
        })
    }
}

/// The gateway with `bkt/obj.bin` holding `data`.
fn gateway_with(data: &[u8]) -> (tempfile::TempDir, hipobj_gateway::RunningGateway) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(raw::call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(a, "PUT", "/bkt/obj.bin", "", &[], data).status(),
        200
    );
    (dir, gw)
}

const OBJ: usize = 3 << 20;
/// The registration starts this far into the allocation: not page aligned, so the dmabuf
/// offset and the window arithmetic matter.
const SKEW: u64 = 4096 + 333;

fn direct_get_and_put_over_soft(kind: ExportKind) {
    let data = rig::pattern(OBJ, 21);
    let (_dir, gw) = gateway_with(&data);
    let gpu = DmabufTestGpu::new(16 << 20, Export::Of(kind));
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .gpu(gpu.as_dyn())
        .gpu_direct(GpuDirect::Require)
        .build()
        .unwrap();
    let alloc = gpu.alloc_device(0, 8 << 20).unwrap();
    let dev = alloc.offset(SKEW).unwrap();
    let reg_len = OBJ + (256 << 10);
    // SAFETY: the fake VRAM lives as long as `gpu`, which outlives the engine.
    let buf = unsafe { engine.register_device(dev, reg_len) }.unwrap();
    assert_eq!(engine.gpu_tier(buf).unwrap(), Some(GpuTier::Direct));
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let mut q = engine.queue(8).unwrap();
    let staged0 = engine.gpu_staging().unwrap();

    // Whole-object GET into the registration's start.
    let c = rig::run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, reg_len as u64))
            .user_data(1)
            .build(),
    );
    assert!(c.is_ok(), "GET failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    assert_eq!(c.bytes(), OBJ as u64);
    assert!(
        gpu.device_bytes(dev, OBJ) == data,
        "GET bytes in VRAM differ"
    );
    assert!(!c.verified(), "a direct GET cannot be checked on the host");

    // A RangeGet into an unaligned spot further in.
    let (off, len, at) = (1_000_003u64, 200_001u64, OBJ as u64 + 4099);
    let slot = BufSlice::new(buf, at, len);
    let c = rig::run_one(&mut q, RangeGet::new(obj, off, slot).user_data(2).build());
    assert!(c.is_ok(), "RangeGet failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    let got = gpu.device_bytes(dev.offset(at).unwrap(), len as usize);
    assert!(
        got == data[off as usize..(off + len) as usize],
        "RangeGet bytes differ"
    );

    let staged = engine.gpu_staging().unwrap();
    assert_eq!(
        staged.ranges_to_device, staged0.ranges_to_device,
        "a direct GET was staged"
    );
    assert_eq!(gpu.h2d.load(Ordering::Relaxed), 0, "a copy into VRAM ran");
    let st = engine.gpu_direct_stats();
    assert_eq!(
        (
            st.direct_registrations,
            st.staged_registrations,
            st.fallbacks
        ),
        (1, 0, 0)
    );
    assert_eq!((st.direct_ops, st.direct_bytes), (2, OBJ as u64 + len));

    // PUT from the registration: the device's bytes (changed after the GET) are stored.
    let new = rig::pattern(OBJ / 2, 77);
    gpu.fill(dev, &new);
    let put = engine.object("bkt", "back.bin").unwrap();
    let c = rig::run_one(
        &mut q,
        Put::new(put, BufSlice::new(buf, 0, new.len() as u64))
            .user_data(3)
            .build(),
    );
    assert!(c.is_ok(), "PUT failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    let stored = raw::call(gw.local_addr(), "GET", "/bkt/back.bin", "", &[], b"");
    assert_eq!(stored.status(), 200);
    assert!(
        stored.body == new,
        "stored object differs from the device bytes"
    );
    assert_eq!(
        engine.gpu_staging().unwrap().ranges_from_device,
        1,
        "PUTs stage"
    );
    assert!(gpu.exports.load(Ordering::Relaxed) >= 1);
    drop(q);
    drop(engine);
    gw.shutdown();
}

#[test]
fn direct_get_and_put_over_soft_with_a_memfd_export() {
    direct_get_and_put_over_soft(ExportKind::Memfd);
}

#[test]
#[ignore = "needs /dev/udmabuf (CONFIG_UDMABUF); run with --ignored where it exists"]
fn direct_get_and_put_over_soft_with_a_udmabuf() {
    direct_get_and_put_over_soft(ExportKind::Udmabuf);
}

/// Builds an engine for `gw` with `mode` and `export`, registers 1 MiB of device memory and
/// returns the result (and the engine, for the counters).
fn register(
    gw: &hipobj_gateway::RunningGateway,
    fabric: Fabric,
    mode: GpuDirect,
    export: Export,
) -> (
    Result<(ring_api::BufHandle, GpuTier), EngineError>,
    engine::Engine,
    Arc<DmabufTestGpu>,
) {
    let gpu = DmabufTestGpu::new(4 << 20, export);
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(fabric)
        .dialect(Dialect::RcPersistent)
        .gpu(gpu.as_dyn())
        .gpu_direct(mode)
        .build()
        .unwrap();
    let dev = gpu.alloc_device(0, 1 << 20).unwrap();
    // SAFETY: the fake VRAM outlives the engine (returned together, engine dropped first).
    let r = unsafe { engine.register_device(dev, 1 << 20) }
        .map(|h| (h, engine.gpu_tier(h).unwrap().unwrap()));
    (r, engine, gpu)
}

#[test]
fn require_says_why_and_auto_falls_back_to_staging() {
    let data = rig::pattern(64 << 10, 5);
    let (_dir, gw) = gateway_with(&data);
    let memfd = Export::Of(ExportKind::Memfd);

    // No RDMA fabric.
    let (r, _e, _g) = register(&gw, Fabric::Http, GpuDirect::Require, memfd);
    match r {
        Err(EngineError::GpuDirect(GpuDirectError::NoRdmaFabric(why))) => {
            assert!(why.contains("HTTP"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The runtime cannot export: the driver's error is kept.
    let (r, _e, _g) = register(&gw, Fabric::Soft, GpuDirect::Require, Export::Unsupported);
    match r {
        Err(EngineError::GpuDirect(GpuDirectError::Export(GpuError::Unsupported {
            why, ..
        }))) => {
            assert!(why.contains("cuMemGetHandleForAddressRange"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The device refuses the dmabuf: the errno is kept.
    let (r, e, _g) = register(&gw, Fabric::Soft, GpuDirect::Require, Export::Unmappable);
    let err = r.unwrap_err();
    match &err {
        EngineError::GpuDirect(g @ GpuDirectError::Refused { device, .. }) => {
            assert_eq!(g.errno(), Some(libc::ESPIPE), "{err}");
            assert!(device.starts_with("soft:"), "{device}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("refused the dmabuf"), "{err}");
    // A failed Require leaves nothing registered or counted as registered.
    assert_eq!(e.gpu_direct_stats().direct_registrations, 0);

    // Auto: each of those stages, counted, and GETs still land in VRAM (through the stager).
    for (fabric, export) in [
        (Fabric::Http, memfd),
        (Fabric::Soft, Export::Unsupported),
        (Fabric::Soft, Export::Unmappable),
    ] {
        let (r, e, g) = register(&gw, fabric, GpuDirect::Auto, export);
        assert_eq!(r.unwrap().1, GpuTier::Staged, "{fabric:?} {export:?}");
        let st = e.gpu_direct_stats();
        assert_eq!(
            (st.staged_registrations, st.fallbacks),
            (1, 1),
            "{fabric:?} {export:?}"
        );
        drop(e);
        drop(g);
    }
    // Off: staged without trying (no export asked for).
    let (r, e, g) = register(&gw, Fabric::Soft, GpuDirect::Off, memfd);
    assert_eq!(r.unwrap().1, GpuTier::Staged);
    assert_eq!(e.gpu_direct_stats().fallbacks, 0);
    assert_eq!(g.exports.load(Ordering::Relaxed), 0);
    drop(e);
    gw.shutdown();
}

#[test]
fn a_staged_fallback_still_lands_get_bytes_in_vram() {
    let data = rig::pattern(256 << 10, 8);
    let (_dir, gw) = gateway_with(&data);
    let (r, engine, gpu) = register(&gw, Fabric::Soft, GpuDirect::Auto, Export::Unmappable);
    let (buf, tier) = r.unwrap();
    assert_eq!(tier, GpuTier::Staged);
    // `register` registered the first MiB of the allocation.
    let dev = DevicePtr {
        addr: gpu.base(),
        ordinal: 0,
    };
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let mut q = engine.queue(4).unwrap();
    let c = rig::run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, 1 << 20)).build(),
    );
    assert!(c.is_ok(), "{:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    assert!(gpu.device_bytes(dev, data.len()) == data);
    assert_eq!(engine.gpu_staging().unwrap().ranges_to_device, 1);
    assert_eq!(engine.gpu_direct_stats().direct_ops, 0);
    drop(q);
    drop(engine);
    gw.shutdown();
}
