//! The VRAM counter of an OpenCL device: NVML's on NVIDIA, `CL_DEVICE_GLOBAL_FREE_MEMORY_AMD`
//! on AMD ([`VramProbe::new`]).

use super::{amd_free_memory, DeviceInfo, Vendor};
use crate::backend::vram::VramProbe;

impl VramProbe {
    /// Finds the counter for the OpenCL device `device`.
    pub fn new(device: &DeviceInfo) -> Self {
        let nvidia = (device.vendor_kind == Vendor::Nvidia)
            .then_some((device.pci_address.as_deref(), device.name.as_str()));
        let d = device.clone();
        let amd = move || amd_free_memory(&d).map(|free| d.global_mem.saturating_sub(free));
        VramProbe::with(nvidia, Some(Box::new(amd)))
    }
}
