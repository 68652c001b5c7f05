//! `bench latency` and `bench gather` through any API: pinstream's path over the API beside
//! the API's own calls (`tools::latency`, `tools::gather`), with CUDA's rows on the same GPU
//! where CUDA is there.

use super::dispatch::{self, ApiName, ApiOptions, Front};
use super::Failure;
use pinstream::backend::native::NativeCopies;
use pinstream::gather::GatherError;
use pinstream::gather::{BatchApi, GatherOptions};
use pinstream::host::{HostApi, StrategyChoice};
use pinstream_cli::advice::{self, Flags};
use pinstream_lab::tools::gather::{gather_bench, GatherBenchError, GatherReport, Shape};
use pinstream_lab::tools::latency::{latency as latency_bench, LatencyReport};
use pinstream_lab::tools::OnCuda;

/// What to measure.
enum Ask<'a> {
    /// `bench latency`: these sizes, this many samples, pinstream's memory pinned as
    /// `--strategy` names (an OpenCL strategy's name, matched to the API's pinnings by name;
    /// `auto`: the API's own choice).
    Latency(&'a [usize], usize, StrategyChoice),
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

/// `bench latency --api API`: `(sizes, samples)` through `api` (`both`: OpenCL, with CUDA's
/// rows; CUDA's rows beside every other API's too), pinstream's memory pinned as `strategy`
/// names.
pub fn latency(
    api: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    (sizes, samples, strategy): (&[usize], usize, StrategyChoice),
) -> Result<LatencyReport, Failure> {
    match run(api, options, device, Ask::Latency(sizes, samples, strategy))? {
        Report::Latency(r) => Ok(*r),
        Report::Gather(_) => unreachable!("a latency ask gives a latency report"),
    }
}

/// The API a `bench` front measures through for `--api api`, and whether CUDA's rows go
/// beside it: `both` is OpenCL with CUDA's, `opencl` OpenCL alone, every other API with
/// CUDA's.
fn with_cuda(api: ApiName) -> (ApiName, bool) {
    match api {
        ApiName::Both => (ApiName::Opencl, true),
        ApiName::Opencl => (ApiName::Opencl, false),
        other => (other, true),
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
    match run(api, options, device, Ask::Gather(shape, staging))? {
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

/// Measures `ask` through the API `--api asked` names on its device `device` (its own list's
/// index), with CUDA's rows on the same GPU where `asked` asks for them ([`with_cuda`]).
fn run(
    asked: ApiName,
    options: &ApiOptions,
    device: Option<usize>,
    ask: Ask<'_>,
) -> Result<Report, Failure> {
    let (api, cuda) = with_cuda(asked);
    let own = Own {
        api,
        device,
        ask,
        cuda,
    };
    let options = ApiOptions {
        asked: (asked != api).then_some(asked),
        ..*options
    };
    dispatch::with_api_as(api, &options, own)
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
        let described = opened.described.remove(0);
        let of = described.adapter.clone();
        let cuda = |m: &mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>| {
            super::native::on_cuda(&of, m)
        };
        let dev = &opened.devices[0];
        match self.ask {
            Ask::Latency(sizes, samples, strategy) => {
                let pinning = super::flags::pinnings::<A>(dev, Some(strategy))?;
                let cuda = self.cuda.then_some(&cuda as OnCuda);
                let ask = (sizes, samples);
                // A pin or a copy that fails here is the run's, not the flags' (the strategy
                // named was checked above).
                latency_bench::<A>(dev, described, pinning.first().copied(), ask, cuda)
                    .map(|r| Report::Latency(Box::new(r)))
                    .map_err(Failure::run)
            }
            Ask::Gather(shape, staging) => {
                let cuda = self.cuda.then_some(&cuda as OnCuda);
                gather_bench::<A>(dev, described, (&shape, &staging), cuda)
                    .map(|r| Report::Gather(Box::new(r)))
                    .map_err(gather_failure)
            }
        }
    }
}
