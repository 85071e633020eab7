//! TLS client configuration for `https://` endpoints (rustls with the ring provider), shared by
//! every driver (the blocking [`super::blocking::HttpClient`], the engine's mio connections).
//!
//! Certificate verification is on by default against the Mozilla roots (`webpki-roots`). A CA
//! bundle (PEM) replaces them for private CAs; which bundle follows the AWS conventions
//! ([`TlsOptions::with_aws_ca_bundle`]: an explicit setting, else `AWS_CA_BUNDLE`, else the
//! profile's `ca_bundle`, as resolved by [`crate::credentials::resolve`]). Verification can only
//! be switched off through [`TlsOptions::insecure_skip_verify`] (surfaced as
//! `--insecure-skip-tls-verify`): the name says what it does.
//!
//! [`CertificateProblem`] names why a server's certificate was refused, for errors a user can
//! act on ("unknown issuer: pass the CA bundle"), and a server that answered plain HTTP to the
//! ClientHello ([`CertificateProblem::PlainHttpAnswer`]: "is the endpoint http://?").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// The rustls client configuration the drivers take (re-exported so callers need not name
/// rustls themselves).
pub use rustls::ClientConfig as TlsClientConfig;

/// How to trust the server.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM file with the CA certificates to trust instead of the built-in Mozilla roots.
    pub ca_bundle: Option<PathBuf>,
    /// Accept any server certificate. Only for testing against self-signed servers.
    pub insecure_skip_verify: bool,
}

impl TlsOptions {
    /// Fills in the CA bundle from the AWS conventions when none was set explicitly:
    /// `resolved` is [`crate::credentials::ResolvedConfig::ca_bundle`] (`AWS_CA_BUNDLE`, else the
    /// profile's `ca_bundle`).
    #[must_use]
    pub fn with_aws_ca_bundle(mut self, resolved: Option<&Path>) -> Self {
        if self.ca_bundle.is_none() {
            self.ca_bundle = resolved.map(Path::to_path_buf);
        }
        self
    }
}

/// Why a server's certificate was refused (or the server spoke no TLS at all), in words a user
/// can act on. Every one is final: retrying meets the same server.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateProblem {
    /// Not issued by a trusted CA (a private CA needs its bundle: `--ca-bundle`,
    /// `AWS_CA_BUNDLE`, the profile's `ca_bundle` or the engine's `ca_bundle`).
    #[error(
        "certificate issued by an unknown CA (trust it with a CA bundle: AWS_CA_BUNDLE, ca_bundle)"
    )]
    UnknownIssuer,
    /// Past its validity period.
    #[error("certificate expired")]
    Expired,
    /// Not valid yet.
    #[error("certificate not valid yet")]
    NotValidYet,
    /// Not issued for the host name connected to.
    #[error("certificate not valid for the endpoint's host name")]
    NotValidForName,
    /// Revoked by its issuer.
    #[error("certificate revoked")]
    Revoked,
    /// A signature in the chain does not verify.
    #[error("certificate signature invalid")]
    BadSignature,
    /// The server answered the handshake with bytes that are not TLS: a plain-HTTP port
    /// answers a ClientHello with an HTTP error (the gateway does at once). Retrying cannot
    /// help; the endpoint is probably `http://`.
    #[error("the server answered plain HTTP, not TLS (TLS mismatch): is the endpoint http://?")]
    PlainHttpAnswer,
    /// Anything else rustls refused (its words).
    #[error("certificate refused: {0}")]
    Other(String),
}

impl CertificateProblem {
    /// The certificate problem behind a rustls error, if it is one.
    pub fn of_rustls(e: &rustls::Error) -> Option<Self> {
        // A record whose type byte is no TLS content type: the peer is not speaking TLS
        // ("HTTP/1.1 400 ..." starts with 0x48).
        if matches!(
            e,
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
        ) {
            return Some(Self::PlainHttpAnswer);
        }
        let rustls::Error::InvalidCertificate(c) = e else {
            return None;
        };
        Some(match c {
            CertificateError::UnknownIssuer => Self::UnknownIssuer,
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => Self::Expired,
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                Self::NotValidYet
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                Self::NotValidForName
            }
            CertificateError::Revoked => Self::Revoked,
            CertificateError::BadSignature => Self::BadSignature,
            other => Self::Other(format!("{other:?}")),
        })
    }

    /// The certificate problem carried by an I/O error from a TLS stream, if any.
    pub fn of_io(e: &std::io::Error) -> Option<Self> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .and_then(Self::of_rustls)
    }
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
