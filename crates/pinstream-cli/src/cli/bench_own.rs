//! `bench latency --api vulkan` and `bench gather` through any API: pinstream's path over the
//! API beside the API's own calls (`tools::latency::api`, `tools::gather`), with CUDA's
//! rows on the same GPU (found by its PCI bus id) where CUDA is there.

use super::dispatch::{self, ApiName, ApiOptions, Front};
use super::Failure;
use pinstream::backend::native::NativeCopies;
use pinstream::gather::GatherError;
use pinstream::gather::{BatchApi, GatherOptions};
use pinstream::host::HostApi;
use pinstream_cli::advice::{self, Flags};
use pinstream_lab::tools::gather::{gather_bench, GatherBenchError, GatherReport, Shape};
use pinstream_lab::tools::latency::api::api_latency;
use pinstream_lab::tools::latency::LatencyReport;
use pinstream_lab::tools::OnCuda;

/// What to measure.
enum Ask<'a> {
    /// `bench latency`: these sizes, this many samples.
    Latency(&'a [usize], usize),
    /// `bench gather`: this shape, with staging this large.
    Gather(Shape, GatherOptions),
}

/// What was measured.
enum Report {
    /// `bench latency`'s.
    Latency(Box<LatencyReport>),
    /// `bench gather`'s.
    Gather(Box<GatherReport>),
}

/// `bench latency --api vulkan`: `(sizes, samples)` through `api`.
pub fn latency(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    (sizes, samples): (&[usize], usize),
) -> Result<LatencyReport, Failure> {
    match run(api, options, device, Ask::Latency(sizes, samples), true)? {
        Report::Latency(r) => Ok(*r),
        Report::Gather(_) => unreachable!("a latency ask gives a latency report"),
    }
}

/// `bench gather --api API`: `shape` through `api` (`both`: OpenCL, with CUDA's rows; CUDA's
/// rows beside every other API's too), pinstream's batch copies with `staging`.
pub fn gather(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    (shape, staging): (Shape, GatherOptions),
) -> Result<GatherReport, Failure> {
    let (through, cuda) = match api {
        ApiName::Both => (ApiName::Opencl, true),
        ApiName::Opencl => (ApiName::Opencl, false),
        other => (other, true),
    };
    match run(through, options, device, Ask::Gather(shape, staging), cuda)? {
        Report::Gather(r) => Ok(*r),
        Report::Latency(_) => unreachable!("a gather ask gives a gather report"),
    }
}

/// A failure of `bench gather` through any API: a shape or staging that cannot be measured
/// is the caller's (with the flag to change), the rest the run's.
pub fn gather_failure(e: GatherBenchError) -> Failure {
    match e {
        GatherBenchError::Usage(_) => Failure::usage(e),
        GatherBenchError::Gather(g @ GatherError::Capacity { .. }) => {
            Failure::usage(advice::gather(&g, Flags::BENCH))
        }
        e => Failure::run(e),
    }
}

/// Measures `ask` through `api` on its device `device` (its own list's index), with CUDA's
/// rows on the same GPU if `cuda`.
fn run(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    ask: Ask<'_>,
    cuda: bool,
) -> Result<Report, Failure> {
    let own = Own {
        api,
        device,
        ask,
        cuda,
    };
    dispatch::with_api_as(api, options, own)
}

/// One measurement through the API the dispatch picks.
struct Own<'a> {
    api: ApiName,
    device: Option<usize>,
    ask: Ask<'a>,
    cuda: bool,
}

impl Front for Own<'_> {
    type Output = Report;

    fn run<A: HostApi + BatchApi>(self, instance: A::Instance) -> Result<Report, Failure> {
        let mut opened =
            dispatch::open_asked::<A>(&instance, self.api, self.device, None, Default::default())?;
        let bus = opened.adapters[0].pci_address.clone();
        let described = opened.described.remove(0);
        let of = described.clone();
        let cuda = |m: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>| {
            super::native::on_cuda_of(&of, bus.as_deref(), m)
        };
        let dev = &opened.devices[0];
        match self.ask {
            Ask::Latency(sizes, samples) => api_latency::<A>(dev, described, sizes, samples, &cuda)
                .map(|r| Report::Latency(Box::new(r)))
                .map_err(Failure::from),
            Ask::Gather(shape, staging) => {
                let cuda = self.cuda.then_some(&cuda as OnCuda);
                gather_bench::<A>(dev, described, (&shape, &staging), cuda)
                    .map(|r| Report::Gather(Box::new(r)))
                    .map_err(gather_failure)
            }
        }
    }
}
