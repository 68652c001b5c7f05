//! The `extern "C"` calls. Each body runs inside [`boundary`]; each raw pointer is checked for
//! null before use and only ever read or written as the header documents.

use crate::error::{
    boundary, guard, last_detail, psError_t, Failure, MESSAGES, PS_ERROR_INVALID_CONTEXT,
    PS_ERROR_INVALID_VALUE,
};
use crate::info::{fill_info, psHostInfo};
use crate::mapped;
use crate::registry::{self, Block, Kind};
use crate::strategy::STRATEGIES;
use crate::types::{
    cl_context, PS_HOST_ALLOC_MAPPED, PS_HOST_ALLOC_STRATEGY_MASK, PS_HOST_REGISTER_DEFAULT,
};
use pinstream::backend::opencl::{Context, OpenCl};
use pinstream::backend::pinning::CallerRange;
use pinstream::host::{HostApi, HostRegion, PinRequest, RegisterRequest, StrategyChoice};
use std::ffi::{c_char, c_uint, c_void};
use std::ops::Range;

/// The strategy `flags` ask for, else `PINSTREAM_STRATEGY`, else auto; with where it came from.
fn choose(flags: c_uint) -> Result<(StrategyChoice, Option<String>), Failure> {
    if flags & !(PS_HOST_ALLOC_STRATEGY_MASK | PS_HOST_ALLOC_MAPPED) != 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("flags {flags:#x} set bits psHostAlloc does not take: pass PS_HOST_ALLOC_DEFAULT (0), one PS_STRATEGY_* value, or PS_HOST_ALLOC_MAPPED"),
        ));
    }
    let code = flags & PS_HOST_ALLOC_STRATEGY_MASK;
    if code != 0 {
        let (c, s) = STRATEGIES.iter().find(|(c, _)| *c as c_uint == code).ok_or_else(|| {
            Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!("flags {flags:#x}: {code} is not a PS_STRATEGY_* value (1 to 7, or 0 for auto)"),
            )
        })?;
        return Ok((
            StrategyChoice::Forced(*s),
            Some(format!("forced by flags {c:?}")),
        ));
    }
    env_strategy(std::env::var_os("PINSTREAM_STRATEGY").as_deref())
}

/// The strategy a `PINSTREAM_STRATEGY` value asks for (unset or blank: auto); a value that is
/// not a strategy's name, or not UTF-8, is an error and never read as auto.
fn env_strategy(
    value: Option<&std::ffi::OsStr>,
) -> Result<(StrategyChoice, Option<String>), Failure> {
    let Some(value) = value else {
        return Ok((StrategyChoice::Auto, None));
    };
    let refuse = |why: String| {
        Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("PINSTREAM_STRATEGY: {why}; or unset it"),
        ))
    };
    let Some(v) = value.to_str() else {
        let shown = value.to_string_lossy();
        return refuse(format!("`{shown}` is not UTF-8: set it to auto, register, nv-host, intel-usm, alloc-host-ptr, svm, mlock or pageable"));
    };
    match v.parse::<StrategyChoice>() {
        _ if v.trim().is_empty() => Ok((StrategyChoice::Auto, None)),
        Ok(StrategyChoice::Auto) => Ok((StrategyChoice::Auto, None)),
        Ok(choice) => Ok((choice, Some(format!("forced by PINSTREAM_STRATEGY={v}")))),
        Err(e) => refuse(e.to_string()),
    }
}

/// The largest registration or chunk `PINSTREAM_MAX_CHUNK` asks for (a size such as `1GiB`),
/// else the library's default: the context's smallest max allocation.
pub(crate) fn max_chunk() -> Result<Option<usize>, Failure> {
    match std::env::var("PINSTREAM_MAX_CHUNK") {
        Ok(v) if !v.trim().is_empty() => match pinstream::units::parse_size(&v) {
            Ok(n) if n >= 4096 => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            Ok(_) => Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!(
                    "PINSTREAM_MAX_CHUNK={v} is below one page: pass at least 4KiB, or unset it"
                ),
            )),
            Err(e) => Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!("PINSTREAM_MAX_CHUNK: {e}; or unset it"),
            )),
        },
        _ => Ok(None),
    }
}

/// Adopts the caller's context for one call (retained until the blocks made in it are freed).
fn adopt(ctx: cl_context) -> Result<Context, Failure> {
    if ctx.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_CONTEXT,
            "the cl_context is NULL: pass the context your program created (clCreateContext)",
        ));
    }
    // SAFETY: the header requires `ctx` to be a valid context the caller holds a reference to.
    unsafe { Context::from_raw(ctx.cast()) }.map_err(Failure::from)
}

/// The addresses of `bytes` at `ptr`, refused where they wrap around the address space.
pub(crate) fn range_of(ptr: *const c_void, bytes: usize) -> Result<Range<usize>, Failure> {
    let start = ptr as usize;
    let end = start.checked_add(bytes).ok_or_else(|| {
        Failure::new(
            PS_ERROR_INVALID_VALUE,
            "ptr + bytes wraps around the address space",
        )
    })?;
    Ok(start..end)
}

pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{what} is NULL"),
        ));
    }
    Ok(())
}

/// Allocates `bytes` of host memory pinned for every device of `ctx`, with no VRAM cost where
/// the driver allows it, as one contiguous range (`cudaHostAlloc` / `cudaMallocHost`).
///
/// `flags`: `PS_HOST_ALLOC_DEFAULT` (0) lets `auto` choose, unless the environment variable
/// `PINSTREAM_STRATEGY` names a strategy; a `PS_STRATEGY_*` value forces one (flags win).
/// `PS_HOST_ALLOC_MAPPED` (alone) makes mapped memory, which kernels read and write in place
/// through the buffer `psHostGetDeviceBuffer` gives (`cudaHostAllocMapped`); it is one
/// buffer, so at most the device's `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
/// The contents are unspecified, as `cudaHostAlloc`'s. On failure `*ptr` is set to NULL.
///
/// The block keeps its own reference to `ctx` until `psHostFree`, so the caller may release
/// its context before freeing. Transfers from and to the memory are the caller's plain OpenCL
/// calls (`clEnqueueWriteBuffer(q, buf, CL_FALSE, off, n, (char *)ptr + o, ...)`).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (ptr NULL, bytes 0, unknown flags or
/// `PINSTREAM_STRATEGY`), `PS_ERROR_INVALID_CONTEXT`, `PS_ERROR_STRATEGY_UNAVAILABLE`,
/// `PS_ERROR_MEMORY_ALLOCATION`, `PS_ERROR_OPENCL`, `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED`
/// (the new memory lies where a `psHostRegister` range was freed without `psHostUnregister`:
/// the detail names it; unregister it, and free memory only after).
///
/// # Safety
/// `ctx` is NULL or a valid context; `ptr` is NULL or points at a writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn psHostAlloc(
    ctx: cl_context,
    bytes: usize,
    flags: c_uint,
    ptr: *mut *mut c_void,
) -> psError_t {
    boundary("psHostAlloc", || {
        non_null(ptr, "ptr (where to store the pointer)")?;
        // SAFETY: `ptr` is non-null and points at a `void *` the caller lets us write.
        unsafe { ptr.write(std::ptr::null_mut()) };
        if bytes == 0 {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                "bytes is 0: ask for at least one byte",
            ));
        }
        let (strategy, forced_by) = choose(flags)?;
        let context = adopt(ctx)?;
        let (region, reason) = if flags & PS_HOST_ALLOC_MAPPED != 0 {
            mapped::alloc(&context, bytes, flags)?
        } else {
            let request = PinRequest {
                pinning: strategy.forced(),
                contiguous: true,
                measure_vram: true,
                max_chunk: max_chunk()?,
                ..PinRequest::default()
            };
            let region = <OpenCl as HostApi>::pin(&context, bytes, request)?;
            let reason = forced_by.unwrap_or_else(|| region.reason().to_string());
            (region, reason)
        };
        let devices = context.devices().len();
        let start = registry::insert(block(region, Kind::Allocated, None, reason, devices))?;
        // SAFETY: as above.
        unsafe { ptr.write(start as *mut c_void) };
        Ok(())
    })
}

/// The registry's block of `region`, pinned as `kind` for a context of `devices` devices
/// (`note`: why this strategy), over the caller's `range` (for an allocation: the region's).
fn block(
    region: HostRegion,
    kind: Kind,
    range: Option<Range<usize>>,
    note: String,
    devices: usize,
) -> Block<HostRegion> {
    let start = region.as_ptr().map_or(0, |p| p as usize);
    Block {
        range: range.unwrap_or(start..start + region.len()),
        host: region,
        kind,
        note,
        devices,
        guests: Default::default(),
    }
}

/// Frees memory from `psHostAlloc` (`cudaFreeHost`): releases its pinning and unmaps it.
///
/// The caller owes: no transfer that reads or writes the block may still be in flight (wait
/// for its events or `clFinish` its queues first), as CUDA requires for `cudaFreeHost`.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_INVALID_HOST_POINTER` (not a pointer
/// `psHostAlloc` returned, freed twice, or a `psHostRegister` range).
#[no_mangle]
pub extern "C" fn psHostFree(ptr: *mut c_void) -> psError_t {
    boundary("psHostFree", || {
        non_null(ptr, "ptr")?;
        drop(registry::remove::<HostRegion>(
            ptr as usize,
            Kind::Allocated,
        )?);
        Ok(())
    })
}

/// Pins `bytes` of memory the program already has at `ptr`, for every device of `ctx`
/// (`cudaHostRegister`): `malloc`'d at any alignment, `mmap`'d, or part of a larger
/// allocation. The memory's content is not changed. Underneath: one never-mapped
/// `CL_MEM_USE_HOST_PTR` buffer covers the range where the devices' max allocation allows,
/// else several (`psHostGetInfo` gives their layout: `first_chunk_bytes`, `chunk_bytes`). The NVIDIA driver runs a transfer that crosses
/// two registrations at pageable speed: split transfers at the chunk boundaries.
/// `PINSTREAM_MAX_CHUNK` (a size, e.g. `1GiB`) lowers the largest registration, here and in
/// `psHostAlloc`.
///
/// Ranges the NVIDIA driver would accept without pinning are refused on every driver with
/// `PS_ERROR_NOT_PINNABLE`: read-only mappings and shared mappings of disk files (map the file
/// `PROT_READ|PROT_WRITE` and `MAP_PRIVATE`, or `psHostAlloc` and read into it), and
/// addresses nothing maps. `flags` must be `PS_HOST_REGISTER_DEFAULT` (0).
///
/// Pages never written yet (fresh `malloc`/`mmap` memory) are faulted in writable before
/// registration, without changing their content, so that the driver pins real pages.
///
/// The caller owes: the memory stays allocated until `psHostUnregister`; no transfer may be
/// in flight from or to it at `psHostUnregister`.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (ptr NULL, bytes 0, flags not 0),
/// `PS_ERROR_INVALID_CONTEXT`, `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (overlaps a range
/// pinstream pinned), `PS_ERROR_NOT_PINNABLE`, `PS_ERROR_NOT_SUPPORTED`, `PS_ERROR_OPENCL`,
/// `PS_ERROR_MEMORY_ALLOCATION`.
///
/// # Safety
/// `ctx` is NULL or a valid context; `ptr..ptr+bytes` stays allocated until
/// `psHostUnregister` (the range itself is checked: unmapped parts are refused).
#[no_mangle]
pub unsafe extern "C" fn psHostRegister(
    ctx: cl_context,
    ptr: *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> psError_t {
    boundary("psHostRegister", || {
        non_null(ptr, "ptr")?;
        if bytes == 0 {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                "bytes is 0: register at least one byte",
            ));
        }
        if flags != PS_HOST_REGISTER_DEFAULT {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!("flags {flags:#x}: psHostRegister takes PS_HOST_REGISTER_DEFAULT (0) only; OpenCL memory is per context, so CUDA's portable and mapped flags have no meaning here"),
            ));
        }
        let Range { start, end } = range_of(ptr, bytes)?;
        let context = adopt(ctx)?;
        let request = RegisterRequest {
            measure_vram: true,
            max_chunk: max_chunk()?,
        };
        let reservation = registry::reserve(start..end)?;
        // SAFETY: the header makes the caller keep the memory allocated until psHostUnregister,
        // which drops the region first.
        let range = unsafe { CallerRange::new(ptr.cast(), bytes) };
        match <OpenCl as HostApi>::register(&context, range, request) {
            Ok(region) => {
                let reason = region.reason().to_string();
                let devices = context.devices().len();
                reservation.complete(block(
                    region,
                    Kind::Registered,
                    Some(start..end),
                    reason,
                    devices,
                ));
                Ok(())
            }
            // The reservation, dropped unfinished, gives the range back.
            Err(e) => Err(e.into()),
        }
    })
}

/// Unpins a range registered with `psHostRegister` (`cudaHostUnregister`); `ptr` is the
/// pointer given to `psHostRegister`. The memory stays the caller's and is not touched.
///
/// The caller owes: no transfer from or to the range may still be in flight.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (not a
/// registered range's start, unregistered twice, or memory from `psHostAlloc`).
#[no_mangle]
pub extern "C" fn psHostUnregister(ptr: *mut c_void) -> psError_t {
    boundary("psHostUnregister", || {
        non_null(ptr, "ptr")?;
        drop(registry::remove::<HostRegion>(
            ptr as usize,
            Kind::Registered,
        )?);
        Ok(())
    })
}

/// Describes the range that contains `ptr` (any address inside a block from `psHostAlloc` or
/// a range from `psHostRegister`): strategy, whether it is pinned, the range, its chunks, and
/// its VRAM cost as measured when it was pinned (or why that is unknown).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`
/// (no range pinstream pinned contains `ptr`).
///
/// # Safety
/// `info` is NULL or points at a writable `psHostInfo`.
#[no_mangle]
pub unsafe extern "C" fn psHostGetInfo(ptr: *const c_void, info: *mut psHostInfo) -> psError_t {
    boundary("psHostGetInfo", || {
        non_null(ptr, "ptr")?;
        non_null(info, "info")?;
        let filled = registry::with_block(ptr as usize, fill_info)?;
        // SAFETY: `info` is non-null and points at a psHostInfo the caller lets us write.
        unsafe { info.write(filled) };
        Ok(())
    })
}

/// The name and class of an error code, e.g. `"PS_ERROR_NOT_PINNABLE: the range cannot be
/// pinned by registration"` (`cudaGetErrorString`). Never NULL; the string is static.
#[no_mangle]
pub extern "C" fn psGetErrorString(error: psError_t) -> *const c_char {
    let unknown = c"unrecognized pinstream error code".as_ptr();
    guard(unknown, || {
        usize::try_from(error)
            .ok()
            .and_then(|i| MESSAGES.get(i))
            .map_or(unknown, |m| m.as_ptr())
    })
}

/// What went wrong in the last call on this thread that returned an error, and what to do:
/// the same message the library and the CLI give, prefixed by the call's name. "no error"
/// before any failure. Never NULL; valid until this thread's next failing pinstream call.
#[no_mangle]
pub extern "C" fn psGetLastErrorDetail() -> *const c_char {
    guard(
        c"internal error: the detail could not be read".as_ptr(),
        last_detail,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategy_from_the_environment() {
        use std::ffi::OsStr;
        assert_eq!(env_strategy(None).unwrap().0, StrategyChoice::Auto);
        assert_eq!(
            env_strategy(Some(OsStr::new(" "))).unwrap().0,
            StrategyChoice::Auto
        );
        let (c, why) = env_strategy(Some(OsStr::new("mlock"))).unwrap();
        assert_eq!(c, StrategyChoice::Forced(pinstream::host::Strategy::Mlock));
        assert!(why.unwrap().contains("PINSTREAM_STRATEGY=mlock"));
        assert!(env_strategy(Some(OsStr::new("bogus"))).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let Err(f) = env_strategy(Some(OsStr::from_bytes(b"ml\xffock"))) else {
                panic!("a non-UTF-8 value was read as a strategy");
            };
            let d = f.detail;
            assert!(d.contains("not UTF-8") && d.contains("register"), "{d}");
        }
    }
}
