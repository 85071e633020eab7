//! One configurable `GpuRuntime` test double for the engine's GPU tests on hosts without a GPU.
//!
//! What differs between the tests is configured, not re-implemented:
//! - [`Backing`]: where "device memory" lives: a sealed memfd mapped into this process (its
//!   dmabuf export is real: `gpu_direct`), host heap allocations (`gpu_staging`), or nothing
//!   (fake per-device address ranges that are never dereferenced: `workers_nic_affinity`);
//! - [`Copies`]: copies run at once, on a "copy engine" thread that executes each stream's
//!   queued commands in order, slowly, and can be paused (so early completions would show),
//!   or are refused;
//! - [`Export`]: how `export_dmabuf` answers;
//! - the PCI address of each device (`pci_bus_id`, `device_count`).
//!
//! Presets: [`TestGpu::memfd`], [`TestGpu::heap`], [`TestGpu::pci_only`].
//!
//! IPC memory handles ([`Backing::Heap`] only): `ipc_export` of an allocation puts it in a
//! table of this process ([`IPC`]) and returns a handle naming it (magic, pid, export id and
//! a random check value); `ipc_open` by another `TestGpu` of this process finds it there and
//! "maps" it at the same address (one address space), which that double then treats as its
//! device memory until `ipc_close`. The fake cannot cross processes: a handle from another
//! pid is refused as unsupported. As CUDA does, a double refuses to open its own export, and
//! it refuses to free an allocation an importer still has open (undefined on a real GPU).
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use engine::gpu::dmabuf::{host_page_size, window};
use engine::gpu::ipc::{check_mapping, offset_in};
use engine::gpu::{
    Backend, Capabilities, DevicePtr, DmabufRegion, GpuError, GpuRuntime, IPC_HANDLE_BYTES,
    IpcExport, PointerKind, RawEvent, RawStream,
};
use engine::soft::udmabuf::{ExportKind, HostDmabuf};
use numa::{GpuVendor, PciAddr};

/// Where the test double's device memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// A sealed memfd of this many bytes, mapped here; `alloc_device` hands out consecutive
    /// pieces of it (never reused) and `export_dmabuf` exports it.
    Memfd(usize),
    /// One zeroed heap allocation per `alloc_device` (calloc'ed: untouched pages cost
    /// nothing), freed by `free_device`.
    Heap,
    /// No memory: device `o`'s addresses are [`dev_base`]`(o)..+1 GiB`, known to
    /// `pointer_kind` and never dereferenced; allocation, streams, events, copies and exports
    /// are refused as unsupported.
    None,
}

/// How the test double runs copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// At once, on the calling thread; events are always complete.
    Immediate,
    /// On a copy-engine thread, each queued command in stream order, `per_copy` per copy;
    /// [`TestGpu::set_paused`] holds it.
    Engine {
        /// How long each copy takes.
        per_copy: Duration,
    },
}

/// How the test double answers `export_dmabuf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// A dmabuf (or the memfd itself) of the fake VRAM ([`Backing::Memfd`] only).
    Of(ExportKind),
    /// The driver error of a runtime without the export (as CUDA before 11.7).
    Unsupported,
    /// An fd the RDMA device cannot register (a pipe: no size, no mmap — as CUDA's VRAM
    /// dmabufs are unmappable for the soft device).
    Unmappable,
    /// `InvalidArgument`: this double exports nothing.
    Refused,
}

/// The configuration of a [`TestGpu`].
#[derive(Debug, Clone)]
pub struct TestGpuConfig {
    /// Device memory.
    pub backing: Backing,
    /// Copy model.
    pub copies: Copies,
    /// `export_dmabuf`'s answer.
    pub export: Export,
    /// PCI address of each ordinal; empty: one device without a PCI address.
    pub pci: Vec<PciAddr>,
    /// `GpuRuntime::name`.
    pub name: &'static str,
}

/// Device `o`'s fake address range starts here (1 GiB each) with [`Backing::None`].
pub fn dev_base(o: u32) -> u64 {
    0x7f00_0000_0000 + (u64::from(o) << 30)
}

/// One queued command of a copy-engine stream.
#[derive(Debug)]
enum Cmd {
    Copy { dst: usize, src: usize, len: usize },
    Record(usize),
}

#[derive(Debug, Default)]
struct EngineState {
    streams: HashMap<usize, VecDeque<Cmd>>,
    /// Event → recorded but not yet reached by its stream.
    events: HashMap<usize, bool>,
    paused: bool,
    stop: bool,
}

/// The copy-engine thread and what it shares with the runtime.
#[derive(Debug)]
struct CopyEngine {
    state: Arc<(Mutex<EngineState>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
enum Memory {
    Memfd {
        vram: HostDmabuf,
        next: AtomicUsize,
    },
    /// Address → length.
    Heap(Mutex<HashMap<u64, usize>>),
    None,
}

/// One exported allocation in the process-wide [`IPC`] table.
#[derive(Debug)]
struct IpcEntry {
    /// The exporting double ([`TestGpu::id`]).
    exporter: u64,
    addr: u64,
    len: usize,
    /// The handle's check value: a handle with another one is forged.
    check: u64,
    /// Opens not yet closed, over all importers.
    opens: usize,
}

/// The test doubles' IPC exports in this process, by export id.
static IPC: Mutex<Option<HashMap<u64, IpcEntry>>> = Mutex::new(None);
/// Export ids and double ids.
static IDS: AtomicU64 = AtomicU64::new(1);
/// The first bytes of every handle of the test double.
const IPC_MAGIC: &[u8; 8] = b"TGPU-IPC";

fn ipc_table<R>(f: impl FnOnce(&mut HashMap<u64, IpcEntry>) -> R) -> R {
    let mut t = IPC
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(t.get_or_insert_with(HashMap::new))
}

/// The handle naming export `id` of this process.
fn ipc_handle(id: u64, check: u64) -> [u8; IPC_HANDLE_BYTES] {
    let mut h = [0u8; IPC_HANDLE_BYTES];
    h[..8].copy_from_slice(IPC_MAGIC);
    h[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    h[20..28].copy_from_slice(&check.to_le_bytes());
    h
}

/// `(id, check)` of a handle of this process; errors say why it is not one.
fn parse_ipc_handle(h: &[u8; IPC_HANDLE_BYTES]) -> Result<(u64, u64), GpuError> {
    if &h[..8] != IPC_MAGIC || h[28..].iter().any(|&b| b != 0) {
        return Err(GpuError::InvalidArgument(
            "not an IPC handle of the test double".into(),
        ));
    }
    let word = |r: std::ops::Range<usize>| {
        let mut w = [0u8; 8];
        w[..r.len()].copy_from_slice(&h[r]);
        u64::from_le_bytes(w)
    };
    if word(8..12) != u64::from(std::process::id()) {
        return Err(GpuError::Unsupported {
            backend: Backend::Cuda,
            what: "IPC memory open",
            why: "the test double's handles name memory of the process that exported them; \
                  it cannot cross processes"
                .into(),
        });
    }
    Ok((word(12..20), word(20..28)))
}

/// The configurable `GpuRuntime` test double (module docs).
#[derive(Debug)]
pub struct TestGpu {
    /// Tells this double from the others of the process (IPC: the exporter of an entry).
    id: u64,
    /// Allocations of other doubles opened here through IPC: base → (length, export id,
    /// opens).
    imports: Mutex<HashMap<u64, (usize, u64, usize)>>,
    memory: Memory,
    engine: Option<CopyEngine>,
    export: Export,
    pci: Vec<PciAddr>,
    name: &'static str,
    /// Pinned allocations: address → length.
    pinned: Mutex<HashMap<usize, usize>>,
    handles: AtomicUsize,
    h2d_async: AtomicU64,
    d2h_async: AtomicU64,
    exports: AtomicU64,
}

fn unsupported(what: &'static str) -> GpuError {
    GpuError::Unsupported {
        backend: Backend::Cuda,
        what,
        why: "not needed to register".into(),
    }
}

impl TestGpu {
    /// A runtime as `config` says.
    pub fn new(config: TestGpuConfig) -> Arc<Self> {
        let memory = match config.backing {
            Backing::Memfd(len) => Memory::Memfd {
                vram: HostDmabuf::new(len).unwrap(),
                next: AtomicUsize::new(0),
            },
            Backing::Heap => Memory::Heap(Mutex::default()),
            Backing::None => Memory::None,
        };
        let engine = match config.copies {
            Copies::Immediate => None,
            Copies::Engine { per_copy } => {
                let state = Arc::new((Mutex::new(EngineState::default()), Condvar::new()));
                let s = Arc::clone(&state);
                let thread = std::thread::spawn(move || copy_engine(&s, per_copy));
                Some(CopyEngine {
                    state,
                    thread: Mutex::new(Some(thread)),
                })
            }
        };
        Arc::new(Self {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            imports: Mutex::default(),
            memory,
            engine,
            export: config.export,
            pci: config.pci,
            name: config.name,
            pinned: Mutex::default(),
            handles: AtomicUsize::new(1),
            h2d_async: AtomicU64::new(0),
            d2h_async: AtomicU64::new(0),
            exports: AtomicU64::new(0),
        })
    }

    /// `vram` bytes of memfd-backed device memory, copies at once, `export` for dmabufs
    /// (the GPUDirect tests).
    pub fn memfd(vram: usize, export: Export) -> Arc<Self> {
        Self::new(TestGpuConfig {
            backing: Backing::Memfd(vram),
            copies: Copies::Immediate,
            export,
            pci: Vec::new(),
            name: "memfd-backed test double",
        })
    }

    /// Heap-backed device memory and a copy engine taking `per_copy` per copy (the staging
    /// tests); no dmabuf export.
    pub fn heap(per_copy: Duration) -> Arc<Self> {
        Self::new(TestGpuConfig {
            backing: Backing::Heap,
            copies: Copies::Engine { per_copy },
            export: Export::Refused,
            pci: Vec::new(),
            name: "host-backed test double",
        })
    }

    /// Devices at these PCI addresses (ordinal order) without memory: registration and NIC
    /// binding only (the placement tests).
    pub fn pci_only(pci: Vec<PciAddr>) -> Arc<Self> {
        Self::new(TestGpuConfig {
            backing: Backing::None,
            copies: Copies::Immediate,
            export: Export::Refused,
            pci,
            name: "PCI-only test double",
        })
    }

    /// As `Arc<dyn GpuRuntime>` for `EngineBuilder::gpu`.
    pub fn as_dyn(self: &Arc<Self>) -> Arc<dyn GpuRuntime> {
        Arc::clone(self) as Arc<dyn GpuRuntime>
    }

    /// The memfd's first byte's address ([`Backing::Memfd`] only).
    pub fn base(&self) -> u64 {
        match &self.memory {
            Memory::Memfd { vram, .. } => vram.as_ptr() as u64,
            _ => panic!("base: not memfd-backed"),
        }
    }

    /// Whether `addr..addr+len` lies inside device memory that is really there (its own or
    /// opened through IPC).
    fn backed(&self, addr: u64, len: usize) -> bool {
        let end = addr.checked_add(len as u64);
        let imported = self
            .imports
            .lock()
            .unwrap()
            .iter()
            .any(|(&a, &(l, _, _))| a <= addr && end.is_some_and(|e| e <= a + l as u64));
        if imported {
            return true;
        }
        match &self.memory {
            Memory::Memfd { vram, .. } => {
                let base = vram.as_ptr() as u64;
                addr >= base && end.is_some_and(|e| e <= base + vram.len() as u64)
            }
            Memory::Heap(m) => m
                .lock()
                .unwrap()
                .iter()
                .any(|(&a, &l)| a <= addr && end.is_some_and(|e| e <= a + l as u64)),
            Memory::None => false,
        }
    }

    /// The device bytes at `ptr..ptr+len` (host memory here).
    pub fn device_bytes(&self, ptr: DevicePtr, len: usize) -> Vec<u8> {
        assert!(self.backed(ptr.addr, len), "outside device memory");
        // SAFETY: inside live device memory of this double (asserted); the callers read it
        // when no operation is writing it.
        unsafe { std::slice::from_raw_parts(ptr.addr as usize as *const u8, len).to_vec() }
    }

    /// Writes `data` into device memory at `ptr`.
    pub fn fill(&self, ptr: DevicePtr, data: &[u8]) {
        assert!(self.backed(ptr.addr, data.len()), "outside device memory");
        // SAFETY: as in `device_bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.addr as usize as *mut u8, data.len())
        };
    }

    /// Holds (or releases) the copy engine ([`Copies::Engine`] only).
    pub fn set_paused(&self, paused: bool) {
        let e = self.engine.as_ref().expect("set_paused: no copy engine");
        e.state.0.lock().unwrap().paused = paused;
        e.state.1.notify_all();
    }

    /// Pinned host bytes allocated now.
    pub fn pinned_bytes(&self) -> usize {
        self.pinned.lock().unwrap().values().sum()
    }

    /// `memcpy_h2d_async` calls so far.
    pub fn h2d_async(&self) -> u64 {
        self.h2d_async.load(Ordering::Relaxed)
    }

    /// `memcpy_d2h_async` calls so far.
    pub fn d2h_async(&self) -> u64 {
        self.d2h_async.load(Ordering::Relaxed)
    }

    /// `export_dmabuf` calls so far.
    pub fn exports(&self) -> u64 {
        self.exports.load(Ordering::Relaxed)
    }

    fn handle(&self) -> usize {
        self.handles.fetch_add(1, Ordering::Relaxed)
    }

    fn no_memory(&self, what: &'static str) -> Result<(), GpuError> {
        match self.memory {
            Memory::None => Err(unsupported(what)),
            _ => Ok(()),
        }
    }

    /// Queues `cmd` on `stream` of the copy engine.
    fn push(e: &CopyEngine, stream: RawStream, cmd: Cmd) -> Result<(), GpuError> {
        let mut st = e.state.0.lock().unwrap();
        st.streams
            .get_mut(&stream.handle)
            .ok_or_else(|| GpuError::InvalidArgument("unknown stream".into()))?
            .push_back(cmd);
        e.state.1.notify_all();
        Ok(())
    }

    /// An async copy: queued on the copy engine, or run at once.
    ///
    /// # Safety
    /// `src` and `dst` are valid for `len` bytes until the copy has run (the `GpuRuntime`
    /// async-copy contract).
    unsafe fn copy_async(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.no_memory("copies")?;
        match &self.engine {
            Some(e) => Self::push(e, stream, Cmd::Copy { dst, src, len }),
            None => {
                // SAFETY: the caller's contract (copies run at once here).
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
                Ok(())
            }
        }
    }
}

impl Drop for TestGpu {
    fn drop(&mut self) {
        if let Some(e) = &self.engine {
            e.state.0.lock().unwrap().stop = true;
            e.state.1.notify_all();
            if let Some(t) = e.thread.lock().unwrap().take() {
                let _ = t.join();
            }
        }
    }
}

/// Executes queued commands, one stream entry at a time, in stream order.
fn copy_engine(state: &(Mutex<EngineState>, Condvar), per_copy: Duration) {
    let (lock, cv) = state;
    let mut st = lock.lock().unwrap();
    loop {
        if st.stop {
            return;
        }
        let next = if st.paused {
            None
        } else {
            st.streams.iter_mut().find_map(|(_, q)| q.pop_front())
        };
        let Some(cmd) = next else {
            st = cv.wait_timeout(st, Duration::from_millis(5)).unwrap().0;
            continue;
        };
        match cmd {
            Cmd::Copy { dst, src, len } => {
                drop(st);
                std::thread::sleep(per_copy);
                // SAFETY: the engine keeps both ranges alive until the event after this copy.
                unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
                st = lock.lock().unwrap();
            }
            Cmd::Record(e) => {
                st.events.insert(e, false);
            }
        }
        cv.notify_all();
    }
}

impl GpuRuntime for TestGpu {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }
    fn name(&self) -> String {
        self.name.into()
    }
    fn vendor(&self) -> GpuVendor {
        GpuVendor::Nvidia
    }
    fn version(&self) -> i32 {
        0
    }
    fn device_count(&self) -> u32 {
        self.pci.len().max(1) as u32
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ipc_memory: matches!(self.memory, Memory::Heap(_)),
            ..Capabilities::default()
        }
    }
    fn device_name(&self, _: u32) -> Result<String, GpuError> {
        Ok("test double".into())
    }
    fn pci_bus_id(&self, ordinal: u32) -> Result<PciAddr, GpuError> {
        if self.pci.is_empty() {
            return Err(GpuError::InvalidArgument(
                "test double has no PCI address".into(),
            ));
        }
        self.pci
            .get(ordinal as usize)
            .copied()
            .ok_or_else(|| GpuError::InvalidArgument(format!("no device {ordinal}")))
    }
    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError> {
        let ordinal = match &self.memory {
            Memory::None => (0..self.device_count())
                .find(|&o| (dev_base(o)..dev_base(o) + (1 << 30)).contains(&addr)),
            _ => self.backed(addr, 1).then_some(0),
        };
        Ok(
            ordinal.map_or(PointerKind::Unknown, |ordinal| PointerKind::Device {
                ordinal,
            }),
        )
    }
    fn alloc_device(&self, _: u32, len: usize) -> Result<DevicePtr, GpuError> {
        let addr = match &self.memory {
            Memory::Memfd { vram, next } => {
                let at = next.fetch_add(len, Ordering::Relaxed);
                if at + len > vram.len() {
                    return Err(GpuError::InvalidArgument("test VRAM exhausted".into()));
                }
                vram.as_ptr() as u64 + at as u64
            }
            Memory::Heap(m) => {
                let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
                let addr = Box::into_raw(b) as *mut u8 as usize as u64;
                m.lock().unwrap().insert(addr, len);
                addr
            }
            Memory::None => return Err(unsupported("alloc_device")),
        };
        Ok(DevicePtr { addr, ordinal: 0 })
    }
    unsafe fn free_device(&self, ptr: DevicePtr) -> Result<(), GpuError> {
        match &self.memory {
            // The memfd's pieces are never reused.
            Memory::Memfd { .. } => Ok(()),
            Memory::Heap(m) => {
                // An allocation an importer still has open stays (undefined on a real GPU);
                // freeing one makes its handle stale.
                ipc_table(|t| {
                    let open = t.values().any(|e| e.addr == ptr.addr && e.opens > 0);
                    if open {
                        return Err(GpuError::InvalidArgument(
                            "free of device memory an IPC importer still has open".into(),
                        ));
                    }
                    t.retain(|_, e| e.addr != ptr.addr);
                    Ok(())
                })?;
                let len = m.lock().unwrap().remove(&ptr.addr);
                let len = len.ok_or_else(|| GpuError::InvalidArgument("double free".into()))?;
                let p = std::ptr::slice_from_raw_parts_mut(ptr.addr as usize as *mut u8, len);
                // SAFETY: allocated by `alloc_device` as a boxed slice of this length.
                drop(unsafe { Box::from_raw(p) });
                Ok(())
            }
            Memory::None => Err(unsupported("free_device")),
        }
    }
    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError> {
        let p = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        self.pinned.lock().unwrap().insert(p as usize, len);
        Ok(p)
    }
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError> {
        let len = self.pinned.lock().unwrap().remove(&(ptr as usize));
        let len = len.ok_or_else(|| GpuError::InvalidArgument("double free".into()))?;
        // SAFETY: allocated by `alloc_pinned` as a boxed slice of this length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        Ok(())
    }
    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError> {
        self.no_memory("streams")?;
        let handle = self.handle();
        if let Some(e) = &self.engine {
            e.state
                .0
                .lock()
                .unwrap()
                .streams
                .insert(handle, VecDeque::new());
        }
        Ok(RawStream { handle, ordinal })
    }
    unsafe fn destroy_stream(&self, stream: RawStream) -> Result<(), GpuError> {
        self.no_memory("streams")?;
        // SAFETY: forwarded contract.
        unsafe { self.stream_synchronize(stream)? };
        if let Some(e) = &self.engine {
            e.state.0.lock().unwrap().streams.remove(&stream.handle);
        }
        Ok(())
    }
    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<(), GpuError> {
        self.no_memory("streams")?;
        let Some(e) = &self.engine else {
            return Ok(());
        };
        let (lock, cv) = &*e.state;
        let mut st = lock.lock().unwrap();
        // Synchronising a paused device would hang the test: unpause (as a real device would
        // make progress).
        st.paused = false;
        cv.notify_all();
        while st
            .streams
            .get(&stream.handle)
            .is_some_and(|q| !q.is_empty())
            || st.events.values().any(|&pending| pending)
        {
            st = cv.wait_timeout(st, Duration::from_millis(5)).unwrap().0;
        }
        Ok(())
    }
    fn create_event(&self, ordinal: u32, _timing: bool) -> Result<RawEvent, GpuError> {
        self.no_memory("events")?;
        let handle = self.handle();
        if let Some(e) = &self.engine {
            e.state.0.lock().unwrap().events.insert(handle, false);
        }
        Ok(RawEvent { handle, ordinal })
    }
    unsafe fn destroy_event(&self, event: RawEvent) -> Result<(), GpuError> {
        self.no_memory("events")?;
        if let Some(e) = &self.engine {
            e.state.0.lock().unwrap().events.remove(&event.handle);
        }
        Ok(())
    }
    unsafe fn record_event(&self, event: RawEvent, stream: RawStream) -> Result<(), GpuError> {
        self.no_memory("events")?;
        let Some(e) = &self.engine else {
            return Ok(());
        };
        e.state.0.lock().unwrap().events.insert(event.handle, true);
        Self::push(e, stream, Cmd::Record(event.handle))
    }
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool, GpuError> {
        self.no_memory("events")?;
        let Some(e) = &self.engine else {
            return Ok(true);
        };
        let st = e.state.0.lock().unwrap();
        Ok(!st.events.get(&event.handle).copied().unwrap_or(false))
    }
    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<(), GpuError> {
        self.no_memory("events")?;
        let Some(e) = &self.engine else {
            return Ok(());
        };
        let (lock, cv) = &*e.state;
        let mut st = lock.lock().unwrap();
        while st.events.get(&event.handle).copied().unwrap_or(false) {
            st = cv.wait_timeout(st, Duration::from_millis(5)).unwrap().0;
        }
        Ok(())
    }
    unsafe fn event_elapsed_ms(&self, _: RawEvent, _: RawEvent) -> Result<f32, GpuError> {
        self.no_memory("events")?;
        Ok(0.0)
    }
    unsafe fn memcpy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.no_memory("copies")?;
        self.h2d_async.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { self.copy_async(dst.addr as usize, src as usize, len, stream) }
    }
    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.no_memory("copies")?;
        self.d2h_async.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded contract.
        unsafe { self.copy_async(dst as usize, src.addr as usize, len, stream) }
    }
    unsafe fn memcpy_h2d(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        self.no_memory("copies")?;
        // SAFETY: the caller's contract; device memory is host memory here.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.addr as usize as *mut u8, len) };
        Ok(())
    }
    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError> {
        self.no_memory("copies")?;
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.addr as usize as *const u8, dst, len) };
        Ok(())
    }
    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufRegion, GpuError> {
        self.no_memory("dmabuf")?;
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
            Export::Refused => {
                return Err(GpuError::InvalidArgument(
                    "test double exports no dmabuf".into(),
                ));
            }
        };
        let Memory::Memfd { vram, .. } = &self.memory else {
            return Err(GpuError::InvalidArgument(
                "a dmabuf export needs memfd-backed memory".into(),
            ));
        };
        let base = vram.as_ptr() as u64;
        // The page-aligned window the real runtimes export (engine's dmabuf.rs arithmetic).
        let w = window(
            ptr.addr,
            len as u64,
            host_page_size(),
            base,
            vram.len() as u64,
        )?;
        let start = w.start - base;
        let io = |e: std::io::Error| GpuError::InvalidArgument(format!("export: {e}"));
        let (fd, offset, exported_size) = match kind {
            ExportKind::Udmabuf => (
                vram.export(kind, start, w.size).map_err(io)?,
                w.offset,
                w.size,
            ),
            // The memfd is the whole buffer: offsets count from its byte 0.
            ExportKind::Memfd => (
                vram.export(kind, start, w.size).map_err(io)?,
                start + w.offset,
                vram.len() as u64,
            ),
        };
        Ok(DmabufRegion {
            fd,
            offset,
            len: len as u64,
            exported_size,
        })
    }
    fn ipc_export(&self, ptr: DevicePtr, len: usize) -> Result<IpcExport, GpuError> {
        let Memory::Heap(m) = &self.memory else {
            return Err(GpuError::Unsupported {
                backend: Backend::Cuda,
                what: "IPC memory export",
                why: "the test double exports heap-backed memory only".into(),
            });
        };
        if ptr.ordinal != 0 {
            return Err(GpuError::InvalidArgument(format!(
                "no device {}",
                ptr.ordinal
            )));
        }
        // The allocation holding the first byte, then the whole range inside it.
        let (addr, alloc_len) = m
            .lock()
            .unwrap()
            .iter()
            .map(|(&a, &l)| (a, l))
            .find(|&(a, l)| a <= ptr.addr && ptr.addr - a < l as u64)
            .ok_or_else(|| {
                GpuError::InvalidArgument(format!(
                    "IPC export: {:#x} is not device memory of this double",
                    ptr.addr
                ))
            })?;
        let offset = offset_in(ptr.addr, len as u64, addr, alloc_len as u64)?;
        let (id, check) = ipc_table(|t| {
            if let Some((&id, e)) = t.iter().find(|(_, e)| e.addr == addr) {
                return (id, e.check);
            }
            let id = IDS.fetch_add(1, Ordering::Relaxed);
            let check = RandomState::new().hash_one(id);
            t.insert(
                id,
                IpcEntry {
                    exporter: self.id,
                    addr,
                    len: alloc_len,
                    check,
                    opens: 0,
                },
            );
            (id, check)
        });
        Ok(IpcExport {
            handle: ipc_handle(id, check),
            offset,
            alloc_len: alloc_len as u64,
            ordinal: 0,
        })
    }
    unsafe fn ipc_open(&self, export: &IpcExport) -> Result<DevicePtr, GpuError> {
        self.no_memory("IPC memory open")?;
        export.check(1)?;
        if export.ordinal >= self.device_count() {
            return Err(GpuError::InvalidArgument(format!(
                "no device {}",
                export.ordinal
            )));
        }
        let (id, check) = parse_ipc_handle(&export.handle)?;
        let (addr, len) = ipc_table(|t| {
            let e = t
                .get_mut(&id)
                .filter(|e| e.check == check)
                .ok_or_else(|| GpuError::InvalidArgument("unknown or stale IPC handle".into()))?;
            if e.exporter == self.id {
                return Err(GpuError::InvalidArgument(
                    "a runtime cannot open its own IPC export (CUDA refuses it too)".into(),
                ));
            }
            check_mapping(export, e.addr, e.addr, e.len as u64)?;
            e.opens += 1;
            Ok((e.addr, e.len))
        })?;
        self.imports
            .lock()
            .unwrap()
            .entry(addr)
            .or_insert((len, id, 0))
            .2 += 1;
        Ok(DevicePtr {
            addr,
            ordinal: export.ordinal,
        })
    }
    unsafe fn ipc_close(&self, base: DevicePtr) -> Result<(), GpuError> {
        let id = {
            let mut imports = self.imports.lock().unwrap();
            let (_, id, opens) = imports.get_mut(&base.addr).ok_or_else(|| {
                GpuError::InvalidArgument(format!("{:#x} is not an open IPC mapping", base.addr))
            })?;
            let id = *id;
            *opens -= 1;
            if *opens == 0 {
                imports.remove(&base.addr);
            }
            id
        };
        ipc_table(|t| {
            if let Some(e) = t.get_mut(&id) {
                e.opens = e.opens.saturating_sub(1);
            }
        });
        Ok(())
    }
}
