//! `hipobj-capi`: the hipObject C API (`libhipobj.so`, `libhipobj.a`, `include/hipobj.h`) on
//! top of the Rust engine.
//!
//! C and C++ programs (inference servers, NIXL-style plugins) use the engine through the
//! function names and types of the public ROCm hipObject API — `hipObjInit`,
//! `hipObjBufRegister`, `hipObjGet`/`hipObjPut`, the token helpers — plus object handles
//! (`hipObjOpen`) and a batch extension mirroring the engine's rings (`hipObjQueue*`). The
//! reference for C callers is `include/hipobj.h` and `docs/c-api.md`.
//!
//! # Layout
//! - [`ffi`]: every `extern "C"` function; the only module with `unsafe` code. Catches panics,
//!   checks pointers, converts C values to Rust values and back.
//! - [`state`]: the process-wide library instance (engine, handles, queue pool).
//! - [`fabric`]: `config.fabric` → the engine's fabric; `nicHint` goes straight to
//!   `EngineBuilder::nics`.
//! - [`log`]: `HIPOBJ_LOG`, the engine's events on stderr.
//! - [`stats`]: which path and dialect carried each op.
//! - [`registry`]: pointer → (engine buffer handle, offset), sorted by address.
//! - [`io`]: synchronous GET/PUT, judged by [`proof`] (verified, unverified,
//!   `HIPOBJ_CONFIG_VERIFY`); [`batch`]: the queue extension; [`diag`]: naming the S3 error
//!   behind a client error; [`token`]: the pure RDMA token helpers; [`error`]: codes and
//!   messages; [`types`]: the `#[repr(C)]` types.
//!
//! # Safety model
//! `#![deny(unsafe_code)]` at the root; only `ffi` opts out, and each `unsafe` block there
//! carries a `SAFETY:` comment tying it to the contract of its function in the header.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod batch;
pub mod diag;
pub mod error;
pub mod fabric;
pub mod ffi;
pub mod io;
pub mod log;
pub mod proof;
pub mod registry;
pub mod state;
pub mod stats;
pub mod stripe;
pub mod token;
pub mod types;

/// Tokens issued to C and not yet released (process-wide, so `hipObjPutRdmaToken` works even
/// after `hipObjShutdown`).
pub fn issued_tokens() -> &'static token::Issued {
    static ISSUED: std::sync::OnceLock<token::Issued> = std::sync::OnceLock::new();
    ISSUED.get_or_init(token::Issued::default)
}
