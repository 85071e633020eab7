//! `Engine.load_safetensors`: the loader crate (`hipobj_loader::model`) into buffers the
//! Python layer allocates (torch tensors, numpy arrays), with the GIL released while bytes move.

use std::time::Instant;

use hipobj_loader::client::S3Client;
use hipobj_loader::model::{self, FetchOptions, Model};
use hipobj_loader::s3uri::S3Uri;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{self, make};
use crate::memory;
use crate::registration::Registration;
use crate::state::{State, invalid_url, stop_on_signal};

/// Per file `{key, buffer, tensors: [(name, dtype, shape, begin, end)], metadata,
/// verification}`, and the report (bytes, requests, seconds and their split, paths, dialects).
pub type Loaded<'py> = (Bound<'py, PyList>, Bound<'py, PyDict>);

fn files_list<'py>(
    py: Python<'py>,
    model: &Model,
    buffers: Vec<Option<Bound<'py, PyAny>>>,
    verification: &[Option<model::Verification>],
) -> PyResult<Bound<'py, PyList>> {
    let files = PyList::empty(py);
    for ((f, buf), v) in model.files.iter().zip(buffers).zip(verification) {
        let d = PyDict::new(py);
        d.set_item("key", &f.key)?;
        d.set_item("buffer", buf)?;
        let tensors = PyList::empty(py);
        for t in &f.header.tensors {
            tensors.append((&t.name, t.dtype.name(), t.shape.clone(), t.begin, t.end))?;
        }
        d.set_item("tensors", tensors)?;
        d.set_item("metadata", f.header.metadata.clone())?;
        d.set_item("verification", v.map_or("none", model::Verification::name))?;
        files.append(d)?;
    }
    Ok(files)
}

/// A model whose headers were read and whose buffers Python allocated: what a load and a
/// streaming load start from.
pub struct Prepared<'py> {
    /// The files and their validated headers.
    pub model: Model,
    /// Per file, the Python object holding its data section (`None`: no data).
    pub buffers: Vec<Option<Bound<'py, PyAny>>>,
    /// Per file with data, its memory (keeping the object alive).
    pub mems: Vec<(usize, memory::Memory)>,
    /// When the last header was validated (before any buffer was allocated).
    pub headers_read: Instant,
}

/// Reads and validates every header of the model at `url` (GIL released), then asks
/// `alloc(nbytes, file_index)` for each file's destination.
pub fn prepare<'py>(
    py: Python<'py>,
    state: &State,
    url: &str,
    alloc: &Bound<'py, PyAny>,
) -> PyResult<Prepared<'py>> {
    let uri = S3Uri::parse(url).map_err(|e| invalid_url(py, url, e.reason))?;
    let engine = &state.engine;
    // 1. Every header read and validated before anything is allocated.
    let mut interrupted = None;
    let opened = py.detach(|| {
        model::open(
            engine,
            &uri.bucket,
            &uri.key,
            &mut stop_on_signal(&mut interrupted),
        )
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    let model = opened.map_err(|e| errors::load_error(py, &state.settings, &e))?;
    let headers_read = Instant::now();
    // 2. One buffer per file, from the Python layer.
    let mut buffers = Vec::with_capacity(model.files.len());
    let mut mems = Vec::with_capacity(model.files.len());
    for (i, f) in model.files.iter().enumerate() {
        if f.data_len() == 0 {
            buffers.push(None);
            continue;
        }
        let obj = alloc.call1((f.data_len(), i))?;
        let mem = memory::resolve(&obj, true)?;
        if mem.len < f.data_len() {
            return Err(PyValueError::new_err(format!(
                "alloc returned {} bytes for {}, which needs {}",
                mem.len,
                f.key,
                f.data_len()
            )));
        }
        mems.push((i, mem));
        buffers.push(Some(obj));
    }
    Ok(Prepared {
        model,
        buffers,
        mems,
        headers_read,
    })
}

/// Loads the model at `url`; `alloc(nbytes, file_index)` returns each file's destination.
pub fn run<'py>(
    py: Python<'py>,
    state: &State,
    url: &str,
    alloc: &Bound<'py, PyAny>,
) -> PyResult<Loaded<'py>> {
    let engine = &state.engine;
    let start = Instant::now();
    let Prepared {
        model,
        buffers,
        mems,
        headers_read,
    } = prepare(py, state, url, alloc)?;
    // Allocation counts with registration (`seconds_allocate`), as before the split.
    let headers_done = headers_read.saturating_duration_since(start).as_secs_f64();
    let mut regs = Vec::with_capacity(mems.len());
    let mut handles = vec![None; model.files.len()];
    for (i, mem) in &mems {
        let reg = Registration::new(engine, mem).map_err(|e| make(py, "HipobjError", &e, &[]))?;
        handles[*i] = Some(reg.handle);
        regs.push(reg);
    }
    let registered = start.elapsed().as_secs_f64();
    // 3. The tensor bytes, every file at once, then each file verified.
    let mut opts = FetchOptions::for_engine(engine);
    opts.batch = state.batch;
    let mut interrupted = None;
    let report = py.detach(|| {
        let mut client = S3Client::new(state.settings.clone()).ok();
        let r = model::fetch(
            engine,
            &model,
            &handles,
            &opts,
            client.as_mut(),
            &mut stop_on_signal(&mut interrupted),
        );
        drop(regs);
        r
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    let report = report.map_err(|e| errors::load_error(py, &state.settings, &e))?;
    let seconds = start.elapsed().as_secs_f64();
    let files = files_list(py, &model, buffers, &report.verification)?;
    let r = PyDict::new(py);
    r.set_item("bytes", model.data_bytes())?;
    r.set_item("requests", report.requests)?;
    r.set_item("seconds", seconds)?;
    r.set_item("seconds_headers", headers_done)?;
    r.set_item("seconds_allocate", registered - headers_done)?;
    r.set_item("seconds_fetch", seconds - registered)?;
    r.set_item("paths", report.paths.0.clone())?;
    r.set_item("dialects", report.paths.1.clone())?;
    Ok((files, r))
}
