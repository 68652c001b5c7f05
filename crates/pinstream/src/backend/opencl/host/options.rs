//! How to make an OpenCL region ([`PinOptions`]) and the largest chunk a context's devices
//! take.

use super::StrategyChoice;
use crate::backend::opencl::Context;
use crate::backend::pinning::Progressive;
use std::ops::Range;

/// How to make a region.
#[derive(Debug, Clone, Default)]
pub struct PinOptions {
    /// `auto` or a forced strategy.
    pub strategy: StrategyChoice,
    /// Largest chunk (for `register`: largest registration); defaults to the smallest max
    /// allocation of the context's devices, and is capped at it.
    ///
    /// The NVIDIA driver runs a transfer at pinned speed only when one registration holds its
    /// whole host range: a transfer that crosses two registrations runs at pageable speed, and
    /// registrations that overlap do not help (H200, 2026-11-30: 384 MiB blocks over 256 MiB
    /// registrations 7.6 GB/s H2D, over one 4 GiB registration 51 GB/s; over registrations of
    /// 1 GiB overlapping by half 12.7 GB/s; bench/results/h200/straddle/). So the default is one
    /// registration up to the max allocation (35 GiB on the H200); pinstream's own transfers
    /// split at chunk boundaries ([`HostRegion::chunk_ranges`](super::HostRegion::chunk_ranges)), and a caller doing its own
    /// transfers should too. The previous default of 256 MiB registrations pinned 10 GiB in
    /// 0.34–0.37 s against 0.49–0.63 s as one (bench/results/h200/pin-sweep.txt).
    pub max_chunk: Option<usize>,
    /// Threads that make `register`/`mlock` pages resident; default: all cores.
    pub touch_threads: Option<usize>,
    /// One contiguous range whatever the size (as `cudaMallocHost` gives): strategies that
    /// give pieces are refused (forced) or skipped (`auto`) when the size needs more than one.
    pub contiguous: bool,
    /// Measure the VRAM cost (NVML, AMD's free-memory query) around the pinning.
    pub measure_vram: bool,
    /// NUMA placement for `register`, `mlock` and `pageable`: each byte range's pages are
    /// bound to its node (`mbind`) before they are first touched, so that each device's
    /// share of a run lies on the device's node (see [`numa_placement`](crate::backend::pinning::numa_placement)). Empty: the
    /// kernel's default (first touch by the touching threads, wherever they run).
    pub placement: Vec<(Range<usize>, u32)>,
    /// Pin as the stream goes (`register` only; see [`Progressive`]): the first chunk (one
    /// block) is made resident and registered before [`HostRegion::new`](super::HostRegion::new) returns, the
    /// others on a background thread, in chunks of whole blocks ([`chunk_plan`](super::chunk_plan)) so that no
    /// block straddles two registrations. A run waits block by block for its chunk. Other
    /// strategies, a NUMA `placement`, and sizes of one chunk pin up front as before.
    pub progressive: Option<Progressive>,
}

/// The largest allocation every device of `ctx` accepts.
pub(crate) fn smallest_max_alloc(ctx: &Context) -> usize {
    let smallest = ctx.devices().iter().map(|d| d.max_alloc).min();
    smallest.unwrap_or(ctx.device().max_alloc).max(1) as usize
}
