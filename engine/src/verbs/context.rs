//! `safe` layer, root of the ownership tree: the loaded library and an open device.
//!
//! `Context` (an `ibv_context`) is shared by `Arc`; every child (`ProtectionDomain`,
//! `CompletionQueue`, and through them `MemoryRegion` and `QueuePair`) holds an `Arc` to its
//! parent, so the device closes only after its last child is destroyed, whatever order the
//! caller drops things in.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

use super::error::{Error, Unavailable};
use super::gid::{self, GidEntry};
use super::port::PortInfo;
use super::result;
use super::sys::{self, VerbsApi};
use super::vendor::{self, Vendor, VendorProfile};

/// Loads libibverbs once per process; later calls return the same answer.
pub fn api() -> Result<Arc<VerbsApi>, Unavailable> {
    static API: OnceLock<Result<Arc<VerbsApi>, Unavailable>> = OnceLock::new();
    API.get_or_init(|| {
        VerbsApi::load().map(Arc::new).map_err(|e| match e {
            sys::LoadError::NotFound(m) => Unavailable::LibraryMissing(m),
            sys::LoadError::MissingSymbol(s) => Unavailable::MissingSymbol(s),
        })
    })
    .clone()
}

/// An open RDMA device (`ibv_context`).
#[derive(Debug)]
pub struct Context {
    api: Arc<VerbsApi>,
    /// INVARIANT: open until `Drop`; children hold `Arc<Context>`, so none outlives it.
    ctx: NonNull<sys::ibv_context>,
    name: String,
    vendor: Vendor,
    sys_root: PathBuf,
}

// SAFETY: libibverbs contexts are thread-safe (the library and providers lock internally);
// the pointer is only used through verbs calls.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens the device called `name`, or the first one listed when `None`.
    pub fn open(name: Option<&str>) -> Result<Arc<Self>, Error> {
        Self::open_with_sysfs(name, Path::new("/sys"))
    }

    /// As [`Context::open`], reading GID types and vendor IDs under `sys_root` (tests).
    pub fn open_with_sysfs(name: Option<&str>, sys_root: &Path) -> Result<Arc<Self>, Error> {
        let api = api()?;
        let opened = result::with_device_list(&api, |list| {
            let mut names = Vec::new();
            for d in list {
                // SAFETY: `d` is an entry of the live list.
                let p = unsafe { (api.ibv_get_device_name)(*d) };
                if p.is_null() {
                    continue;
                }
                // SAFETY: non-null, NUL-terminated name inside the device struct.
                let n = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
                if name.is_none_or(|want| want == n) {
                    // SAFETY: `d` is an entry of the live list (opening keeps no reference to
                    // the list itself).
                    let ctx = unsafe { result::open_device(&api, *d) };
                    return Ok(ctx
                        .map(|c| (c, n.clone()))
                        .map_err(|source| Error::OpenDevice { device: n, source }));
                }
                names.push(n);
            }
            Err(names)
        })?;
        let (ctx, name) = match opened {
            Ok(r) => r?,
            Err(names) if names.is_empty() => return Err(Unavailable::NoDevice.into()),
            Err(names) => {
                return Err(Error::NoSuchDevice {
                    name: name.unwrap_or_default().to_string(),
                    available: names.join(", "),
                });
            }
        };
        let vendor = vendor::identify_sysfs(sys_root, &name);
        Ok(Arc::new(Self {
            api,
            ctx,
            name,
            vendor,
            sys_root: sys_root.to_path_buf(),
        }))
    }

    pub(crate) fn api(&self) -> &VerbsApi {
        &self.api
    }

    pub(crate) fn raw(&self) -> NonNull<sys::ibv_context> {
        self.ctx
    }

    /// Kernel device name (`rxe0`, `mlx5_0`, `bnxt_re0`, `ionic_0`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The vendor row that applies (`vendor.rs`).
    #[must_use]
    pub fn vendor(&self) -> &'static VendorProfile {
        vendor::profile(self.vendor)
    }

    /// `ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<PortInfo, Error> {
        // SAFETY: `ctx` is open (INVARIANT).
        let a = unsafe { result::query_port(&self.api, self.ctx, port) }.map_err(|source| {
            Error::QueryPort {
                device: self.name.clone(),
                port,
                source,
            }
        })?;
        Ok(PortInfo::from_raw(port, &a))
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u8) -> Result<[u8; 16], Error> {
        // SAFETY: `ctx` is open (INVARIANT).
        unsafe { result::query_gid(&self.api, self.ctx, port, index) }.map_err(|source| {
            Error::QueryGid {
                device: self.name.clone(),
                port,
                index,
                source,
            }
        })
    }

    /// The source GID for RC on `port`, chosen from sysfs (`gid.rs` ranking) and confirmed
    /// with `ibv_query_gid` (the sysfs text and the verbs table must agree).
    pub fn choose_gid(&self, port: u8) -> Result<GidEntry, Error> {
        let dir = gid::port_dir(&self.sys_root, &self.name, port);
        let no_gid = || Error::NoGid {
            device: self.name.clone(),
            port,
            path: dir.display().to_string(),
        };
        let best = gid::choose_from_sysfs(&self.sys_root, &self.name, port)
            .map_err(|_| no_gid())?
            .ok_or_else(no_gid)?;
        let raw = self.query_gid(port, best.index)?;
        if raw != best.gid {
            return Err(no_gid());
        }
        Ok(best)
    }

    /// The source GID on `port` for a peer whose token names `peer` ([`gid::choose_for_peer`]:
    /// same family, same subnet first), confirmed with `ibv_query_gid`. `None`: [`Self::choose_gid`].
    pub fn choose_gid_for(&self, port: u8, peer: Option<&[u8; 16]>) -> Result<GidEntry, Error> {
        let Some(peer) = peer else {
            return self.choose_gid(port);
        };
        let dir = gid::port_dir(&self.sys_root, &self.name, port);
        let no_gid = || Error::NoGid {
            device: self.name.clone(),
            port,
            path: dir.display().to_string(),
        };
        let table = gid::read_table(&self.sys_root, &self.name, port).map_err(|_| no_gid())?;
        let pick = gid::choose_for_peer(&table, peer).map_err(|e| Error::NoGidForPeer {
            device: self.name.clone(),
            port,
            family: e.family,
        })?;
        let raw = self.query_gid(port, pick.index)?;
        if raw != pick.gid {
            return Err(no_gid());
        }
        Ok(pick)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc to this context, so none is left (INVARIANT).
        // A failure here cannot be acted upon.
        let _ = unsafe { result::close_device(&self.api, self.ctx) };
    }
}

/// Whether libibverbs loads here (says nothing about devices; see [`super::probe()`]).
#[cfg(feature = "test-support")]
#[must_use]
pub fn api_available() -> bool {
    api().is_ok()
}
