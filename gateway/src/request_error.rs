//! Messages for requests the HTTP decoder refused. The codec's errors are shared with the
//! response side of s3-lite and worded for a response ("response head exceeds ..."); a
//! client that sent a bad request is told about its request.

use s3_lite::http::HttpError;
use s3_lite::http::server::RequestError;

/// The message sent to a client whose request could not be decoded.
pub fn describe(e: &RequestError) -> String {
    match e {
        RequestError::Http(h) => match h {
            HttpError::Malformed(m) => format!("malformed request head: {m}"),
            HttpError::HeadTooLarge { limit } => format!("request head exceeds {limit} bytes"),
            HttpError::TooManyHeaders { limit } => {
                format!("request has more than {limit} header lines")
            }
            HttpError::LineTooLong { limit } => {
                format!("a request head line exceeds {limit} bytes")
            }
            HttpError::UnexpectedEof => "connection closed before the request was complete".into(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_errors_name_the_request() {
        let e = RequestError::Http(HttpError::HeadTooLarge { limit: 65536 });
        assert_eq!(describe(&e), "request head exceeds 65536 bytes");
        let e = RequestError::Http(HttpError::TooManyHeaders { limit: 100 });
        assert!(describe(&e).starts_with("request has more"));
        let e = RequestError::Http(HttpError::LineTooLong { limit: 8 });
        assert!(!describe(&e).contains("response"));
        assert!(!describe(&RequestError::MissingHost).contains("response"));
    }
}
