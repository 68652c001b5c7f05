//! `psHostInfo`: what `psHostGetInfo` reports about a range.

use crate::registry::{Block, Kind};
use crate::strategy::{c_strategy, psStrategy};
use pinstream::host::HostRegion;
use pinstream::host::{PinState, VramCost};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Whether the driver pinned a range for DMA.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum psPinState {
    /// Not pinned: a baseline strategy (`mlock`, `pageable`).
    PS_PIN_NOT_PINNED = 0,
    /// Pinned for DMA by every GPU of the context, by a mechanism measured or documented to pin
    /// on that driver (`pin_note` says which).
    PS_PIN_PINNED = 1,
    /// The driver accepted the mechanism, but pinstream has no measurement or driver source
    /// showing that this driver pins it: not claimed.
    PS_PIN_UNKNOWN = 2,
    /// The context has CPU devices only (PoCL): host memory is their memory, nothing to pin.
    PS_PIN_NOT_NEEDED = 3,
}

/// How a range came to pinstream.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum psHostKind {
    /// Allocated by `psHostAlloc` (release with `psHostFree`).
    PS_HOST_ALLOCATED = 1,
    /// The caller's memory, registered by `psHostRegister` (release with `psHostUnregister`).
    PS_HOST_REGISTERED = 2,
}

/// Bytes of each text field of `psHostInfo`, the terminating NUL included (longer text is cut).
pub const PS_HOST_INFO_TEXT: usize = 256;

/// What `psHostGetInfo` reports about one range. Plain data: the caller owns its copy.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psHostInfo {
    /// Start of the range (the pointer `psHostAlloc` returned or `psHostRegister` was given).
    pub base: *mut c_void,
    /// Length of the range in bytes.
    pub bytes: usize,
    /// Allocated or registered.
    pub kind: psHostKind,
    /// The strategy that pinned it (never `PS_STRATEGY_AUTO`).
    pub strategy: psStrategy,
    /// 1 only when `pin_state` is `PS_PIN_PINNED`; else 0.
    pub pinned: c_int,
    /// Whether the driver pinned it, and on what basis (`pin_note`).
    pub pin_state: psPinState,
    /// Registration chunks or driver allocations underneath.
    pub chunk_count: usize,
    /// The largest chunk in bytes.
    pub chunk_bytes: usize,
    /// The first chunk in bytes. Chunk `k >= 1` starts at
    /// `base + first_chunk_bytes + (k - 1) * chunk_bytes`, and the last ends the range. On
    /// NVIDIA a transfer that crosses a chunk boundary runs at pageable speed: split
    /// transfers there (one chunk, the usual case below the device's max allocation, has
    /// none).
    pub first_chunk_bytes: usize,
    /// Devices of the context the range serves.
    pub device_count: c_uint,
    /// 1 when `vram_cost_bytes` was measured; else 0 and `vram_note` says why not.
    pub vram_cost_known: c_int,
    /// Device memory in use after pinning minus before, summed over the context's devices.
    pub vram_cost_bytes: i64,
    /// Seconds it took to allocate and pin (or register).
    pub pin_seconds: f64,
    /// The strategy's name (`register`, `nv-host`, ...), NUL-terminated.
    pub strategy_name: [c_char; 32],
    /// Why this strategy (forced by flags or `PINSTREAM_STRATEGY`, or `auto`'s reasoning).
    pub reason: [c_char; PS_HOST_INFO_TEXT],
    /// The basis of `pin_state`: the measurement or driver source behind a pin, or why none.
    pub pin_note: [c_char; PS_HOST_INFO_TEXT],
    /// The VRAM counter used, or why the cost is unknown.
    pub vram_note: [c_char; PS_HOST_INFO_TEXT],
    /// 1 for mapped memory (`PS_HOST_ALLOC_MAPPED`: kernels read and write it in place through
    /// `psHostGetDeviceBuffer`'s buffer); else 0.
    pub mapped: c_int,
    /// For mapped memory, how its buffer stays in host memory (`nv-host`, `cpu-heap`,
    /// `amd-alloc-host-ptr`, `intel-use-host-ptr`; `reason` says on what basis); else empty.
    pub zero_copy: [c_char; 32],
}

/// Copies `text` into `out`, cut at a character boundary to fit, NUL-terminated.
pub(crate) fn put<const N: usize>(out: &mut [c_char; N], text: &str) {
    let mut n = text.len().min(N - 1);
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    for (o, b) in out.iter_mut().zip(text.as_bytes()[..n].iter()) {
        *o = *b as c_char;
    }
    out[n] = 0;
}

fn c_pin(state: PinState) -> psPinState {
    match state {
        PinState::Pinned => psPinState::PS_PIN_PINNED,
        PinState::NotPinned => psPinState::PS_PIN_NOT_PINNED,
        PinState::NotNeeded => psPinState::PS_PIN_NOT_NEEDED,
        _ => psPinState::PS_PIN_UNKNOWN,
    }
}

/// The description of `block`.
pub(crate) fn fill_info(block: &Block<HostRegion>) -> psHostInfo {
    let r = &block.host;
    let (known, cost, vram_note) = match r.vram_cost() {
        VramCost::Measured { bytes, source } => (1, *bytes, source.clone()),
        VramCost::Unknown { why } => (0, 0, format!("unknown: {why}")),
        VramCost::NotMeasured => (0, 0, "not measured".into()),
    };
    let mut info = psHostInfo {
        base: r.as_ptr().map_or(std::ptr::null_mut(), |p| p.cast()),
        bytes: r.len(),
        kind: match block.kind {
            Kind::Allocated => psHostKind::PS_HOST_ALLOCATED,
            Kind::Registered => psHostKind::PS_HOST_REGISTERED,
        },
        strategy: c_strategy(r.strategy()),
        pinned: c_int::from(r.pin_state().is_pinned()),
        pin_state: c_pin(r.pin_state()),
        chunk_count: r.chunk_count(),
        chunk_bytes: r.chunk_ranges().iter().map(|c| c.len()).max().unwrap_or(0),
        first_chunk_bytes: r.chunk_ranges().first().map_or(0, |c| c.len()),
        device_count: block.devices as c_uint,
        vram_cost_known: known,
        vram_cost_bytes: cost,
        pin_seconds: r.pin_time().as_secs_f64(),
        strategy_name: [0; 32],
        reason: [0; PS_HOST_INFO_TEXT],
        pin_note: [0; PS_HOST_INFO_TEXT],
        vram_note: [0; PS_HOST_INFO_TEXT],
        mapped: c_int::from(r.is_mapped()),
        zero_copy: [0; 32],
    };
    put(&mut info.zero_copy, r.zero_copy().map_or("", |m| m.name()));
    put(&mut info.strategy_name, r.strategy().name());
    put(&mut info.reason, &block.note);
    put(&mut info.pin_note, r.pin_note());
    put(&mut info.vram_note, &vram_note);
    info
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_is_cut_at_a_character_boundary_and_terminated() {
        let mut out = [1 as std::ffi::c_char; 6];
        super::put(&mut out, "abcdé!");
        assert_eq!(out.map(|c| c as u8), *b"abcd\0\x01");
        super::put(&mut out, "ab");
        assert_eq!(
            &out[..3].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"ab\0"
        );
    }
}
