//! What `pinstream run` needs of an API beyond the engine: the device, building the user's
//! kernel, pinning host memory, reading the VRAM, with the messages that name the fix.
//! OpenCL ([`OpenClRun`]) and CUDA (`CudaRun`, feature `cuda`, `--api cuda`).

use super::run::Args;
use super::{pick_device, Failure};
use pinstream::backend::api::Api;
use pinstream::backend::opencl::{BuildError, Context, DeviceInfo, OpenCl};
use pinstream::engine::pool::default_budget;
use pinstream::engine::HostMemory;
use pinstream::host::{HostRegion, PinOptions};
use pinstream::vram::VramProbe;

/// One API as `run` uses it.
pub(super) trait RunApi {
    /// The API.
    type A: Api;
    /// Its pinned host memory.
    type Memory: HostMemory;
    /// The device.
    fn device(&self) -> &<Self::A as Api>::Device;
    /// The device as the report names it.
    fn device_name(&self) -> String;
    /// Builds `--entry` from `source` (the `--kernel` file's text) with `--build-options`.
    fn build(&self, a: &Args, source: &str) -> Result<<Self::A as Api>::Kernel, Failure>;
    /// Pins `bytes` as `a` asks; the memory and the seconds it took.
    fn pin(&self, a: &Args, bytes: usize) -> Result<(Self::Memory, f64), Failure>;
    /// How `memory` was pinned, and why that way.
    fn pinning(&self, memory: &Self::Memory) -> (String, String);
    /// The VRAM counter.
    fn probe(&self) -> &VramProbe;
    /// The default VRAM budget.
    fn default_budget(&self) -> u64;
}

/// `run` through OpenCL.
pub(super) struct OpenClRun {
    device: DeviceInfo,
    ctx: Context,
    probe: VramProbe,
}

impl OpenClRun {
    /// Opens `--device` (default: the first GPU, else the first device).
    pub(super) fn open(a: &Args) -> Result<Self, Failure> {
        let device = pick_device(a.device)?;
        let ctx = Context::new(&device).map_err(Failure::run)?;
        Ok(OpenClRun {
            probe: VramProbe::new(&device),
            device,
            ctx,
        })
    }
}

impl RunApi for OpenClRun {
    type A = OpenCl;
    type Memory = HostRegion;

    fn device(&self) -> &Context {
        &self.ctx
    }

    fn device_name(&self) -> String {
        format!("{}: {}", self.device.index, self.device.name)
    }

    fn build(&self, a: &Args, source: &str) -> Result<pinstream::backend::opencl::Kernel, Failure> {
        let file = a.kernel.display();
        let program = self
            .ctx
            .build_program(source, &a.build_options)
            .map_err(|e| match e {
                BuildError::Options { .. } => Failure::usage(format!("bad --build-options: {e}")),
                e => Failure::usage(format!("{file} does not build: {e}")),
            })?;
        program
            .kernel(&a.entry)
            .map_err(|_| no_kernel(a, &program.kernel_names(), "__kernel void NAME(...)"))
    }

    fn pin(&self, a: &Args, bytes: usize) -> Result<(HostRegion, f64), Failure> {
        let pin = PinOptions {
            strategy: a.strategy,
            ..Default::default()
        };
        let r = HostRegion::new(&self.ctx, bytes, &pin).map_err(Failure::usage)?;
        let took = r.pin_time().as_secs_f64();
        Ok((r, took))
    }

    fn pinning(&self, memory: &HostRegion) -> (String, String) {
        (memory.strategy().to_string(), memory.reason().to_string())
    }

    fn probe(&self) -> &VramProbe {
        &self.probe
    }

    fn default_budget(&self) -> u64 {
        default_budget(self.device.global_mem, &self.probe).0
    }
}

/// `--entry` names no kernel of the file: say which it has, or that it has none (`form`:
/// how a kernel is declared in its language).
fn no_kernel(a: &Args, defined: &[String], form: &str) -> Failure {
    Failure::usage(if defined.is_empty() {
        format!(
            "{} defines no kernel: it has no `{form}` function to pass with --entry",
            a.kernel.display()
        )
    } else {
        format!(
            "{} has no kernel `{}`: it defines {}; pass one of them with --entry",
            a.kernel.display(),
            a.entry,
            defined.join(", ")
        )
    })
}

/// `run --api cuda`: the user's CUDA C kernel through NVRTC on a CUDA device, over memory
/// pinned as a CUDA program pins it.
#[cfg(feature = "cuda")]
pub(super) mod cuda {
    use super::{no_kernel, Args, Failure, RunApi};
    use pinstream::backend::cuda::{
        unavailable_reason, Cuda, CudaError, CudaKernel, CudaPinning, Gpu, PinnedHost,
    };
    use pinstream::engine::pool::default_budget;
    use pinstream::host::StrategyChoice;
    use pinstream::vram::VramProbe;

    /// `run` through CUDA.
    pub(in crate::cli) struct CudaRun {
        gpu: Gpu,
        probe: VramProbe,
    }

    impl CudaRun {
        /// Opens CUDA device `--device` (an ordinal, default 0), or says why not.
        pub(in crate::cli) fn open(a: &Args) -> Result<Self, Failure> {
            if !matches!(a.strategy, StrategyChoice::Auto) {
                return Err(Failure::usage(
                    "--strategy picks OpenCL strategies: with --api cuda (which pins with cuMemHostRegister) leave it out",
                ));
            }
            if let Some(why) = unavailable_reason() {
                return Err(Failure::run(format!(
                    "--api cuda: CUDA is not usable here: {why}"
                )));
            }
            let ordinal = a.device.unwrap_or(0);
            let gpu = Gpu::open(ordinal).map_err(|e| {
                Failure::usage(format!(
                    "--api cuda: CUDA device {ordinal} does not open: {e}; pass --device with a CUDA device ordinal (`nvidia-smi -L` lists them)"
                ))
            })?;
            let info = gpu.info();
            let probe = VramProbe::nvidia(&info.pci_address, &info.name);
            Ok(CudaRun { gpu, probe })
        }
    }

    impl RunApi for CudaRun {
        type A = Cuda;
        type Memory = PinnedHost;

        fn device(&self) -> &Gpu {
            &self.gpu
        }

        fn device_name(&self) -> String {
            let i = self.gpu.info();
            format!("{}: {} (CUDA, {})", i.ordinal, i.name, i.pci_address)
        }

        fn build(&self, a: &Args, source: &str) -> Result<CudaKernel, Failure> {
            let file = a.kernel.display();
            let program = self
                .gpu
                .build(source, &a.build_options)
                .map_err(|e| Failure::usage(format!("{file} does not build: {e}")))?;
            program.kernel(&a.entry).map_err(|e| match e {
                CudaError::NoKernel { .. } => no_kernel(
                    a,
                    &program.kernel_names(),
                    "extern \"C\" __global__ void NAME(...)",
                ),
                e @ CudaError::Signature { .. } => Failure::usage(format!("{file}: {e}")),
                e => Failure::run(e),
            })
        }

        fn pin(&self, _: &Args, bytes: usize) -> Result<(PinnedHost, f64), Failure> {
            pinstream::host::check_size(bytes).map_err(Failure::usage)?;
            let start = std::time::Instant::now();
            let m = self
                .gpu
                .pinned(bytes, CudaPinning::Register)
                .map_err(Failure::run)?;
            Ok((m, start.elapsed().as_secs_f64()))
        }

        fn pinning(&self, _: &PinnedHost) -> (String, String) {
            (
                CudaPinning::Register.to_string(),
                "--api cuda: huge-page memory registered with cuMemHostRegister, as cudaHostRegister does".into(),
            )
        }

        fn probe(&self) -> &VramProbe {
            &self.probe
        }

        fn default_budget(&self) -> u64 {
            default_budget(self.gpu.info().total_mem, &self.probe).0
        }
    }
}
