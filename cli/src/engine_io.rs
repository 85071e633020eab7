//! `hipobj get` / `hipobj put` on the engine (`--fabric auto|soft|verbs`).
//!
//! The engine moves payloads into and out of registered memory, over RDMA (the soft fabric or
//! verbs) when the endpoint pairs and over the HTTP body otherwise; each completion names the
//! path that carried its bytes, and the commands report them per path. The engine has no TLS,
//! so only `http://` endpoints run here (`https://` keeps the blocking client), and no
//! multipart yet, so large uploads keep the blocking multipart path.
//!
//! `--fabric auto` (the default) asks the endpoint once per invocation, with one signed
//! `GET /.hipobj/rc/capabilities` on the blocking transport, whether it carries payloads over
//! RDMA. Only a `200` naming a fabric and the `rc-persistent` protocol selects the engine; any
//! other answer (a plain S3 server's 4xx, a fabric-less gateway's 501, no answer) keeps the
//! blocking client, whose TLS, multipart uploads and GET-checksum verification then apply as
//! if RDMA did not exist.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use engine::{Engine, Fabric, RegisterOptions};
use ring_api::opcode::{Put, RangeGet};
use ring_api::{BufSlice, Cqe, DataPath};
use s3_lite::Request;
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::credentials::Credentials;
use s3_lite::http::ResponseHead;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use crate::net::exchange::{BodySink, HttpClient, RequestBody};
use crate::net::transport::Timeouts;

/// Bytes per range-get of a download.
pub const CHUNK: u64 = 8 << 20;
/// Range-gets in flight at once.
pub const IN_FLIGHT: u64 = 4;
/// How long one wait for a completion may last before the transfer is declared stalled
/// (the engine's own per-attempt timeouts and retries run inside it).
const STALL: Duration = Duration::from_secs(300);
/// The gateway's capability route.
pub const CAPABILITIES_PATH: &str = "/.hipobj/rc/capabilities";
/// Limits of the capability probe: it must cost little even against a slow server.
pub const PROBE_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    io: Duration::from_secs(5),
};
/// The most response-body bytes the probe accepts (an S3 error document is far smaller).
const PROBE_BODY_LIMIT: usize = 64 * 1024;

/// `--fabric`: which data path `get` and `put` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FabricChoice {
    /// The engine when the endpoint is `http://` and advertises RDMA (one capability probe),
    /// the blocking client otherwise.
    #[default]
    Auto,
    /// The engine, always trying the soft RDMA fabric first; per-request HTTP fallback applies.
    Soft,
    /// The engine over libibverbs (`--rdma-device`, else the first device); per-request HTTP
    /// fallback applies.
    Verbs,
    /// The blocking HTTP client (works with https://, multipart, any S3 server).
    Http,
}

impl FabricChoice {
    /// Parses `auto`, `soft`, `verbs` or `http`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "soft" => Ok(Self::Soft),
            "verbs" => Ok(Self::Verbs),
            "http" => Ok(Self::Http),
            other => Err(format!(
                "--fabric {other:?}: expected auto, soft, verbs or http"
            )),
        }
    }
}

/// The endpoint as the engine would reach it.
#[derive(Debug, Clone)]
pub struct EngineSite {
    /// The endpoint URL.
    pub url: String,
    /// Signing identity.
    pub credentials: Credentials,
    /// Signature scope region.
    pub region: String,
}

impl EngineSite {
    /// Whether the engine can speak to this endpoint (`http://`; it has no TLS).
    #[must_use]
    pub fn is_plain_http(&self) -> bool {
        self.url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    }
}

/// What the capability probe learned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capability {
    /// `200` with `x-amz-rdma-protocol: rc-persistent` and this `x-amz-rdma-fabric`.
    Rdma {
        /// `soft` or `verbs`.
        fabric: String,
    },
    /// Any other answer: the endpoint does not advertise RDMA (plain S3 answers 4xx, a
    /// gateway without a fabric 501).
    NotAdvertised {
        /// The HTTP status.
        status: u16,
    },
}

/// Why the capability probe got no answer (the command then uses the blocking client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The request could not be signed.
    #[error("signing the capability probe: {0}")]
    Sign(String),
    /// Connecting, sending or reading the answer failed.
    #[error("capability probe: {0}")]
    Exchange(String),
}

/// Drops the probe's response body, refusing more than [`PROBE_BODY_LIMIT`] bytes so a server
/// that streams without end cannot hold the command (the probe then fails: blocking client).
struct Discard(usize);

impl BodySink for Discard {
    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.0 = self.0.saturating_add(data.len());
        if self.0 > PROBE_BODY_LIMIT {
            return Err(std::io::Error::other(format!(
                "answer body over {PROBE_BODY_LIMIT} bytes"
            )));
        }
        Ok(())
    }
}

/// Classifies the answer to the capability probe from its status and its
/// `x-amz-rdma-fabric` and `x-amz-rdma-protocol` headers.
#[must_use]
pub fn classify(status: u16, fabric: Option<&str>, protocol: Option<&str>) -> Capability {
    let fabric = fabric
        .map(str::trim)
        .filter(|f| matches!(*f, "soft" | "verbs"));
    let protocol = protocol.is_some_and(|p| p.trim() == "rc-persistent");
    match (status, fabric, protocol) {
        (200, Some(f), true) => Capability::Rdma {
            fabric: f.to_owned(),
        },
        (status, ..) => Capability::NotAdvertised { status },
    }
}

fn classify_head(head: &ResponseHead) -> Capability {
    classify(
        head.status,
        head.header("x-amz-rdma-fabric"),
        head.header(s3_lite::rdma::RDMA_PROTOCOL),
    )
}

fn now() -> Result<AmzDate, ProbeError> {
    #[allow(clippy::disallowed_methods)] // the blocking driver owns the clock
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    AmzDate::from_unix_secs(secs).map_err(|e| ProbeError::Sign(format!("clock: {e}")))
}

/// Sends the one signed capability probe to `endpoint` (`http://` only) and classifies the
/// answer.
pub fn probe(endpoint: &Endpoint, site: &EngineSite) -> Result<Capability, ProbeError> {
    let signer = Signer::new(site.credentials.clone(), site.region.clone(), "s3")
        .map_err(|e| ProbeError::Sign(e.to_string()))?;
    let mut req = Request::new("GET", CAPABILITIES_PATH);
    req.add_header("Host", endpoint.host_header(None));
    signer
        .sign_headers(
            &mut req,
            &PayloadHash::Hex(s3_lite::sigv4::EMPTY_SHA256.to_owned()),
            now()?,
        )
        .map_err(|e| ProbeError::Sign(e.to_string()))?;
    let mut http = HttpClient::new(endpoint.clone(), None, PROBE_TIMEOUTS);
    let head = http
        .execute(&req, None, RequestBody::None, &mut Discard(0))
        .map_err(|e| ProbeError::Exchange(e.to_string()))?;
    Ok(classify_head(&head))
}

/// How the data path was chosen, for `--json` (`"fabric_probe"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The probe answered.
    Answered(Capability),
    /// The probe got no answer.
    Failed(ProbeError),
}

impl ProbeOutcome {
    /// `{"status": 200, "fabric": "soft"}`, `{"status": 404}` or `{"error": "..."}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Answered(Capability::Rdma { fabric }) => {
                serde_json::json!({"status": 200, "fabric": fabric})
            }
            Self::Answered(Capability::NotAdvertised { status }) => {
                serde_json::json!({"status": status})
            }
            Self::Failed(e) => serde_json::json!({"error": e.to_string()}),
        }
    }
}

/// The chosen data path: the engine target, or `None` for the blocking client.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Set when the engine carries the transfer.
    pub target: Option<EngineTarget>,
    /// What the capability probe said (`--fabric auto` against `http://` only).
    pub probe: Option<ProbeOutcome>,
}

impl Selection {
    /// The blocking client, no probe sent.
    #[must_use]
    pub fn blocking() -> Self {
        Self {
            target: None,
            probe: None,
        }
    }

    /// `"fabric_probe"` for `--json`: `null` when no probe was sent.
    #[must_use]
    pub fn probe_json(&self) -> serde_json::Value {
        self.probe
            .as_ref()
            .map_or(serde_json::Value::Null, ProbeOutcome::to_json)
    }
}

/// What the engine needs to reach the endpoint.
#[derive(Debug, Clone)]
pub struct EngineTarget {
    /// `http://host:port`.
    pub url: String,
    /// Signing identity.
    pub credentials: Credentials,
    /// Signature scope region.
    pub region: String,
    /// Engine fabric (`Auto`, `Soft` or `Verbs`).
    pub fabric: Fabric,
    /// `--rdma-device`: the verbs device to open (`Verbs`, `Auto`).
    pub verbs_device: Option<String>,
}

impl EngineTarget {
    /// Chooses the data path for `choice`. `http` and any endpoint but `http://` (the engine
    /// has no TLS) keep the blocking client without a probe; `soft` and `verbs` run the engine
    /// without one; `auto` calls `probe` once and runs the engine only when the endpoint
    /// advertises RDMA. `verbs_device` (`--rdma-device`) is refused with `soft` and `http`.
    pub fn select(
        choice: FabricChoice,
        site: &EngineSite,
        verbs_device: Option<&str>,
        probe: impl FnOnce(&EngineSite) -> Result<Capability, ProbeError>,
    ) -> Result<Selection, String> {
        let fabric = match (choice, verbs_device) {
            (FabricChoice::Soft | FabricChoice::Http, Some(_)) => {
                return Err(
                    "--rdma-device applies to --fabric verbs or auto (the verbs fabric)".into(),
                );
            }
            (FabricChoice::Http, None) => return Ok(Selection::blocking()),
            (FabricChoice::Auto, _) => Fabric::Auto,
            (FabricChoice::Soft, None) => Fabric::Soft,
            (FabricChoice::Verbs, _) => Fabric::Verbs,
        };
        if !site.is_plain_http() {
            return Ok(Selection::blocking());
        }
        let target = Self {
            url: site.url.clone(),
            credentials: site.credentials.clone(),
            region: site.region.clone(),
            fabric,
            verbs_device: verbs_device.map(str::to_owned),
        };
        if choice != FabricChoice::Auto {
            return Ok(Selection {
                target: Some(target),
                probe: None,
            });
        }
        let outcome = match probe(site) {
            Ok(c) => ProbeOutcome::Answered(c),
            Err(e) => ProbeOutcome::Failed(e),
        };
        let advertised = matches!(outcome, ProbeOutcome::Answered(Capability::Rdma { .. }));
        Ok(Selection {
            target: advertised.then_some(target),
            probe: Some(outcome),
        })
    }

    fn engine(&self, connections: usize) -> Result<Engine, String> {
        let mut b = Engine::builder()
            .endpoint_url(&self.url)
            .credentials(self.credentials.clone())
            .region(&self.region)
            .connections_per_worker(connections)
            .fabric(self.fabric);
        if let Some(name) = &self.verbs_device {
            b = b.verbs_device(name.clone());
        }
        b.build().map_err(|e| format!("engine: {e}"))
    }
}

/// The name `--json` uses for a data path.
#[must_use]
pub fn path_name(p: Option<DataPath>) -> &'static str {
    match p {
        Some(DataPath::Http) => "http",
        Some(DataPath::RdmaSoft) => "rdma-soft",
        Some(DataPath::RdmaVerbs) => "rdma-verbs",
        _ => "none",
    }
}

/// Bytes carried per path, in first-seen order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathBytes(pub Vec<(&'static str, u64)>);

impl PathBytes {
    fn add(&mut self, name: &'static str, bytes: u64) {
        match self.0.iter_mut().find(|(p, _)| *p == name) {
            Some((_, b)) => *b += bytes,
            None => self.0.push((name, bytes)),
        }
    }

    /// The one path that carried everything, or `mixed` when several did (`none`: no bytes).
    #[must_use]
    pub fn summary(&self) -> &'static str {
        match self.0.as_slice() {
            [] => "none",
            [(p, _)] => p,
            _ => "mixed",
        }
    }

    /// `{"rdma-soft": bytes, ...}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.0
                .iter()
                .map(|(p, b)| ((*p).to_owned(), (*b).into()))
                .collect(),
        )
    }
}

fn failure(what: &str, c: &Cqe) -> String {
    let code = c
        .error_code()
        .map_or_else(|| format!("result {}", c.result()), |e| format!("{e:?}"));
    let class = c
        .error_class()
        .map_or_else(String::new, |k| format!(" ({k:?})"));
    format!("{what} failed: {code}{class}")
}

/// Downloads bytes `first..first+len` of an object with parallel range-gets of [`CHUNK`]
/// ([`IN_FLIGHT`] at once) into one registered ring of slots, and writes them to `out` in
/// order. Returns the bytes per path and the CRC64NVME of everything written.
pub fn download(
    target: &EngineTarget,
    bucket: &str,
    key: &str,
    first: u64,
    len: u64,
    out: &mut dyn Write,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<(PathBytes, u64), String> {
    let mut crc = Crc64Nvme::new();
    let mut paths = PathBytes::default();
    if len == 0 {
        return Ok((paths, crc.finish()));
    }
    let chunks = len.div_ceil(CHUNK);
    let depth = IN_FLIGHT.min(chunks);
    let slot_len = CHUNK.min(len);
    let engine = target.engine(usize::try_from(depth).unwrap_or(1))?;
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    let ring_len =
        usize::try_from(depth * slot_len).map_err(|_| "download ring too large for this host")?;
    let buf = engine
        .register_host(ring_len, RegisterOptions::pageable())
        .map_err(|e| e.to_string())?;
    let mut q = engine
        .queue(u32::try_from(depth).unwrap_or(1))
        .map_err(|e| e.to_string())?;
    let chunk_len = |i: u64| CHUNK.min(len - i * CHUNK);
    // Chunk i lives in slot i % depth; it is submitted only once chunk i - depth is written, so
    // completions may arrive in any order and are still written in order.
    let mut done = vec![false; usize::try_from(depth).unwrap_or(1)];
    let mut cqes = vec![Cqe::default(); usize::try_from(depth * 2).unwrap_or(2)];
    let (mut next_submit, mut next_write) = (0u64, 0u64);
    while next_write < chunks {
        while next_submit < chunks && next_submit < next_write + depth {
            let slot = next_submit % depth;
            let sqe = RangeGet::new(
                obj,
                first + next_submit * CHUNK,
                BufSlice::new(buf, slot * slot_len, chunk_len(next_submit)),
            )
            .user_data(next_submit)
            .build();
            if q.push(&sqe).is_err() {
                break;
            }
            next_submit += 1;
        }
        if q.wait(1, Some(STALL)) == 0 {
            return Err(format!(
                "download stalled: no completion in {} s",
                STALL.as_secs()
            ));
        }
        let n = q.reap(&mut cqes);
        for c in cqes.iter().take(n) {
            let i = c.user_data();
            if i < next_write || i >= next_submit {
                return Err(format!("completion for unknown chunk {i}"));
            }
            let want = chunk_len(i);
            if !c.is_ok() {
                return Err(failure(
                    &format!("range-get {}+{want}", first + i * CHUNK),
                    c,
                ));
            }
            if c.bytes() != want {
                return Err(format!(
                    "range-get {}+{want}: {} bytes arrived",
                    first + i * CHUNK,
                    c.bytes()
                ));
            }
            paths.add(path_name(c.path()), want);
            if let Some(d) = done.get_mut(usize::try_from(i % depth).unwrap_or(0)) {
                *d = true;
            }
        }
        // Write every chunk that is next in order.
        while next_write < chunks {
            let slot = next_write % depth;
            let Some(d) = done.get_mut(usize::try_from(slot).unwrap_or(0)) else {
                break;
            };
            if !*d {
                break;
            }
            *d = false;
            let want = chunk_len(next_write);
            let view = engine
                .read(buf, slot * slot_len, want)
                .map_err(|e| e.to_string())?;
            crc.update(&view);
            out.write_all(&view)
                .map_err(|e| format!("writing the download: {e}"))?;
            drop(view);
            on_bytes(want);
            next_write += 1;
        }
    }
    Ok((paths, crc.finish()))
}

/// What a single-request upload on the engine did.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// Bytes per path.
    pub paths: PathBytes,
    /// CRC64NVME of the uploaded bytes (base64; the engine sends it with RDMA PUTs and the
    /// server's echo of it is part of the success proof).
    pub checksum_crc64nvme: String,
}

/// Uploads `data` (non-empty) with one engine PUT from registered memory.
pub fn upload(
    target: &EngineTarget,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> Result<Uploaded, String> {
    if data.is_empty() {
        return Err("the engine cannot PUT an empty buffer".into());
    }
    let engine = target.engine(1)?;
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    let buf = engine
        .register_host(data.len(), RegisterOptions::pageable())
        .map_err(|e| e.to_string())?;
    engine.copy_in(buf, 0, data).map_err(|e| e.to_string())?;
    let mut q = engine.queue(1).map_err(|e| e.to_string())?;
    let len = data.len() as u64;
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, len))
            .user_data(1)
            .build(),
    )
    .map_err(|e| format!("queueing the PUT: {e:?}"))?;
    if q.wait(1, Some(STALL)) == 0 {
        return Err(format!(
            "upload stalled: no completion in {} s",
            STALL.as_secs()
        ));
    }
    let mut cqes = [Cqe::default()];
    if q.reap(&mut cqes) != 1 {
        return Err("upload: no completion".into());
    }
    let [c] = cqes;
    if !c.is_ok() {
        return Err(failure("PUT", &c));
    }
    let mut paths = PathBytes::default();
    paths.add(path_name(c.path()), len);
    let mut crc = Crc64Nvme::new();
    crc.update(data);
    Ok(Uploaded {
        paths,
        checksum_crc64nvme: encode_crc64nvme(crc.finish()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(url: &str) -> EngineSite {
        EngineSite {
            url: url.into(),
            credentials: Credentials::new("a", "b"),
            region: "r".into(),
        }
    }

    fn soft_gateway(_: &EngineSite) -> Result<Capability, ProbeError> {
        Ok(Capability::Rdma {
            fabric: "soft".into(),
        })
    }

    fn never(_: &EngineSite) -> Result<Capability, ProbeError> {
        panic!("no probe may be sent for this choice")
    }

    fn fabric(sel: &Selection) -> Option<Fabric> {
        sel.target.as_ref().map(|t| t.fabric)
    }

    #[test]
    fn auto_runs_the_engine_only_on_plain_http_that_advertises_rdma() {
        let plain = site("http://127.0.0.1:9000");
        let sel = EngineTarget::select(FabricChoice::Auto, &plain, None, soft_gateway).unwrap();
        assert_eq!(fabric(&sel), Some(Fabric::Auto));
        assert_eq!(
            sel.probe_json(),
            serde_json::json!({"status": 200, "fabric": "soft"})
        );
        // A plain S3 server: the probe's 404 keeps the blocking client.
        let sel = EngineTarget::select(FabricChoice::Auto, &site("HTTP://h"), None, |_| {
            Ok(Capability::NotAdvertised { status: 404 })
        })
        .unwrap();
        assert_eq!(fabric(&sel), None);
        assert_eq!(sel.probe_json(), serde_json::json!({"status": 404}));
        // No answer at all: the blocking client, which then reports the real failure.
        let sel = EngineTarget::select(FabricChoice::Auto, &plain, None, |_| {
            Err(ProbeError::Exchange("refused".into()))
        })
        .unwrap();
        assert_eq!(fabric(&sel), None);
        assert_eq!(
            sel.probe_json(),
            serde_json::json!({"error": "capability probe: refused"})
        );
        // https:// is never probed (the engine has no TLS).
        let tls = site("https://s3.amazonaws.com");
        let sel = EngineTarget::select(FabricChoice::Auto, &tls, None, never).unwrap();
        assert!(sel.target.is_none() && sel.probe.is_none());
    }

    #[test]
    fn explicit_choices_skip_the_probe() {
        let plain = site("http://127.0.0.1:9000");
        let soft = EngineTarget::select(FabricChoice::Soft, &plain, None, never).unwrap();
        assert_eq!(fabric(&soft), Some(Fabric::Soft));
        let verbs = EngineTarget::select(FabricChoice::Verbs, &plain, Some("mlx5_0"), never)
            .unwrap()
            .target
            .unwrap();
        assert_eq!(
            (verbs.fabric, verbs.verbs_device.as_deref()),
            (Fabric::Verbs, Some("mlx5_0"))
        );
        let http = EngineTarget::select(FabricChoice::Http, &plain, None, never).unwrap();
        assert!(http.target.is_none() && http.probe.is_none());
        let tls = site("https://s3.amazonaws.com");
        assert!(
            EngineTarget::select(FabricChoice::Soft, &tls, None, never)
                .unwrap()
                .target
                .is_none()
        );
        assert!(EngineTarget::select(FabricChoice::Soft, &plain, Some("mlx5_0"), never).is_err());
        assert!(EngineTarget::select(FabricChoice::Http, &plain, Some("mlx5_0"), never).is_err());
    }

    #[test]
    fn only_a_200_naming_fabric_and_protocol_advertises_rdma() {
        let rc = Some("rc-persistent");
        assert_eq!(
            classify(200, Some("verbs"), rc),
            Capability::Rdma {
                fabric: "verbs".into()
            }
        );
        assert_eq!(
            classify(200, Some(" soft "), rc),
            Capability::Rdma {
                fabric: "soft".into()
            }
        );
        // A gateway without a fabric, or a plain S3 server (.hipobj is no valid bucket).
        assert_eq!(
            classify(501, None, None),
            Capability::NotAdvertised { status: 501 }
        );
        assert_eq!(
            classify(404, Some("soft"), rc),
            Capability::NotAdvertised { status: 404 }
        );
        // A 200 that names no known fabric or protocol (some proxy answering everything).
        for (fabric, protocol) in [
            (None, None),
            (Some("none"), rc),
            (Some("soft"), None),
            (Some("soft"), Some("hipobj-rc-v2")),
        ] {
            assert_eq!(
                classify(200, fabric, protocol),
                Capability::NotAdvertised { status: 200 },
                "{fabric:?} {protocol:?}"
            );
        }
    }

    #[test]
    fn the_probe_refuses_an_endless_body() {
        let mut d = Discard(0);
        assert!(d.accept(&vec![0; PROBE_BODY_LIMIT - 1]).is_ok());
        assert!(d.accept(&[0]).is_ok());
        assert!(d.accept(&[0]).is_err());
    }

    #[test]
    fn path_bytes_aggregate_per_path() {
        let mut p = PathBytes::default();
        p.add("rdma-soft", 8);
        p.add("rdma-soft", 2);
        assert_eq!(p.summary(), "rdma-soft");
        assert_eq!(p.to_json(), serde_json::json!({"rdma-soft": 10}));
        p.add("http", 1);
        assert_eq!(p.summary(), "mixed");
        assert_eq!(FabricChoice::parse("soft"), Ok(FabricChoice::Soft));
        assert_eq!(FabricChoice::parse("verbs"), Ok(FabricChoice::Verbs));
        assert_eq!(FabricChoice::default(), FabricChoice::Auto);
        assert!(FabricChoice::parse("rdma").is_err());
    }
}
