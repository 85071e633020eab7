//! `hipobj-gateway`: the S3 server side of hipObject.
//!
//! A blocking, multi-threaded S3 server (`std::net`, a fixed worker pool) built on the
//! sans-IO codecs of `s3-lite`: the server-side HTTP/1.1 decoder, the SigV4 verifier, the
//! checksum and RDMA header codecs. It serves S3 from a local directory (objects, multipart,
//! listings v1/v2, DeleteObjects, CopyObject, conditional requests, metadata, checksums) or
//! forwards every request it does not serve itself to an upstream S3 store unchanged, and
//! answers requests carrying `x-amz-rdma-token` through the [`rdma`] seam where the soft and
//! verbs fabrics plug in.
//!
//! ```no_run
//! let gw = hipobj_gateway::Gateway::builder()
//!     .listen("127.0.0.1:0")
//!     .root_dir("/tmp/objects")
//!     .credentials("AKIDEXAMPLE", "secret")
//!     .start()
//!     .unwrap();
//! println!("listening on http://{}", gw.local_addr());
//! gw.shutdown();
//! ```
//!
//! Modules: [`server`] (builder, threads, limits), [`conn`] (one connection), [`handler`]
//! (S3 operations), [`ops`] (the operations beyond the basic ones, one module each),
//! [`forward`] and [`relay`] (upstream mode's transparent path), [`auth`] (SigV4), [`body`]
//! (spooling and checksum verification), [`backend`] (trait, local directory, upstream
//! bridge), [`rdma`] (the fabric seam),
//! [`route`] (addressing), [`xml`], [`error`], [`time`]; [`fault_relay`] is the
//! fault-injecting TCP relay behind `hipobj debug relay` and the fault tests. Layout and behaviour: `docs/gateway.md`.
#![forbid(unsafe_code)]

pub mod auth;
pub mod backend;
pub mod body;
pub mod capabilities;
pub mod conn;
pub mod connect;
pub mod error;
pub mod fault_relay;
pub mod forward;
pub mod fuzzing;
mod gate;
pub mod handler;
mod handoff;
pub mod ops;
pub mod rdma;
pub mod rdma_target;
pub mod relay;
pub mod request_error;
pub mod route;
pub mod server;
pub mod time;
pub mod xml;

pub use error::ApiError;
pub use rdma::{DataPath, GetDecline, NoFabric, RdmaTarget};
pub use rdma_target::{RcLimits, RcTarget};
pub use server::{Config, Gateway, GatewayBuilder, RunningGateway, StartError};
