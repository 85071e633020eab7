//! [`SharedMemory`]: a sealed memfd mapped `MAP_SHARED`, memory two processes see at once —
//! the rings and host buffers a node daemon shares with its clients (`attach`), and the soft
//! fabric's host dmabufs (`fabric::soft::udmabuf`).
//!
//! An FFI module (`#[allow(unsafe_code)]`): `memfd_create`, `ftruncate`, `fcntl` seals,
//! `fstat`, `mmap`/`munmap`, and the byte copies and word view of the mapping; each block says
//! why it is sound.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A `MAP_SHARED` mapping of a sealed memfd: memory two processes see at once.
///
/// The creator seals the memfd against shrinking and growing before anyone maps it, and the
/// receiving side refuses a descriptor without those seals ([`SharedMemory::map_sealed`]): a
/// file that could be truncated under a mapping would turn later accesses into `SIGBUS`.
///
/// Its bytes may be written by the other process at any time. The word view
/// ([`ring_api::RingMemory`]) is made of atomics, which any concurrent writer is allowed to
/// change; byte copies ([`SharedMemory::copy_out`], [`SharedMemory::copy_in`]) are plain
/// memory copies whose result is whatever the bytes were during the copy.
#[derive(Debug)]
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by this value and shared memory is meant to be accessed from
// any thread; all access goes through atomics or explicit copies.
unsafe impl Send for SharedMemory {}
// SAFETY: as above: `&self` methods only read through atomics or copy bytes.
unsafe impl Sync for SharedMemory {}

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

impl SharedMemory {
    /// Creates a zeroed, sealed memfd of `len` bytes (rounded up to a page) and maps it.
    pub fn create(name: &str, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let len = len.next_multiple_of(4096);
        let cname = CString::new(name).unwrap_or_default();
        // SAFETY: `cname` is a valid C string alive for the call.
        let raw = cvt(unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        })?;
        // SAFETY: memfd_create returned a new fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: ftruncate takes no pointers.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), size) })?;
        // SAFETY: fcntl F_ADD_SEALS takes an int.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) })?;
        Self::map(fd, len)
    }

    /// Maps a descriptor received from another process, which must be a memfd sealed
    /// against shrinking and growing and at least `len` bytes long.
    ///
    /// # Errors
    /// `InvalidInput` naming what is wrong: not a memfd (no seals), not sealed, too short.
    pub fn map_sealed(fd: OwnedFd, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: fcntl F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the descriptor is not a memfd (it has no seals)",
            ));
        }
        if seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
            != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the memfd is not sealed against shrinking and growing",
            ));
        }
        // SAFETY: stat is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is exclusively borrowed for the call.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
        let size = usize::try_from(st.st_size).unwrap_or(0);
        if size < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the memfd holds {size} bytes, fewer than the {len} claimed"),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping chosen by the kernel; `fd` is a valid memfd of at
        // least `len` bytes sealed against shrinking, so every page stays backed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self { fd, ptr, len })
    }

    /// Bytes mapped.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false` (empty mappings are refused).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd (to send to the other process).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Start of the mapping (to register it with an engine, whose registration must not
    /// outlive this value).
    #[must_use]
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `out.len()` bytes at `offset` out of the mapping; `false` (nothing copied) when
    /// the range is outside it.
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) -> bool {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range lies inside the live mapping (checked above) and `out` is a
        // distinct, exclusively borrowed buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        true
    }

    /// Copies `data` into the mapping at `offset`; `false` (nothing copied) when the range is
    /// outside it.
    pub fn copy_in(&self, offset: usize, data: &[u8]) -> bool {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // SAFETY: the range lies inside the live, writable mapping (checked above); `data`
        // cannot overlap it mutably (it is a shared borrow of other memory or of this
        // mapping's bytes, which a byte copy tolerates).
        unsafe {
            std::ptr::copy(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len());
        }
        true
    }
}

impl ring_api::RingMemory for SharedMemory {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned (so 8-byte aligned), `len / 8` whole words lie
        // inside it, it lives as long as `self`, and AtomicU64 has the size and alignment of
        // u64; atomics may be written concurrently by the other process, which is exactly
        // what they are for.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping this value created and no reference into it
        // outlives `self` (the word view borrows `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
