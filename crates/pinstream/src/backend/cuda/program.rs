//! CUDA C compiled with NVRTC and loaded as a module: [`CudaProgram`], and its kernels
//! ([`CudaKernel`]) with the parameters read from the source ([`super::signature`]).

use super::signature::{kernels, Param, Signature};
use super::{CudaError, Gpu, Result};
use crate::backend::api::{ArgInfo, WorkGroupLimits};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
use std::sync::Arc;

/// A compiled and loaded CUDA C source.
pub struct CudaProgram {
    module: Arc<cudarc::driver::CudaModule>,
    signatures: Vec<Signature>,
    gpu: Gpu,
}

/// A kernel of a [`CudaProgram`], with its parameters.
pub struct CudaKernel {
    pub(crate) function: cudarc::driver::CudaFunction,
    pub(crate) name: String,
    pub(crate) params: Vec<Param>,
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
    pub(crate) max_threads: u32,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X` of its device.
    pub(crate) max_block_x: u32,
    pub(crate) gpu: Gpu,
}

impl Gpu {
    /// Compiles `source` with NVRTC (`options`: NVRTC options separated by spaces, e.g.
    /// `-DN=4 --use_fast_math`) and loads it on this device.
    pub fn build(&self, source: &str, options: &str) -> Result<CudaProgram> {
        if source.trim().is_empty() {
            return Err(CudaError::Compile {
                log: "the source is empty".into(),
            });
        }
        if source.contains('\0') || options.contains('\0') {
            return Err(CudaError::Compile {
                log: "the source or the options contain a NUL byte".into(),
            });
        }
        self.bind()?;
        let opts = CompileOptions {
            options: options.split_whitespace().map(str::to_string).collect(),
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(source, opts).map_err(compile_error)?;
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(CudaError::driver("cuModuleLoadData"))?;
        Ok(CudaProgram {
            module,
            signatures: kernels(source),
            gpu: self.clone(),
        })
    }
}

fn compile_error(e: CompileError) -> CudaError {
    let log = match e {
        CompileError::CompileError { log, .. } => log.to_string_lossy().trim_end().to_string(),
        other => format!("{other:?}"),
    };
    CudaError::Compile { log }
}

impl CudaProgram {
    /// The `__global__` functions the source declares.
    pub fn kernel_names(&self) -> Vec<String> {
        self.signatures.iter().map(|s| s.name.clone()).collect()
    }

    /// The kernel `name`, which the source must declare `extern "C"` (so its symbol is its
    /// name) with a signature pinstream can read.
    pub fn kernel(&self, name: &str) -> Result<CudaKernel> {
        let sig = self
            .signatures
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| CudaError::NoKernel { name: name.into() })?;
        if !sig.extern_c {
            return Err(CudaError::Signature {
                kernel: name.into(),
                why: "it is not declared extern \"C\", so its symbol is not its name: write `extern \"C\" __global__ void ...`".into(),
            });
        }
        self.gpu.bind()?;
        let function = self
            .module
            .load_function(name)
            .map_err(CudaError::driver("cuModuleGetFunction"))?;
        use cudarc::driver::sys::CUfunction_attribute as F;
        // SAFETY: a live function of a loaded module, the context bound.
        let max_threads = unsafe {
            cudarc::driver::result::function::get_function_attribute(
                function.cu_function(),
                F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            )
        }
        .map_err(CudaError::driver("cuFuncGetAttribute"))?;
        let max_block_x = self
            .gpu
            .ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)
            .map_err(CudaError::driver("cuDeviceGetAttribute"))?;
        Ok(CudaKernel {
            function,
            name: name.into(),
            params: sig.params.clone(),
            max_threads: max_threads.max(1) as u32,
            max_block_x: max_block_x.max(1) as u32,
            gpu: self.gpu.clone(),
        })
    }
}

impl CudaKernel {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its parameters, as the source declares them.
    pub fn params(&self) -> Vec<ArgInfo> {
        self.params.iter().map(|p| p.info.clone()).collect()
    }

    /// The thread-block sizes a one-dimensional launch may use (CUDA has no required size).
    pub fn work_group_limits(&self) -> WorkGroupLimits {
        WorkGroupLimits {
            kernel: self.max_threads as usize,
            device_dim0: self.max_block_x as usize,
            required: None,
            names: WorkGroupLimits::CUDA_NAMES,
        }
    }
}
