//! TLS client configuration for `https://` endpoints (rustls with the ring provider).
//!
//! Certificate verification is on by default against the Mozilla roots (`webpki-roots`). A CA
//! bundle (PEM) replaces them for private CAs. Verification can only be switched off through
//! [`TlsOptions::insecure_skip_verify`], surfaced as `--insecure-skip-tls-verify`: the name says
//! what it does, and a warning is printed when it is used.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How to trust the server.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM file with the CA certificates to trust instead of the built-in Mozilla roots.
    pub ca_bundle: Option<PathBuf>,
    /// Accept any server certificate. Only for testing against self-signed servers.
    pub insecure_skip_verify: bool,
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The CA bundle could not be read or holds no usable certificate.
    #[error("CA bundle {path}: {reason}")]
    CaBundle {
        /// The bundle's path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots_from_bundle(path: &Path) -> Result<RootCertStore, TlsError> {
    let err = |reason: String| TlsError::CaBundle {
        path: path.to_owned(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    let iter = CertificateDer::pem_file_iter(path).map_err(|e| err(e.to_string()))?;
    for cert in iter {
        let cert = cert.map_err(|e| err(e.to_string()))?;
        roots.add(cert).map_err(|e| err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(err("no certificates found".into()));
    }
    Ok(roots)
}

/// Builds the rustls client configuration for `options`.
pub fn client_config(options: &TlsOptions) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let config = if options.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth()
    } else {
        let roots = match &options.ca_bundle {
            Some(path) => roots_from_bundle(path)?,
            None => RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Accepts any certificate chain but still checks that the handshake signatures are valid
/// (so the session is encrypted to whoever holds the presented key; only identity is unchecked).
#[derive(Debug)]
struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_builds_with_webpki_roots() {
        client_config(&TlsOptions::default()).unwrap();
    }

    #[test]
    fn bad_bundle_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = client_config(&TlsOptions {
            ca_bundle: Some(path.clone()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("no certificates found"), "{err}");
        let missing = dir.path().join("missing.pem");
        let err = client_config(&TlsOptions {
            ca_bundle: Some(missing),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
    }
}
