//! What `pinstream run` needs of an API beyond the engine: the device, building the user's
//! kernel, pinning host memory, reading the VRAM, with the messages that name the fix.
//! OpenCL ([`OpenClRun`]) and CUDA (`CudaRun`, feature `cuda`, `--api cuda`).

use super::run::Args;
use super::several::{device_nodes, open_contexts, placement, Numa};
use super::Failure;
use pinstream::backend::api::Api;
use pinstream::backend::opencl::{BuildError, Context, DeviceInfo, OpenCl};
use pinstream::engine::pool::default_budget;
use pinstream::engine::HostMemory;
use pinstream::host::{
    auto_order_for, up_front_with, HostError, HostRegion, PinOptions, StrategyChoice,
};
use pinstream::vram::VramProbe;
use std::ops::Range;

/// One API as `run` uses it.
pub(super) trait RunApi {
    /// The API.
    type A: Api;
    /// Its pinned host memory.
    type Memory: HostMemory;
    /// The devices of the run (one unless `--devices` names several).
    fn devices(&self) -> &[<Self::A as Api>::Device];
    /// The devices as the report names them.
    fn device_name(&self) -> String;
    /// Builds `--entry` from `source` (the `--kernel` file's text) with `--build-options`, on
    /// every device.
    fn build(&self, a: &Args, source: &str) -> Result<Vec<<Self::A as Api>::Kernel>, Failure>;
    /// Pins `bytes` as `a` asks, usable by every device; `shares`: each device's byte range
    /// of it (for NUMA placement; empty: no placement). The memory and the seconds it took.
    fn pin(
        &self,
        a: &Args,
        bytes: usize,
        shares: &[Range<usize>],
    ) -> Result<(Self::Memory, f64), Failure>;
    /// As [`Self::pin`], pinned as the stream goes where this API and `a` allow it (OpenCL
    /// `register`, one device, no NUMA placement), each chunk of `block_bytes`-blocks
    /// written by `fill` as it is made resident; otherwise exactly [`Self::pin`] (`fill` is
    /// then not called: the caller fills the memory).
    fn pin_progressive(
        &self,
        a: &Args,
        bytes: usize,
        shares: &[Range<usize>],
        _block_bytes: usize,
        _fill: Option<pinstream::host::Fill>,
    ) -> Result<(Self::Memory, f64), Failure> {
        if a.progressive == "on" {
            super::out::note(
                "--progressive on pins up front through CUDA (cuMemHostRegister pins the whole range at once)",
            );
        }
        self.pin(a, bytes, shares)
    }
    /// What NUMA placement does on this host for these devices.
    fn numa(&self) -> String;
    /// How `memory` was pinned, and why that way.
    fn pinning(&self, memory: &Self::Memory) -> (String, String);
    /// The VRAM counter (of the first device).
    fn probe(&self) -> &VramProbe;
    /// The default VRAM budget, per device (the smallest device's).
    fn default_budget(&self) -> u64;
}

/// `run` through OpenCL.
pub(super) struct OpenClRun {
    devices: Vec<DeviceInfo>,
    ctxs: Vec<Context>,
    probe: VramProbe,
    nodes: Vec<Option<u32>>,
    numa: Numa,
}

impl OpenClRun {
    /// Why a progressive pin goes up front with the strategy `choice` takes here (only
    /// `register` pins chunk by chunk), with the fix.
    fn strategy_up_front(&self, choice: StrategyChoice) -> Option<String> {
        let s = match choice {
            StrategyChoice::Forced(s) => s,
            StrategyChoice::Auto => *auto_order_for(self.ctxs[0].devices()).0.first()?,
        };
        up_front_with(s).map(|why| format!("{why}: use --strategy register"))
    }

    /// Opens `--device` or `--devices` (default: the first GPU, else the first device), a
    /// context on each.
    pub(super) fn open(a: &Args) -> Result<Self, Failure> {
        let wait = a.wait.parse().map_err(Failure::usage)?;
        let (devices, ctxs) = open_contexts(a.device, a.devices.as_ref(), wait)?;
        Ok(OpenClRun {
            probe: VramProbe::new(&devices[0]),
            nodes: device_nodes(&devices),
            numa: a.numa,
            devices,
            ctxs,
        })
    }
}

impl RunApi for OpenClRun {
    type A = OpenCl;
    type Memory = HostRegion;

    fn devices(&self) -> &[Context] {
        &self.ctxs
    }

    fn device_name(&self) -> String {
        let names: Vec<String> = self
            .devices
            .iter()
            .map(|d| format!("{}: {}", d.index, d.name))
            .collect();
        names.join(", ")
    }

    fn build(
        &self,
        a: &Args,
        source: &str,
    ) -> Result<Vec<pinstream::backend::opencl::Kernel>, Failure> {
        self.ctxs.iter().map(|c| build_on(c, a, source)).collect()
    }

    fn pin(
        &self,
        a: &Args,
        bytes: usize,
        shares: &[Range<usize>],
    ) -> Result<(HostRegion, f64), Failure> {
        let pin = PinOptions {
            strategy: a.strategy,
            placement: placement(a.numa, shares, &self.nodes).0,
            ..Default::default()
        };
        let start = std::time::Instant::now();
        let mut r = HostRegion::new(&self.ctxs[0], bytes, &pin).map_err(host_failure)?;
        // Every other device reads the region through a registration in its own context.
        for ctx in &self.ctxs[1..] {
            r.register_with(ctx, false).map_err(Failure::usage)?;
        }
        Ok((r, start.elapsed().as_secs_f64()))
    }

    fn pin_progressive(
        &self,
        a: &Args,
        bytes: usize,
        shares: &[Range<usize>],
        block_bytes: usize,
        fill: Option<pinstream::host::Fill>,
    ) -> Result<(HostRegion, f64), Failure> {
        let placement = placement(a.numa, shares, &self.nodes).0;
        // `fill` is there only with --progressive on (and an input it can read chunk by
        // chunk); where the pin cannot go chunk by chunk, say why it goes up front.
        let up_front = match (&fill, self.ctxs.len() > 1, !placement.is_empty()) {
            (_, true, _) => Some("over several devices (every device registers every chunk): run one device".to_string()),
            (_, _, true) => Some("with NUMA placement (--numa on binds the pages before they are made): use --numa off".to_string()),
            (None, ..) => Some("for an input that is not a regular file (a FIFO or a device is read in order)".to_string()),
            _ => self.strategy_up_front(a.strategy),
        };
        let (Some(fill), None) = (fill, &up_front) else {
            if let (true, Some(why)) = (a.progressive == "on", up_front) {
                super::out::note(format!("--progressive on pins up front {why}"));
            }
            return self.pin(a, bytes, shares);
        };
        let pin = PinOptions {
            strategy: a.strategy,
            progressive: Some(pinstream::host::Progressive {
                block_bytes,
                fill: Some(fill),
            }),
            ..Default::default()
        };
        let start = std::time::Instant::now();
        let r = HostRegion::new(&self.ctxs[0], bytes, &pin).map_err(host_failure)?;
        Ok((r, start.elapsed().as_secs_f64()))
    }

    fn numa(&self) -> String {
        let shares = vec![0..1; self.devices.len()];
        placement(self.numa, &shares, &self.nodes).1
    }

    fn pinning(&self, memory: &HostRegion) -> (String, String) {
        (memory.strategy().to_string(), memory.reason().to_string())
    }

    fn probe(&self) -> &VramProbe {
        &self.probe
    }

    fn default_budget(&self) -> u64 {
        let smallest = self.devices.iter().map(|d| d.global_mem).min();
        default_budget(smallest.unwrap_or(0), &self.probe).0
    }
}

/// A pinning failure as a usage error, with the flag that fixes it where one does.
fn host_failure(e: HostError) -> Failure {
    Failure::usage(pinstream_cli::advice::host_error(&e))
}

/// `--entry` of `source` built on `ctx`.
fn build_on(
    ctx: &Context,
    a: &Args,
    source: &str,
) -> Result<pinstream::backend::opencl::Kernel, Failure> {
    let file = a.kernel.display();
    let program = ctx
        .build_program(source, &a.build_options)
        .map_err(|e| match e {
            BuildError::Options { .. } => Failure::usage(format!("bad --build-options: {e}")),
            e => Failure::usage(format!("{file} does not build: {e}")),
        })?;
    program
        .kernel(&a.entry)
        .map_err(|_| no_kernel(a, &program.kernel_names(), "__kernel void NAME(...)"))
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
    use crate::cli::several::DeviceSet;
    use pinstream::backend::cuda::{
        unavailable_reason, Cuda, CudaError, CudaKernel, CudaPinning, Gpu, PinnedHost,
    };
    use pinstream::engine::pool::default_budget;
    use pinstream::vram::VramProbe;

    /// `run` through CUDA.
    pub(in crate::cli) struct CudaRun {
        gpus: Vec<Gpu>,
        probe: VramProbe,
    }

    impl CudaRun {
        /// Opens CUDA device `--device` (an ordinal, default 0), or says why not.
        pub(in crate::cli) fn open(a: &Args) -> Result<Self, Failure> {
            if let Some(why) = unavailable_reason() {
                return Err(Failure::run(format!(
                    "--api cuda: CUDA is not usable here: {why}"
                )));
            }
            let gpus = ordinals(a)?
                .into_iter()
                .map(open)
                .collect::<Result<Vec<_>, _>>()?;
            let info = gpus[0].info();
            let probe = VramProbe::nvidia(&info.pci_address, &info.name);
            Ok(CudaRun { gpus, probe })
        }
    }

    /// The CUDA ordinals `--device` / `--devices` name (`all`: every CUDA device).
    fn ordinals(a: &Args) -> Result<Vec<usize>, Failure> {
        Ok(match (&a.devices, a.device) {
            (Some(DeviceSet::List(l)), _) => l.clone(),
            (Some(DeviceSet::All), _) => {
                let all = pinstream::backend::cuda::devices().map_err(Failure::run)?;
                all.iter().map(|d| d.ordinal).collect()
            }
            (None, d) => vec![d.unwrap_or(0)],
        })
    }

    fn open(ordinal: usize) -> Result<Gpu, Failure> {
        Gpu::open(ordinal).map_err(|e| {
            Failure::usage(format!(
                "--api cuda: CUDA device {ordinal} does not open: {e}; pass --device (or --devices) with CUDA device ordinals (`nvidia-smi -L` lists them)"
            ))
        })
    }

    impl RunApi for CudaRun {
        type A = Cuda;
        type Memory = PinnedHost;

        fn devices(&self) -> &[Gpu] {
            &self.gpus
        }

        fn device_name(&self) -> String {
            let names: Vec<String> = self
                .gpus
                .iter()
                .map(|g| {
                    let i = g.info();
                    format!("{}: {} (CUDA, {})", i.ordinal, i.name, i.pci_address)
                })
                .collect();
            names.join(", ")
        }

        fn build(&self, a: &Args, source: &str) -> Result<Vec<CudaKernel>, Failure> {
            self.gpus.iter().map(|g| build_on(g, a, source)).collect()
        }

        fn pin(
            &self,
            _: &Args,
            bytes: usize,
            _: &[std::ops::Range<usize>],
        ) -> Result<(PinnedHost, f64), Failure> {
            pinstream::host::check_size(bytes).map_err(Failure::usage)?;
            let start = std::time::Instant::now();
            // Several GPUs: pinned for every context, or the others read it as pageable.
            let portable = self.gpus.len() > 1;
            let m = self.gpus[0]
                .pinned_for(bytes, CudaPinning::Register, portable)
                .map_err(Failure::run)?;
            Ok((m, start.elapsed().as_secs_f64()))
        }

        fn numa(&self) -> String {
            "--api cuda: no NUMA placement (the OpenCL path has --numa)".into()
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
            let smallest = self.gpus.iter().map(|g| g.info().total_mem).min();
            default_budget(smallest.unwrap_or(0), &self.probe).0
        }
    }

    /// `--entry` of `source` built with NVRTC for `gpu`.
    fn build_on(gpu: &Gpu, a: &Args, source: &str) -> Result<CudaKernel, Failure> {
        let file = a.kernel.display();
        let program = gpu
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
}
