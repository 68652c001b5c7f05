//! Programs and kernels: build with the log on failure, argument introspection, launches.

use super::context::{Context, ContextInner, DeviceBuffer, Event, Queue};
use super::error::{Call, ClError};
use cl3::types::{cl_int, cl_kernel, cl_program};
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::Arc;

/// Why a program could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The compiler rejected the source; the log names lines.
    #[error("the OpenCL C compiler rejected the kernel source:\n{log}")]
    Compile {
        /// The build log, as the driver wrote it.
        log: String,
    },
    /// The source is empty or only white space. It never reaches the driver: an empty
    /// string has length 0, which `clCreateProgramWithSource` reads as "NUL-terminated",
    /// and a driver then reads past the end (PoCL 3.1 crashes).
    #[error("the kernel source is empty: it must define at least one `__kernel void NAME(...)`")]
    EmptySource,
    /// The driver refused the build options themselves (`CL_INVALID_BUILD_OPTIONS`, or a
    /// compiler log that names an option), not the source.
    #[error("the OpenCL compiler rejected the build options `{options}`{}: check them (e.g. -DNAME=VALUE, -cl-fast-relaxed-math, -cl-std=CL2.0)", if .log.is_empty() { String::new() } else { format!(":\n{}", .log) })]
    Options {
        /// The options as given.
        options: String,
        /// The compiler's log, where it wrote one.
        log: String,
    },
    /// Another failure.
    #[error(transparent)]
    Cl(#[from] ClError),
}

/// A built program.
pub struct Program {
    raw: cl_program,
    ctx: Arc<ContextInner>,
}

// SAFETY: program objects are thread-safe OpenCL objects (see ContextInner).
unsafe impl Send for Program {}
// SAFETY: as above.
unsafe impl Sync for Program {}

pub(super) fn text(bytes: Vec<u8>) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
        .trim_end()
        .to_string()
}

/// One `clGet*Info` query for text or bytes: `query(size, value, size_ret)` is the call with
/// its object and parameter bound.
///
/// Written here instead of cl3's `get_*_data`, which sizes a `Vec` from the first call,
/// marks it initialised without writing it, and ignores the size the second call returns:
/// where a driver writes fewer bytes than it announced, the rest is uninitialised memory.
/// PoCL 3.1 does that for `CL_PROGRAM_KERNEL_NAMES` of a program with no kernel (it
/// announces 1 byte and writes none), which put garbage bytes into "it defines …". Here the
/// buffer is zeroed and cut to the length the driver reports.
fn info_bytes(
    call: &'static str,
    query: impl Fn(usize, *mut c_void, *mut usize) -> Option<cl_int>,
) -> Result<Vec<u8>, ClError> {
    let status = |s: Option<cl_int>| match s {
        Some(cl3::error_codes::CL_SUCCESS) => Ok(()),
        Some(code) => Err(ClError::new(call, code)),
        None => Err(ClError::new(
            call,
            cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE,
        )),
    };
    let mut size = 0usize;
    status(query(0, ptr::null_mut(), &mut size))?;
    let mut buf = vec![0u8; size];
    let mut written = 0usize;
    if size > 0 {
        status(query(size, buf.as_mut_ptr().cast(), &mut written))?;
        buf.truncate(written.min(size));
    }
    Ok(buf)
}

/// The `cl_uint` at the start of an info result (0 where the driver wrote fewer bytes).
fn first_u32(bytes: &[u8]) -> u32 {
    bytes
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes)
}

/// The `size_t` at the start of an info result, where the driver wrote one.
fn first_usize(bytes: &[u8]) -> Option<usize> {
    bytes
        .get(..std::mem::size_of::<usize>())
        .and_then(|b| b.try_into().ok())
        .map(usize::from_ne_bytes)
}

/// The loaded OpenCL library, or the loader's "not found" error for `call`.
fn runtime(call: &'static str) -> Result<&'static cl3::OpenClRuntime, ClError> {
    cl3::load_library()
        .as_ref()
        .map_err(|_| ClError::new(call, cl3::error_codes::DLOPEN_RUNTIME_LOAD_FAILED))
}

impl Context {
    /// Compiles `source` for this context's device with `options`. Kernel argument names and
    /// types are kept (`-cl-kernel-arg-info`) so arguments can be checked by name.
    pub fn build_program(&self, source: &str, options: &str) -> Result<Program, BuildError> {
        if source.trim().is_empty() {
            return Err(BuildError::EmptySource);
        }
        let raw = cl3::program::create_program_with_source(self.inner.raw, &[source])
            .call("clCreateProgramWithSource")?;
        let program = Program {
            raw,
            ctx: self.inner.clone(),
        };
        let bad_options = |log: String| BuildError::Options {
            options: options.to_string(),
            log,
        };
        let opts = CString::new(format!("-cl-kernel-arg-info {options}"))
            .map_err(|_| bad_options("the options contain a NUL byte".into()))?;
        let dev = self.inner.device.id.0;
        match cl3::program::build_program(raw, &[dev], &opts, None, ptr::null_mut()) {
            Ok(()) => Ok(program),
            Err(cl3::error_codes::CL_INVALID_BUILD_OPTIONS) => Err(bad_options(String::new())),
            Err(cl3::error_codes::CL_BUILD_PROGRAM_FAILURE) => {
                let log = program.build_log(dev);
                if !options.trim().is_empty() && blames_options(&log, options) {
                    Err(bad_options(log))
                } else {
                    Err(BuildError::Compile { log })
                }
            }
            Err(code) => Err(ClError::new("clBuildProgram", code).into()),
        }
    }
}

/// True when a build log is about the command line rather than the source: Clang's driver
/// diagnostics (which PoCL passes on with `CL_BUILD_PROGRAM_FAILURE`), or a log that names
/// one of the given options' flags (NVIDIA: "Error parsing value of -cl-std flag!"). A source
/// error never names a flag as given on the command line (`-cl-std`, `-DNAME`), except as the
/// warning group that made it fatal (Clang: "[-Werror,-Wunused-variable]"), which is no
/// option error.
fn blames_options(log: &str, options: &str) -> bool {
    const OPTION_ERRORS: [&str; 4] = [
        "unknown argument",
        "invalid value",
        "unsupported option",
        "invalid build option",
    ];
    let lower = log.to_ascii_lowercase();
    let names_a_flag = options
        .split_whitespace()
        .filter_map(|o| o.split('=').next())
        .any(|flag| flag.len() > 2 && flag.starts_with('-') && names_flag(log, flag));
    names_a_flag
        || OPTION_ERRORS.iter().any(|e| lower.contains(e))
        || lower.contains("<command line>")
}

/// True when `log` names `flag` other than in a diagnostic's warning group (`[-Werror,...]`).
fn names_flag(log: &str, flag: &str) -> bool {
    log.match_indices(flag)
        .any(|(at, _)| !matches!(log[..at].chars().next_back(), Some('[' | ',')))
}

/// `query` (a call that names or creates the program's kernels) where the program defines
/// `count` kernels, `empty` where it defines none, without calling the driver.
///
/// NVIDIA's OpenCL driver (libnvidia-opencl.so.1, seen with CUDA 13 on an H200) crashes the
/// process with SIGSEGV inside a libc copy when a built program with no `__kernel` function is
/// asked for its kernels (`CL_PROGRAM_KERNEL_NAMES`, or `clCreateKernel` on it), where PoCL
/// answers an empty list and `CL_INVALID_KERNEL_NAME`. `CL_PROGRAM_NUM_KERNELS` is a plain
/// number every driver answers, so it is asked first and an empty program goes no further.
fn unless_empty<T>(count: usize, empty: impl FnOnce() -> T, query: impl FnOnce() -> T) -> T {
    if count == 0 {
        empty()
    } else {
        query()
    }
}

impl Program {
    /// How many kernels the program defines (`CL_PROGRAM_NUM_KERNELS`; 0 where the driver
    /// wrote no count).
    pub fn kernel_count(&self) -> Result<usize, ClError> {
        let count = self.info(cl3::program::CL_PROGRAM_NUM_KERNELS)?;
        Ok(first_usize(&count).unwrap_or(0))
    }

    /// One `clGetProgramInfo` query's bytes.
    pub(super) fn info(&self, param: cl3::types::cl_program_info) -> Result<Vec<u8>, ClError> {
        let rt = runtime("clGetProgramInfo")?;
        info_bytes("clGetProgramInfo", |size, value, ret| {
            rt.clGetProgramInfo(self.raw, param, size, value, ret)
        })
    }

    /// The kernels the program defines (none for a source without `__kernel` functions).
    pub fn kernel_names(&self) -> Vec<String> {
        let count = self.kernel_count().unwrap_or(0);
        unless_empty(count, Vec::new, || self.listed_kernel_names())
    }

    /// `CL_PROGRAM_KERNEL_NAMES`, split. Only for a program with a kernel (see
    /// [`unless_empty`]).
    fn listed_kernel_names(&self) -> Vec<String> {
        self.info(cl3::program::CL_PROGRAM_KERNEL_NAMES)
            .map(text)
            .unwrap_or_default()
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The build log for `device` (empty where the driver gives none).
    pub(super) fn build_log(&self, device: cl3::types::cl_device_id) -> String {
        self.build_info(device, cl3::program::CL_PROGRAM_BUILD_LOG)
            .unwrap_or_default()
    }

    /// The build options this program was built with for `device` (`CL_PROGRAM_BUILD_OPTIONS`).
    pub(super) fn build_options(
        &self,
        device: cl3::types::cl_device_id,
    ) -> Result<String, ClError> {
        self.build_info(device, cl3::program::CL_PROGRAM_BUILD_OPTIONS)
    }

    /// One `clGetProgramBuildInfo` text for `device`.
    fn build_info(
        &self,
        device: cl3::types::cl_device_id,
        param: cl3::types::cl_program_build_info,
    ) -> Result<String, ClError> {
        let rt = runtime("clGetProgramBuildInfo")?;
        info_bytes("clGetProgramBuildInfo", |size, value, ret| {
            rt.clGetProgramBuildInfo(self.raw, device, param, size, value, ret)
        })
        .map(text)
    }

    /// Creates kernel `name`. A program that defines no kernel gets `CL_INVALID_KERNEL_NAME`
    /// without asking the driver (see `unless_empty`).
    pub fn kernel(&self, name: &str) -> Result<Kernel, ClError> {
        let invalid = || {
            Err(ClError::new(
                "clCreateKernel",
                cl3::error_codes::CL_INVALID_KERNEL_NAME,
            ))
        };
        unless_empty(self.kernel_count()?, invalid, || self.create_kernel(name))
    }

    /// `clCreateKernel` of `name`. Only for a program with a kernel (see [`unless_empty`]).
    pub(super) fn create_kernel(&self, name: &str) -> Result<Kernel, ClError> {
        let cname = CString::new(name).map_err(|_| {
            ClError::new("clCreateKernel", cl3::error_codes::CL_INVALID_KERNEL_NAME)
        })?;
        let raw = cl3::kernel::create_kernel(self.raw, &cname).call("clCreateKernel")?;
        Ok(Kernel {
            raw,
            name: name.to_string(),
            bound: Vec::new(),
            had_buffer: Vec::new(),
            values: Vec::new(),
            _ctx: self.ctx.clone(),
        })
    }
}

impl Program {
    /// Another owner of the program `raw` of `ctx` (`clRetainProgram`).
    ///
    /// # Safety
    /// `raw` must be a valid program of `ctx` that its owner does not release before this
    /// returns.
    pub(super) unsafe fn retained(raw: cl_program, ctx: &Context) -> Result<Program, ClError> {
        // SAFETY: `raw` is live (the caller's promise); the reference is released by Drop.
        unsafe { cl3::program::retain_program(raw) }.call("clRetainProgram")?;
        Ok(Program {
            raw,
            ctx: ctx.inner.clone(),
        })
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: we own this program reference.
        if let Err(code) = unsafe { cl3::program::release_program(self.raw) } {
            tracing::warn!("{}", ClError::new("clReleaseProgram", code));
        }
    }
}

pub use crate::backend::api::{AddressSpace, ArgInfo, WorkGroupLimits};

/// A kernel. Setting arguments needs `&mut` (`clSetKernelArg` is not thread-safe on one kernel).
///
/// The kernel keeps a reference to every buffer bound to it (`clSetKernelArg` takes none), so a
/// bound buffer cannot be released before a launch that uses it; enqueued commands hold their
/// own references to the objects they use.
pub struct Kernel {
    raw: cl_kernel,
    name: String,
    bound: Vec<Option<super::context::MemObject>>,
    had_buffer: Vec<bool>,
    /// The value last set for each plain argument, so that setting it again is free.
    values: Vec<Option<Vec<u8>>>,
    _ctx: Arc<ContextInner>,
}

// SAFETY: a kernel may be sent to another thread; argument setting needs &mut, so no two
// threads set arguments of one kernel at once.
unsafe impl Send for Kernel {}

impl Kernel {
    /// The kernel's name in the source.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw `cl_kernel`, borrowed: valid while this `Kernel` lives. You must not release
    /// it, nor set its arguments while pinstream streams with it.
    pub fn as_raw(&self) -> cl_kernel {
        self.raw
    }

    /// The kernel's arguments in order.
    pub fn args(&self) -> Result<Vec<ArgInfo>, ClError> {
        let n = cl3::kernel::get_kernel_data(self.raw, cl3::kernel::CL_KERNEL_NUM_ARGS)
            .call("clGetKernelInfo")?;
        let n = first_u32(&n);
        (0..n).map(|i| self.arg(i)).collect()
    }

    fn arg(&self, i: u32) -> Result<ArgInfo, ClError> {
        let rt = runtime("clGetKernelArgInfo")?;
        let get = |p| {
            info_bytes("clGetKernelArgInfo", |size, value, ret| {
                rt.clGetKernelArgInfo(self.raw, i, p, size, value, ret)
            })
        };
        let q = get(cl3::kernel::CL_KERNEL_ARG_ADDRESS_QUALIFIER)?;
        let q = first_u32(&q);
        let space = match q {
            cl3::kernel::CL_KERNEL_ARG_ADDRESS_GLOBAL => AddressSpace::Global,
            cl3::kernel::CL_KERNEL_ARG_ADDRESS_CONSTANT => AddressSpace::Constant,
            cl3::kernel::CL_KERNEL_ARG_ADDRESS_LOCAL => AddressSpace::Local,
            _ => AddressSpace::Private,
        };
        Ok(ArgInfo {
            name: text(get(cl3::kernel::CL_KERNEL_ARG_NAME)?),
            type_name: text(get(cl3::kernel::CL_KERNEL_ARG_TYPE_NAME)?),
            space,
        })
    }

    /// What a one-dimensional launch of this kernel may use as its work-group size on its
    /// device.
    pub fn work_group_limits(&self) -> Result<WorkGroupLimits, ClError> {
        let dev = self._ctx.device.id.0;
        let kernel = match cl3::kernel::get_kernel_work_group_info(
            self.raw,
            dev,
            cl3::kernel::CL_KERNEL_WORK_GROUP_SIZE,
        )
        .call("clGetKernelWorkGroupInfo")?
        {
            cl3::info_type::InfoType::Size(n) => n,
            _ => usize::MAX,
        };
        let rt = runtime("clGetKernelWorkGroupInfo")?;
        let required = info_bytes("clGetKernelWorkGroupInfo", |size, value, ret| {
            rt.clGetKernelWorkGroupInfo(
                self.raw,
                dev,
                cl3::kernel::CL_KERNEL_COMPILE_WORK_GROUP_SIZE,
                size,
                value,
                ret,
            )
        })?;
        let sizes = info_bytes("clGetDeviceInfo", |size, value, ret| {
            rt.clGetDeviceInfo(
                dev,
                cl3::device::CL_DEVICE_MAX_WORK_ITEM_SIZES,
                size,
                value,
                ret,
            )
        })?;
        Ok(WorkGroupLimits {
            kernel,
            device_dim0: first_usize(&sizes).unwrap_or(usize::MAX),
            required: first_usize(&required).filter(|&n| n > 0),
            names: WorkGroupLimits::OPENCL_NAMES,
        })
    }

    /// Binds buffer `buf` to argument `index`.
    pub fn set_buffer(&mut self, index: u32, buf: &DeviceBuffer) -> Result<(), ClError> {
        let i = index as usize;
        if matches!(self.bound.get(i), Some(Some(m)) if m.raw == buf.mem.raw) {
            return Ok(()); // bound already (the ring sets a slot's buffers once per block)
        }
        // Hold a reference first, so the argument never points at a buffer we do not hold.
        let held = buf.mem.retained()?;
        let mem = buf.mem.raw;
        // SAFETY: the value is a cl_mem of this context; the driver copies it before return.
        unsafe {
            cl3::kernel::set_kernel_arg(
                self.raw,
                index,
                std::mem::size_of_val(&mem),
                (&mem as *const _) as *const c_void,
            )
        }
        .call("clSetKernelArg")?;
        if self.bound.len() <= i {
            self.bound.resize_with(i + 1, || None);
        }
        self.bound[i] = Some(held);
        if self.had_buffer.len() <= i {
            self.had_buffer.resize(i + 1, false);
        }
        self.had_buffer[i] = true;
        Ok(())
    }

    /// Drops the kernel's references to its bound buffers. Until each is bound again, a launch
    /// fails with `CL_INVALID_KERNEL_ARGS` instead of using a released buffer.
    pub fn unbind_buffers(&mut self) {
        self.bound.iter_mut().for_each(|b| *b = None);
    }

    /// Every argument that ever held a buffer holds one now.
    fn check_bound(&self) -> Result<(), ClError> {
        let missing = self
            .had_buffer
            .iter()
            .zip(&self.bound)
            .any(|(had, b)| *had && b.is_none());
        if missing {
            return Err(ClError::new(
                "clEnqueueNDRangeKernel",
                cl3::error_codes::CL_INVALID_KERNEL_ARGS,
            ));
        }
        Ok(())
    }

    /// Binds the plain value `bytes` (its size must match the parameter's type) to `index`.
    pub fn set_bytes(&mut self, index: u32, bytes: &[u8]) -> Result<(), ClError> {
        let i = index as usize;
        if matches!(self.values.get(i), Some(Some(v)) if v == bytes) {
            return Ok(());
        }
        // SAFETY: the driver copies `bytes.len()` bytes before return.
        unsafe { cl3::kernel::set_kernel_arg(self.raw, index, bytes.len(), bytes.as_ptr().cast()) }
            .call("clSetKernelArg")?;
        if self.values.len() <= i {
            self.values.resize_with(i + 1, || None);
        }
        self.values[i] = Some(bytes.to_vec());
        Ok(())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SAFETY: we own this kernel reference.
        if let Err(code) = unsafe { cl3::kernel::release_kernel(self.raw) } {
            tracing::warn!("{}", ClError::new("clReleaseKernel", code));
        }
    }
}

impl Queue {
    /// Launches `kernel` over `global` work items in groups of `local` (or the driver's
    /// choice), after `wait`. The kernel's current argument values are captured now.
    pub fn launch(
        &self,
        kernel: &Kernel,
        global: usize,
        local: Option<usize>,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        kernel.check_bound()?;
        let list = super::context::WaitList::new(wait);
        let local_ptr = local.as_ref().map_or(ptr::null(), |l| l as *const usize);
        // SAFETY: every buffer argument was set by `set_buffer`, which keeps a reference to the
        // buffer in the kernel, so none is released before this call; the enqueued command
        // holds its own references from here on. The work sizes are plain values read now.
        unsafe {
            cl3::command_queue::enqueue_nd_range_kernel(
                self.raw,
                kernel.raw,
                1,
                ptr::null(),
                &global,
                local_ptr,
                list.count(),
                list.as_ptr(),
            )
        }
        .call("clEnqueueNDRangeKernel")
        .map(|raw| self.event(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::{blames_options, unless_empty};

    #[test]
    fn a_program_with_no_kernel_is_never_asked_for_its_kernels() {
        let asked = std::cell::Cell::new(false);
        let ask = || {
            asked.set(true);
            vec!["scale".to_string()]
        };
        assert!(unless_empty(0, Vec::new, ask).is_empty());
        assert!(
            !asked.get(),
            "the driver was asked about a program with no kernel"
        );
        assert_eq!(unless_empty(1, Vec::new, ask), ["scale"]);
        assert!(asked.get());
    }

    #[test]
    fn option_errors_are_told_from_source_errors() {
        let nvidia = "Error parsing value of -cl-std flag!";
        assert!(blames_options(nvidia, "-cl-std=CL9.9"));
        let clang = "error: invalid value 'CL9.9' in '-cl-std=CL9.9'";
        assert!(blames_options(clang, "-cl-std=CL9.9"));
        let source = "<kernel>:3:5: error: use of undeclared identifier 'FACTOR'";
        assert!(!blames_options(source, "-DFACTOR=2"));
        assert!(!blames_options(source, "-cl-std=CL2.0"));
        let fatal = "<kernel>:2:9: error: unused variable 'v' [-Werror,-Wunused-variable]";
        assert!(!blames_options(fatal, "-Werror"));
    }
}
