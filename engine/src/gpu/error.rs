//! The one error type of the GPU layer.
//!
//! Every failing runtime call keeps the runtime's own numeric status (`CUresult`, `hipError_t`,
//! `hsa_status_t`) together with its symbolic name and description, so a log line carries what
//! NVIDIA's or AMD's documentation is indexed by, and callers can branch on [`GpuError::code`].

use std::fmt;

/// Which runtime produced a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// NVIDIA CUDA driver API (`libcuda.so`), through `cudarc`.
    Cuda,
    /// AMD HIP runtime (`libamdhip64.so`).
    Hip,
    /// AMD ROCr / HSA runtime (`libhsa-runtime64.so`), used for the dmabuf export.
    Hsa,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cuda => "cuda",
            Backend::Hip => "hip",
            Backend::Hsa => "hsa",
        })
    }
}

/// A failure of the GPU layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// A runtime call returned a non-success status.
    #[error("{backend} {call} failed: {name} ({code}): {message}")]
    Call {
        /// Runtime that failed.
        backend: Backend,
        /// The C function, e.g. `cuMemAlloc_v2`.
        call: &'static str,
        /// The runtime's numeric status.
        code: i32,
        /// Symbolic name of the status (`CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorNoDevice`).
        name: String,
        /// The runtime's description of the status.
        message: String,
    },
    /// The shared library of the runtime could not be opened (no driver / runtime installed).
    #[error("{backend} runtime library not loadable: {detail}")]
    LibraryNotFound {
        /// Runtime that was looked for.
        backend: Backend,
        /// Names tried and the loader's last message.
        detail: String,
    },
    /// A required symbol is absent from the loaded library (a runtime too old for us).
    #[error("{backend} runtime lacks required symbol {symbol}")]
    MissingSymbol {
        /// Runtime that lacks the symbol.
        backend: Backend,
        /// The symbol.
        symbol: &'static str,
    },
    /// The operation exists in the API but not in this runtime, device or build.
    #[error("{backend}: {what} is not supported: {why}")]
    Unsupported {
        /// Runtime asked.
        backend: Backend,
        /// The operation.
        what: &'static str,
        /// Why (missing optional symbol, version, device property).
        why: String,
    },
    /// The caller passed something the runtime was never asked about (zero length, overflow,
    /// an ordinal past the device count, a pointer of the wrong kind).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl GpuError {
    /// The runtime's numeric status, when the error came from a runtime call.
    #[must_use]
    pub fn code(&self) -> Option<i32> {
        match self {
            GpuError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The backend concerned, when there is one.
    #[must_use]
    pub fn backend(&self) -> Option<Backend> {
        match self {
            GpuError::Call { backend, .. }
            | GpuError::LibraryNotFound { backend, .. }
            | GpuError::MissingSymbol { backend, .. }
            | GpuError::Unsupported { backend, .. } => Some(*backend),
            GpuError::InvalidArgument(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_error_displays_code_name_and_message() {
        let e = GpuError::Call {
            backend: Backend::Cuda,
            call: "cuMemAlloc_v2",
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            message: "out of memory".into(),
        };
        assert_eq!(e.code(), Some(2));
        assert_eq!(e.backend(), Some(Backend::Cuda));
        assert_eq!(
            e.to_string(),
            "cuda cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
        );
        assert_eq!(GpuError::InvalidArgument("x".into()).code(), None);
    }
}
