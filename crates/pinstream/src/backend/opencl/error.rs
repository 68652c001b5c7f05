//! OpenCL error codes by symbolic name.

use crate::backend::error::ErrorKind;
use std::fmt;

/// An OpenCL call that failed, with the call's name and the code's symbolic name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ClError {
    /// The API function that failed, e.g. `clCreateBuffer`.
    pub call: &'static str,
    /// The raw `cl_int` status.
    pub code: i32,
}

impl ClError {
    /// Wraps a status returned by `call`.
    pub fn new(call: &'static str, code: i32) -> Self {
        Self { call, code }
    }

    /// The symbolic name of the code, e.g. `CL_MEM_OBJECT_ALLOCATION_FAILURE`.
    pub fn name(&self) -> &'static str {
        code_name(self.code)
    }

    /// The class of the code ([`ErrorKind::of_opencl`]).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::of_opencl(i64::from(self.code))
    }

    /// True when the code says the device or host ran out of memory for this request.
    pub fn is_out_of_memory(&self) -> bool {
        self.kind() == ErrorKind::OutOfMemory
    }
}

impl fmt::Display for ClError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name(), self.code)
    }
}

/// The symbolic name of an OpenCL status code, including the loader's own codes.
pub fn code_name(code: i32) -> &'static str {
    match code {
        // cl3 marks these two for the dynamic loader; they are not OpenCL codes.
        cl3::error_codes::DLOPEN_RUNTIME_LOAD_FAILED => "OPENCL_LIBRARY_NOT_FOUND",
        cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE => "OPENCL_FUNCTION_NOT_IN_LOADER",
        -1001 => "CL_PLATFORM_NOT_FOUND_KHR",
        -1100 => "CL_INVALID_COMMAND_BUFFER_KHR",
        _ => cl3::error_codes::error_text(code),
    }
}

/// Turns a `cl3` status result into a [`ClError`] result naming the call.
pub(crate) trait Call<T> {
    fn call(self, name: &'static str) -> Result<T, ClError>;
}

impl<T> Call<T> for Result<T, i32> {
    fn call(self, name: &'static str) -> Result<T, ClError> {
        self.map_err(|code| ClError::new(name, code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_symbolic() {
        assert_eq!(code_name(-4), "CL_MEM_OBJECT_ALLOCATION_FAILURE");
        assert_eq!(code_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
        let e = ClError::new("clCreateBuffer", -61);
        assert_eq!(
            e.to_string(),
            "clCreateBuffer failed: CL_INVALID_BUFFER_SIZE (-61)"
        );
        assert!(e.is_out_of_memory());
    }
}
