//! The library instance between `hipObjInit` and `hipObjShutdown`: the engine, registered
//! buffers, object handles, batch queues and a pool of queues for the synchronous calls.
//!
//! One instance per process (the seed's model), held in a global `RwLock<Option<Arc<_>>>`:
//! calls clone the `Arc` under a short read lock and then run without holding it, so a slow
//! GET never blocks another thread's call. Handles (objects, queues) are ids from one
//! process-wide counter, never reused, handed to C as pointer-sized values and looked up here:
//! a stale or forged handle is an error, never a dereference.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use engine::{Engine, Queue};
use ring_api::{Cqe, ObjectId, Sqe};
use s3_lite::credentials::{Overrides, ProcessEnvironment, resolve};
use s3_lite::sigv4::Signer;

use crate::batch::Batch;
use crate::error::{CResult, Fail, OpError};
use crate::registry::Registry;

/// How long deregistration (and shutdown) waits for operations in flight on a buffer.
pub const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Queues kept for synchronous calls (more concurrent callers create and drop extra ones).
const POOL_MAX: usize = 64;
/// Submission depth of a pooled queue (a synchronous call has one operation in flight).
const POOL_DEPTH: u32 = 2;

/// `hipObjConfig_t` after its strings were read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Endpoint URL.
    pub endpoint: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Access key id.
    pub access_key: Option<String>,
    /// Secret key.
    pub secret_key: Option<String>,
    /// `HIPOBJ_CONFIG_*` bits.
    pub flags: u32,
    /// GPU device index or -1.
    pub gpu_device: i32,
    /// RDMA device name or PCI address (`None`: the engine's default device).
    pub nic_hint: Option<String>,
    /// `HIPOBJ_DIALECT_*` (0: negotiate).
    pub dialect: u32,
    /// `HIPOBJ_FABRIC_*` (0: automatic).
    pub fabric: u32,
    /// `HIPOBJ_STRIPE_*` (0: the engine's default).
    pub stripe_policy: u32,
    /// Smallest striped transfer in bytes (0: the engine's default).
    pub stripe_threshold: u64,
    /// Bytes per chunk (0: the engine's default).
    pub stripe_chunk: u64,
    /// The node daemon's socket to attach to (`None`: `HIPOBJ_DAEMON`, else in process).
    pub daemon_socket: Option<String>,
}

/// The engine dialect a `HIPOBJ_DIALECT_*` value names (`None`: not one of them).
pub fn dialect_of(v: u32) -> Option<engine::Dialect> {
    Some(match v {
        0 => engine::Dialect::Auto,
        1 => engine::Dialect::RcPersistent,
        2 => engine::Dialect::RcV2,
        3 => engine::Dialect::Http,
        4 => engine::Dialect::CuObject,
        _ => return None,
    })
}

/// The name of a `HIPOBJ_DIALECT_*` configuration value, for messages.
pub fn requested_dialect_name(v: u32) -> &'static str {
    match v {
        0 => "auto",
        1 => "rc-persistent",
        2 => "hipobj-rc-v2",
        3 => "http",
        4 => "cuobject",
        _ => "unknown",
    }
}

/// An object handle's target.
#[derive(Debug, Clone)]
pub struct Object {
    /// Interned id for submission entries.
    pub id: ObjectId,
    /// Bucket name.
    pub bucket: String,
    /// Object key.
    pub key: String,
}

/// The running library.
#[derive(Debug)]
pub struct Library {
    /// The engine.
    pub engine: Engine,
    /// Signer with the resolved credentials (diagnostic probes).
    pub signer: Signer,
    /// CA bundle for an `https://` endpoint (`AWS_CA_BUNDLE`, else the profile's `ca_bundle`;
    /// the engine resolves the same one), for diagnostic probes.
    pub ca_bundle: Option<std::path::PathBuf>,
    /// Settings as given.
    pub settings: Settings,
    /// Registered buffers.
    pub regs: RwLock<Registry>,
    /// Operations by path and dialect (`hipObjGetStats`).
    pub stats: crate::stats::Stats,
    objects: RwLock<HashMap<u64, Object>>,
    queues: Mutex<HashMap<u64, Arc<Mutex<Batch>>>>,
    pool: Mutex<Vec<Queue>>,
}

static LIBRARY: RwLock<Option<Arc<Library>>> = RwLock::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running library, or `NotInitialized`.
pub fn current() -> CResult<Arc<Library>> {
    LIBRARY
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(|| {
            Fail::new(
                OpError::NotInitialized,
                "hipObject is not initialized: call hipObjInit first",
            )
        })
}

/// The cuObject descriptor provider of `hipObjInit` (`config.dcTokenProvider`), if any.
pub type DcProvider = Option<Arc<dyn engine::DcTokenProvider>>;

/// `hipObjInit`.
pub fn init(settings: Settings, dc: DcProvider) -> CResult<()> {
    let mut slot = LIBRARY.write().unwrap_or_else(PoisonError::into_inner);
    if slot.is_some() {
        return Err(Fail::new(
            OpError::AlreadyInitialized,
            "hipObjInit was already called (call hipObjShutdown first)",
        ));
    }
    *slot = Some(Arc::new(Library::start(settings, dc)?));
    Ok(())
}

/// `hipObjShutdown`: aborts batch queues, waits for operations on registered buffers (up to
/// [`DEREGISTER_TIMEOUT`] each), deregisters them and stops the engine.
pub fn shutdown() -> CResult<()> {
    let lib = LIBRARY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .ok_or_else(|| Fail::new(OpError::NotInitialized, "hipObject is not initialized"))?;
    lock(&lib.queues).clear();
    lock(&lib.pool).clear();
    let regs = lib
        .regs
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .drain();
    let mut busy = 0usize;
    for r in regs {
        if lib.engine.deregister(r.handle, DEREGISTER_TIMEOUT).is_err() {
            busy += 1;
        }
    }
    if busy > 0 {
        return Err(Fail::new(
            OpError::Busy,
            format!(
                "{busy} buffer(s) still had operations in flight after {DEREGISTER_TIMEOUT:?}; \
                 the engine stops once those calls return"
            ),
        ));
    }
    Ok(())
}

impl Library {
    fn start(s: Settings, dc: DcProvider) -> CResult<Library> {
        if s.flags & !crate::types::CONFIG_ALL != 0 {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!(
                    "config.flags {:#x} sets reserved bits (only HIPOBJ_CONFIG_VERIFY is defined)",
                    s.flags
                ),
            ));
        }
        if s.gpu_device < -1 {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!(
                    "config.gpuDevice must be -1 or a device index (got {})",
                    s.gpu_device
                ),
            ));
        }
        let dialect = dialect_of(s.dialect).ok_or_else(|| {
            Fail::new(
                OpError::InvalidValue,
                format!(
                    "config.dialect must be a HIPOBJ_DIALECT_* value 0..4 (got {})",
                    s.dialect
                ),
            )
        })?;
        if dialect == engine::Dialect::CuObject && dc.is_none() {
            return Err(Fail::new(
                OpError::InvalidValue,
                "config.dialect is HIPOBJ_DIALECT_CUOBJECT but config.dcTokenProvider is NULL \
                 (cuObject descriptors come from the provider)",
            ));
        }
        let fabric = crate::fabric::fabric_of(s.fabric)?;
        let stripe = crate::stripe::stripe_of(s.stripe_policy, s.stripe_threshold, s.stripe_chunk)?;
        crate::log::init_from_env()?;
        let overrides = Overrides {
            access_key_id: s.access_key.clone(),
            secret_access_key: s.secret_key.clone(),
            region: s.region.clone(),
            endpoint_url: s.endpoint.clone(),
            ..Overrides::default()
        };
        let resolved = resolve(&overrides, &ProcessEnvironment)
            .map_err(|e| Fail::new(OpError::InvalidValue, format!("credentials: {e}")))?;
        let url = resolved.endpoint_url.clone().ok_or_else(|| {
            Fail::new(
                OpError::InvalidValue,
                "no endpoint: set config.endpoint, AWS_ENDPOINT_URL or the profile's endpoint_url",
            )
        })?;
        let signer = Signer::new(resolved.credentials.clone(), resolved.region.clone(), "s3")
            .map_err(|e| Fail::new(OpError::InvalidValue, format!("signer: {e}")))?;
        let ca_bundle = resolved.ca_bundle.clone();
        let mut builder = Engine::builder()
            .endpoint_url(url)
            .credentials(resolved.credentials)
            .region(resolved.region)
            .fabric(fabric)
            .dialect(dialect);
        builder = stripe.apply(builder);
        if let Some(p) = dc {
            builder = builder.dc_token_provider(p);
        }
        if let Some(hint) = &s.nic_hint {
            // A comma-separated list, as the seed's nicHint; the engine resolves each name or
            // PCI address through the host topology (`hipObjNicNotFound` when one names no
            // NIC, `hipObjInvalidValue` for an empty name).
            builder = builder.nics(hint.split(','));
        }
        if s.gpu_device >= 0 {
            // Device pointers are recognised (and staged) by the engine's GPU runtime.
            builder = builder.gpu_if_present();
        }
        if let Some(socket) = &s.daemon_socket {
            if socket.is_empty() {
                return Err(Fail::new(
                    OpError::InvalidValue,
                    "config.daemonSocket is empty (NULL attaches through HIPOBJ_DAEMON, if set)",
                ));
            }
            builder = builder.daemon(socket);
        }
        // `HIPOBJ_FABRIC_VERBS` without a usable device: the engine refuses it
        // (`VerbsUnavailable` → `hipObjNicNotFound`); the message names the C setting.
        let engine = builder.build().map_err(|e| {
            let verbs = matches!(e, engine::EngineError::VerbsUnavailable { .. });
            let mut fail = Fail::from(e);
            if verbs {
                fail.message = format!("config.fabric is HIPOBJ_FABRIC_VERBS: {}", fail.message);
            }
            fail
        })?;
        Ok(Library {
            engine,
            signer,
            ca_bundle,
            settings: s,
            regs: RwLock::new(Registry::default()),
            stats: crate::stats::Stats::default(),
            objects: RwLock::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// `hipObjBufDeregister`: forgets the registration starting at `base` (so new operations
    /// on it fail at once), then waits for operations in flight on it.
    pub fn deregister(&self, base: usize) -> CResult<()> {
        let reg = self
            .regs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(base)?;
        match self.engine.deregister(reg.handle, DEREGISTER_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(e) => {
                // The engine keeps the handle registered on timeout: keep it findable too.
                self.regs
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(reg);
                Err(Fail::from(e))
            }
        }
    }

    /// `hipObjOpen`: interns the name and returns a new handle id.
    pub fn open(&self, bucket: &str, key: &str) -> CResult<u64> {
        s3_lite::s3::validate_bucket(bucket)
            .map_err(|e| Fail::new(OpError::InvalidValue, format!("bucket {bucket:?}: {e}")))?;
        s3_lite::s3::validate_key(key)
            .map_err(|e| Fail::new(OpError::InvalidValue, format!("key {key:?}: {e}")))?;
        let id = self.engine.object(bucket, key)?;
        let h = next_id();
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                h,
                Object {
                    id,
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                },
            );
        Ok(h)
    }

    /// `hipObjClose`.
    pub fn close(&self, handle: u64) -> CResult<()> {
        self.objects
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&handle)
            .map(|_| ())
            .ok_or_else(|| bad_handle("object", handle))
    }

    /// The object behind a handle.
    pub fn object(&self, handle: u64) -> CResult<Object> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&handle)
            .cloned()
            .ok_or_else(|| bad_handle("object", handle))
    }

    /// Runs one entry on a pooled queue and waits for its completion.
    pub fn run_one(&self, sqe: &Sqe) -> CResult<Cqe> {
        let pooled = lock(&self.pool).pop();
        let mut q = match pooled {
            Some(q) => q,
            None => self.engine.queue(POOL_DEPTH)?,
        };
        q.push(sqe)
            .map_err(|e| Fail::new(OpError::InternalError, format!("submission: {e}")))?;
        let cqe = loop {
            if let Some(c) = q.completion().next() {
                break c;
            }
            // Every operation has a deadline (the engine's default 60 s), so this ends.
            q.wait(1, Some(Duration::from_secs(1)));
        };
        let mut pool = lock(&self.pool);
        if pool.len() < POOL_MAX {
            pool.push(q);
        }
        Ok(cqe)
    }

    /// `hipObjQueueCreate`.
    pub fn create_queue(&self, depth: u32) -> CResult<u64> {
        let b = Batch::new(self.engine.queue(depth)?);
        let h = next_id();
        lock(&self.queues).insert(h, Arc::new(Mutex::new(b)));
        Ok(h)
    }

    /// The batch queue behind a handle.
    pub fn queue(&self, handle: u64) -> CResult<Arc<Mutex<Batch>>> {
        lock(&self.queues)
            .get(&handle)
            .cloned()
            .ok_or_else(|| bad_handle("queue", handle))
    }

    /// `hipObjQueueDestroy`: operations still in flight are aborted.
    pub fn destroy_queue(&self, handle: u64) -> CResult<()> {
        lock(&self.queues)
            .remove(&handle)
            .map(|_| ())
            .ok_or_else(|| bad_handle("queue", handle))
    }
}

fn bad_handle(what: &str, h: u64) -> Fail {
    Fail::new(
        OpError::InvalidValue,
        format!("unknown or closed {what} handle {h:#x}"),
    )
}
