//! `hipobj._native.NativeEngine`: the engine behind `hipobj.Engine`.

use std::sync::{Arc, RwLock};

use engine::{Engine, Fabric, Placement};
use hipobj_cli::client::{ClientSettings, S3Client};
use hipobj_cli::load::batch::{self, BatchOptions, Op, OpDone, OpFailure, OpKind, split_range_get};
use hipobj_cli::load::model::{self, FetchOptions};
use hipobj_cli::net::tls::TlsOptions;
use hipobj_cli::net::transport::Timeouts;
use hipobj_cli::s3uri::S3Uri;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use s3_lite::credentials::{self, Overrides, ProcessEnvironment};
use s3_lite::s3::Endpoint;

use crate::errors::{self, make};
use crate::memory::{self, Memory};
use crate::registration::Registration;

/// Largest range-get of `get_into` / `get_many` (larger ranges are split).
const CHUNK: u64 = 8 << 20;
/// Largest single PUT (S3's limit).
const MAX_PUT: u64 = 5 << 30;

struct State {
    engine: Engine,
    settings: ClientSettings,
    endpoint: String,
    batch: BatchOptions,
}

/// The engine, its endpoint and signing identity (resolved like the AWS CLI does).
#[pyclass(module = "hipobj._native", frozen)]
pub struct NativeEngine {
    state: RwLock<Option<Arc<State>>>,
}

fn parse_fabric(s: &str) -> PyResult<Fabric> {
    match s {
        "auto" => Ok(Fabric::Auto),
        "soft" => Ok(Fabric::Soft),
        "verbs" => Ok(Fabric::Verbs),
        "http" => Ok(Fabric::Http),
        _ => Err(PyValueError::new_err(format!(
            "fabric {s:?}: expected 'auto', 'soft', 'verbs' or 'http'"
        ))),
    }
}

fn invalid_url(py: Python<'_>, url: &str, reason: &str) -> PyErr {
    make(
        py,
        "InvalidURLError",
        &format!("{url:?}: {reason} (expected s3://BUCKET/KEY)"),
        &[("path", Some(url.to_owned()))],
    )
}

/// One item of a transfer as Python passes it.
type Item<'py> = (String, String, Bound<'py, PyAny>, u64, Option<u64>);

/// An item after checks: its object and memory (`None`: it already failed).
struct Prepared {
    bucket: String,
    key: String,
    put: bool,
    offset: u64,
    length: Option<u64>,
    mem: Memory,
}

impl NativeEngine {
    fn state(&self) -> PyResult<Arc<State>> {
        self.state
            .read()
            .map_err(|_| PyRuntimeError::new_err("engine lock poisoned"))?
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the engine is closed"))
    }
}

/// Runs `ops` with the GIL released; Ctrl-C (a pending signal) stops the batch and is
/// returned as the error.
fn run_interruptible(
    py: Python<'_>,
    state: &State,
    ops: &[Op],
) -> PyResult<Vec<Result<OpDone, OpFailure>>> {
    let mut interrupted: Option<PyErr> = None;
    let outcomes = py.detach(|| {
        batch::run(&state.engine, ops, state.batch, &mut || {
            Python::attach(|py| match py.check_signals() {
                Ok(()) => false,
                Err(e) => {
                    interrupted = Some(e);
                    true
                }
            })
        })
    });
    match interrupted {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

#[pymethods]
impl NativeEngine {
    /// See `hipobj.Engine`.
    #[new]
    #[pyo3(signature = (endpoint=None, region=None, access_key=None, secret_key=None,
                        session_token=None, profile=None, fabric="auto", dialect="auto",
                        workers=None, connections=None, gpu=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoint: Option<String>,
        region: Option<String>,
        access_key: Option<String>,
        secret_key: Option<String>,
        session_token: Option<String>,
        profile: Option<String>,
        fabric: &str,
        dialect: &str,
        workers: Option<usize>,
        connections: Option<usize>,
        gpu: bool,
    ) -> PyResult<Self> {
        let fabric = parse_fabric(fabric)?;
        let dialect =
            hipobj_cli::engine_io::parse_dialect(dialect).map_err(PyValueError::new_err)?;
        let overrides = Overrides {
            access_key_id: access_key,
            secret_access_key: secret_key,
            session_token,
            profile,
            region,
            endpoint_url: endpoint,
        };
        let resolved = credentials::resolve(&overrides, &ProcessEnvironment)
            .map_err(|e| make(py, "ConfigError", &e.to_string(), &[]))?;
        let url = resolved.endpoint_url.clone().ok_or_else(|| {
            make(
                py,
                "ConfigError",
                "no endpoint: pass Engine(endpoint='http://host:port') or set AWS_ENDPOINT_URL \
                 (the engine speaks http:// endpoints)",
                &[],
            )
        })?;
        let ep = Endpoint::parse(&url)
            .map_err(|e| make(py, "ConfigError", &format!("endpoint {url:?}: {e}"), &[]))?;
        let mut b = Engine::builder()
            .endpoint_url(&url)
            .credentials(resolved.credentials.clone())
            .region(&resolved.region)
            .fabric(fabric)
            .dialect(dialect);
        if let Some(n) = workers {
            b = b.placement(Placement::Workers(n));
        }
        if let Some(n) = connections {
            b = b.connections_per_worker(n);
        }
        if gpu && let Ok(rt) = engine::gpu::try_detect() {
            b = b.gpu(rt);
        }
        let engine = py
            .detach(|| b.build())
            .map_err(|e| make(py, "ConfigError", &format!("engine: {e}"), &[]))?;
        let queues = engine.workers().len().max(1);
        let per_queue = u32::try_from(connections.unwrap_or(32).clamp(1, 1024)).unwrap_or(32);
        let settings = ClientSettings {
            endpoint: ep,
            credentials: resolved.credentials,
            region: resolved.region,
            tls: TlsOptions::default(),
            timeouts: Timeouts::default(),
        };
        Ok(Self {
            state: RwLock::new(Some(Arc::new(State {
                engine,
                settings,
                endpoint: url,
                batch: BatchOptions {
                    queues,
                    depth: per_queue,
                    ..BatchOptions::default()
                },
            }))),
        })
    }

    /// Stops the engine's workers (idempotent). Calls in progress on other threads finish
    /// first: they hold the engine until they return.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self
            .state
            .write()
            .map_err(|_| PyRuntimeError::new_err("engine lock poisoned"))?
            .take();
        py.detach(|| drop(taken));
        Ok(())
    }

    /// Whether `close` ran.
    #[getter]
    fn closed(&self) -> bool {
        self.state.read().map_or(true, |s| s.is_none())
    }

    /// The endpoint URL.
    #[getter]
    fn endpoint(&self) -> PyResult<String> {
        Ok(self.state()?.endpoint.clone())
    }

    /// Runs `items` (`(kind, url, memory, offset, length)`, kind `"get"` or `"put"`) at once
    /// and returns, per item, the bytes moved or the exception instance it failed with.
    fn transfer<'py>(&self, py: Python<'py>, items: Vec<Item<'py>>) -> PyResult<Vec<Py<PyAny>>> {
        let state = self.state()?;
        let mut outcome: Vec<Option<Result<u64, PyErr>>> = Vec::with_capacity(items.len());
        let mut prepared: Vec<Option<Prepared>> = Vec::with_capacity(items.len());
        for (kind, url, obj, offset, length) in items {
            let put = match kind.as_str() {
                "get" => false,
                "put" => true,
                other => return Err(PyValueError::new_err(format!("kind {other:?}"))),
            };
            let item = S3Uri::parse_object(&url)
                .map_err(|e| invalid_url(py, &url, e.reason))
                .and_then(|uri| {
                    let mem = memory::resolve(&obj, !put)?;
                    Ok(Prepared {
                        bucket: uri.bucket,
                        key: uri.key,
                        put,
                        offset,
                        length,
                        mem,
                    })
                });
            match item {
                Ok(p) => {
                    outcome.push(None);
                    prepared.push(Some(p));
                }
                Err(e) => {
                    outcome.push(Some(Err(e)));
                    prepared.push(None);
                }
            }
        }
        let engine = &state.engine;
        let mut objects = Vec::with_capacity(prepared.len());
        for p in &prepared {
            objects.push(p.as_ref().map(|p| {
                engine.object(&p.bucket, &p.key).map_err(|e| {
                    invalid_url(py, &format!("s3://{}/{}", p.bucket, p.key), &e.to_string())
                })
            }));
        }
        // Sizes of the gets without a length: one HEAD each.
        let heads: Vec<usize> = (0..prepared.len())
            .filter(|&i| {
                matches!((&prepared[i], &objects[i]), (Some(p), Some(Ok(_))) if !p.put && p.length.is_none())
            })
            .collect();
        let head_ops: Vec<Op> = heads
            .iter()
            .filter_map(|&i| match &objects[i] {
                Some(Ok(object)) => Some(Op {
                    kind: OpKind::Head,
                    object: *object,
                    buf: ring_api::BufHandle(0),
                    buf_offset: 0,
                    len: 0,
                }),
                _ => None,
            })
            .collect();
        let head_results = run_interruptible(py, &state, &head_ops)?;
        let mut sizes: Vec<Option<u64>> = vec![None; prepared.len()];
        for (&i, r) in heads.iter().zip(head_results) {
            let Some(p) = &prepared[i] else { continue };
            match r {
                Ok(d) => sizes[i] = Some(d.object_size),
                Err(f) => {
                    outcome[i] = Some(Err(errors::op_error(
                        py,
                        &state.settings,
                        &p.bucket,
                        &p.key,
                        "HEAD",
                        &f,
                    )));
                }
            }
        }
        // Register each remaining item's memory and plan its operations.
        let mut regs: Vec<Registration<'_>> = Vec::new();
        let mut ops: Vec<Op> = Vec::new();
        let mut owner: Vec<usize> = Vec::new();
        let mut want: Vec<u64> = vec![0; prepared.len()];
        for i in 0..prepared.len() {
            if outcome[i].is_some() {
                continue;
            }
            let (Some(p), Some(obj)) = (&prepared[i], &objects[i]) else {
                continue;
            };
            let object = match obj {
                Ok(o) => *o,
                Err(e) => {
                    outcome[i] = Some(Err(e.clone_ref(py)));
                    continue;
                }
            };
            let path = format!("s3://{}/{}", p.bucket, p.key);
            let len = if p.put {
                if p.offset != 0 || p.length.is_some() {
                    outcome[i] = Some(Err(PyValueError::new_err("put takes no offset or length")));
                    continue;
                }
                p.mem.len
            } else {
                match (p.length, sizes[i]) {
                    (Some(n), _) => n,
                    (None, Some(size)) => size.saturating_sub(p.offset),
                    (None, None) => 0,
                }
            };
            if !p.put && len > p.mem.len {
                outcome[i] = Some(Err(make(
                    py,
                    "HipobjError",
                    &format!(
                        "{path}: {len} bytes from offset {} do not fit the destination's {} bytes",
                        p.offset, p.mem.len
                    ),
                    &[("path", Some(path))],
                )));
                continue;
            }
            if p.put && len > MAX_PUT {
                outcome[i] = Some(Err(make(
                    py,
                    "UnsupportedError",
                    &format!(
                        "{path}: put_from of {len} bytes: above 5 GiB needs a multipart upload, which the Python package does not do"
                    ),
                    &[("path", Some(path))],
                )));
                continue;
            }
            if len == 0 {
                if p.put {
                    outcome[i] = Some(Err(make(
                        py,
                        "UnsupportedError",
                        &format!("{path}: the engine cannot PUT an empty buffer"),
                        &[("path", Some(path))],
                    )));
                } else {
                    outcome[i] = Some(Ok(0));
                }
                continue;
            }
            let reg = match Registration::new(engine, &p.mem) {
                Ok(r) => r,
                Err(e) => {
                    outcome[i] = Some(Err(make(
                        py,
                        "HipobjError",
                        &format!("{path}: {e}"),
                        &[("path", Some(path))],
                    )));
                    continue;
                }
            };
            let item_ops = if p.put {
                vec![Op {
                    kind: OpKind::Put,
                    object,
                    buf: reg.handle,
                    buf_offset: 0,
                    len,
                }]
            } else {
                split_range_get(object, p.offset, reg.handle, 0, len, CHUNK)
            };
            owner.extend(std::iter::repeat_n(i, item_ops.len()));
            ops.extend(item_ops);
            want[i] = len;
            regs.push(reg);
        }
        let results = run_interruptible(py, &state, &ops);
        py.detach(|| drop(regs));
        let results = results?;
        let mut failed: Vec<Option<(String, OpFailure)>> = vec![None; prepared.len()];
        for ((op, &i), r) in ops.iter().zip(&owner).zip(results) {
            match r {
                Ok(d) => {
                    let size = sizes[i].unwrap_or(0);
                    if d.object_size != 0 && size != 0 && d.object_size != size {
                        failed[i].get_or_insert((
                            "range-get".into(),
                            OpFailure::local_msg(format!(
                                "integrity: the server names an object of {} bytes, HEAD said {size}",
                                d.object_size
                            )),
                        ));
                    }
                }
                Err(f) => {
                    let what = match op.kind {
                        OpKind::RangeGet { offset } => format!("range-get {offset}+{}", op.len),
                        OpKind::Put => "PUT".into(),
                        OpKind::Head => "HEAD".into(),
                    };
                    failed[i].get_or_insert((what, f));
                }
            }
        }
        for i in 0..prepared.len() {
            if outcome[i].is_some() {
                continue;
            }
            let Some(p) = &prepared[i] else { continue };
            outcome[i] = Some(match &failed[i] {
                Some((what, f)) => Err(errors::op_error(
                    py,
                    &state.settings,
                    &p.bucket,
                    &p.key,
                    what,
                    f,
                )),
                None => Ok(want[i]),
            });
        }
        Ok(outcome
            .into_iter()
            .map(|o| match o {
                Some(Ok(n)) => match n.into_pyobject(py) {
                    Ok(v) => v.into_any().unbind(),
                    Err(never) => match never {},
                },
                Some(Err(e)) => e.into_value(py).into_any(),
                None => PyRuntimeError::new_err("not run").into_value(py).into_any(),
            })
            .collect())
    }

    /// Loads a safetensors model: `alloc(nbytes, file_index)` returns each file's destination
    /// (anything `transfer` accepts, at least `nbytes` long). Returns `(files, report)`: per
    /// file a dict `{key, buffer, tensors: [(name, dtype, shape, begin, end)], metadata,
    /// verification}`.
    fn load_safetensors<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        alloc: Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
        let state = self.state()?;
        let uri = S3Uri::parse(url).map_err(|e| invalid_url(py, url, e.reason))?;
        let engine = &state.engine;
        let start = std::time::Instant::now();
        let model = py
            .detach(|| model::open(engine, &uri.bucket, &uri.key))
            .map_err(|e| errors::load_error(py, &state.settings, &e))?;
        let headers_done = start.elapsed().as_secs_f64();
        let mut buffers: Vec<Option<Bound<'py, PyAny>>> = Vec::with_capacity(model.files.len());
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
        let mut regs = Vec::with_capacity(mems.len());
        let mut handles = vec![None; model.files.len()];
        for (i, mem) in &mems {
            let reg =
                Registration::new(engine, mem).map_err(|e| make(py, "HipobjError", &e, &[]))?;
            handles[*i] = Some(reg.handle);
            regs.push(reg);
        }
        let registered = start.elapsed().as_secs_f64();
        let mut opts = FetchOptions::for_engine(engine);
        opts.batch = state.batch;
        let mut interrupted: Option<PyErr> = None;
        let report = py.detach(|| {
            let mut client = S3Client::new(state.settings.clone()).ok();
            let r = model::fetch(
                engine,
                &model,
                &handles,
                &opts,
                client.as_mut(),
                &mut || {
                    Python::attach(|py| match py.check_signals() {
                        Ok(()) => false,
                        Err(e) => {
                            interrupted = Some(e);
                            true
                        }
                    })
                },
            );
            drop(regs);
            r
        });
        if let Some(e) = interrupted {
            return Err(e);
        }
        let report = report.map_err(|e| errors::load_error(py, &state.settings, &e))?;
        let seconds = start.elapsed().as_secs_f64();
        let files = PyList::empty(py);
        for ((f, buf), v) in model.files.iter().zip(buffers).zip(&report.verification) {
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
        let r = PyDict::new(py);
        r.set_item("bytes", model.data_bytes())?;
        r.set_item("requests", report.requests)?;
        r.set_item("seconds", seconds)?;
        // Where the time went: headers read and checked, buffers allocated and registered,
        // tensor bytes fetched and verified.
        r.set_item("seconds_headers", headers_done)?;
        r.set_item("seconds_allocate", registered - headers_done)?;
        r.set_item("seconds_fetch", seconds - registered)?;
        r.set_item("paths", report.paths.clone())?;
        r.set_item("dialects", report.dialects.clone())?;
        Ok((files, r))
    }
}
