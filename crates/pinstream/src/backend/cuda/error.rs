//! The CUDA backend's error: a failed driver call, a kernel NVRTC or pinstream refused, or a
//! missing library.

use cudarc::driver::DriverError;

/// A failed CUDA call, or a missing library.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A driver call returned an error.
    #[error("{call} failed: {name} ({text})")]
    Driver {
        /// The call.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
        /// `CUDA_ERROR_...`.
        name: String,
        /// The driver's description.
        text: String,
    },
    /// The source did not compile with NVRTC.
    #[error("NVRTC could not compile the kernel source:\n{log}")]
    Compile {
        /// The compiler's message.
        log: String,
    },
    /// The source declares no `__global__` function of that name.
    #[error("the source declares no __global__ function `{name}`")]
    NoKernel {
        /// The name asked for.
        name: String,
    },
    /// A kernel pinstream cannot call.
    #[error("kernel `{kernel}`: {why}")]
    Signature {
        /// The kernel.
        kernel: String,
        /// Why, and what to write instead.
        why: String,
    },
    /// No usable CUDA driver, NVRTC or device.
    #[error("{0}")]
    Unavailable(String),
    /// Mapping the host memory to register failed.
    #[error("mapping {bytes} bytes of host memory failed: {source}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CudaError {
    pub(super) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> CudaError {
        move |e| CudaError::Driver {
            call,
            code: e.0 as i32,
            name: e
                .error_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("CUresult {}", e.0 as i32)),
            text: e
                .error_string()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, CudaError>;
