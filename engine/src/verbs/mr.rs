//! Protection domains and memory regions (`ibv_pd`, `ibv_mr`), shaped like the soft fabric's:
//! `ProtectionDomain::register_owned(len, access)` gives a [`MemoryRegion`] with `addr`, `len`,
//! `lkey`, `rkey`, `read`, `write`, `to_vec`. One registration serves any number of sub-range
//! tokens ([`MemoryRegion::window`]).
//!
//! Registered bytes are device memory in the Rust sense: the NIC may write them at any time
//! a peer holds the rkey, so this module never hands out `&[u8]` into a region; `read`/`write`
//! copy through raw pointers. A copy racing a remote WRITE sees some mix of old and new bytes
//! (the protocol's completions say when bytes are final), never undefined behaviour in Rust
//! code that holds no reference to them.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ffi::c_void;
use std::ops::BitOr;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use super::context::Context;
use super::error::Error;
use super::result;
use super::sys;
use super::token::Window;
use crate::fabric::rc::wr;

/// Access rights as the C `IBV_ACCESS_*` bits (from the neutral [`wr::Access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(i32);

impl Access {
    /// Local reads only (sources of WRITE / SEND).
    pub const NONE: Access = Access(0);
    /// Local work requests may write it (READ destinations, RECV buffers).
    pub const LOCAL_WRITE: Access = Access(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE into it (needs `LOCAL_WRITE` too, a verbs rule).
    pub const REMOTE_WRITE: Access = Access(sys::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ from it.
    pub const REMOTE_READ: Access = Access(sys::IBV_ACCESS_REMOTE_READ);
    /// PCIe relaxed ordering (optional: ignored where unsupported).
    pub const RELAXED_ORDERING: Access = Access(sys::IBV_ACCESS_RELAXED_ORDERING);

    /// Whether every right in `other` is granted.
    #[must_use]
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The C bits.
    #[must_use]
    pub const fn bits(self) -> i32 {
        self.0
    }

    /// The bits `ibv_reg_mr` accepts: `REMOTE_WRITE` implies `LOCAL_WRITE` (else `EINVAL`).
    #[must_use]
    pub const fn for_registration(self) -> Access {
        if self.contains(Self::REMOTE_WRITE) {
            Access(self.0 | sys::IBV_ACCESS_LOCAL_WRITE)
        } else {
            self
        }
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl From<wr::Access> for Access {
    fn from(a: wr::Access) -> Self {
        let mut out = Access::NONE;
        for (s, v) in [
            (wr::Access::LOCAL_WRITE, Access::LOCAL_WRITE),
            (wr::Access::REMOTE_WRITE, Access::REMOTE_WRITE),
            (wr::Access::REMOTE_READ, Access::REMOTE_READ),
            (wr::Access::RELAXED_ORDERING, Access::RELAXED_ORDERING),
        ] {
            if a.contains(s) {
                out = out | v;
            }
        }
        out
    }
}

#[derive(Debug)]
struct PdInner {
    ctx: Arc<Context>,
    /// INVARIANT: allocated until `Drop`; MRs and QPs hold `ProtectionDomain` clones.
    pd: NonNull<sys::ibv_pd>,
}

// SAFETY: a verbs PD handle is used only through thread-safe verbs calls.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: no MR or QP is left (they hold clones of the domain).
        let _ = unsafe { result::dealloc_pd(self.ctx.api(), self.pd) };
    }
}

/// A protection domain (`ibv_pd`). Cloning shares it.
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

/// Memory a region owns: zeroed, page-aligned, freed after deregistration.
#[derive(Debug)]
struct Owned {
    ptr: NonNull<u8>,
    layout: Layout,
}

#[derive(Debug)]
struct MrInner {
    /// INVARIANT: registered until `Drop`, which deregisters before `owned` is freed.
    mr: NonNull<sys::ibv_mr>,
    /// Host view of the bytes: `None` for dmabuf registrations (device memory).
    host: Option<(NonNull<u8>, usize)>,
    owned: Option<Owned>,
    access: Access,
    pd: ProtectionDomain,
}

// SAFETY: the region is an address range plus a verbs handle; accesses go through raw-pointer
// copies (module docs), so sharing the handle between threads is sound.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}

impl Drop for MrInner {
    fn drop(&mut self) {
        // SAFETY: registered (INVARIANT); after this the device no longer touches the range.
        let _ = unsafe { result::dereg_mr(self.pd.ctx().api(), self.mr) };
        if let Some(o) = self.owned.take() {
            // SAFETY: allocated with this layout in `register_owned`, deregistered above.
            unsafe { dealloc(o.ptr.as_ptr(), o.layout) };
        }
    }
}

/// A registered memory region. Cloning shares the registration; the last clone deregisters.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    inner: Arc<MrInner>,
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<Self, Error> {
        // SAFETY: the context is open while `ctx` lives.
        let pd = unsafe { result::alloc_pd(ctx.api(), ctx.raw()) }.map_err(Error::AllocPd)?;
        Ok(Self {
            inner: Arc::new(PdInner {
                ctx: Arc::clone(ctx),
                pd,
            }),
        })
    }

    /// The device.
    #[must_use]
    pub fn ctx(&self) -> &Arc<Context> {
        &self.inner.ctx
    }

    pub(crate) fn raw(&self) -> NonNull<sys::ibv_pd> {
        self.inner.pd
    }

    /// `access` as registered on this device: `LOCAL_WRITE` added where `REMOTE_WRITE` needs
    /// it, and relaxed ordering where the vendor row asks for it (an optional flag).
    fn effective(&self, access: Access) -> Access {
        let a = access.for_registration();
        if self.inner.ctx.vendor().relaxed_ordering {
            a | Access::RELAXED_ORDERING
        } else {
            a
        }
    }

    fn wrap(
        &self,
        mr: NonNull<sys::ibv_mr>,
        host: Option<(NonNull<u8>, usize)>,
        owned: Option<Owned>,
        access: Access,
    ) -> MemoryRegion {
        MemoryRegion {
            inner: Arc::new(MrInner {
                mr,
                host,
                owned,
                access,
                pd: self.clone(),
            }),
        }
    }

    /// Registers `len` zeroed, page-aligned bytes owned by the registration.
    pub fn register_owned(&self, len: usize, access: Access) -> Result<MemoryRegion, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument("zero-length registration"));
        }
        let layout = Layout::from_size_align(len, 4096).map_err(|_| Error::Alloc(len))?;
        // SAFETY: non-zero size (checked above).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(Error::Alloc(len))?;
        let owned = Owned { ptr, layout };
        let access = self.effective(access);
        // SAFETY: the allocation lives until `MrInner::drop` deregisters it; no Rust reference
        // into it exists (module docs).
        let mr = unsafe {
            result::reg_mr(
                self.inner.ctx.api(),
                self.inner.pd,
                ptr.as_ptr().cast::<c_void>(),
                len,
                access.bits(),
            )
        };
        match mr {
            Ok(mr) => Ok(self.wrap(mr, Some((ptr, len)), Some(owned), access)),
            Err(source) => {
                // SAFETY: allocated above with `layout`, never registered.
                unsafe { dealloc(ptr.as_ptr(), layout) };
                Err(Error::RegMr {
                    len,
                    access: access.bits(),
                    source,
                })
            }
        }
    }

    /// Registers caller memory (`ibv_reg_mr`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid until every clone of the returned region is dropped, and
    /// no Rust reference may be held into it while a peer with the rkey can write it.
    pub unsafe fn register_raw(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, Error> {
        let access = self.effective(access);
        // SAFETY: caller contract.
        let mr = unsafe {
            result::reg_mr(
                self.inner.ctx.api(),
                self.inner.pd,
                ptr.as_ptr().cast::<c_void>(),
                len,
                access.bits(),
            )
        }
        .map_err(|source| Error::RegMr {
            len,
            access: access.bits(),
            source,
        })?;
        Ok(self.wrap(mr, Some((ptr, len)), None, access))
    }

    /// Registers `len` bytes at `offset` of a dmabuf (`ibv_reg_dmabuf_mr`), addressed by peers
    /// from `iova` (GPU memory exported by the GPU runtime). The fd may be closed after this
    /// returns (the kernel holds its own reference). [`Error::Unsupported`] when this
    /// libibverbs predates the call (rdma-core < 34).
    pub fn register_dmabuf(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion, Error> {
        let access = self.effective(access);
        let raw_fd = fd.as_raw_fd();
        // SAFETY: the PD is live; the kernel validates the fd and the range.
        let mr = unsafe {
            result::reg_dmabuf_mr(
                self.inner.ctx.api(),
                self.inner.pd,
                offset,
                len,
                iova,
                raw_fd,
                access.bits(),
            )
        }
        .map_err(|source| Error::RegDmabufMr {
            fd: raw_fd,
            offset,
            len,
            source,
        })?
        .ok_or(Error::Unsupported(
            "ibv_reg_dmabuf_mr (libibverbs older than rdma-core 34)",
        ))?;
        Ok(self.wrap(mr, None, None, access))
    }
}

impl MemoryRegion {
    fn raw(&self) -> &sys::ibv_mr {
        // SAFETY: registered while `self` lives (INVARIANT); libibverbs never changes these
        // fields after registration.
        unsafe { self.inner.mr.as_ref() }
    }

    /// Start address (peers address bytes as `addr() + offset`; the iova for dmabuf).
    #[must_use]
    pub fn addr(&self) -> u64 {
        self.raw().addr as u64
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.raw().length as u64
    }

    /// Whether the region is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local key.
    #[must_use]
    pub fn lkey(&self) -> u32 {
        self.raw().lkey
    }

    /// Remote key.
    #[must_use]
    pub fn rkey(&self) -> u32 {
        self.raw().rkey
    }

    /// Access rights as registered.
    #[must_use]
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The protection domain.
    #[must_use]
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    fn host_range(&self, off: u64, len: usize) -> Result<NonNull<u8>, Error> {
        let (ptr, size) = self
            .inner
            .host
            .ok_or(Error::Unsupported("host access to a dmabuf registration"))?;
        let off = usize::try_from(off).map_err(|_| Error::InvalidArgument("offset"))?;
        let end = off
            .checked_add(len)
            .ok_or(Error::InvalidArgument("range"))?;
        if end > size {
            return Err(Error::InvalidArgument("range outside the memory region"));
        }
        // SAFETY: `off <= size`, so the result stays inside (or one past) the allocation.
        Ok(unsafe { ptr.add(off) })
    }

    /// Copies `dst.len()` bytes at offset `off` out of the region.
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), Error> {
        let src = self.host_range(off, dst.len())?;
        // SAFETY: in bounds (checked); raw copy from device-visible memory (module docs);
        // `dst` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// The bytes `off..off+len` as a vector.
    pub fn to_vec(&self, off: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v)?;
        Ok(v)
    }

    /// Copies `src` into the region at `off`.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), Error> {
        let dst = self.host_range(off, src.len())?;
        // SAFETY: in bounds (checked); `src` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr(), src.len()) };
        Ok(())
    }

    /// A local buffer for a work request: `len` bytes at `off` (bounds-checked).
    pub fn sge(&self, off: u64, len: u32) -> Result<wr::Sge, Error> {
        let w = self.window(off, u64::from(len))?;
        Ok(wr::Sge {
            addr: w.addr,
            length: len,
            lkey: self.lkey(),
        })
    }

    /// A sub-range to advertise in a token (`addr`, `rkey`, `length`), bounds-checked.
    pub fn window(&self, off: u64, len: u64) -> Result<Window, Error> {
        let end = off
            .checked_add(len)
            .ok_or(Error::InvalidArgument("range"))?;
        if end > self.len() {
            return Err(Error::InvalidArgument("range outside the memory region"));
        }
        Ok(Window {
            addr: self.addr() + off,
            rkey: self.rkey(),
            length: len,
        })
    }

    /// The remote address of `off` in this region, as a peer would name it.
    #[must_use]
    pub fn remote(&self, off: u64) -> wr::RemoteAddr {
        wr::RemoteAddr {
            addr: self.addr().wrapping_add(off),
            rkey: self.rkey(),
        }
    }
}
