//! `bench latency` and `bench gather` through `--api vulkan`: pinstream's path over the
//! API beside the API's own calls (`tools::latency::api`, `tools::gather::api`), with CUDA's
//! rows on the same GPU (found by its PCI bus id) where CUDA is there.

use super::dispatch::{self, ApiName, ApiOptions, Front};
use super::Failure;
use pinstream::gather::BatchApi;
use pinstream::host::HostApi;
use pinstream_cli::tools::gather::api::{api_gather, ApiGatherReport};
use pinstream_cli::tools::gather::{GatherBenchError, Shape};
use pinstream_cli::tools::latency::api::{api_latency, ApiLatencyReport};

/// What to measure.
enum Ask<'a> {
    /// `bench latency`: these sizes, this many samples.
    Latency(&'a [usize], usize),
    /// `bench gather`: this shape.
    Gather(Shape),
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

/// `bench gather --api vulkan`: `shape` through `api`.
pub fn gather(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    shape: Shape,
) -> Result<ApiGatherReport, Failure> {
    match run(api, options, device, Ask::Gather(shape))? {
        Report::Gather(r) => Ok(r),
        Report::Latency(_) => unreachable!("a gather ask gives a gather report"),
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
            Ask::Gather(shape) => api_gather::<A>(dev, described, &shape, &cuda)
                .map(Report::Gather)
                .map_err(|e| match e {
                    GatherBenchError::Usage(_) => Failure::usage(e),
                    e => Failure::run(e),
                }),
        }
    }
}
