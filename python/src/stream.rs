//! `Engine.stream_safetensors`: the loader (`hipobj_loader::model::fetch_observed`) on a
//! thread of its own, each tensor handed to Python as soon as every byte of it is in its
//! destination (for VRAM: after the engine's copy into it has finished), while the rest of the
//! model is still arriving.
//!
//! A tensor whose ranges carried a server checksum of exactly their bytes is verified when it
//! is handed out; otherwise its file is proven as a whole (its ranges' CRCs combined) after
//! its last range, and a mismatch is raised by the iterator then, after the tensors already
//! handed out: a caller that must not use unproven bytes uses `load_safetensors`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hipobj_loader::client::S3Client;
use hipobj_loader::model::{self, FetchOptions, FetchReport, Landed, LoadError, Model};
use hipobj_loader::stream::{Readiness, Ready};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors;
use crate::load::{Prepared, prepare};
use crate::memory::Memory;
use crate::registration::Registration;
use crate::state::State;

/// What the loading thread sends.
enum Event {
    /// Tensors now complete.
    Ready(Vec<Ready>),
    /// The load ended (every range landed and every file was verified, or it failed).
    Done(Box<Result<FetchReport, LoadError>>),
}

/// One complete tensor as `__next__` hands it over: `(file_index, name, dtype, shape, begin,
/// end)`, offsets in the file's buffer.
type TensorEntry = (usize, String, &'static str, Vec<u64>, u64, u64);

/// How often a waiting `__next__` looks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The iterator behind `hipobj.stream_safetensors`: `__next__` returns
/// `(file_index, name, dtype, shape, begin, end)` of the next complete tensor.
#[pyclass(module = "hipobj._native")]
pub struct NativeTensorStream {
    state: Arc<State>,
    model: Model,
    /// Per file, its buffer (the Python object), for the wrapper to cut views from.
    buffers: Vec<Option<Py<PyAny>>>,
    /// The files' memory, alive while the loading thread may write it.
    _mems: Vec<Memory>,
    rx: Mutex<Receiver<Event>>,
    ready: VecDeque<Ready>,
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    started: Instant,
    first_tensor_s: Option<f64>,
    report: Option<Py<PyDict>>,
    finished: bool,
}

impl NativeTensorStream {
    /// Stops the load (if running) and waits for its thread: after this no byte is written
    /// into the buffers.
    fn stop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn report_dict(&self, py: Python<'_>, r: &FetchReport) -> PyResult<Py<PyDict>> {
        let d = PyDict::new(py);
        d.set_item("bytes", self.model.data_bytes())?;
        d.set_item("requests", r.requests)?;
        d.set_item("seconds", self.started.elapsed().as_secs_f64())?;
        d.set_item("first_tensor_seconds", self.first_tensor_s)?;
        d.set_item("paths", r.paths.0.clone())?;
        d.set_item("dialects", r.paths.1.clone())?;
        let files = PyList::empty(py);
        for (f, v) in self.model.files.iter().zip(&r.verification) {
            let e = PyDict::new(py);
            e.set_item("key", &f.key)?;
            e.set_item("verification", v.map_or("none", model::Verification::name))?;
            e.set_item("metadata", f.header.metadata.clone())?;
            files.append(e)?;
        }
        d.set_item("files", files)?;
        Ok(d.unbind())
    }
}

impl Drop for NativeTensorStream {
    fn drop(&mut self) {
        // An iteration abandoned half way: stop the batch before the buffers can go.
        self.stop();
    }
}

#[pymethods]
impl NativeTensorStream {
    /// Per file, its buffer (`None` for a file without tensor data).
    #[getter]
    fn buffers(&self, py: Python<'_>) -> Vec<Option<Py<PyAny>>> {
        self.buffers
            .iter()
            .map(|b| b.as_ref().map(|o| o.clone_ref(py)))
            .collect()
    }

    /// Per file, its key.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.model.files.iter().map(|f| f.key.clone()).collect()
    }

    /// The report once the iteration has ended (`None` before): bytes, requests, seconds,
    /// first_tensor_seconds, paths, dialects, files (key, verification, metadata).
    #[getter]
    fn report(&self, py: Python<'_>) -> Option<Py<PyDict>> {
        self.report.as_ref().map(|r| r.clone_ref(py))
    }

    /// Stops the load; the tensors already handed out stay valid.
    fn close(&mut self) {
        self.stop();
        self.finished = true;
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<TensorEntry>> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                let Some(t) = self
                    .model
                    .files
                    .get(r.file)
                    .and_then(|f| f.header.tensors.get(r.tensor))
                else {
                    continue;
                };
                if self.first_tensor_s.is_none() {
                    self.first_tensor_s = Some(self.started.elapsed().as_secs_f64());
                }
                return Ok(Some((
                    r.file,
                    t.name.clone(),
                    t.dtype.name(),
                    t.shape.clone(),
                    t.begin,
                    t.end,
                )));
            }
            if self.finished {
                return Ok(None);
            }
            let rx = &self.rx;
            let got = py.detach(|| {
                rx.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .recv_timeout(SIGNAL_POLL)
            });
            match got {
                Ok(Event::Ready(v)) => self.ready.extend(v),
                Ok(Event::Done(r)) => {
                    self.stop();
                    self.finished = true;
                    match *r {
                        Ok(report) => self.report = Some(self.report_dict(py, &report)?),
                        Err(e) => return Err(errors::load_error(py, &self.state.settings, &e)),
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        self.close();
                        return Err(e);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.stop();
                    self.finished = true;
                    return Err(PyRuntimeError::new_err(
                        "hipobj: the loading thread ended without a result",
                    ));
                }
            }
        }
    }
}

/// Opens the model at `url`, allocates its buffers through `alloc(nbytes, file_index)` and
/// starts loading them on a thread; the returned iterator hands out tensors as they land.
pub fn start(
    py: Python<'_>,
    state: Arc<State>,
    url: &str,
    alloc: &Bound<'_, PyAny>,
) -> PyResult<NativeTensorStream> {
    let started = Instant::now();
    let Prepared {
        model,
        buffers,
        mems,
        headers_read: _,
    } = prepare(py, &state, url, alloc)?;
    let views: Vec<(usize, Memory)> = mems.iter().map(|(i, m)| (*i, m.unowned_view())).collect();
    let (tx, rx) = mpsc::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let thread = {
        let (state, model, cancel) = (Arc::clone(&state), model.clone(), Arc::clone(&cancel));
        std::thread::Builder::new()
            .name("hipobj-stream".into())
            .spawn(move || load(&state, &model, &views, &cancel, tx))
            .map_err(|e| PyRuntimeError::new_err(format!("starting the loading thread: {e}")))?
    };
    Ok(NativeTensorStream {
        state,
        model,
        buffers: buffers.into_iter().map(|b| b.map(Bound::unbind)).collect(),
        _mems: mems.into_iter().map(|(_, m)| m).collect(),
        rx: Mutex::new(rx),
        ready: VecDeque::new(),
        cancel,
        thread: Some(thread),
        started,
        first_tensor_s: None,
        report: None,
        finished: false,
    })
}

/// The loading thread: registers the files' memory, fetches every range (reporting tensors
/// as they complete), verifies, deregisters, and sends the outcome.
fn load(
    state: &State,
    model: &Model,
    views: &[(usize, Memory)],
    cancel: &AtomicBool,
    tx: Sender<Event>,
) {
    let mut handles = vec![None; model.files.len()];
    let mut regs = Vec::with_capacity(views.len());
    for (i, mem) in views {
        match Registration::new(&state.engine, mem) {
            Ok(r) => {
                handles[*i] = Some(r.handle);
                regs.push(r);
            }
            Err(e) => {
                let _ = tx.send(Event::Done(Box::new(Err(LoadError::Local(e)))));
                return;
            }
        }
    }
    let readiness = Mutex::new(Readiness::new(model));
    let tx = Mutex::new(tx);
    let send = |e: Event| {
        let _ = tx.lock().unwrap_or_else(PoisonError::into_inner).send(e);
    };
    let empty = readiness
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take_empty();
    if !empty.is_empty() {
        send(Event::Ready(empty));
    }
    let on_landed = |l: Landed| {
        let now = readiness
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .land(l.file, l.offset, l.len);
        if !now.is_empty() {
            send(Event::Ready(now));
        }
    };
    let mut opts = FetchOptions::for_engine(&state.engine);
    opts.batch = state.batch;
    let mut client = S3Client::new(state.settings.clone()).ok();
    let r = model::fetch_observed(
        &state.engine,
        model,
        &handles,
        &opts,
        client.as_mut(),
        &mut || cancel.load(Ordering::Relaxed),
        &on_landed,
    );
    drop(regs);
    send(Event::Done(Box::new(r)));
}
