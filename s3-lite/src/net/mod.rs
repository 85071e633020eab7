//! Socket drivers of the sans-IO exchange machine ([`crate::http::Exchange`]), behind the `net`
//! feature. The codec never depends on this module.
//!
//! - [`tls`]: the rustls client configuration every driver uses: verification on by default,
//!   Mozilla roots or a CA bundle (AWS conventions), the opt-out named for what it does, and
//!   [`tls::CertificateProblem`] to say why a certificate was refused.
//! - [`stream`]: blocking TCP or TLS-over-TCP streams with timeouts.
//! - [`blocking`]: [`blocking::HttpClient`], one exchange at a time over a kept-alive
//!   connection (the CLI, the gateway's upstream client, the C API's diagnostics).
//! - [`transport`]: [`transport::Transport`], plain or TLS bytes over any non-blocking stream,
//!   for readiness-driven drivers (the engine's mio workers): rustls is itself sans-IO, so TLS
//!   never blocks the loop.

pub mod blocking;
pub mod stream;
pub mod tls;
pub mod transport;
