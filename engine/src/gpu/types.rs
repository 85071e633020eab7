//! Plain values exchanged with a [`GpuRuntime`](super::GpuRuntime): pointers, handles, kinds.
//!
//! Handles are opaque integers so the trait stays object-safe and backend-neutral; the RAII
//! types in [`super::handles`] are what keep them valid.

/// What kind of memory an address points to, as the runtime sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PointerKind {
    /// Host memory known to the runtime (pinned / registered), usable for async copies.
    Host,
    /// Device memory (VRAM) of the device with this ordinal.
    Device {
        /// Runtime device ordinal.
        ordinal: u32,
    },
    /// Managed / unified memory migrating between host and device.
    Managed,
    /// Not known to the runtime: ordinary pageable host memory or garbage.
    Unknown,
}

/// A device virtual address together with the device it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevicePtr {
    /// Device virtual address (`CUdeviceptr`, HIP `void*`).
    pub addr: u64,
    /// Ordinal of the owning device.
    pub ordinal: u32,
}

impl DevicePtr {
    /// The address `off` bytes further, or `None` on overflow.
    #[must_use]
    pub fn offset(self, off: u64) -> Option<DevicePtr> {
        Some(DevicePtr {
            addr: self.addr.checked_add(off)?,
            ordinal: self.ordinal,
        })
    }
}

/// An opaque stream handle (`CUstream`, `hipStream_t`) and the device it was created on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawStream {
    /// The handle's bits.
    pub handle: usize,
    /// Device ordinal.
    pub ordinal: u32,
}

/// An opaque event handle (`CUevent`, `hipEvent_t`) and the device it was created on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawEvent {
    /// The handle's bits.
    pub handle: usize,
    /// Device ordinal.
    pub ordinal: u32,
}

/// Optional features of a loaded runtime, found by symbol lookup and version at load time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Device memory can be exported as a dmabuf fd (for `ibv_reg_dmabuf_mr`).
    pub dmabuf_export: bool,
    /// Device memory can be shared with other processes through IPC memory handles
    /// ([`super::GpuRuntime::ipc_export`] and `ipc_open` work).
    pub ipc_memory: bool,
    /// Optional symbols the loaded runtime lacks (newer than it), reported instead of failing.
    pub missing_optional: Vec<&'static str>,
}
