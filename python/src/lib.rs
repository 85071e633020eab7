//! `hipobj._native`: the Rust half of the `hipobj` Python package (`python/pysrc/hipobj/` is
//! the Python half). The engine moves bytes between S3 and the memory of Python objects (numpy
//! arrays, torch/cupy tensors through DLPack, buffers) with no Python-side copy; the safetensors
//! loader is the `hipobj-loader` crate (`hipobj_loader::model`), which `hipobj load` calls too,
//! so `hipobj load` and `hipobj.load_safetensors` run the same code.
//!
//! `unsafe` lives in two modules: `dlpack` (reading a DLPack capsule) and `registration`
//! (registering a Python object's memory with the engine).
#![deny(unsafe_code)]

mod dlpack;
mod errors;
mod load;
mod memory;
mod native_engine;
mod objects;
mod registration;
mod state;
mod stream;
mod transfer;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<native_engine::NativeEngine>()?;
    m.add_class::<stream::NativeTensorStream>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
