//! Python exceptions (classes in `hipobj/_errors.py`) built from engine and loader failures.

use hipobj_loader::batch::OpFailure;
use hipobj_loader::client::{ClientError, ClientSettings, S3Client};
use hipobj_loader::model::LoadError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use ring_api::ErrorCode;
use s3_lite::s3::ByteRange;

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

/// The server's own S3 error code for a request on `bucket/key` that the engine saw fail
/// with a 4xx: one signed `GET bytes=0-0` on the blocking client, whose error document names
/// it (`NoSuchKey`, `NoSuchBucket`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`, ...).
pub fn diagnose(settings: &ClientSettings, bucket: &str, key: &str) -> Option<String> {
    let mut client = S3Client::new(settings.clone()).ok()?;
    match client.get(
        bucket,
        key,
        Some(ByteRange::Inclusive(0, 0)),
        &mut Vec::new(),
        &mut |_| {},
    ) {
        Err(ClientError::S3(e)) => Some(e.code.clone()),
        _ => None,
    }
}

/// What a failed operation becomes: `S3Error` with the S3 code (the server's, fetched by
/// [`diagnose`] for missing objects and refused credentials; else the engine's code name), the engine's code, class,
/// dialect and the object's path.
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
    let s3_code = match f.code {
        Some(ErrorCode::NotFound | ErrorCode::AccessDenied) => {
            py.detach(|| diagnose(settings, bucket, key))
        }
        _ => None,
    };
    let engine_code = f.code.map(|c| format!("{c:?}"));
    let code = s3_code.clone().or_else(|| engine_code.clone());
    let path = format!("s3://{bucket}/{key}");
    let message = format!(
        "{path}: {what}: {}{}",
        s3_code
            .as_deref()
            .map_or(String::new(), |c| format!("{c}: ")),
        f.message
    );
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
