//! How to make a region ([`PinOptions`], [`numa_placement`]) and the checks of its size.

use super::{HostError, StrategyChoice};
use crate::backend::opencl::Context;
use crate::backend::os;
use std::ops::Range;
use std::sync::Arc;

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
    /// share of a run lies on the device's node (see [`numa_placement`]). Empty: the
    /// kernel's default (first touch by the touching threads, wherever they run).
    pub placement: Vec<(Range<usize>, u32)>,
    /// Pin as the stream goes (`register` only; see [`Progressive`]): the first chunk (one
    /// block) is made resident and registered before [`HostRegion::new`](super::HostRegion::new) returns, the
    /// others on a background thread, in chunks of whole blocks ([`chunk_plan`](super::chunk_plan)) so that no
    /// block straddles two registrations. A run waits block by block for its chunk. Other
    /// strategies, a NUMA `placement`, and sizes of one chunk pin up front as before.
    pub progressive: Option<Progressive>,
}

/// The NUMA placement that puts each device's share of a region of `len` bytes on the
/// device's node: `shares[d]` is device `d`'s byte range, `nodes[d]` its node (`None`:
/// unknown, left to the kernel). Empty when the devices' known nodes are all one node (one
/// node: placement changes nothing).
pub fn numa_placement(shares: &[Range<usize>], nodes: &[Option<u32>]) -> Vec<(Range<usize>, u32)> {
    let known: Vec<u32> = nodes.iter().flatten().copied().collect();
    if known.windows(2).all(|w| w[0] == w[1]) && os::numa::nodes().len() < 2 {
        return Vec::new();
    }
    shares
        .iter()
        .zip(nodes)
        .filter_map(|(r, n)| n.map(|n| (r.clone(), n)))
        .collect()
}

/// Checks a region size: above zero and within the memory this process may still take
/// ([`os::host_room`]: `MemAvailable`, or the container's limit).
pub fn check_size(size: usize) -> Result<(), HostError> {
    if size == 0 {
        return Err(HostError::ZeroSize);
    }
    fits_room(size as u64, os::host_room())
}

/// `bytes` more resident bytes fit in `room` (`None`: unknown, so they do).
fn fits_room(bytes: u64, room: Option<os::HostRoom>) -> Result<(), HostError> {
    match room {
        Some(room) if bytes > room.bytes => Err(HostError::TooLarge {
            requested: bytes,
            room,
        }),
        _ => Ok(()),
    }
}

/// The largest allocation every device of `ctx` accepts.
pub(crate) fn smallest_max_alloc(ctx: &Context) -> usize {
    let smallest = ctx.devices().iter().map(|d| d.max_alloc).min();
    smallest.unwrap_or(ctx.device().max_alloc).max(1) as usize
}

/// `n` rounded down to whole pages (kept as it is below one page).
pub(super) fn round_to_pages(n: usize) -> usize {
    let page = os::page_size();
    if n < page {
        n
    } else {
        n / page * page
    }
}

/// Writes a chunk's data as it is made resident (its first write makes the pages resident,
/// so no separate touch is needed): called with the chunk's byte offset in the region and
/// its bytes, on the pinning thread, before the chunk is registered. It may use threads. Its
/// error (reading an input file, say) stops the pin like a failed registration, naming the
/// chunk.
pub type Fill = Arc<dyn Fn(usize, &mut [u8]) -> Result<(), String> + Send + Sync>;

/// How to pin progressively ([`PinOptions::progressive`]).
#[derive(Clone)]
pub struct Progressive {
    /// The block size of the stream that will read the region: every chunk is a whole number
    /// of blocks (a multiple of the page size; otherwise the region is pinned up front).
    pub block_bytes: usize,
    /// Optional data for each chunk, written as it is made resident ([`Fill`]).
    pub fill: Option<Fill>,
}

impl std::fmt::Debug for Progressive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progressive")
            .field("block_bytes", &self.block_bytes)
            .field("fill", &self.fill.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_room() {
        let room = os::HostRoom::smaller(Some(1 << 20), None);
        assert!(fits_room(1 << 20, room.clone()).is_ok());
        let e = fits_room((1 << 20) + 1, room).unwrap_err().to_string();
        assert!(
            e.contains("of host memory available now (MemAvailable)"),
            "{e}"
        );
        assert!(fits_room(u64::MAX, None).is_ok());
    }
}
