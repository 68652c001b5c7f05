//! The exceptions of `pinstream`, and how the library's errors become them.
//!
//! Every library error keeps its message (the same text the CLI and the C API give), with the
//! fix in Python's spelling added where the fix is a call or an argument (the library's text
//! names no front's flags or functions); the class says what kind of failure it is, so that
//! callers can catch one kind:
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
//! Zero-size shapes never reach the library: they pin nothing (`memory::alloc`, `register`).

use pinstream::backend::api::Api;
use pinstream::backend::error::BackendError;
use pinstream::backend::opencl::{code_name, ClError, OpenCl};
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
    opencl_error(py, &e.clone().into())
}

/// [`cl_error`] of an OpenCL call's failure as the library's backend error.
fn opencl_error(py: Python<'_>, e: &BackendError) -> PyErr {
    backend_error_in(py, &e.to_string(), e)
}

/// An `OpenCLError` with the message `msg` (which says where `e` happened), carrying `e`'s
/// call, code and name as attributes.
pub fn backend_error_in(py: Python<'_>, msg: &str, e: &BackendError) -> PyErr {
    let err = OpenCLError::new_err(msg.to_string());
    let value = err.value(py);
    // Attributes only add detail: the message already holds all three.
    let code = i32::try_from(e.code).unwrap_or(i32::MIN);
    let _ = value.setattr("call", e.call);
    let _ = value.setattr("code", code);
    let _ = value.setattr("name", code_name(code));
    err
}

/// The fix in Python's terms, for the library errors whose fix is a call or an argument: the
/// library's own text names none (its fronts differ), so each front adds its spelling.
fn python_fix(e: &HostError) -> Option<&'static str> {
    match e {
        HostError::Unsupported { .. } => Some(
            "pass strategy=\"auto\" (the default) to pinstream.empty/zeros, or a strategy the device offers",
        ),
        HostError::NotPinnable { .. } => Some(
            "pinstream.empty(ctx, shape, dtype) allocates it, and numpy.memmap(path, mode=\"c\") maps a file privately",
        ),
        HostError::MappingUnknown { .. } => Some("pinstream.empty(ctx, shape, dtype) allocates it"),
        HostError::NotMapped { .. } => Some("allocate it with pinstream.empty(ctx, shape, dtype, mapped=True)"),
        HostError::NoZeroCopy { .. } => Some("pinstream.empty(ctx, shape, dtype) without mapped=True gives pinned memory for pyopencl.enqueue_copy"),
        HostError::MappedTooLarge { .. } => Some("allocate one mapped array per part"),
        _ => None,
    }
}

/// Which exception class a library error becomes.
#[derive(Debug)]
enum Class<'a> {
    /// `ValueError`: a bad argument.
    Value,
    /// `NotPinnableError`: memory the driver would not really pin, or that is not mapped.
    NotPinnable,
    /// `OpenCLError`: an OpenCL call outside pinning failed.
    OpenCl(&'a BackendError),
    /// `PinError`: nothing could be allocated or pinned (every strategy failed, a forced one
    /// failed or is not offered, too large, `RLIMIT_MEMLOCK`, a failed registration): also
    /// any error a later library adds, so that a failed pin is never mistaken for success.
    Pin,
}

fn class(e: &HostError) -> Class<'_> {
    match e {
        HostError::ZeroSize | HostError::FaultHook(_) | HostError::NotMapped { .. } => Class::Value,
        HostError::NotPinnable { .. }
        | HostError::PastEndOfFile { .. }
        | HostError::MappingUnknown { .. }
        | HostError::Unmapped { .. }
        | HostError::NullPointer => Class::NotPinnable,
        HostError::Backend(b) if b.api == OpenCl::NAME && !b.call.is_empty() => Class::OpenCl(b),
        _ => Class::Pin,
    }
}

/// The Python exception for a library error: the library's message, and the fix in Python's
/// terms where it is a call or an argument.
pub fn host_error(py: Python<'_>, e: HostError) -> PyErr {
    host_error_in(py, "", e)
}

/// [`host_error`] of a call's argument: `what` (the call and the parameter, `"gather: src: "`)
/// opens the message.
pub fn host_error_in(py: Python<'_>, what: &str, e: HostError) -> PyErr {
    let msg = match python_fix(&e) {
        Some(fix) => format!("{what}{e}: {fix}"),
        None => format!("{what}{e}"),
    };
    match class(&e) {
        Class::Value => PyValueError::new_err(msg),
        Class::NotPinnable => NotPinnableError::new_err(msg),
        Class::OpenCl(b) => opencl_error(py, b),
        Class::Pin => PinError::new_err(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::host::PinKind;

    #[test]
    fn failed_pins_and_registrations_are_pin_errors() {
        let cl = || BackendError::from(ClError::new("clCreateBuffer", -5));
        let failed_registration = HostError::Alloc {
            pinning: "register".into(),
            kind: PinKind::Driver,
            bytes: 4096,
            source: cl(),
        };
        let none_pinned = HostError::AutoFailed {
            bytes: 4096,
            tried: vec!["register: CL_OUT_OF_RESOURCES".into()],
        };
        assert!(matches!(class(&failed_registration), Class::Pin));
        assert!(matches!(class(&none_pinned), Class::Pin));
        assert!(matches!(class(&HostError::NullPointer), Class::NotPinnable));
        assert!(matches!(class(&HostError::Backend(cl())), Class::OpenCl(_)));
    }
}
