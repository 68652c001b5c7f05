//! Pinned memory that pinstream allocates for Python: `PinnedMemory`, a Python object that
//! owns one contiguous [`HostRegion`] and exports it through the buffer protocol.
//!
//! `pinstream.empty` wraps it with `numpy.frombuffer`: every array viewing the memory holds a
//! reference to this object (through the buffer export or its `base`), so the memory is freed
//! when the last of them is collected, and never before. PyOpenCL's non-blocking copies hold
//! the host array in their event until the copy completes, so a copy in flight also keeps it.
//! A `gather` or `scatter` kernel still queued on mapped memory does not, but both calls keep
//! their kernel's event in the memory's region: the memory is then freed by pinstream's
//! freeing thread once the kernel has run ([`Allocation`]), and the collection that let it
//! go never waits for the kernel (which may wait for a user event the same thread sets next).

use crate::errors::{cl_error, host_error};
use crate::registry::{self, Allocation};
use pinstream::backend::opencl::{Context, OpenCl};
use pinstream::host::{HostApi, HostRegion, PinRequest, Strategy, StrategyChoice};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// Adopts the caller's `cl_context`, given as the integer PyOpenCL's `Context.int_ptr` gives.
///
/// The Python side accepts only a `pyopencl.Context` or an object with `int_ptr` (a documented
/// promise that it is a live `cl_context`), and keeps that object alive during the call.
pub fn adopt_context(py: Python<'_>, raw: usize) -> PyResult<Context> {
    // SAFETY: `raw` is the handle of a context the caller holds for the whole call (see
    // above); `from_raw` retains it, so the result stays valid after the caller lets go.
    unsafe { Context::from_raw(raw as _) }.map_err(|e| cl_error(py, &e))
}

/// True for strategies whose memory is a fresh anonymous mapping, which the OS fills with
/// zeros (`register`, `mlock` and `pageable` map new pages for every region).
fn arrives_zeroed(s: Strategy) -> bool {
    matches!(s, Strategy::Register | Strategy::Mlock | Strategy::Pageable)
}

/// Pinned host memory owned by Python objects, exported as writable bytes.
#[pyclass(frozen, weakref, module = "pinstream._native")]
pub struct PinnedMemory {
    /// `None` only while it is dropped.
    region: Option<Arc<Allocation>>,
    start: usize,
    len: usize,
}

impl PinnedMemory {
    fn adopt(region: HostRegion) -> PyResult<Self> {
        let start = region.as_ptr().ok_or_else(|| {
            PyRuntimeError::new_err("pinstream gave a region in pieces although one contiguous range was asked for (a bug: please report it)")
        })? as usize;
        let len = region.len();
        let end = start.checked_add(len).ok_or_else(|| {
            PyRuntimeError::new_err("pinstream gave a region that runs past the end of the address space (a bug: please report it)")
        })?;
        let region = Arc::new(Allocation::new(region));
        registry::add_allocated(start..end, &region);
        Ok(Self {
            region: Some(region),
            start,
            len,
        })
    }
}

#[pymethods]
impl PinnedMemory {
    /// Exports the memory as one writable run of unsigned bytes.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (buf, len) = (slf.get().start as *mut c_void, slf.get().len as isize);
        // SAFETY: `view` is the buffer struct Python passes to this slot. The memory is
        // `len` live bytes owned by `slf`; PyBuffer_FillInfo stores a new reference to `slf`
        // in the view, so the memory outlives every export of it.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), buf, len, 0, flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(PyErr::fetch(slf.py()))
        }
    }

    /// Bytes.
    fn __len__(&self) -> usize {
        self.len
    }

    /// The first byte's address.
    #[getter]
    fn address(&self) -> usize {
        self.start
    }

    fn __repr__(&self) -> String {
        let strategy = self.region.as_ref().map(|a| a.region().strategy().name());
        format!(
            "<pinstream PinnedMemory {:#x}, {} bytes, {}>",
            self.start,
            self.len,
            strategy.unwrap_or("freed")
        )
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        // Out of the table before the memory goes, so that nothing can find freed memory.
        registry::remove_allocated(self.start);
        // Freeing ends the memory's mapping, a driver call: with the GIL released (a
        // collection drops this with the GIL held). Without an interpreter, here.
        let mut region = self.region.take();
        Python::try_attach(|py| py.detach(|| drop(region.take())));
        drop(region);
    }
}

/// Allocates `nbytes` of pinned memory in the context `context` (a `cl_context` as an
/// integer), as one contiguous range, zero-filled when `zero` is set. With `mapped`, the
/// memory is mapped: kernels read and write it in place through `device_buffer`'s buffer
/// (its mechanism is chosen per driver, so `strategy` must be `auto`).
///
/// Zero bytes (a shape with a 0 in it, as NumPy allows) have nothing to pin: the context and
/// the strategy's name are checked as for any size, and `None` says that no memory was
/// pinned (`pinstream.empty` then gives an ordinary empty NumPy array).
#[pyfunction]
#[pyo3(signature = (context, nbytes, strategy = "auto", zero = false, measure_vram = true, mapped = false))]
pub fn alloc(
    py: Python<'_>,
    context: usize,
    nbytes: usize,
    strategy: &str,
    zero: bool,
    measure_vram: bool,
    mapped: bool,
) -> PyResult<Option<PinnedMemory>> {
    let name = strategy;
    let strategy: StrategyChoice = name
        .parse()
        .map_err(|e: pinstream::host::UnknownStrategy| PyValueError::new_err(e.to_string()))?;
    if mapped && strategy != StrategyChoice::Auto {
        return Err(PyValueError::new_err(format!("strategy=\"{name}\" with mapped=True: mapped memory chooses its mechanism per driver, so pass mapped=True without a strategy")));
    }
    let ctx = adopt_context(py, context)?;
    if nbytes == 0 {
        return Ok(None);
    }
    let request = PinRequest {
        pinning: strategy.forced(),
        contiguous: true,
        measure_vram,
        ..PinRequest::default()
    };
    let region = py
        .detach(|| {
            let mut region = if mapped {
                <OpenCl as HostApi>::mapped(&ctx, nbytes, measure_vram)?
            } else {
                <OpenCl as HostApi>::pin(&ctx, nbytes, request)?
            };
            if zero && !arrives_zeroed(region.strategy()) {
                if let Some(bytes) = region.as_mut_slice() {
                    bytes.fill(0);
                }
            }
            Ok(region)
        })
        .map_err(|e| host_error(py, e))?;
    PinnedMemory::adopt(region).map(Some)
}

/// Collected memory whose `gather` or `scatter` kernels had not run yet, still waiting for
/// pinstream's freeing thread to free it once they have.
#[pyfunction]
pub fn pending_frees() -> usize {
    HostRegion::pending_releases()
}
