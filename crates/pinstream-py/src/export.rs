//! A buffer export of the caller's object, read as the buffer protocol defines it.
//!
//! pyo3's `PyUntypedBuffer::get` refuses exports without `shape` or `strides`, which the
//! protocol allows: a 0-d NumPy array exports no shape (one item), and ctypes arrays, `bytes`
//! and other simple exporters give no strides (C-contiguous by definition). This type takes
//! every valid export, and reads only what pinstream needs: the byte range, whether it is
//! writable, and whether it is one C-contiguous run (`PyBuffer_IsContiguous`, which applies
//! the protocol's rules for a missing shape or strides, zero bytes and suboffsets).

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ops::Range;

/// A held export of an object's memory (as `PyObject_GetBuffer` with `PyBUF_FULL_RO` gives
/// it), released when dropped. While held, the exporter keeps the memory alive and in place
/// (an exported NumPy array cannot be resized).
pub struct Export {
    // Boxed: the view stays at one address from the export to its release.
    view: Box<ffi::Py_buffer>,
}

// SAFETY: the view's pointers are only read, and the export is released with the interpreter
// attached (`Drop`), whichever thread drops it.
unsafe impl Send for Export {}
// SAFETY: as above; `&Export` gives read access only.
unsafe impl Sync for Export {}

impl Export {
    /// Exports `obj`'s memory; a `BufferError`/`TypeError` from its exporter if it has none.
    pub fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: `obj` is a live object (the GIL is held through `obj`'s token) and `view`
        // a writable, zeroed Py_buffer that stays at its address until released in `Drop`.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, ffi::PyBUF_FULL_RO) };
        if rc != 0 {
            // Nothing was exported, so there is nothing to release.
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Self { view })
    }

    /// The bytes the export covers (empty for zero-size arrays); `name` (the call and its
    /// parameter, `"info: array"`) opens the refusal of an export whose bytes would run past
    /// the end of the address space, which only a false address gives (`ctypes.from_address`).
    pub fn span(&self, name: &str) -> PyResult<Range<usize>> {
        let start = self.view.buf as usize;
        let len = usize::try_from(self.view.len).unwrap_or(0);
        match start.checked_add(len) {
            Some(end) => Ok(start..end),
            None => Err(PyValueError::new_err(format!(
                "{name}: its {len} bytes at {start:#x} run past the end of the address space, so it is no memory at all: pass an array that this process holds"
            ))),
        }
    }

    /// True if the exporter refuses writes.
    pub fn readonly(&self) -> bool {
        self.view.readonly != 0
    }

    /// True if the memory is one C-contiguous run by the protocol's rules (no strides: yes;
    /// zero bytes: yes; suboffsets: no).
    pub fn is_c_contiguous(&self) -> bool {
        // SAFETY: the view is a live export made by `get`.
        unsafe { ffi::PyBuffer_IsContiguous(&*self.view, b'C' as std::ffi::c_char) != 0 }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // After the interpreter has finalized there is nothing left to release to.
        Python::try_attach(|_| {
            // SAFETY: the view was exported by `get` and is released once, here.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) }
        });
    }
}
