//! Python exceptions (classes in `hipobj/_errors.py`) built from engine and loader failures.

use hipobj_loader::batch::OpFailure;
use hipobj_loader::client::{ClientError, ClientSettings, S3Client};
use hipobj_loader::model::LoadError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ring_api::ErrorCode;
use s3_lite::net::blocking::ExchangeError;
use s3_lite::s3::{ByteRange, S3Error};

use crate::state::State;

/// An instance of `hipobj._errors.<class>(message, **fields)`.
pub fn make(
    py: Python<'_>,
    class: &str,
    message: &str,
    fields: &[(&str, Option<String>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("hipobj._errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        for (k, v) in fields {
            kwargs.set_item(k, v)?;
        }
        Ok(PyErr::from_value(cls.call((message,), Some(&kwargs))?))
    };
    build().unwrap_or_else(|e| e)
}

/// `InvalidBufferError` (also a `BufferError`): memory hipobj cannot use as it is.
pub fn invalid_buffer(py: Python<'_>, message: &str) -> PyErr {
    make(py, "InvalidBufferError", message, &[])
}

/// `InvalidTypeError` (also a `TypeError`): an object of a type hipobj cannot use.
pub fn invalid_type(py: Python<'_>, message: &str) -> PyErr {
    make(py, "InvalidTypeError", message, &[])
}

/// `InvalidArgumentError` (also a `ValueError`): an argument out of range.
pub fn invalid_argument(py: Python<'_>, message: &str) -> PyErr {
    make(py, "InvalidArgumentError", message, &[])
}

/// The server's own S3 error for a request on `bucket/key` that the engine saw fail with a
/// 4xx: one signed `GET bytes=0-0` on the blocking client, whose error document names it
/// (`NoSuchKey`, `NoSuchBucket`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`, ...) and says
/// it in the server's words.
pub fn diagnose(settings: &ClientSettings, bucket: &str, key: &str) -> Option<S3Error> {
    let mut client = S3Client::new(settings.clone()).ok()?;
    match client.get(
        bucket,
        key,
        Some(ByteRange::Inclusive(0, 0)),
        &mut Vec::new(),
        &mut |_| {},
    ) {
        Err(ClientError::S3(e)) => Some(*e),
        _ => None,
    }
}

/// What the user reads for a failure the server did not name: the engine's wording, except
/// where it speaks of engine internals (`NotFound` also covers a cancel target).
fn engine_words(code: Option<ErrorCode>, message: &str) -> String {
    match code {
        Some(ErrorCode::NotFound) => "not found (no such bucket or key)".to_owned(),
        _ => message.to_owned(),
    }
}

/// What a failed operation becomes: `S3Error` with the S3 code (the server's, fetched by
/// [`diagnose`] for missing objects and refused credentials; `ConnectionRefused` when nothing
/// listens at the endpoint; else the engine's code name), the engine's code, class, dialect
/// and the object's path.
pub fn op_error(
    py: Python<'_>,
    settings: &ClientSettings,
    bucket: &str,
    key: &str,
    what: &str,
    f: &OpFailure,
) -> PyErr {
    // A GET of the object answers for what the object and the credentials are (missing key,
    // missing bucket, refused signature), so it is asked only about those; any other 4xx
    // (a PUT's EntityTooLarge, say) keeps the engine's code rather than a GET's unrelated one.
    let s3 = match f.code {
        Some(ErrorCode::NotFound | ErrorCode::AccessDenied) => {
            py.detach(|| diagnose(settings, bucket, key))
        }
        _ => None,
    };
    // The engine completes a refused connection as ConnectionReset: one connect says which.
    let refused = match f.code {
        Some(ErrorCode::ConnectionReset) => {
            py.detach(|| s3_lite::net::stream::connection_refused(&settings.endpoint))
        }
        _ => None,
    };
    let engine_code = f.code.map(|c| format!("{c:?}"));
    let path = format!("s3://{bucket}/{key}");
    let (code, said) = match (&s3, refused) {
        (Some(e), _) => (Some(e.code.clone()), e.to_string()),
        (None, Some(r)) => (Some("ConnectionRefused".to_owned()), r),
        (None, None) => (engine_code.clone(), engine_words(f.code, &f.message)),
    };
    let message = format!("{path}: {what}: {said}");
    make(
        py,
        s3_class(code.as_deref()),
        &message,
        &[
            ("code", code),
            ("engine_code", engine_code),
            ("error_class", f.class.map(|c| format!("{c:?}"))),
            ("dialect", Some(f.dialect.to_owned())),
            ("path", Some(path)),
        ],
    )
}

/// A loader failure as the matching Python exception.
pub fn load_error(py: Python<'_>, settings: &ClientSettings, e: &LoadError) -> PyErr {
    let path = |b: &str, k: &str| Some(format!("s3://{b}/{k}"));
    match e {
        LoadError::Op {
            bucket,
            key,
            what,
            failure,
        } => op_error(py, settings, bucket, key, what, failure),
        LoadError::Header { bucket, key, .. } => make(
            py,
            "SafetensorsError",
            &e.to_string(),
            &[("path", path(bucket, key))],
        ),
        LoadError::Index { bucket, key, .. } => make(
            py,
            "SafetensorsError",
            &e.to_string(),
            &[("path", path(bucket, key))],
        ),
        LoadError::Inconsistent(_) => make(py, "SafetensorsError", &e.to_string(), &[]),
        LoadError::NoModel { bucket, prefix } => make(
            py,
            "S3Error",
            &e.to_string(),
            &[
                ("code", Some("NoSuchKey".into())),
                ("path", path(bucket, prefix)),
            ],
        ),
        LoadError::Integrity { bucket, key, .. } => make(
            py,
            "IntegrityError",
            &e.to_string(),
            &[("path", path(bucket, key))],
        ),
        _ => make(py, "HipobjError", &e.to_string(), &[]),
    }
}

/// The exception class of an `S3Error` with `code`: `TimedOutError` (also the builtin
/// `TimeoutError`) for a timeout, else `S3Error`.
fn s3_class(code: Option<&str>) -> &'static str {
    match code {
        Some("TimedOut") => "TimedOutError",
        _ => "S3Error",
    }
}

/// A blocking-client failure of `what` on `target` (bucket, key) as the Python exception:
/// `S3Error` with the server's code (a bare 404 of a HEAD is followed by a one-key listing of
/// the bucket, whose error document says `NoSuchBucket` when the bucket is missing), `ConnectionRefused`, `TimedOut`
/// (`TimedOutError`) or `ConnectionReset` for network failures; `InvalidURLError` for a
/// bucket or key S3 does not allow.
pub fn client_error(
    py: Python<'_>,
    state: &State,
    e: &ClientError,
    target: Option<(&str, &str)>,
    what: &str,
) -> PyErr {
    let path = target.map(|(b, k)| format!("s3://{b}/{k}"));
    let at = path.as_deref().unwrap_or(&state.endpoint);
    let (code, said) = match e {
        ClientError::S3(s3) => {
            let better = match target {
                Some((b, _)) if s3.status == 404 && what == "HEAD" => py.detach(|| {
                    match S3Client::new(state.settings.clone()).map(|mut c| c.probe_bucket(b)) {
                        Ok(Err(ClientError::S3(e))) => Some(*e),
                        _ => None,
                    }
                }),
                _ => None,
            };
            let s3 = better.as_ref().unwrap_or(s3);
            (Some(s3.code.clone()), s3.to_string())
        }
        ClientError::Exchange(ExchangeError::Io { source, .. }) => {
            let code = match source.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Some("TimedOut"),
                std::io::ErrorKind::ConnectionRefused => Some("ConnectionRefused"),
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof => Some("ConnectionReset"),
                _ => None,
            };
            (code.map(str::to_owned), e.to_string())
        }
        ClientError::Build(b) => {
            return make(
                py,
                "InvalidURLError",
                &format!("{at}: {b}"),
                &[("path", path.clone())],
            );
        }
        _ => (None, e.to_string()),
    };
    make(
        py,
        s3_class(code.as_deref()),
        &format!("{at}: {what}: {said}"),
        &[
            ("code", code),
            ("dialect", Some("http".to_owned())),
            ("path", path),
        ],
    )
}
