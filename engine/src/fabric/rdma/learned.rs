//! What the engine learned about its endpoint, shared by every worker's [`super::RdmaClient`]
//! for the engine's life (an engine has one endpoint): which RDMA dialects it refused, whether
//! it advertised multipart over hipobj-rc-v2 (`x-amz-rdma-capabilities: mp`, docs/protocol.md,
//! hipobj-rc-v2, Multipart), and which credential-scope service its v2 routes accept. Each answer is learned once
//! (a refused pairing, a `404`/`501`/`x-amz-rdma-protocol-status: unsupported` PREPARE, a
//! capability header), so later ops and other workers skip what the endpoint does not serve.

use std::sync::atomic::{AtomicU8, Ordering};

use s3_lite::http::ResponseHead;

/// One learned yes/no (or not yet known).
#[derive(Debug, Default)]
struct Answer(AtomicU8);

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

impl Answer {
    fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
    fn set(&self, yes: bool) {
        self.0.store(if yes { YES } else { NO }, Ordering::Release);
    }
}

/// The endpoint's answers (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Learned {
    rc_persistent: Answer,
    rc_v2: Answer,
    multipart: Answer,
    /// `YES`: sign v2 control requests with service `hipobj` (the endpoint refused `s3`).
    hipobj_service: Answer,
}

impl Learned {
    /// Whether `rc-persistent` is still worth trying (not refused).
    pub(crate) fn rc_persistent_open(&self) -> bool {
        self.rc_persistent.get() != NO
    }
    /// The endpoint refused the `rc-persistent` pairing route.
    pub(crate) fn refuse_rc_persistent(&self) {
        self.rc_persistent.set(false);
    }
    /// Whether `hipobj-rc-v2` is still worth trying (not refused).
    pub(crate) fn rc_v2_open(&self) -> bool {
        self.rc_v2.get() != NO
    }
    /// The endpoint does not serve `hipobj-rc-v2` (501, unsupported marker, unknown route).
    pub(crate) fn refuse_rc_v2(&self) {
        self.rc_v2.set(false);
    }
    /// Whether the endpoint advertised `mp`: only then may an UploadPart go over v2.
    pub(crate) fn multipart(&self) -> bool {
        self.multipart.get() == YES
    }
    /// Notes `x-amz-rdma-capabilities` of any v2 answer (versitygw sends it on FINAL and on
    /// errors, our gateway also on PREPARE). Once advertised, `mp` stays known.
    pub(crate) fn note_capabilities(&self, head: &ResponseHead) {
        let Some(v) = head.header(s3_lite::rdma::RDMA_CAPABILITIES) else {
            return;
        };
        if s3_lite::rdma::v2::Capabilities::parse(v).is_ok_and(|c| c.multipart()) {
            self.multipart.set(true);
        }
    }
    /// The credential-scope service v2 control requests are signed with.
    pub(crate) fn v2_service(&self) -> &'static str {
        if self.hipobj_service.get() == YES {
            HIPOBJ_SERVICE
        } else {
            "s3"
        }
    }
    /// The endpoint refused `refused` naming the service: switch to the other one, once.
    /// `false` when that was already done (no second switch).
    pub(crate) fn switch_service(&self, refused: &str) -> bool {
        if self.hipobj_service.get() != UNKNOWN {
            return false;
        }
        self.hipobj_service.set(refused == "s3");
        true
    }
}

/// The service the ROCm hipObject v2 client and verifier use in the credential scope.
pub(crate) const HIPOBJ_SERVICE: &str = "hipobj";

/// Whether a v2 answer refuses our credential scope's service: a `400`
/// `AuthorizationHeaderMalformed` whose message names the service (S3's and our gateway's
/// wording: "the service 'x' is wrong").
pub(crate) fn refuses_service(status: u16, body: &[u8]) -> bool {
    if status != 400 {
        return false;
    }
    let text = String::from_utf8_lossy(body);
    text.contains("AuthorizationHeaderMalformed") && text.contains("service")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(h: &[(&str, &str)]) -> ResponseHead {
        crate::fabric::test_head(200, h)
    }

    #[test]
    fn multipart_only_once_advertised() {
        let l = Learned::default();
        assert!(!l.multipart());
        l.note_capabilities(&head(&[]));
        l.note_capabilities(&head(&[("x-amz-rdma-capabilities", "foo")]));
        assert!(!l.multipart());
        l.note_capabilities(&head(&[("x-amz-rdma-capabilities", "x, MP")]));
        assert!(l.multipart());
        l.note_capabilities(&head(&[]));
        assert!(l.multipart(), "stays known");
    }

    #[test]
    fn refusals_are_remembered() {
        let l = Learned::default();
        assert!(l.rc_persistent_open() && l.rc_v2_open());
        l.refuse_rc_persistent();
        assert!(!l.rc_persistent_open() && l.rc_v2_open());
        l.refuse_rc_v2();
        assert!(!l.rc_v2_open());
    }

    #[test]
    fn service_switches_once() {
        let l = Learned::default();
        assert_eq!(l.v2_service(), "s3");
        assert!(l.switch_service("s3"));
        assert_eq!(l.v2_service(), "hipobj");
        assert!(!l.switch_service("hipobj"), "only once");
        assert_eq!(l.v2_service(), "hipobj");
        let body = b"<Error><Code>AuthorizationHeaderMalformed</Code><Message>the service 's3' is wrong; expecting 'hipobj'</Message></Error>";
        assert!(refuses_service(400, body));
        assert!(!refuses_service(403, body));
        assert!(!refuses_service(
            400,
            b"<Code>AuthorizationHeaderMalformed</Code> region"
        ));
    }
}
