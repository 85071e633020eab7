//! Dmabufs of host memory, for running the dmabuf path on hosts without a GPU.
//!
//! A [`HostDmabuf`] is a sealed memfd (`F_SEAL_SHRINK`, as the kernel's udmabuf driver requires)
//! mapped into this process. [`HostDmabuf::export`] hands out an fd for a page-aligned slice of
//! it, either a real dmabuf made by `/dev/udmabuf` (`UDMABUF_CREATE`; kernels built with
//! `CONFIG_UDMABUF`) or a duplicate of the memfd itself, which the soft device maps the same
//! way (it only needs `mmap`). Tests use the mapping as a GPU runtime's fake VRAM and the export
//! as that runtime's `cuMemGetHandleForAddressRange`; see `gateway/tests/gpu_direct.rs`.
//!
//! FFI module: `memfd_create`, `fcntl`, `ftruncate`, `mmap`, `munmap`, `ioctl`; every block has a
//! `SAFETY` comment.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

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

/// A sealed memfd of `len` bytes mapped read-write into this process (unmapped on drop).
#[derive(Debug)]
pub struct HostDmabuf {
    memfd: OwnedFd,
    /// INVARIANT: a `MAP_SHARED` mapping of `len` bytes of `memfd`, live until drop.
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an fd and a shared mapping; neither is tied to a thread, and this type never forms a
// reference to the mapped bytes (users address them by `as_ptr`, under their own rules).
unsafe impl Send for HostDmabuf {}
// SAFETY: as above: `&HostDmabuf` exposes only the address, the length and fd duplication.
unsafe impl Sync for HostDmabuf {}

impl HostDmabuf {
    /// A zeroed memfd of `len` bytes (a multiple of the page size, > 0), sealed against
    /// shrinking, and mapped.
    pub fn new(len: usize) -> io::Result<Self> {
        let page = usize::try_from(page_size()).unwrap_or(4096);
        if len == 0 || !len.is_multiple_of(page) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes is not a positive multiple of the {page}-byte page"),
            ));
        }
        let name: &CStr = c"hipobj-host-dmabuf";
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let fd = unsafe {
            libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `memfd_create` just returned this fd; nothing else owns it.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        File::from(memfd.try_clone()?).set_len(len as u64)?;
        // SAFETY: fcntl on our own fd with an integer argument.
        let rc = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of our memfd at a kernel-chosen address; `len` bytes
        // exist (set above) and cannot shrink (sealed), so every mapped byte stays backed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { memfd, ptr, len })
    }

    /// The mapping's first byte.
    #[must_use]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: [`HostDmabuf::new`] refuses 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
            || end.is_none_or(|e| e > self.len as u64)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("export of {len} bytes at {offset}: not page aligned inside the buffer"),
            ));
        }
        match kind {
            ExportKind::Memfd => self.memfd.try_clone(),
            ExportKind::Udmabuf => {
                let dev = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(UDMABUF_DEVICE)?;
                let memfd = u32::try_from(self.memfd.as_raw_fd())
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

impl Drop for HostDmabuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once; users promised (by their own
        // contracts on the address) not to use it past the buffer's life.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
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
