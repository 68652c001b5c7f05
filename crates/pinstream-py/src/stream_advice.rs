//! The engine's errors of a `pinstream.stream` call as Python exceptions, with the fix in
//! the call's own terms (`budget=`, `block=`, `residency=`, `args=`, the arrays' dtype): the
//! library's text names no front's parameters, so each front adds its spelling, as the
//! command line's `advice` module does with flags.
//!
//! | engine error | exception |
//! |---|---|
//! | layout, checks, budget, binding, pool over budget | `ValueError` |
//! | a command or a setup call failed | `OpenCLError` |
//! | host memory never pinned | `PinError` |
//! | a kernel wrote past a buffer, anything else | `PinstreamError` |

use crate::errors::{backend_error_in, PinError, PinstreamError};
use pinstream::engine::error::{BindProblem, ElementRole};
use pinstream::engine::validate::ValidateError;
use pinstream::engine::{BindError, BudgetError, PoolError, StreamError};
use pinstream::units::Bytes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The exception for a failed run: `e`'s message, opened by `stream: ` and closed by the fix
/// in the call's terms.
pub fn stream_error(py: Python<'_>, e: &StreamError) -> PyErr {
    match e {
        StreamError::Budget(b) => value(budget(b)),
        StreamError::Pool(p @ PoolError::OverBudget { .. }) => {
            value(format!("{p}: raise budget=, or lower block="))
        }
        StreamError::Bind(b) => value(bind(b)),
        StreamError::Check(ValidateError::Kernel(b)) => value(bind(b)),
        StreamError::Check(c @ ValidateError::Block { suggested, .. }) => {
            value(format!("{c}: pass block={suggested}"))
        }
        StreamError::Check(c) => value(c.to_string()),
        StreamError::Layout(l) => value(l.to_string()),
        StreamError::OnDevice { source, .. } => stream_error(py, source),
        StreamError::Stage { source, .. } | StreamError::Backend(source) => {
            backend_error_in(py, &format!("stream: {e}"), source)
        }
        StreamError::NotPinned { .. } => PinError::new_err(format!("stream: {e}")),
        StreamError::Overrun(o) => PinstreamError::new_err(format!(
            "stream: {}: bound every index the kernel writes by the count it is given; the run stopped, and its results are not to be used",
            o.what()
        )),
        e => PinstreamError::new_err(format!("stream: {e}")),
    }
}

fn value(msg: String) -> PyErr {
    PyValueError::new_err(format!("stream: {msg}"))
}

fn budget(e: &BudgetError) -> String {
    match e {
        BudgetError::BlockAboveMaxAlloc { max_alloc, .. } => {
            format!("{e}: pass block={max_alloc} or less")
        }
        BudgetError::OutputBlockAboveMaxAlloc { .. } => format!("{e}: lower block="),
        BudgetError::TooSmall { need_bytes, .. } => format!(
            "{e}: raise budget= to at least {need_bytes} ({}), or lower block=",
            Bytes(*need_bytes)
        ),
        BudgetError::ResidencyAbove { left, .. } => {
            format!("{e}: pass residency={left} or less, or residency='auto'")
        }
        e => e.to_string(),
    }
}

/// The NumPy dtype an OpenCL C scalar type name is (`float` → `float32`).
fn numpy_name(name: &str) -> &str {
    match name {
        "f32" => "float32",
        "f16" => "float16",
        "f64" => "float64",
        "i8" => "int8",
        "u8" => "uint8",
        "i16" => "int16",
        "u16" => "uint16",
        "i32" => "int32",
        "u32" => "uint32",
        "i64" => "int64",
        "u64" => "uint64",
        other => other,
    }
}

fn bind(e: &BindError) -> String {
    let kernel = &e.kernel;
    match &*e.problem {
        BindProblem::NoValue(a) => format!(
            "kernel `{kernel}`: argument `{}` ({}) needs a value: pass args={{'{}': VALUE}}",
            a.name, a.type_name, a.name
        ),
        BindProblem::ElementType {
            argument: a,
            role,
            want,
            declared,
        } => {
            let arrays = match role {
                ElementRole::Input => "the streamed arrays",
                ElementRole::Output => "the output array",
            };
            format!(
                "kernel `{kernel}`: argument `{}` is {}, but {arrays} hold {} elements ({}): pass arrays of dtype numpy.{} or declare it {}*",
                a.name, a.type_name, numpy_name(want.0), want.1, numpy_name(declared), want.1
            )
        }
        p => format!(
            "kernel `{kernel}`: {p} (pinstream.stream binds: inout= or the input= arrays, the output=, the resident= arrays in the kernel's order, the count, then args= by name)"
        ),
    }
}
