//! Blocking byte streams to an endpoint: plain TCP or TLS over TCP.
//!
//! The blocking socket layer under [`super::blocking::HttpClient`] (readiness loops use
//! [`super::transport::Transport`] instead). Sockets get `TCP_NODELAY` (a request head and a small body must not wait for a
//! delayed ACK) and read/write timeouts, so a stalled peer ends in an error, not a hang.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// Timeouts applied to every connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Limit for establishing the TCP connection (per resolved address).
    pub connect: Duration,
    /// Limit for each blocking read or write.
    pub io: Duration,
    /// How long a request with `Expect: 100-continue` waits for the go-ahead before it sends
    /// its body anyway (RFC 9110 §10.1.1).
    pub expect_continue: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(30),
            expect_continue: Duration::from_secs(1),
        }
    }
}

/// A connected stream.
pub enum Stream {
    /// Plain TCP (`http://`).
    Plain(TcpStream),
    /// TLS over TCP (`https://`).
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stream::Plain(s) => f.debug_tuple("Plain").field(&s.peer_addr().ok()).finish(),
            Stream::Tls(s) => f
                .debug_tuple("Tls")
                .field(&s.sock.peer_addr().ok())
                .finish(),
        }
    }
}

fn connect_tcp(host: &str, port: u16, timeouts: Timeouts) -> io::Result<TcpStream> {
    let mut last_err = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{host}:{port} resolved to no address"),
    );
    for addr in (host, port).to_socket_addrs()? {
        #[allow(clippy::disallowed_methods)] // this module is the socket driver
        match TcpStream::connect_timeout(&addr, timeouts.connect) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(timeouts.io))?;
                stream.set_write_timeout(Some(timeouts.io))?;
                return Ok(stream);
            }
            // The caller names the host and port; only an address it did not name is added.
            Err(e) if addr.to_string() == format!("{host}:{port}") => last_err = e,
            Err(e) => last_err = io::Error::new(e.kind(), format!("{e} (address {addr})")),
        }
    }
    Err(last_err)
}

impl Stream {
    /// Connects to `host:port`, with TLS when `tls` is given (SNI = `host`).
    pub fn connect(
        host: &str,
        port: u16,
        tls: Option<&Arc<ClientConfig>>,
        timeouts: Timeouts,
    ) -> io::Result<Self> {
        let tcp = connect_tcp(host, port, timeouts)?;
        match tls {
            None => Ok(Stream::Plain(tcp)),
            Some(config) => {
                let name = ServerName::try_from(host.to_owned()).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("TLS server name {host:?}: {e}"),
                    )
                })?;
                let conn = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
                let mut stream = StreamOwned::new(conn, tcp);
                // Complete the handshake now so certificate errors surface at connect time.
                while stream.conn.is_handshaking() {
                    stream
                        .conn
                        .complete_io(&mut stream.sock)
                        .map_err(handshake_error)?;
                }
                Ok(Stream::Tls(Box::new(stream)))
            }
        }
    }
}

/// A handshake that failed because the peer speaks no TLS (a plain-HTTP port answers a
/// ClientHello with an HTTP error or closes) says so; other failures (certificates) are kept.
fn handshake_error(e: io::Error) -> io::Error {
    let not_tls = e.kind() == io::ErrorKind::UnexpectedEof
        || e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|r| matches!(r, rustls::Error::InvalidMessage(_)));
    if not_tls {
        io::Error::new(
            e.kind(),
            format!("the server did not answer TLS; is the endpoint http://? ({e})"),
        )
    } else {
        e
    }
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// One read that waits at most `limit` (then fails with `WouldBlock`/`TimedOut`); the
    /// stream's own read timeout applies again afterwards.
    pub fn read_within(&mut self, buf: &mut [u8], limit: Duration) -> io::Result<usize> {
        let before = self.tcp().read_timeout()?;
        self.tcp()
            .set_read_timeout(Some(limit.max(Duration::from_millis(1))))?;
        let result = self.read(buf);
        self.tcp().set_read_timeout(before)?;
        result
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => match s.read(buf) {
                // A peer that closes without close_notify after a complete response is common
                // with S3 servers; the HTTP framing (not TLS) decides whether data is missing.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// `connect to HOST:PORT: Connection refused` when a TCP connection to the endpoint is refused
/// now, else `None` (it connects, times out, or fails another way: the engine's own code then
/// stands).
#[must_use]
pub fn connection_refused(endpoint: &crate::s3::Endpoint) -> Option<String> {
    let timeouts = Timeouts {
        connect: std::time::Duration::from_secs(2),
        ..Timeouts::default()
    };
    match Stream::connect(&endpoint.host, endpoint.port, None, timeouts) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(format!(
            "connect to {}:{}: connection refused",
            endpoint.host, endpoint.port
        )),
        _ => None,
    }
}
