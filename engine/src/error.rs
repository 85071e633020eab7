//! The engine's control-path error type.
//!
//! Control-path calls (building the engine, registering memory, creating queues, reading
//! completed data) return [`EngineError`]. The data path never allocates an error: a failed
//! operation completes with a [`ring_api::Cqe`] whose `result` is `-errno`
//! ([`ring_api::ErrorCode`]) and whose flags carry the [`ring_api::ErrorClass`].

use std::io;
use std::time::Duration;

use ring_api::{BufHandle, InternError, SetupError};

/// Why a control-path call failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No endpoint was configured (builder, `AWS_ENDPOINT_URL` or the profile).
    #[error("no endpoint URL configured (EngineBuilder::endpoint_url or AWS_ENDPOINT_URL)")]
    NoEndpoint,
    /// The endpoint URL does not parse.
    #[error("invalid endpoint URL: {0}")]
    Endpoint(#[source] s3_lite::s3::EndpointError),
    /// Credentials could not be resolved.
    #[error("credentials: {0}")]
    Credentials(#[source] s3_lite::credentials::CredentialsError),
    /// The signer rejected the identity or region (e.g. a `/` in the region).
    #[error("signer: {0}")]
    Signing(#[source] s3_lite::sigv4::SigningError),
    /// The endpoint host name did not resolve to an address.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The TLS configuration for an `https://` endpoint could not be built (an unreadable or
    /// empty CA bundle).
    #[error("TLS: {0}")]
    Tls(#[source] s3_lite::net::tls::TlsError),
    /// A feature this build does not implement (the message says which).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A builder setting is out of range (the message says which).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A NIC named to `EngineBuilder::nics` / `verbs_device` (or the C API's `nicHint`) is not
    /// an RDMA NIC of this host: no device name, netdev or PCI address matches.
    #[error("no RDMA NIC matches {hint:?} by name, netdev or PCI address ({})", nic_list(.available))]
    NicNotFound {
        /// The hint as given.
        hint: String,
        /// The RDMA NICs this host has (empty: none).
        available: Vec<String>,
    },
    /// `Fabric::Verbs` was asked for and no verbs device could be opened (no RDMA device
    /// under `/sys/class/infiniband`, libibverbs missing or listing none, the named device
    /// absent, or `ibv_open_device` failing with `errno`). `Fabric::Auto` falls back to the
    /// soft fabric or HTTP instead; `Fabric::Verbs` never carries payloads over HTTP unasked.
    #[error(
        "Fabric::Verbs: no RDMA verbs device could be opened{}: {reason} (Fabric::Auto falls \
         back to the soft fabric or HTTP)",
        device_suffix(.device.as_deref())
    )]
    VerbsUnavailable {
        /// The device asked for (`verbs_device`, a NIC of `nics`); `None`: the first one
        /// libibverbs lists.
        device: Option<String>,
        /// What is missing, one sentence.
        reason: String,
        /// The OS error of `ibv_open_device` (or of another failing verb), when there was one.
        errno: Option<i32>,
    },
    /// The sysfs topology could not be read for automatic placement.
    #[error("topology: {0}")]
    Topology(#[source] numa::TopoError),
    /// A worker thread could not be started.
    #[error("spawning a worker thread: {0}")]
    Spawn(#[source] io::Error),
    /// Setting up the worker's poller failed.
    #[error("creating the event poller: {0}")]
    Poller(#[source] io::Error),
    /// Host memory allocation failed.
    #[error("cannot allocate {len} bytes of registered memory")]
    Alloc {
        /// Requested length.
        len: usize,
    },
    /// `mlock` failed for a pinned registration (see `RLIMIT_MEMLOCK`).
    #[error(
        "cannot pin {len} bytes with mlock (raise RLIMIT_MEMLOCK or register unpinned): {source}"
    )]
    Pin {
        /// Requested length.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The handle names no live registration.
    #[error("unknown buffer handle {}", .0.0)]
    BadHandle(BufHandle),
    /// `offset + len` lies outside the registration (or overflows).
    #[error("range {offset}+{len} is outside the {size}-byte registration")]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Registration size.
        size: u64,
    },
    /// The range overlaps an operation in flight (or a view / deregistration in progress).
    #[error("buffer range is in use by an in-flight operation or a live view")]
    Busy,
    /// `deregister` gave up waiting for in-flight operations.
    #[error("registration still in use after {0:?}")]
    BusyTimeout(Duration),
    /// Ring construction failed (bad depth).
    #[error("queue setup: {0}")]
    Ring(#[source] SetupError),
    /// The object name was rejected by the interner.
    #[error("object name: {0}")]
    Intern(#[source] InternError),
    /// A device registration could not get the GPUDirect tier under `GpuDirect::Require`.
    #[error(transparent)]
    GpuDirect(#[from] crate::gpu::GpuDirectError),
    /// The engine's workers have stopped.
    #[error("the engine has shut down")]
    Shutdown,

    /// Talking to the node daemon failed, or it refused a request (the message names the
    /// socket and the daemon's reason).
    #[error("hipobj daemon at {0}")]
    Daemon(String),
    /// A GPU runtime call the engine made for the caller failed (copying a device
    /// registration's bytes in [`crate::Engine::read`] / [`crate::Engine::copy_in`]).
    #[error("GPU: {0}")]
    Gpu(#[source] crate::gpu::GpuError),
}

fn device_suffix(device: Option<&str>) -> String {
    device.map_or_else(String::new, |d| format!(" ({d})"))
}

fn nic_list(names: &[String]) -> String {
    if names.is_empty() {
        "this host has no RDMA NIC".to_owned()
    } else {
        format!("NICs here: {}", names.join(", "))
    }
}
