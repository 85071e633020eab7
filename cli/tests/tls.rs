//! `https://` endpoints: a TLS front (rustls, self-signed certificate for `localhost`) relaying
//! to a real s3s-fs. Verification must fail without the CA, pass with `--ca-bundle`, and be
//! skippable only with `--insecure-skip-tls-verify`.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

/// Starts a TLS relay on 127.0.0.1 in front of `backend`; returns its port and the PEM of its
/// certificate.
fn tls_front(backend: std::net::SocketAddr) -> (u16, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let pem = cert.pem();
    let cert_der = CertificateDer::from(cert.der().to_vec());
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert_der], key_der)
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
    (port, pem)
}

/// Copies bytes both ways between a TLS client and the plain backend until either side closes.
fn relay(client: TcpStream, backend: std::net::SocketAddr, config: Arc<rustls::ServerConfig>) {
    let Ok(conn) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(conn, client);
    let Ok(mut upstream) = TcpStream::connect(backend) else {
        return;
    };
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

fn hipobj(port: u16, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "ls",
            "s3://tls-bucket",
            "--endpoint-url",
            &format!("https://localhost:{port}"),
        ])
        .args(extra)
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .output()
        .unwrap()
}

#[test]
fn https_verifies_certificates_by_default_and_honours_ca_bundle() {
    let server = S3sFs::start();
    server.create_bucket_dir("tls-bucket");
    std::fs::write(server.root.path().join("tls-bucket/hello.txt"), b"hi").unwrap();
    let (port, pem) = tls_front(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, pem).unwrap();

    let out = hipobj(port, &[]);
    assert!(!out.status.success(), "an unknown CA must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    let out = hipobj(port, &["--ca-bundle", bundle.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello.txt"));

    let out = hipobj(port, &["--insecure-skip-tls-verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("verification is disabled"));
}
