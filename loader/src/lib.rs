//! `hipobj-loader`: loading safetensors models from S3 into registered memory (`hipobj load`,
//! and the Python package's `hipobj.load_safetensors`, which call this crate), with the
//! operation batches and the blocking S3 client it needs.
//!
//! [`batch`] runs engine operations on every worker at once and reports each outcome;
//! [`model`] finds a model's files, validates their headers and fetches their tensors;
//! [`multipart`] plans the operations of a multipart upload (the Python package's `put_from`).
//! [`client`] is the blocking S3 client (HEADs for stored checksums; the CLI's `ls`, `cp`, ...),
//! [`upload_proof`] judges what a server answered to an upload, [`s3uri`] parses
//! `s3://bucket/key`, and [`paths`] names the data paths and dialects in reports.
//!
//! The format itself (header parser, shard index, range planner) is `hipobj-safetensors`; the
//! engine moves the bytes. The CLI (`hipobj load`, a clap command) and the Python extension are
//! thin callers.
#![forbid(unsafe_code)]

pub mod batch;
pub mod client;
pub mod model;
pub mod multipart;
pub mod paths;
pub mod s3uri;
pub mod stream;
pub mod upload_proof;
