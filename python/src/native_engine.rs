//! `hipobj._native.NativeEngine`: the engine behind `hipobj.Engine`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use engine::{Engine, Fabric, Placement};
use hipobj_loader::batch::BatchOptions;
use hipobj_loader::client::ClientSettings;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use s3_lite::credentials::{self, Overrides, ProcessEnvironment};
use s3_lite::net::stream::Timeouts;
use s3_lite::net::tls::TlsOptions;
use s3_lite::s3::Endpoint;

use crate::errors::make;
use crate::state::State;
use crate::{load, objects, transfer};

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

/// A timeout in seconds as a `Duration`: an exception of `class` unless it is a positive
/// finite number.
fn seconds(py: Python<'_>, class: &str, name: &str, v: Option<f64>) -> PyResult<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .map(Some)
            .ok_or_else(|| {
                make(
                    py,
                    class,
                    &format!("{name}={s}: expected a positive number of seconds"),
                    &[],
                )
            }),
    }
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

#[pymethods]
impl NativeEngine {
    /// See `hipobj.Engine`.
    #[new]
    #[pyo3(signature = (endpoint=None, region=None, access_key=None, secret_key=None,
                        session_token=None, profile=None, fabric="auto", dialect="auto",
                        workers=None, connections=None, gpu=true, connect_timeout=None,
                        read_timeout=None, daemon=None))]
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
        connect_timeout: Option<f64>,
        read_timeout: Option<f64>,
        daemon: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let fabric = parse_fabric(fabric)?;
        let connect_timeout = seconds(py, "ConfigError", "connect_timeout", connect_timeout)?;
        let read_timeout = seconds(py, "ConfigError", "read_timeout", read_timeout)?;
        let dialect =
            hipobj_loader::paths::parse_dialect(dialect).map_err(PyValueError::new_err)?;
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
        // The engine has no per-read timeout: read_timeout bounds each attempt of an
        // operation (connect, request and answer of one range-get, PUT or part).
        if let Some(t) = read_timeout {
            b = b.attempt_timeout(t);
        }
        if gpu && let Ok(rt) = engine::gpu::try_detect() {
            b = b.gpu(rt);
        }
        // Attach to the node daemon (HIPOBJ_DAEMON does the same when `daemon` is None).
        if let Some(path) = daemon {
            b = b.daemon(path);
        }
        let engine = py
            .detach(|| b.build())
            .map_err(|e| make(py, "ConfigError", &format!("engine: {e}"), &[]))?;
        // An attached engine's queues all go through the daemon's one loop: one is enough.
        let queues = if engine.is_attached() {
            1
        } else {
            engine.workers().len().max(1)
        };
        let per_queue = u32::try_from(connections.unwrap_or(32).clamp(1, 1024)).unwrap_or(32);
        let defaults = Timeouts::default();
        let settings = ClientSettings {
            endpoint: ep,
            credentials: resolved.credentials,
            region: resolved.region,
            tls: TlsOptions::default(),
            timeouts: Timeouts {
                connect: connect_timeout.unwrap_or(defaults.connect),
                io: read_timeout.unwrap_or(defaults.io),
                ..defaults
            },
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
    /// and returns, per item, the bytes moved or the exception instance it failed with;
    /// `timeout` (seconds) bounds the whole call.
    #[pyo3(signature = (items, timeout=None))]
    fn transfer<'py>(
        &self,
        py: Python<'py>,
        items: Vec<transfer::Item<'py>>,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let timeout = seconds(py, "InvalidArgumentError", "timeout", timeout)?;
        transfer::run(py, &*self.state()?, items, timeout)
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
    ) -> PyResult<load::Loaded<'py>> {
        load::run(py, &*self.state()?, url, &alloc)
    }

    /// Starts a streaming load: like `load_safetensors`, but returns at once an iterator of
    /// `(file_index, name, dtype, shape, begin, end)`, each tensor as soon as its bytes are in
    /// its file's buffer (see `hipobj.stream_safetensors`).
    fn stream_safetensors(
        &self,
        py: Python<'_>,
        url: &str,
        alloc: Bound<'_, PyAny>,
    ) -> PyResult<crate::stream::NativeTensorStream> {
        crate::stream::start(py, self.state()?, url, &alloc)
    }

    /// Every object under `url` (`s3://BUCKET[/PREFIX]`), all pages: dicts `{key, size, etag,
    /// last_modified}`; `recursive=False` stops at the next `/` and lists the common prefixes
    /// as keys ending in `/`.
    #[pyo3(signature = (url, recursive=true))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        url: &str,
        recursive: bool,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        objects::list(py, &*self.state()?, url, recursive)
    }

    /// HeadObject: `{size, etag, last_modified, content_type[, checksum_crc64nvme]}`.
    fn head<'py>(&self, py: Python<'py>, url: &str) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        objects::head(py, &*self.state()?, url)
    }

    /// DeleteObject (a missing key is no error).
    fn delete(&self, py: Python<'_>, url: &str) -> PyResult<()> {
        objects::delete(py, &*self.state()?, url)
    }

    /// CreateBucket `s3://BUCKET` (one these credentials own already is no error).
    fn create_bucket(&self, py: Python<'_>, url: &str) -> PyResult<()> {
        objects::create_bucket(py, &*self.state()?, url)
    }
}
