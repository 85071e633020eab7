//! The blocking socket driver, TLS configuration and streams: `s3_lite::net` (feature `net`),
//! shared with the engine, the gateway and the C API. Re-exported here under the names the CLI
//! has always used.
pub use s3_lite::net::blocking as exchange;
pub use s3_lite::net::stream as transport;
pub use s3_lite::net::tls;
