//! The CUDA baselines of `bench latency`, `bench gather` and `compare`: the GPU behind another
//! API's device opened through CUDA by the one API dispatch ([`with_api`]), and its own copy calls
//! ([`NativeCopies`]) handed to the measuring code; or why CUDA cannot measure that device.

use super::dispatch::{open, same_gpu, with_api, ApiName, Front};
use super::Failure;
use pinstream::backend::adapter::{AdapterInfo, DeviceChoice};
use pinstream::backend::native::NativeCopies;
use pinstream::host::HostApi;
use pinstream_lab::kernels::Builtins;

/// The API whose own copy calls are the baselines: CUDA.
const BASELINE: ApiName = ApiName::Cuda;

/// Runs `measure` on CUDA's own copy calls on the GPU that is `dev`, another API's device
/// (found by its PCI bus id); the reason CUDA cannot, where it cannot (not built, no driver,
/// another vendor's device, no bus id to find it by).
pub fn on_cuda(
    dev: &AdapterInfo,
    measure: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>,
) -> Result<(), String> {
    let device = same_gpu(dev, BASELINE).map_err(|f| f.message)?;
    with_api(BASELINE, Native { device, measure }).map_err(|f| f.message)
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
