//! The blocking socket driver: connections, TLS and the request/response loop over `s3-lite`.
pub mod exchange;
pub mod tls;
pub mod transport;
