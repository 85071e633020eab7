//! After CompleteMultipart the engine checks the object the server assembled against the
//! parts it sent (issue 12): the full-object CRC64NVME of the Complete answer, or, when the
//! answer names none, a HEAD for the stored size and CRC64NVME. The peer here is a small S3
//! server written for the test from the behaviour seen in the field: it acknowledges every
//! UploadPart and the Complete, and stores something else (e.g. 0 bytes, because it dropped
//! the part query). The check does not depend on the path that moved the parts: it compares
//! what the worker recorded for each part that completed, over HTTP or RDMA alike.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engine::{Engine, Placement, RegisterOptions, RetryPolicy};
use ring_api::opcode::{CompleteMultipart, CreateMultipart, UploadPart};
use ring_api::{BufSlice, Cqe, ErrorClass, ErrorCode, PartNumber, UploadHandle};
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::credentials::Credentials;
use s3_lite::http::{Limits, RequestDecoder, RequestEvent};

/// How the peer misbehaves.
#[derive(Clone)]
struct PeerSays {
    /// `<ChecksumCRC64NVME>` in the Complete answer.
    complete_crc: Option<String>,
    /// `Content-Length` of its HEAD answer (the size it stored).
    stored_len: u64,
    /// `x-amz-checksum-crc64nvme` of its HEAD answer.
    stored_crc: Option<String>,
    /// `x-amz-checksum-crc64nvme` echoed in its UploadPart answers.
    part_crc: Option<String>,
    /// Echo the CRC64NVME of each part's body as received (an honest server), overriding
    /// `part_crc`.
    echo_parts: bool,
    /// What happens to the Complete answer.
    complete: CompleteAnswer,
    /// Whether the object exists for HEAD (else `404`).
    stored: bool,
}

impl Default for PeerSays {
    fn default() -> Self {
        Self {
            complete_crc: None,
            stored_len: 6 << 20,
            stored_crc: None,
            part_crc: None,
            echo_parts: false,
            complete: CompleteAnswer::Whole,
            stored: true,
        }
    }
}

/// The Complete answer as the client receives it (issue 33: a Complete that was carried out
/// but whose answer the client could not read).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CompleteAnswer {
    /// Sent whole.
    Whole,
    /// `Content-Length` lowered by 20 and the body cut to it, then the connection closed
    /// (the relay's `content-length-minus=20`).
    CutShort,
    /// The first Complete: the connection closes without an answer (the upload is done);
    /// every later one: `404 NoSuchUpload`.
    Lost,
}

struct Peer {
    addr: SocketAddr,
    heads: Arc<AtomicUsize>,
    completes: Arc<AtomicUsize>,
}

/// `None`: close the connection without answering.
fn answer(
    method: &str,
    query: &str,
    says: &PeerSays,
    heads: &AtomicUsize,
    completes: &AtomicUsize,
    body_crc: &str,
) -> Option<String> {
    let xml = |body: String| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    Some(match method {
        "POST" if query.contains("uploads") => xml(
            "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
             <UploadId>upload-1</UploadId></InitiateMultipartUploadResult>"
                .into(),
        ),
        "PUT" if query.contains("partNumber") => format!(
            "HTTP/1.1 200 OK\r\nETag: \"0123456789abcdef0123456789abcdef\"\r\n{}Content-Length: 0\r\n\r\n",
            (if says.echo_parts {
                Some(body_crc)
            } else {
                says.part_crc.as_deref()
            })
            .map(|c| format!("x-amz-checksum-crc64nvme: {c}\r\n"))
            .unwrap_or_default()
        ),
        "POST" if query.contains("uploadId") => {
            let first = completes.fetch_add(1, Ordering::SeqCst) == 0;
            let whole = xml(format!(
                "<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
                 <ETag>\"00000000000000000000000000000000-2\"</ETag>{}</CompleteMultipartUploadResult>",
                says.complete_crc
                    .as_deref()
                    .map(|c| format!("<ChecksumCRC64NVME>{c}</ChecksumCRC64NVME>"))
                    .unwrap_or_default()
            ));
            match says.complete {
                CompleteAnswer::Whole => whole,
                CompleteAnswer::CutShort => {
                    let (head, body) = whole.split_once("\r\n\r\n")?;
                    let short = body.len() - 20;
                    let head = head.replace(
                        &format!("Content-Length: {}", body.len()),
                        &format!("Content-Length: {short}"),
                    );
                    // `close` marks the cut: `serve` ends the connection after it.
                    format!("{head}\r\nConnection: close\r\n\r\n{}", &body[..short])
                }
                CompleteAnswer::Lost if first => return None,
                CompleteAnswer::Lost => {
                    let e = "<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>";
                    format!(
                        "HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{e}",
                        e.len()
                    )
                }
            }
        }
        "HEAD" if !says.stored => {
            heads.fetch_add(1, Ordering::SeqCst);
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into()
        }
        "HEAD" => {
            heads.fetch_add(1, Ordering::SeqCst);
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n",
                says.stored_len,
                says.stored_crc
                    .as_deref()
                    .map(|c| format!(
                        "x-amz-checksum-crc64nvme: {c}\r\nx-amz-checksum-type: FULL_OBJECT\r\n"
                    ))
                    .unwrap_or_default()
            )
        }
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into(),
    })
}

fn serve(mut s: TcpStream, says: &PeerSays, heads: &AtomicUsize, completes: &AtomicUsize) {
    let mut dec = RequestDecoder::new(Limits::default());
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = None;
    let mut body = Crc64Nvme::new();
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut pos = 0;
        loop {
            let Ok(d) = dec.decode(&buf[pos..n]) else {
                return;
            };
            pos += d.consumed;
            match d.event {
                RequestEvent::Head(h) => head = Some(h),
                RequestEvent::End => {
                    let Some(h) = head.take() else { return };
                    let crc = encode_crc64nvme(std::mem::take(&mut body).finish());
                    let Some(reply) = answer(&h.method, &h.query, says, heads, completes, &crc)
                    else {
                        return;
                    };
                    if s.write_all(reply.as_bytes()).is_err()
                        || reply.contains("Connection: close")
                        || dec.reset_for_next().is_err()
                    {
                        return;
                    }
                }
                RequestEvent::Body(b) => {
                    body.update(b);
                }
                RequestEvent::NeedMore => break,
            }
        }
    }
}

fn peer(says: PeerSays) -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = Arc::new(AtomicUsize::new(0));
    let completes = Arc::new(AtomicUsize::new(0));
    let (h, c) = (heads.clone(), completes.clone());
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let (says, h, c) = (says.clone(), h.clone(), c.clone());
            std::thread::spawn(move || serve(s, &says, &h, &c));
        }
    });
    Peer {
        addr,
        heads,
        completes,
    }
}

const PART: u64 = 5 << 20;

fn crc(data: &[u8]) -> String {
    let mut c = Crc64Nvme::new();
    c.update(data);
    encode_crc64nvme(c.finish())
}

/// Uploads two parts (5 MiB + 1 MiB) and completes; returns the Complete's completion, or
/// the first part's that failed.
fn upload_to(peer: &Peer, data: &[u8]) -> Cqe {
    *upload_steps(peer, data).last().unwrap()
}

/// [`upload_to`], with every completion: the parts' and the Complete's (or up to the first
/// part that failed).
fn upload_steps(peer: &Peer, data: &[u8]) -> Vec<Cqe> {
    let mut steps = Vec::new();
    let engine = Engine::builder()
        .endpoint_url(format!("http://{}", peer.addr))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            2,
            Duration::from_millis(5),
            Duration::from_millis(20),
        ))
        .build()
        .unwrap();
    let src = engine
        .register_host(data.len(), RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(src, 0, data).unwrap();
    let obj = engine.object("bkt", "k").unwrap();
    let mut q = engine.queue(8).unwrap();
    let wait = |q: &mut engine::Queue| {
        assert!(
            q.wait(1, Some(Duration::from_secs(20))) > 0,
            "no completion"
        );
        q.completion().next().unwrap()
    };
    q.push(&CreateMultipart::new(obj).user_data(1).build())
        .unwrap();
    let c = wait(&mut q);
    assert!(c.is_ok(), "create: {:?}", c.error_code());
    let h = UploadHandle(u32::try_from(c.aux()).unwrap());
    let len = data.len() as u64;
    for (n, (off, l)) in [(0, PART), (PART, len - PART)].into_iter().enumerate() {
        let part = PartNumber::new(n as u32 + 1).unwrap();
        q.push(
            &UploadPart::new(obj, h, part, BufSlice::new(src, off, l))
                .user_data(2)
                .build(),
        )
        .unwrap();
        let c = wait(&mut q);
        steps.push(c);
        if !c.is_ok() {
            return steps;
        }
    }
    q.push(
        &CompleteMultipart::new(obj, h, PartNumber::new(2).unwrap())
            .user_data(3)
            .build(),
    )
    .unwrap();
    steps.push(wait(&mut q));
    steps
}

fn data() -> Vec<u8> {
    (0..(6u64 << 20)).map(|i| (i * 131 % 251) as u8).collect()
}

fn integrity(c: &Cqe) -> bool {
    c.error_code() == Some(ErrorCode::Integrity) && c.error_class() == Some(ErrorClass::Integrity)
}

#[test]
fn a_peer_that_stored_zero_bytes_is_an_integrity_error() {
    let p = peer(PeerSays {
        stored_len: 0,
        ..PeerSays::default()
    });
    let c = upload_to(&p, &data());
    assert!(
        integrity(&c),
        "Complete must fail: {:?} {:?}",
        c.error_code(),
        c.error_class()
    );
    assert_eq!(p.heads.load(Ordering::SeqCst), 1, "one HEAD after Complete");
}

#[test]
fn a_stored_checksum_other_than_ours_is_an_integrity_error() {
    let p = peer(PeerSays {
        stored_crc: Some(crc(b"something else")),
        ..PeerSays::default()
    });
    assert!(integrity(&upload_to(&p, &data())));
}

#[test]
fn a_complete_answer_naming_another_checksum_is_an_integrity_error() {
    let p = peer(PeerSays {
        complete_crc: Some(crc(b"something else")),
        ..PeerSays::default()
    });
    assert!(integrity(&upload_to(&p, &data())));
    assert_eq!(
        p.heads.load(Ordering::SeqCst),
        0,
        "the answer decided: no HEAD"
    );
}

#[test]
fn the_right_size_and_checksum_complete_ok() {
    let d = data();
    let p = peer(PeerSays {
        stored_len: d.len() as u64,
        stored_crc: Some(crc(&d)),
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert!(c.is_ok(), "{:?} {:?}", c.error_code(), c.error_class());
    assert!(c.verified(), "the stored CRC64NVME proved the object");
    assert_eq!(p.heads.load(Ordering::SeqCst), 1);
    // And the Complete answer's own checksum, when right, is proof enough.
    let p = peer(PeerSays {
        complete_crc: Some(crc(&d)),
        stored_len: 0,
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert!(c.is_ok() && c.verified(), "{c:?}");
    assert_eq!(p.heads.load(Ordering::SeqCst), 0);
}

#[test]
fn a_matching_size_alone_is_a_success_without_verified() {
    // A third-party server that keeps no checksum: nothing proves the bytes, nothing shows a
    // difference (issue 33: a success, visibly unverified).
    let p = peer(PeerSays::default());
    let c = upload_to(&p, &data());
    assert!(c.is_ok(), "{:?} {:?}", c.error_code(), c.error_class());
    assert!(!c.verified(), "a size proves no bytes: {c:?}");
    assert_eq!(p.heads.load(Ordering::SeqCst), 1);
}

#[test]
fn a_part_whose_answer_echoes_our_checksum_is_verified() {
    let d = data();
    let echoing = upload_steps(
        &peer(PeerSays {
            echo_parts: true,
            ..PeerSays::default()
        }),
        &d,
    );
    assert_eq!(echoing.len(), 3);
    assert!(
        echoing[..2].iter().all(|c| c.is_ok() && c.verified()),
        "{echoing:?}"
    );
    let silent = upload_steps(&peer(PeerSays::default()), &d);
    assert!(
        silent[..2].iter().all(|c| c.is_ok() && !c.verified()),
        "{silent:?}"
    );
}

#[test]
fn a_complete_answer_cut_short_is_checked_with_a_head() {
    let d = data();
    // The server completed the upload; its answer lost 20 bytes on the way. The HEAD finds
    // our object (size and full-object CRC64NVME): a verified success.
    let p = peer(PeerSays {
        complete: CompleteAnswer::CutShort,
        stored_crc: Some(crc(&d)),
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert!(c.is_ok(), "{:?} {:?}", c.error_code(), c.error_class());
    assert!(c.verified(), "{c:?}");
    assert_eq!(p.heads.load(Ordering::SeqCst), 1, "one HEAD decided");
    // Only the size matches: a success, not verified.
    let p = peer(PeerSays {
        complete: CompleteAnswer::CutShort,
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert!(c.is_ok() && !c.verified(), "{c:?}");
    // No object: the Complete's own failure (its answer could not be read).
    let p = peer(PeerSays {
        complete: CompleteAnswer::CutShort,
        stored: false,
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert_eq!(c.error_code(), Some(ErrorCode::Protocol), "{c:?}");
    assert_eq!(p.heads.load(Ordering::SeqCst), 1);
    // Another object: an integrity error.
    let p = peer(PeerSays {
        complete: CompleteAnswer::CutShort,
        stored_crc: Some(crc(b"something else")),
        ..PeerSays::default()
    });
    assert!(integrity(&upload_to(&p, &d)));
}

#[test]
fn a_lost_complete_answer_is_checked_with_a_head() {
    let d = data();
    // The first Complete's connection closes without an answer (the server completed it);
    // the repeat is refused NoSuchUpload. The HEAD finds our object.
    let p = peer(PeerSays {
        complete: CompleteAnswer::Lost,
        stored_crc: Some(crc(&d)),
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert!(c.is_ok(), "{:?} {:?}", c.error_code(), c.error_class());
    assert!(c.verified(), "{c:?}");
    assert_eq!(
        p.completes.load(Ordering::SeqCst),
        2,
        "the Complete was repeated"
    );
    assert_eq!(p.heads.load(Ordering::SeqCst), 1);
    // Nothing stored: the repeat's NoSuchUpload stands.
    let p = peer(PeerSays {
        complete: CompleteAnswer::Lost,
        stored: false,
        ..PeerSays::default()
    });
    let c = upload_to(&p, &d);
    assert_eq!(c.error_code(), Some(ErrorCode::NotFound), "{c:?}");
}

#[test]
fn a_part_answer_echoing_another_checksum_is_an_integrity_error() {
    let p = peer(PeerSays {
        part_crc: Some(crc(b"something else")),
        ..PeerSays::default()
    });
    let c = upload_to(&p, &data());
    assert!(integrity(&c), "{:?} {:?}", c.error_code(), c.error_class());
    assert_eq!(c.user_data(), 2, "the part fails, not the Complete");
}
