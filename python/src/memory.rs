//! Which memory a Python object exposes, without copying it: DLPack (`__dlpack__`: torch CPU
//! and CUDA tensors, cupy, numpy >= 1.22, jax), numpy's `__array_interface__` (read-only
//! arrays, which DLPack refuses to export), `bytes`, and a span the Python layer made from
//! any other buffer-protocol object (`__hipobj_span__`: `(address, nbytes, readonly)`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyTuple};

use crate::dlpack;
use crate::errors::{invalid_argument, invalid_buffer, invalid_type};

/// Where the bytes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Host memory (pageable or pinned).
    Host,
    /// VRAM of this CUDA device.
    Cuda(u32),
}

/// A contiguous span of memory owned by a Python object, kept alive by this value.
#[derive(Debug)]
pub struct Memory {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// Where.
    pub place: Place,
    /// The object refuses writes.
    pub readonly: bool,
    /// The object and any DLPack capsule: alive as long as this value.
    _keep: Vec<Py<PyAny>>,
}

impl Memory {
    /// The same span, keeping nothing alive: for a thread that registers the memory while
    /// the holder of `self` keeps the object alive (and outlives that thread's use of it).
    #[must_use]
    pub fn unowned_view(&self) -> Memory {
        Memory {
            addr: self.addr,
            len: self.len,
            place: self.place,
            readonly: self.readonly,
            _keep: Vec::new(),
        }
    }
}

fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<Memory> {
    let capsule = obj.call_method0("__dlpack__")?;
    let cap = capsule
        .cast::<PyCapsule>()
        .map_err(|_| invalid_type(obj.py(), "__dlpack__ did not return a capsule"))?;
    let span = dlpack::describe(cap).map_err(|e| invalid_buffer(obj.py(), &e))?;
    let place = match span.device_type {
        dlpack::DEVICE_CPU | dlpack::DEVICE_CUDA_HOST | dlpack::DEVICE_CUDA_MANAGED => Place::Host,
        dlpack::DEVICE_CUDA => Place::Cuda(u32::try_from(span.device_id).map_err(|_| {
            invalid_argument(obj.py(), &format!("CUDA device id {}", span.device_id))
        })?),
        other => {
            return Err(invalid_type(
                obj.py(),
                &format!("DLPack device type {other} is not supported (host memory and CUDA are)"),
            ));
        }
    };
    Ok(Memory {
        addr: span.addr,
        len: span.len,
        place,
        readonly: false,
        _keep: vec![obj.clone().unbind(), capsule.unbind()],
    })
}

fn from_array_interface(obj: &Bound<'_, PyAny>, ai: &Bound<'_, PyAny>) -> PyResult<Memory> {
    let ai = ai
        .cast::<PyDict>()
        .map_err(|_| invalid_type(obj.py(), "__array_interface__ is not a dict"))?;
    let strides = ai.get_item("strides")?;
    if strides.as_ref().is_some_and(|s| !s.is_none()) {
        let contiguous: bool = obj
            .getattr("flags")
            .and_then(|f| f.get_item("C_CONTIGUOUS"))
            .and_then(|c| c.extract())
            .unwrap_or(false);
        if !contiguous {
            return Err(invalid_buffer(
                obj.py(),
                "the array is not C-contiguous: pass a contiguous one",
            ));
        }
    }
    let data = ai
        .get_item("data")?
        .ok_or_else(|| invalid_type(obj.py(), "__array_interface__ has no data"))?;
    let data = data
        .cast::<PyTuple>()
        .map_err(|_| invalid_type(obj.py(), "__array_interface__['data'] is not a tuple"))?;
    let addr: u64 = data.get_item(0)?.extract()?;
    let readonly: bool = data.get_item(1)?.extract()?;
    let len: u64 = obj.getattr("nbytes")?.extract()?;
    Ok(Memory {
        addr,
        len,
        place: Place::Host,
        readonly,
        _keep: vec![obj.clone().unbind()],
    })
}

/// The memory behind `obj`; `writable` refuses read-only objects (destinations).
pub fn resolve(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Memory> {
    let mem = if let Ok(b) = obj.cast::<PyBytes>() {
        Memory {
            addr: b.as_bytes().as_ptr() as u64,
            len: b.as_bytes().len() as u64,
            place: Place::Host,
            readonly: true,
            _keep: vec![obj.clone().unbind()],
        }
    } else if let Ok(span) = obj.call_method0("__hipobj_span__") {
        let (addr, len, readonly): (u64, u64, bool) = span.extract()?;
        Memory {
            addr,
            len,
            place: Place::Host,
            readonly,
            _keep: vec![obj.clone().unbind()],
        }
    } else {
        let ai = obj.getattr("__array_interface__").ok();
        let readonly_numpy = match &ai {
            Some(ai) => from_array_interface(obj, ai)?.readonly,
            None => false,
        };
        match (obj.hasattr("__dlpack__")?, ai) {
            // numpy exports read-only arrays through the array interface only.
            (_, Some(ai)) if readonly_numpy => from_array_interface(obj, &ai)?,
            (true, _) => from_dlpack(obj)?,
            (false, Some(ai)) => from_array_interface(obj, &ai)?,
            (false, None) => {
                return Err(invalid_type(
                    obj.py(),
                    &format!(
                        "{} exposes neither DLPack (__dlpack__) nor a buffer hipobj can use",
                        obj.get_type().name()?
                    ),
                ));
            }
        }
    };
    if writable && mem.readonly {
        return Err(invalid_buffer(
            obj.py(),
            "the destination is read-only (bytes, a read-only array): pass writable memory",
        ));
    }
    Ok(mem)
}
