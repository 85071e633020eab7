//! A `GpuRuntime` test double shared by the GPU tests: [`HostBackedTestGpu`], host memory
//! standing in for device memory and a "copy engine" thread that executes each stream's queued
//! copies in order, slowly, and can be paused; optionally at a PCI address of a fixture
//! topology.
#![allow(dead_code, unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use engine::gpu::{
    Backend, Capabilities, DevicePtr, DmabufRegion, GpuError, GpuRuntime, PointerKind, RawEvent,
    RawStream,
};
use numa::{GpuVendor, PciAddr};

/// One queued command of a test-double stream.
#[derive(Debug)]
enum Cmd {
    Copy { dst: usize, src: usize, len: usize },
    Record(usize),
}

#[derive(Debug, Default)]
struct State {
    /// Device allocations: address → length (host memory from `Box<[u8]>`).
    device: HashMap<u64, usize>,
    /// Pinned allocations: address → length.
    pinned: HashMap<usize, usize>,
    streams: HashMap<usize, VecDeque<Cmd>>,
    /// Event → recorded but not yet reached by its stream.
    events: HashMap<usize, bool>,
    next_handle: usize,
    paused: bool,
    stop: bool,
}

/// A `GpuRuntime` test double: host memory as "device" memory, a thread as the copy engine.
#[derive(Debug)]
pub struct HostBackedTestGpu {
    state: Arc<(Mutex<State>, Condvar)>,
    /// Asynchronous copies host → device so far.
    pub h2d_async: AtomicU64,
    /// Asynchronous copies device → host so far.
    pub d2h_async: AtomicU64,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// The PCI address it reports (`None`: it has none).
    pci: Option<PciAddr>,
}

impl HostBackedTestGpu {
    /// `per_copy`: how long the copy engine takes per copy (so early completions would show).
    pub fn new(per_copy: Duration) -> Arc<Self> {
        Self::at(per_copy, None)
    }

    /// As [`HostBackedTestGpu::new`], reporting PCI address `pci` (so registrations bind to
    /// the NICs nearest it in a fixture topology).
    pub fn at(per_copy: Duration, pci: Option<PciAddr>) -> Arc<Self> {
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let s = Arc::clone(&state);
        let worker = std::thread::spawn(move || copy_engine(&s, per_copy));
        Arc::new(Self {
            state,
            h2d_async: AtomicU64::new(0),
            d2h_async: AtomicU64::new(0),
            worker: Mutex::new(Some(worker)),
            pci,
        })
    }

    pub fn set_paused(&self, paused: bool) {
        self.state.0.lock().unwrap().paused = paused;
        self.state.1.notify_all();
    }

    fn handle(&self) -> usize {
        let mut st = self.state.0.lock().unwrap();
        st.next_handle += 1;
        st.next_handle
    }

    fn push(&self, stream: RawStream, cmd: Cmd) -> Result<(), GpuError> {
        let mut st = self.state.0.lock().unwrap();
        st.streams
            .get_mut(&stream.handle)
            .ok_or_else(|| GpuError::InvalidArgument("unknown stream".into()))?
            .push_back(cmd);
        self.state.1.notify_all();
        Ok(())
    }

    /// Pinned host bytes allocated now.
    pub fn pinned_bytes(&self) -> usize {
        self.state.0.lock().unwrap().pinned.values().sum()
    }

    /// The "device" bytes at `ptr..ptr+len` (it is host memory).
    pub fn device_bytes(&self, ptr: DevicePtr, len: usize) -> Vec<u8> {
        // SAFETY: test-double device memory is host memory allocated by `alloc_device`.
        unsafe { std::slice::from_raw_parts(ptr.addr as usize as *const u8, len).to_vec() }
    }
}

impl Drop for HostBackedTestGpu {
    fn drop(&mut self) {
        self.state.0.lock().unwrap().stop = true;
        self.state.1.notify_all();
        if let Some(t) = self.worker.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

/// Executes queued commands, one stream entry at a time, in stream order.
fn copy_engine(state: &(Mutex<State>, Condvar), per_copy: Duration) {
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

impl GpuRuntime for HostBackedTestGpu {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }
    fn name(&self) -> String {
        "host-backed test double".into()
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
        self.pci
            .ok_or_else(|| GpuError::InvalidArgument("test double has no PCI address".into()))
    }
    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError> {
        let st = self.state.0.lock().unwrap();
        let on_device = st
            .device
            .iter()
            .any(|(&a, &l)| a <= addr && addr < a + l as u64);
        Ok(if on_device {
            PointerKind::Device { ordinal: 0 }
        } else {
            PointerKind::Unknown
        })
    }
    fn alloc_device(&self, _ordinal: u32, len: usize) -> Result<DevicePtr, GpuError> {
        let b: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let addr = Box::into_raw(b) as *mut u8 as usize as u64;
        self.state.0.lock().unwrap().device.insert(addr, len);
        Ok(DevicePtr { addr, ordinal: 0 })
    }
    unsafe fn free_device(&self, ptr: DevicePtr) -> Result<(), GpuError> {
        let len = self.state.0.lock().unwrap().device.remove(&ptr.addr);
        let len = len.ok_or_else(|| GpuError::InvalidArgument("double free".into()))?;
        let p = std::ptr::slice_from_raw_parts_mut(ptr.addr as usize as *mut u8, len);
        // SAFETY: allocated by `alloc_device` as a boxed slice of this length.
        drop(unsafe { Box::from_raw(p) });
        Ok(())
    }
    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError> {
        let p = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        self.state.0.lock().unwrap().pinned.insert(p as usize, len);
        Ok(p)
    }
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError> {
        let len = self.state.0.lock().unwrap().pinned.remove(&(ptr as usize));
        let len = len.ok_or_else(|| GpuError::InvalidArgument("double free".into()))?;
        // SAFETY: allocated by `alloc_pinned` as a boxed slice of this length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        Ok(())
    }
    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError> {
        let handle = self.handle();
        self.state
            .0
            .lock()
            .unwrap()
            .streams
            .insert(handle, VecDeque::new());
        Ok(RawStream { handle, ordinal })
    }
    unsafe fn destroy_stream(&self, stream: RawStream) -> Result<(), GpuError> {
        // SAFETY: forwarded contract.
        unsafe { self.stream_synchronize(stream)? };
        self.state.0.lock().unwrap().streams.remove(&stream.handle);
        Ok(())
    }
    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<(), GpuError> {
        let (lock, cv) = &*self.state;
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
        let handle = self.handle();
        self.state.0.lock().unwrap().events.insert(handle, false);
        Ok(RawEvent { handle, ordinal })
    }
    unsafe fn destroy_event(&self, event: RawEvent) -> Result<(), GpuError> {
        self.state.0.lock().unwrap().events.remove(&event.handle);
        Ok(())
    }
    unsafe fn record_event(&self, event: RawEvent, stream: RawStream) -> Result<(), GpuError> {
        self.state
            .0
            .lock()
            .unwrap()
            .events
            .insert(event.handle, true);
        self.push(stream, Cmd::Record(event.handle))
    }
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool, GpuError> {
        let st = self.state.0.lock().unwrap();
        Ok(!st.events.get(&event.handle).copied().unwrap_or(false))
    }
    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<(), GpuError> {
        let (lock, cv) = &*self.state;
        let mut st = lock.lock().unwrap();
        while st.events.get(&event.handle).copied().unwrap_or(false) {
            st = cv.wait_timeout(st, Duration::from_millis(5)).unwrap().0;
        }
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
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.h2d_async.fetch_add(1, Ordering::Relaxed);
        let dst = dst.addr as usize;
        self.push(
            stream,
            Cmd::Copy {
                dst,
                src: src as usize,
                len,
            },
        )
    }
    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.d2h_async.fetch_add(1, Ordering::Relaxed);
        let src = src.addr as usize;
        self.push(
            stream,
            Cmd::Copy {
                dst: dst as usize,
                src,
                len,
            },
        )
    }
    unsafe fn memcpy_h2d(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: caller's contract; "device" memory is host memory.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.addr as usize as *mut u8, len) };
        Ok(())
    }
    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError> {
        // SAFETY: caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src.addr as usize as *const u8, dst, len) };
        Ok(())
    }
    fn export_dmabuf(&self, _: DevicePtr, _: usize) -> Result<DmabufRegion, GpuError> {
        Err(GpuError::InvalidArgument(
            "test double exports no dmabuf".into(),
        ))
    }
}

pub fn as_dyn(rt: &Arc<HostBackedTestGpu>) -> Arc<dyn GpuRuntime> {
    Arc::clone(rt) as Arc<dyn GpuRuntime>
}
