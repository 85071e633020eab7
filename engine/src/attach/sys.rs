//! The libc surface of the daemon transport: `SOCK_SEQPACKET` Unix sockets that carry file
//! descriptors (`SCM_RIGHTS`) and name their peer (`SO_PEERCRED`), and `poll(2)`. The sealed
//! memfd mappings both processes map are [`SharedMemory`] (`memory::shared`).
//!
//! `#[allow(unsafe_code)]` is confined to this module within `attach`. Every block makes one
//! libc call on memory it owns or borrows for the call.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

pub use crate::memory::SharedMemory;

/// Most file descriptors one message carries.
pub const MAX_FDS: usize = 4;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Who is on the other end of a Unix socket, as the kernel saw it at `connect`/`listen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// A connected `SOCK_SEQPACKET` Unix socket: every send is one message, every receive returns
/// one whole message (or reports it truncated), and messages carry file descriptors.
#[derive(Debug)]
pub struct SeqPacket {
    fd: OwnedFd,
}

fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} must be 1..{} bytes without NUL",
                path.display(),
                addr.sun_path.len()
            ),
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn seqpacket_socket(nonblocking: bool) -> io::Result<OwnedFd> {
    let flags = libc::SOCK_SEQPACKET
        | libc::SOCK_CLOEXEC
        | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: socket takes no pointers; it returns a new fd or -1.
    let raw = cvt(unsafe { libc::socket(libc::AF_UNIX, flags, 0) })?;
    // SAFETY: `raw` is a freshly created fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl SeqPacket {
    /// Connects (blocking) to the listening socket at `path`.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let fd = seqpacket_socket(false)?;
        let (addr, len) = unix_addr(path)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes, borrowed for the call.
        cvt(unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) })?;
        Ok(Self { fd })
    }

    /// A connected pair (tests, and a daemon handing itself a socket).
    pub fn pair() -> io::Result<(Self, Self)> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is two writable ints, exclusively borrowed for the call.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        // SAFETY: both fds were just created and are owned by nothing else.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((Self { fd: a }, Self { fd: b }))
    }

    /// Switches non-blocking mode on or off.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        // SAFETY: fcntl with F_GETFL takes no pointer.
        let flags = cvt(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_GETFL) })?;
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: fcntl with F_SETFL takes an int.
        cvt(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_SETFL, flags) })?;
        Ok(())
    }

    /// Sets the receive timeout (`None`: wait forever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let t = timeout.unwrap_or(Duration::ZERO);
        let tv = libc::timeval {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_usec: libc::suseconds_t::from(t.subsec_micros()),
        };
        // SAFETY: `tv` outlives the call and its size is passed.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(())
    }

    /// The peer's credentials (`SO_PEERCRED`).
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are exclusively borrowed for the call; `len` holds the size.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&raw mut cred).cast(),
                &raw mut len,
            )
        })?;
        Ok(PeerCred {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
        })
    }

    /// Sends `bytes` as one message with `fds` attached (at most [`MAX_FDS`]).
    pub fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        if fds.len() > MAX_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many descriptors for one message",
            ));
        }
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr().cast_mut().cast(),
            iov_len: bytes.len(),
        };
        let mut control = [0u64; 8]; // 64 bytes: CMSG_SPACE(4 * 4) is 32 on Linux
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let payload = (fds.len() * size_of::<libc::c_int>()) as libc::c_uint;
            // SAFETY: CMSG_SPACE is arithmetic on its argument.
            let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space.min(size_of_val(&control));
            // SAFETY: `msg` points at `control`, which is large enough for one header, so
            // CMSG_FIRSTHDR returns a pointer into it (checked for null below).
            let cmsg = unsafe { libc::CMSG_FIRSTHDR(&raw const msg) };
            if cmsg.is_null() {
                return Err(io::Error::other("no room for the control message"));
            }
            // SAFETY: `cmsg` points at a header inside `control` (aligned: u64 storage); the
            // data area of CMSG_LEN(payload) bytes fits in CMSG_SPACE(payload) <= 64 bytes.
            unsafe {
                (*cmsg).cmsg_level = libc::SOL_SOCKET;
                (*cmsg).cmsg_type = libc::SCM_RIGHTS;
                (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                for (i, fd) in fds.iter().enumerate() {
                    data.add(i).write_unaligned(fd.as_raw_fd());
                }
            }
        }
        // SAFETY: `msg` points at `iov` (borrowing `bytes`) and `control`, all alive for the
        // call; MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE.
        let n = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &raw const msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != bytes.len() {
            return Err(io::Error::other("message sent short"));
        }
        Ok(())
    }

    /// Receives one message into `buf`: its length and the descriptors it carried (owned now;
    /// closed when dropped). `Ok((0, _))` is end of stream. A message longer than `buf` or
    /// carrying more than [`MAX_FDS`] descriptors is an `InvalidData` error (its descriptors
    /// are closed).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control);
        // SAFETY: `msg` points at `iov` (borrowing `buf` mutably) and `control`, both alive
        // and exclusively ours for the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &raw mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fds = Vec::new();
        // SAFETY: the kernel filled `control` up to `msg.msg_controllen`; the CMSG macros walk
        // only inside that range and return null past its end.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&raw const msg) };
        while !cmsg.is_null() {
            // SAFETY: `cmsg` is a header inside `control` (see above).
            let (level, kind, len) =
                unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len) };
            if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
                // SAFETY: CMSG_LEN is arithmetic.
                let header = unsafe { libc::CMSG_LEN(0) } as usize;
                // `cmsg_len` is `size_t` with glibc and `u32` with musl.
                #[allow(clippy::unnecessary_cast)]
                let count = (len as usize).saturating_sub(header) / size_of::<libc::c_int>();
                // SAFETY: the data area holds `count` ints written by the kernel.
                let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<libc::c_int>();
                for i in 0..count {
                    // SAFETY: `i < count` ints lie inside the data area.
                    let raw = unsafe { data.add(i).read_unaligned() };
                    if raw >= 0 {
                        // SAFETY: SCM_RIGHTS installed `raw` as a new fd of this process that
                        // nothing else owns.
                        fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                    }
                }
            }
            // SAFETY: as above, CMSG_NXTHDR stays inside `msg_controllen` or returns null.
            cmsg = unsafe { libc::CMSG_NXTHDR(&raw const msg, cmsg) };
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 || fds.len() > MAX_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message or its descriptors larger than allowed",
            ));
        }
        Ok((n as usize, fds))
    }

    /// `true` once the peer hung up (checked without blocking).
    #[must_use]
    pub fn peer_hung_up(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, exclusively borrowed for the call; timeout 0.
        let n = unsafe { libc::poll(&raw mut p, 1, 0) };
        n > 0 && p.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
    }
}

impl AsFd for SeqPacket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for SeqPacket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A listening `SOCK_SEQPACKET` Unix socket (non-blocking).
#[derive(Debug)]
pub struct SeqPacketListener {
    fd: OwnedFd,
}

impl SeqPacketListener {
    /// Binds and listens at `path` (which must not exist), then sets its mode to `mode`
    /// (e.g. `0o600`: only the owner may connect).
    pub fn bind(path: &Path, mode: u32) -> io::Result<Self> {
        let fd = seqpacket_socket(true)?;
        let (addr, len) = unix_addr(path)?;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes, borrowed for the call.
        cvt(unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) })?;
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in socket path"))?;
        // SAFETY: `c` is a valid C string alive for the call.
        cvt(unsafe { libc::chmod(c.as_ptr(), mode as libc::mode_t) })?;
        // SAFETY: listen takes no pointers.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
        Ok(Self { fd })
    }

    /// The listening socket systemd passed (socket activation: `LISTEN_PID` names this
    /// process and `LISTEN_FDS` is 1, the socket is fd 3); `Ok(None)` when none was passed.
    /// The variables are removed so that children do not take the socket too.
    pub fn from_systemd() -> io::Result<Option<Self>> {
        let ours = std::env::var("LISTEN_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            == Some(std::process::id());
        let count = std::env::var("LISTEN_FDS")
            .ok()
            .and_then(|n| n.parse::<u32>().ok());
        if !ours || count.is_none() {
            return Ok(None);
        }
        // SAFETY: called once at start-up, before other threads read the environment.
        unsafe {
            std::env::remove_var("LISTEN_PID");
            std::env::remove_var("LISTEN_FDS");
        }
        if count != Some(1) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "systemd passed more than one socket; the daemon listens on exactly one",
            ));
        }
        // SAFETY: by the socket-activation protocol fd 3 is the listening socket systemd
        // passed to this process (LISTEN_PID checked above), owned by nothing else here.
        let fd = unsafe { OwnedFd::from_raw_fd(3) };
        Self::from_owned(fd).map(Some)
    }

    /// Takes a listening socket handed over by systemd (socket activation: fd 3 and on).
    ///
    /// # Errors
    /// When `fd` is not a listening `SOCK_SEQPACKET` Unix socket.
    pub fn from_owned(fd: OwnedFd) -> io::Result<Self> {
        let mut kind: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `kind` and `len` are exclusively borrowed for the call.
        cvt(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                (&raw mut kind).cast(),
                &raw mut len,
            )
        })?;
        if kind != libc::SOCK_SEQPACKET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the inherited socket is not SOCK_SEQPACKET (ListenSequentialPacket= in the .socket unit)",
            ));
        }
        // SAFETY: fcntl with F_GETFL / F_SETFL takes ints.
        unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        Ok(Self { fd })
    }

    /// Accepts one pending connection (`Ok(None)` when none is pending). The connection is
    /// non-blocking.
    pub fn accept(&self) -> io::Result<Option<SeqPacket>> {
        // SAFETY: null address pointers are allowed (the peer address is not wanted).
        let raw = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: accept4 returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Some(SeqPacket { fd }))
    }
}

impl AsRawFd for SeqPacketListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits until `fd` is readable or `watch` hangs up or `timeout` passes (`None`: no limit).
/// Returns whether `watch` hung up.
pub fn wait_readable_or_hangup(
    fd: BorrowedFd<'_>,
    watch: BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: watch.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        },
    ];
    let ms = timeout.map_or(-1, |t| {
        libc::c_int::try_from(t.as_millis().max(u128::from(!t.is_zero())))
            .unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: two valid pollfds, exclusively borrowed for the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    n > 0 && fds[1].revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0
}

/// `true` when a descriptor received from a peer is an eventfd (`/proc/self/fd` names it
/// `anon_inode:[eventfd]`), before it is taken as one (`EventFd::from_owned`).
pub fn is_eventfd(fd: BorrowedFd<'_>) -> bool {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    std::fs::read_link(link).is_ok_and(|p| p.as_os_str().as_bytes() == b"anon_inode:[eventfd]")
}
