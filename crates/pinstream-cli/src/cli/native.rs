//! The CUDA baselines of `bench latency` and `bench gather`: the GPU behind an OpenCL
//! device opened through CUDA by the one API dispatch ([`with_api`]), and its own copy calls
//! ([`NativeCopies`]) handed to the measuring code; or why CUDA cannot measure that device.

use super::dispatch::{open, same_gpu, with_api, ApiName, Front};
use super::Failure;
use pinstream::backend::adapter::DeviceChoice;
use pinstream::backend::native::NativeCopies;
use pinstream::backend::opencl::DeviceInfo;
use pinstream::host::HostApi;
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::doctor::DoctorDevice;

/// The API whose own copy calls are the baselines: CUDA.
const BASELINE: ApiName = ApiName::Cuda;

/// Runs `measure` on CUDA's own copy calls on the GPU behind OpenCL device `dev`; the
/// reason CUDA cannot, where it cannot (not built, no driver, another vendor's device).
pub fn on_cuda(
    dev: &DeviceInfo,
    measure: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
) -> Result<(), String> {
    let device = same_gpu(dev, BASELINE).map_err(|f| f.message)?;
    with_api(BASELINE, Native { device, measure }).map_err(|f| f.message)
}

/// Runs `measure` on CUDA's own copy calls on the GPU at PCI bus `bus` (another API's device:
/// Vulkan's), or says why CUDA cannot.
fn on_cuda_at(
    bus: Option<&str>,
    measure: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
) -> Result<(), String> {
    let bus = bus.ok_or("the device reports no PCI bus id, so CUDA cannot find the same GPU")?;
    let device = DeviceChoice::Pci(bus.to_string());
    with_api(BASELINE, Native { device, measure }).map_err(|f| f.message)
}

/// Runs `measure` on CUDA's own copy calls on the GPU a report describes (`described`, at PCI
/// bus `bus`): through [`on_cuda`] where its driver's description is OpenCL's (which also says
/// when the device is another vendor's, and names the flag to pick the NVIDIA GPU), else
/// through [`on_cuda_at`].
pub fn on_cuda_of(
    described: &DoctorDevice,
    bus: Option<&str>,
    measure: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
) -> Result<(), String> {
    match described.driver_as::<DeviceInfo>() {
        Some(dev) => on_cuda(dev, measure),
        None => on_cuda_at(bus, measure),
    }
}

/// A measurement on one device's own copy calls, whatever the API.
struct Native<'a> {
    device: DeviceChoice,
    measure: &'a mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
}

impl Front for Native<'_> {
    type Output = ();

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<(), Failure> {
        let opened = open::<A>(&instance, &[self.device], Default::default())?;
        let native = A::native_copies(&opened.devices[0]).ok_or_else(|| {
            Failure::run(format!(
                "{} has no copy calls of its own to measure",
                A::NAME
            ))
        })?;
        (self.measure)(native).map_err(Failure::run)
    }
}
