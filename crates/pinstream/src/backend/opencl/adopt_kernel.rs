//! A caller's kernel adopted for streaming: [`Kernel::from_raw`] makes pinstream's own kernel
//! object of the same function in the same program, so the engine's `clSetKernelArg` calls
//! never change the argument values the caller set on its own `cl_kernel`.

use super::context::Context;
use super::error::{Call, ClError};
use super::program::{text, BuildError, Kernel, Program};
use cl3::types::{cl_kernel, cl_program};

/// Why a caller's kernel cannot be streamed: one variant per condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelRefusal {
    /// An OpenCL call on it failed: NULL, released, or not a kernel.
    Invalid(ClError),
    /// It belongs to another context than the one the stream runs in.
    OtherContext,
    /// The driver keeps no argument names for it (`CL_KERNEL_ARG_INFO_NOT_AVAILABLE`) and its
    /// program has no source to build again with `-cl-kernel-arg-info` (made from a binary or
    /// from IL). The engine binds arguments by name and type, so it needs them.
    NoArgInfo {
        /// The kernel's function name.
        name: String,
    },
    /// The program's source, built again with `-cl-kernel-arg-info` and its own options to
    /// read the argument names, did not build.
    Rebuild {
        /// The kernel's function name.
        name: String,
        /// What the build said.
        error: String,
    },
}

impl std::fmt::Display for KernelRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelRefusal::Invalid(e) => write!(f, "the kernel is not a valid kernel ({e})"),
            KernelRefusal::OtherContext => {
                f.write_str("the kernel belongs to another context than the stream's")
            }
            KernelRefusal::NoArgInfo { name } => write!(
                f,
                "kernel `{name}`: the driver keeps no argument names for it and its program has no source; build the program from source, or with -cl-kernel-arg-info"
            ),
            KernelRefusal::Rebuild { name, error } => write!(
                f,
                "kernel `{name}`: its program's source, built again with -cl-kernel-arg-info to read the argument names, failed: {error}"
            ),
        }
    }
}

impl std::error::Error for KernelRefusal {}

impl From<ClError> for KernelRefusal {
    fn from(e: ClError) -> Self {
        KernelRefusal::Invalid(e)
    }
}

/// `CL_KERNEL_ARG_INFO_NOT_AVAILABLE`.
const ARG_INFO_NOT_AVAILABLE: i32 = -19;

impl Kernel {
    /// pinstream's own kernel object for the caller's kernel `raw`: the same function of the
    /// same program (`clCreateKernel` on `CL_KERNEL_PROGRAM` and `CL_KERNEL_FUNCTION_NAME`),
    /// with its own argument values, so the caller's `raw` is never changed. Where the driver
    /// keeps no argument names for the program, its source is built again with
    /// `-cl-kernel-arg-info` and its own build options.
    ///
    /// # Safety
    /// `raw` must be a valid kernel its owner does not release before this returns.
    pub unsafe fn from_raw(raw: cl_kernel, ctx: &Context) -> Result<Kernel, KernelRefusal> {
        if raw.is_null() {
            return Err(
                ClError::new("clGetKernelInfo", cl3::error_codes::CL_INVALID_KERNEL).into(),
            );
        }
        let info = |param| cl3::kernel::get_kernel_info(raw, param).call("clGetKernelInfo");
        if info(cl3::kernel::CL_KERNEL_CONTEXT)?.to_ptr() != ctx.as_raw() as isize {
            return Err(KernelRefusal::OtherContext);
        }
        let program = info(cl3::kernel::CL_KERNEL_PROGRAM)?.to_ptr() as cl_program;
        let name = String::from(info(cl3::kernel::CL_KERNEL_FUNCTION_NAME)?);
        let name = name.trim_end_matches('\0').to_string();
        // SAFETY: the program of a live kernel lives at least as long as the kernel, which the
        // caller keeps alive until this returns.
        let program = unsafe { Program::retained(program, ctx) }?;
        let own = program.create_kernel(&name)?;
        match own.args() {
            Ok(_) => Ok(own),
            Err(e) if e.code == ARG_INFO_NOT_AVAILABLE => rebuilt(&program, &name, ctx),
            Err(e) => Err(e.into()),
        }
    }
}

/// Kernel `name` of `program`'s source built again in `ctx` with its own options and
/// `-cl-kernel-arg-info` ([`Context::build_program`] adds it).
fn rebuilt(program: &Program, name: &str, ctx: &Context) -> Result<Kernel, KernelRefusal> {
    let source = text(program.info(cl3::program::CL_PROGRAM_SOURCE)?);
    if source.trim().is_empty() {
        return Err(KernelRefusal::NoArgInfo { name: name.into() });
    }
    let options = program.build_options(ctx.device().id.0)?;
    let refusal = |error: String| KernelRefusal::Rebuild {
        name: name.into(),
        error,
    };
    let again = ctx
        .build_program(&source, &options)
        .map_err(|e: BuildError| refusal(e.to_string()))?;
    again.kernel(name).map_err(|e| refusal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::{default_device, devices};

    const SRC: &str =
        "__kernel void twice(__global float* x, ulong n) { x[get_global_id(0)] *= 2.0f; }";

    fn context() -> Option<Context> {
        let all = devices().ok()?;
        Context::new(default_device(&all)?).ok()
    }

    #[test]
    fn an_adopted_kernel_is_its_own_object_of_the_same_function() {
        let Some(ctx) = context() else {
            eprintln!("skipped: no OpenCL device");
            return;
        };
        let kernel = ctx.build_program(SRC, "").unwrap().kernel("twice").unwrap();
        // SAFETY: `kernel` lives across the call.
        let own = unsafe { Kernel::from_raw(kernel.as_raw(), &ctx) }.unwrap();
        assert_eq!(own.name(), "twice");
        assert_ne!(own.as_raw(), kernel.as_raw());
        let names: Vec<String> = own.args().unwrap().into_iter().map(|a| a.name).collect();
        assert_eq!(names, ["x", "n"]);
    }

    #[test]
    fn null_and_other_contexts_are_refused() {
        let (Some(ctx), Some(other)) = (context(), context()) else {
            eprintln!("skipped: no OpenCL device");
            return;
        };
        // SAFETY: NULL is checked before any use.
        let null = unsafe { Kernel::from_raw(std::ptr::null_mut(), &ctx) };
        assert!(matches!(null.err(), Some(KernelRefusal::Invalid(_))));
        let kernel = other
            .build_program(SRC, "")
            .unwrap()
            .kernel("twice")
            .unwrap();
        // SAFETY: `kernel` lives across the call.
        let got = unsafe { Kernel::from_raw(kernel.as_raw(), &ctx) };
        assert_eq!(got.err(), Some(KernelRefusal::OtherContext));
    }
}
