//! What one `NativeEngine` holds, and running engine batches with the GIL released.

use engine::Engine;
use hipobj_loader::batch::{self, BatchOptions, Op, OpDone, OpFailure};
use hipobj_loader::client::ClientSettings;
use pyo3::prelude::*;

use crate::errors::make;

/// A built engine with the identity it signs with.
pub struct State {
    /// The engine.
    pub engine: Engine,
    /// The same endpoint and identity for the blocking client (S3 error codes, checksums).
    pub settings: ClientSettings,
    /// The endpoint URL.
    pub endpoint: String,
    /// Queues and depth of every batch.
    pub batch: BatchOptions,
}

/// A stop check for `batch::run` that asks Python for pending signals (Ctrl-C) and keeps the
/// exception to raise; it takes the GIL for the moment it looks.
pub fn stop_on_signal(interrupted: &mut Option<PyErr>) -> impl FnMut() -> bool + '_ {
    move || {
        Python::attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(e) => {
                *interrupted = Some(e);
                true
            }
        })
    }
}

/// Runs `ops` with the GIL released, as `opts` says; a pending signal stops the batch and is
/// the error.
pub fn run_interruptible(
    py: Python<'_>,
    state: &State,
    opts: BatchOptions,
    ops: &[Op],
) -> PyResult<Vec<Result<OpDone, OpFailure>>> {
    let mut interrupted = None;
    let outcomes = py.detach(|| {
        batch::run(
            &state.engine,
            ops,
            opts,
            &mut stop_on_signal(&mut interrupted),
        )
    });
    match interrupted {
        Some(e) => Err(e),
        None => Ok(outcomes),
    }
}

/// `InvalidURLError` for `url`.
pub fn invalid_url(py: Python<'_>, url: &str, reason: &str) -> PyErr {
    make(
        py,
        "InvalidURLError",
        &format!("{url:?}: {reason} (expected s3://BUCKET/KEY)"),
        &[("path", Some(url.to_owned()))],
    )
}
