//! Device memory shared between processes: CUDA / HIP IPC memory handles.
//!
//! A process that owns device memory (a client's `torch` tensor) exports it with
//! [`GpuRuntime::ipc_export`](super::GpuRuntime::ipc_export); another process (the node
//! daemon of issue 34) opens the handle with [`GpuRuntime::ipc_open`](super::GpuRuntime::ipc_open),
//! which maps the **whole allocation** and returns its base, and adds [`IpcExport::offset`]
//! itself ([`IpcExport::locate`]). The runtimes' handles (`CUipcMemHandle`,
//! `hipIpcMemHandle_t`) are 64 opaque bytes that name an allocation, never a byte inside it,
//! which is why the export also carries the offset and the allocation's length.
//!
//! Everything in an [`IpcExport`] that arrives from another process is untrusted: the
//! importer checks it ([`IpcExport::from_bytes`], [`IpcExport::check`]) and the runtimes'
//! `ipc_open` compare the claimed length with what the mapping really is.

use super::{DevicePtr, GpuError};

/// Bytes of a CUDA (`CU_IPC_HANDLE_SIZE`) or HIP (`HIP_IPC_HANDLE_SIZE`) memory handle.
pub const IPC_HANDLE_BYTES: usize = 64;

/// Bytes of [`IpcExport::to_bytes`]: the handle, offset, allocation length and ordinal.
pub const IPC_EXPORT_BYTES: usize = IPC_HANDLE_BYTES + 8 + 8 + 4;

/// Device memory exported for another process: the runtime's handle of the allocation that
/// holds the bytes, and where the bytes lie in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcExport {
    /// The runtime's opaque handle of the whole allocation (`cuIpcGetMemHandle`,
    /// `hipIpcGetMemHandle` of the allocation's base).
    pub handle: [u8; IPC_HANDLE_BYTES],
    /// Where the exported pointer lies in the allocation (`ptr - base`).
    pub offset: u64,
    /// Length of the whole allocation (`cuMemGetAddressRange`, `hipMemGetAddressRange`).
    pub alloc_len: u64,
    /// The exporter's device ordinal. Ordinals are per process (`CUDA_VISIBLE_DEVICES`,
    /// `HIP_VISIBLE_DEVICES`): an importer that numbers devices differently must translate
    /// (by PCI address) before opening; opened on another device, the memory is reached
    /// through peer access.
    pub ordinal: u32,
}

impl IpcExport {
    /// The fixed little-endian wire form: `handle[64] | offset u64 | alloc_len u64 | ordinal u32`.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; IPC_EXPORT_BYTES] {
        let mut out = [0u8; IPC_EXPORT_BYTES];
        out[..64].copy_from_slice(&self.handle);
        out[64..72].copy_from_slice(&self.offset.to_le_bytes());
        out[72..80].copy_from_slice(&self.alloc_len.to_le_bytes());
        out[80..84].copy_from_slice(&self.ordinal.to_le_bytes());
        out
    }

    /// Parses [`IpcExport::to_bytes`]'s form from untrusted input; the result has passed
    /// [`IpcExport::check`] for a length of one byte.
    ///
    /// Errors ([`GpuError::InvalidArgument`]): a length other than [`IPC_EXPORT_BYTES`], an
    /// empty allocation, an offset at or past the allocation's end.
    pub fn from_bytes(bytes: &[u8]) -> Result<IpcExport, GpuError> {
        let b: &[u8; IPC_EXPORT_BYTES] = bytes.try_into().map_err(|_| {
            GpuError::InvalidArgument(format!(
                "IPC export of {} bytes (expected {IPC_EXPORT_BYTES})",
                bytes.len()
            ))
        })?;
        let mut handle = [0u8; IPC_HANDLE_BYTES];
        handle.copy_from_slice(&b[..64]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut o = [0u8; 4];
        o.copy_from_slice(&b[80..84]);
        let e = IpcExport {
            handle,
            offset: u64_at(64),
            alloc_len: u64_at(72),
            ordinal: u32::from_le_bytes(o),
        };
        e.check(1)?;
        Ok(e)
    }

    /// Checks that `len` bytes from [`IpcExport::offset`] lie inside the allocation as the
    /// export describes it (not yet compared with the real mapping: `ipc_open` does that).
    pub fn check(&self, len: u64) -> Result<(), GpuError> {
        let end = self.offset.checked_add(len);
        if len == 0 || self.alloc_len == 0 || end.is_none_or(|e| e > self.alloc_len) {
            return Err(GpuError::InvalidArgument(format!(
                "IPC export: {len} bytes at offset {} are not inside an allocation of {} bytes",
                self.offset, self.alloc_len
            )));
        }
        Ok(())
    }

    /// The exported pointer in the importer's mapping: `base` (from `ipc_open`) plus
    /// [`IpcExport::offset`], after [`IpcExport::check`] for `len` bytes.
    pub fn locate(&self, base: DevicePtr, len: u64) -> Result<DevicePtr, GpuError> {
        self.check(len)?;
        base.offset(self.offset).ok_or_else(|| {
            GpuError::InvalidArgument(format!(
                "IPC export: offset {} overflows base {:#x}",
                self.offset, base.addr
            ))
        })
    }
}

/// Where `[addr, addr + len)` lies in the allocation `[base, base + alloc_len)`: the offset of
/// `addr`. What `ipc_export` checks before asking the runtime for a handle.
///
/// Errors ([`GpuError::InvalidArgument`]): `len` 0, overflow, or the range not inside the
/// allocation.
pub fn offset_in(addr: u64, len: u64, base: u64, alloc_len: u64) -> Result<u64, GpuError> {
    let bad = |why: &str| {
        GpuError::InvalidArgument(format!("IPC export of {len} bytes at {addr:#x}: {why}"))
    };
    if len == 0 {
        return Err(bad("empty range"));
    }
    let end = addr
        .checked_add(len)
        .ok_or_else(|| bad("range overflows"))?;
    let alloc_end = base
        .checked_add(alloc_len)
        .ok_or_else(|| bad("allocation overflows"))?;
    if addr < base || end > alloc_end {
        return Err(bad(&format!(
            "range is not inside one allocation ({base:#x}, {alloc_len} bytes)"
        )));
    }
    Ok(addr - base)
}

/// Checks the mapping `ipc_open` got against the export: the runtime's view of the opened
/// allocation (`mapped_base`, `mapped_len`) must start at `base` and hold at least
/// [`IpcExport::alloc_len`] bytes (an exporter may not claim more than it shared).
pub fn check_mapping(
    export: &IpcExport,
    base: u64,
    mapped_base: u64,
    mapped_len: u64,
) -> Result<(), GpuError> {
    if mapped_base != base || mapped_len < export.alloc_len {
        return Err(GpuError::InvalidArgument(format!(
            "IPC export claims {} bytes; the opened allocation is {mapped_len} bytes at \
             {mapped_base:#x} (mapped at {base:#x})",
            export.alloc_len
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IpcExport {
        let mut handle = [0u8; 64];
        for (i, b) in handle.iter_mut().enumerate() {
            *b = i as u8 ^ 0xa5;
        }
        IpcExport {
            handle,
            offset: 4096 + 7,
            alloc_len: 1 << 20,
            ordinal: 3,
        }
    }

    #[test]
    fn wire_form_round_trips() {
        let e = sample();
        let b = e.to_bytes();
        assert_eq!(b.len(), IPC_EXPORT_BYTES);
        assert_eq!(&b[64..72], &(4096u64 + 7).to_le_bytes());
        assert_eq!(IpcExport::from_bytes(&b).unwrap(), e);
    }

    #[test]
    fn malformed_wire_forms_are_refused() {
        let b = sample().to_bytes();
        assert!(IpcExport::from_bytes(&b[..83]).is_err());
        assert!(IpcExport::from_bytes(&[0u8; 85]).is_err());
        assert!(IpcExport::from_bytes(&[]).is_err());
        // Offset at the allocation's end, empty allocation, huge offset.
        let mut e = sample();
        e.offset = e.alloc_len;
        assert!(IpcExport::from_bytes(&e.to_bytes()).is_err());
        let mut e = sample();
        e.alloc_len = 0;
        e.offset = 0;
        assert!(IpcExport::from_bytes(&e.to_bytes()).is_err());
        let mut e = sample();
        e.offset = u64::MAX;
        e.alloc_len = u64::MAX;
        assert!(IpcExport::from_bytes(&e.to_bytes()).is_err());
    }

    #[test]
    fn locate_adds_the_offset_and_checks_the_length() {
        let e = sample();
        let base = DevicePtr {
            addr: 0x7000_0000,
            ordinal: 0,
        };
        assert_eq!(e.locate(base, 100).unwrap().addr, 0x7000_0000 + 4096 + 7);
        assert_eq!(e.locate(base, (1 << 20) - 4103).unwrap().addr, 0x7000_1007);
        assert!(e.locate(base, (1 << 20) - 4102).is_err());
        assert!(e.locate(base, 0).is_err());
        assert!(e.locate(base, u64::MAX).is_err());
        let top = DevicePtr {
            addr: u64::MAX - 10,
            ordinal: 0,
        };
        assert!(e.locate(top, 1).is_err());
    }

    #[test]
    fn offset_in_accepts_ranges_inside_and_refuses_the_rest() {
        let base = 0x1000_0000u64;
        assert_eq!(offset_in(base, 1 << 20, base, 1 << 20).unwrap(), 0);
        assert_eq!(offset_in(base + 4103, 1000, base, 1 << 20).unwrap(), 4103);
        assert_eq!(
            offset_in(base + (1 << 20) - 1, 1, base, 1 << 20).unwrap(),
            (1 << 20) - 1
        );
        // Crossing the end, before the start, empty, overflowing.
        assert!(offset_in(base + (1 << 20) - 10, 11, base, 1 << 20).is_err());
        assert!(offset_in(base - 1, 2, base, 1 << 20).is_err());
        assert!(offset_in(base, 0, base, 1 << 20).is_err());
        assert!(offset_in(u64::MAX - 1, 8, 0, u64::MAX).is_err());
        assert!(offset_in(base, 8, u64::MAX - 2, 8).is_err());
    }

    #[test]
    fn a_mapping_smaller_than_claimed_is_refused() {
        let e = sample();
        assert!(check_mapping(&e, 0x9000, 0x9000, 1 << 20).is_ok());
        assert!(check_mapping(&e, 0x9000, 0x9000, 2 << 20).is_ok());
        assert!(check_mapping(&e, 0x9000, 0x9000, (1 << 20) - 1).is_err());
        assert!(check_mapping(&e, 0x9000, 0x8000, 4 << 20).is_err());
    }
}
