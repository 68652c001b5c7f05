//! Mapped pinned memory (`cudaHostAlloc(..., cudaHostAllocMapped)`): host memory that kernels
//! read and write in place through one `cl_mem` over the whole allocation, and the mechanism
//! that keeps kernel access in host memory on each driver ([`ZeroCopy`]).
//!
//! A `register`-strategy buffer (`CL_MEM_USE_HOST_PTR`) is never handed to a kernel on a
//! discrete GPU: NVIDIA's driver copies it into VRAM when a kernel uses it (+1.1 GiB per GiB,
//! measured on the H200, gpu-facts.md "Kernels reading pinned host memory directly").

use super::pin::driver_of;
use crate::backend::opencl::{DeviceInfo, Vendor};
use serde::Serialize;
use std::fmt;

/// How a mapped region's buffer stays in host memory for kernels, chosen per driver
/// ([`ZeroCopy::for_device`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroCopy {
    /// NVIDIA: one `clCreateBufferNV(CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR,
    /// CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV)` buffer. Measured on the H200: kernels read
    /// it across the bus at 91–93% of the one-way peak, and it costs no VRAM.
    NvHost,
    /// A CPU device (PoCL and others): a `CL_MEM_ALLOC_HOST_PTR` buffer, which is the host
    /// heap there (the device's memory is the host's).
    CpuHeap,
    /// AMD's ROCclr driver: a `CL_MEM_ALLOC_HOST_PTR` buffer, which ROCclr allocates in system
    /// memory the GPU reaches across the bus (from the driver's source, ROCclr
    /// `device/rocm/rocmemory.cpp`, not measured by pinstream).
    AmdAllocHostPtr,
    /// Intel integrated GPUs (`CL_DEVICE_HOST_UNIFIED_MEMORY`): a `CL_MEM_USE_HOST_PTR` buffer
    /// over page-aligned memory pinstream owns, which Intel's OpenCL optimization guide names
    /// as the zero-copy buffer on its integrated GPUs (from Intel's documentation, not
    /// measured by pinstream).
    IntelUseHostPtr,
}

impl ZeroCopy {
    /// The mechanism's short name (`nv-host`, `cpu-heap`, `amd-alloc-host-ptr`,
    /// `intel-use-host-ptr`).
    pub fn name(self) -> &'static str {
        match self {
            ZeroCopy::NvHost => "nv-host",
            ZeroCopy::CpuHeap => "cpu-heap",
            ZeroCopy::AmdAllocHostPtr => "amd-alloc-host-ptr",
            ZeroCopy::IntelUseHostPtr => "intel-use-host-ptr",
        }
    }

    /// Why this mechanism keeps kernel access in host memory, and whether that is measured
    /// or cited.
    pub fn basis(self) -> &'static str {
        match self {
            ZeroCopy::NvHost => "clCreateBufferNV with CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV: kernels read host memory across the bus, no VRAM copy (measured on the H200)",
            ZeroCopy::CpuHeap => "CPU device: a CL_MEM_ALLOC_HOST_PTR buffer is the host heap, which the device's kernels use in place",
            ZeroCopy::AmdAllocHostPtr => "AMD ROCclr: CL_MEM_ALLOC_HOST_PTR buffers are allocated in system memory (driver source, device/rocm/rocmemory.cpp; not measured)",
            ZeroCopy::IntelUseHostPtr => "Intel integrated GPU: CL_MEM_USE_HOST_PTR over page-aligned memory is zero-copy (Intel's OpenCL optimization guide; not measured)",
        }
    }

    /// The mechanism for `device`, else why it has none. `unified` says whether the device
    /// shares the host's memory (`CL_DEVICE_HOST_UNIFIED_MEMORY`); it is asked only of Intel
    /// GPUs.
    pub fn choose(device: &DeviceInfo, unified: impl FnOnce() -> bool) -> Result<Self, String> {
        if device.device_type == "CPU" {
            return Ok(ZeroCopy::CpuHeap);
        }
        match driver_of(device) {
            Some(Vendor::Nvidia) if device.has_extension("cl_nv_create_buffer") => Ok(ZeroCopy::NvHost),
            Some(Vendor::Nvidia) => Err("NVIDIA driver without cl_nv_create_buffer: its other buffers given to a kernel are copied into VRAM (a USE_HOST_PTR buffer: +1.1 GiB per GiB, measured on the H200)".into()),
            Some(Vendor::Amd) => Ok(ZeroCopy::AmdAllocHostPtr),
            Some(Vendor::Intel) if unified() => Ok(ZeroCopy::IntelUseHostPtr),
            Some(Vendor::Intel) => Err("Intel discrete GPU: ALLOC_HOST_PTR buffers live in VRAM, and USM host memory is reached by pointer (clSetKernelArgMemPointerINTEL), not through a cl_mem".into()),
            _ => Err(format!("no zero-copy mechanism is known for a {} device of the `{}` platform: no measurement or driver source shows one of its buffers staying in host memory when a kernel uses it", device.device_type, device.platform_name)),
        }
    }

    /// The mechanism for `device`, asking the driver whether an Intel GPU is integrated.
    pub fn for_device(device: &DeviceInfo) -> Result<Self, String> {
        Self::choose(device, || device.host_unified_memory())
    }

    /// For listings: `device`'s mechanism and its basis, or `None` and why it has none.
    pub fn report(device: &DeviceInfo) -> (Option<Self>, String) {
        match Self::for_device(device) {
            Ok(m) => (Some(m), m.basis().to_string()),
            Err(why) => (None, why),
        }
    }

    /// The one mechanism every device of a context uses, else why there is none (the first
    /// device without one, or two devices that would use different ones).
    pub fn for_devices(devices: &[DeviceInfo]) -> Result<Self, String> {
        let mut chosen = None;
        for d in devices {
            let m = Self::for_device(d)
                .map_err(|why| format!("device {} ({}): {why}", d.index, d.name))?;
            match chosen {
                Some(c) if c != m => return Err(format!("the context's devices need different mechanisms ({c} and, on device {} ({}), {m}): make mapped memory in a context of one kind of device", d.index, d.name)),
                _ => chosen = Some(m),
            }
        }
        chosen.ok_or_else(|| "the context has no device".into())
    }
}

impl fmt::Display for ZeroCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::host::pin::test_device;

    fn pick(v: Vendor, kind: &str, exts: &[&str], unified: bool) -> Result<ZeroCopy, String> {
        ZeroCopy::choose(&test_device(0, v, kind, exts), || unified)
    }

    #[test]
    fn each_driver_gets_its_mechanism_or_a_reason() {
        let nv = ["cl_nv_create_buffer"];
        assert_eq!(
            pick(Vendor::Nvidia, "GPU", &nv, false),
            Ok(ZeroCopy::NvHost)
        );
        assert_eq!(pick(Vendor::Pocl, "CPU", &[], false), Ok(ZeroCopy::CpuHeap));
        assert_eq!(
            pick(Vendor::Amd, "GPU", &[], false),
            Ok(ZeroCopy::AmdAllocHostPtr)
        );
        assert_eq!(
            pick(Vendor::Intel, "GPU", &[], true),
            Ok(ZeroCopy::IntelUseHostPtr)
        );
        let e = pick(Vendor::Nvidia, "GPU", &[], false).unwrap_err();
        assert!(
            e.contains("cl_nv_create_buffer") && e.contains("VRAM"),
            "{e}"
        );
        let e = pick(Vendor::Intel, "GPU", &[], false).unwrap_err();
        assert!(e.contains("discrete"), "{e}");
        // PoCL's CUDA device is no NVIDIA driver: no basis, no mechanism.
        let e = pick(Vendor::Pocl, "GPU", &[], false).unwrap_err();
        assert!(e.contains("no zero-copy mechanism is known"), "{e}");
    }

    #[test]
    fn a_context_needs_one_mechanism_for_every_device() {
        let nv = test_device(0, Vendor::Nvidia, "GPU", &["cl_nv_create_buffer"]);
        let cpu = test_device(1, Vendor::Pocl, "CPU", &[]);
        let e = ZeroCopy::for_devices(&[nv, cpu.clone()]).unwrap_err();
        assert!(
            e.contains("different mechanisms") && e.contains("device 1"),
            "{e}"
        );
        assert_eq!(
            ZeroCopy::for_devices(&[cpu.clone(), cpu]),
            Ok(ZeroCopy::CpuHeap)
        );
    }
}
