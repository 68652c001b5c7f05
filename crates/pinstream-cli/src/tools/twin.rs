//! The CUDA device that is the same GPU as an OpenCL device, for `bench` and `compare`.

use pinstream::backend::opencl::DeviceInfo;

/// Why CUDA cannot measure the GPU behind `dev`, or `None` when it can.
pub fn unavailable(dev: &DeviceInfo) -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        open(dev).err()
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = dev;
        Some("this pinstream was built without the `cuda` cargo feature: build it with default features (or `--features cuda`) to measure through CUDA".into())
    }
}

/// Opens the CUDA device at the PCI address of `dev` (by name where the OpenCL driver does
/// not report the address), or says why there is none.
#[cfg(feature = "cuda")]
pub fn open(dev: &DeviceInfo) -> Result<pinstream::backend::cuda::Gpu, String> {
    use pinstream::backend::cuda::{devices, Gpu};
    use pinstream::backend::opencl::Vendor;
    if dev.vendor_kind != Vendor::Nvidia {
        return Err(format!(
            "device {} ({}, {}) is not driven by NVIDIA's OpenCL driver, so there is no CUDA device to compare it with; pick the NVIDIA GPU with --device (see `pinstream devices`)",
            dev.index, dev.name, dev.platform_name
        ));
    }
    let list = devices().map_err(|e| e.to_string())?;
    // By PCI address where the OpenCL driver reports one; by name (and only when one device
    // has it) otherwise.
    let found = match dev.pci_address.as_deref() {
        Some(a) => list
            .iter()
            .find(|c| pinstream::vram::same_pci(a, &c.pci_address)),
        None => {
            let named: Vec<_> = list.iter().filter(|c| c.name == dev.name).collect();
            (named.len() == 1).then(|| named[0])
        }
    }
    .ok_or_else(|| {
        format!(
            "no CUDA device matches OpenCL device {} ({}, PCI {}); CUDA lists {}",
            dev.index,
            dev.name,
            dev.pci_address.as_deref().unwrap_or("unknown"),
            list.iter()
                .map(|c| format!("{} ({})", c.name, c.pci_address))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    Gpu::open(found.ordinal).map_err(|e| e.to_string())
}
