//! `hipobj load`: the command ([`command`]) over the loader crate (`hipobj-loader`), which the
//! Python package's `hipobj.load_safetensors` calls too.
//!
//! [`batch`], [`model`] and [`multipart`] are `hipobj_loader`'s, re-exported under the paths
//! the CLI has always used.

pub mod command;

pub use hipobj_loader::{batch, model, multipart};
