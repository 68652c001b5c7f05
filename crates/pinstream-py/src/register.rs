//! `register`, `unregister` and `info`: pinning arrays the caller owns in place
//! (`cudaHostRegister`), and what pinstream knows about an array's memory.
//!
//! An array of zero bytes (a shape with a 0 in it) has nothing to pin: `register` checks it
//! as any other and pins nothing, `unregister` of it does nothing, and `info` says so,
//! unless it lies in memory pinstream pins.

use crate::errors::{host_error, AlreadyRegisteredError, NotRegisteredError};
use crate::export::Export;
use crate::memory::adopt_context;
use crate::registry::{self, Held, Refusal, Registration};
use pinstream::backend::opencl::OpenCl;
use pinstream::backend::pinning::CallerRange;
use pinstream::host::{check_pinnable, HostApi, HostRegion, PinState, RegisterRequest, VramCost};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::ops::Range;

/// Refuses what `register` cannot pin: non-contiguous and read-only memory. Memory in a
/// mapping the driver would not pin gets the library's refusal even when it is also read-only.
fn check_layout(py: Python<'_>, export: &Export) -> PyResult<()> {
    let r = export.span("register: array")?;
    if !export.is_c_contiguous() {
        return Err(PyValueError::new_err("the array is not C-contiguous: register pins memory in place, so it needs one contiguous range; register a contiguous array (numpy.ascontiguousarray makes a copy: register the copy and use it)"));
    }
    if export.readonly() {
        if !r.is_empty() {
            check_pinnable(r.start, r.end).map_err(|e| host_error(py, e))?;
        }
        return Err(PyValueError::new_err("the array is read-only (writeable=False): register pins writable memory only; copy the data into an array from pinstream.empty, or register a writable array"));
    }
    Ok(())
}

/// Pins `array` (any C-contiguous, writable object with the buffer protocol) in place in the
/// context `context`. The array stays alive and unresizable until `unregister`.
#[pyfunction]
#[pyo3(signature = (context, array, measure_vram = true))]
pub fn register(
    py: Python<'_>,
    context: usize,
    array: &Bound<'_, PyAny>,
    measure_vram: bool,
) -> PyResult<()> {
    let export = Export::get(array)?;
    check_layout(py, &export)?;
    let r = export.span("register: array")?;
    let ctx = adopt_context(py, context)?;
    if r.is_empty() {
        // Zero bytes: nothing to pin, and nothing to keep alive.
        return Ok(());
    }
    let claim = registry::reserve(r.clone()).map_err(|refusal| refused(REGISTER, &r, refusal))?;
    let request = RegisterRequest {
        measure_vram,
        ..RegisterRequest::default()
    };
    let (ptr, len) = (r.start, r.len());
    let made = py.detach(|| {
        // SAFETY: the export held in `export` keeps the array's memory alive and in place (an
        // exported NumPy array cannot be resized) until the registration made here, which
        // the table stores together with the export and drops first, has been dropped.
        let range = unsafe { CallerRange::new(ptr as *mut u8, len) };
        <OpenCl as HostApi>::register(&ctx, range, request)
    });
    // On failure the claim is dropped, which gives the range up.
    let region = made.map_err(|e| host_error(py, e))?;
    claim.complete(Registration::new(region, export));
    Ok(())
}

/// Unpins an array `register` pinned (found by its first byte), and lets it go.
#[pyfunction]
pub fn unregister(py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
    let r = Export::get(array)?.span("unregister: array")?;
    let taken = match registry::take_registered(r.start) {
        Err(Refusal::NotFound(None)) if r.is_empty() => return Ok(()), // nothing was pinned
        taken => taken.map_err(|e| refused(("unregister", "the array"), &r, e))?,
    };
    // Released here, outside the table's lock, with the GIL released while the driver lets go
    // of the registration; then the array's export, which takes the GIL back to release it.
    py.detach(|| drop(taken));
    Ok(())
}

/// `register`'s call and parameter, as its refusals name them.
const REGISTER: (&str, &str) = ("register", "the array");

/// The bytes a lookup of `r` asks for: at least the first byte, so that a view of zero bytes
/// inside pinned memory is found in it. `None` past the end of the address space.
pub(crate) fn at_least_one_byte(r: &Range<usize>) -> Option<Range<usize>> {
    Some(r.start..r.end.max(r.start.checked_add(1)?))
}

/// What pinstream knows about the memory of `array`, as a dict.
#[pyfunction]
pub fn info<'py>(py: Python<'py>, array: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let r = Export::get(array)?.span("info: array")?;
    let found = at_least_one_byte(&r).ok_or(Refusal::NotFound(None));
    let (held, range) = match found.and_then(registry::find) {
        Err(Refusal::NotFound(None)) if r.is_empty() => return nothing_pinned(py, &r),
        found => found.map_err(|e| refused(("info", "the array"), &r, e))?,
    };
    let d = describe(py, held.region(), &range)?;
    d.set_item("registered", matches!(held, Held::Registered(_)))?;
    d.set_item("array_range", (r.start, r.end))?;
    Ok(d)
}

/// `info` of an array of zero bytes outside pinned memory: nothing is pinned, nor needed.
fn nothing_pinned<'py>(py: Python<'py>, r: &Range<usize>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let why = "zero bytes: nothing to pin";
    for (key, text) in [
        ("strategy", "none"),
        ("reason", why),
        ("pin_state", "not-needed"),
    ] {
        d.set_item(key, text)?;
    }
    d.set_item("basis", why)?;
    d.set_item("vram_cost", 0)?;
    d.set_item("vram_note", why)?;
    for key in ["pinned", "owns_memory", "registered"] {
        d.set_item(key, false)?;
    }
    d.set_item("range", (r.start, r.end))?;
    d.set_item("array_range", (r.start, r.end))?;
    d.set_item("nbytes", 0)?;
    d.set_item("chunks", Vec::<(usize, usize)>::new())?;
    d.set_item("pin_time", 0.0)?;
    d.set_item("mapped", false)?;
    d.set_item("zero_copy", None::<&str>)?;
    Ok(d)
}

/// A region's strategy, pin, VRAM cost, range and chunks.
fn describe<'py>(
    py: Python<'py>,
    region: &HostRegion,
    range: &Range<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("strategy", region.strategy().name())?;
    d.set_item("reason", region.reason())?;
    d.set_item("pinned", region.pin_state().is_pinned())?;
    d.set_item("pin_state", pin_state_name(region.pin_state()))?;
    d.set_item("basis", region.pin_note())?;
    let (bytes, note) = vram(region.vram_cost());
    d.set_item("vram_cost", bytes)?;
    d.set_item("vram_note", note)?;
    d.set_item("owns_memory", region.owns_memory())?;
    d.set_item("range", (range.start, range.end))?;
    d.set_item("nbytes", region.len())?;
    let chunks: Vec<(usize, usize)> = region
        .chunk_ranges()
        .into_iter()
        .map(|c| (c.start, c.end))
        .collect();
    d.set_item("chunks", chunks)?;
    d.set_item("pin_time", region.pin_time().as_secs_f64())?;
    d.set_item("mapped", region.is_mapped())?;
    d.set_item("zero_copy", region.zero_copy().map(|m| m.name()))?;
    Ok(d)
}

fn pin_state_name(p: PinState) -> &'static str {
    match p {
        PinState::Pinned => "pinned",
        PinState::NotPinned => "not-pinned",
        PinState::Unknown => "unknown",
        PinState::NotNeeded => "not-needed",
    }
}

/// The measured VRAM cost in bytes (if measured) and what stands behind it.
fn vram(v: &VramCost) -> (Option<i64>, String) {
    match v {
        VramCost::Measured { bytes, source } => (Some(*bytes), source.clone()),
        VramCost::Unknown { why } => (None, format!("not measurable: {why}")),
        VramCost::NotMeasured => (None, "not measured (measure_vram=False)".into()),
    }
}

/// The exception for a table refusal in the call `op` on its parameter `name` (`"the
/// array"`, `"src"`), whose bytes are `r`.
pub(crate) fn refused((op, name): (&str, &str), r: &Range<usize>, refusal: Refusal) -> PyErr {
    let (start, end) = (r.start, r.end);
    match refusal {
        Refusal::Empty => PyValueError::new_err(format!(
            "{op}: {name} {start:#x}..{end:#x} has no bytes: nothing to pin"
        )),
        Refusal::Overlaps(f, what) => AlreadyRegisteredError::new_err(format!(
            "cannot register {start:#x}..{end:#x}: it overlaps {:#x}..{:#x}, {what}. Unregister that array first (pinstream.unregister), or register only memory pinstream does not pin yet (arrays from pinstream.empty/zeros are pinned already)",
            f.start, f.end
        )),
        Refusal::Allocated(f) => NotRegisteredError::new_err(format!(
            "{op}: {:#x}..{:#x} was allocated by pinstream.empty/zeros, not registered: it is freed when the last array using it is collected (del the arrays); unregister undoes register only",
            f.start, f.end
        )),
        Refusal::NotFound(Some((f, what))) => NotRegisteredError::new_err(format!(
            "{op}: {name} {start:#x}..{end:#x} starts inside {:#x}..{:#x} ({what}) but is not {}: pass the array itself that was registered or allocated",
            f.start,
            f.end,
            if op == "unregister" { "its start" } else { "wholly inside it" }
        )),
        Refusal::NotFound(None) => NotRegisteredError::new_err(format!(
            "{op}: {name} {start:#x}..{end:#x} is not memory pinstream pins: allocate it with pinstream.empty/zeros, or pin it with pinstream.register(ctx, array)"
        )),
    }
}

/// Live allocations, their bytes, and live registrations.
#[pyfunction]
pub fn census() -> (usize, usize, usize) {
    registry::census()
}
