//! An [`Engine`](crate::Engine) attached to a node daemon (`hipobj daemon`): no workers of its
//! own, its queues' rings in memory it shares with the daemon, its registrations made by the
//! daemon.
//!
//! Requests over the socket are synchronous (one at a time per engine, under a lock); the data
//! path never touches the socket: submissions go into the shared submission ring, the daemon's
//! doorbell eventfd is written only when the daemon announced that it sleeps, and completions
//! come back in the shared completion ring.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ring_api::{BufHandle, CompletionWaiter, Doorbell, ObjectId, QueueLayout, RingMemory};
use s3_lite::s3::Endpoint;

use super::sys::{SeqPacket, SharedMemory, is_eventfd, wait_readable_or_hangup};
use super::wire::{DeviceExport, ErrorKind, MAX_REPLY, Reply, Request};
use crate::error::EngineError;
use crate::gpu::{DevicePtr, GpuRuntime, PointerKind};
use crate::memory::{BufferView, RegisterOptions};
use crate::queue::{EventFd, Queue, QueueOptions};

/// How long a request waits for the daemon's answer (a deregistration waits for operations
/// in flight, at most the timeout the caller gave, plus this).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Memory this process registered through the daemon.
#[derive(Debug)]
enum LocalBuf {
    /// A memfd both processes map, of which the first `len` bytes are registered (the
    /// mapping is rounded up to whole pages).
    Host { mem: Arc<SharedMemory>, len: usize },
    /// Device memory the daemon opened from our IPC export.
    Device,
}

/// The client side of an attached engine.
#[derive(Debug)]
pub(crate) struct Attached {
    path: PathBuf,
    conn: Arc<SeqPacket>,
    /// One request at a time.
    calls: Mutex<()>,
    endpoint: Endpoint,
    workers: u32,
    objects: Mutex<HashMap<(String, String), ObjectId>>,
    bufs: Mutex<HashMap<u32, LocalBuf>>,
    gpu: Option<Arc<dyn GpuRuntime>>,
    placement: crate::nic_plan::PlacementPlan,
}

fn daemon_err(path: &Path, what: impl std::fmt::Display) -> EngineError {
    EngineError::Daemon(format!("{}: {what}", path.display()))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Attached {
    /// Connects to the daemon at `path` and introduces this process as `name`.
    pub(crate) fn connect(
        path: &Path,
        name: &str,
        gpu: Option<Arc<dyn GpuRuntime>>,
    ) -> Result<Self, EngineError> {
        let conn = SeqPacket::connect(path).map_err(|e| {
            daemon_err(
                path,
                format!("cannot connect ({e}); is `hipobj daemon` running there?"),
            )
        })?;
        conn.set_read_timeout(Some(ANSWER_TIMEOUT))
            .map_err(|e| daemon_err(path, e))?;
        let mut attached = Self {
            path: path.to_owned(),
            conn: Arc::new(conn),
            calls: Mutex::new(()),
            endpoint: Endpoint::parse("http://127.0.0.1:1").map_err(EngineError::Endpoint)?,
            workers: 0,
            objects: Mutex::new(HashMap::new()),
            bufs: Mutex::new(HashMap::new()),
            gpu,
            placement: crate::nic_plan::PlacementPlan::detached(),
        };
        let name = name[..name.floor_char_boundary(super::wire::MAX_NAME)].to_owned();
        match attached.call(&Request::Hello { name }, &[])?.0 {
            Reply::Welcome {
                endpoint, workers, ..
            } => {
                attached.endpoint = Endpoint::parse(&endpoint).map_err(EngineError::Endpoint)?;
                attached.workers = workers;
                Ok(attached)
            }
            other => Err(daemon_err(path, format!("unexpected answer {other:?}"))),
        }
    }

    /// Sends one request (with `fds`) and reads its answer; an error answer becomes
    /// [`EngineError::Busy`] (a registration still in use) or [`EngineError::Daemon`].
    fn call(
        &self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<(Reply, Vec<OwnedFd>), EngineError> {
        // A request the daemon's decoder would refuse (a bucket or key over the wire's
        // limits) is refused here: sent, it would make the daemon drop this connection.
        let bytes = req.encode();
        if let Err(e) = Request::decode(&bytes) {
            return Err(daemon_err(&self.path, format!("request not sent: {e}")));
        }
        let _one = lock(&self.calls);
        self.conn
            .send(&bytes, fds)
            .map_err(|e| daemon_err(&self.path, format!("sending a request: {e}")))?;
        let mut buf = vec![0u8; MAX_REPLY];
        let (n, got) = self
            .conn
            .recv(&mut buf)
            .map_err(|e| daemon_err(&self.path, format!("reading the answer: {e}")))?;
        if n == 0 {
            return Err(daemon_err(&self.path, "the daemon closed the connection"));
        }
        let reply = Reply::decode(buf.get(..n).unwrap_or(&[]))
            .map_err(|e| daemon_err(&self.path, format!("malformed answer: {e}")))?;
        match reply {
            Reply::Error {
                kind: ErrorKind::Busy,
                ..
            } => Err(EngineError::Busy),
            Reply::Error { kind, message } => {
                Err(daemon_err(&self.path, format!("{message} ({kind:?})")))
            }
            reply => Ok((reply, got)),
        }
    }

    fn expect_buffer(&self, reply: Reply) -> Result<BufHandle, EngineError> {
        match reply {
            Reply::Buffer { id } => Ok(BufHandle(id)),
            other => Err(daemon_err(
                &self.path,
                format!("unexpected answer {other:?}"),
            )),
        }
    }

    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub(crate) fn worker_count(&self) -> usize {
        self.workers as usize
    }

    pub(crate) fn gpu(&self) -> Option<&Arc<dyn GpuRuntime>> {
        self.gpu.as_ref()
    }

    pub(crate) fn placement(&self) -> &crate::nic_plan::PlacementPlan {
        &self.placement
    }

    pub(crate) fn object(&self, bucket: &str, key: &str) -> Result<ObjectId, EngineError> {
        let name = (bucket.to_owned(), key.to_owned());
        if let Some(id) = lock(&self.objects).get(&name) {
            return Ok(*id);
        }
        let req = Request::Intern {
            bucket: name.0.clone(),
            key: name.1.clone(),
        };
        match self.call(&req, &[])?.0 {
            Reply::Object { id } => {
                lock(&self.objects).insert(name, ObjectId(id));
                Ok(ObjectId(id))
            }
            other => Err(daemon_err(
                &self.path,
                format!("unexpected answer {other:?}"),
            )),
        }
    }

    /// Host memory the daemon can reach: a sealed memfd both processes map. `pinned` is not
    /// applied here (the daemon's registration decides; see docs/daemon.md).
    pub(crate) fn register_host(
        &self,
        len: usize,
        _opts: RegisterOptions,
    ) -> Result<BufHandle, EngineError> {
        if len == 0 {
            return Err(EngineError::Config(
                "cannot register an empty buffer".into(),
            ));
        }
        let mem =
            SharedMemory::create("hipobj-buffer", len).map_err(|_| EngineError::Alloc { len })?;
        let reply = self
            .call(&Request::RegisterHost { len: len as u64 }, &[mem.fd()])?
            .0;
        let h = self.expect_buffer(reply)?;
        lock(&self.bufs).insert(
            h.0,
            LocalBuf::Host {
                mem: Arc::new(mem),
                len,
            },
        );
        Ok(h)
    }

    /// This process's mapping of host registration `handle` (the memfd it shares with the
    /// daemon); `None` for device memory or an unknown handle.
    pub(crate) fn host_base(&self, handle: BufHandle) -> Option<std::ptr::NonNull<u8>> {
        match lock(&self.bufs).get(&handle.0) {
            Some(LocalBuf::Host { mem, .. }) => std::ptr::NonNull::new(mem.as_mut_ptr()),
            _ => None,
        }
    }

    pub(crate) fn register_raw_refused() -> EngineError {
        EngineError::Unsupported(
            "an engine attached to a daemon registers host memory only through \
             Engine::register_host (a memfd the daemon maps; C: hipObjBufAlloc) and device \
             memory through Engine::register_device; arbitrary process memory cannot be shared",
        )
    }

    /// Device memory or the refusal of [`Attached::register_raw_refused`].
    pub(crate) fn register_memory(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<(BufHandle, crate::engine::MemoryKind), EngineError> {
        let addr = ptr as u64;
        let device = self.gpu.as_ref().and_then(|g| match g.pointer_kind(addr) {
            Ok(PointerKind::Device { ordinal }) => Some(ordinal),
            _ => None,
        });
        match device {
            Some(ordinal) => {
                let h = self.register_device(DevicePtr { addr, ordinal }, len)?;
                Ok((h, crate::engine::MemoryKind::Device { ordinal }))
            }
            None => Err(Self::register_raw_refused()),
        }
    }

    /// Exports the allocation holding `ptr..ptr+len` through the GPU runtime's IPC handles;
    /// the daemon opens it and stages into it.
    pub(crate) fn register_device(
        &self,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<BufHandle, EngineError> {
        let gpu = self.gpu.as_ref().ok_or(EngineError::Unsupported(
            "device memory: no GPU runtime in this process (EngineBuilder::gpu)",
        ))?;
        if len == 0 {
            return Err(EngineError::Config(
                "cannot register an empty buffer".into(),
            ));
        }
        let export = gpu.ipc_export(ptr, len).map_err(EngineError::Gpu)?;
        let req = Request::RegisterDevice(DeviceExport {
            handle: export.handle,
            offset: export.offset,
            alloc_len: export.alloc_len,
            len: len as u64,
            ordinal: export.ordinal,
        });
        let reply = self.call(&req, &[])?.0;
        let h = self.expect_buffer(reply)?;
        lock(&self.bufs).insert(h.0, LocalBuf::Device);
        Ok(h)
    }

    pub(crate) fn deregister(
        &self,
        handle: BufHandle,
        timeout: Duration,
    ) -> Result<(), EngineError> {
        if !lock(&self.bufs).contains_key(&handle.0) {
            return Err(EngineError::BadHandle(handle));
        }
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        match self.call(
            &Request::Deregister {
                buf: handle.0,
                timeout_ms,
            },
            &[],
        ) {
            Ok(_) => {
                lock(&self.bufs).remove(&handle.0);
                Ok(())
            }
            Err(EngineError::Busy) => Err(EngineError::BusyTimeout(timeout)),
            Err(e) => Err(e),
        }
    }

    /// The shared mapping of a host registration, checked to hold `offset..offset + len`
    /// within what was registered.
    fn host(
        &self,
        handle: BufHandle,
        offset: u64,
        len: usize,
    ) -> Result<(Arc<SharedMemory>, usize), EngineError> {
        let (mem, registered) = match lock(&self.bufs).get(&handle.0) {
            Some(LocalBuf::Host { mem, len }) => (Arc::clone(mem), *len),
            Some(LocalBuf::Device) => {
                return Err(EngineError::Unsupported(
                    "reading or writing device memory of an attached engine: copy it with the \
                     GPU runtime of this process",
                ));
            }
            None => return Err(EngineError::BadHandle(handle)),
        };
        let at = usize::try_from(offset)
            .ok()
            .filter(|at| at.checked_add(len).is_some_and(|end| end <= registered));
        at.map(|at| (mem, at)).ok_or(EngineError::OutOfBounds {
            offset,
            len: len as u64,
            size: registered as u64,
        })
    }

    /// Copies registered bytes out of the shared mapping. Unlike an in-process engine it
    /// cannot see the daemon's leases: bytes an operation in flight writes may be torn.
    pub(crate) fn read(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
    ) -> Result<BufferView, EngineError> {
        let n = usize::try_from(len).unwrap_or(usize::MAX);
        let (mem, at) = self.host(handle, offset, n)?;
        let mut out = vec![0u8; n];
        mem.copy_out(at, &mut out);
        Ok(BufferView::owned(out))
    }

    pub(crate) fn copy_out(
        &self,
        handle: BufHandle,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), EngineError> {
        let (mem, at) = self.host(handle, offset, out.len())?;
        mem.copy_out(at, out);
        Ok(())
    }

    pub(crate) fn copy_in(
        &self,
        handle: BufHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let (mem, at) = self.host(handle, offset, data.len())?;
        mem.copy_in(at, data);
        Ok(())
    }

    /// Opens a queue whose rings live in a memfd the daemon created and mapped.
    pub(crate) fn queue_with(&self, options: QueueOptions) -> Result<Queue, EngineError> {
        let depth = options.depth;
        if depth == 0 {
            return Err(EngineError::Config(
                "Engine::queue depth must be at least 1 (got 0)".to_owned(),
            ));
        }
        let sq = depth.checked_next_power_of_two().unwrap_or(u32::MAX);
        let layout = QueueLayout::new(sq, sq.saturating_mul(2), options.timestamps)
            .map_err(EngineError::Ring)?;
        let req = Request::OpenQueue {
            sq_entries: layout.sq_entries,
            cq_entries: layout.cq_entries,
            timestamps: layout.timestamps,
        };
        let (reply, fds) = self.call(&req, &[])?;
        match reply {
            Reply::Queue {
                sq_entries,
                cq_entries,
                timestamps,
            } if (sq_entries, cq_entries, timestamps)
                == (layout.sq_entries, layout.cq_entries, layout.timestamps) => {}
            other => {
                return Err(daemon_err(
                    &self.path,
                    format!("unexpected answer {other:?}"),
                ));
            }
        }
        let mut fds = fds.into_iter();
        let (Some(ring), Some(app_bell), Some(daemon_bell), None) =
            (fds.next(), fds.next(), fds.next(), fds.next())
        else {
            return Err(daemon_err(
                &self.path,
                "the queue answer lacked its descriptors",
            ));
        };
        if !is_eventfd(app_bell.as_fd()) || !is_eventfd(daemon_bell.as_fd()) {
            return Err(daemon_err(
                &self.path,
                "the queue's doorbells are not eventfds",
            ));
        }
        let mem = SharedMemory::map_sealed(ring, layout.bytes())
            .map_err(|e| daemon_err(&self.path, format!("mapping the queue's rings: {e}")))?;
        let ready = Arc::new(EventFd::from_owned(app_bell));
        let daemon: Arc<dyn Doorbell> = Arc::new(EventFd::from_owned(daemon_bell));
        let waiter = FdWaiter {
            bell: Arc::clone(&ready),
            conn: Arc::clone(&self.conn),
            gone: AtomicBool::new(false),
        };
        let clock = layout
            .timestamps
            .then_some(crate::sys::monotonic_ns as fn() -> u64);
        let app = ring_api::app_queue_in(
            Arc::new(mem) as Arc<dyn RingMemory>,
            layout,
            Some(Arc::clone(&daemon)),
            Box::new(waiter),
            clock,
        )
        .map_err(EngineError::Ring)?;
        Ok(Queue::new(app, ready, daemon))
    }
}

/// How an attached queue's application side sleeps: on its completion eventfd, watching the
/// daemon's socket so that a daemon that died ends the wait.
struct FdWaiter {
    bell: Arc<EventFd>,
    conn: Arc<SeqPacket>,
    gone: AtomicBool,
}

impl CompletionWaiter for FdWaiter {
    fn wait(&self, timeout: Option<Duration>) {
        if wait_readable_or_hangup(self.bell.as_fd(), self.conn.as_fd(), timeout) {
            self.gone.store(true, Ordering::Relaxed);
        }
        self.bell.drain();
    }

    fn peer_gone(&self) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return true;
        }
        let gone = self.conn.peer_hung_up();
        if gone {
            self.gone.store(true, Ordering::Relaxed);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attached engine over one end of a socket pair (the test plays the daemon).
    fn attached() -> (Attached, SeqPacket) {
        let (ours, daemon) = SeqPacket::pair().unwrap();
        ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let a = Attached {
            path: PathBuf::from("test.sock"),
            conn: Arc::new(ours),
            calls: Mutex::new(()),
            endpoint: Endpoint::parse("http://127.0.0.1:1").unwrap(),
            workers: 1,
            objects: Mutex::new(HashMap::new()),
            bufs: Mutex::new(HashMap::new()),
            gpu: None,
            placement: crate::PlacementPlan::detached(),
        };
        (a, daemon)
    }

    #[test]
    fn names_over_the_wire_limits_are_refused_without_sending() {
        let (a, daemon) = attached();
        daemon.set_nonblocking(true).unwrap();
        let err = a.object("b", &"k".repeat(5000)).unwrap_err();
        assert!(
            matches!(err, EngineError::Daemon(ref m) if m.contains("not sent")),
            "{err}"
        );
        let err = a.object(&"b".repeat(300), "k").unwrap_err();
        assert!(matches!(err, EngineError::Daemon(_)), "{err}");
        let mut buf = [0u8; MAX_REPLY];
        let got = daemon.recv(&mut buf);
        assert!(
            matches!(got, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the daemon received {got:?}"
        );
        // A name within the limits is sent, and the answer taken.
        let t = std::thread::spawn(move || {
            daemon.set_nonblocking(false).unwrap();
            let (n, _) = daemon.recv(&mut buf).unwrap();
            let req = Request::decode(&buf[..n]).unwrap();
            daemon.send(&Reply::Object { id: 7 }.encode(), &[]).unwrap();
            req
        });
        assert_eq!(a.object("b", "k").unwrap(), ObjectId(7));
        assert_eq!(
            t.join().unwrap(),
            Request::Intern {
                bucket: "b".into(),
                key: "k".into()
            }
        );
    }
}
