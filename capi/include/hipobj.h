/*
 * hipobj.h -- the hipObject C API of hipObject-rs (libhipobj.so / libhipobj.a).
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * Source-compatible with the public ROCm hipObject API for the names, types and
 * enum values it shares (hipObjOpError_t 0..11, hipObjError_t, hipObjConfig_t,
 * hipObjHandle_t, the token helpers), with these differences:
 *   - hipObjGet / hipObjPut take (handle, buf, size, offset): the library sends
 *     the S3 request itself, so the seed's hipObjOps_t callbacks are not taken;
 *   - object handles come from hipObjOpen(bucket, key, &handle);
 *   - a batch extension (hipObjQueue*), hipObjGetLastErrorMessage and the
 *     path/dialect report (hipObjGetStats, hipObjGetLastOpInfo) are added.
 *   - hipObjConfig_t gains dialect, fabric and striping (HIPOBJ_DIALECT_*, HIPOBJ_FABRIC_*,
 *     HIPOBJ_STRIPE_*)
 *     after the seed's fields (source-compatible; rebuild against this header).
 * Maintained by hand; capi/tests/header.rs checks it against the library
 * (exported symbols both ways, struct layouts, every constant). The full
 * guide is docs/c-api.md.
 *
 * Thread safety (per function, see each comment): every function may be called
 * from any thread. hipObjInit and hipObjShutdown must not race with each other
 * or with other calls that expect the library to stay initialized; calls racing
 * a shutdown either complete or fail with hipObjNotInitialized, never crash.
 */
#ifndef HIPOBJ_H
#define HIPOBJ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(__GNUC__)
#define HIPOBJ_API __attribute__((visibility("default")))
#else
#define HIPOBJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* off_t object offsets are 64-bit in this ABI (LP64 Linux, or _FILE_OFFSET_BITS=64). */
typedef char hipobj_off_t_must_be_64_bit[sizeof(off_t) == 8 ? 1 : -1];

/* ------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------ */

/** Library version (the crate version of hipobj-capi). */
#define HIPOBJ_VERSION_MAJOR 0
#define HIPOBJ_VERSION_MINOR 1
#define HIPOBJ_VERSION_PATCH 0

/* ------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------ */

/** Base value for hipObject error codes (kept from the seed header; unused). */
#define HIPOBJ_BASE_ERR 6000

/**
 * Operation error codes. 0..11 are the seed's, in its order; 12..15 take the
 * values they have in the mmgaggle/hipObject fork built with its V2 and OFI API
 * groups; 16 and up are hipObject-rs additions. Values never change.
 */
typedef enum {
  hipObjSuccess = 0,
  hipObjInvalidValue = 1,         /**< NULL pointer, unknown handle, bad value */
  hipObjNotInitialized = 2,       /**< hipObjInit has not been called */
  hipObjAlreadyInitialized = 3,   /**< hipObjInit called twice */
  hipObjRdmaError = 4,            /**< RDMA failure; hipObjGetRdmaToken (tokens stay inside the engine) */
  hipObjS3Error = 5,              /**< the server rejected the request (HTTP 4xx/5xx) */
  hipObjBufNotRegistered = 6,     /**< pointer not inside a registered buffer */
  hipObjBufAlreadyRegistered = 7, /**< range overlaps an existing registration */
  hipObjNicNotFound = 8,          /**< no usable RDMA NIC */
  hipObjDmabufNotSupported = 9,   /**< device memory cannot be registered */
  hipObjSizeTooLarge = 10,        /**< beyond the registration / 4 GiB / destination */
  hipObjInternalError = 11,       /**< bug (including a caught Rust panic) */
  hipObjNotSupported = 12,        /**< server does not speak the requested protocol */
  hipObjBusy = 13,                /**< range in use by an op in flight, or throttled */
  hipObjOpNotSupported = 14,      /**< operation not implemented by this build */
  hipObjChecksumMismatch = 15,    /**< bytes do not match their checksum */
  hipObjTimeout = 16,             /**< operation deadline exceeded */
  hipObjCancelled = 17,           /**< operation aborted (queue destroyed, cancel) */
  hipObjNetworkError = 18,        /**< connection refused/reset after retries */
  hipObjIntegrityError = 19       /**< inconsistent reply (short body, wrong range) */
} hipObjOpError_t;

/**
 * Result of every call: the operation error and the GPU runtime's error (HIP or
 * CUDA error code of a failed GPU call, else 0). The field keeps the seed's name.
 */
typedef struct {
  hipObjOpError_t opError;
  int hipError;
} hipObjError_t;

#define HIPOBJ_SUCCESS ((hipObjError_t){hipObjSuccess, 0})

/**
 * Static description of an error code (never NULL; unknown codes get a generic
 * text). Thread safety: any thread, any time, also before hipObjInit.
 */
HIPOBJ_API const char* hipObjGetErrorString(hipObjOpError_t err);

/**
 * Detail of the calling thread's most recent failed call: what failed and why,
 * e.g. "GET s3://b/k: access denied (errno 13, class Client); path and
 * dialect not recorded for a failed op; the latest successful op went over path
 * rdma-soft, dialect rc-persistent (requested auto); server error
 * SignatureDoesNotMatch: ... (HTTP 403)": the engine's errno and class, the data
 * path and dialect, and for HTTP 4xx the server's S3 code. "" after a successful
 * call. The string
 * stays valid until the same thread's next hipObj* call.
 * Thread safety: per thread; any time.
 */
HIPOBJ_API const char* hipObjGetLastErrorMessage(void);

/* ------------------------------------------------------------------------
 * Types and configuration
 * ------------------------------------------------------------------------ */

/** Opaque object handle from hipObjOpen (a looked-up id, never dereferenced). */
typedef void* hipObjHandle_t;

/**
 * cuObject DC descriptor provider (hipObjConfig_t.dcTokenProvider): what
 * cuMemObjGetRDMAToken(ptr, size, 0, op, &desc) does. Mints the descriptor for
 * the `size` bytes at `addr` (the op's buffer range, inside a registered
 * buffer), `op` HIPOBJ_RDMA_OP_GET (the server writes into it) or
 * HIPOBJ_RDMA_OP_PUT (the server reads it): writes it NUL-terminated into `out`
 * (`outSize` = HIPOBJ_DC_TOKEN_MAX bytes) -- 81 characters
 * "%016x:%08x:%08x:%04x:%06x:%1x:%032x" (address, size, rkey, reserved, DCT
 * number, DC key kind, GID), optionally followed by ":<addr 16 hex>:<size 16
 * hex>" -- and returns 0. Non-zero, no NUL, or a descriptor naming another
 * address or fewer bytes: the op goes over HTTP instead (never an error).
 * Threading: called on the library's worker threads, never the caller's, from
 * several threads at once, once per RDMA attempt; it must be thread-safe, fast
 * and non-blocking, must not call hipObj* functions, and it and `ctx` must stay
 * valid from hipObjInit until hipObjShutdown returns.
 */
typedef int (*hipObjDcTokenProvider_t)(void* ctx, uint64_t addr, uint64_t size, int op,
                                       char* out, size_t outSize);
/** Size of the buffer a hipObjDcTokenProvider_t writes, NUL included. */
#define HIPOBJ_DC_TOKEN_MAX 128

/**
 * Configuration for hipObjInit. NULL strings fall back to the AWS conventions:
 * endpoint -> AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL or the profile's
 * endpoint_url; region -> AWS_REGION / AWS_DEFAULT_REGION, the profile, then
 * "us-east-1"; keys ->
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, then the profile (AWS_PROFILE or
 * "default") in ~/.aws/credentials and ~/.aws/config. Strings are copied.
 */
typedef struct {
  const char* endpoint;  /**< "http://host:port" or "https://..." (CA bundle: AWS_CA_BUNDLE / profile ca_bundle) */
  const char* region;    /**< signing region */
  const char* accessKey; /**< access key id */
  const char* secretKey; /**< secret access key */
  uint32_t flags;        /**< HIPOBJ_CONFIG_* bits (HIPOBJ_CONFIG_VERIFY); others reserved, 0 */
  int gpuDevice;         /**< HIP/CUDA device index, or -1: no GPU probing */
  const char* nicHint;   /**< verbs device name ("mlx5_0", "rxe0") or its PCI address ("0000:3b:00.0"); NULL: the default device */
  uint32_t dialect;      /**< HIPOBJ_DIALECT_*: 0 (AUTO, the default) negotiates */
  uint32_t fabric;       /**< HIPOBJ_FABRIC_*: 0 (AUTO, the default) picks the data path */
  hipObjDcTokenProvider_t dcTokenProvider; /**< cuObject descriptors; NULL: no cuObject dialect */
  void* dcTokenContext;  /**< passed to dcTokenProvider as ctx */
  uint32_t stripePolicy;    /**< HIPOBJ_STRIPE_*: 0 (DEFAULT) is BEST_TIER */
  uint64_t stripeThreshold; /**< smallest striped transfer in bytes; 0: 8 MiB */
  uint64_t stripeChunk;     /**< bytes per chunk, at most 5 GiB; 0: 4 MiB (a striped PUT's parts are at least 5 MiB) */
  const char* daemonSocket; /**< node daemon socket (`hipobj daemon`) to attach to instead of running the engine in this process; NULL: HIPOBJ_DAEMON if set, else in process. See docs/daemon.md */
} hipObjConfig_t;

/** hipObjConfig_t.flags: a hipObjGet/hipObjPut whose bytes no server checksum
 *  proved fails with hipObjIntegrityError (a PUT's object is stored all the same)
 *  instead of succeeding unverified. Without it such a call succeeds and
 *  hipObjGetLastOpVerified says 0. A checksum that disagrees is an error either
 *  way. Batch completions report the proof in HIPOBJ_COMPLETION_VERIFIED. */
#define HIPOBJ_CONFIG_VERIFY 1u

/** Striping (hipObjConfig_t.stripePolicy): a transfer of at least stripeThreshold
 *  bytes on memory bound to several NICs is split into stripeChunk-byte chunks,
 *  each its own op on a worker of the next NIC; the op completes once, when every
 *  chunk has. A striped PUT is a multipart upload (its ETag ends in "-N"); any
 *  failure aborts it. See docs/c-api.md and docs/engine.md. */
/** Striping: the engine's default (HIPOBJ_STRIPE_BEST_TIER). */
#define HIPOBJ_STRIPE_DEFAULT 0u
/** Striping: never split an op. */
#define HIPOBJ_STRIPE_OFF 1u
/** Striping: across the NICs a registration is bound to (its best PCIe tier or its NUMA node). */
#define HIPOBJ_STRIPE_BEST_TIER 2u
/** Striping: across every NIC the library's workers serve. */
#define HIPOBJ_STRIPE_ALL 3u

/** Fabric: RDMA when the endpoint pairs (verbs when this host has an RDMA
 *  device, else the soft fabric), learned per worker; HTTP bodies otherwise. An
 *  op waits at most 150 ms for a pairing in progress, then goes over HTTP. */
#define HIPOBJ_FABRIC_AUTO 0u
/** Fabric: payloads in the HTTP body only (never pairs). */
#define HIPOBJ_FABRIC_HTTP 1u
/** Fabric: the soft RDMA fabric (RC over TCP), always tried first; ops wait for
 *  the pairing, and a request the endpoint does not take over RDMA (a plain S3
 *  server) goes over HTTP. */
#define HIPOBJ_FABRIC_SOFT 2u
/** Fabric: RDMA over libibverbs (nicHint, else the first device); ops wait for
 *  the pairing; per-request HTTP fallback as SOFT. hipObjInit fails with
 *  hipObjNicNotFound when this host has no usable verbs device. */
#define HIPOBJ_FABRIC_VERBS 3u

/** Dialect: negotiate (rc-persistent, then hipobj-rc-v2, then cuObject with a
 *  dcTokenProvider, then HTTP; learned per endpoint). */
#define HIPOBJ_DIALECT_AUTO 0u
/** Dialect: rc-persistent only (then HTTP). */
#define HIPOBJ_DIALECT_RC_PERSISTENT 1u
/** Dialect: hipobj-rc-v2 only (then HTTP). */
#define HIPOBJ_DIALECT_RC_V2 2u
/** Dialect: payloads in the HTTP body only. */
#define HIPOBJ_DIALECT_HTTP 3u
/** Dialect: cuObject DC descriptors from dcTokenProvider, one request per op
 *  (then HTTP; hipObjInit refuses it without a provider). Under AUTO, cuObject
 *  is negotiated after rc-persistent and hipobj-rc-v2 when a provider is set. */
#define HIPOBJ_DIALECT_CUOBJECT 4u

/** Largest registration in bytes (inclusive): 4 GiB. */
#define HIPOBJ_MAX_REGISTRATION 4294967296ULL

/** RDMA token operation: server RDMA READ (client PUT). */
#define HIPOBJ_RDMA_OP_PUT 0
/** RDMA token operation: server RDMA WRITE (client GET). */
#define HIPOBJ_RDMA_OP_GET 1
/** x-amz-rdma-reply code of a server that declined RDMA (fall back to HTTP). */
#define HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED 501

/* ------------------------------------------------------------------------
 * Lifecycle
 * ------------------------------------------------------------------------ */

/**
 * Resolves credentials, starts the engine's worker threads. Does not contact
 * the server. fabric picks the data path (HIPOBJ_FABRIC_*); with the default
 * (AUTO) each worker pairs once with the endpoint over RDMA (verbs when this
 * host has an RDMA device -- nicHint picks which -- else the soft fabric) and
 * falls back to HTTP bodies when the endpoint does not pair (a plain S3
 * server); dialect chooses what is negotiated. hipObjGetStats /
 * hipObjCompletion_t.flags say which path and dialect carried each op.
 * HIPOBJ_LOG=error|warn|info|debug|trace in the environment prints the
 * engine's events at that level to stderr (unset: silent).
 * Errors: hipObjInvalidValue (NULL config, flags with bits other than
 * HIPOBJ_CONFIG_VERIFY, gpuDevice < -1,
 * dialect > 4, CUOBJECT without dcTokenProvider, fabric > 3, empty nicHint, no endpoint, unresolvable host,
 * bad credentials file or CA bundle, unknown HIPOBJ_LOG level),
 * hipObjNicNotFound (nicHint names no RDMA device of this host, or fabric is
 * VERBS and verbs cannot be used here), hipObjAlreadyInitialized.
 * If gpuDevice >= 0 the HIP/CUDA runtime is probed so that hipObjBufRegister
 * can recognise device pointers (and register them with the engine's staging).
 * Thread safety: call once, before other calls; not concurrently with Shutdown.
 */
HIPOBJ_API hipObjError_t hipObjInit(const hipObjConfig_t* config);

/**
 * Destroys all queues (aborting their operations), waits up to 30 s per buffer
 * for operations in flight, deregisters every buffer and stops the engine.
 * After it returns hipObjSuccess the library touches no registered memory.
 * Errors: hipObjNotInitialized; hipObjBusy if a buffer stayed in use.
 * Thread safety: not concurrently with Init; other threads' calls fail cleanly.
 */
HIPOBJ_API hipObjError_t hipObjShutdown(void);

/* ------------------------------------------------------------------------
 * Buffer registration
 * ------------------------------------------------------------------------ */

/**
 * Registers host memory [ptr, ptr+size) for hipObjGet/hipObjPut and batch ops.
 * The memory must stay valid until hipObjBufDeregister(ptr) or hipObjShutdown
 * returns success, and the caller must not touch bytes covered by an operation
 * in flight until it completed. Device memory (cudaMalloc/cuMemAlloc; hipMalloc
 * on the same path, untested on AMD) is recognised only when hipObjInit had
 * gpuDevice >= 0 and found a runtime; the engine registers it HOST-STAGED (not
 * dmabuf): a pinned mirror of the same size carries the bytes, and a GET (sync
 * or batch) completes only after its bytes were copied into VRAM; a PUT copies
 * device -> mirror before sending. Batch entries on device memory work too.
 * The range must lie in one device allocation (hipObjInvalidValue otherwise);
 * a failing GPU copy is hipObjInternalError with the runtime's code in hipError.
 * Errors: hipObjInvalidValue (NULL, size 0), hipObjSizeTooLarge (> 4 GiB),
 * hipObjBufAlreadyRegistered (overlaps a registration), hipObjNotInitialized.
 * Thread safety: any thread.
 */
HIPOBJ_API hipObjError_t hipObjBufRegister(void* ptr, size_t size);

/** mmgaggle/hipObject name for registering host memory; same as hipObjBufRegister. */
HIPOBJ_API hipObjError_t hipObjBufRegisterHost(void* hostPtr, size_t size);

/**
 * Allocates size bytes of host memory that the library owns, registers them,
 * and writes their address to *ptr; hipObjBufDeregister(*ptr) frees them
 * (hipObjShutdown too). In process this is ordinary memory (pinned where
 * mlock allows). Attached to a node daemon (config.daemonSocket or
 * HIPOBJ_DAEMON) it is a memory file this process and the daemon both map, so
 * the daemon moves bytes straight into it: the host memory a C program can use
 * through a daemon (hipObjBufRegister of malloc'ed memory is
 * hipObjOpNotSupported there). Contents start zeroed. Errors:
 * hipObjInvalidValue (NULL ptr, size 0), hipObjSizeTooLarge (> 4 GiB),
 * hipObjNotInitialized, and the engine's allocation errors.
 * Thread safety: any thread.
 */
HIPOBJ_API hipObjError_t hipObjBufAlloc(size_t size, void** ptr);

/**
 * Deregisters the buffer registered at exactly ptr. New operations on it fail
 * at once; waits up to 30 s for operations in flight. Errors:
 * hipObjBufNotRegistered (not a registration start), hipObjBusy (still in use
 * after 30 s: the buffer stays registered), hipObjNotInitialized.
 * Thread safety: any thread.
 */
HIPOBJ_API hipObjError_t hipObjBufDeregister(void* ptr);

/* ------------------------------------------------------------------------
 * Which path and dialect carried the bytes (the CLI's --json names)
 * ------------------------------------------------------------------------ */

/** Data paths (hipObjStats_t index, completion path field, hipObjGetLastOpInfo). */
#define HIPOBJ_PATH_NONE 0u       /**< "none": no payload moved */
#define HIPOBJ_PATH_HTTP 1u       /**< "http": the HTTP body */
#define HIPOBJ_PATH_RDMA_SOFT 2u  /**< "rdma-soft": RC emulated over TCP */
#define HIPOBJ_PATH_RDMA_VERBS 3u /**< "rdma-verbs": libibverbs (RoCE, IB, Soft-RoCE) */

/** Entries of hipObjStats_t.opsByPath / bytesByPath and of opsByDialect. */
#define HIPOBJ_STATS_PATHS 4
#define HIPOBJ_STATS_DIALECTS 8

/**
 * Counters of this library instance since hipObjInit, over hipObjGet/hipObjPut
 * and every reaped batch completion. Dialect values: 0 none, 1 HTTP,
 * 2 rc-persistent, 3 hipobj-rc-v2, 4 cuObject (hipObjDialectName).
 */
typedef struct {
  uint64_t ops;       /**< completed operations, successful or not */
  uint64_t failedOps; /**< of those, failed (counted nowhere else) */
  uint64_t opsByPath[HIPOBJ_STATS_PATHS];      /**< successful ops per HIPOBJ_PATH_* */
  uint64_t bytesByPath[HIPOBJ_STATS_PATHS];    /**< their payload bytes */
  uint64_t opsByDialect[HIPOBJ_STATS_DIALECTS]; /**< successful ops per dialect */
} hipObjStats_t;

/**
 * Copies the counters to *stats. Errors: hipObjInvalidValue (NULL),
 * hipObjNotInitialized. Thread safety: any thread (counters are atomic; a
 * snapshot taken while ops complete may mix before and after).
 */
HIPOBJ_API hipObjError_t hipObjGetStats(hipObjStats_t* stats);

/**
 * Path (HIPOBJ_PATH_*) and dialect of the calling thread's latest hipObjGet /
 * hipObjPut; 0 and 0 if it failed or none ran. Either pointer may be NULL.
 * Thread safety: per thread; any time.
 */
HIPOBJ_API hipObjError_t hipObjGetLastOpInfo(uint32_t* path, uint32_t* dialect);

/**
 * Writes 1 to *verified when a server checksum proved the bytes of the calling
 * thread's latest successful hipObjGet / hipObjPut (GET: a checksum of exactly
 * the bytes read; PUT: the server echoed the CRC64NVME of the bytes sent), 0
 * when nothing did (the call succeeded unverified: see HIPOBJ_CONFIG_VERIFY) or
 * it failed. Errors: hipObjInvalidValue (NULL). Thread safety: per thread.
 */
HIPOBJ_API hipObjError_t hipObjGetLastOpVerified(int* verified);

/** "none", "http", "rdma-soft", "rdma-verbs" ("unknown" otherwise). Static. */
HIPOBJ_API const char* hipObjPathName(uint32_t path);

/** "none", "http", "rc-persistent", "hipobj-rc-v2", "cuobject" ("unknown"). Static. */
HIPOBJ_API const char* hipObjDialectName(uint32_t dialect);

/* ------------------------------------------------------------------------
 * Objects and synchronous transfers
 * ------------------------------------------------------------------------ */

/**
 * Opens a handle naming bucket/key (no request is sent). Errors:
 * hipObjInvalidValue (NULL, invalid bucket name or key), hipObjNotInitialized.
 * Thread safety: any thread; a handle may be used by many threads at once.
 */
HIPOBJ_API hipObjError_t hipObjOpen(const char* bucket, const char* key,
                                    hipObjHandle_t* handle);

/** Closes a handle (operations already submitted with it are unaffected). */
HIPOBJ_API hipObjError_t hipObjClose(hipObjHandle_t handle);

/**
 * GET: reads size bytes starting at byte offset of the OBJECT into buf, which
 * may point anywhere inside a registered buffer (buf+size must stay inside it).
 * Blocks until done. The object must hold offset+size bytes. Retries transient
 * failures (5xx, throttling, resets) within a 60 s deadline.
 * Errors: hipObjInvalidValue (NULL, size 0, offset < 0, closed handle),
 * hipObjBufNotRegistered, hipObjSizeTooLarge (beyond the registration),
 * hipObjS3Error (404, 403, short object...: the last-error message names the
 * S3 error code, found with one read-only probe request), hipObjTimeout,
 * hipObjNetworkError, hipObjIntegrityError, hipObjBusy (range in use).
 * Thread safety: any thread, concurrently (each call uses its own ring).
 */
HIPOBJ_API hipObjError_t hipObjGet(hipObjHandle_t handle, void* buf,
                                   size_t size, off_t offset);

/**
 * PUT: stores size bytes from buf (inside a registered buffer) as the whole
 * object. offset must be 0 (S3 has no partial writes: hipObjOpNotSupported; to
 * write an object in parts, use the batch queue's HIPOBJ_OP_CREATE_MULTIPART,
 * HIPOBJ_OP_UPLOAD_PART and HIPOBJ_OP_COMPLETE_MULTIPART). Errors as hipObjGet.
 * Thread safety: any thread, concurrently.
 */
HIPOBJ_API hipObjError_t hipObjPut(hipObjHandle_t handle, const void* buf,
                                   size_t size, off_t offset);

/* ------------------------------------------------------------------------
 * RDMA token helpers (x-amz-rdma-token / x-amz-rdma-reply)
 * ------------------------------------------------------------------------ */

/**
 * Mints the 88-hex RC token for [ptr, ptr+size) of a registered buffer; release
 * it with hipObjPutRdmaToken. The engine mints its RDMA tokens per operation
 * itself and hands none to the caller: after checking the arguments
 * (hipObjInvalidValue, hipObjBufNotRegistered, hipObjSizeTooLarge) this returns
 * hipObjRdmaError with *outToken = NULL.
 */
HIPOBJ_API hipObjError_t hipObjGetRdmaToken(const void* ptr, size_t size,
                                            int op, char** outToken);

/** Releases a token from hipObjGetRdmaToken; anything else -> hipObjInvalidValue. */
HIPOBJ_API hipObjError_t hipObjPutRdmaToken(char* token);

/**
 * Parses an x-amz-rdma-reply value of replyLen bytes (< 512; trailing NUL, CR,
 * LF ignored): "ok..", "err..", "<code>", "<code>:<88-hex server token>".
 * 200/204/206 and 501 (declined: fall back to HTTP) write the code and return
 * hipObjSuccess; other codes write the code and return hipObjRdmaError ("err"
 * writes -1); malformed values return hipObjInvalidValue. Needs no hipObjInit.
 */
HIPOBJ_API hipObjError_t hipObjParseRdmaReply(const char* reply,
                                              size_t replyLen, int* httpCode);

/**
 * Writes the dotted-quad IPv4 address of the client NIC encoded in a token's
 * GID (::ffff:a.b.c.d) to nicIp, or "" if the GID is not IPv4-mapped. token is
 * NUL-terminated, bare 88-hex or with the ":<addr>:<size>" suffix. nicIpLen must
 * hold the text and its NUL (16 always suffices). Needs no hipObjInit.
 */
HIPOBJ_API hipObjError_t hipObjTokenClientNic(const char* token, char* nicIp,
                                              size_t nicIpLen);

/** Version text, e.g. "hipobj-rs 0.1.0 (...)". Static; any thread, any time. */
HIPOBJ_API const char* hipObjGetVersionString(void);

/* ------------------------------------------------------------------------
 * Batch extension: submission / completion queues (mirrors the engine rings)
 * ------------------------------------------------------------------------ */

/** Opaque queue handle. */
typedef struct hipObjQueue* hipObjQueue_t;

/** hipObjOp_t.kind values. */
#define HIPOBJ_OP_GET 0         /**< whole object into buf (object must fit size) */
#define HIPOBJ_OP_RANGE_GET 1   /**< size bytes from object offset into buf */
#define HIPOBJ_OP_PUT 2         /**< size bytes from buf as the whole object */
#define HIPOBJ_OP_UPLOAD_PART 3 /**< part partNumber of upload uploadId, size bytes from buf */
#define HIPOBJ_OP_CREATE_MULTIPART 4   /**< starts a multipart upload; its id is the completion's aux */
#define HIPOBJ_OP_COMPLETE_MULTIPART 5 /**< completes uploadId from its parts 1..partNumber */
#define HIPOBJ_OP_ABORT_MULTIPART 6    /**< aborts uploadId and discards its parts */

/** hipObjOp_t.flags bits. */
#define HIPOBJ_OPF_NO_RETRY 1u /**< never retry this operation */

/** One submission. Zero-initialize, then set the fields the kind uses. */
typedef struct {
  uint32_t kind;          /**< HIPOBJ_OP_* */
  uint32_t flags;         /**< HIPOBJ_OPF_* */
  hipObjHandle_t handle;  /**< from hipObjOpen */
  void* buf;              /**< inside a registered buffer (destination or source) */
  uint64_t size;          /**< bytes (GET: destination capacity) */
  uint64_t offset;        /**< object offset (RANGE_GET; else 0) */
  uint64_t userData;      /**< echoed in the completion */
  uint64_t deadlineNs;    /**< relative deadline in ns; 0 = default (60 s) */
  uint64_t uploadId;      /**< UPLOAD_PART, COMPLETE_, ABORT_MULTIPART: the upload (CREATE's aux) */
  uint32_t partNumber;    /**< UPLOAD_PART: 1..10000; COMPLETE_MULTIPART: the number of parts */
  uint32_t reserved;      /**< must be 0 */
} hipObjOp_t;

/** hipObjCompletion_t.errorClass values (who failed). */
#define HIPOBJ_ERRCLASS_NONE 0
#define HIPOBJ_ERRCLASS_INVALID 1   /**< the entry was invalid; nothing was sent */
#define HIPOBJ_ERRCLASS_LOCAL 2     /**< buffer/handle problem on this side */
#define HIPOBJ_ERRCLASS_CANCELLED 3
#define HIPOBJ_ERRCLASS_DEADLINE 4
#define HIPOBJ_ERRCLASS_CLIENT 5    /**< HTTP 4xx */
#define HIPOBJ_ERRCLASS_SERVER 6    /**< HTTP 5xx / throttling after retries */
#define HIPOBJ_ERRCLASS_TRANSPORT 7 /**< connection failures after retries */
#define HIPOBJ_ERRCLASS_INTEGRITY 8 /**< inconsistent reply */

/** hipObjCompletion_t.flags bits. */
#define HIPOBJ_COMPLETION_RETRIED 1u /**< retried before this outcome */
#define HIPOBJ_COMPLETION_HTTP 2u    /**< bytes moved over HTTP */
#define HIPOBJ_COMPLETION_RDMA 4u    /**< bytes moved over RDMA */
/** A server checksum proved this success's bytes: GET, RANGE_GET the bytes read;
 *  PUT, UPLOAD_PART the bytes sent (their CRC64NVME echoed); COMPLETE_MULTIPART
 *  the whole object (its full-object CRC64NVME, from the Complete answer or the
 *  HEAD after it). Clear on a success: nothing proved the bytes (unverified; the
 *  caller decides, as HIPOBJ_CONFIG_VERIFY does for the synchronous calls). */
#define HIPOBJ_COMPLETION_VERIFIED 0x1000u
/** Bits 8..11 of a completion's flags: the wire dialect that carried the bytes
 *  (0 none, 1 HTTP, 2 rc-persistent, 3 hipobj-rc-v2, 4 cuObject). */
#define HIPOBJ_COMPLETION_DIALECT_SHIFT 8u
#define HIPOBJ_COMPLETION_DIALECT_MASK 0xF00u
/** Bits 4..7 of a completion's flags: the data path that carried the bytes
 *  (HIPOBJ_PATH_*; hipObjPathName gives its name). */
#define HIPOBJ_COMPLETION_PATH_SHIFT 4u
#define HIPOBJ_COMPLETION_PATH_MASK 0xF0u

/** One completion. */
typedef struct {
  uint64_t userData;       /**< the submission's userData */
  uint64_t bytes;          /**< bytes moved (GET: the object size) */
  hipObjOpError_t opError; /**< hipObjSuccess or the failure */
  int errnum;              /**< positive errno of a failure (EACCES, ENOENT...) */
  uint32_t errorClass;     /**< HIPOBJ_ERRCLASS_* */
  uint32_t flags;          /**< HIPOBJ_COMPLETION_* */
  uint64_t aux;            /**< CREATE_MULTIPART: the new upload's id; GET, RANGE_GET: the
                                object's total size when the server named it (else 0); else 0 */
} hipObjCompletion_t;

/**
 * Creates a queue with depth submission slots (1..1048576, rounded up to a power
 * of two) and 2*depth completion slots. Thread safety: any thread. A queue is
 * meant for one thread at a time; concurrent calls on one queue are serialized
 * (safe, but a blocking Reap delays Submit).
 */
HIPOBJ_API hipObjError_t hipObjQueueCreate(uint32_t depth, hipObjQueue_t* queue);

/**
 * Submits up to n entries in order and writes how many were accepted to
 * *submitted (fewer than n when the ring is full: reap, then submit the rest).
 * Every accepted entry completes exactly once. Entries the library rejects
 * itself (closed handle, unregistered buffer, UPLOAD_PART...) complete with an
 * error (errorClass INVALID or LOCAL) instead of failing the call.
 * Returns an error only for a bad queue/pointer or hipObjNotInitialized.
 */
HIPOBJ_API hipObjError_t hipObjQueueSubmit(hipObjQueue_t queue,
                                           const hipObjOp_t* ops, size_t n,
                                           size_t* submitted);

/**
 * Copies up to max completions to out and their count to *n. If none is ready,
 * waits up to timeoutMs (0: don't wait; negative: wait forever) for the first.
 * *n == 0 after a timeout is not an error.
 */
HIPOBJ_API hipObjError_t hipObjQueueReap(hipObjQueue_t queue,
                                         hipObjCompletion_t* out, size_t max,
                                         int timeoutMs, size_t* n);

/** Destroys a queue; operations still in flight are aborted (not reported). */
HIPOBJ_API hipObjError_t hipObjQueueDestroy(hipObjQueue_t queue);

#ifdef __cplusplus
}
#endif

#endif /* HIPOBJ_H */
