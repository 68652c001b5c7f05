//! The backend layer's error as the layers above see it: one structured type for a failed call
//! of any API. Each API keeps its own thin error type (`ClError`, `CudaError`) with the detail
//! of its calls and converts into this one. A leaf module: it depends on nothing in the crate.

/// A failed call of a compute API, whatever the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct BackendError {
    /// `OpenCL` or `CUDA`.
    pub api: &'static str,
    /// The API function that failed, e.g. `clCreateBuffer`, `cuMemAlloc`; empty where the
    /// failure came before any call (a library that is not installed).
    pub call: &'static str,
    /// The raw status the call returned (`cl_int`, `CUresult`, `nvrtcResult`); 0 where none.
    pub code: i64,
    /// The status's symbolic name with the API's description or number, e.g.
    /// `CL_OUT_OF_RESOURCES (-5)`, `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`.
    pub message: String,
    /// The class of the failure, from the API's code ([`ErrorKind::of_opencl`],
    /// [`ErrorKind::of_cuda`]) or from what failed where no call returned a code.
    pub(crate) kind: ErrorKind,
}

/// What kind of failure a [`BackendError`] is, whatever the API, for a front to choose its
/// code or exception by (never by matching the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The device or the host could not give the memory or resources asked for.
    OutOfMemory,
    /// A handle (context, queue, buffer, program, kernel, event, device) that is not a valid
    /// object of the API, or not of the right context.
    InvalidObject,
    /// The driver, device or loader does not offer what was asked (a compiler, a function, a
    /// feature).
    Unsupported,
    /// The device or context can no longer be used (unavailable, or a fault left it broken).
    Lost,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// The kind of an OpenCL status (`cl_int`), including cl3's loader codes.
    pub fn of_opencl(code: i64) -> Self {
        match code {
            // CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY,
            // CL_INVALID_BUFFER_SIZE (a size above what the device can allocate).
            -4 | -5 | -6 | -61 => Self::OutOfMemory,
            // CL_INVALID_{PLATFORM, DEVICE, CONTEXT, COMMAND_QUEUE, MEM_OBJECT, SAMPLER,
            // PROGRAM, KERNEL, EVENT_WAIT_LIST, EVENT, GL_OBJECT, DEVICE_QUEUE,
            // COMMAND_BUFFER_KHR}.
            -32 | -33 | -34 | -36 | -38 | -41 | -44 | -48 | -57 | -58 | -60 | -70 | -1100 => {
                Self::InvalidObject
            }
            // CL_COMPILER_NOT_AVAILABLE, CL_IMAGE_FORMAT_NOT_SUPPORTED,
            // CL_LINKER_NOT_AVAILABLE, and cl3's no library / no such function in the loader.
            -3 | -10 | -16 | -2000 | -2001 => Self::Unsupported,
            // CL_DEVICE_NOT_AVAILABLE.
            -2 => Self::Lost,
            _ => Self::Other,
        }
    }

    /// The kind of a CUDA driver status (`CUresult`).
    pub fn of_cuda(code: i64) -> Self {
        match code {
            // CUDA_ERROR_OUT_OF_MEMORY.
            2 => Self::OutOfMemory,
            // CUDA_ERROR_{INVALID_DEVICE, INVALID_IMAGE, INVALID_CONTEXT, INVALID_HANDLE,
            // CONTEXT_IS_DESTROYED}.
            101 | 200 | 201 | 400 | 709 => Self::InvalidObject,
            // CUDA_ERROR_{STUB_LIBRARY, NO_BINARY_FOR_GPU, PEER_ACCESS_UNSUPPORTED,
            // UNSUPPORTED_PTX_VERSION, NOT_SUPPORTED, SYSTEM_DRIVER_MISMATCH,
            // COMPAT_NOT_SUPPORTED_ON_DEVICE}.
            34 | 209 | 217 | 222 | 801 | 803 | 804 => Self::Unsupported,
            // CUDA_ERROR_{DEINITIALIZED, DEVICE_UNAVAILABLE, ECC_UNCORRECTABLE}, and the
            // faults that leave the context unusable: ILLEGAL_ADDRESS, HARDWARE_STACK_ERROR,
            // ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE, INVALID_PC,
            // LAUNCH_FAILED.
            4 | 46 | 214 | 700 | 714..=719 => Self::Lost,
            _ => Self::Other,
        }
    }
}

impl BackendError {
    /// The class of the failure: what a front chooses its code or exception by.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    fn describe(&self) -> String {
        if self.call.is_empty() {
            self.message.clone()
        } else {
            format!("{} failed: {}", self.call, self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BackendError, ErrorKind};

    #[test]
    fn names_the_call_when_there_is_one() {
        let e = BackendError {
            api: "OpenCL",
            call: "clCreateBuffer",
            code: -5,
            message: "CL_OUT_OF_RESOURCES (-5)".into(),
            kind: ErrorKind::OutOfMemory,
        };
        assert_eq!(
            e.to_string(),
            "clCreateBuffer failed: CL_OUT_OF_RESOURCES (-5)"
        );
        let e = BackendError {
            call: "",
            message: "no CUDA driver".into(),
            ..e
        };
        assert_eq!(e.to_string(), "no CUDA driver");
    }

    #[test]
    fn kinds_come_from_the_apis_codes() {
        use ErrorKind::*;
        let cl = [
            (-4, OutOfMemory),    // CL_MEM_OBJECT_ALLOCATION_FAILURE
            (-5, OutOfMemory),    // CL_OUT_OF_RESOURCES
            (-6, OutOfMemory),    // CL_OUT_OF_HOST_MEMORY
            (-34, InvalidObject), // CL_INVALID_CONTEXT
            (-38, InvalidObject), // CL_INVALID_MEM_OBJECT
            (-30, Other),         // CL_INVALID_VALUE: not an object
            (-3, Unsupported),    // CL_COMPILER_NOT_AVAILABLE
            (-2001, Unsupported), // a function the loader lacks
            (-2, Lost),           // CL_DEVICE_NOT_AVAILABLE
            (-11, Other),         // CL_BUILD_PROGRAM_FAILURE
        ];
        for (code, kind) in cl {
            assert_eq!(ErrorKind::of_opencl(code), kind, "{code}");
        }
        let cuda = [
            (2, OutOfMemory),     // CUDA_ERROR_OUT_OF_MEMORY
            (201, InvalidObject), // CUDA_ERROR_INVALID_CONTEXT
            (400, InvalidObject), // CUDA_ERROR_INVALID_HANDLE
            (801, Unsupported),   // CUDA_ERROR_NOT_SUPPORTED
            (700, Lost),          // CUDA_ERROR_ILLEGAL_ADDRESS
            (719, Lost),          // CUDA_ERROR_LAUNCH_FAILED
            (1, Other),           // CUDA_ERROR_INVALID_VALUE
        ];
        for (code, kind) in cuda {
            assert_eq!(ErrorKind::of_cuda(code), kind, "{code}");
        }
    }
}
