//! CUDA as an [`Api`]: a [`Gpu`] (primary context) is the device, a [`Stream`] the queue, a
//! [`DeviceMem`] the memory, a [`Timed`] event pair the point in a queue.

use super::{
    devices, CudaDeviceInfo, CudaError, CudaKernel, CudaProgram, DeviceMem, Gpu, HostSpan, Stream,
    Timed,
};
use crate::backend::adapter::{AdapterInfo, DeviceKind, Vendor};
use crate::backend::api::{
    self, Api, ArgInfo, KernelArg, KernelError, LaunchSize, Profile, Unavailable, WorkGroupLimits,
};
use crate::backend::error::{BackendError, ErrorKind};
use crate::backend::fault::{Operation, OutOfResources};
use cudarc::driver::result;
use std::ffi::c_void;

/// The CUDA driver API (with NVRTC for kernels).
#[derive(Debug, Clone, Copy)]
pub struct Cuda;

/// Threads per block when the caller leaves the group size to the driver.
const DEFAULT_BLOCK: usize = 256;

/// CUDA loaded in this process: its devices, as listed when it was made.
#[derive(Debug, Clone)]
pub struct CudaInstance {
    devices: Vec<CudaDeviceInfo>,
}

impl Api for Cuda {
    const NAME: &'static str = "CUDA";
    const ID: &'static str = "cuda";
    const KERNEL_FORM: &'static str = "extern \"C\" __global__ void NAME(...)";
    const LANGUAGE: crate::backend::api::KernelLanguage =
        crate::backend::api::KernelLanguage::CudaC;
    type Instance = CudaInstance;
    type Adapter = CudaDeviceInfo;
    type Program = CudaProgram;
    type Device = Gpu;
    type Queue = Stream;
    type Buffer = DeviceMem;
    type Event = Timed;
    type Kernel = CudaKernel;
    type Error = CudaError;
}

impl OutOfResources for CudaError {
    /// `CUDA_ERROR_OUT_OF_MEMORY` from the call that makes the command, or
    /// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` for a launch.
    fn out_of_resources(op: Operation) -> CudaError {
        let (call, code, name, text) = match op {
            Operation::Allocate => ("cuMemAlloc", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
            Operation::Upload => (
                "cuMemcpyHtoDAsync",
                2,
                "CUDA_ERROR_OUT_OF_MEMORY",
                "out of memory",
            ),
            Operation::Launch => (
                "cuLaunchKernel",
                701,
                "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                "too many resources requested for launch",
            ),
            Operation::Download => (
                "cuMemcpyDtoHAsync",
                2,
                "CUDA_ERROR_OUT_OF_MEMORY",
                "out of memory",
            ),
        };
        CudaError::Driver {
            call,
            code,
            name: name.into(),
            text: text.into(),
        }
    }
}

/// The class of a CUDA failure: a driver call's by its `CUresult`; host memory that could
/// not be mapped is out of memory; no usable driver is unsupported.
fn cuda_kind(e: &CudaError) -> ErrorKind {
    match e {
        CudaError::Driver { code, .. } => ErrorKind::of_cuda(i64::from(*code)),
        CudaError::Map { source, .. } if source.kind() == std::io::ErrorKind::OutOfMemory => {
            ErrorKind::OutOfMemory
        }
        CudaError::Unavailable(_) => ErrorKind::Unsupported,
        _ => ErrorKind::Other,
    }
}

impl From<CudaError> for BackendError {
    fn from(e: CudaError) -> Self {
        let kind = cuda_kind(&e);
        let (call, code, message) = match e {
            CudaError::Driver {
                call,
                code,
                name,
                text,
            } => (call, i64::from(code), format!("{name} ({text})")),
            CudaError::Compile { log } => (
                "nvrtcCompileProgram",
                0,
                format!("the kernel source did not compile:\n{log}"),
            ),
            CudaError::Map { bytes, source } => (
                "mmap",
                i64::from(source.raw_os_error().unwrap_or(0)),
                format!("{bytes} bytes: {source}"),
            ),
            e @ (CudaError::Unavailable(_)
            | CudaError::NoKernel { .. }
            | CudaError::Signature { .. }) => ("", 0, e.to_string()),
        };
        BackendError {
            api: Cuda::NAME,
            call,
            code,
            message,
            kind,
        }
    }
}

impl api::Instance for CudaInstance {
    type A = Cuda;

    fn new() -> Result<Self, Unavailable> {
        let devices = devices().map_err(|e| Unavailable {
            api: Cuda::NAME,
            reason: match e {
                CudaError::Unavailable(why) => why,
                e => e.to_string(),
            },
        })?;
        Ok(CudaInstance { devices })
    }

    fn adapters(&self) -> Result<Vec<CudaDeviceInfo>, Unavailable> {
        Ok(self.devices.clone())
    }
}

impl api::Adapter for CudaDeviceInfo {
    type A = Cuda;

    fn info(&self) -> AdapterInfo {
        AdapterInfo {
            api: Cuda::NAME,
            index: self.ordinal,
            name: self.name.clone(),
            driver: format!("CUDA {}", super::version(self.driver_version)),
            pci_address: Some(self.pci_address.clone()),
            memory: self.total_mem,
            max_alloc: self.total_mem,
            kind: DeviceKind::Gpu,
            vendor: Vendor::Nvidia,
        }
    }

    fn open(&self) -> Result<Gpu, CudaError> {
        Gpu::open(self.ordinal)
    }
}

impl From<CudaError> for api::BuildError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Compile { log } => {
                api::BuildError::Source(CudaError::Compile { log }.to_string())
            }
            e => api::BuildError::Backend(e.into()),
        }
    }
}

impl api::Program for CudaProgram {
    type A = Cuda;

    fn kernel_names(&self) -> Vec<String> {
        CudaProgram::kernel_names(self)
    }

    fn kernel(&self, name: &str) -> Result<CudaKernel, KernelError> {
        CudaProgram::kernel(self, name).map_err(|e| match e {
            CudaError::NoKernel { name } => KernelError::NotDefined { name },
            e @ CudaError::Signature { .. } => KernelError::Signature(e.to_string()),
            e => KernelError::Backend(e.into()),
        })
    }
}

impl api::Device for Gpu {
    type A = Cuda;

    fn info(&self) -> AdapterInfo {
        api::Adapter::info(Gpu::info(self))
    }

    fn build(&self, source: &str, options: &str) -> Result<CudaProgram, api::BuildError> {
        Gpu::build(self, source, options).map_err(Into::into)
    }

    fn queue(&self) -> Result<Stream, CudaError> {
        self.stream()
    }

    fn allocate(&self, bytes: usize) -> Result<DeviceMem, CudaError> {
        self.alloc(bytes)
    }

    fn buffer_len(&self, buffer: &DeviceMem) -> usize {
        buffer.len()
    }

    fn wait(&self, event: &Timed) -> Result<(), CudaError> {
        event.wait()
    }

    fn profile(&self, event: &Timed, origin: &Timed) -> Result<Profile, CudaError> {
        event.profile(origin)
    }
}

impl api::Queue for Stream {
    type A = Cuda;

    unsafe fn upload(
        &self,
        dst: &DeviceMem,
        dst_offset: usize,
        src: HostSpan,
        wait: &[&Timed],
    ) -> Result<Timed, CudaError> {
        // SAFETY: the caller's contract is this method's.
        unsafe { Stream::upload(self, dst, dst_offset, src, wait) }
    }

    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &DeviceMem,
        src_offset: usize,
        wait: &[&Timed],
    ) -> Result<Timed, CudaError> {
        // SAFETY: the caller's contract is this method's.
        unsafe { Stream::download(self, dst, src, src_offset, wait) }
    }

    unsafe fn launch(
        &self,
        kernel: &mut CudaKernel,
        args: &[KernelArg<'_, Cuda>],
        size: LaunchSize,
        wait: &[&Timed],
    ) -> Result<Timed, CudaError> {
        check_args(kernel, args)?;
        let block = size
            .local
            .unwrap_or(DEFAULT_BLOCK)
            .min(kernel.max_threads as usize)
            .max(1);
        let grid = u32::try_from(size.global.div_ceil(block).max(1)).map_err(|_| {
            CudaError::Signature {
                kernel: kernel.name.clone(),
                why: format!(
                    "{} work items in groups of {block} is more groups than a launch allows",
                    size.global
                ),
            }
        })?;
        // One pointer per parameter: at the device pointer's value for buffers, at the
        // caller's bytes (checked to be the parameter's width) for values.
        let pointers: Vec<u64> = args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer(m) | KernelArg::Within(m, _) => m.ptr,
                KernelArg::Value(_) => 0,
            })
            .collect();
        let mut params: Vec<*mut c_void> = args
            .iter()
            .zip(&pointers)
            .map(|(a, p)| match a {
                KernelArg::Buffer(_) | KernelArg::Within(..) => (p as *const u64).cast_mut().cast(),
                KernelArg::Value(v) => v.as_ptr().cast_mut().cast(),
            })
            .collect();
        let f = kernel.function.cu_function();
        kernel.gpu.bind()?;
        self.around(wait, "cuLaunchKernel", |s| {
            // SAFETY: `params` holds one pointer per kernel parameter, each at a value of the
            // parameter's width (`check_args`), alive until the call returns, which copies
            // them; the buffers and the kernel outlive the command (the caller's contract).
            unsafe {
                result::launch_kernel(f, (grid, 1, 1), (block as u32, 1, 1), 0, s, &mut params)
            }
        })
    }

    fn mark(&self) -> Result<Timed, CudaError> {
        Stream::mark(self)
    }

    fn flush(&self) -> Result<(), CudaError> {
        Ok(()) // CUDA submits at enqueue.
    }

    fn finish(&self) -> Result<(), CudaError> {
        self.synchronize()
    }
}

/// Fails unless `args` match the kernel's parameters in number, kind and width.
fn check_args(kernel: &CudaKernel, args: &[KernelArg<'_, Cuda>]) -> Result<(), CudaError> {
    let bad = |why: String| {
        Err(CudaError::Signature {
            kernel: kernel.name.clone(),
            why,
        })
    };
    if args.len() != kernel.params.len() {
        return bad(format!(
            "it takes {} parameter(s) but the launch passes {}",
            kernel.params.len(),
            args.len()
        ));
    }
    for (p, a) in kernel.params.iter().zip(args) {
        let fits = match a {
            KernelArg::Buffer(_) | KernelArg::Within(..) => p.info.is_buffer(),
            KernelArg::Value(v) => !p.info.is_buffer() && p.size == Some(v.len()),
        };
        if !fits {
            return bad(format!(
                "parameter `{}` ({}) cannot take the value the launch passes",
                p.info.name, p.info.type_name
            ));
        }
    }
    Ok(())
}

impl api::Kernel for CudaKernel {
    type A = Cuda;

    fn name(&self) -> &str {
        CudaKernel::name(self)
    }

    fn params(&self) -> Result<Vec<ArgInfo>, CudaError> {
        Ok(CudaKernel::params(self))
    }

    fn work_group_limits(&self) -> Result<WorkGroupLimits, CudaError> {
        Ok(CudaKernel::work_group_limits(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_faults_read_as_the_driver_would_say_them() {
        let e: BackendError = CudaError::out_of_resources(Operation::Launch).into();
        assert_eq!(
            e.to_string(),
            "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (too many resources requested for launch)"
        );
        assert_eq!((e.api, e.code), ("CUDA", 701));
        let e = CudaError::out_of_resources(Operation::Allocate).to_string();
        assert_eq!(
            e,
            "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
        );
    }
}
