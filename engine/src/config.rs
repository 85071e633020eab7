//! Engine configuration: [`EngineBuilder`], [`Placement`] and [`RetryPolicy`].

use std::time::Duration;

use s3_lite::credentials::Credentials;

/// Keep-alive connections an engine opens to its endpoint by default, over all its workers
/// (each worker gets an equal share, at least 2; [`EngineBuilder::connections_per_worker`]
/// overrides it). Our gateway holds 256 connections by default and evicts idle ones beyond
/// that; 16 workers × the former 32 per worker could open 512.
pub const DEFAULT_CONNECTIONS: usize = 64;

/// Where worker threads run.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// From the sysfs topology (`numa::Topology::worker_plan`): for every RDMA NIC (each sits
    /// on one NUMA node), or every NUMA node on a host without RDMA NICs, one worker per core
    /// of that NIC's node the process may run on (its scheduler affinity: `taskset`, cgroup
    /// cpusets), at most [`EngineBuilder::workers_per_nic`] (default
    /// [`crate::DEFAULT_WORKERS_PER_NIC`]) each, pinned. Each worker keeps the NIC it serves
    /// ([`crate::WorkerInfo::nic`]). Without a readable sysfs: one worker per allowed core
    /// (same cap); without that either, one unpinned worker.
    #[default]
    Auto,
    /// This many workers, unpinned.
    Workers(usize),
    /// One worker per listed core, pinned to it.
    Cores(Vec<usize>),
}

/// Retries of failed attempts: capped exponential backoff with full jitter.
///
/// Retried: HTTP 5xx, 429 and 503 SlowDown, connection failures (refused, reset, EOF before
/// the response ended) and per-attempt timeouts. Never retried: 4xx other than 429, integrity
/// failures (a wrong Content-Range is a server bug, not a transient), local errors. Every
/// operation kind may be retried unless its entry sets `NO_RETRY`; see `docs/engine.md` for
/// why PUT of registered memory and the multipart steps are safe to repeat.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, including the first (1 = never retry).
    pub max_attempts: u32,
    /// Backoff before the first retry.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Full jitter: sleep a uniform random time in `0..=backoff` (AWS architecture blog
    /// "Exponential Backoff And Jitter"), so retries of many operations do not synchronize.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            base: Duration::from_millis(25),
            cap: Duration::from_secs(2),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy with the given attempts and backoff bounds.
    #[must_use]
    pub fn new(max_attempts: u32, base: Duration, cap: Duration) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            base,
            cap,
            jitter: true,
        }
    }

    /// Never retry.
    #[must_use]
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The same policy with jitter switched on or off.
    #[must_use]
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Backoff before retry number `retry` (1 = first retry), before jitter:
    /// `min(cap, base * 2^(retry-1))`.
    #[must_use]
    pub fn backoff(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(31);
        self.base.saturating_mul(1u32 << shift).min(self.cap)
    }

    /// [`RetryPolicy::backoff`] with full jitter applied using `unit` in `[0, 1)`.
    #[must_use]
    pub fn jittered(&self, retry: u32, unit: f64) -> Duration {
        let b = self.backoff(retry);
        if self.jitter {
            b.mul_f64(unit.clamp(0.0, 1.0))
        } else {
            b
        }
    }
}

/// Builder for [`crate::Engine`]; see [`crate::Engine::builder`].
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    pub(crate) endpoint_url: Option<String>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) region: Option<String>,
    pub(crate) placement: Placement,
    pub(crate) workers_per_nic: usize,
    /// `None`: [`DEFAULT_CONNECTIONS`] shared out over the workers.
    pub(crate) connections_per_worker: Option<usize>,
    pub(crate) retry: RetryPolicy,
    pub(crate) default_deadline: Option<Duration>,
    pub(crate) attempt_timeout: Duration,
    pub(crate) spin: Duration,
    pub(crate) read_buffer: usize,
    pub(crate) quickack: bool,
    pub(crate) fabric: Fabric,
    pub(crate) dialect: crate::fabric::rdma::Dialect,
    pub(crate) verbs_device: Option<String>,
    /// NICs named by [`EngineBuilder::nics`] (empty: every NIC).
    pub(crate) nics: Vec<String>,
    /// Where the topology is read (`/`).
    pub(crate) sysfs_root: std::path::PathBuf,
    pub(crate) dc_provider: Option<std::sync::Arc<dyn crate::fabric::rdma::DcTokenProvider>>,
    pub(crate) gpu: Option<std::sync::Arc<dyn crate::gpu::GpuRuntime>>,
    pub(crate) gpu_coalesce_limit: u64,
    pub(crate) gpu_poll_spin: Duration,
    pub(crate) gpu_bounce_bytes: u64,
    pub(crate) gpu_bounce_segment_bytes: u64,
    pub(crate) gpu_direct: crate::gpu::GpuDirect,
    pub(crate) stripe: crate::stripe::StripeConfig,
    pub(crate) ca_bundle: Option<std::path::PathBuf>,
    pub(crate) insecure_skip_tls_verify: bool,
    /// Where to attach: `Some(Some(path))` a daemon's socket, `Some(None)` in process
    /// whatever `HIPOBJ_DAEMON` says, `None` as `HIPOBJ_DAEMON` says.
    pub(crate) daemon: Option<Option<std::path::PathBuf>>,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        Self {
            endpoint_url: None,
            credentials: None,
            region: None,
            placement: Placement::Auto,
            workers_per_nic: crate::placement::DEFAULT_WORKERS_PER_NIC,
            connections_per_worker: None,
            retry: RetryPolicy::default(),
            default_deadline: Some(Duration::from_secs(60)),
            attempt_timeout: Duration::from_secs(20),
            spin: Duration::ZERO,
            read_buffer: 256 * 1024,
            quickack: true,
            fabric: Fabric::default(),
            dialect: crate::fabric::rdma::Dialect::default(),
            verbs_device: None,
            nics: Vec::new(),
            sysfs_root: std::path::PathBuf::from("/"),
            dc_provider: None,
            gpu: None,
            daemon: None,
            gpu_coalesce_limit: crate::gpu::DEFAULT_COALESCE_LIMIT,
            gpu_poll_spin: crate::gpu::DEFAULT_POLL_SPIN,
            gpu_bounce_bytes: crate::gpu::DEFAULT_BOUNCE_BYTES,
            gpu_bounce_segment_bytes: crate::gpu::BOUNCE_SEGMENT_BYTES,
            gpu_direct: crate::gpu::GpuDirect::default(),
            stripe: crate::stripe::StripeConfig::default(),
            ca_bundle: None,
            insecure_skip_tls_verify: false,
        }
    }
}

impl EngineBuilder {
    /// `http://host:port` or `https://host:port` of the S3 endpoint (default: resolved like the
    /// AWS CLI does, `AWS_ENDPOINT_URL` or the profile's `endpoint_url`). An `https://`
    /// endpoint's certificate is verified (see [`EngineBuilder::ca_bundle`]).
    #[must_use]
    pub fn endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Static credentials (default: environment, then `~/.aws` profiles).
    #[must_use]
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Signing region (default: `AWS_REGION`, the profile, then `us-east-1`).
    #[must_use]
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Where workers run (default [`Placement::Auto`]).
    #[must_use]
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// At most this many workers per RDMA NIC (or per NUMA node on a host without one) under
    /// [`Placement::Auto`]; default [`crate::DEFAULT_WORKERS_PER_NIC`]. Auto never starts more
    /// workers than the NIC's node has cores the process may run on. `0` is refused at build.
    /// Ignored by [`Placement::Workers`] and [`Placement::Cores`].
    #[must_use]
    pub fn workers_per_nic(mut self, n: usize) -> Self {
        self.workers_per_nic = n;
        self
    }

    /// Keep-alive connections each worker may open to the endpoint. This bounds the
    /// operations a worker has on the wire at once. Default: [`DEFAULT_CONNECTIONS`] for the
    /// whole engine, shared out over its workers (at least 2 each), so more workers do not
    /// mean more connections than a server expects from one client.
    #[must_use]
    pub fn connections_per_worker(mut self, n: usize) -> Self {
        self.connections_per_worker = Some(n);
        self
    }

    /// Retry policy (default [`RetryPolicy::default`]).
    #[must_use]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Deadline of operations whose entry names none (default 60 s; `None`: no deadline).
    #[must_use]
    pub fn default_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.default_deadline = deadline;
        self
    }

    /// Longest a single attempt may take before it is abandoned and retried (default 20 s).
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// How long a worker with operations in flight keeps polling without sleeping before it
    /// blocks in `epoll_wait` (default 0: block at once, the lowest CPU per operation; raise
    /// it to trade CPU for latency on dedicated cores).
    #[must_use]
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Per-connection socket read buffer in bytes (default 256 KiB, minimum 4 KiB).
    #[must_use]
    pub fn read_buffer(mut self, bytes: usize) -> Self {
        self.read_buffer = bytes;
        self
    }

    /// Which data path carries payloads: `Fabric::Auto` (default: RDMA when the endpoint pairs,
    /// learned once per worker and endpoint, pairing off the worker thread; verbs when this host
    /// has an RDMA device, else the soft fabric), `Fabric::Soft` (RDMA over the soft fabric,
    /// per-request HTTP fallback), `Fabric::Verbs` (RDMA over libibverbs, see
    /// [`EngineBuilder::verbs_device`]; `build` fails with
    /// [`crate::EngineError::VerbsUnavailable`] when no verbs device opens) or `Fabric::Http`
    /// (payloads in the HTTP body only).
    #[must_use]
    pub fn fabric(mut self, fabric: Fabric) -> Self {
        self.fabric = fabric;
        self
    }

    /// One RDMA device for `Fabric::Verbs` / `Fabric::Auto` (a libibverbs device name such as
    /// `mlx5_0`, `bnxt_re0`, `ionic_0` or `rxe0`). When the host's topology lists it, this is
    /// `nics([name])` (workers only for that NIC); when it does not, every worker opens `name`
    /// through libibverbs; with `Fabric::Verbs`, a name libibverbs does not know either fails
    /// `build` with [`crate::EngineError::VerbsUnavailable`] (`Fabric::Auto` falls back
    /// quietly). [`EngineBuilder::nics`] wins when both are set.
    #[must_use]
    pub fn verbs_device(mut self, name: impl Into<String>) -> Self {
        self.verbs_device = Some(name.into());
        self
    }

    /// Restricts the engine to these RDMA NICs, each named by device name (`mlx5_0`, `rxe0`,
    /// `bnxt_re0`, `ionic_0`), netdev (`ibp24s0`) or PCI address (`0000:17:00.0`, `17:00.0`).
    /// `Placement::Auto` then plans workers only for them; `Workers(n)` / `Cores(..)` give
    /// their workers these NICs in turn. Each worker opens its own NIC's verbs device (one
    /// context per NIC, shared by that NIC's workers). Default (empty): every NIC of the host.
    ///
    /// `build` fails with [`crate::EngineError::NicNotFound`] (naming the hint and listing
    /// the NICs present) when one names no NIC of this host, and with
    /// [`crate::EngineError::Config`] for an empty name.
    #[must_use]
    pub fn nics<I, S>(mut self, nics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nics = nics.into_iter().map(Into::into).collect();
        self
    }

    /// Reads the host topology (GPUs, NICs, NUMA nodes) below this directory instead of `/`:
    /// a captured sysfs tree (`hipobj topo --sysfs-root`), for tests and placement previews.
    #[must_use]
    pub fn sysfs_root(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.sysfs_root = root.into();
        self
    }

    /// Which RDMA dialect the client speaks when `fabric` is not `Http`: `Dialect::Auto`
    /// (default: negotiates `rc-persistent`, then `hipobj-rc-v2`, then cuObject when a
    /// descriptor provider is set, then HTTP, learning each refusal once for the engine's
    /// life), `Dialect::RcPersistent` (pairs once, one round trip per op), `Dialect::RcV2`
    /// (`hipobj-rc-v2`: PREPARE / READY per op, as the Ceph fork, versitygw and elbencho serve;
    /// its two round trips run on an exchange thread, bounded by the op's deadline),
    /// `Dialect::CuObject` or `Dialect::Http`. A server answering PREPARE with `501` gets that
    /// op over HTTP (and, under `Fabric::Auto` or `Dialect::Auto`, every later one). Each
    /// completion names the dialect that carried it (`Cqe::dialect`).
    #[must_use]
    pub fn dialect(mut self, dialect: crate::fabric::rdma::Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// Mints the cuObject DC descriptors `Dialect::CuObject` sends (on real hardware, a
    /// wrapper around `cuMemObjGetRDMAToken`). Without a provider that dialect sends every op
    /// over HTTP.
    #[must_use]
    pub fn dc_token_provider(
        mut self,
        provider: std::sync::Arc<dyn crate::fabric::rdma::DcTokenProvider>,
    ) -> Self {
        self.dc_provider = Some(provider);
        self
    }

    /// Re-arm `TCP_QUICKACK` after every socket read (default on). Costs one `setsockopt` per
    /// read; avoids a ~40 ms stall per small response from servers that write head and body
    /// separately without `TCP_NODELAY` (s3s-fs does).
    #[must_use]
    pub fn quickack(mut self, on: bool) -> Self {
        self.quickack = on;
        self
    }

    /// The GPU runtime whose device memory may be registered
    /// ([`crate::Engine::register_device`]); without one, device registrations fail with
    /// "no GPU runtime". Operations on device memory are staged through pinned bounce memory
    /// inside the engine: a GET's completion is posted only after its bytes are in VRAM.
    #[must_use]
    pub fn gpu(mut self, runtime: std::sync::Arc<dyn crate::gpu::GpuRuntime>) -> Self {
        self.gpu = Some(runtime);
        self
    }

    /// The process's GPU runtime ([`crate::gpu::detect()`]: CUDA, then HIP) when the host has
    /// one, as with [`EngineBuilder::gpu`]; on a host without one, nothing (device
    /// registrations then fail with "no GPU runtime", host memory works).
    #[must_use]
    pub fn gpu_if_present(self) -> Self {
        match crate::gpu::detect() {
            Some(rt) => self.gpu(rt),
            None => self,
        }
    }

    /// Largest merged host ↔ device copy when staging many ranges of one device
    /// registration that are adjacent (default [`crate::gpu::DEFAULT_COALESCE_LIMIT`]);
    /// 0 copies every operation on its own.
    #[must_use]
    pub fn gpu_coalesce_limit(mut self, bytes: u64) -> Self {
        self.gpu_coalesce_limit = bytes;
        self
    }

    /// How long a worker may keep querying the events of small host → device copies (≤ 2 MiB
    /// in flight) in the turn that queued them, so their completions are posted in that turn
    /// rather than the next (default [`crate::gpu::DEFAULT_POLL_SPIN`], zero: never wait).
    #[must_use]
    pub fn gpu_poll_spin(mut self, spin: Duration) -> Self {
        self.gpu_poll_spin = spin;
        self
    }

    /// Capacity of the pinned bounce pool that operations on device memory are staged
    /// through (default [`crate::gpu::DEFAULT_BOUNCE_BYTES`], 2 GiB; rounded down to 4 KiB, at
    /// least 4 KiB or `build` fails with [`crate::EngineError::Config`]): the most page-locked
    /// host memory it pins. Registering device memory allocates nothing; the pool pins its
    /// first [`crate::gpu::BOUNCE_SEGMENT_BYTES`] on the first device operation and another
    /// segment whenever an operation finds no room, up to this capacity. Each operation holds
    /// a range of its own length from when it starts until its bytes are in VRAM (GET) or it
    /// has ended (PUT); once the pool is at capacity, operations that do not fit wait in order
    /// of arrival, and one longer than the capacity completes with `TooLarge`.
    #[must_use]
    pub fn gpu_bounce_bytes(mut self, bytes: u64) -> Self {
        self.gpu_bounce_bytes = bytes;
        self
    }

    /// The bounce pool's unit of growth (default [`crate::gpu::BOUNCE_SEGMENT_BYTES`],
    /// 256 MiB; rounded up to 4 KiB, at most the capacity): the size of its first pinned
    /// allocation and of each one after. Smaller segments pin less for light loads; each
    /// growth step is one `cuMemHostAlloc` on the worker that needs it.
    #[must_use]
    pub fn gpu_bounce_segment_bytes(mut self, bytes: u64) -> Self {
        self.gpu_bounce_segment_bytes = bytes;
        self
    }

    /// Whether device registrations may use the GPUDirect tier (default
    /// [`crate::gpu::GpuDirect::Auto`]): the RDMA device registers the device range from its
    /// dmabuf and RDMA GETs land in VRAM with no staging copy. `Require` makes
    /// [`crate::Engine::register_device`] fail with [`crate::EngineError::GpuDirect`] (saying
    /// why) when that is not possible; `Off` always stages. See docs/gpu.md, GPUDirect.
    #[must_use]
    pub fn gpu_direct(mut self, mode: crate::gpu::GpuDirect) -> Self {
        self.gpu_direct = mode;
        self
    }

    /// Which NICs a large RangeGet, GET or PUT is split across (default
    /// [`crate::Stripe::BestTier`]: the NICs its registration is bound to, when there are
    /// several). A striped PUT is an engine-driven multipart upload (its ETag is a multipart
    /// ETag, `"…-N"`); [`crate::Stripe::Off`] keeps every PUT one request. See docs/engine.md,
    /// Striping.
    #[must_use]
    pub fn stripe(mut self, policy: crate::stripe::Stripe) -> Self {
        self.stripe.policy = policy;
        self
    }

    /// Smallest transfer (bytes) that is striped: a RangeGet's length, a GET's destination, a
    /// PUT's source (default [`crate::DEFAULT_STRIPE_THRESHOLD`], 8 MiB). Operations shorter
    /// than two chunks (two parts, for a PUT) are never split.
    #[must_use]
    pub fn stripe_threshold(mut self, bytes: u64) -> Self {
        self.stripe.threshold = bytes;
        self
    }

    /// Bytes per chunk of a striped transfer (default [`crate::DEFAULT_STRIPE_CHUNK`],
    /// 4 MiB; the last chunk may be shorter; a striped PUT's parts are at least 5 MiB, S3's
    /// smallest part). `build` refuses 0.
    #[must_use]
    pub fn stripe_chunk(mut self, bytes: u64) -> Self {
        self.stripe.chunk = bytes;
        self
    }

    /// PEM file of the CA certificates to trust for an `https://` endpoint, instead of the
    /// built-in Mozilla roots (default: `AWS_CA_BUNDLE`, else the profile's `ca_bundle`, else
    /// the built-in roots). An unreadable or empty bundle fails `build` with
    /// [`crate::EngineError::Tls`].
    #[must_use]
    pub fn ca_bundle(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.ca_bundle = Some(path.into());
        self
    }

    /// Accept any certificate from an `https://` endpoint (default off). Testing only: the
    /// server's identity is then not checked.
    #[must_use]
    pub fn insecure_skip_tls_verify(mut self, on: bool) -> Self {
        self.insecure_skip_tls_verify = on;
        self
    }

    /// Attach to the node daemon listening at `socket` (`hipobj daemon`, docs/daemon.md)
    /// instead of starting workers in this process: the engine then has no threads of its
    /// own, its queues' rings live in memory shared with the daemon, and the daemon's
    /// endpoint, credentials and fabric apply (this builder's are ignored, except
    /// [`EngineBuilder::gpu`], which exports device memory to the daemon). Without this
    /// call, the `HIPOBJ_DAEMON` environment variable, when set, names the socket.
    #[must_use]
    pub fn daemon(mut self, socket: impl Into<std::path::PathBuf>) -> Self {
        self.daemon = Some(Some(socket.into()));
        self
    }

    /// Run the engine in this process even when `HIPOBJ_DAEMON` is set (the daemon itself
    /// builds its engine so).
    #[must_use]
    pub fn in_process(mut self) -> Self {
        self.daemon = Some(None);
        self
    }

    /// Where [`EngineBuilder::build`] attaches, if anywhere.
    fn daemon_socket(&self) -> Option<std::path::PathBuf> {
        match &self.daemon {
            Some(choice) => choice.clone(),
            None => std::env::var_os(crate::attach::DAEMON_ENV)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from),
        }
    }

    /// Resolves credentials and the endpoint, plans placement and starts the workers — or,
    /// with [`EngineBuilder::daemon`] / `HIPOBJ_DAEMON`, attaches to the daemon.
    pub fn build(self) -> Result<crate::Engine, crate::EngineError> {
        match self.daemon_socket() {
            Some(path) => {
                let name = std::env::args()
                    .next()
                    .map(|a| {
                        std::path::Path::new(&a)
                            .file_name()
                            .map_or(a.clone(), |f| f.to_string_lossy().into_owned())
                    })
                    .unwrap_or_default();
                crate::attach::client::Attached::connect(&path, &name, self.gpu)
                    .map(crate::Engine::attached)
            }
            None => crate::local::build(self).map(crate::Engine::local),
        }
    }
}

/// Which data path the engine uses for payloads (`EngineBuilder::fabric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fabric {
    /// RDMA when the endpoint pairs, learned once per worker and endpoint; HTTP otherwise (the
    /// default). Over verbs when this host has an RDMA device with an active port (a gateway
    /// that serves only the soft fabric makes the client pair again over it), else over the
    /// soft fabric. Pairing runs off the worker thread, so an unresponsive endpoint delays an
    /// op by at most 150 ms and never holds up the worker's other operations; a plain S3
    /// server costs one refused pairing per worker. With an `https://` endpoint `Auto` is
    /// `Http`: payloads stay inside TLS (RDMA payloads are not encrypted).
    #[default]
    Auto,
    /// Always try the soft fabric first (per-request HTTP fallback still applies). With an
    /// `https://` endpoint the dialects' control exchanges speak TLS (verified like every
    /// request) but the payload stream is plain TCP.
    Soft,
    /// RDMA over libibverbs (`EngineBuilder::verbs_device`, else the first device), per-request
    /// HTTP fallback (a server that declines an op). Without libibverbs or a device that opens,
    /// `build` fails with [`crate::EngineError::VerbsUnavailable`] saying what is missing;
    /// use `Auto` to fall back instead.
    Verbs,
    /// Payloads in the HTTP body only.
    Http,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::new(10, Duration::from_millis(10), Duration::from_millis(70));
        let got: Vec<u128> = (1..=5).map(|r| p.backoff(r).as_millis()).collect();
        assert_eq!(got, vec![10, 20, 40, 70, 70]);
        assert_eq!(
            p.backoff(1000),
            Duration::from_millis(70),
            "huge retry counts saturate"
        );
        assert_eq!(p.jittered(3, 0.5), Duration::from_millis(20));
        assert_eq!(
            p.with_jitter(false).jittered(3, 0.5),
            Duration::from_millis(40)
        );
        assert_eq!(
            RetryPolicy::new(0, Duration::ZERO, Duration::ZERO).max_attempts,
            1
        );
    }
}
