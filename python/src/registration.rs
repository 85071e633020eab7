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
}

impl<'e> Registration<'e> {
    /// Registers `mem` (`len > 0`): host memory as it is, CUDA memory through the engine's
    /// GPU staging (`Engine::register_device`).
    pub fn new(engine: &'e Engine, mem: &Memory) -> Result<Self, String> {
        let len = usize::try_from(mem.len).map_err(|_| "buffer too large for this host")?;
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
        Ok(Self { engine, handle })
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.engine.deregister(self.handle, DEREGISTER_WAIT) {
            eprintln!("hipobj: deregistering a buffer: {e}");
        }
    }
}
