//! The `#[repr(C)]` types of `include/hipobj.h`.
//!
//! Fields the library *reads* from C (`HipObjOp::kind`, flags) are fixed-width integers, never
//! Rust enums: a C caller can store any value there, and an out-of-range enum would be
//! undefined behaviour in Rust. Fields the library only *writes* may use the C enum's
//! underlying `int`.

use std::ffi::{c_char, c_int, c_void};

use crate::error::OpError;

/// `hipObjError_t`: the result of every call.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HipObjError {
    /// `hipObjOpError_t` value.
    pub op_error: c_int,
    /// The HIP or CUDA runtime's error code when a GPU call failed, else 0 (the seed's
    /// `hipError` field).
    pub hip_error: c_int,
}

impl HipObjError {
    /// Success.
    pub const SUCCESS: HipObjError = HipObjError {
        op_error: 0,
        hip_error: 0,
    };

    /// An error with no GPU error.
    pub const fn op(e: OpError) -> Self {
        HipObjError {
            op_error: e as c_int,
            hip_error: 0,
        }
    }
}

/// `hipObjConfig_t`, field for field as in the seed header.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipObjConfig {
    /// S3 endpoint URL (`http://host:port`); NULL: `AWS_ENDPOINT_URL` or the profile's.
    pub endpoint: *const c_char,
    /// Signing region; NULL: `AWS_REGION`, the profile, then `us-east-1`.
    pub region: *const c_char,
    /// Access key id; NULL: environment, then the AWS profile.
    pub access_key: *const c_char,
    /// Secret key; NULL: environment, then the AWS profile.
    pub secret_key: *const c_char,
    /// `HIPOBJ_CONFIG_*` bits (`HIPOBJ_CONFIG_VERIFY`); the others are reserved, 0.
    pub flags: u32,
    /// HIP/CUDA device index, or -1 for none.
    pub gpu_device: c_int,
    /// RDMA device name or PCI address, or NULL (the engine's default device).
    pub nic_hint: *const c_char,
    /// `HIPOBJ_DIALECT_*` (0: negotiate).
    pub dialect: u32,
    /// `HIPOBJ_FABRIC_*` (0: automatic). Sits in what was the tail padding after `dialect`,
    /// so the size is unchanged.
    pub fabric: u32,
    /// cuObject DC descriptor provider, or NULL (no cuObject dialect).
    pub dc_token_provider: Option<DcTokenProviderFn>,
    /// Passed to `dc_token_provider` as is.
    pub dc_token_context: *mut c_void,
    /// `HIPOBJ_STRIPE_*` (0: the engine's default, best tier).
    pub stripe_policy: u32,
    /// Smallest transfer (bytes) that is striped (0: the engine's default, 8 MiB).
    pub stripe_threshold: u64,
    /// Bytes per chunk of a striped transfer (0: the engine's default, 4 MiB; a striped PUT's
    /// parts are at least 5 MiB).
    pub stripe_chunk: u64,
    /// Path of a node daemon's socket (`hipobj daemon`) to attach to instead of running an
    /// engine in this process; NULL: `HIPOBJ_DAEMON` when set, else in process.
    pub daemon_socket: *const c_char,
}

/// `hipObjDcTokenProvider_t`: `(ctx, addr, size, op, out, outSize) -> 0` with a NUL-terminated
/// descriptor in `out`, non-zero for none.
pub type DcTokenProviderFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    addr: u64,
    size: u64,
    op: c_int,
    out: *mut c_char,
    out_size: usize,
) -> c_int;

/// `HIPOBJ_DC_TOKEN_MAX`: bytes of the buffer a provider writes, NUL included (a descriptor is
/// 81 characters, 115 with the address/size suffix).
pub const DC_TOKEN_MAX: usize = 128;

/// `hipObjOp_t`: one entry of a batch submission.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipObjOp {
    /// `HIPOBJ_OP_*`.
    pub kind: u32,
    /// `HIPOBJ_OPF_*` flags.
    pub flags: u32,
    /// Object from `hipObjOpen`.
    pub handle: *mut c_void,
    /// Pointer inside a registered buffer: destination (GET) or source (PUT).
    pub buf: *mut c_void,
    /// Bytes: the destination capacity (GET), the range length (RANGE_GET), the object or
    /// part length (PUT, UPLOAD_PART); 0 for the other multipart kinds.
    pub size: u64,
    /// Object offset (RANGE_GET); must be 0 otherwise.
    pub offset: u64,
    /// Echoed in the completion.
    pub user_data: u64,
    /// Relative deadline in nanoseconds from when the engine takes the entry; 0: the default
    /// (60 s).
    pub deadline_ns: u64,
    /// Multipart upload id, from the CREATE_MULTIPART completion's `aux` (UPLOAD_PART,
    /// COMPLETE_MULTIPART, ABORT_MULTIPART).
    pub upload_id: u64,
    /// Part number 1..=10000 (UPLOAD_PART); the number of parts, uploaded as 1..=N
    /// (COMPLETE_MULTIPART).
    pub part_number: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// `hipObjCompletion_t`: the outcome of one batch entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HipObjCompletion {
    /// The entry's `userData`.
    pub user_data: u64,
    /// Bytes moved (GET: the object's size).
    pub bytes: u64,
    /// `hipObjOpError_t`.
    pub op_error: c_int,
    /// Positive errno (`ENOENT`, `EACCES`, ...) of a failure, 0 on success.
    pub errnum: c_int,
    /// `HIPOBJ_ERRCLASS_*` of a failure, 0 on success.
    pub error_class: u32,
    /// `HIPOBJ_COMPLETION_*` bits.
    pub flags: u32,
    /// Per kind: CREATE_MULTIPART, the new upload's id; GET and RANGE_GET, the object's total
    /// size when the server named it (else 0); 0 for the others.
    pub aux: u64,
}

/// `HIPOBJ_OP_GET`: whole object into `buf` (fails if larger than `size`).
pub const OP_GET: u32 = 0;
/// `HIPOBJ_OP_RANGE_GET`: `size` bytes from object `offset`.
pub const OP_RANGE_GET: u32 = 1;
/// `HIPOBJ_OP_PUT`: `size` bytes as the whole object.
pub const OP_PUT: u32 = 2;
/// `HIPOBJ_OP_UPLOAD_PART`: part `partNumber` of upload `uploadId`, `size` bytes from `buf`.
pub const OP_UPLOAD_PART: u32 = 3;
/// `HIPOBJ_OP_CREATE_MULTIPART`: starts a multipart upload of the handle's object; the
/// completion's `aux` is its id.
pub const OP_CREATE_MULTIPART: u32 = 4;
/// `HIPOBJ_OP_COMPLETE_MULTIPART`: completes upload `uploadId` from its parts
/// `1..=partNumber`.
pub const OP_COMPLETE_MULTIPART: u32 = 5;
/// `HIPOBJ_OP_ABORT_MULTIPART`: aborts upload `uploadId` and discards its parts.
pub const OP_ABORT_MULTIPART: u32 = 6;

/// `HIPOBJ_OPF_NO_RETRY`: never retry this entry.
pub const OPF_NO_RETRY: u32 = 1;
/// Every defined `HIPOBJ_OPF_*` bit.
pub const OPF_ALL: u32 = OPF_NO_RETRY;

/// `HIPOBJ_COMPLETION_RETRIED`: the operation was retried before this outcome.
pub const COMPLETION_RETRIED: u32 = 1;
/// `HIPOBJ_COMPLETION_HTTP`: the bytes moved over HTTP.
pub const COMPLETION_HTTP: u32 = 2;
/// `HIPOBJ_COMPLETION_RDMA`: the bytes moved over RDMA.
pub const COMPLETION_RDMA: u32 = 4;
/// `HIPOBJ_COMPLETION_VERIFIED`: a server checksum proved the bytes of this success (GET,
/// RANGE_GET: the bytes received; PUT, UPLOAD_PART: the bytes sent; COMPLETE_MULTIPART: the
/// whole object). Clear on a success: nothing proved them beyond their count.
pub const COMPLETION_VERIFIED: u32 = 1 << 12;
/// `HIPOBJ_CONFIG_VERIFY` (`hipObjConfig_t.flags`): a `hipObjGet`/`hipObjPut` whose bytes no
/// server checksum proved fails with `hipObjIntegrityError` instead of succeeding.
pub const CONFIG_VERIFY: u32 = 1;
/// Every defined `HIPOBJ_CONFIG_*` bit.
pub const CONFIG_ALL: u32 = CONFIG_VERIFY;
/// `HIPOBJ_COMPLETION_DIALECT_SHIFT`: where the wire dialect sits in a completion's flags
/// (`ring_api::WireDialect` values, 4 bits).
pub const COMPLETION_DIALECT_SHIFT: u32 = 8;

/// `HIPOBJ_COMPLETION_DIALECT_MASK`.
pub const COMPLETION_DIALECT_MASK: u32 = 0xF << COMPLETION_DIALECT_SHIFT;
/// `HIPOBJ_COMPLETION_PATH_SHIFT`: where the data path (`HIPOBJ_PATH_*`) sits in a
/// completion's flags.
pub const COMPLETION_PATH_SHIFT: u32 = 4;
/// `HIPOBJ_COMPLETION_PATH_MASK`.
pub const COMPLETION_PATH_MASK: u32 = 0xF << COMPLETION_PATH_SHIFT;
/// `HIPOBJ_PATH_NONE`: no payload moved.
pub const PATH_NONE: u32 = 0;
/// `HIPOBJ_PATH_HTTP`: the HTTP body.
pub const PATH_HTTP: u32 = 1;
/// `HIPOBJ_PATH_RDMA_SOFT`: RDMA over the soft fabric (RC emulated over TCP).
pub const PATH_RDMA_SOFT: u32 = 2;
/// `HIPOBJ_PATH_RDMA_VERBS`: RDMA over libibverbs (RoCE, InfiniBand, Soft-RoCE).
pub const PATH_RDMA_VERBS: u32 = 3;
/// `HIPOBJ_STATS_PATHS`: entries of `hipObjStats_t.opsByPath` / `bytesByPath`.
pub const STATS_PATHS: usize = 4;
/// `HIPOBJ_STATS_DIALECTS`: entries of `hipObjStats_t.opsByDialect`.
pub const STATS_DIALECTS: usize = 8;

/// `hipObjStats_t`: operations of this library instance by the path and dialect that carried
/// them.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HipObjStats {
    /// Completed operations (synchronous and batch), successful or not.
    pub ops: u64,
    /// Of those, failed ones.
    pub failed_ops: u64,
    /// Successful operations per `HIPOBJ_PATH_*`.
    pub ops_by_path: [u64; STATS_PATHS],
    /// Payload bytes of successful operations per `HIPOBJ_PATH_*`.
    pub bytes_by_path: [u64; STATS_PATHS],
    /// Successful operations per dialect value (0 none, 1 HTTP, 2 rc-persistent,
    /// 3 hipobj-rc-v2, 4 cuObject).
    pub ops_by_dialect: [u64; STATS_DIALECTS],
}

/// `HIPOBJ_RDMA_OP_PUT` (server RDMA READ).
pub const RDMA_OP_PUT: c_int = 0;
/// `HIPOBJ_RDMA_OP_GET` (server RDMA WRITE).
pub const RDMA_OP_GET: c_int = 1;

/// `HIPOBJ_VERSION_MAJOR`, from the crate version.
pub const VERSION_MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");
/// `HIPOBJ_VERSION_MINOR`.
pub const VERSION_MINOR: &str = env!("CARGO_PKG_VERSION_MINOR");
/// `HIPOBJ_VERSION_PATCH`.
pub const VERSION_PATCH: &str = env!("CARGO_PKG_VERSION_PATCH");

/// Layout facts the header test compares with the C compiler's (`offsetof` / `sizeof`).
pub fn layout_facts() -> Vec<(&'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("sizeof(hipObjError_t)", size_of::<HipObjError>()),
        (
            "offsetof(hipObjError_t, opError)",
            offset_of!(HipObjError, op_error),
        ),
        (
            "offsetof(hipObjError_t, hipError)",
            offset_of!(HipObjError, hip_error),
        ),
        ("sizeof(hipObjConfig_t)", size_of::<HipObjConfig>()),
        (
            "offsetof(hipObjConfig_t, endpoint)",
            offset_of!(HipObjConfig, endpoint),
        ),
        (
            "offsetof(hipObjConfig_t, region)",
            offset_of!(HipObjConfig, region),
        ),
        (
            "offsetof(hipObjConfig_t, accessKey)",
            offset_of!(HipObjConfig, access_key),
        ),
        (
            "offsetof(hipObjConfig_t, secretKey)",
            offset_of!(HipObjConfig, secret_key),
        ),
        (
            "offsetof(hipObjConfig_t, flags)",
            offset_of!(HipObjConfig, flags),
        ),
        (
            "offsetof(hipObjConfig_t, gpuDevice)",
            offset_of!(HipObjConfig, gpu_device),
        ),
        (
            "offsetof(hipObjConfig_t, nicHint)",
            offset_of!(HipObjConfig, nic_hint),
        ),
        (
            "offsetof(hipObjConfig_t, dialect)",
            offset_of!(HipObjConfig, dialect),
        ),
        (
            "offsetof(hipObjConfig_t, fabric)",
            offset_of!(HipObjConfig, fabric),
        ),
        (
            "offsetof(hipObjConfig_t, dcTokenProvider)",
            offset_of!(HipObjConfig, dc_token_provider),
        ),
        (
            "offsetof(hipObjConfig_t, dcTokenContext)",
            offset_of!(HipObjConfig, dc_token_context),
        ),
        (
            "offsetof(hipObjConfig_t, stripePolicy)",
            offset_of!(HipObjConfig, stripe_policy),
        ),
        (
            "offsetof(hipObjConfig_t, stripeThreshold)",
            offset_of!(HipObjConfig, stripe_threshold),
        ),
        (
            "offsetof(hipObjConfig_t, stripeChunk)",
            offset_of!(HipObjConfig, stripe_chunk),
        ),
        (
            "offsetof(hipObjConfig_t, daemonSocket)",
            offset_of!(HipObjConfig, daemon_socket),
        ),
        ("sizeof(hipObjOp_t)", size_of::<HipObjOp>()),
        ("offsetof(hipObjOp_t, kind)", offset_of!(HipObjOp, kind)),
        ("offsetof(hipObjOp_t, flags)", offset_of!(HipObjOp, flags)),
        ("offsetof(hipObjOp_t, handle)", offset_of!(HipObjOp, handle)),
        ("offsetof(hipObjOp_t, buf)", offset_of!(HipObjOp, buf)),
        ("offsetof(hipObjOp_t, size)", offset_of!(HipObjOp, size)),
        ("offsetof(hipObjOp_t, offset)", offset_of!(HipObjOp, offset)),
        (
            "offsetof(hipObjOp_t, userData)",
            offset_of!(HipObjOp, user_data),
        ),
        (
            "offsetof(hipObjOp_t, deadlineNs)",
            offset_of!(HipObjOp, deadline_ns),
        ),
        (
            "offsetof(hipObjOp_t, uploadId)",
            offset_of!(HipObjOp, upload_id),
        ),
        (
            "offsetof(hipObjOp_t, partNumber)",
            offset_of!(HipObjOp, part_number),
        ),
        (
            "offsetof(hipObjOp_t, reserved)",
            offset_of!(HipObjOp, reserved),
        ),
        ("sizeof(hipObjStats_t)", size_of::<HipObjStats>()),
        ("offsetof(hipObjStats_t, ops)", offset_of!(HipObjStats, ops)),
        (
            "offsetof(hipObjStats_t, failedOps)",
            offset_of!(HipObjStats, failed_ops),
        ),
        (
            "offsetof(hipObjStats_t, opsByPath)",
            offset_of!(HipObjStats, ops_by_path),
        ),
        (
            "offsetof(hipObjStats_t, bytesByPath)",
            offset_of!(HipObjStats, bytes_by_path),
        ),
        (
            "offsetof(hipObjStats_t, opsByDialect)",
            offset_of!(HipObjStats, ops_by_dialect),
        ),
        ("sizeof(hipObjCompletion_t)", size_of::<HipObjCompletion>()),
        (
            "offsetof(hipObjCompletion_t, userData)",
            offset_of!(HipObjCompletion, user_data),
        ),
        (
            "offsetof(hipObjCompletion_t, bytes)",
            offset_of!(HipObjCompletion, bytes),
        ),
        (
            "offsetof(hipObjCompletion_t, opError)",
            offset_of!(HipObjCompletion, op_error),
        ),
        (
            "offsetof(hipObjCompletion_t, errnum)",
            offset_of!(HipObjCompletion, errnum),
        ),
        (
            "offsetof(hipObjCompletion_t, errorClass)",
            offset_of!(HipObjCompletion, error_class),
        ),
        (
            "offsetof(hipObjCompletion_t, flags)",
            offset_of!(HipObjCompletion, flags),
        ),
        (
            "offsetof(hipObjCompletion_t, aux)",
            offset_of!(HipObjCompletion, aux),
        ),
    ]
}

/// Integer constants the header test compares with the header's macros and enumerators.
pub fn constant_facts() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = OpError::ALL
        .iter()
        .map(|e| (e.c_name().to_owned(), *e as i64))
        .collect();
    let num = |s: &str| s.parse::<i64>().unwrap_or(-1);
    v.extend(
        [
            ("HIPOBJ_OP_GET", i64::from(OP_GET)),
            ("HIPOBJ_OP_RANGE_GET", i64::from(OP_RANGE_GET)),
            ("HIPOBJ_OP_PUT", i64::from(OP_PUT)),
            ("HIPOBJ_OP_UPLOAD_PART", i64::from(OP_UPLOAD_PART)),
            ("HIPOBJ_OP_CREATE_MULTIPART", i64::from(OP_CREATE_MULTIPART)),
            (
                "HIPOBJ_OP_COMPLETE_MULTIPART",
                i64::from(OP_COMPLETE_MULTIPART),
            ),
            ("HIPOBJ_OP_ABORT_MULTIPART", i64::from(OP_ABORT_MULTIPART)),
            ("HIPOBJ_OPF_NO_RETRY", i64::from(OPF_NO_RETRY)),
            ("HIPOBJ_COMPLETION_RETRIED", i64::from(COMPLETION_RETRIED)),
            ("HIPOBJ_COMPLETION_HTTP", i64::from(COMPLETION_HTTP)),
            ("HIPOBJ_COMPLETION_RDMA", i64::from(COMPLETION_RDMA)),
            ("HIPOBJ_COMPLETION_VERIFIED", i64::from(COMPLETION_VERIFIED)),
            ("HIPOBJ_CONFIG_VERIFY", i64::from(CONFIG_VERIFY)),
            (
                "HIPOBJ_COMPLETION_DIALECT_SHIFT",
                i64::from(COMPLETION_DIALECT_SHIFT),
            ),
            (
                "HIPOBJ_COMPLETION_DIALECT_MASK",
                i64::from(COMPLETION_DIALECT_MASK),
            ),
            (
                "HIPOBJ_COMPLETION_PATH_SHIFT",
                i64::from(COMPLETION_PATH_SHIFT),
            ),
            (
                "HIPOBJ_COMPLETION_PATH_MASK",
                i64::from(COMPLETION_PATH_MASK),
            ),
            ("HIPOBJ_PATH_NONE", i64::from(PATH_NONE)),
            ("HIPOBJ_PATH_HTTP", i64::from(PATH_HTTP)),
            ("HIPOBJ_PATH_RDMA_SOFT", i64::from(PATH_RDMA_SOFT)),
            ("HIPOBJ_PATH_RDMA_VERBS", i64::from(PATH_RDMA_VERBS)),
            ("HIPOBJ_STATS_PATHS", STATS_PATHS as i64),
            ("HIPOBJ_STATS_DIALECTS", STATS_DIALECTS as i64),
            ("HIPOBJ_FABRIC_AUTO", i64::from(crate::fabric::FABRIC_AUTO)),
            ("HIPOBJ_FABRIC_HTTP", i64::from(crate::fabric::FABRIC_HTTP)),
            ("HIPOBJ_FABRIC_SOFT", i64::from(crate::fabric::FABRIC_SOFT)),
            (
                "HIPOBJ_FABRIC_VERBS",
                i64::from(crate::fabric::FABRIC_VERBS),
            ),
            (
                "HIPOBJ_STRIPE_DEFAULT",
                i64::from(crate::stripe::STRIPE_DEFAULT),
            ),
            ("HIPOBJ_STRIPE_OFF", i64::from(crate::stripe::STRIPE_OFF)),
            (
                "HIPOBJ_STRIPE_BEST_TIER",
                i64::from(crate::stripe::STRIPE_BEST_TIER),
            ),
            ("HIPOBJ_STRIPE_ALL", i64::from(crate::stripe::STRIPE_ALL)),
            ("HIPOBJ_DIALECT_AUTO", 0),
            ("HIPOBJ_DIALECT_RC_PERSISTENT", 1),
            ("HIPOBJ_DIALECT_RC_V2", 2),
            ("HIPOBJ_DIALECT_HTTP", 3),
            ("HIPOBJ_DIALECT_CUOBJECT", 4),
            ("HIPOBJ_DC_TOKEN_MAX", DC_TOKEN_MAX as i64),
            ("HIPOBJ_RDMA_OP_PUT", i64::from(RDMA_OP_PUT)),
            ("HIPOBJ_RDMA_OP_GET", i64::from(RDMA_OP_GET)),
            (
                "HIPOBJ_MAX_REGISTRATION",
                crate::registry::MAX_REGISTRATION as i64,
            ),
            ("HIPOBJ_VERSION_MAJOR", num(VERSION_MAJOR)),
            ("HIPOBJ_VERSION_MINOR", num(VERSION_MINOR)),
            ("HIPOBJ_VERSION_PATCH", num(VERSION_PATCH)),
        ]
        .map(|(n, x)| (n.to_owned(), x)),
    );
    for c in [
        ring_api::ErrorClass::None,
        ring_api::ErrorClass::Invalid,
        ring_api::ErrorClass::Local,
        ring_api::ErrorClass::Cancelled,
        ring_api::ErrorClass::Deadline,
        ring_api::ErrorClass::Client,
        ring_api::ErrorClass::Server,
        ring_api::ErrorClass::Transport,
        ring_api::ErrorClass::Integrity,
    ] {
        v.push((
            format!("HIPOBJ_ERRCLASS_{}", format!("{c:?}").to_ascii_uppercase()),
            c as i64,
        ));
    }
    v
}
