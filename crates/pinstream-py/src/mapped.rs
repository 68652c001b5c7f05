//! `device_buffer`: the `cl_mem` over mapped memory (`pinstream.empty(..., mapped=True)`),
//! which kernels read and write in place (`cudaHostGetDevicePointer`).

use crate::errors::host_error_in;
use crate::export::Export;
use crate::register::{at_least_one_byte, refused};
use crate::registry::{self, Refusal};
use pyo3::prelude::*;

/// The buffer over the mapped memory holding `array`, as a `cl_mem` handle whose one
/// reference goes to the caller (the Python side wraps it in a `pyopencl.Buffer` that takes
/// that reference), and the offset of the array's first byte in it.
#[pyfunction]
pub fn device_buffer(py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let r = Export::get(array)?.span("device_buffer: array")?;
    let found = at_least_one_byte(&r).ok_or(Refusal::NotFound(None));
    let (held, range) = found
        .and_then(registry::find)
        .map_err(|e| refused(("device_buffer", "the array"), &r, e))?;
    let buf = held
        .region()
        .device_buffer()
        .map_err(|e| host_error_in(py, "device_buffer: array: ", e))?;
    Ok((buf.into_raw() as usize, r.start - range.start))
}
