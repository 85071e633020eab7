//! TLS for `https://` endpoints: the client configuration every worker's connections share,
//! built once per engine with the rules every hipObject client follows
//! (`s3_lite::net::tls`): verification on by default, the Mozilla roots unless a CA bundle is
//! named (the builder's `ca_bundle`, else `AWS_CA_BUNDLE`, else the profile's `ca_bundle`).
//!
//! The handshake runs inside the worker's mio loop (`s3_lite::net::transport::Transport` over
//! the non-blocking socket): no thread, no blocking call. A refused certificate completes the
//! op at once (no retry: retrying cannot change the certificate) with `AccessDenied` in class
//! `Transport`, and is kept here so [`crate::Engine::tls_failure`] can say what was wrong.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use s3_lite::net::tls::{CertificateProblem, TlsOptions, client_config};

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

    /// The most recent certificate refusal.
    pub(crate) fn last_failure(&self) -> Option<CertificateProblem> {
        self.last_failure.lock().ok().and_then(|s| s.clone())
    }
}

/// The TLS context an engine needs for `endpoint` (`None` for `http://`), and the fabric its
/// RDMA dialects may use: their side exchanges (pairing, hipobj-rc-v2) speak plain HTTP, so an
/// `https://` endpoint never gets them (`Fabric::Auto` carries payloads over HTTPS; asking for
/// an RDMA fabric explicitly is refused rather than sending plaintext beside TLS).
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
        Fabric::Soft | Fabric::Verbs => {
            return Err(crate::error::EngineError::Unsupported(
                "an RDMA fabric with an https:// endpoint: the RDMA dialects' side exchanges \
                 have no TLS yet (use Fabric::Auto or Fabric::Http: payloads then go over HTTPS)",
            ));
        }
    };
    let host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
    // The builder's bundle, else AWS_CA_BUNDLE, else the profile's `ca_bundle`.
    let bundle = b.ca_bundle.clone().or_else(|| resolved.ca_bundle.clone());
    let context = TlsContext::new(host, bundle, b.insecure_skip_tls_verify)?;
    Ok((Some(Arc::new(context)), fabric))
}
