#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
//! pinstream for Python: the native module `pinstream._native`, built with maturin as an
//! abi3 wheel (Python 3.11+). The package `pinstream` (python/pinstream/__init__.py) checks
//! the caller's arguments and turns this module's memory into NumPy arrays.
//!
//! | module | what |
//! |---|---|
//! | [`memory`] | `PinnedMemory`: pinned memory pinstream allocates, exported by the buffer protocol |
//! | [`register`] | `register`/`unregister`/`info` of the caller's arrays |
//! | [`mapped`] | `device_buffer`: the `cl_mem` over mapped memory kernels use in place |
//! | [`stream`] | `stream`: the engine over pinned arrays with the caller's PyOpenCL kernel |
//! | [`lend`] | the arrays of a `stream` call, lent to the engine |
//! | [`stream_advice`] | the engine's errors of a `stream` call, with the fix in the call's terms |
//! | [`registry`] | every range pinned for this process (an adapter over [`pinstream::host::ranges`]) |
//! | [`errors`] | the exception classes and how library errors become them |
//! | [`export`] | the caller's buffer exports, read by the protocol's rules (0-d, no strides) |
//!
//! # Safety
//! Contexts come in as raw `cl_context` handles (PyOpenCL's `int_ptr`) and are retained by
//! [`pinstream::backend::opencl::Context::from_raw`]. Memory handed out is owned by a Python
//! object that the buffer protocol keeps alive while any array views it; registered arrays are
//! kept alive by a buffer export held with their registration. The GIL is released while
//! memory is pinned or freed and while `gather`/`scatter` run in the library; freeing never
//! waits for a kernel still queued on the memory ([`registry::Allocation`]); nothing waits for
//! the GIL while holding the registry's lock or a gather's.

pub mod batch;
pub mod errors;
pub mod export;
pub mod lend;
pub mod mapped;
pub mod memory;
pub mod register;
pub mod registry;
pub mod stream;
pub mod stream_advice;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The crate's version, which maturin also writes into the wheel's metadata.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::add_to(m)?;
    m.add_class::<memory::PinnedMemory>()?;
    m.add_function(wrap_pyfunction!(memory::alloc, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pending_frees, m)?)?;
    m.add_function(wrap_pyfunction!(register::register, m)?)?;
    m.add_function(wrap_pyfunction!(register::unregister, m)?)?;
    m.add_function(wrap_pyfunction!(register::info, m)?)?;
    m.add_function(wrap_pyfunction!(register::census, m)?)?;
    m.add_function(wrap_pyfunction!(mapped::device_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(batch::gather, m)?)?;
    m.add_function(wrap_pyfunction!(batch::scatter, m)?)?;
    m.add_function(wrap_pyfunction!(batch::release_gather, m)?)?;
    m.add_function(wrap_pyfunction!(stream::stream, m)?)?;
    Ok(())
}
