//! Issue 33 item 5: slow clients that reconnect as soon as they are dropped, many more than
//! `max_connections`, must not starve normal signed requests. Each flood client sends part of a
//! head (or nothing at all), trickles a byte now and then, and reconnects at once when the
//! gateway drops it. A flood from one address must not evict a slow head from another (the
//! per-peer cap on half-sent heads).

#[path = "support/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use raw::*;
use s3_lite::http::{BodyFraming, Limits, ResponseDecoder, encode_request_head};

const FLOOD: usize = 64;
const MAX_CONNECTIONS: usize = 16;
const NORMAL_THREADS: usize = 4;
const CALLS_PER_THREAD: usize = 40;

fn gateway(root: &std::path::Path) -> hipobj_gateway::RunningGateway {
    hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .threads(4)
        .max_connections(MAX_CONNECTIONS)
        .head_timeout(Duration::from_secs(5))
        .start()
        .expect("gateway starts")
}

/// A connection to `a` from the local address `from` (any 127.0.0.0/8 address works on Linux).
fn connect_from(from: Option<IpAddr>, a: SocketAddr) -> std::io::Result<TcpStream> {
    let Some(ip) = from else {
        return TcpStream::connect(a);
    };
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::new(ip, 0).into())?;
    s.connect(&a.into())?;
    Ok(s.into())
}

/// One flood client: connect (from `from`), half a head (or, `silent`, nothing), a byte every
/// 100 ms; reconnect at once when the gateway answers or drops it. Counts its connections.
fn flood_client(
    a: SocketAddr,
    from: Option<IpAddr>,
    silent: bool,
    stop: Arc<AtomicBool>,
    connects: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Acquire) {
        let Ok(mut s) = connect_from(from, a) else {
            continue;
        };
        connects.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
        if !silent && s.write_all(b"GET /flood HTTP/1.1\r\nx-slow: ").is_err() {
            continue;
        }
        while !stop.load(Ordering::Acquire) {
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(_) => break, // answered (503/408) or closed: reconnect
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
            if !silent && s.write_all(b"a").is_err() {
                break;
            }
        }
    }
}

/// A signed HEAD of the bucket on a fresh connection: its status, or what went wrong.
fn head_bucket(a: SocketAddr) -> Result<u16, String> {
    head_bucket_in_halves(a, Duration::ZERO)
}

/// The same, its head sent in two halves `gap` apart (a slow but honest client).
fn head_bucket_in_halves(a: SocketAddr, gap: Duration) -> Result<u16, String> {
    let r = sign(req(a, "HEAD", "/flood-bkt", ""), b"", None);
    let mut wire = Vec::new();
    encode_request_head(&r, BodyFraming::None, &mut wire).map_err(|e| e.to_string())?;
    let mut s = TcpStream::connect(a).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let (first, rest) = wire.split_at(if gap.is_zero() { 0 } else { wire.len() / 2 });
    if !first.is_empty() {
        s.write_all(first).map_err(|e| format!("write: {e}"))?;
        std::thread::sleep(gap);
    }
    s.write_all(rest).map_err(|e| format!("write: {e}"))?;
    let mut dec = ResponseDecoder::new(Limits::default(), true);
    let mut buf = [0u8; 4096];
    let mut pending = Vec::new();
    loop {
        let d = dec.decode(&pending).map_err(|e| e.to_string())?;
        if let s3_lite::http::Event::Head(h) = d.event {
            return Ok(h.status);
        }
        pending.drain(..d.consumed);
        let n = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed before any response".into());
        }
        pending.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn reconnecting_slow_clients_above_max_connections_do_not_starve_signed_requests() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/flood-bkt", "", &[], b"").status(), 200);
    let mut unloaded = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        assert_eq!(head_bucket(a), Ok(200));
        unloaded.push(t.elapsed());
    }

    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..FLOOD)
        .map(|i| {
            let (stop, connects) = (stop.clone(), connects.clone());
            // Three in four trickle half a head; the rest connect and say nothing.
            std::thread::spawn(move || flood_client(a, None, i % 4 == 3, stop, connects))
        })
        .collect();
    // Let the flood fill the gateway and start cycling.
    std::thread::sleep(Duration::from_millis(500));
    let normal: Vec<_> = (0..NORMAL_THREADS)
        .map(|_| {
            std::thread::spawn(move || {
                (0..CALLS_PER_THREAD)
                    .map(|_| {
                        let t = Instant::now();
                        (head_bucket(a), t.elapsed())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<_> = normal.into_iter().flat_map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Release);
    for h in flood {
        h.join().unwrap();
    }
    let failed: Vec<_> = results.iter().filter(|(r, _)| *r != Ok(200)).collect();
    let mut lat: Vec<_> = results.iter().map(|(_, d)| *d).collect();
    lat.sort();
    unloaded.sort();
    eprintln!(
        "{} flood connections; {} of {} signed calls failed; p50 {:?} p99 {:?} (unloaded p50 {:?})",
        connects.load(Ordering::Relaxed),
        failed.len(),
        results.len(),
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100],
        unloaded[unloaded.len() / 2],
    );
    assert!(
        connects.load(Ordering::Relaxed) > FLOOD * 2,
        "the flood reconnected"
    );
    assert!(
        failed.is_empty(),
        "{} of {} signed calls failed, e.g. {:?}",
        failed.len(),
        results.len(),
        failed.first()
    );
    gw.shutdown();
}

/// The per-peer cap on half-sent heads: a flood of reconnecting slow clients from one address
/// (127.0.0.2) cycles through its own share of the slots, so a slow but honest client from
/// another address (its head in two halves 300 ms apart) keeps its place. Without the cap
/// its half-sent head was the oldest one and was evicted by the flood.
#[test]
fn a_flood_from_one_address_does_not_evict_a_slow_head_from_another() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/flood-bkt", "", &[], b"").status(), 200);
    let flooder = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    let stop = Arc::new(AtomicBool::new(false));
    let connects = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..FLOOD)
        .map(|_| {
            let (stop, connects) = (stop.clone(), connects.clone());
            std::thread::spawn(move || flood_client(a, flooder, false, stop, connects))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let results: Vec<_> = (0..8)
        .map(|_| head_bucket_in_halves(a, Duration::from_millis(300)))
        .collect();
    stop.store(true, Ordering::Release);
    for h in flood {
        h.join().unwrap();
    }
    eprintln!(
        "{} flood connections from 127.0.0.2; slow heads from 127.0.0.1: {results:?}",
        connects.load(Ordering::Relaxed)
    );
    assert!(
        connects.load(Ordering::Relaxed) > FLOOD * 2,
        "the flood reconnected"
    );
    assert!(results.iter().all(|r| *r == Ok(200)), "{results:?}");
    gw.shutdown();
}
