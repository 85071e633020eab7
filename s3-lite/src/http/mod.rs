//! HTTP/1.1 for the S3 control plane, sans-IO, on top of httparse.
//!
//! - [`encode_request_head`], [`encode_chunk`], [`encode_last_chunk`]: request side. The encoder
//!   validates everything it writes, so no caller-supplied string can inject a header line.
//! - [`ResponseDecoder`]: an incremental response decoder. Bytes go in, [`Event`]s come out;
//!   partial input is never an error, body bytes are handed back as slices of the input (no copy),
//!   1xx interim responses are skipped, framing follows RFC 9112 §6.3 with the smuggling patterns
//!   (Transfer-Encoding with Content-Length, differing Content-Lengths) rejected, and keep-alive is
//!   tracked so a driver knows when a connection may be reused.
//! - [`Limits`]: hard bounds on the head size, header count, line length, chunk-size line and
//!   trailer section, enforced byte by byte while input is still partial.
//! - [`ChunkedDecoder`]: the chunked-body state machine, usable on its own.
//! - [`Exchange`]: one request/response exchange over a kept-alive connection, built on the
//!   encoder and the decoder: sending order, `Expect: 100-continue`, early answers, reuse and
//!   trailers. Every socket driver (blocking, mio, TLS or not) runs this machine.

mod body;
pub mod chunked;
pub mod decode;
pub mod encode;
pub mod error;
pub mod exchange;
pub mod framing;
pub mod head;
pub mod limits;
pub mod server;

pub use chunked::{ChunkEvent, ChunkedDecoder};
pub use decode::{Decoded, Event, ResponseDecoder};
pub use encode::{encode_chunk, encode_last_chunk, encode_request_head};
pub use error::{HttpError, Malformed};
pub use exchange::{Collected, Exchange, Output, collect_response};
pub use framing::BodyFraming;
pub use head::ResponseHead;
pub use limits::Limits;
pub use server::{RequestDecoder, RequestEvent, RequestHead, encode_response_head};
