//! `bench latency` and `bench gather` through `--api vulkan`: pinstream's path over the
//! API beside the API's own calls (`tools::latency::api`, `tools::gather::api`), with CUDA's
//! rows on the same GPU (found by its PCI bus id) where CUDA is there.

use super::dispatch::{self, ApiName, ApiOptions, Front};
use super::Failure;
use pinstream::gather::GatherError;
use pinstream::gather::{BatchApi, GatherOptions};
use pinstream::host::HostApi;
use pinstream_cli::advice::{self, Flags};
use pinstream_lab::tools::gather::api::{api_gather, ApiGatherReport};
use pinstream_lab::tools::gather::{GatherBenchError, Shape};
use pinstream_lab::tools::latency::api::{api_latency, ApiLatencyReport};

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
    Latency(ApiLatencyReport),
    /// `bench gather`'s.
    Gather(ApiGatherReport),
}

/// `bench latency --api vulkan`: `(sizes, samples)` through `api`.
pub fn latency(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    (sizes, samples): (&[usize], usize),
) -> Result<ApiLatencyReport, Failure> {
    match run(api, options, device, Ask::Latency(sizes, samples))? {
        Report::Latency(r) => Ok(r),
        Report::Gather(_) => unreachable!("a latency ask gives a latency report"),
    }
}

/// `bench gather --api vulkan`: `shape` through `api`, pinstream's batch copies with
/// `staging`.
pub fn gather(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    (shape, staging): (Shape, GatherOptions),
) -> Result<ApiGatherReport, Failure> {
    match run(api, options, device, Ask::Gather(shape, staging))? {
        Report::Gather(r) => Ok(r),
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

/// Measures `ask` through `api` on its device `device` (its own list's index).
fn run(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    ask: Ask<'_>,
) -> Result<Report, Failure> {
    dispatch::with_api_as(api, options, Own { api, device, ask })
}

struct Own<'a> {
    api: ApiName,
    device: Option<usize>,
    ask: Ask<'a>,
}

impl Front for Own<'_> {
    type Output = Report;

    fn run<A: HostApi + BatchApi>(self, instance: A::Instance) -> Result<Report, Failure> {
        let mut opened =
            dispatch::open_asked::<A>(&instance, self.api, self.device, None, Default::default())?;
        let bus = opened.adapters[0].pci_address.clone();
        let cuda =
            |m: &mut dyn FnMut(
                &dyn pinstream::backend::native::NativeCopies,
            ) -> Result<(), String>| { super::native::on_cuda_at(bus.as_deref(), m) };
        let dev = &opened.devices[0];
        let described = opened.described.remove(0);
        match self.ask {
            Ask::Latency(sizes, samples) => api_latency::<A>(dev, described, sizes, samples, &cuda)
                .map(Report::Latency)
                .map_err(Failure::from),
            Ask::Gather(shape, staging) => {
                api_gather::<A>(dev, described, (&shape, &staging), &cuda)
                    .map(Report::Gather)
                    .map_err(gather_failure)
            }
        }
    }
}
