//! Every `extern "C"` entry point of `libhipobj`, and the only module with `unsafe` code.
//!
//! Each function: (1) catches panics (`catch_unwind`) and turns them into
//! `hipObjInternalError`, so no unwind crosses the C boundary; (2) checks every pointer
//! argument for NULL before touching it; (3) copies C inputs into Rust values at the top and
//! writes outputs only at the end, so the logic in the other modules is safe Rust on plain
//! values. What cannot be checked — that a non-NULL pointer is valid for the documented length,
//! that strings are NUL-terminated, that registered memory outlives its registration — is the
//! caller's contract, written in `include/hipobj.h` and repeated in each `# Safety` section.
//!
//! Handles (`hipObjHandle_t`, `hipObjQueue_t`) are ids smuggled in pointer-sized values: they
//! are looked up, never dereferenced.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use crate::batch::OpRequest;
use crate::error::{self, CResult, Fail, OpError};
use crate::io::{self, Dir};
use crate::registry::Registration;
use crate::state::{self, Settings};
use crate::types::{
    HipObjCompletion, HipObjConfig, HipObjError, HipObjOp, HipObjStats, RDMA_OP_GET, RDMA_OP_PUT,
};
use crate::{stats, token};

/// `hipObjHandle_t` (the seed's `void*`).
pub type HipObjHandle = *mut c_void;
/// `hipObjQueue_t` (an opaque struct pointer in C).
pub type HipObjQueue = *mut c_void;

/// Runs `f`, converting its failure or panic into the C result and the thread's message.
fn guard(f: impl FnOnce() -> CResult<()>) -> HipObjError {
    error::set_last_message("");
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HipObjError::SUCCESS,
        Ok(Err(fail)) => {
            error::set_last_message(&fail.message);
            HipObjError {
                op_error: fail.op as c_int,
                hip_error: fail.gpu,
            }
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            error::set_last_message(&format!(
                "internal error (panic caught at the C boundary): {what}"
            ));
            HipObjError::op(OpError::InternalError)
        }
    }
}

fn null(what: &str) -> Fail {
    Fail::new(OpError::InvalidValue, format!("{what} is NULL"))
}

/// Reads an optional C string (NULL → `None`).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn opt_str(p: *const c_char, what: &str) -> CResult<Option<String>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| Fail::new(OpError::InvalidValue, format!("{what} is not valid UTF-8")))
}

/// Reads a required C string.
///
/// # Safety
/// As [`opt_str`].
unsafe fn req_str(p: *const c_char, what: &str) -> CResult<String> {
    // SAFETY: forwarded contract.
    unsafe { opt_str(p, what) }?.ok_or_else(|| null(what))
}

/// Handle value → id (0 is never issued).
fn id_of(h: *mut c_void, what: &str) -> CResult<u64> {
    if h.is_null() {
        return Err(null(what));
    }
    Ok(h as usize as u64)
}

/// Id → handle value.
fn handle_of(id: u64) -> *mut c_void {
    // Ids are small counters; they fit a pointer on every supported (64-bit) target.
    usize::try_from(id).unwrap_or(usize::MAX) as *mut c_void
}

/// Initializes the library. See `hipObjInit` in `include/hipobj.h`.
///
/// # Safety
/// `config` is NULL or points to a `hipObjConfig_t` whose string fields are NULL or
/// NUL-terminated, all valid for the duration of the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjInit(config: *const HipObjConfig) -> HipObjError {
    guard(|| {
        if config.is_null() {
            return Err(null("config"));
        }
        // SAFETY: non-NULL and valid for reads per the contract; `HipObjConfig` is `Copy`.
        let c = unsafe { *config };
        // SAFETY: each string field is NULL or NUL-terminated per the contract.
        let settings = unsafe {
            Settings {
                endpoint: opt_str(c.endpoint, "config.endpoint")?,
                region: opt_str(c.region, "config.region")?,
                access_key: opt_str(c.access_key, "config.accessKey")?,
                secret_key: opt_str(c.secret_key, "config.secretKey")?,
                flags: c.flags,
                gpu_device: c.gpu_device,
                nic_hint: opt_str(c.nic_hint, "config.nicHint")?,
                dialect: c.dialect,
                fabric: c.fabric,
                stripe_policy: c.stripe_policy,
                stripe_threshold: c.stripe_threshold,
                stripe_chunk: c.stripe_chunk,
                daemon_socket: opt_str(c.daemon_socket, "config.daemonSocket")?,
            }
        };
        let dc = c.dc_token_provider.map(|mint| {
            std::sync::Arc::new(CDcProvider {
                mint,
                ctx: c.dc_token_context as usize,
            }) as std::sync::Arc<dyn engine::DcTokenProvider>
        });
        state::init(settings, dc)
    })
}

/// `hipObjConfig_t.dcTokenProvider` with its context, as the engine's `DcTokenProvider`.
/// The engine calls it on its worker threads; the header's contract makes the C function
/// and its context thread-safe and valid until `hipObjShutdown` returns.
#[derive(Debug)]
struct CDcProvider {
    mint: crate::types::DcTokenProviderFn,
    /// The context pointer, kept as an address (the library never dereferences it).
    ctx: usize,
}

impl engine::DcTokenProvider for CDcProvider {
    fn mint(&self, addr: u64, len: u64, op: engine::DcOp) -> Result<String, engine::DcTokenError> {
        use engine::DcTokenError::{Malformed, Unavailable};
        let op = match op {
            engine::DcOp::Get => crate::types::RDMA_OP_GET,
            engine::DcOp::Put => crate::types::RDMA_OP_PUT,
            other => return Err(Unavailable(format!("no C value for {other:?}"))),
        };
        let mut out = [0u8; crate::types::DC_TOKEN_MAX];
        // SAFETY: `mint` is the caller's `hipObjDcTokenProvider_t`, which the header requires
        // to be callable from any thread with its context until shutdown; `out` is a writable
        // buffer of exactly `out.len()` bytes that outlives the call.
        let rc = unsafe {
            (self.mint)(
                self.ctx as *mut c_void,
                addr,
                len,
                op,
                out.as_mut_ptr().cast::<c_char>(),
                out.len(),
            )
        };
        if rc != 0 {
            return Err(Unavailable(format!(
                "the C provider (hipObjConfig_t.dcTokenProvider) returned {rc}"
            )));
        }
        // The engine checks what this returns (a descriptor naming exactly this range).
        let n = out.iter().position(|&b| b == 0).ok_or_else(|| {
            Malformed(format!(
                "the C provider wrote no NUL within HIPOBJ_DC_TOKEN_MAX ({}) bytes",
                out.len()
            ))
        })?;
        std::str::from_utf8(&out[..n])
            .map(str::to_owned)
            .map_err(|_| Malformed("the C provider wrote a descriptor that is not ASCII".into()))
    }
}

/// Shuts the library down. See `hipObjShutdown` in `include/hipobj.h`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjShutdown() -> HipObjError {
    guard(state::shutdown)
}

/// Registers caller memory. See `hipObjBufRegister` in `include/hipobj.h`.
///
/// Host memory is registered with the engine as is. Device memory (recognised only when
/// `hipObjInit` found a GPU runtime, `gpuDevice >= 0`) goes through the engine's
/// `register_device`: the engine stages it through pinned host memory and completes a GET only
/// once the bytes are in VRAM, for `hipObjGet`/`hipObjPut` and batch queues alike.
///
/// # Safety
/// `ptr..ptr+size` is host memory valid for reads and writes from any thread, or device memory
/// of one allocation, until `hipObjBufDeregister(ptr)` or `hipObjShutdown` returned success,
/// and the caller does not access bytes covered by an operation in flight until it completed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjBufRegister(ptr: *mut c_void, size: usize) -> HipObjError {
    guard(|| {
        let lib = state::current()?;
        let base = ptr as usize;
        let mut regs = lib
            .regs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        regs.check_new(base, size)?;
        // SAFETY: `ptr` is non-NULL (check_new), `size > 0`, and the validity contract is this
        // function's, which is the engine's `register_memory` contract (host memory as
        // `register_raw`, device memory as `register_device`).
        let (handle, _kind) = unsafe { lib.engine.register_memory(ptr.cast::<u8>(), size) }?;
        regs.insert(Registration {
            base,
            len: size,
            handle,
        });
        Ok(())
    })
}

/// The mmgaggle fork's name for registering host memory; identical to `hipObjBufRegister`.
///
/// # Safety
/// As [`hipObjBufRegister`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjBufRegisterHost(ptr: *mut c_void, size: usize) -> HipObjError {
    // SAFETY: same contract.
    unsafe { hipObjBufRegister(ptr, size) }
}

/// Allocates and registers host memory the library owns. See `hipObjBufAlloc` in
/// `include/hipobj.h`: the engine's `register_host` memory, which an engine attached to a node
/// daemon maps from a memfd it shares with the daemon (the only host memory a daemon reaches).
///
/// # Safety
/// `ptr` is NULL or valid for one pointer-sized write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjBufAlloc(size: usize, ptr: *mut *mut c_void) -> HipObjError {
    guard(|| {
        if ptr.is_null() {
            return Err(null("ptr"));
        }
        let lib = state::current()?;
        // The registry's size rules, before anything is allocated.
        crate::registry::check_len(size)?;
        let mut regs = lib
            .regs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let handle = lib
            .engine
            .register_host(size, engine::RegisterOptions::pinned())?;
        let Some(base) = lib.engine.host_base(handle) else {
            let _ = lib.engine.deregister(handle, Duration::ZERO);
            return Err(Fail::new(
                OpError::InternalError,
                "the engine gave no address for the memory it allocated",
            ));
        };
        let base = base.as_ptr() as usize;
        if let Err(f) = regs.check_new(base, size) {
            let _ = lib.engine.deregister(handle, Duration::ZERO);
            return Err(f);
        }
        regs.insert(Registration {
            base,
            len: size,
            handle,
        });
        // SAFETY: `ptr` is non-NULL and valid for one write per the contract.
        unsafe { ptr.write(base as *mut c_void) };
        Ok(())
    })
}

/// Deregisters a buffer. See `hipObjBufDeregister` in `include/hipobj.h`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjBufDeregister(ptr: *mut c_void) -> HipObjError {
    guard(|| {
        if ptr.is_null() {
            return Err(null("buffer pointer"));
        }
        state::current()?.deregister(ptr as usize)
    })
}

/// Opens an object handle. See `hipObjOpen` in `include/hipobj.h`.
///
/// # Safety
/// `bucket` and `key` are NUL-terminated strings; `handle` is valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjOpen(
    bucket: *const c_char,
    key: *const c_char,
    handle: *mut HipObjHandle,
) -> HipObjError {
    guard(|| {
        if handle.is_null() {
            return Err(null("handle"));
        }
        // SAFETY: per the contract.
        let (b, k) = unsafe { (req_str(bucket, "bucket")?, req_str(key, "key")?) };
        let id = state::current()?.open(&b, &k)?;
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { handle.write(handle_of(id)) };
        Ok(())
    })
}

/// Closes an object handle. See `hipObjClose` in `include/hipobj.h`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjClose(handle: HipObjHandle) -> HipObjError {
    guard(|| {
        let h = id_of(handle, "handle")?;
        state::current()?.close(h)
    })
}

/// Reads `size` bytes at object `offset` into registered memory. See `hipObjGet`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGet(
    handle: HipObjHandle,
    buf: *mut c_void,
    size: usize,
    offset: i64,
) -> HipObjError {
    guard(|| {
        let h = id_of(handle, "handle")?;
        if buf.is_null() {
            return Err(null("buffer pointer"));
        }
        let lib = state::current()?;
        io::transfer(&lib, Dir::Get, h, buf as usize, size as u64, offset).map(|_| ())
    })
}

/// Writes `size` bytes of registered memory as the object. See `hipObjPut`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjPut(
    handle: HipObjHandle,
    buf: *const c_void,
    size: usize,
    offset: i64,
) -> HipObjError {
    guard(|| {
        let h = id_of(handle, "handle")?;
        if buf.is_null() {
            return Err(null("buffer pointer"));
        }
        let lib = state::current()?;
        io::transfer(&lib, Dir::Put, h, buf as usize, size as u64, offset).map(|_| ())
    })
}

/// Static description of an operation error code.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGetErrorString(err: c_int) -> *const c_char {
    catch_unwind(|| {
        OpError::from_raw(err).map_or(c"unknown hipObject error code".as_ptr(), |e| {
            e.description().as_ptr()
        })
    })
    .unwrap_or(c"internal error".as_ptr())
}

/// Detail message of the calling thread's latest call ("" after a success).
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGetLastErrorMessage() -> *const c_char {
    catch_unwind(error::last_message_ptr).unwrap_or(c"".as_ptr())
}

/// Operation counters by path and dialect. See `hipObjGetStats`.
///
/// # Safety
/// `stats` is NULL or writable for one `hipObjStats_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetStats(stats: *mut HipObjStats) -> HipObjError {
    guard(|| {
        if stats.is_null() {
            return Err(null("stats"));
        }
        let v = state::current()?.stats.snapshot();
        // SAFETY: non-NULL and writable for one `hipObjStats_t` per the contract.
        unsafe { stats.write(v) };
        Ok(())
    })
}

/// Path and dialect of the calling thread's latest `hipObjGet`/`hipObjPut`. See
/// `hipObjGetLastOpInfo`.
///
/// # Safety
/// `path` and `dialect` are each NULL or writable for one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetLastOpInfo(path: *mut u32, dialect: *mut u32) -> HipObjError {
    guard(|| {
        let (p, d) = stats::last_op();
        if !path.is_null() {
            // SAFETY: non-NULL and writable for one `uint32_t` per the contract.
            unsafe { path.write(p) };
        }
        if !dialect.is_null() {
            // SAFETY: as above.
            unsafe { dialect.write(d) };
        }
        Ok(())
    })
}

/// Whether a server checksum proved the bytes of the calling thread's latest successful
/// `hipObjGet`/`hipObjPut` (1) or nothing did (0; also after a failure). See
/// `hipObjGetLastOpVerified`.
///
/// # Safety
/// `verified` is NULL or writable for one `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetLastOpVerified(verified: *mut c_int) -> HipObjError {
    guard(|| {
        if verified.is_null() {
            return Err(Fail::new(
                OpError::InvalidValue,
                "hipObjGetLastOpVerified(NULL)",
            ));
        }
        // SAFETY: non-NULL and writable for one `int` per the contract.
        unsafe { verified.write(c_int::from(stats::last_op_verified())) };
        Ok(())
    })
}

/// Name of a `HIPOBJ_PATH_*` value (`http`, `rdma-soft`, `rdma-verbs`, `none`; `unknown`).
#[unsafe(no_mangle)]
pub extern "C" fn hipObjPathName(path: u32) -> *const c_char {
    stats::PATH_NAMES
        .get(path as usize)
        .map_or(c"unknown".as_ptr(), |n| n.as_ptr())
}

/// Name of a completion dialect value (`http`, `rc-persistent`, `hipobj-rc-v2`, `cuobject`,
/// `none`; `unknown`).
#[unsafe(no_mangle)]
pub extern "C" fn hipObjDialectName(dialect: u32) -> *const c_char {
    stats::DIALECT_NAMES
        .get(dialect as usize)
        .map_or(c"unknown".as_ptr(), |n| n.as_ptr())
}

/// Library version string.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjGetVersionString() -> *const c_char {
    const V: &CStr = {
        // concat! of the package version, checked for interior NULs at compile time.
        match CStr::from_bytes_with_nul(
            concat!(
                "hipobj-rs ",
                env!("CARGO_PKG_VERSION"),
                " (hipObject C API; paths: http, rdma-soft, rdma-verbs)\0"
            )
            .as_bytes(),
        ) {
            Ok(s) => s,
            Err(_) => c"hipobj-rs",
        }
    };
    V.as_ptr()
}

/// Mints an RDMA token for registered memory. See `hipObjGetRdmaToken`.
///
/// # Safety
/// `out_token` is valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjGetRdmaToken(
    ptr: *const c_void,
    size: usize,
    op: c_int,
    out_token: *mut *mut c_char,
) -> HipObjError {
    guard(|| {
        if out_token.is_null() {
            return Err(null("outToken"));
        }
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { out_token.write(std::ptr::null_mut()) };
        if ptr.is_null() {
            return Err(null("buffer pointer"));
        }
        if op != RDMA_OP_PUT && op != RDMA_OP_GET {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("op must be HIPOBJ_RDMA_OP_PUT or HIPOBJ_RDMA_OP_GET (got {op})"),
            ));
        }
        if size == 0 {
            return Err(Fail::new(OpError::InvalidValue, "size is 0"));
        }
        let lib = state::current()?;
        lib.regs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .locate(ptr as usize, size as u64)?;
        Err(token::no_fabric())
    })
}

/// Releases a token from `hipObjGetRdmaToken`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjPutRdmaToken(token: *mut c_char) -> HipObjError {
    guard(|| crate::issued_tokens().reclaim(token))
}

/// Parses an `x-amz-rdma-reply` value. See `hipObjParseRdmaReply`.
///
/// # Safety
/// `reply` is valid for reads of `reply_len` bytes; `http_code` for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjParseRdmaReply(
    reply: *const c_char,
    reply_len: usize,
    http_code: *mut c_int,
) -> HipObjError {
    guard(|| {
        if reply.is_null() {
            return Err(null("reply"));
        }
        if http_code.is_null() {
            return Err(null("httpCode"));
        }
        if reply_len >= s3_lite::rdma::reply::MAX_REPLY_LEN {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("reply of {reply_len} bytes exceeds the 511-byte limit"),
            ));
        }
        // SAFETY: non-NULL, readable for `reply_len` (< 512) bytes per the contract.
        let bytes = unsafe { std::slice::from_raw_parts(reply.cast::<u8>(), reply_len) };
        let parsed = token::parse_reply(bytes)?;
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { http_code.write(parsed.http_code) };
        match parsed.result {
            OpError::Success => Ok(()),
            op => Err(Fail::new(
                op,
                format!(
                    "{} reports failure (code {})",
                    s3_lite::rdma::RDMA_REPLY,
                    parsed.http_code
                ),
            )),
        }
    })
}

/// The client NIC address in a token. See `hipObjTokenClientNic`.
///
/// # Safety
/// `token` is a NUL-terminated string; `nic_ip` is writable for `nic_ip_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjTokenClientNic(
    token: *const c_char,
    nic_ip: *mut c_char,
    nic_ip_len: usize,
) -> HipObjError {
    guard(|| {
        if token.is_null() {
            return Err(null("token"));
        }
        if nic_ip.is_null() {
            return Err(null("nicIp"));
        }
        // SAFETY: non-NULL and NUL-terminated per the contract.
        let value = unsafe { CStr::from_ptr(token) }.to_bytes();
        let ip = token::client_nic(value)?;
        if ip.len() >= nic_ip_len {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("nicIpLen {nic_ip_len} cannot hold {:?} and its NUL", ip),
            ));
        }
        // SAFETY: `nic_ip` is writable for `nic_ip_len > ip.len()` bytes per the contract;
        // the source is a distinct Rust allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(ip.as_ptr(), nic_ip.cast::<u8>(), ip.len());
            nic_ip.add(ip.len()).write(0);
        }
        Ok(())
    })
}

/// Creates a batch queue. See `hipObjQueueCreate`.
///
/// # Safety
/// `queue` is valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjQueueCreate(depth: u32, queue: *mut HipObjQueue) -> HipObjError {
    guard(|| {
        if queue.is_null() {
            return Err(null("queue"));
        }
        if depth == 0 || depth > ring_api::MAX_ENTRIES {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("depth must be 1..={} (got {depth})", ring_api::MAX_ENTRIES),
            ));
        }
        let id = state::current()?.create_queue(depth)?;
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { queue.write(handle_of(id)) };
        Ok(())
    })
}

/// Submits entries. See `hipObjQueueSubmit`.
///
/// # Safety
/// `ops` is valid for reads of `n` `hipObjOp_t`s; `submitted` for one write. Buffers named by
/// accepted entries follow the registration contract until their completions are reaped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjQueueSubmit(
    queue: HipObjQueue,
    ops: *const HipObjOp,
    n: usize,
    submitted: *mut usize,
) -> HipObjError {
    guard(|| {
        let q = id_of(queue, "queue")?;
        if submitted.is_null() {
            return Err(null("submitted"));
        }
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { submitted.write(0) };
        if n == 0 {
            return Ok(());
        }
        if ops.is_null() {
            return Err(null("ops"));
        }
        // SAFETY: non-NULL and readable for `n` entries per the contract; `HipObjOp` is
        // plain data (integers and pointers we never dereference), so any bit pattern is valid.
        let ops = unsafe { std::slice::from_raw_parts(ops, n) };
        let reqs: Vec<OpRequest> = ops
            .iter()
            .map(|o| OpRequest {
                kind: o.kind,
                flags: o.flags,
                handle: o.handle as usize as u64,
                buf: o.buf as usize,
                size: o.size,
                offset: o.offset,
                user_data: o.user_data,
                deadline_ns: o.deadline_ns,
                upload_id: o.upload_id,
                part_number: o.part_number,
                reserved: o.reserved,
            })
            .collect();
        let lib = state::current()?;
        let batch = lib.queue(q)?;
        let done = batch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .submit(&lib, &reqs);
        // SAFETY: as above.
        unsafe { submitted.write(done) };
        Ok(())
    })
}

/// Reaps completions. See `hipObjQueueReap`.
///
/// # Safety
/// `out` is writable for `max` `hipObjCompletion_t`s; `n` for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipObjQueueReap(
    queue: HipObjQueue,
    out: *mut HipObjCompletion,
    max: usize,
    timeout_ms: c_int,
    n: *mut usize,
) -> HipObjError {
    guard(|| {
        let q = id_of(queue, "queue")?;
        if n.is_null() {
            return Err(null("n"));
        }
        // SAFETY: non-NULL and valid for a write per the contract.
        unsafe { n.write(0) };
        if max == 0 {
            return Ok(());
        }
        if out.is_null() {
            return Err(null("out"));
        }
        let timeout = match u64::try_from(timeout_ms) {
            Ok(ms) => Some(Duration::from_millis(ms)),
            Err(_) => None,
        };
        let lib = state::current()?;
        let batch = lib.queue(q)?;
        let got = batch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .reap(max, timeout);
        for c in &got {
            lib.stats.record(c);
        }
        // SAFETY: `out` is writable for `max >= got.len()` entries per the contract, and
        // `got` is a separate Rust allocation.
        unsafe { std::ptr::copy_nonoverlapping(got.as_ptr(), out, got.len()) };
        // SAFETY: as above.
        unsafe { n.write(got.len()) };
        Ok(())
    })
}

/// Destroys a batch queue. See `hipObjQueueDestroy`.
#[unsafe(no_mangle)]
pub extern "C" fn hipObjQueueDestroy(queue: HipObjQueue) -> HipObjError {
    guard(|| {
        let q = id_of(queue, "queue")?;
        state::current()?.destroy_queue(q)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        let p = hipObjGetLastErrorMessage();
        // SAFETY: the pointer is to this thread's NUL-terminated message slot, unchanged
        // until our next call into the library.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn panics_become_internal_errors() {
        let r = guard(|| panic!("boom {}", 42));
        assert_eq!(r, HipObjError::op(OpError::InternalError));
        assert!(last().contains("boom 42"), "{}", last());
        let r = guard(|| Err(Fail::new(OpError::Busy, "busy here")));
        assert_eq!(r.op_error, OpError::Busy as c_int);
        assert_eq!(last(), "busy here");
        assert_eq!(guard(|| Ok(())), HipObjError::SUCCESS);
        assert_eq!(last(), "");
    }

    #[test]
    fn null_pointers_are_invalid_values() {
        // SAFETY: NULL is allowed by every contract below and must be refused.
        unsafe {
            assert_eq!(
                hipObjInit(std::ptr::null()).op_error,
                OpError::InvalidValue as c_int
            );
            let mut code = 0;
            assert_eq!(
                hipObjParseRdmaReply(std::ptr::null(), 3, &mut code).op_error,
                OpError::InvalidValue as c_int
            );
            assert_eq!(
                hipObjTokenClientNic(c"00".as_ptr(), std::ptr::null_mut(), 16).op_error,
                OpError::InvalidValue as c_int
            );
            assert_eq!(
                hipObjGetStats(std::ptr::null_mut()).op_error,
                OpError::InvalidValue as c_int
            );
            // Both outputs are optional.
            assert_eq!(
                hipObjGetLastOpInfo(std::ptr::null_mut(), std::ptr::null_mut()).op_error,
                0
            );
        }
        let name = |p: *const c_char| {
            // SAFETY: the name functions return static NUL-terminated strings.
            unsafe { CStr::from_ptr(p) }.to_str().unwrap()
        };
        assert_eq!(name(hipObjPathName(3)), "rdma-verbs");
        assert_eq!(name(hipObjPathName(4)), "unknown");
        assert_eq!(name(hipObjDialectName(3)), "hipobj-rc-v2");
        assert_eq!(name(hipObjDialectName(99)), "unknown");
        assert_eq!(
            hipObjClose(std::ptr::null_mut()).op_error,
            OpError::InvalidValue as c_int
        );
    }
}
