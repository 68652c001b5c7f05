//! Mapped regions ([`HostRegion::mapped`]): pinned host memory with one buffer over it that
//! kernels read and write in place (`cudaHostAlloc(..., cudaHostAllocMapped)` and
//! `cudaHostGetDevicePointer`).

use super::{HostRegion, PinRecord};
use crate::backend::opencl::host::{
    alloc_error, pin, smallest_max_alloc, Chosen, Strategy, StrategyReason, VramCost, ZeroCopy,
};
use crate::backend::opencl::hostmem::HostAlloc;
use crate::backend::opencl::zerocopy::{Backing, ZeroCopyAlloc};
use crate::backend::opencl::{Context, DeviceBuffer};
use crate::backend::pinning::{check_size, HostError};
use std::time::Instant;

/// The strategy a mapped region reports, and how its buffer is made, for each mechanism.
fn made_by(m: ZeroCopy) -> (Strategy, Backing) {
    match m {
        ZeroCopy::NvHost => (Strategy::NvHost, Backing::NvHost),
        ZeroCopy::CpuHeap | ZeroCopy::AmdAllocHostPtr => {
            (Strategy::AllocHostPtr, Backing::AllocHostPtr)
        }
        ZeroCopy::IntelUseHostPtr => (Strategy::Register, Backing::UseHostPtr),
    }
}

impl HostRegion {
    /// Mapped pinned memory of `size` bytes (`cudaHostAlloc(..., cudaHostAllocMapped)`):
    /// one contiguous range, with one buffer over the whole of it that kernels read and write
    /// in place, across the bus ([`Self::device_buffer`]). The mechanism is chosen per driver
    /// ([`ZeroCopy::for_devices`]); a driver with none is refused
    /// ([`HostError::NoZeroCopy`]), and so is a size above the devices' largest buffer
    /// ([`HostError::MappedTooLarge`]). With `measure_vram`, its VRAM cost is measured.
    ///
    /// OpenCL leaves a kernel's use of a buffer that is mapped undefined in general; on the
    /// drivers [`ZeroCopy`] lists, the map returns the buffer's own host memory, which is what
    /// makes the memory zero-copy: the host's writes are seen by kernels enqueued after them,
    /// and a kernel's writes by the host once the kernel's event is complete.
    pub fn mapped(ctx: &Context, size: usize, measure_vram: bool) -> Result<Self, HostError> {
        crate::backend::check_injected_fault()?;
        check_size(size)?;
        let mechanism =
            ZeroCopy::for_devices(ctx.devices()).map_err(|why| HostError::NoZeroCopy { why })?;
        let max_alloc = smallest_max_alloc(ctx);
        if size > max_alloc {
            return Err(HostError::MappedTooLarge {
                bytes: size,
                max_alloc,
            });
        }
        let (strategy, backing) = made_by(mechanism);
        let start = Instant::now();
        let make = || ZeroCopyAlloc::new(ctx, size, backing);
        let (made, vram) = if measure_vram {
            pin::measure(ctx.devices(), make)
        } else {
            (make(), VramCost::NotMeasured)
        };
        let alloc = made.map_err(|e| alloc_error(strategy, size, e))?;
        let (pin, pin_note) = pin::pin_state(strategy, ctx.devices());
        let record = PinRecord {
            len: size,
            strategy,
            reason: StrategyReason::new(Chosen::Mapped(mechanism)),
            pin_time: start.elapsed(),
            pin,
            pin_note,
            vram,
            owned: true,
        };
        let mut region = Self::from_alloc(HostAlloc::ZeroCopy(alloc), record);
        region.zero_copy = Some(mechanism);
        Ok(region)
    }

    /// How kernels reach this memory in place, for mapped memory; `None` otherwise.
    pub fn zero_copy(&self) -> Option<ZeroCopy> {
        self.zero_copy
    }

    /// True for mapped memory ([`Self::mapped`]).
    pub fn is_mapped(&self) -> bool {
        self.zero_copy.is_some()
    }

    /// The buffer over the whole of mapped memory, which kernels read and write in place
    /// (`cudaHostGetDevicePointer`): byte `o` of the region is byte `o` of the buffer. It is
    /// a new reference, so the memory the kernels see stays alive while it is held, after
    /// the region is dropped too (the host's pointers do not). Memory that is not mapped is
    /// refused ([`HostError::NotMapped`]): a `register` buffer given to a kernel is copied
    /// into VRAM on discrete GPUs.
    pub fn device_buffer(&self) -> Result<DeviceBuffer, HostError> {
        match &self._alloc {
            HostAlloc::ZeroCopy(z) => Ok(DeviceBuffer {
                mem: z.mem().retained()?,
            }),
            _ => Err(HostError::NotMapped {
                pinning: self.strategy.to_string(),
            }),
        }
    }
}
