//! What the engine-against-gateway tests share: a deterministic payload, its CRC64NVME, an
//! in-process gateway with the soft RDMA target, and an engine builder pointed at a test
//! gateway (one worker, the raw-request credentials, quick retries). Included with `#[path]` by gateway and engine tests; each uses what it needs.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use engine::{Engine, EngineBuilder, Placement, RetryPolicy};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::credentials::Credentials;

use super::raw::{ACCESS, SECRET};

/// `n` bytes that differ with `seed` and never repeat with a short period.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Base64 CRC64NVME of `data` (the form S3 headers carry).
pub fn crc64(data: &[u8]) -> String {
    let mut c = Crc64Nvme::new();
    c.update(data);
    encode_crc64nvme(c.finish())
}

/// Our gateway in process over `root`, with the soft RDMA target (what `hipobj serve --fabric
/// soft` runs) and the raw-request credentials.
pub fn soft_gateway(root: &Path) -> RunningGateway {
    let target = RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap();
    gateway_over(root, target)
}

/// Our gateway in process over `root` with the RDMA target `target` and the raw-request
/// credentials.
pub fn gateway_over(root: &Path, target: std::sync::Arc<RcTarget>) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .rdma_target(target)
        .start()
        .unwrap()
}

/// An engine for the gateway at `addr`: one worker, `ACCESS`/`SECRET`, two quick retries.
/// Callers add the fabric, dialect or provider and build.
pub fn engine_builder(addr: SocketAddr) -> EngineBuilder {
    Engine::builder()
        .endpoint_url(format!("http://{addr}"))
        .credentials(Credentials::new(ACCESS, SECRET))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            2,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
}

/// The longest a test op may take (generous: the VM lane runs under emulation).
pub const WAIT: Duration = Duration::from_secs(120);

/// Pushes `sqe` and waits (at most [`WAIT`]) for its completion.
pub fn run_one(q: &mut engine::Queue, sqe: ring_api::Sqe) -> ring_api::Cqe {
    q.push(&sqe).unwrap();
    assert_eq!(q.wait(1, Some(WAIT)), 1, "no completion within {WAIT:?}");
    q.completion().next().unwrap()
}

/// A cuObject descriptor provider for hosts without DC hardware: mints a syntactically valid
/// descriptor for the op's buffer range (fixed rkey, DCT number and RoCE GID 10.0.0.5). Our
/// gateway declines cuObject (501), so ops through it fall back to HTTP.
#[derive(Debug, Default)]
pub struct FixedDc;

impl engine::DcTokenProvider for FixedDc {
    fn mint(&self, addr: u64, len: u64, _op: engine::DcOp) -> Result<String, engine::DcTokenError> {
        let size = u32::try_from(len)
            .map_err(|_| engine::DcTokenError::Unavailable("4 GiB or more".into()))?;
        Ok(format!(
            "{addr:016x}:{size:08x}:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005"
        ))
    }
}
