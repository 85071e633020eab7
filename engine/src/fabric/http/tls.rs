//! TLS for `https://` endpoints: the client configuration every worker's connections share,
//! built once per engine with the rules every hipObject client follows
//! (`s3_lite::net::tls`): verification on by default, the Mozilla roots unless a CA bundle is
//! named (the builder's `ca_bundle`, else `AWS_CA_BUNDLE`, else the profile's `ca_bundle`).
//!
//! The handshake runs inside the worker's mio loop (`s3_lite::net::transport::Transport` over
//! the non-blocking socket): no thread, no blocking call. The RDMA dialects' side exchanges
//! (the rc-persistent pairing, hipobj-rc-v2's PREPARE / READY / CANCEL: `fabric::rdma::ctrl`)
//! use the same context, so they are verified like every HTTP request. A refused certificate
//! completes the op at once (no retry: retrying cannot change the certificate) with
//! [`CERTIFICATE_REFUSED`], and is kept here so [`crate::Engine::tls_failure`] can say what
//! was wrong.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::net::tls::{CertificateProblem, TlsOptions, client_config};

use crate::fabric::{Outcome, Retry};

/// A refused server certificate: final (a retry meets the same certificate), reported as
/// `AccessDenied` in class `Transport` (we denied the server), the reason kept for
/// [`crate::Engine::tls_failure`].
pub(crate) const CERTIFICATE_REFUSED: Outcome =
    Outcome::fail(ErrorCode::AccessDenied, ErrorClass::Transport, Retry::No);

/// The TLS side of one engine's endpoint.
#[derive(Debug)]
pub(crate) struct TlsContext {
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// The name the certificate must be valid for (and the SNI sent): the endpoint's host.
    pub(crate) server_name: String,
    /// The most recent certificate refusal, for [`crate::Engine::tls_failure`].
    last_failure: Mutex<Option<CertificateProblem>>,
}

impl TlsContext {
    /// The context for `host`, trusting `ca_bundle` (else the built-in roots) unless
    /// `insecure_skip_verify`.
    pub(crate) fn new(
        host: &str,
        ca_bundle: Option<PathBuf>,
        insecure_skip_verify: bool,
    ) -> Result<Self, crate::error::EngineError> {
        let config = client_config(&TlsOptions {
            ca_bundle,
            insecure_skip_verify,
        })
        .map_err(crate::error::EngineError::Tls)?;
        Ok(Self {
            config,
            server_name: host.to_owned(),
            last_failure: Mutex::new(None),
        })
    }

    /// Records a refused certificate.
    pub(crate) fn refused(&self, problem: CertificateProblem) {
        if let Ok(mut slot) = self.last_failure.lock() {
            *slot = Some(problem);
        }
    }

    /// Whether the failed socket or TLS call `e` was a refused certificate; if so it is
    /// recorded in `tls` (when there is one).
    pub(crate) fn refusal(tls: Option<&Self>, e: &std::io::Error) -> bool {
        let Some(problem) = CertificateProblem::of_io(e) else {
            return false;
        };
        if let Some(t) = tls {
            t.refused(problem);
        }
        true
    }

    /// The most recent certificate refusal.
    pub(crate) fn last_failure(&self) -> Option<CertificateProblem> {
        self.last_failure.lock().ok().and_then(|s| s.clone())
    }
}

/// The TLS context an engine needs for `endpoint` (`None` for `http://`), and the fabric its
/// RDMA dialects may use. Over `https://`, the dialects' side exchanges (pairing, PREPARE /
/// READY / CANCEL) speak TLS with this same context, but their payloads do not: the soft
/// fabric's data stream is plain TCP and RDMA traffic (RoCE, InfiniBand) is not TLS. So an
/// RDMA fabric carries an `https://` endpoint's payloads only when asked for by name
/// (`Fabric::Soft`, `Fabric::Verbs`); `Fabric::Auto` keeps every payload inside TLS (HTTPS).
pub(crate) fn for_endpoint(
    endpoint: &s3_lite::s3::Endpoint,
    b: &crate::config::EngineBuilder,
    resolved: &s3_lite::credentials::ResolvedConfig,
) -> Result<(Option<Arc<TlsContext>>, crate::config::Fabric), crate::error::EngineError> {
    use crate::config::Fabric;
    if endpoint.scheme != s3_lite::s3::Scheme::Https {
        return Ok((None, b.fabric));
    }
    let fabric = match b.fabric {
        Fabric::Auto | Fabric::Http => Fabric::Http,
        named @ (Fabric::Soft | Fabric::Verbs) => named,
    };
    let host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
    // The builder's bundle, else AWS_CA_BUNDLE, else the profile's `ca_bundle`.
    let bundle = b.ca_bundle.clone().or_else(|| resolved.ca_bundle.clone());
    let context = TlsContext::new(host, bundle, b.insecure_skip_tls_verify)?;
    Ok((Some(Arc::new(context)), fabric))
}
