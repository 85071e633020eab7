//! The gateway itself: configuration, the builder, the head gate and the worker pool.
//!
//! Threads: one head gate (`gateway/src/gate.rs`) and a fixed pool of `threads` workers. The gate
//! accepts connections and collects request heads without blocking; a worker gets a
//! connection only with a complete head, serves that one request (body and response) and
//! gives a keep-alive connection back to the gate. Slow or idle clients therefore hold no
//! worker. `max_connections` bounds the connections held (waiting in the gate + served); at
//! capacity the gate evicts an idle or half-sent connection, and refuses with `503 SlowDown`
//! only when every connection is inside a request. A request being served reserves its read
//! buffer from `max_buffered_bytes` (as do in-memory XML bodies); when the budget is spent the
//! request gets 503 too.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use s3_lite::credentials::Credentials;
use s3_lite::http::Limits;

use crate::auth::Authenticator;
use crate::backend::Backend;
use crate::backend::local::LocalDir;
use crate::backend::upstream::{Upstream, UpstreamError};
use crate::conn;
use crate::error::ApiError;
use crate::gate::{Gate, GateHandle, Ready};
use crate::rdma::{GetDecline, NoFabric, RdmaTarget};

/// Runtime settings (all have defaults; see [`GatewayBuilder`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Worker threads = connections served at once.
    pub threads: usize,
    /// Connections accepted at once (served + queued); more get 503 SlowDown.
    pub max_connections: usize,
    /// Memory budget for connection buffers and in-memory request bodies.
    pub max_buffered_bytes: u64,
    /// Largest object accepted by PutObject / UploadPart.
    pub max_object_size: u64,
    /// Smallest part but the last of a multipart upload (S3: 5 MiB).
    pub min_part_size: u64,
    /// Region signatures must be scoped to.
    pub region: String,
    /// `Host` suffix for virtual-host addressing (`<bucket>.<suffix>`); path-style always works.
    pub virtual_host_suffix: Option<String>,
    /// Per read/write timeout inside a request.
    pub io_timeout: Duration,
    /// The whole request head must arrive within this time of its first byte (else 408).
    pub head_timeout: Duration,
    /// A request body must deliver at least this many bytes (or the rest of the body) in every
    /// `io_timeout` window, else the request fails and the connection closes.
    pub min_body_progress: u64,
    /// How long an idle connection (no byte of a request) is kept.
    pub idle_timeout: Duration,
    /// HTTP parsing limits.
    pub http_limits: Limits,
    /// How a GET with an RDMA token that cannot be honoured is answered.
    pub get_decline: GetDecline,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            threads: 32,
            max_connections: 256,
            max_buffered_bytes: 256 << 20,
            max_object_size: 5 << 30,
            min_part_size: 5 << 20,
            region: "us-east-1".into(),
            virtual_host_suffix: None,
            io_timeout: Duration::from_secs(30),
            head_timeout: Duration::from_secs(20),
            min_body_progress: 64 * 1024,
            idle_timeout: Duration::from_secs(60),
            http_limits: Limits::default(),
            get_decline: GetDecline::Body,
        }
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Neither `root_dir` nor `upstream` was given, or both.
    #[error("choose exactly one backend: root_dir(...) or upstream(...)")]
    Backend,
    /// No credentials: every request must be signed, so at least one key is needed.
    #[error("at least one access key / secret key pair is required")]
    NoCredentials,
    /// No listen address.
    #[error("no listen address")]
    NoListen,
    /// A limit is zero or inconsistent.
    #[error("invalid limit: {0}")]
    Limit(&'static str),
    /// The upstream URL or credentials are unusable.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// Binding, creating directories or spawning threads failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
    let context = context.into();
    move |source| StartError::Io { context, source }
}

enum BackendChoice {
    Dir(PathBuf),
    Upstream {
        url: String,
        credentials: Credentials,
        region: String,
    },
}

/// Entry point: `Gateway::builder()`.
#[derive(Debug, Clone, Copy)]
pub struct Gateway;

impl Gateway {
    /// A builder with default settings.
    pub fn builder() -> GatewayBuilder {
        GatewayBuilder {
            listen: None,
            backend: Vec::new(),
            credentials: Vec::new(),
            config: Config::default(),
            rdma: None,
            spool: None,
        }
    }
}

/// Configures and starts a gateway.
pub struct GatewayBuilder {
    listen: Option<String>,
    backend: Vec<BackendChoice>,
    credentials: Vec<Credentials>,
    config: Config,
    rdma: Option<Arc<dyn RdmaTarget>>,
    spool: Option<PathBuf>,
}

impl std::fmt::Debug for GatewayBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayBuilder")
            .field("listen", &self.listen)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl GatewayBuilder {
    /// Address to listen on, e.g. `127.0.0.1:0` (port 0: any free port; see
    /// [`RunningGateway::local_addr`]).
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = Some(addr.into());
        self
    }

    /// Serve a local directory (created if missing).
    pub fn root_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.backend.push(BackendChoice::Dir(path.into()));
        self
    }

    /// Bridge to an upstream S3 endpoint with its own credentials (signed for `region`).
    pub fn upstream(
        mut self,
        url: impl Into<String>,
        credentials: Credentials,
        region: impl Into<String>,
    ) -> Self {
        self.backend.push(BackendChoice::Upstream {
            url: url.into(),
            credentials,
            region: region.into(),
        });
        self
    }

    /// Adds an access key the gateway accepts (may be called several times).
    pub fn credentials(
        mut self,
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Self {
        self.credentials
            .push(Credentials::new(access_key, secret_key));
        self
    }

    /// Worker threads (connections served at once).
    pub fn threads(mut self, n: usize) -> Self {
        self.config.threads = n;
        self
    }

    /// Connections accepted at once (served + queued).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.config.max_connections = n;
        self
    }

    /// Memory budget for buffers.
    pub fn max_buffered_bytes(mut self, n: u64) -> Self {
        self.config.max_buffered_bytes = n;
        self
    }

    /// Largest single object / part.
    pub fn max_object_size(mut self, n: u64) -> Self {
        self.config.max_object_size = n;
        self
    }

    /// Smallest multipart part but the last.
    pub fn min_part_size(mut self, n: u64) -> Self {
        self.config.min_part_size = n;
        self
    }

    /// The region signatures must name (default `us-east-1`).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.config.region = region.into();
        self
    }

    /// Enables virtual-host addressing under `suffix` (`<bucket>.<suffix>`).
    pub fn virtual_host_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.config.virtual_host_suffix = Some(suffix.into());
        self
    }

    /// Keep-alive idle timeout.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.config.idle_timeout = d;
        self
    }

    /// Deadline for a whole request head, from its first byte (default 20 s).
    pub fn head_timeout(mut self, d: Duration) -> Self {
        self.config.head_timeout = d;
        self
    }

    /// Per read/write timeout inside a request, and the window of `min_body_progress`
    /// (default 30 s).
    pub fn io_timeout(mut self, d: Duration) -> Self {
        self.config.io_timeout = d;
        self
    }

    /// Bytes a request body must deliver per `io_timeout` window (default 64 KiB).
    pub fn min_body_progress(mut self, bytes: u64) -> Self {
        self.config.min_body_progress = bytes;
        self
    }

    /// How a GET with an RDMA token is declined.
    pub fn get_decline(mut self, mode: GetDecline) -> Self {
        self.config.get_decline = mode;
        self
    }

    /// The RDMA target (default [`NoFabric`]).
    pub fn rdma_target(mut self, target: Arc<dyn RdmaTarget>) -> Self {
        self.rdma = Some(target);
        self
    }

    /// Spool directory of the upstream bridge (default: the system temp directory).
    pub fn spool_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spool = Some(dir.into());
        self
    }

    /// Binds, spawns the threads and returns the running gateway.
    pub fn start(self) -> Result<RunningGateway, StartError> {
        let cfg = self.config;
        if cfg.threads == 0 || cfg.max_connections < cfg.threads {
            return Err(StartError::Limit(
                "threads must be ≥ 1 and max_connections ≥ threads",
            ));
        }
        if cfg.max_buffered_bytes < conn::IO_BUF as u64 {
            return Err(StartError::Limit(
                "max_buffered_bytes must hold at least one connection buffer (256 KiB)",
            ));
        }
        if self.credentials.is_empty() {
            return Err(StartError::NoCredentials);
        }
        let mut choices = self.backend;
        let choice = match (choices.pop(), choices.is_empty()) {
            (Some(c), true) => c,
            _ => return Err(StartError::Backend),
        };
        let backend: Arc<dyn Backend> = match choice {
            BackendChoice::Dir(p) => Arc::new(
                LocalDir::open(&p, cfg.min_part_size)
                    .map_err(io(format!("open {}", p.display())))?,
            ),
            BackendChoice::Upstream {
                url,
                credentials,
                region,
            } => {
                let spool = self.spool.unwrap_or_else(std::env::temp_dir);
                Arc::new(Upstream::new(&url, credentials, &region, spool)?)
            }
        };
        let listen = self.listen.ok_or(StartError::NoListen)?;
        let addrs: Vec<SocketAddr> = listen
            .to_socket_addrs()
            .map_err(io(format!("resolve {listen}")))?
            .collect();
        let listener = TcpListener::bind(&addrs[..]).map_err(io(format!("listen on {listen}")))?;
        let local_addr = listener.local_addr().map_err(io("local address"))?;
        let seed: u64 = rand::random();
        let shared = Arc::new(Shared {
            auth: Authenticator::new(self.credentials, cfg.region.clone()),
            backend,
            rdma: self.rdma.unwrap_or_else(|| Arc::new(NoFabric)),
            config: cfg,
            shutting_down: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            rejecting: Arc::new(AtomicUsize::new(0)),
            buffered: AtomicU64::new(0),
            next_id: AtomicU64::new(seed >> 16),
        });
        let (to_workers, from_gate) = crate::handoff::channel::<Ready>();
        let (gate, handle) =
            Gate::new(listener, shared.clone(), to_workers).map_err(io("set up the head gate"))?;
        let mut workers = Vec::with_capacity(shared.config.threads);
        for i in 0..shared.config.threads {
            let (shared, from_gate, handle) = (shared.clone(), from_gate.clone(), handle.clone());
            let h = std::thread::Builder::new()
                .name(format!("hipobj-gw-{i}"))
                .spawn(move || worker(&shared, &from_gate, &handle))
                .map_err(io("spawn worker"))?;
            workers.push(h);
        }
        let gate_thread = std::thread::Builder::new()
            .name("hipobj-gw-gate".into())
            .spawn(move || gate.run())
            .map_err(io("spawn the head gate"))?;
        Ok(RunningGateway {
            shared,
            local_addr,
            gate: Some(gate_thread),
            gate_handle: handle,
            workers,
        })
    }
}

/// State shared by the acceptor and the workers.
pub struct Shared {
    pub(crate) auth: Authenticator,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) rdma: Arc<dyn RdmaTarget>,
    pub(crate) config: Config,
    shutting_down: AtomicBool,
    /// Connections held: waiting in the gate, queued for a worker or being served.
    pub(crate) active: AtomicUsize,
    /// Refusals being answered right now (each on a short-lived thread, at most 16).
    rejecting: Arc<AtomicUsize>,
    buffered: AtomicU64,
    next_id: AtomicU64,
}

/// A reservation against `max_buffered_bytes`, released on drop.
pub struct Reservation<'a> {
    shared: &'a Shared,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.shared.buffered.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Shared {
    /// A fresh request id (16 upper-case hex digits).
    pub fn request_id(&self) -> String {
        format!("{:016X}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Whether `max_connections` are held.
    pub(crate) fn is_full(&self) -> bool {
        self.active.load(Ordering::Acquire) >= self.config.max_connections
    }

    pub(crate) fn connection_started(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn connection_ended(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }

    /// Answers a connection the gateway cannot hold (`503 SlowDown`) from a short-lived
    /// thread, at most 16 at once; beyond that the connection is just closed.
    pub(crate) fn reject(&self, stream: TcpStream) {
        if self.rejecting.fetch_add(1, Ordering::AcqRel) >= 16 {
            self.rejecting.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let (id, counter) = (self.request_id(), self.rejecting.clone());
        let spawned = std::thread::Builder::new()
            .name("hipobj-gw-reject".into())
            .spawn(move || {
                conn::reject(stream, &id);
                counter.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            self.rejecting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Reserves `bytes` of the buffer budget, or 503 SlowDown.
    pub fn reserve(&self, bytes: usize) -> Result<Reservation<'_>, ApiError> {
        self.reserve_within(bytes, self.config.max_buffered_bytes)
    }

    /// Reserves `bytes` for an optional buffer (a ranged GET held for its checksum) only
    /// while the budget stays at most half used, so such buffers never starve connections;
    /// `None`: do without it.
    pub(crate) fn reserve_optional(&self, bytes: usize) -> Option<Reservation<'_>> {
        self.reserve_within(bytes, self.config.max_buffered_bytes / 2)
            .ok()
    }

    fn reserve_within(&self, bytes: usize, limit: u64) -> Result<Reservation<'_>, ApiError> {
        let bytes = bytes as u64;
        let mut cur = self.buffered.load(Ordering::Acquire);
        loop {
            if cur + bytes > limit {
                return Err(ApiError::slow_down());
            }
            match self.buffered.compare_exchange_weak(
                cur,
                cur + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Reservation {
                        shared: self,
                        bytes,
                    });
                }
                Err(now) => cur = now,
            }
        }
    }
}

/// A worker: serves one request at a time for connections whose head the gate collected,
/// and gives keep-alive connections back to the gate.
fn worker(shared: &Arc<Shared>, from_gate: &crate::handoff::Receiver<Ready>, gate: &GateHandle) {
    loop {
        let Some(ready) = from_gate.recv() else {
            return;
        };
        let parked = match shared.reserve(conn::IO_BUF) {
            Ok(_buffer) if !shared.is_shutting_down() => conn::serve(shared, ready),
            Ok(_) => None,
            Err(e) => {
                conn::refuse(shared, ready, &e);
                None
            }
        };
        match parked {
            Some(p) => gate.park(p),
            None => shared.connection_ended(),
        }
    }
}

/// A running gateway. Dropping it shuts it down.
pub struct RunningGateway {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    gate: Option<JoinHandle<()>>,
    gate_handle: GateHandle,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningGateway")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl RunningGateway {
    /// The bound address (the real port when listening on port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The fabric RDMA requests are offered to (`none` today).
    pub fn fabric(&self) -> &'static str {
        self.shared.rdma.fabric()
    }

    /// Stops accepting, lets in-flight requests finish, closes idle connections and joins
    /// every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        self.gate_handle.wake();
        if let Some(a) = self.gate.take() {
            let _ = a.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }

    /// Blocks until the gateway stops (for `hipobj serve`).
    pub fn wait(mut self) {
        if let Some(a) = self.gate.take() {
            let _ = a.join();
        }
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        self.stop();
    }
}
