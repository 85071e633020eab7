//! Naming a failure the way the server or the socket named it, when the first answer lost it.
//!
//! Two answers carry less than the user needs:
//!
//! - An engine completion carries an errno-like [`ErrorCode`] (`NotFound`, `AccessDenied`),
//!   not the S3 code of the server's `<Error>` document; a HEAD answer has no body at all, so
//!   a bodiless 404 reads `NoSuchKey` even when the bucket is what is missing. On that failure
//!   path only, [`server_error`] asks the server once more with a signed `GET bytes=0-0` of
//!   the same object on the blocking client: its error document names the real code
//!   (`NoSuchBucket`, `SignatureDoesNotMatch`, `InvalidAccessKeyId`, …).
//! - The engine completes a refused connection as `ConnectionReset` (one errno for both).
//!   [`connection_refused`] opens one TCP connection to the endpoint to tell them apart and
//!   names `host:port`, the way the blocking client already says it.

use ring_api::ErrorCode;
use s3_lite::s3::{ByteRange, S3Error};

use crate::client::{ClientError, S3Client};
use crate::engine_io::TransferError;

/// What the failed request was: a download asks about an object that should exist, an
/// upload about one that need not (so a `NoSuchKey` says nothing about why it failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// HEAD, GET, range-get.
    Read,
    /// PUT, multipart steps.
    Write,
}

/// The server's own error for `bucket/key` with these credentials: one signed `GET bytes=0-0`
/// whose error document names the S3 code. `None` when that GET succeeds, fails without an
/// S3 error, or answers with a code that does not explain a failure of `asked` (416 for an
/// empty object; `NoSuchKey` for an upload, whose key need not exist).
pub fn server_error(
    client: &mut S3Client,
    bucket: &str,
    key: &str,
    asked: Asked,
) -> Option<S3Error> {
    let answer = client.get(
        bucket,
        key,
        Some(ByteRange::Inclusive(0, 0)),
        &mut std::io::sink(),
        &mut |_| {},
    );
    let Err(ClientError::S3(e)) = answer else {
        return None;
    };
    let explains = match e.code.as_str() {
        "InvalidRange" => false,
        "NoSuchKey" => asked == Asked::Read,
        _ => (400..500).contains(&e.status),
    };
    explains.then_some(*e)
}

/// Whether an engine completion code is one the server's error document can name better:
/// a 4xx the engine mapped from the status alone.
#[must_use]
pub fn server_can_name(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotFound | ErrorCode::AccessDenied | ErrorCode::InvalidArgument
    )
}

/// A HEAD that failed with a bodiless 4xx, renamed by the server's error document when it
/// names one ([`server_error`]); any other failure is returned as it was.
pub fn head_error(client: &mut S3Client, bucket: &str, key: &str, e: ClientError) -> ClientError {
    match &e {
        ClientError::S3(s3) if (400..500).contains(&s3.status) && s3.status != 416 => {
            server_error(client, bucket, key, Asked::Read)
                .map_or(e, |named| ClientError::S3(Box::new(named)))
        }
        _ => e,
    }
}

pub use s3_lite::net::stream::connection_refused;

/// An engine transfer's failure as the user should read it: led by the server's S3 error when
/// the completion only had a status-mapped code ([`server_can_name`]), by `connection refused`
/// with `host:port` when a `ConnectionReset` was a refusal; the engine's own words follow in
/// parentheses. Anything else is the engine's message.
pub fn transfer_error(
    client: &mut S3Client,
    e: TransferError,
    bucket: &str,
    key: &str,
    asked: Asked,
) -> String {
    let better = match e.code {
        Some(c) if server_can_name(c) => {
            server_error(client, bucket, key, asked).map(|s3| s3.to_string())
        }
        Some(ErrorCode::ConnectionReset) => connection_refused(client.endpoint()),
        _ => None,
    };
    match better {
        Some(b) => format!("{b} (engine: {e})"),
        None => e.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_port_is_named_refused_with_host_and_port() {
        // Bind, learn the port, close: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let endpoint = s3_lite::s3::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        assert_eq!(
            connection_refused(&endpoint),
            Some(format!("connect to 127.0.0.1:{port}: connection refused"))
        );
    }

    #[test]
    fn a_listening_port_is_not_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let endpoint = s3_lite::s3::Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        assert_eq!(connection_refused(&endpoint), None);
    }

    #[test]
    fn only_status_mapped_codes_are_renamed() {
        assert!(server_can_name(ErrorCode::NotFound));
        assert!(server_can_name(ErrorCode::AccessDenied));
        assert!(!server_can_name(ErrorCode::ConnectionReset));
        assert!(!server_can_name(ErrorCode::Integrity));
    }
}
