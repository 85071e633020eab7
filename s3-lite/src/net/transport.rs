//! Plain or TLS bytes over a non-blocking stream, for readiness-driven drivers.
//!
//! rustls' [`ClientConnection`] is sans-IO (`read_tls` / `process_new_packets` / `write_tls`),
//! so TLS fits a poll loop without a thread or a blocking call: [`Transport`] reads and writes
//! like a socket, returns `WouldBlock` exactly when the socket would, and keeps the handshake
//! moving from whichever side the driver calls. Rules for an edge-triggered driver:
//!
//! - After the request is written, call [`Transport::flush`] until it returns `Ok(true)`: TLS
//!   records may still be queued when the plaintext was accepted.
//! - Read until `WouldBlock`, as with a plain socket: plaintext rustls already decrypted is
//!   returned before the socket is read again.
//! - A certificate or protocol failure is an `io::Error` of kind `InvalidData` wrapping the
//!   [`rustls::Error`]; [`super::tls::CertificateProblem::of_io`] names a certificate problem.
//! - A peer that closes without `close_notify` reads as a clean end of stream (`Ok(0)`): the
//!   HTTP framing, not TLS, decides whether data is missing (many S3 servers close that way).

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

/// A client connection's byte stream: plain, or TLS over `S`.
#[derive(Debug)]
pub enum Transport<S> {
    /// Plain bytes (`http://`).
    Plain(S),
    /// TLS over `S` (`https://`).
    Tls(Box<TlsLayer<S>>),
}

/// The TLS session and the socket under it.
#[derive(Debug)]
pub struct TlsLayer<S> {
    conn: ClientConnection,
    sock: S,
}

/// Wraps a rustls failure so drivers can recognise it (see the module docs).
fn tls_failure(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<S: Read + Write> Transport<S> {
    /// A plain transport.
    pub fn plain(sock: S) -> Self {
        Self::Plain(sock)
    }

    /// A TLS client transport to `host` (the SNI name and the name the certificate must be
    /// valid for) over `sock`; the handshake starts with the first write or read.
    pub fn tls(sock: S, config: &Arc<ClientConfig>, host: &str) -> io::Result<Self> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS server name {host:?}: {e}"),
            )
        })?;
        let conn = ClientConnection::new(Arc::clone(config), name).map_err(tls_failure)?;
        Ok(Self::Tls(Box::new(TlsLayer { conn, sock })))
    }

    /// The socket (for registration with a poller, socket options, errors).
    pub fn socket(&self) -> &S {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => &t.sock,
        }
    }

    /// The socket, mutably.
    pub fn socket_mut(&mut self) -> &mut S {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => &mut t.sock,
        }
    }

    /// Whether this is a TLS transport.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls(_))
    }

    /// Writes queued TLS records to the socket: `Ok(true)` when nothing is left queued,
    /// `Ok(false)` when the socket would block (wait for writability). Plain: always `true`.
    pub fn flush(&mut self) -> io::Result<bool> {
        match self {
            Self::Plain(_) => Ok(true),
            Self::Tls(t) => t.flush_records(),
        }
    }
}

impl<S: Read + Write> TlsLayer<S> {
    fn flush_records(&mut self) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads TLS records from the socket and processes them. `Ok(true)`: progress (records or
    /// the end of the stream); `Ok(false)`: the socket would block.
    fn pull_records(&mut self) -> io::Result<bool> {
        loop {
            match self.conn.read_tls(&mut self.sock) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if let Err(e) = self.conn.process_new_packets() {
            // rustls queued an alert for the peer; send it if the socket takes it.
            let _ = self.flush_records();
            return Err(tls_failure(e));
        }
        // Handshake replies (and plaintext buffered during the handshake) go out at once.
        self.flush_records()?;
        Ok(true)
    }

    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                // Closed without close_notify: the HTTP framing decides (module docs).
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if !self.pull_records()? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }

    fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            // Queued records first, so the buffers stay bounded.
            let drained = self.flush_records()?;
            let n = self.conn.writer().write(buf)?;
            if n > 0 {
                self.flush_records()?;
                return Ok(n);
            }
            // rustls' buffers are full. During the handshake that is plaintext waiting for the
            // server's reply: read it (the same readiness may have brought it); otherwise the
            // socket must drain first.
            if !drained || !self.conn.is_handshaking() || !self.pull_records()? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl<S: Read + Write> Read for Transport<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(t) => t.read_plain(buf),
        }
    }
}

impl<S: Read + Write> Write for Transport<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(t) => t.write_plain(buf),
        }
    }

    /// Plain: the socket's flush. TLS: [`Transport::flush`], `WouldBlock` while records are
    /// still queued.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(t) => match t.flush_records()? {
                true => Ok(()),
                false => Err(io::ErrorKind::WouldBlock.into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// An in-memory non-blocking pipe end: reads what the peer wrote, `WouldBlock` when empty.
    #[derive(Debug, Default)]
    struct Pipe {
        inbox: VecDeque<u8>,
        outbox: Vec<u8>,
        closed: bool,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.inbox.is_empty() {
                return if self.closed {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = buf.len().min(self.inbox.len());
            for (d, s) in buf.iter_mut().zip(self.inbox.drain(..n)) {
                *d = s;
            }
            Ok(n)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.outbox.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn plain_passes_bytes_and_would_block_through() {
        let mut t = Transport::plain(Pipe::default());
        assert!(!t.is_tls());
        t.write_all(b"GET").unwrap();
        assert!(t.flush().unwrap());
        assert_eq!(t.socket().outbox, b"GET");
        let mut buf = [0u8; 4];
        assert_eq!(
            t.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        t.socket_mut().inbox.extend(b"ok");
        assert_eq!(t.read(&mut buf).unwrap(), 2);
    }

    #[test]
    fn tls_starts_with_a_client_hello_and_would_block_for_the_answer() {
        let config =
            super::super::tls::client_config(&super::super::tls::TlsOptions::default()).unwrap();
        let mut t = Transport::tls(Pipe::default(), &config, "localhost").unwrap();
        assert!(t.is_tls());
        // Plaintext written before the handshake completes is accepted (buffered)...
        assert_eq!(t.write(b"GET / HTTP/1.1\r\n\r\n").unwrap(), 18);
        assert!(t.flush().unwrap());
        // ...and what went out is a TLS handshake record (ClientHello), not the plaintext.
        let out = &t.socket().outbox;
        assert_eq!(out.first(), Some(&0x16), "handshake record");
        assert!(!out.windows(3).any(|w| w == b"GET"));
        let mut buf = [0u8; 16];
        assert_eq!(
            t.read(&mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // A peer that answers with plain HTTP is a TLS failure, not data.
        t.socket_mut()
            .inbox
            .extend(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let err = t.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        assert!(
            err.get_ref()
                .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some())
        );
        assert_eq!(
            super::super::tls::CertificateProblem::of_io(&err),
            Some(super::super::tls::CertificateProblem::PlainHttpAnswer),
            "named as a plain-HTTP answer"
        );
        // A peer that closes during the handshake ends the stream.
        let mut t = Transport::tls(Pipe::default(), &config, "localhost").unwrap();
        t.socket_mut().closed = true;
        assert_eq!(t.read(&mut buf).unwrap(), 0);
        assert!(Transport::tls(Pipe::default(), &config, "bad name!").is_err());
        assert!(Transport::tls(Pipe::default(), &config, "[::1]").is_ok());
    }
}
