//! Registering a Python object's memory with the engine for the length of one call.
#![allow(unsafe_code)]

use std::time::Duration;

use engine::Engine;
use engine::gpu::DevicePtr;
use ring_api::BufHandle;

use crate::memory::{Memory, Place};

/// How long deregistration waits for aborted operations to let go of the memory.
const DEREGISTER_WAIT: Duration = Duration::from_secs(60);

/// A registration that ends when dropped.
pub struct Registration<'e> {
    engine: &'e Engine,
    /// The engine's handle.
    pub handle: BufHandle,
    /// Host memory of an engine attached to a daemon, which cannot reach this process's
    /// memory: the registration is a memfd both processes map, filled from the object's
    /// bytes when registered and copied back into them when dropped.
    /// (address, length) of the object's bytes.
    staged: Option<(usize, usize)>,
}

impl<'e> Registration<'e> {
    /// Registers `mem` (`len > 0`): host memory as it is (through a shared copy on an engine
    /// attached to a daemon), CUDA memory through the engine's GPU staging
    /// (`Engine::register_device`).
    pub fn new(engine: &'e Engine, mem: &Memory) -> Result<Self, String> {
        let len = usize::try_from(mem.len).map_err(|_| "buffer too large for this host")?;
        if mem.place == Place::Host && engine.is_attached() {
            return Self::staged(engine, mem.addr as usize, len);
        }
        let handle = match mem.place {
            // SAFETY: `mem` keeps the exporting Python object (and its DLPack capsule) alive,
            // and every caller holds `mem` until this registration is dropped, which
            // deregisters first; the Python API documents that the object must not be used
            // by other threads while a call that moves its bytes runs.
            Place::Host => unsafe { engine.register_raw(mem.addr as *mut u8, len) },
            // SAFETY: as above; the DLPack producer says `addr..addr+len` is memory of CUDA
            // device `ordinal`, which `register_device` checks with the runtime.
            Place::Cuda(ordinal) => unsafe {
                engine.register_device(
                    DevicePtr {
                        addr: mem.addr,
                        ordinal,
                    },
                    len,
                )
            },
        }
        .map_err(|e| format!("registering {len} bytes: {e}"))?;
        Ok(Self {
            engine,
            handle,
            staged: None,
        })
    }

    /// The attached-engine form of host memory: a shared memfd (`Engine::register_host`)
    /// holding a copy of `addr..addr + len`.
    fn staged(engine: &'e Engine, addr: usize, len: usize) -> Result<Self, String> {
        let handle = engine
            .register_host(len, engine::RegisterOptions::pageable())
            .map_err(|e| format!("registering {len} bytes: {e}"))?;
        // SAFETY: the caller holds the exporting Python object for this registration's life
        // (see `new`), so `addr..addr + len` is readable now.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        let reg = Self {
            engine,
            handle,
            staged: Some((addr, len)),
        };
        engine
            .copy_in(handle, 0, bytes)
            .map_err(|e| format!("filling {len} shared bytes: {e}"))?;
        Ok(reg)
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Some((addr, len)) = self.staged {
            // SAFETY: as in `staged`: the object is alive and, by the Python API's rule, no
            // other thread touches it while the call that registered it runs; the shared
            // bytes are copied back before the registration ends.
            let out = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            if let Err(e) = self.engine.copy_out(self.handle, 0, out) {
                eprintln!("hipobj: copying a shared buffer back: {e}");
            }
        }
        if let Err(e) = self.engine.deregister(self.handle, DEREGISTER_WAIT) {
            eprintln!("hipobj: deregistering a buffer: {e}");
        }
    }
}
