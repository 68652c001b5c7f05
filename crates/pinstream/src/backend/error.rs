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
}

impl BackendError {
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
    use super::BackendError;

    #[test]
    fn names_the_call_when_there_is_one() {
        let e = BackendError {
            api: "OpenCL",
            call: "clCreateBuffer",
            code: -5,
            message: "CL_OUT_OF_RESOURCES (-5)".into(),
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
}
