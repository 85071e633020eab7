//! Dmabufs of host memory, for running the dmabuf path on hosts without a GPU.
//!
//! A [`HostDmabuf`] is a sealed memfd (`F_SEAL_SHRINK`, as the kernel's udmabuf driver requires,
//! and `F_SEAL_GROW`) mapped into this process: a [`SharedMemory`]. [`HostDmabuf::export`] hands out an fd for a page-aligned slice of
//! it, either a real dmabuf made by `/dev/udmabuf` (`UDMABUF_CREATE`; kernels built with
//! `CONFIG_UDMABUF`) or a duplicate of the memfd itself, which the soft device maps the same
//! way (it only needs `mmap`). Tests use the mapping as a GPU runtime's fake VRAM and the export
//! as that runtime's `cuMemGetHandleForAddressRange`; see `gateway/tests/gpu_direct.rs`.
//!
//! FFI module: `ioctl` and `sysconf` (the memfd and its mapping are `memory::shared`'s); every
//! block has a `SAFETY` comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::memory::SharedMemory;

/// Where the udmabuf driver's device node is.
pub const UDMABUF_DEVICE: &str = "/dev/udmabuf";

/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)` (linux/udmabuf.h): direction
/// write (1 << 30), size 24 << 16, type `'u'` << 8, number 0x42.
const UDMABUF_CREATE: libc::c_ulong =
    (1 << 30) | (24 << 16) | ((b'u' as libc::c_ulong) << 8) | 0x42;
/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;

/// `struct udmabuf_create` (linux/udmabuf.h).
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

const _: () = assert!(std::mem::size_of::<UdmabufCreate>() == 24);

/// What [`HostDmabuf::export`] hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportKind {
    /// A dmabuf from `/dev/udmabuf` (needs the device node).
    Udmabuf,
    /// A duplicate of the memfd: not a dmabuf, but mapped by the soft device exactly as one.
    Memfd,
}

/// Whether this host can make udmabufs (the device node exists and opens read-write).
#[must_use]
pub fn udmabuf_available() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(UDMABUF_DEVICE)
        .is_ok()
}

/// A sealed memfd of `len` bytes mapped read-write into this process (unmapped on drop): a
/// [`SharedMemory`] exported as a dmabuf.
#[derive(Debug)]
pub struct HostDmabuf {
    shm: SharedMemory,
}

impl HostDmabuf {
    /// A zeroed memfd of `len` bytes (a multiple of the page size, > 0), sealed against
    /// shrinking and growing, and mapped.
    pub fn new(len: usize) -> io::Result<Self> {
        let page = usize::try_from(page_size()).unwrap_or(4096);
        if len == 0 || !len.is_multiple_of(page) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes is not a positive multiple of the {page}-byte page"),
            ));
        }
        Ok(Self {
            shm: SharedMemory::create("hipobj-host-dmabuf", len)?,
        })
    }

    /// The mapping's first byte.
    #[must_use]
    pub fn as_ptr(&self) -> *mut u8 {
        self.shm.as_mut_ptr()
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shm.len()
    }

    /// Whether it is empty (never: [`HostDmabuf::new`] refuses 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shm.is_empty()
    }

    /// An fd for bytes `offset..offset + len` (both page aligned): a udmabuf of exactly that
    /// slice (its byte 0 is `offset`), or a duplicate of the whole memfd (byte 0 is byte 0 of
    /// the buffer: the caller adds `offset` itself).
    pub fn export(&self, kind: ExportKind, offset: u64, len: u64) -> io::Result<OwnedFd> {
        let page = page_size();
        let end = offset.checked_add(len);
        if len == 0
            || !offset.is_multiple_of(page)
            || !len.is_multiple_of(page)
            || end.is_none_or(|e| e > self.shm.len() as u64)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("export of {len} bytes at {offset}: not page aligned inside the buffer"),
            ));
        }
        match kind {
            ExportKind::Memfd => self.shm.fd().try_clone_to_owned(),
            ExportKind::Udmabuf => {
                let dev = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(UDMABUF_DEVICE)?;
                let memfd = u32::try_from(self.shm.fd().as_raw_fd())
                    .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
                let arg = UdmabufCreate {
                    memfd,
                    flags: UDMABUF_FLAGS_CLOEXEC,
                    offset,
                    size: len,
                };
                // SAFETY: UDMABUF_CREATE reads one `struct udmabuf_create` (layout asserted
                // above) from the pointer, which is valid for the call; it returns a new fd.
                let fd =
                    unsafe { libc::ioctl(dev.as_fd().as_raw_fd(), UDMABUF_CREATE, &raw const arg) };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: the driver just created this fd for us; nothing else owns it.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }
        }
    }
}

/// The host page size.
fn page_size() -> u64 {
    // SAFETY: sysconf reads a process-wide constant; no pointers are involved.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn create_ioctl_number_matches_linux_udmabuf_h() {
        // linux/udmabuf.h: #define UDMABUF_CREATE _IOW('u', 0x42, struct udmabuf_create)
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
    }

    #[test]
    fn memfd_export_is_sealed_against_shrinking_and_refuses_bad_slices() {
        let b = HostDmabuf::new(4 * 4096).unwrap();
        let fd = b.export(ExportKind::Memfd, 0, 4096).unwrap();
        // SAFETY: fcntl on our own fd with no pointer argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        assert!(seals & libc::F_SEAL_SHRINK != 0, "seals {seals:#x}");
        assert!(File::from(fd).set_len(4096).is_err(), "shrinking must fail");
        assert!(b.export(ExportKind::Memfd, 100, 4096).is_err());
        assert!(b.export(ExportKind::Memfd, 0, 5 * 4096).is_err());
        assert!(b.export(ExportKind::Memfd, 0, 0).is_err());
        assert!(HostDmabuf::new(100).is_err());
    }

    #[test]
    #[ignore = "needs /dev/udmabuf (CONFIG_UDMABUF); run with --ignored where it exists"]
    fn udmabuf_export_is_a_dmabuf_of_the_slice() {
        let b = HostDmabuf::new(4 * 4096).unwrap();
        let fd = b.export(ExportKind::Udmabuf, 4096, 2 * 4096).unwrap();
        // SAFETY: lseek on our own fd.
        let size = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
        assert_eq!(size, 2 * 4096);
    }
}
