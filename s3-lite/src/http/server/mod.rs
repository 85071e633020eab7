//! The server side of the HTTP/1.1 codec, sans-IO: what the gateway needs to read requests and
//! write responses with the same limits and smuggling rules as the client side.
//!
//! - [`RequestDecoder`]: incremental request decoder. Bytes go in, [`RequestEvent`]s come out;
//!   body bytes are slices of the input (no copy); `Content-Length` and chunked bodies;
//!   `Expect: 100-continue` surfaced on the [`RequestHead`]; hard limits from [`Limits`]
//!   (reused from the client side); TE+CL, differing Content-Lengths, transfer codings other
//!   than `chunked`, several `Host` fields and non-origin-form targets refused.
//! - [`encode_response_head`]: validated response-head encoder that owns the framing header.
//!
//! [`Limits`]: crate::http::Limits

pub mod error;
pub mod request;
pub mod response;

#[cfg(test)]
mod tests;

pub use error::RequestError;
pub use request::{DecodedRequest, RequestDecoder, RequestEvent, RequestHead};
pub use response::{CONTINUE_100, encode_response_head, reason_phrase};
