//! What any API's pinning is asked for beyond its own ways: NUMA placement
//! ([`numa_placement`]), pinning as the stream goes ([`Progressive`], [`Fill`]), and the size
//! check every pin makes first ([`check_size`]).

use super::HostError;
use crate::backend::os;
use std::ops::Range;
use std::sync::Arc;

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

/// `n` rounded down to whole pages (kept as it is below one page).
pub(crate) fn round_to_pages(n: usize) -> usize {
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

/// How to pin progressively: the first chunk before the pin returns, the others on a
/// background thread while the stream runs (OpenCL's `PinOptions::progressive`, `HostApi`'s
/// `PinRequest::progressive`).
#[derive(Clone)]
pub struct Progressive {
    /// The block size of the stream that will read the region: every chunk is a whole number
    /// of blocks (a multiple of the page size; otherwise the memory is pinned up front).
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
