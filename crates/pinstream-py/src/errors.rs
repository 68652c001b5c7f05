//! The exceptions of `pinstream`, and how the library's errors become them.
//!
//! Every library error keeps its message (the same text the CLI and the C API give); the class
//! says what kind of failure it is, so that callers can catch one kind:
//!
//! | exception | raised for |
//! |---|---|
//! | `PinstreamError` | base of every pinstream error |
//! | `PinError` | memory could not be allocated or pinned (no strategy worked, too large, ...) |
//! | `NotPinnableError` | memory the driver would accept without pinning, or that is not mapped |
//! | `AlreadyRegisteredError` | a range that overlaps memory pinstream already pins |
//! | `NotRegisteredError` | an array whose memory pinstream does not pin |
//! | `OpenCLError` | an OpenCL call failed (attributes `call`, `code`, `name`) |
//!
//! A size of zero bytes is a `ValueError` with the library's message.

use pinstream::backend::opencl::ClError;
use pinstream::host::HostError;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

create_exception!(
    pinstream,
    PinstreamError,
    PyException,
    "Base class of every error pinstream raises."
);
create_exception!(
    pinstream,
    PinError,
    PinstreamError,
    "Memory could not be allocated or pinned."
);
create_exception!(
    pinstream,
    NotPinnableError,
    PinstreamError,
    "Memory the driver would accept without really pinning it (read-only, a shared mapping of a disk file), or that is not mapped: refused."
);
create_exception!(
    pinstream,
    AlreadyRegisteredError,
    PinstreamError,
    "The range overlaps memory pinstream already pins (cudaErrorHostMemoryAlreadyRegistered)."
);
create_exception!(
    pinstream,
    NotRegisteredError,
    PinstreamError,
    "The array's memory is not memory pinstream pins (cudaErrorHostMemoryNotRegistered)."
);
create_exception!(
    pinstream,
    OpenCLError,
    PinstreamError,
    "An OpenCL call failed; `call`, `code` and `name` say which and how."
);

/// Adds the exception classes to the module.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PinstreamError", py.get_type::<PinstreamError>())?;
    m.add("PinError", py.get_type::<PinError>())?;
    m.add("NotPinnableError", py.get_type::<NotPinnableError>())?;
    m.add(
        "AlreadyRegisteredError",
        py.get_type::<AlreadyRegisteredError>(),
    )?;
    m.add("NotRegisteredError", py.get_type::<NotRegisteredError>())?;
    m.add("OpenCLError", py.get_type::<OpenCLError>())?;
    Ok(())
}

/// An `OpenCLError` carrying the call, the code and its symbolic name as attributes.
pub fn cl_error(py: Python<'_>, e: &ClError) -> PyErr {
    let err = OpenCLError::new_err(e.to_string());
    let value = err.value(py);
    // Attributes only add detail: the message already holds all three.
    let _ = value.setattr("call", e.call);
    let _ = value.setattr("code", e.code);
    let _ = value.setattr("name", e.name());
    err
}

/// The Python exception for a library error, with the library's message.
pub fn host_error(py: Python<'_>, e: HostError) -> PyErr {
    let msg = e.to_string();
    match e {
        HostError::ZeroSize | HostError::FaultHook(_) => PyValueError::new_err(msg),
        HostError::NotPinnable { .. }
        | HostError::PastEndOfFile { .. }
        | HostError::MappingUnknown { .. }
        | HostError::Unmapped { .. }
        | HostError::NullPointer => NotPinnableError::new_err(msg),
        HostError::Cl(cl) => cl_error(py, &cl),
        _ => PinError::new_err(msg),
    }
}
