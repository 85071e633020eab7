//! Python exceptions (classes in `hipobj/_errors.py`) built from engine and loader failures.

use hipobj_loader::batch::OpFailure;
use hipobj_loader::client::{ClientError, ClientSettings, S3Client};
use hipobj_loader::model::LoadError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ring_api::ErrorCode;
use s3_lite::s3::{ByteRange, S3Error};

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
        "S3Error",
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
