//! The capability probe of `--fabric auto`: one signed `GET /.hipobj/rc/capabilities` on the
//! blocking transport asks an endpoint whether it carries payloads over RDMA. Only a `200`
//! naming a fabric (`x-amz-rdma-fabric: soft|verbs`) and the `rc-persistent` protocol counts;
//! any other answer (a plain S3 server's 4xx, a fabric-less gateway's 501) or none means "no".
//! Bounded in time ([`PROBE_TIMEOUTS`]) and in the body it reads.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3_lite::Request;
use s3_lite::http::ResponseHead;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use crate::engine_io::EngineSite;
use crate::net::exchange::{BodySink, HttpClient, RequestBody};
use crate::net::transport::Timeouts;

/// Limits of the capability probe: it must cost little even against a slow server.
pub const PROBE_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    io: Duration::from_secs(5),
    expect_continue: Duration::from_secs(1),
};
/// The most response-body bytes the probe accepts (an S3 error document is far smaller).
const PROBE_BODY_LIMIT: usize = 64 * 1024;

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
    let protocol = protocol.is_some_and(|p| p.trim() == s3_lite::rdma::pairing::PROTOCOL);
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
        head.header(s3_lite::rdma::pairing::RDMA_FABRIC),
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
    let mut req = Request::new("GET", s3_lite::rdma::pairing::CAPABILITIES_PATH);
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
