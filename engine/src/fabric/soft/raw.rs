//! Raw access to registered memory: the `unsafe` code of the soft fabric's data path (the only
//! other `unsafe` module is `udmabuf`, which makes dmabufs of host memory for tests).
//!
//! A [`RegionMem`] is a byte range that is either owned (a zeroed, page-aligned allocation made
//! here) or caller-supplied (`ProtectionDomain::register_raw`, whose `# Safety` contract makes
//! the range valid until it is deregistered). The fabric never forms a Rust reference to
//! registered bytes: payload moves between the socket and memory by `recv(2)` / `sendmsg(2)` on
//! raw pointers, so the kernel copies the bytes exactly once (no intermediate payload buffer)
//! and remote writes behave like DMA. The only Rust-level accesses are [`RegionMem::copy_out`],
//! [`RegionMem::copy_in`] and [`RegionMem::with_bytes`], called with the region's gate held
//! exclusively.
//!
//! INVARIANT (gate): every function here that touches bytes is called with the owning region's
//! gate held: shared for socket I/O (fabric threads), exclusive for `copy_in`/`copy_out`
//! (application accessors). Exclusive holders therefore never race a fabric access.
//!
//! A third kind of region is a *dmabuf mapping* ([`ProtectionDomain::register_dmabuf`]): the
//! soft device's stand-in for `ibv_reg_dmabuf_mr`. It `mmap`s the dmabuf (`MAP_SHARED`) and uses
//! the mapping as the region, so the peer's WRITEs land in the exporter's memory itself. That
//! works for dmabufs whose exporter implements `mmap` (udmabuf: memfd pages; a sealed memfd
//! behaves the same); CUDA's dmabufs of VRAM cannot be mapped and are refused with the errno.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use super::mr::{MemoryRegion, MrError, ProtectionDomain};
use super::wr::Access;

const PAGE: usize = 4096;

/// A registered byte range.
#[derive(Debug)]
pub(crate) struct RegionMem {
    /// INVARIANT: `ptr..ptr+len` is valid for reads and writes for the life of `self` (owned:
    /// allocated with `layout`; raw: the `register_raw` caller's contract, which lasts until
    /// deregistration, after which the gate refuses every access).
    ptr: NonNull<u8>,
    len: usize,
    layout: Option<Layout>,
    /// The address peers name byte 0 by (the MR's `addr`): `ptr` itself, except for a dmabuf
    /// mapping, whose iova the registration chose (as `ibv_reg_dmabuf_mr`'s `iova`).
    iova: u64,
    /// A dmabuf mapping: its page-aligned start and length, unmapped on drop.
    mapping: Option<(NonNull<u8>, usize)>,
}

// SAFETY: an address range, not thread-affine; concurrent access is governed by the gate
// (module INVARIANT), so moving the handle between threads is sound.
unsafe impl Send for RegionMem {}
// SAFETY: as above; `&RegionMem` only exposes bounds-checked accessors called under the gate.
unsafe impl Sync for RegionMem {}

impl RegionMem {
    /// Allocates `len` zeroed, page-aligned bytes.
    pub(crate) fn alloc(len: usize) -> io::Result<Self> {
        let layout = Layout::from_size_align(len.max(1), PAGE)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
        // SAFETY: `layout` has non-zero size (len.max(1)) and a power-of-two alignment.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(Self {
            ptr,
            len,
            layout: Some(layout),
            iova: raw as usize as u64,
            mapping: None,
        })
    }

    /// Wraps caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes until the region is deregistered
    /// (see `ProtectionDomain::register_raw`).
    pub(crate) unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Self {
        Self {
            ptr,
            len,
            layout: None,
            iova: ptr.as_ptr() as usize as u64,
            mapping: None,
        }
    }

    /// Maps `len` (> 0) bytes at `offset` of the dmabuf `fd` (`MAP_SHARED`, read and write),
    /// to be addressed by peers from `iova`.
    ///
    /// Refused, with nothing mapped: an empty or overflowing range, or one past the end of
    /// the dmabuf ([`MrError::Bounds`]: touching such a mapping would raise `SIGBUS`); an fd
    /// whose size cannot be read or which cannot be mapped ([`MrError::Dmabuf`] with the errno:
    /// `ENODEV` for exporters without `mmap`, such as CUDA's).
    ///
    /// The exporter must not shrink the buffer while it is registered (udmabuf requires its
    /// memfd to be sealed with `F_SEAL_SHRINK`; device exporters have fixed sizes).
    pub(crate) fn map_dmabuf(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<Self, MrError> {
        let end = offset
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or(MrError::Bounds)?;
        iova.checked_add(len as u64).ok_or(MrError::Bounds)?;
        // SAFETY: lseek on a caller-borrowed fd reads its size; no memory is involved. A dmabuf
        // answers SEEK_END with its size (the kernel's documented way to learn it); the file
        // position it sets is never used by the mapping.
        let size = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
        let size = u64::try_from(size).map_err(|_| MrError::Dmabuf(last_errno()))?;
        if end > size {
            return Err(MrError::Bounds);
        }
        let page = page_size();
        let lead = offset % page;
        let map_off = offset - lead;
        let map_len = usize::try_from(lead)
            .ok()
            .and_then(|l| l.checked_add(len))
            .ok_or(MrError::Bounds)?;
        let map_off = libc::off_t::try_from(map_off).map_err(|_| MrError::Bounds)?;
        // SAFETY: a fresh shared mapping chosen by the kernel (no fixed address, so nothing of
        // ours is replaced); the fd is borrowed for the call only (the mapping keeps its own
        // reference to the buffer).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                map_off,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(MrError::Dmabuf(last_errno()));
        }
        let base = NonNull::new(base.cast::<u8>()).ok_or(MrError::Dmabuf(libc::EINVAL))?;
        // `lead < page <= map_len`, so the caller's first byte lies inside the mapping.
        let ptr = NonNull::new(base.as_ptr().wrapping_add(map_len - len)).unwrap_or(base);
        Ok(Self {
            ptr,
            len,
            layout: None,
            iova,
            mapping: Some((base, map_len)),
        })
    }

    /// The start address (what verbs calls the MR's `addr`).
    pub(crate) fn addr(&self) -> u64 {
        self.iova
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `off` if `off..off+len` lies inside the region.
    fn span(&self, off: usize, len: usize) -> io::Result<usize> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(off),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside region",
            )),
        }
    }

    /// Copies region bytes at `off` into `dst`. Caller holds the gate exclusively.
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) -> io::Result<()> {
        self.with_bytes(off, dst.len(), |b| dst.copy_from_slice(b))
    }

    /// Hands region bytes `off..off+len` to `f` as a slice, without copying them. Caller holds
    /// the gate exclusively.
    pub(crate) fn with_bytes<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> io::Result<R> {
        let off = self.span(off, len)?;
        // SAFETY: in bounds of the live region (checked above, field INVARIANT). The exclusive
        // gate excludes every fabric access for as long as the slice lives (it does not
        // outlive `f`), so nothing writes these bytes meanwhile; the application reaches them
        // only through the region's accessors, which take the same gate.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) };
        Ok(f(bytes))
    }

    /// Copies `src` into the region at `off`. Caller holds the gate exclusively.
    pub(crate) fn copy_in(&self, off: usize, src: &[u8]) -> io::Result<()> {
        let off = self.span(off, src.len())?;
        // SAFETY: in bounds of the live region (checked above, field INVARIANT); the exclusive
        // gate excludes every fabric access; `ptr::copy` tolerates `src` overlapping the region.
        unsafe { std::ptr::copy(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) };
        Ok(())
    }

    /// One `recv(2)` from `sock` straight into `off..off+len`. Returns the byte count (0 at EOF).
    /// Caller holds the gate (shared) and has validated the range against the grant.
    pub(crate) fn recv_into(&self, sock: &TcpStream, off: usize, len: usize) -> io::Result<usize> {
        let off = self.span(off, len)?;
        // SAFETY: `ptr+off .. ptr+off+len` is inside the live region (checked above, field
        // INVARIANT); the kernel writes at most `len` bytes there and no Rust reference to
        // those bytes exists (module doc), so nothing observes a partially written value.
        let n = unsafe { libc::recv(sock.as_raw_fd(), self.ptr.as_ptr().add(off).cast(), len, 0) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// One `sendmsg(2)`: the unsent tail of `head`, then region bytes `off..off+len`, then
    /// `tail`. Returns the byte count written. Caller holds the gate (shared).
    pub(crate) fn send_from(
        &self,
        sock: &TcpStream,
        head: &[u8],
        off: usize,
        len: usize,
        tail: &[u8],
    ) -> io::Result<usize> {
        let off = self.span(off, len)?;
        // SAFETY: in bounds of the live region (checked above, field INVARIANT).
        let payload = unsafe { self.ptr.as_ptr().add(off) };
        send_iov(sock, head, payload, len, tail)
    }

    /// Feeds region bytes `off..off+len` to `crc` (a frame's checksum) and `landing` (the
    /// region's landing digest, `landing.rs`), each when given, in the same pass, through a
    /// bounce buffer, so no Rust reference to registered bytes is formed. Caller holds the gate
    /// (shared) and has validated the range against the grant.
    pub(crate) fn checksum_into(
        &self,
        mut crc: Option<&mut s3_lite::checksum::Crc32c>,
        mut landing: Option<&mut s3_lite::checksum::Crc64Nvme>,
        off: usize,
        len: usize,
    ) -> io::Result<()> {
        if crc.is_none() && landing.is_none() {
            return Ok(());
        }
        let off = self.span(off, len)?;
        let mut bounce = [0u8; 16 * 1024];
        let mut done = 0usize;
        while done < len {
            let n = (len - done).min(bounce.len());
            // SAFETY: `ptr+off+done .. +n` is inside the live region (span checked above,
            // field INVARIANT) and `bounce` is local memory of at least `n` bytes. Bytes have
            // no invalid values; a concurrent writer of the same bytes (a protocol violation
            // by a peer or the application, under the verbs rule) can only make the checksum
            // disagree, which fails the frame.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(off + done),
                    bounce.as_mut_ptr(),
                    n,
                );
            }
            let piece = bounce.get(..n).unwrap_or_default();
            if let Some(c) = crc.as_deref_mut() {
                c.update(piece);
            }
            if let Some(l) = landing.as_deref_mut() {
                l.update(piece);
            }
            done += n;
        }
        Ok(())
    }
}

/// `sendmsg` of `head`, `len` bytes at `payload`, then `tail` (MSG_NOSIGNAL: a closed peer
/// is an `EPIPE` error, never a signal). Empty pieces are left out.
fn send_iov(
    sock: &TcpStream,
    head: &[u8],
    payload: *const u8,
    len: usize,
    tail: &[u8],
) -> io::Result<usize> {
    let pieces = [
        (head.as_ptr(), head.len()),
        (payload, len),
        (tail.as_ptr(), tail.len()),
    ];
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 3];
    let mut used = 0usize;
    for (base, n) in pieces {
        if n > 0
            && let Some(slot) = iov.get_mut(used)
        {
            *slot = libc::iovec {
                iov_base: base.cast_mut().cast(),
                iov_len: n,
            };
            used += 1;
        }
    }
    if used == 0 {
        return Ok(0);
    }
    // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = used as _;
    // SAFETY: the iovecs describe readable memory for the call's duration (`head` and `tail`
    // are borrowed; `payload..payload+len` is inside a live region per `send_from`), and
    // sendmsg only reads.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// One non-blocking `send(2)` of `bytes` (`MSG_DONTWAIT | MSG_NOSIGNAL`): writes what the
/// socket's buffer takes now (possibly nothing: `WouldBlock`), never waits.
pub(crate) fn send_now(sock: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is a live borrowed slice for the call's duration and send only reads it.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// The raw-memory constructor lives here so that every `unsafe` of the fabric is in this module.
impl ProtectionDomain {
    /// Registers caller memory `ptr..ptr+len` (e.g. an engine registration).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes from this call until
    /// [`ProtectionDomain::deregister`] of the returned region has returned (the domain keeps
    /// the registration alive until then, so dropping handles does not end it). While a range
    /// is granted to a peer (its rkey advertised) or covered by a posted work request, the
    /// caller must not access those bytes except through [`MemoryRegion::read`] /
    /// [`MemoryRegion::write`]: the fabric writes them from other threads (the verbs rule).
    pub unsafe fn register_raw(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> MemoryRegion {
        // SAFETY: the caller's contract above is exactly `RegionMem::from_raw`'s.
        let mem = unsafe { RegionMem::from_raw(ptr, len) };
        self.insert(mem, access)
    }
}

impl ProtectionDomain {
    /// Registers `len` bytes at `offset` of the dmabuf `fd`, addressed by peers from `iova`:
    /// the soft device's `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`. The dmabuf is
    /// mapped (`MAP_SHARED`) and the mapping is the region, so remote WRITEs land in the
    /// exporter's memory. The fd may be closed after this returns (the mapping holds the
    /// buffer). Errors: see `RegionMem::map_dmabuf` ([`MrError::Bounds`], [`MrError::Dmabuf`]).
    pub fn register_dmabuf(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion, MrError> {
        let mem = RegionMem::map_dmabuf(fd, offset, len, iova)?;
        Ok(self.insert(mem, access))
    }
}

/// The calling thread's `errno` after a failed call.
fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The host page size (mmap offsets are multiples of it).
fn page_size() -> u64 {
    // SAFETY: sysconf reads a process-wide constant; no pointers are involved.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(PAGE as u64)
}

impl Drop for RegionMem {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated by `alloc_zeroed` with exactly this layout, freed once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
        if let Some((base, len)) = self.mapping {
            // SAFETY: mapped by `map_dmabuf` with exactly this start and length, unmapped
            // once; the region is being dropped, so no access through it remains (every
            // accessor borrows the region).
            unsafe { libc::munmap(base.as_ptr().cast(), len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_is_zeroed_aligned_and_bounds_checked() {
        let m = RegionMem::alloc(10_000).unwrap();
        assert_eq!(m.addr() % PAGE as u64, 0);
        let mut out = vec![1u8; 10_000];
        m.copy_out(0, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        m.copy_in(9_998, b"ab").unwrap();
        assert!(m.copy_in(9_999, b"ab").is_err());
        assert!(m.copy_out(usize::MAX, &mut [0u8; 1]).is_err());
        let mut two = [0u8; 2];
        m.copy_out(9_998, &mut two).unwrap();
        assert_eq!(&two, b"ab");
    }
}
