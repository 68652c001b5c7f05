//! The CUDA baselines of `bench --latency` and `bench --gather`: the GPU behind an OpenCL
//! device opened through CUDA by the one API dispatch ([`with_api`]), and its own copy calls
//! ([`NativeCopies`]) handed to the measuring code; or why CUDA cannot measure that device.

use super::dispatch::{open, with_api, ApiName, Front};
use super::Failure;
use pinstream::backend::adapter::DeviceChoice;
use pinstream::backend::native::NativeCopies;
use pinstream::backend::opencl::{DeviceInfo, Vendor};
use pinstream::host::HostApi;

/// How another API names the GPU behind OpenCL device `dev` (its PCI bus id), or why no
/// other API drives it.
pub fn same_gpu(dev: &DeviceInfo) -> Result<DeviceChoice, String> {
    if dev.vendor_kind != Vendor::Nvidia {
        return Err(format!(
            "device {} ({}, {}) is not driven by NVIDIA's OpenCL driver, so there is no CUDA device to compare it with; pick the NVIDIA GPU with --device (see `pinstream devices`)",
            dev.index, dev.name, dev.platform_name
        ));
    }
    match &dev.pci_address {
        Some(bus) => Ok(DeviceChoice::Pci(bus.clone())),
        None => Err(format!(
            "NVIDIA's OpenCL driver reports no PCI bus id for device {} ({}), so the CUDA device that is the same GPU cannot be told: update the driver",
            dev.index, dev.name
        )),
    }
}

/// Runs `measure` on CUDA's own copy calls on the GPU behind OpenCL device `dev`; the
/// reason CUDA cannot, where it cannot (not built, no driver, another vendor's device).
pub fn on_cuda(
    dev: &DeviceInfo,
    measure: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
) -> Result<(), String> {
    let front = Native {
        device: same_gpu(dev)?,
        measure,
    };
    with_api(ApiName::Cuda, front).map_err(|f| f.message)
}

/// A measurement on one device's own copy calls, whatever the API.
struct Native<'a> {
    device: DeviceChoice,
    measure: &'a mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
}

impl Front for Native<'_> {
    type Output = ();

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<(), Failure> {
        let opened = open::<A>(&instance, &[self.device])?;
        let native = A::native_copies(&opened.devices[0]).ok_or_else(|| {
            Failure::run(format!(
                "{} has no copy calls of its own to measure",
                A::NAME
            ))
        })?;
        (self.measure)(native).map_err(Failure::run)
    }
}
