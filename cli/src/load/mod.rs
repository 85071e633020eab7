//! Loading safetensors models from S3 into registered memory (`hipobj load`, and the Python
//! package's `hipobj.load_safetensors`, which calls the same code).
//!
//! [`batch`] runs engine operations on every worker at once and reports each outcome;
//! [`model`] finds a model's files, validates their headers and fetches their tensors;
//! [`multipart`] plans the operations of a multipart upload (the Python package's `put_from`).

pub mod batch;
pub mod command;
pub mod model;
pub mod multipart;
