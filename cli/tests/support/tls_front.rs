//! A TLS front on 127.0.0.1 for tests: terminates TLS (rustls) with a server certificate for
//! `localhost` and `127.0.0.1` issued by a fresh test CA (rcgen), and relays the plaintext to a
//! real S3 server (s3s-fs, or our gateway). Shared by the CLI's and the engine's https tests.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A running TLS front.
pub struct TlsFront {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// PEM of the CA that issued its certificate (the bundle a client must trust).
    pub ca_pem: String,
}

/// A fresh CA and a server certificate it issued for `names`:
/// `(CA PEM, server certificate DER, server key DER)`.
fn test_pki(names: &[&str]) -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    // A name of its own: two test CAs with one name would look like one issuer with a bad
    // signature rather than an unknown one.
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("hipobj test CA {} {n}", std::process::id()),
    );
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let params = rcgen::CertificateParams::new(names).unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (
        ca.pem(),
        CertificateDer::from(cert.der().to_vec()),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

impl TlsFront {
    /// Starts a TLS front relaying to `backend`, its certificate valid for `localhost` and
    /// `127.0.0.1`.
    pub fn start(backend: SocketAddr) -> Self {
        Self::start_for(backend, &["localhost", "127.0.0.1"])
    }

    /// Starts a TLS front relaying to `backend`, its certificate valid for `names` only.
    pub fn start_for(backend: SocketAddr, names: &[&str]) -> Self {
        let (ca_pem, cert, key) = test_pki(names);
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let config = config.clone();
                std::thread::spawn(move || relay(client, backend, config));
            }
        });
        Self { port, ca_pem }
    }

    /// Writes the CA's PEM into `dir` and returns the file's path.
    pub fn write_ca(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let path = dir.join("test-ca.pem");
        std::fs::write(&path, &self.ca_pem).unwrap();
        path
    }
}

/// Copies bytes both ways between a TLS client and the plain backend until either side closes.
fn relay(client: TcpStream, backend: SocketAddr, config: Arc<rustls::ServerConfig>) {
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let mut tls = rustls::StreamOwned::new(conn, client);
    let Ok(mut upstream) = TcpStream::connect(backend) else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let tick = Some(Duration::from_millis(2));
    let _ = tls.sock.set_read_timeout(tick);
    let _ = upstream.set_read_timeout(tick);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if upstream.write_all(&buf[..n]).is_err() {
                    return;
                }
                continue;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        match upstream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tls.write_all(&buf[..n]).and_then(|_| tls.flush()).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}
