//! A CUDA device: what the driver says of it, its primary context ([`Gpu`]) and its memory
//! ([`DeviceMem`]).

use super::{unavailable_reason, CudaError, Result};
use cudarc::driver::{result, sys, CudaContext};
use std::sync::Arc;

/// What the CUDA driver says of one device.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CudaDeviceInfo {
    /// CUDA ordinal.
    pub ordinal: usize,
    /// Name.
    pub name: String,
    /// PCI address, `0000:3b:00.0` form.
    pub pci_address: String,
    /// Global memory in bytes.
    pub total_mem: u64,
    /// Compute capability.
    pub compute_capability: (i32, i32),
    /// Copy engines (`CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`).
    pub copy_engines: i32,
    /// Driver version, e.g. 13000 for 13.0.
    pub driver_version: i32,
}

/// The CUDA devices.
pub fn devices() -> Result<Vec<CudaDeviceInfo>> {
    if let Some(why) = unavailable_reason() {
        return Err(CudaError::Unavailable(why));
    }
    let n = CudaContext::device_count().map_err(CudaError::driver("cuDeviceGetCount"))?;
    (0..n as usize).map(info).collect()
}

fn info(ordinal: usize) -> Result<CudaDeviceInfo> {
    let dev = result::device::get(ordinal as i32).map_err(CudaError::driver("cuDeviceGet"))?;
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        unsafe { result::device::get_attribute(dev, a) }
            .map_err(CudaError::driver("cuDeviceGetAttribute"))
    };
    use sys::CUdevice_attribute as A;
    let mut bus = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer is 32 bytes and its length is passed; `dev` is valid.
    unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, dev) }
        .result()
        .map_err(CudaError::driver("cuDeviceGetPCIBusId"))?;
    // SAFETY: the driver wrote a NUL-terminated string into `bus`.
    let bus = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }
        .to_string_lossy()
        .to_ascii_lowercase();
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(CudaError::driver("cuDriverGetVersion"))?;
    Ok(CudaDeviceInfo {
        ordinal,
        name: result::device::get_name(dev).map_err(CudaError::driver("cuDeviceGetName"))?,
        pci_address: bus,
        // SAFETY: `dev` is valid.
        total_mem: unsafe { result::device::total_mem(dev) }
            .map_err(CudaError::driver("cuDeviceTotalMem"))? as u64,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        copy_engines: attr(A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?,
        driver_version: version,
    })
}

/// One CUDA device's primary context. Its streams ([`Gpu::stream`], in `stream.rs`) and its
/// pinned host memory ([`Gpu::pinned`], in `pinned.rs`) are made where those types live.
#[derive(Clone)]
pub struct Gpu {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) info: CudaDeviceInfo,
}

impl Gpu {
    /// Opens device `ordinal` (its primary context, as the CUDA runtime would).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        if let Some(why) = unavailable_reason() {
            return Err(CudaError::Unavailable(why));
        }
        let ctx =
            CudaContext::new(ordinal).map_err(CudaError::driver("cuDevicePrimaryCtxRetain"))?;
        Ok(Gpu {
            info: info(ordinal)?,
            ctx,
        })
    }

    /// The device.
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// Makes this device's context current on the calling thread (`cuCtxSetCurrent`).
    pub(super) fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(CudaError::driver("cuCtxSetCurrent"))
    }

    /// Blocks until all work of this device's context completed (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.bind()?;
        result::ctx::synchronize().map_err(CudaError::driver("cuCtxSynchronize"))
    }

    /// Free and total device memory (`cuMemGetInfo`).
    pub fn mem_info(&self) -> Result<(u64, u64)> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(CudaError::driver("cuMemGetInfo"))?;
        Ok((free as u64, total as u64))
    }

    /// `bytes` of device memory, zeroed (so it is committed now).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceMem> {
        self.bind()?;
        // SAFETY: a plain allocation; the pointer is owned by the returned value.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }
            .map_err(CudaError::driver("cuMemAlloc"))?;
        let mem = DeviceMem {
            ptr,
            len: bytes,
            gpu: self.clone(),
            host: None,
        };
        // SAFETY: `ptr` holds `bytes` bytes.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }
            .map_err(CudaError::driver("cuMemsetD8"))?;
        Ok(mem)
    }
}

/// Device memory (`cuMemAlloc`).
pub struct DeviceMem {
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) len: usize,
    gpu: Gpu,
    /// For a buffer over mapped host memory: the memory (its owner, type-erased), kept alive
    /// while the buffer is held, and not freed by `cuMemFree`.
    host: Option<std::sync::Arc<dyn Send + Sync>>,
}

impl DeviceMem {
    /// A buffer over mapped host memory at device address `ptr`, holding `shared` alive.
    pub(super) fn over_host(
        ptr: sys::CUdeviceptr,
        len: usize,
        gpu: &Gpu,
        shared: std::sync::Arc<dyn Send + Sync>,
    ) -> Self {
        DeviceMem {
            ptr,
            len,
            gpu: gpu.clone(),
            host: Some(shared),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if self.host.is_some() {
            return; // mapped host memory: freed by its last holder
        }
        let _ = self.gpu.bind();
        // SAFETY: allocated by cuMemAlloc, freed once; streams using it were synchronised
        // (Stream's Drop) before the engine drops its slots.
        if let Err(e) = unsafe { result::free_sync(self.ptr) } {
            tracing::warn!("cuMemFree failed: {e:?}");
        }
    }
}
