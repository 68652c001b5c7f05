//! Registration of memory the caller owns with OpenCL (`cudaHostRegister`'s counterpart):
//! the region over it. Which ranges can be registered is API-neutral
//! ([`crate::backend::pinning::check_registrable`]).

use super::pin::{measure, pin_state, VramCost};
use super::region::PinRecord;
use super::{alloc_failed, smallest_max_alloc, Chosen, HostRegion, Strategy, StrategyReason};
use crate::backend::opencl::hostmem::HostAlloc;
use crate::backend::opencl::Context;
use crate::backend::os::cores;
use crate::backend::pinning::{round_to_pages, CallerRange, HostError};
use std::time::Instant;

/// How [`HostRegion::register`] registers the caller's memory.
#[derive(Debug, Clone, Default)]
pub struct RegisterOptions {
    /// Largest registration; defaults to (and is capped at) the
    /// smallest `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of the context's devices.
    pub max_chunk: Option<usize>,
    /// Threads that register chunks at once; default: all cores.
    pub threads: Option<usize>,
    /// Measure the VRAM cost (NVML, AMD's free-memory query) around the registration.
    pub measure_vram: bool,
}

impl HostRegion {
    /// Registers `len` bytes of memory the caller owns at `ptr`, as `cudaHostRegister` does:
    /// never-mapped `CL_MEM_USE_HOST_PTR` buffers of at most [`RegisterOptions::max_chunk`]
    /// bytes cover the range, which is neither written nor zeroed. Any alignment works
    /// (`malloc`'d, `mmap`'d, part of a larger allocation). Dropping the region releases the
    /// buffers (waiting for its own transfers first) and never frees the memory.
    ///
    /// Ranges that the NVIDIA driver would accept without pinning are refused before any
    /// registration, on every driver: read-only mappings and shared mappings of disk files
    /// ([`HostError::NotPinnable`]), and addresses nothing maps ([`HostError::Unmapped`]).
    /// Writable private mappings (of anything) and writable shared memory (tmpfs, `memfd`,
    /// `/dev/shm`) are registered. Registration faults the range's pages in, so the pages not
    /// resident now must fit in the memory the process may still take (`MemAvailable`, or its
    /// container's limit): more is [`HostError::RegisterTooLarge`], before anything is touched.
    ///
    /// This does not track other regions: registering a range twice is for a caller such as
    /// the C library to prevent.
    ///
    /// # Safety
    /// - `ptr..ptr + len` must stay mapped, and must not be freed or unmapped, until the
    ///   returned region has been dropped.
    /// - The region's accessors and transfers read and write that memory: while they run, the
    ///   caller must not access it in a way that races them (as for any memory handed to a
    ///   transfer in flight).
    /// - Pages never written are faulted in writable first, without changing them
    ///   ([`crate::backend::os::populate_write`] says why); other threads may go on writing
    ///   the range meanwhile.
    pub unsafe fn register(
        ctx: &Context,
        ptr: *mut u8,
        len: usize,
        opts: &RegisterOptions,
    ) -> Result<Self, HostError> {
        // SAFETY: this function's contract is `CallerRange::new`'s.
        let range = unsafe { CallerRange::new(ptr, len) };
        Self::register_range(ctx, range, opts)
    }

    /// [`Self::register`] over a [`CallerRange`], whose constructor carries the contract
    /// (the path `HostApi::register` takes).
    pub fn register_range(
        ctx: &Context,
        range: CallerRange,
        opts: &RegisterOptions,
    ) -> Result<Self, HostError> {
        crate::backend::check_injected_fault()?;
        range.check()?;
        let (ptr, len) = (range.ptr(), range.len());
        let max_alloc = smallest_max_alloc(ctx);
        let chunk = opts.max_chunk.unwrap_or(max_alloc).clamp(1, max_alloc);
        let chunk = round_to_pages(chunk);
        let threads = opts.threads.unwrap_or_else(cores);
        let begin = Instant::now();
        // SAFETY: `CallerRange::new`'s contract keeps the range mapped until the region, which
        // owns the registrations, is dropped.
        let register = || unsafe { HostAlloc::registered(ctx, ptr, len, chunk, threads) };
        let (made, vram) = if opts.measure_vram {
            measure(ctx.devices(), register)
        } else {
            (register(), VramCost::NotMeasured)
        };
        let alloc = made.map_err(|e| alloc_failed(Strategy::Register, len, e))?;
        let (pin, pin_note) = pin_state(Strategy::Register, ctx.devices());
        Ok(HostRegion::from_alloc(
            alloc,
            PinRecord {
                len,
                strategy: Strategy::Register,
                reason: StrategyReason::new(Chosen::Registered),
                pin_time: begin.elapsed(),
                pin,
                pin_note,
                vram,
                owned: false,
            },
        ))
    }
}
