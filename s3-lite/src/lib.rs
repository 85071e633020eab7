//! `s3-lite`: the sans-IO control plane of hipObject.
//!
//! Nothing in this crate opens a socket or reads a clock: bytes go in, bytes come out, and the
//! current time is an argument wherever a signature needs it. The one exception is `net`, behind
//! the `net` feature: the socket drivers of the exchange machine (a blocking client, and a
//! non-blocking plain-or-TLS transport for readiness loops such as the engine's mio workers),
//! with rustls for `https://`.
//!
//! Modules, one job each:
//! - [`request`]: the request head type shared by the encoder, the signer and the S3 builders.
//! - [`http`]: HTTP/1.1 request encoder and incremental response decoder (Content-Length and
//!   chunked bodies, hard limits on everything a peer controls).
//! - [`sigv4`]: AWS Signature Version 4 — header and query (presigned) signing, verification,
//!   streaming chunk/trailer signatures, signing-key cache.
//! - [`credentials`]: static, environment and shared-profile credentials, region and endpoint.
//! - [`s3`]: S3 operations (request builders), addressing, response and error-XML parsing.
//! - [`checksum`]: CRC64NVME and CRC32C as S3 defines them (`x-amz-checksum-*`).
//! - [`uri`]: S3 percent-encoding and decoding.
//! - `net` (feature `net`): socket drivers and TLS configuration (CA bundles, AWS conventions).
//! - [`rdma`]: pure codecs for the `x-amz-rdma-*` header family (`docs/rdma-headers.md`).
//!
//! Untrusted input (anything a server sends) never panics: every parser returns a typed error.
#![forbid(unsafe_code)]
#![warn(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod checksum;
pub mod credentials;
pub mod http;
#[cfg(feature = "net")]
pub mod net;
pub mod rdma;
pub mod request;
pub mod s3;
pub mod sigv4;
pub mod uri;

#[doc(hidden)]
pub mod fuzzing;

pub use request::Request;
