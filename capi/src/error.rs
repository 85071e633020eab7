//! `hipObjOpError_t`: the operation error codes, their strings, the per-thread detail message,
//! and the mapping from engine errors and completion codes.
//!
//! Codes 0..=11 are the seed header's (ROCm/hipObject `include/hipobj.h`) in its order; 12..=15
//! are the mmgaggle fork's additions at the values they take in a fork build with both optional
//! API groups enabled; 16 and up are ours. The numeric values are ABI: never renumber.

use std::cell::RefCell;
use std::ffi::{CStr, CString};

use engine::EngineError;
use ring_api::{Cqe, ErrorClass, ErrorCode};

/// `hipObjOpError_t` values (see `include/hipobj.h` for each one's meaning).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpError {
    /// `hipObjSuccess`.
    Success = 0,
    /// `hipObjInvalidValue`.
    InvalidValue = 1,
    /// `hipObjNotInitialized`.
    NotInitialized = 2,
    /// `hipObjAlreadyInitialized`.
    AlreadyInitialized = 3,
    /// `hipObjRdmaError`.
    RdmaError = 4,
    /// `hipObjS3Error`.
    S3Error = 5,
    /// `hipObjBufNotRegistered`.
    BufNotRegistered = 6,
    /// `hipObjBufAlreadyRegistered`.
    BufAlreadyRegistered = 7,
    /// `hipObjNicNotFound`.
    NicNotFound = 8,
    /// `hipObjDmabufNotSupported`.
    DmabufNotSupported = 9,
    /// `hipObjSizeTooLarge`.
    SizeTooLarge = 10,
    /// `hipObjInternalError`.
    InternalError = 11,
    /// `hipObjNotSupported`.
    NotSupported = 12,
    /// `hipObjBusy`.
    Busy = 13,
    /// `hipObjOpNotSupported`.
    OpNotSupported = 14,
    /// `hipObjChecksumMismatch`.
    ChecksumMismatch = 15,
    /// `hipObjTimeout`.
    Timeout = 16,
    /// `hipObjCancelled`.
    Cancelled = 17,
    /// `hipObjNetworkError`.
    NetworkError = 18,
    /// `hipObjIntegrityError`.
    IntegrityError = 19,
}

impl OpError {
    /// Every code, in numeric order (for probes and exhaustive tests).
    pub const ALL: [OpError; 20] = [
        Self::Success,
        Self::InvalidValue,
        Self::NotInitialized,
        Self::AlreadyInitialized,
        Self::RdmaError,
        Self::S3Error,
        Self::BufNotRegistered,
        Self::BufAlreadyRegistered,
        Self::NicNotFound,
        Self::DmabufNotSupported,
        Self::SizeTooLarge,
        Self::InternalError,
        Self::NotSupported,
        Self::Busy,
        Self::OpNotSupported,
        Self::ChecksumMismatch,
        Self::Timeout,
        Self::Cancelled,
        Self::NetworkError,
        Self::IntegrityError,
    ];

    /// The C enumerator name, e.g. `hipObjS3Error` (the header test compares these).
    pub const fn c_name(self) -> &'static str {
        match self {
            Self::Success => "hipObjSuccess",
            Self::InvalidValue => "hipObjInvalidValue",
            Self::NotInitialized => "hipObjNotInitialized",
            Self::AlreadyInitialized => "hipObjAlreadyInitialized",
            Self::RdmaError => "hipObjRdmaError",
            Self::S3Error => "hipObjS3Error",
            Self::BufNotRegistered => "hipObjBufNotRegistered",
            Self::BufAlreadyRegistered => "hipObjBufAlreadyRegistered",
            Self::NicNotFound => "hipObjNicNotFound",
            Self::DmabufNotSupported => "hipObjDmabufNotSupported",
            Self::SizeTooLarge => "hipObjSizeTooLarge",
            Self::InternalError => "hipObjInternalError",
            Self::NotSupported => "hipObjNotSupported",
            Self::Busy => "hipObjBusy",
            Self::OpNotSupported => "hipObjOpNotSupported",
            Self::ChecksumMismatch => "hipObjChecksumMismatch",
            Self::Timeout => "hipObjTimeout",
            Self::Cancelled => "hipObjCancelled",
            Self::NetworkError => "hipObjNetworkError",
            Self::IntegrityError => "hipObjIntegrityError",
        }
    }

    /// The static, NUL-terminated description `hipObjGetErrorString` returns.
    pub const fn description(self) -> &'static CStr {
        match self {
            Self::Success => c"success",
            Self::InvalidValue => c"invalid argument (NULL pointer, bad handle, or a value out of range)",
            Self::NotInitialized => c"hipObject is not initialized (call hipObjInit first)",
            Self::AlreadyInitialized => c"hipObject is already initialized (call hipObjShutdown first)",
            Self::RdmaError => c"RDMA error",
            Self::S3Error => c"the S3 server rejected the request (see hipObjGetLastErrorMessage for the S3 error code)",
            Self::BufNotRegistered => c"buffer is not registered (hipObjBufRegister)",
            Self::BufAlreadyRegistered => c"buffer (or part of it) is already registered",
            Self::NicNotFound => c"no suitable RDMA NIC found",
            Self::DmabufNotSupported => c"device memory cannot be registered (no dmabuf export / GPU data path)",
            Self::SizeTooLarge => c"size too large (beyond the registration, the 4 GiB registration limit, or the destination)",
            Self::InternalError => c"internal error",
            Self::NotSupported => c"the server does not support the requested protocol",
            Self::Busy => c"busy: buffer range in use by an operation in flight, or server throttling after retries",
            Self::OpNotSupported => c"operation not supported by this build",
            Self::ChecksumMismatch => c"checksum mismatch",
            Self::Timeout => c"operation deadline exceeded",
            Self::Cancelled => c"operation cancelled",
            Self::NetworkError => c"network error: connection refused or reset after retries",
            Self::IntegrityError => c"the server's reply was inconsistent (short body, wrong range, protocol violation)",
        }
    }

    /// The code for a raw value, `None` if it names none.
    pub fn from_raw(v: i32) -> Option<OpError> {
        Self::ALL.into_iter().find(|e| *e as i32 == v)
    }
}

/// A failed call: its code, the GPU runtime's error (0 if none) and a detail message for
/// `hipObjGetLastErrorMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// The operation error.
    pub op: OpError,
    /// The HIP/CUDA runtime error code behind it, 0 when no GPU call failed.
    pub gpu: i32,
    /// One line saying what went wrong and, where it helps, what to do.
    pub message: String,
}

impl Fail {
    /// A failure without a GPU error.
    pub fn new(op: OpError, message: impl Into<String>) -> Self {
        Self {
            op,
            gpu: 0,
            message: message.into(),
        }
    }
}

/// Result of an entry point's body.
pub type CResult<T> = Result<T, Fail>;

impl From<EngineError> for Fail {
    fn from(e: EngineError) -> Self {
        let op = match &e {
            EngineError::NoEndpoint
            | EngineError::Endpoint(_)
            | EngineError::Credentials(_)
            | EngineError::Signing(_)
            | EngineError::Resolve { .. }
            | EngineError::Config(_)
            | EngineError::Tls(_)
            | EngineError::Intern(_) => OpError::InvalidValue,
            EngineError::Unsupported(_) => OpError::OpNotSupported,
            EngineError::NicNotFound { .. } | EngineError::VerbsUnavailable { .. } => {
                OpError::NicNotFound
            }
            EngineError::BadHandle(_) => OpError::BufNotRegistered,
            EngineError::OutOfBounds { .. } => OpError::SizeTooLarge,
            EngineError::Busy | EngineError::BusyTimeout(_) => OpError::Busy,
            // The node daemon could not be reached or broke its connection.
            EngineError::Daemon(_) => OpError::NetworkError,
            _ => OpError::InternalError,
        };
        Fail::new(op, format!("engine: {e}"))
    }
}

/// The operation error a failed completion maps to.
pub fn completion_error(cqe: &Cqe) -> OpError {
    let class = cqe.error_class();
    match cqe.error_code() {
        None if cqe.is_ok() => OpError::Success,
        None => OpError::InternalError,
        Some(code) => match code {
            // The engine refused the server's TLS certificate (not an S3 answer).
            ErrorCode::AccessDenied if class == Some(ErrorClass::Transport) => {
                OpError::NetworkError
            }
            ErrorCode::NotFound | ErrorCode::AccessDenied | ErrorCode::RangeNotSatisfiable => {
                OpError::S3Error
            }
            ErrorCode::Remote => OpError::S3Error,
            ErrorCode::InvalidArgument if class == Some(ErrorClass::Client) => OpError::S3Error,
            ErrorCode::InvalidArgument | ErrorCode::BadHandle => OpError::InvalidValue,
            ErrorCode::SlowDown | ErrorCode::Busy => OpError::Busy,
            ErrorCode::BadAddress | ErrorCode::TooLarge => OpError::SizeTooLarge,
            ErrorCode::Unsupported => OpError::OpNotSupported,
            ErrorCode::TimedOut if class == Some(ErrorClass::Deadline) => OpError::Timeout,
            // A local I/O failure is this machine's, not the network's: e.g. the engine's copy
            // of staged bytes into VRAM failed.
            ErrorCode::Io if class == Some(ErrorClass::Local) => OpError::InternalError,
            ErrorCode::TimedOut | ErrorCode::ConnectionReset | ErrorCode::Io => {
                OpError::NetworkError
            }
            ErrorCode::Protocol | ErrorCode::Integrity => OpError::IntegrityError,
            ErrorCode::Cancelled | ErrorCode::AlreadyCompleting => OpError::Cancelled,
            _ => OpError::InternalError,
        },
    }
}

/// A one-line description of a failed completion (`errno`, class, text).
pub fn describe_completion(cqe: &Cqe) -> String {
    let errno = cqe.result().checked_neg().unwrap_or(0);
    let what = match cqe.error_code() {
        // The engine's text also covers Cancel entries, which this API does not submit.
        Some(ErrorCode::NotFound) => "not found".to_owned(),
        Some(c) => c.to_string(),
        None => format!("error {errno}"),
    };
    let class = cqe
        .error_class()
        .map_or_else(|| "unknown".to_owned(), |c| format!("{c:?}"));
    format!("{what} (errno {errno}, class {class})")
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records the detail message of the calling thread's latest call (empty on success).
/// Interior NULs (impossible in our own messages) are replaced so the text is never lost.
pub fn set_last_message(msg: &str) {
    let c = CString::new(msg.replace('\0', "\u{fffd}")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; the message is then dropped.
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// Pointer to the calling thread's latest message; valid until that thread's next call into
/// the library (the slot is replaced, not appended to).
pub fn last_message_ptr() -> *const std::ffi::c_char {
    LAST.try_with(|l| l.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_and_round_trip() {
        for (i, e) in OpError::ALL.iter().enumerate() {
            assert_eq!(*e as i32, i as i32);
            assert_eq!(OpError::from_raw(i as i32), Some(*e));
            assert!(!e.description().to_bytes().is_empty());
        }
        assert_eq!(OpError::from_raw(-1), None);
        assert_eq!(OpError::from_raw(20), None);
        // The seed's values are fixed.
        assert_eq!(OpError::S3Error as i32, 5);
        assert_eq!(OpError::SizeTooLarge as i32, 10);
        assert_eq!(OpError::InternalError as i32, 11);
    }

    #[test]
    fn engine_nic_errors_keep_their_codes() {
        let e = Fail::from(EngineError::NicNotFound {
            hint: "bnxt_re9".into(),
            available: vec!["mlx5_0".into(), "rxe0".into()],
        });
        assert_eq!(e.op, OpError::NicNotFound);
        assert!(e.message.contains("\"bnxt_re9\""), "{}", e.message);
        assert!(e.message.contains("mlx5_0, rxe0"), "{}", e.message);
        let e = Fail::from(EngineError::NicNotFound {
            hint: "mlx5_0".into(),
            available: vec![],
        });
        assert!(e.message.contains("no RDMA NIC"), "{}", e.message);
        let e = Fail::from(EngineError::VerbsUnavailable {
            device: Some("mlx5_0".into()),
            reason: "ibv_open_device(mlx5_0) failed: Permission denied (os error 13)".into(),
            errno: Some(13),
        });
        assert_eq!(e.op, OpError::NicNotFound);
        assert!(e.message.contains("Permission denied"), "{}", e.message);
        let e = Fail::from(EngineError::Config(
            "EngineBuilder::nics: an empty NIC name".into(),
        ));
        assert_eq!(e.op, OpError::InvalidValue);
    }

    #[test]
    fn completions_map_to_codes() {
        let e = |c, k| completion_error(&Cqe::error(1, c, k));
        assert_eq!(
            e(ErrorCode::AccessDenied, ErrorClass::Client),
            OpError::S3Error
        );
        assert_eq!(
            e(ErrorCode::InvalidArgument, ErrorClass::Client),
            OpError::S3Error
        );
        assert_eq!(
            e(ErrorCode::InvalidArgument, ErrorClass::Invalid),
            OpError::InvalidValue
        );
        assert_eq!(
            e(ErrorCode::TimedOut, ErrorClass::Deadline),
            OpError::Timeout
        );
        assert_eq!(
            e(ErrorCode::TimedOut, ErrorClass::Transport),
            OpError::NetworkError
        );
        assert_eq!(
            e(ErrorCode::TooLarge, ErrorClass::Local),
            OpError::SizeTooLarge
        );
        assert_eq!(
            e(ErrorCode::Unsupported, ErrorClass::Invalid),
            OpError::OpNotSupported
        );
        assert_eq!(e(ErrorCode::SlowDown, ErrorClass::Server), OpError::Busy);
        assert_eq!(
            completion_error(&Cqe::success(1, 5, ring_api::DataPath::Http)),
            OpError::Success
        );
        let d = describe_completion(&Cqe::error(1, ErrorCode::AccessDenied, ErrorClass::Client));
        assert_eq!(d, "access denied (errno 13, class Client)");
    }

    #[test]
    fn last_message_is_per_thread() {
        set_last_message("here");
        std::thread::spawn(|| set_last_message("there"))
            .join()
            .unwrap();
        // SAFETY-free check through the owned copy.
        let s = LAST.with(|l| l.borrow().to_str().unwrap().to_owned());
        assert_eq!(s, "here");
        set_last_message("a\0b");
        let s = LAST.with(|l| l.borrow().to_str().unwrap().to_owned());
        assert_eq!(s, "a\u{fffd}b");
    }
}
