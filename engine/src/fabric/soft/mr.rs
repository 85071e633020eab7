//! Protection domains and memory regions: who may touch which bytes.
//!
//! A [`ProtectionDomain`] owns a key table. Registering memory yields a [`MemoryRegion`] with
//! an `lkey` (local work requests name it) and an `rkey` (peers name it in RDMA WRITE / READ).
//! A responder resolves the rkey in *its QP's* domain and checks the access flag and the exact
//! bounds on every frame, under the region's *gate*:
//!
//! - fabric threads hold the gate shared while a frame's payload moves;
//! - [`ProtectionDomain::rekey`] and [`ProtectionDomain::deregister`] take it exclusively, so
//!   when they return no access with the old key is in progress and none can start (the
//!   issue-4 rule: after a failed GET the window is re-keyed so a late write cannot land);
//! - [`MemoryRegion::read`] / [`MemoryRegion::write`] take it exclusively too, so application
//!   reads never race a remote write (Rust's aliasing rules hold without trusting the peer).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, RwLockReadGuard};

use super::landing::Landing;
use super::raw::RegionMem;
use super::wr::{Access, WcStatus};

/// Why a region operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MrError {
    /// The range is outside the region.
    #[error("range outside the memory region")]
    Bounds,
    /// The region was deregistered.
    #[error("memory region deregistered")]
    Deregistered,
    /// The region belongs to another protection domain.
    #[error("memory region of another protection domain")]
    ForeignDomain,
    /// The allocation failed.
    #[error("could not allocate {0} bytes")]
    Alloc(usize),
    /// A dmabuf could not be registered: its size could not be read or it cannot be mapped
    /// (the errno; `ENODEV`: the exporter has no `mmap`, as CUDA's VRAM dmabufs).
    #[error("dmabuf cannot be mapped by the soft device: {}", std::io::Error::from_raw_os_error(*.0))]
    Dmabuf(i32),
}

impl MrError {
    /// The errno of a refused dmabuf registration.
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Dmabuf(e) => Some(*e),
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Gate {
    alive: bool,
    rkey: u32,
}

#[derive(Debug)]
pub(crate) struct MrInner {
    mem: RegionMem,
    pd: u64,
    lkey: u32,
    access: Access,
    gate: RwLock<Gate>,
    /// Set once the region tracks its landing ([`MemoryRegion::track_landing`]).
    landing: OnceLock<Landing>,
}

/// A granted access in progress: the gate is held shared and the range is checked.
pub(crate) struct Granted<'a> {
    pub(crate) mem: &'a RegionMem,
    /// Offset of the access inside the region.
    pub(crate) off: usize,
    _gate: RwLockReadGuard<'a, Gate>,
}

impl MrInner {
    fn gate(&self) -> RwLockReadGuard<'_, Gate> {
        self.gate.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The landing digest, when the region tracks one.
    pub(crate) fn landing(&self) -> Option<&Landing> {
        self.landing.get()
    }

    /// Something other than an in-order WRITE writes the region: its landing digest, if it
    /// tracks one, no longer vouches for its bytes.
    pub(crate) fn break_landing(&self) {
        if let Some(l) = self.landing() {
            l.invalidate();
        }
    }

    /// Offset of `addr` inside the region (the start of a granted access).
    pub(crate) fn offset_of(&self, addr: u64) -> Option<u64> {
        addr.checked_sub(self.mem.addr())
    }

    /// Offset of `addr..addr+len` inside the region, if it lies wholly inside.
    fn offset(&self, addr: u64, len: u64) -> Option<usize> {
        let off = self.offset_of(addr)?;
        let end = off.checked_add(len)?;
        if end > self.mem.len() as u64 {
            return None;
        }
        usize::try_from(off).ok()
    }

    /// A peer's access: rkey still current, access flag present, bounds exact.
    pub(crate) fn remote(
        &self,
        rkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Option<Granted<'_>> {
        let g = self.gate();
        if !g.alive || g.rkey != rkey || !self.access.contains(need) {
            return None;
        }
        let off = self.offset(addr, len)?;
        Some(Granted {
            mem: &self.mem,
            off,
            _gate: g,
        })
    }

    /// A local work request's access (by lkey); `LocalProtectionError` when refused.
    pub(crate) fn local(&self, addr: u64, len: u64, need: Access) -> Result<Granted<'_>, WcStatus> {
        let g = self.gate();
        if !g.alive || !self.access.contains(need) {
            return Err(WcStatus::LocalProtectionError);
        }
        let off = self
            .offset(addr, len)
            .ok_or(WcStatus::LocalProtectionError)?;
        Ok(Granted {
            mem: &self.mem,
            off,
            _gate: g,
        })
    }
}

/// A registered memory region. Cloning shares the registration.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    pub(crate) inner: Arc<MrInner>,
}

impl MemoryRegion {
    /// Start address (remote peers address bytes by `addr() + offset`).
    #[must_use]
    pub fn addr(&self) -> u64 {
        self.inner.mem.addr()
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.inner.mem.len() as u64
    }

    /// Whether the region is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.mem.len() == 0
    }

    /// Local key (names the region in local work requests).
    #[must_use]
    pub fn lkey(&self) -> u32 {
        self.inner.lkey
    }

    /// Current remote key (0 once deregistered).
    #[must_use]
    pub fn rkey(&self) -> u32 {
        let g = self.inner.gate();
        if g.alive { g.rkey } else { 0 }
    }

    /// Access rights.
    #[must_use]
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// Copies `dst.len()` bytes at offset `off` out of the region. Waits for fabric accesses
    /// in progress and holds new ones off while copying (see the module docs).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), MrError> {
        self.exclusive(off, |mem, off| mem.copy_out(off, dst))
    }

    /// Hands the bytes `off..off+len` to `f` in place, without a copy. Waits for fabric
    /// accesses in progress and holds new ones off until `f` returns, as [`MemoryRegion::read`]
    /// does while copying.
    pub fn inspect<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, MrError> {
        self.exclusive(off, |mem, off| mem.with_bytes(off, len, f))
    }

    /// The bytes `off..off+len` as a vector (see [`MemoryRegion::read`]).
    pub fn to_vec(&self, off: u64, len: usize) -> Result<Vec<u8>, MrError> {
        let mut v = vec![0u8; len];
        self.read(off, &mut v)?;
        Ok(v)
    }

    /// Copies `src` into the region at `off` (exclusive with fabric accesses). Breaks the
    /// landing digest, if the region tracks one.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), MrError> {
        self.inner.break_landing();
        self.exclusive(off, |mem, off| mem.copy_in(off, src))
    }

    /// Tracks the region's landing from now on and returns its digest: the CRC-64/NVME of the
    /// bytes peers WRITE into it in order from offset 0, computed as they land (`Landing`,
    /// `landing.rs`). Call it before granting the region to peers; calling it again returns
    /// the same digest.
    pub fn track_landing(&self) -> Landing {
        self.inner.landing.get_or_init(Landing::default).clone()
    }

    /// Runs `f` on the region's memory and `off` with the gate held exclusively (fabric
    /// accesses in progress finished, new ones held off until `f` returns); a deregistered
    /// region, or a range `f` finds outside it, is an error.
    fn exclusive<R>(
        &self,
        off: u64,
        f: impl FnOnce(&RegionMem, usize) -> std::io::Result<R>,
    ) -> Result<R, MrError> {
        let g = self
            .inner
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if !g.alive {
            return Err(MrError::Deregistered);
        }
        let off = usize::try_from(off).map_err(|_| MrError::Bounds)?;
        f(&self.inner.mem, off).map_err(|_| MrError::Bounds)
    }
}

#[derive(Debug, Default)]
struct Keys {
    by_rkey: HashMap<u32, Arc<MrInner>>,
    by_lkey: HashMap<u32, Arc<MrInner>>,
}

impl Keys {
    /// A random non-zero key unused in this domain.
    fn fresh(&self) -> u32 {
        loop {
            let k: u32 = rand::random();
            if k != 0 && !self.by_rkey.contains_key(&k) && !self.by_lkey.contains_key(&k) {
                return k;
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct PdInner {
    id: u64,
    keys: Mutex<Keys>,
}

static NEXT_PD: AtomicU64 = AtomicU64::new(1);

/// A protection domain: the key table regions and queue pairs share (verbs `ibv_pd`).
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl Default for ProtectionDomain {
    fn default() -> Self {
        Self::new()
    }
}

impl ProtectionDomain {
    /// An empty domain.
    #[must_use]
    pub fn new() -> Self {
        Self {
            inner: Arc::new(PdInner {
                id: NEXT_PD.fetch_add(1, Ordering::Relaxed),
                keys: Mutex::new(Keys::default()),
            }),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.inner
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, mem: RegionMem, access: Access) -> MemoryRegion {
        let mut keys = self.keys();
        let lkey = keys.fresh();
        // Distinct from lkey, so a leaked lkey is not also a valid rkey by accident.
        let rkey = loop {
            let k = keys.fresh();
            if k != lkey {
                break k;
            }
        };
        let inner = Arc::new(MrInner {
            mem,
            pd: self.inner.id,
            lkey,
            access,
            gate: RwLock::new(Gate { alive: true, rkey }),
            landing: OnceLock::new(),
        });
        keys.by_lkey.insert(lkey, Arc::clone(&inner));
        keys.by_rkey.insert(rkey, Arc::clone(&inner));
        MemoryRegion { inner }
    }

    /// Registers `len` zeroed, page-aligned bytes owned by the registration (freed when the
    /// last handle is gone after [`ProtectionDomain::deregister`]).
    pub fn register_owned(&self, len: usize, access: Access) -> Result<MemoryRegion, MrError> {
        let mem = RegionMem::alloc(len).map_err(|_| MrError::Alloc(len))?;
        Ok(self.insert(mem, access))
    }

    /// Invalidates `mr`'s rkey and gives it a new one, which is returned. When this returns, no
    /// access with the old key is in progress, and every later one is refused
    /// (`RemoteAccessError` at the peer).
    pub fn rekey(&self, mr: &MemoryRegion) -> Result<u32, MrError> {
        if mr.inner.pd != self.inner.id {
            return Err(MrError::ForeignDomain);
        }
        let mut keys = self.keys();
        let mut g = mr
            .inner
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if !g.alive {
            return Err(MrError::Deregistered);
        }
        keys.by_rkey.remove(&g.rkey);
        let rkey = keys.fresh();
        g.rkey = rkey;
        keys.by_rkey.insert(rkey, Arc::clone(&mr.inner));
        Ok(rkey)
    }

    /// Ends the registration: both keys stop resolving, accesses in progress finish first,
    /// later ones (remote or by posted work requests) fail. Idempotent.
    pub fn deregister(&self, mr: &MemoryRegion) -> Result<(), MrError> {
        if mr.inner.pd != self.inner.id {
            return Err(MrError::ForeignDomain);
        }
        let mut keys = self.keys();
        let mut g = mr
            .inner
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if g.alive {
            keys.by_rkey.remove(&g.rkey);
            keys.by_lkey.remove(&mr.inner.lkey);
            g.alive = false;
        }
        Ok(())
    }

    pub(crate) fn by_rkey(&self, rkey: u32) -> Option<Arc<MrInner>> {
        self.keys().by_rkey.get(&rkey).cloned()
    }

    pub(crate) fn by_lkey(&self, lkey: u32) -> Option<Arc<MrInner>> {
        self.keys().by_lkey.get(&lkey).cloned()
    }
}
