//! `hipobj-safetensors`: the pure half of `hipobj load` / `hipobj.load_safetensors`.
//!
//! A safetensors file is an 8-byte little-endian header length `N`, `N` bytes of JSON naming
//! each tensor's dtype, shape and byte span in the data section, then the data section. This
//! crate parses that header from untrusted bytes ([`header`]), reads a sharded model's
//! `model.safetensors.index.json` ([`index`]) and plans the range-gets that fetch a data
//! section into one buffer ([`plan`]). It does no I/O: the loader crate (`hipobj-loader`)
//! drives the engine.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[doc(hidden)]
pub mod fuzzing;
pub mod header;
pub mod index;
pub mod plan;

pub use header::{Dtype, Header, HeaderError, TensorInfo};
pub use index::{IndexError, ShardIndex};
pub use plan::{RangeRead, plan_reads};
