//! Fuzz bodies, kept in the library so unit tests can run them on their seed corpora and the
//! `fuzz/` targets stay one-liners. Each body asserts properties (round trips, conservation of
//! input), not merely "does not crash".

pub mod http;
pub mod http_server;
pub mod rdma;
pub mod s3xml;
pub mod sigv4;
