//! [`Cqe::into_result`]: a completion as `Result<bytes, OpError>`.

use crate::cqe::{Cqe, DataPath, ErrorClass, WireDialect};
use crate::error::ErrorCode;

/// A failed operation, decoded from its completion: what failed ([`OpError::code`]), whose
/// fault it is ([`OpError::class`]) and which path and dialect the op was on.
///
/// Match on `code` for the precise failure and on `class` for policy (retry, report, give
/// up); both are `None` only for values this version of the crate does not name, in which case
/// [`OpError::errno`] still holds the raw number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct OpError {
    /// The submission's tag.
    pub user_data: u64,
    /// The positive errno (`-Cqe::result()`).
    pub errno: i32,
    /// The named error code, if this version knows the errno.
    pub code: Option<ErrorCode>,
    /// The error class, if this version knows it.
    pub class: Option<ErrorClass>,
    /// The data path recorded on the completion (usually `DataPath::None` for failures that
    /// moved no bytes).
    pub path: Option<DataPath>,
    /// The wire dialect recorded on the completion.
    pub dialect: Option<WireDialect>,
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "{c} (errno {})", self.errno)?,
            None => write!(f, "error (errno {})", self.errno)?,
        }
        if let Some(class) = self.class {
            write!(f, ", class {class:?}")?;
        }
        write!(f, ", op {}", self.user_data)
    }
}

impl std::error::Error for OpError {}

impl Cqe {
    /// `Ok(bytes moved)` for a successful completion, else the decoded [`OpError`].
    ///
    /// ```
    /// use ring_api::{Cqe, DataPath, ErrorClass, ErrorCode};
    ///
    /// assert_eq!(Cqe::success(1, 4096, DataPath::Http).into_result(), Ok(4096));
    /// let err = Cqe::error(2, ErrorCode::NotFound, ErrorClass::Client)
    ///     .into_result()
    ///     .unwrap_err();
    /// assert_eq!(err.code, Some(ErrorCode::NotFound));
    /// assert_eq!(err.class, Some(ErrorClass::Client));
    /// ```
    pub fn into_result(self) -> Result<u64, OpError> {
        if self.is_ok() {
            return Ok(self.bytes());
        }
        Err(OpError {
            user_data: self.user_data(),
            errno: self.result().saturating_neg(),
            code: self.error_code(),
            class: self.error_class(),
            path: self.path(),
            dialect: self.dialect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_errno_keeps_the_number() {
        let e = Cqe::from_raw(7, -9999, 0, 0, 0).into_result().unwrap_err();
        assert_eq!((e.errno, e.code, e.user_data), (9999, None, 7));
        assert!(e.to_string().contains("9999"));
    }

    #[test]
    fn success_is_bytes() {
        assert_eq!(Cqe::from_raw(1, 5, 0, 5, 0).into_result(), Ok(5));
    }
}
