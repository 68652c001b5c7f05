//! The calls that describe a stream's job: its kernel, its data and its scalars. Each
//! changes the job later runs take; runs already issued keep theirs.

use super::handle::{JobSpec, StreamKernel};
use super::host::span;
use super::report::dtype;
use super::{psStream_t, stream};
use crate::api::non_null;
use crate::error::{boundary, psError_t, Failure, PS_ERROR_INVALID_KERNEL, PS_ERROR_INVALID_VALUE};
use crate::types::cl_kernel;
use pinstream::backend::fault::FaultyKernel;
use pinstream::backend::opencl::{Kernel, KernelRefusal};
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::{Arc, Mutex};

/// Changes the job of `handle` with `f`.
fn edit(
    handle: psStream_t,
    f: impl FnOnce(&mut JobSpec) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let s = stream(handle)?;
    let mut job = s.job();
    f(&mut job)
}

/// Sets the kernel the stream runs: the caller's `kernel`, of the stream's context, following
/// the convention `psStreamCreate` describes. The stream makes its own kernel object of the
/// same function (`clCreateKernel` on the kernel's program), so the argument values set on
/// `kernel` are never changed, and the caller may release `kernel` after this call. Where the
/// driver keeps no argument names, the program's source is built again with
/// `-cl-kernel-arg-info`. Whether its arguments fit the job is checked when a run starts.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, a stream of `psVkStreamCreate`: use
/// `psVkStreamSetKernel`), `PS_ERROR_INVALID_KERNEL` (NULL or not a kernel, of another
/// context, no argument names to be had).
///
/// # Safety
/// `kernel` is NULL or a valid kernel.
#[no_mangle]
pub unsafe extern "C" fn psStreamSetKernel(stream: psStream_t, kernel: cl_kernel) -> psError_t {
    boundary("psStreamSetKernel", || {
        let s = super::stream(stream)?;
        let ctx = s.cl_context(
            "psStreamSetKernel takes a cl_kernel, for a stream of psStreamCreate: give a stream of psVkStreamCreate its WGSL kernel with psVkStreamSetKernel",
        )?;
        if kernel.is_null() {
            return Err(Failure::new(
                PS_ERROR_INVALID_KERNEL,
                "the kernel is NULL: pass the cl_kernel to stream (clCreateKernel)",
            ));
        }
        // SAFETY: the header requires a valid kernel; from_raw checks its context.
        let own = unsafe { Kernel::from_raw(kernel.cast(), ctx) }.map_err(|e| {
            let fix = match e {
                KernelRefusal::OtherContext => ": pass a kernel built in the stream's context",
                _ => "",
            };
            Failure::new(PS_ERROR_INVALID_KERNEL, format!("{e}{fix}"))
        })?;
        s.job().kernel = Some(StreamKernel::OpenCl(Arc::new(Mutex::new(
            FaultyKernel::new(own),
        ))));
        Ok(())
    })
}

/// Sets the element types (`psDType` values): `input` of every input and the in-place
/// range, `output` of the output (ignored in place). Both `PS_DTYPE_F32` until set. The
/// kernel's buffer arguments must be pointers to them, and the block size a multiple of the
/// input element's size.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, not a `psDType` value).
#[no_mangle]
pub extern "C" fn psStreamSetTypes(stream: psStream_t, input: c_uint, output: c_uint) -> psError_t {
    boundary("psStreamSetTypes", || {
        let (i, o) = (dtype(input, "input")?, dtype(output, "output")?);
        edit(stream, |job| {
            job.dtype = i;
            job.out_dtype = o;
            Ok(())
        })
    })
}

/// Makes the job in place (`cudaMemcpyAsync` both ways through one kernel): `bytes` at
/// `ptr` are uploaded block by block, run through the kernel and written back. The range must
/// lie inside memory from `psHostAlloc` or `psHostRegister` (a stream of `psVkStreamCreate`:
/// `psVkHostAlloc` or `psVkHostRegister`), and share no byte with a resident (both checked
/// when a run is issued). Clears the inputs and the output.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
#[no_mangle]
pub extern "C" fn psStreamSetInPlace(
    stream: psStream_t,
    ptr: *mut c_void,
    bytes: usize,
) -> psError_t {
    boundary("psStreamSetInPlace", || {
        let range = span(ptr, bytes, "the in-place range")?;
        edit(stream, |job| {
            job.in_place = Some(range);
            job.inputs.clear();
            job.output = None;
            Ok(())
        })
    })
}

/// Adds a streamed input of `bytes` at `ptr` (read only), bound in the order added; every
/// input has the same size. For an out-of-place job, with `psStreamSetOutput`. Clears an
/// in-place range.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
#[no_mangle]
pub extern "C" fn psStreamAddInput(
    stream: psStream_t,
    ptr: *const c_void,
    bytes: usize,
) -> psError_t {
    boundary("psStreamAddInput", || {
        let range = span(ptr, bytes, "the input")?;
        edit(stream, |job| {
            job.in_place = None;
            job.inputs.push(range);
            Ok(())
        })
    })
}

/// Sets the output of an out-of-place job: `bytes` at `ptr`, written block by block.
/// `inputs_per_output` (at least 1): input elements per output element (k to 1, e.g. 4 for
/// a sum of every 4 values); the output then holds ceil(input elements / k) elements of the
/// output type. The kernel is still launched with one work item per input element. The
/// output may share no byte with an input or a resident (checked when a run is issued).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around,
/// inputs_per_output 0).
#[no_mangle]
pub extern "C" fn psStreamSetOutput(
    stream: psStream_t,
    ptr: *mut c_void,
    bytes: usize,
    inputs_per_output: usize,
) -> psError_t {
    boundary("psStreamSetOutput", || {
        let range = span(ptr, bytes, "the output")?;
        if inputs_per_output == 0 {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                "inputs_per_output is 0: pass 1 for one output element per input element",
            ));
        }
        edit(stream, |job| {
            job.in_place = None;
            job.output = Some(range);
            job.in_per_out = inputs_per_output;
            Ok(())
        })
    })
}

/// Adds a resident argument: `bytes` at `ptr` uploaded once per run and kept in device
/// memory for every block (inside the budget), bound after the output in the order added
/// (the `x` of `y = W·x` while `W` streams).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, ptr NULL, bytes 0, wraps around).
#[no_mangle]
pub extern "C" fn psStreamAddResident(
    stream: psStream_t,
    ptr: *const c_void,
    bytes: usize,
) -> psError_t {
    boundary("psStreamAddResident", || {
        let range = span(ptr, bytes, "the resident")?;
        edit(stream, |job| {
            job.residents.push(range);
            Ok(())
        })
    })
}

/// Sets the kernel's scalar argument `name` to `value` (text, typed by the kernel: `"2.5"`,
/// `"-3"`, `"0x10"`), as the CLI's `--arg NAME=VALUE`; setting a name again replaces it.
/// An integer set by name is a scalar, not a count.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, NULL, an empty name or one with `=`,
/// not UTF-8).
///
/// # Safety
/// `name` and `value` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn psStreamSetArg(
    stream: psStream_t,
    name: *const c_char,
    value: *const c_char,
) -> psError_t {
    boundary("psStreamSetArg", || {
        non_null(name, "name")?;
        non_null(value, "value")?;
        // SAFETY: non-null NUL-terminated strings (the caller's promise).
        let (n, v) = unsafe { (CStr::from_ptr(name), CStr::from_ptr(value)) };
        let text = |c: &CStr, what: &str| {
            c.to_str().map(str::to_owned).map_err(|_| {
                Failure::new(PS_ERROR_INVALID_VALUE, format!("the {what} is not UTF-8"))
            })
        };
        let (n, v) = (text(n, "name")?, text(v, "value")?);
        if n.trim().is_empty() || n.contains('=') {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!("`{n}` is not an argument name: pass the kernel parameter's name"),
            ));
        }
        edit(stream, |job| {
            job.args.retain(|(k, _)| *k != n);
            job.args.push((n, v));
            Ok(())
        })
    })
}

/// Forgets the job's data, residents, scalars and types (the kernel stays), to describe
/// another job on the same stream.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream).
#[no_mangle]
pub extern "C" fn psStreamResetJob(stream: psStream_t) -> psError_t {
    boundary("psStreamResetJob", || {
        edit(stream, |job| {
            let kernel = job.kernel.take();
            *job = JobSpec {
                kernel,
                ..JobSpec::default()
            };
            Ok(())
        })
    })
}
