//! Error codes, their messages, the thread-local detail of the last failure, and the one
//! panic boundary every `extern "C"` body runs in.

use cl3::error_codes::CL_INVALID_CONTEXT;
use pinstream::backend::api::Api;
use pinstream::backend::error::{BackendError, ErrorKind};
use pinstream::backend::opencl::{ClError, OpenCl};
use pinstream::host::HostError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The result of every pinstream call: `PS_SUCCESS` (0) or one `PS_ERROR_*` code per class of
/// failure. `psGetErrorString` names the class; `psGetLastErrorDetail` says what happened
/// and what to do.
#[allow(non_camel_case_types)]
pub type psError_t = c_int;

/// The call succeeded.
pub const PS_SUCCESS: psError_t = 0;
/// A null pointer, a size of zero, or flags the call does not take; for the `psVkHost*`
/// calls also Vulkan objects that lack what they need (an instance below Vulkan 1.1, a
/// `vkGetInstanceProcAddr` that gives no function they use: the detail names it).
pub const PS_ERROR_INVALID_VALUE: psError_t = 1;
/// The `cl_context` is NULL or not a context the OpenCL library accepts.
pub const PS_ERROR_INVALID_CONTEXT: psError_t = 2;
/// Host memory could not be allocated or pinned (too large for the memory available, out of
/// memory, `RLIMIT_MEMLOCK`, or every strategy failed).
pub const PS_ERROR_MEMORY_ALLOCATION: psError_t = 3;
/// The strategy asked for (flags or `PINSTREAM_STRATEGY`) is not offered by every device of
/// the context, or cannot give one contiguous pointer of that size; or mapped memory
/// (`PS_HOST_ALLOC_MAPPED`) was asked for and the driver has no zero-copy mechanism, or the
/// size exceeds the device's largest buffer (the detail says which).
pub const PS_ERROR_STRATEGY_UNAVAILABLE: psError_t = 4;
/// The range overlaps memory already registered or allocated by pinstream
/// (`cudaErrorHostMemoryAlreadyRegistered`).
pub const PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED: psError_t = 5;
/// The pointer is not the start of a range registered with `psHostRegister`, or (for
/// `psHostGetInfo`) lies in no range pinstream knows (`cudaErrorHostMemoryNotRegistered`).
pub const PS_ERROR_HOST_MEMORY_NOT_REGISTERED: psError_t = 6;
/// `psHostFree` of a pointer `psHostAlloc` did not return, or returned and it was freed since.
pub const PS_ERROR_INVALID_HOST_POINTER: psError_t = 7;
/// The range cannot be pinned by registration: a read-only mapping, a shared mapping of a
/// disk file (the NVIDIA driver accepts both without pinning), or addresses nothing maps.
pub const PS_ERROR_NOT_PINNABLE: psError_t = 8;
/// An OpenCL call failed (the detail names the call and the code), or no OpenCL library
/// could be loaded.
pub const PS_ERROR_OPENCL: psError_t = 9;
/// This operating system cannot tell what kind of memory a range is, so no pin is promised.
pub const PS_ERROR_NOT_SUPPORTED: psError_t = 10;
/// A bug inside pinstream (a Rust panic, caught at the boundary); please report the detail.
pub const PS_ERROR_INTERNAL: psError_t = 11;
/// The buffer's flags forbid the access the call makes (`CL_INVALID_OPERATION`, as
/// `clEnqueueWriteBuffer` / `clEnqueueReadBuffer` return for `CL_MEM_HOST_NO_ACCESS`,
/// `CL_MEM_HOST_READ_ONLY` or `CL_MEM_HOST_WRITE_ONLY`), or a copy kernel may not write
/// (`CL_MEM_READ_ONLY`) or read (`CL_MEM_WRITE_ONLY`) it.
pub const PS_ERROR_INVALID_OPERATION: psError_t = 12;
/// `psHostGetDeviceBuffer` of memory that is not mapped: a block allocated without
/// `PS_HOST_ALLOC_MAPPED`, or a `psHostRegister` range.
pub const PS_ERROR_NOT_MAPPED: psError_t = 13;
/// A Vulkan call of a `psVkHost*` call failed (the detail names the call and its `VkResult`).
pub const PS_ERROR_VULKAN: psError_t = 14;
/// A stream run was stopped by `psStreamCancel` (before it started, or after the blocks it
/// had in flight).
pub const PS_ERROR_CANCELLED: psError_t = 15;
/// The kernel given to a stream cannot run its job: its arguments do not follow the
/// convention for the job (the detail lists what it takes and what the job binds), it belongs
/// to another context, its argument names cannot be read, or it wrote past one of its buffers
/// (the bounds guard saw it).
pub const PS_ERROR_INVALID_KERNEL: psError_t = 16;

/// Every code with its name and class description, in code order.
pub(crate) const MESSAGES: [&CStr; 17] = [
    c"PS_SUCCESS: no error",
    c"PS_ERROR_INVALID_VALUE: a null pointer, a size of zero, or flags the call does not take",
    c"PS_ERROR_INVALID_CONTEXT: the cl_context is NULL or not a valid context",
    c"PS_ERROR_MEMORY_ALLOCATION: host memory could not be allocated or pinned",
    c"PS_ERROR_STRATEGY_UNAVAILABLE: the strategy asked for cannot serve this context or size",
    c"PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED: the range overlaps memory pinstream already pinned",
    c"PS_ERROR_HOST_MEMORY_NOT_REGISTERED: no range registered with psHostRegister is known there",
    c"PS_ERROR_INVALID_HOST_POINTER: not a pointer psHostAlloc returned (or it was freed already)",
    c"PS_ERROR_NOT_PINNABLE: the range cannot be pinned by registration",
    c"PS_ERROR_OPENCL: an OpenCL call failed",
    c"PS_ERROR_NOT_SUPPORTED: this operating system cannot tell what memory the range is",
    c"PS_ERROR_INTERNAL: an internal error in pinstream (please report it)",
    c"PS_ERROR_INVALID_OPERATION: the buffer's flags forbid this access (CL_INVALID_OPERATION)",
    c"PS_ERROR_NOT_MAPPED: the memory is not mapped (allocate it with PS_HOST_ALLOC_MAPPED)",
    c"PS_ERROR_VULKAN: a Vulkan call failed",
    c"PS_ERROR_CANCELLED: the stream run was cancelled by psStreamCancel",
    c"PS_ERROR_INVALID_KERNEL: the kernel cannot run this stream job",
];

/// A failure: its code and the message with the fix.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: psError_t,
    pub detail: String,
}

impl Failure {
    pub fn new(code: psError_t, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }
}

/// The class of a command's failure, by its kind (and, for OpenCL's context, its code): an
/// OpenCL call's, or a Vulkan stream's (`psVkStream*`).
pub(crate) fn cl_code(e: &BackendError) -> psError_t {
    match e.kind() {
        ErrorKind::InvalidObject
            if e.api == OpenCl::NAME && e.code == i64::from(CL_INVALID_CONTEXT) =>
        {
            PS_ERROR_INVALID_CONTEXT
        }
        ErrorKind::OutOfMemory => PS_ERROR_MEMORY_ALLOCATION,
        // A Vulkan stream's command (`psVkStream*`).
        #[cfg(feature = "vulkan")]
        _ if e.api == pinstream::backend::vulkan::Vulkan::NAME => PS_ERROR_VULKAN,
        _ => PS_ERROR_OPENCL,
    }
}

/// True for an OpenCL call's failure (a failure before any call names no call).
fn opencl_call(e: &BackendError) -> bool {
    e.api == OpenCl::NAME && !e.call.is_empty()
}

impl From<ClError> for Failure {
    fn from(e: ClError) -> Self {
        Failure::new(cl_code(&e.clone().into()), e.to_string())
    }
}

/// The fix in the C library's terms, for the library errors whose fix is a call or a flag:
/// the library's own text names none (its fronts differ), so each front adds its spelling.
/// `alloc` is the call that allocates pinned memory instead of registering it
/// (`psHostAlloc`, or `psVkHostAlloc` for the Vulkan calls, which meet only the range
/// checks' errors).
fn c_fix(e: &HostError, alloc: &str) -> Option<String> {
    let fix = match e {
        HostError::Unsupported { .. } => {
            "pass PS_STRATEGY_AUTO (0) in flags, or unset PINSTREAM_STRATEGY"
        }
        HostError::NotPinnable { .. } | HostError::MappingUnknown { .. } => {
            return Some(format!("{alloc} allocates it"))
        }
        HostError::NotMapped { .. } => {
            "allocate it with psHostAlloc(ctx, bytes, PS_HOST_ALLOC_MAPPED, &ptr)"
        }
        HostError::NoZeroCopy { .. } => "psHostAlloc without PS_HOST_ALLOC_MAPPED gives pinned memory for transfers (clEnqueueWriteBuffer from the pointer)",
        HostError::MappedTooLarge { .. } => "call psHostAlloc once per part",
        _ => return None,
    };
    Some(fix.to_string())
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Self {
        Failure::host(e, "psHostAlloc")
    }
}

impl Failure {
    /// The failure for a library error, its fix naming `alloc` where the fix is to allocate
    /// pinned memory instead ([`c_fix`]).
    pub(crate) fn host(e: HostError, alloc: &str) -> Self {
        let code = match &e {
            HostError::ZeroSize
            | HostError::NullPointer
            | HostError::Range { .. }
            | HostError::FaultHook(_) => PS_ERROR_INVALID_VALUE,
            HostError::Unsupported { .. }
            | HostError::NotContiguous { .. }
            | HostError::NoZeroCopy { .. }
            | HostError::MappedTooLarge { .. } => PS_ERROR_STRATEGY_UNAVAILABLE,
            HostError::NotMapped { .. } => PS_ERROR_NOT_MAPPED,
            HostError::Unmapped { .. }
            | HostError::NotPinnable { .. }
            | HostError::PastEndOfFile { .. } => PS_ERROR_NOT_PINNABLE,
            HostError::MappingUnknown { .. } => PS_ERROR_NOT_SUPPORTED,
            HostError::Backend(source) | HostError::Alloc { source, .. } if opencl_call(source) => {
                cl_code(source)
            }
            // A function the platform lacks (before any call).
            HostError::Alloc { source, .. } if source.kind() == ErrorKind::Unsupported => {
                PS_ERROR_STRATEGY_UNAVAILABLE
            }
            _ => PS_ERROR_MEMORY_ALLOCATION,
        };
        let detail = match c_fix(&e, alloc) {
            Some(fix) => format!("{e}: {fix}"),
            None => e.to_string(),
        };
        Failure::new(code, detail)
    }
}

thread_local! {
    static DETAIL: RefCell<CString> = RefCell::new(c"no error".to_owned());
}

/// Stores this thread's detail. After the thread's locals are destroyed (a call from an
/// `atexit` handler or a thread's last destructor) there is nowhere to keep it: it is dropped,
/// and [`last_detail`] says so, instead of panicking across the C boundary.
fn set_detail(text: String) {
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    let _ = DETAIL.try_with(|d| *d.borrow_mut() = text);
}

/// The detail of the last failed call on this thread, valid until this thread's next failing
/// pinstream call.
pub(crate) fn last_detail() -> *const c_char {
    DETAIL
        .try_with(|d| d.borrow().as_ptr())
        .unwrap_or(c"no detail: this thread is exiting (its thread-local storage is gone)".as_ptr())
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// The panic boundary: runs `body`, and on a panic returns what `on_panic` makes of its
/// message instead of unwinding into C.
fn catch<T>(body: impl FnOnce() -> T, on_panic: impl FnOnce(String) -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| on_panic(panic_text(&*payload)))
}

/// Runs the body of an `extern "C"` function that returns no code (`psGetErrorString`):
/// `fallback` on a panic.
pub(crate) fn guard<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch(body, |_| fallback)
}

/// Runs the body of the `extern "C"` function `call`: a failure sets this thread's detail and
/// returns its code; a panic becomes `PS_ERROR_INTERNAL` and never unwinds into C.
pub(crate) fn boundary(call: &str, body: impl FnOnce() -> Result<(), Failure>) -> psError_t {
    let outcome = catch(body, |text| {
        Err(Failure::new(
            PS_ERROR_INTERNAL,
            format!("internal error (a panic inside pinstream: {text}); please report it with this message"),
        ))
    });
    match outcome {
        Ok(()) => PS_SUCCESS,
        Err(f) => {
            set_detail(format!("{call}: {}", f.detail));
            f.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail() -> String {
        // SAFETY: the pointer is this thread's NUL-terminated detail, read before any other call.
        unsafe { CStr::from_ptr(last_detail()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn opencl_failures_are_classed_by_kind() {
        let code = |c| Failure::from(ClError::new("clCreateBuffer", c)).code;
        // CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY.
        for oom in [-4, -5, -6] {
            assert_eq!(code(oom), PS_ERROR_MEMORY_ALLOCATION, "{oom}");
        }
        assert_eq!(code(CL_INVALID_CONTEXT), PS_ERROR_INVALID_CONTEXT);
        // CL_INVALID_MEM_OBJECT (another invalid object), CL_INVALID_VALUE.
        assert_eq!(code(-38), PS_ERROR_OPENCL);
        assert_eq!(code(-30), PS_ERROR_OPENCL);
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        let code = boundary("psTest", || panic!("boom"));
        assert_eq!(code, PS_ERROR_INTERNAL);
        assert!(detail().starts_with("psTest: internal error") && detail().contains("boom"));
    }

    #[test]
    fn failures_set_the_detail_and_success_keeps_it() {
        assert_eq!(boundary("psA", || Err(Failure::new(3, "why and fix"))), 3);
        assert_eq!(detail(), "psA: why and fix");
        assert_eq!(boundary("psB", || Ok(())), PS_SUCCESS);
        assert_eq!(detail(), "psA: why and fix");
    }

    #[test]
    fn host_errors_name_the_c_fix_and_no_other_fronts() {
        let unsupported = Failure::from(HostError::Unsupported {
            pinning: "nv-host".into(),
            device: "0 (cpu)".into(),
            why: "needs cl_nv_create_buffer".into(),
        });
        let not_pinnable = Failure::from(HostError::NotPinnable {
            start: 0x1000,
            end: 0x2000,
            why: "a read-only mapping".into(),
            mapping: "r--p file /x".into(),
        });
        assert_eq!(unsupported.code, PS_ERROR_STRATEGY_UNAVAILABLE);
        assert!(
            unsupported.detail.ends_with(
                "or auto: pass PS_STRATEGY_AUTO (0) in flags, or unset PINSTREAM_STRATEGY"
            ),
            "{}",
            unsupported.detail
        );
        assert!(
            not_pinnable
                .detail
                .ends_with("that you read the data into: psHostAlloc allocates it"),
            "{}",
            not_pinnable.detail
        );
        for d in [&unsupported.detail, &not_pinnable.detail] {
            assert!(
                !d.contains("--strategy") && !d.contains("HostRegion::"),
                "{d}"
            );
        }
    }

    #[test]
    fn every_code_has_a_message_named_for_it() {
        let names = [
            "PS_SUCCESS",
            "PS_ERROR_INVALID_VALUE",
            "PS_ERROR_INVALID_CONTEXT",
            "PS_ERROR_MEMORY_ALLOCATION",
            "PS_ERROR_STRATEGY_UNAVAILABLE",
            "PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
            "PS_ERROR_HOST_MEMORY_NOT_REGISTERED",
            "PS_ERROR_INVALID_HOST_POINTER",
            "PS_ERROR_NOT_PINNABLE",
            "PS_ERROR_OPENCL",
            "PS_ERROR_NOT_SUPPORTED",
            "PS_ERROR_INTERNAL",
            "PS_ERROR_INVALID_OPERATION",
            "PS_ERROR_NOT_MAPPED",
            "PS_ERROR_VULKAN",
            "PS_ERROR_CANCELLED",
            "PS_ERROR_INVALID_KERNEL",
        ];
        for (code, name) in names.iter().enumerate() {
            let m = MESSAGES[code].to_str().unwrap();
            assert!(m.starts_with(&format!("{name}: ")), "{m}");
        }
    }
}
