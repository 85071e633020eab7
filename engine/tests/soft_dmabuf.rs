//! Soft fabric: dmabuf registrations (`ProtectionDomain::register_dmabuf`, the soft device's
//! `ibv_reg_dmabuf_mr`). A peer's RDMA WRITE lands in the exporter's memory and a READ takes
//! it from there, byte exact, addressed from the iova the registration chose; exporters that
//! cannot be mapped, and ranges past the buffer, are refused with typed errors.
//!
//! The buffer is a sealed memfd ([`HostDmabuf`]); the export is a real udmabuf where
//! `/dev/udmabuf` exists (the `*_udmabuf` tests, ignored elsewhere) and the memfd itself
//! otherwise (the soft device maps both the same way).

use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use engine::soft::udmabuf::{ExportKind, HostDmabuf};
use engine::soft::{
    Access, Endpoint, MrError, QpCaps, RemoteAddr, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
    loopback_pair,
};

fn reap(ep: &Endpoint, n: usize) -> Vec<WorkCompletion> {
    let end = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < n {
        assert!(Instant::now() < end, "timed out: {out:?}");
        ep.cq.wait(Duration::from_millis(100));
        let k = ep.cq.poll(&mut buf);
        out.extend_from_slice(&buf[..k]);
    }
    out
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 10) as u8)
        .collect()
}

/// The mapping's bytes `off..off+len` (test memory: read through the raw pointer while no
/// RDMA operation targets it).
fn mapped(buf: &HostDmabuf, off: usize, len: usize) -> Vec<u8> {
    assert!(off + len <= buf.len());
    // SAFETY: in bounds of the live mapping (asserted), no transfer in flight.
    #[allow(unsafe_code)]
    unsafe {
        std::slice::from_raw_parts(buf.as_ptr().add(off), len).to_vec()
    }
}

/// WRITE into, then READ from, `len` bytes at byte `at` of a 1 MiB buffer registered as a
/// dmabuf window (offset not page aligned, iova a made-up device address).
fn write_and_read_through_a_dmabuf_window(kind: ExportKind) {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let buf = HostDmabuf::new(1 << 20).unwrap();
    let (at, len) = (8192 + 100, 300_000usize);
    // A udmabuf of pages [8192, 1 MiB): byte `at` is at offset 100 in it; the memfd export
    // is the whole buffer.
    let (fd, offset) = match kind {
        ExportKind::Udmabuf => (buf.export(kind, 8192, (1 << 20) - 8192).unwrap(), 100),
        ExportKind::Memfd => (buf.export(kind, 0, 1 << 20).unwrap(), at as u64),
    };
    let iova = 0x7f00_dead_0000_u64;
    let dst =
        b.pd.register_dmabuf(
            fd.as_fd(),
            offset,
            len,
            iova,
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .unwrap();
    drop(fd); // the mapping holds the buffer
    assert_eq!((dst.addr(), dst.len()), (iova, len as u64));

    let data = pattern(len, 3);
    let src = a.pd.register_owned(len, Access::LOCAL_WRITE).unwrap();
    src.write(0, &data).unwrap();
    let wr = SendWr::new(
        1,
        SendOp::Write(RemoteAddr {
            addr: iova,
            rkey: dst.rkey(),
        }),
        Sge {
            addr: src.addr(),
            length: len as u32,
            lkey: src.lkey(),
        },
    );
    a.qp.post_send(&wr).unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::Success);
    assert_eq!(
        mapped(&buf, at, len),
        data,
        "the WRITE did not land in the buffer"
    );
    assert!(
        mapped(&buf, 0, at).iter().all(|&x| x == 0),
        "bytes before moved"
    );
    assert!(
        mapped(&buf, at + len, (1 << 20) - at - len)
            .iter()
            .all(|&x| x == 0),
        "bytes after moved"
    );

    // One byte past the window is refused (the grant is exact).
    let wr = SendWr::new(
        2,
        SendOp::Write(RemoteAddr {
            addr: iova + 1,
            rkey: dst.rkey(),
        }),
        Sge {
            addr: src.addr(),
            length: len as u32,
            lkey: src.lkey(),
        },
    );
    a.qp.post_send(&wr).unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::RemoteAccessError);
}

#[test]
fn remote_write_lands_in_a_mapped_memfd_export() {
    write_and_read_through_a_dmabuf_window(ExportKind::Memfd);
}

#[test]
#[ignore = "needs /dev/udmabuf (CONFIG_UDMABUF); run with --ignored where it exists"]
fn remote_write_lands_in_a_udmabuf() {
    write_and_read_through_a_dmabuf_window(ExportKind::Udmabuf);
}

#[test]
fn read_through_a_dmabuf_window_takes_the_buffers_bytes() {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let buf = HostDmabuf::new(64 << 10).unwrap();
    let data = pattern(20_000, 9);
    // SAFETY: in bounds of the live mapping; nothing else uses it yet.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.as_ptr().add(5000), data.len());
    }
    let fd = buf.export(ExportKind::Memfd, 0, 64 << 10).unwrap();
    let win =
        b.pd.register_dmabuf(fd.as_fd(), 5000, data.len(), 0x1000, Access::REMOTE_READ)
            .unwrap();
    let back =
        a.pd.register_owned(data.len(), Access::LOCAL_WRITE)
            .unwrap();
    let wr = SendWr::new(
        1,
        SendOp::Read(RemoteAddr {
            addr: 0x1000,
            rkey: win.rkey(),
        }),
        Sge {
            addr: back.addr(),
            length: data.len() as u32,
            lkey: back.lkey(),
        },
    );
    a.qp.post_send(&wr).unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::Success);
    assert_eq!(back.to_vec(0, data.len()).unwrap(), data);
    // After deregistration the rkey no longer resolves.
    b.pd.deregister(&win).unwrap();
    a.qp.post_send(&wr).unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::RemoteAccessError);
}

#[test]
fn unmappable_or_short_dmabufs_are_refused_with_typed_errors() {
    let (_a, b) = loopback_pair(QpCaps::default()).unwrap();
    let rw = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    // A pipe has no size and no mmap (CUDA's VRAM dmabufs refuse mmap the same way).
    let (r, _w) = std::io::pipe().unwrap();
    let e = b.pd.register_dmabuf(r.as_fd(), 0, 4096, 0, rw).unwrap_err();
    assert_eq!(e, MrError::Dmabuf(libc::ESPIPE), "{e}");
    assert_eq!(e.errno(), Some(libc::ESPIPE));
    // A read-only file cannot be mapped shared and writable.
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&[0u8; 8192]).unwrap();
    let ro = std::fs::File::open(f.path()).unwrap();
    let e =
        b.pd.register_dmabuf(ro.as_fd(), 0, 4096, 0, rw)
            .unwrap_err();
    assert_eq!(e, MrError::Dmabuf(libc::EACCES), "{e}");
    assert!(e.to_string().contains("cannot be mapped"), "{e}");
    // Past the end of the buffer (mapping it would SIGBUS on touch), empty, overflowing.
    let buf = HostDmabuf::new(8192).unwrap();
    let fd = buf.export(ExportKind::Memfd, 0, 8192).unwrap();
    let short = |off: u64, len: usize, iova: u64| {
        b.pd.register_dmabuf(fd.as_fd(), off, len, iova, rw)
            .unwrap_err()
    };
    assert_eq!(short(4096, 4097, 0), MrError::Bounds);
    assert_eq!(short(0, 0, 0), MrError::Bounds);
    assert_eq!(short(u64::MAX, 2, 0), MrError::Bounds);
    assert_eq!(short(0, 16, u64::MAX - 1), MrError::Bounds);
    assert!(b.pd.register_dmabuf(fd.as_fd(), 4096, 4096, 0, rw).is_ok());
}
