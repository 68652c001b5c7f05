//! Pinned host memory for each API: the memory layer's extension of the backend's
//! [`Api`] ([`HostApi`]), and its implementation for the empty API (OpenCL's in `opencl`,
//! CUDA's in `cuda`, Vulkan's in `vulkan`). Each API's memory itself, with its strategies, registration
//! and progressive pins, lives in its backend (OpenCL's [`HostRegion`] in
//! `backend::opencl::host`); this layer says what any API's pinned memory offers, so that a
//! front written over `A: HostApi` finds devices, builds programs, pins or registers memory
//! and streams through any API.

use super::{ChunkPin, HostError, PinKind, PinState, Progressive, SharedRegistration};
use crate::backend::api::{AdapterOf, Api, Device, DeviceOf};
use crate::backend::details::{DriverDetails, NoDetails};
use crate::backend::empty::{Empty, HeapMemory};
use crate::backend::fault::{Faulty, OutOfResources};
use crate::backend::lanes::HostMemory;
#[cfg(feature = "baselines")]
use crate::backend::native::NativeCopies;
use crate::backend::pinning::CallerRange;
use crate::vram::VramProbe;
use std::fmt::{Debug, Display};
use std::ops::Range;
use std::time::Duration;

/// An API's pinned host memory: how to make it, and what it is.
pub trait HostApi: Api {
    /// Pinned host memory, which runs stream from and into.
    type HostMemory: HostMemory + Pinned + Send + Sync;
    /// A way this API pins memory (OpenCL: a [`Strategy`](super::Strategy); CUDA: `cuMemHostAlloc` or
    /// `cuMemHostRegister`).
    type Pinning: Copy + Eq + Debug + Display + Send + Sync + 'static;
    /// Every way `device` can pin, in the order a measurement walks them.
    fn pinnings(device: &DeviceOf<Self>) -> Vec<Self::Pinning> {
        Self::offer_on(device).offered
    }
    /// The counter of `device`'s memory in use (NVML, AMD's query, or none).
    fn vram(device: &DeviceOf<Self>) -> VramProbe;
    /// Pins `bytes` on `device` as `request` asks.
    fn pin(
        device: &DeviceOf<Self>,
        bytes: usize,
        request: PinRequest<'_, Self>,
    ) -> Result<Self::HostMemory, HostError>;
    /// Registers the caller's `range` with `device` so that it is pinned, as
    /// `cudaHostRegister` does, and gives this API's host memory over it: the memory is
    /// neither written nor zeroed, and dropping the result releases the registration and
    /// never frees it. Every API checks the range first ([`CallerRange::check`]: a null
    /// pointer, no bytes, unmapped memory, or memory registration does not really pin, such
    /// as a read-only mapping, are refused before any driver call), and says through
    /// [`Pinned::pin_state`] whether its driver really pinned it, never assumed (NVIDIA's
    /// OpenCL returns success for registrations it does not pin). Any alignment, on every
    /// API (Vulkan imports the whole pages of the driver's import alignment that the range
    /// touches).
    /// `request` bounds its chunks and asks for its VRAM cost, where the API has them.
    fn register(
        device: &DeviceOf<Self>,
        range: CallerRange,
        request: RegisterRequest,
    ) -> Result<Self::HostMemory, HostError>;
    /// Why a progressive pin ([`PinRequest::progressive`]) with `pinning` on `device` is made
    /// up front, or `None` where it goes chunk by chunk.
    fn up_front(device: &DeviceOf<Self>, pinning: Option<Self::Pinning>) -> Option<String>;
    /// The pinning [`Self::pin`] chooses on `device` when asked for none (OpenCL: `auto`'s
    /// first choice), and why; `None` where it has none to choose.
    fn default_pinning(device: &DeviceOf<Self>) -> (Option<Self::Pinning>, String) {
        let offer = Self::offer_on(device);
        (offer.default, offer.why)
    }
    /// What `adapter` offers for pinning, asked without opening it (for listings): the ways
    /// it offers, those this API knows but it lacks, and the one [`Self::pin`] chooses when
    /// asked for none, each with why.
    fn offer(adapter: &AdapterOf<Self>) -> PinOffer<Self::Pinning>;
    /// The same of an opened `device`, as [`Self::offer`] says it of the device's adapter:
    /// [`Self::pinnings`], [`Self::lacking`] and [`Self::default_pinning`] read it.
    fn offer_on(device: &DeviceOf<Self>) -> PinOffer<Self::Pinning>;
    /// The ways to pin this API knows but `device` does not offer, each with why (for
    /// listings, and to refuse one asked for by name).
    fn lacking(device: &DeviceOf<Self>) -> Vec<(Self::Pinning, String)> {
        Self::offer_on(device).lacking
    }
    /// How memory pinned by `pinning` reaches the device (for verdicts and for which limit
    /// stops a pin). The default: pinned by the driver.
    fn pin_kind(pinning: Self::Pinning) -> PinKind {
        let _ = pinning;
        PinKind::Driver
    }
    /// What the API's driver says of a device beyond [`crate::backend::adapter::AdapterInfo`]
    /// (OpenCL: [`DeviceInfo`](crate::backend::opencl::DeviceInfo), its platform, versions, extensions and copy engines;
    /// [`NoDetails`] where the API says no more), for listings and reports, which keep it as
    /// [`crate::backend::details::Details`] whatever the API.
    type Details: DriverDetails;
    /// What the API's driver says of `adapter` ([`Self::Details`]); `None` (the default) where
    /// the API says nothing more.
    fn driver_details(adapter: &AdapterOf<Self>) -> Option<Self::Details> {
        let _ = adapter;
        None
    }
    /// The API's own copy calls on `device`, which benches time beside pinstream's path
    /// ([`crate::backend::native`]); `None` where the API has none beyond its queues.
    #[cfg(feature = "baselines")]
    fn native_copies(device: &DeviceOf<Self>) -> Option<&dyn NativeCopies> {
        let _ = device;
        None
    }
    /// Mapped pinned memory of `bytes` on `device` (`cudaHostAlloc(..., cudaHostAllocMapped)`),
    /// which kernels read and write in place through [`Self::device_buffer`]; with
    /// `measure_vram`, its VRAM cost is measured. The default: refused
    /// ([`HostError::NoZeroCopy`]), for an API pinstream has no mapped memory through.
    fn mapped(
        device: &DeviceOf<Self>,
        bytes: usize,
        measure_vram: bool,
    ) -> Result<Self::HostMemory, HostError> {
        let _ = (device, bytes, measure_vram);
        Err(no_mapped_memory::<Self>())
    }
    /// The buffer over the whole of `memory` that kernels read and write in place
    /// (`cudaHostGetDevicePointer`), for memory made by [`Self::mapped`]. The default:
    /// refused, as [`Self::mapped`] is.
    fn device_buffer(memory: &Self::HostMemory) -> Result<Self::Buffer, HostError> {
        let _ = memory;
        Err(no_mapped_memory::<Self>())
    }
    /// For listings: the mechanism [`Self::mapped`] uses on `adapter` and its basis, or
    /// `None` and why there is none. The default: none, as [`Self::mapped`] refuses.
    fn mapped_mechanism(adapter: &AdapterOf<Self>) -> (Option<String>, String) {
        let _ = adapter;
        (None, no_mapped_memory::<Self>().to_string())
    }
    /// The largest mapped memory ([`Self::mapped`]) whose [`Self::device_buffers`] a kernel
    /// reaches all of: one buffer's limit (the default, [`Device::max_alloc`]), or none where
    /// the memory comes in chunks of one binding each (Vulkan).
    fn largest_mapped(device: &DeviceOf<Self>) -> u64 {
        device.max_alloc()
    }
    /// Whether [`Self::device_buffer`], one buffer, can cover mapped memory of `bytes` on
    /// `device`, asked before anything is allocated: refused as the buffer would be
    /// ([`HostError::MappedTooLarge`] above [`Device::max_alloc`], the default).
    fn one_buffer_covers(device: &DeviceOf<Self>, bytes: usize) -> Result<(), HostError> {
        let max_alloc = usize::try_from(device.max_alloc()).unwrap_or(usize::MAX);
        match bytes > max_alloc {
            true => Err(HostError::MappedTooLarge { bytes, max_alloc }),
            false => Ok(()),
        }
    }
    /// The buffers kernels read and write `memory` through in place, each with the bytes of
    /// `memory` it covers, in order: several where one buffer (one kernel binding) cannot
    /// cover it all (Vulkan: `maxStorageBufferRange`), for memory made by [`Self::mapped`].
    /// The default: the one [`Self::device_buffer`].
    fn device_buffers(memory: &Self::HostMemory) -> Result<DeviceBuffers<Self::Buffer>, HostError> {
        Ok(vec![(0..memory.len(), Self::device_buffer(memory)?)])
    }
}

/// Buffers over mapped memory, each with the bytes of the memory it covers, in order
/// ([`HostApi::device_buffers`]).
pub type DeviceBuffers<B> = Vec<(Range<usize>, B)>;

/// The refusal of an API pinstream has no mapped memory through.
fn no_mapped_memory<A: Api>() -> HostError {
    HostError::NoZeroCopy {
        why: format!(
            "pinstream makes no mapped memory through {} (OpenCL, CUDA and Vulkan have it)",
            A::NAME
        ),
    }
}

/// What a device offers for pinning ([`HostApi::offer`]).
#[derive(Debug, Clone)]
pub struct PinOffer<P> {
    /// Every way it offers, in the order a measurement walks them.
    pub offered: Vec<P>,
    /// The ways the API knows but the device does not offer, each with why.
    pub lacking: Vec<(P, String)>,
    /// The way [`HostApi::pin`] chooses when asked for none, where there is one.
    pub default: Option<P>,
    /// Why that one (or why none).
    pub why: String,
}

/// What [`HostApi::pin`] is asked for.
pub struct PinRequest<'a, A: HostApi> {
    /// The way to pin; `None`: the API's own choice (OpenCL: `auto`).
    pub pinning: Option<A::Pinning>,
    /// Other devices that stream from or into the memory too.
    pub shared_with: &'a [&'a DeviceOf<A>],
    /// NUMA placement ([`super::numa_placement`]); empty: the kernel's default. Only OpenCL
    /// places pages; other APIs ignore it ([`Pinned::places_pages`] says which).
    pub placement: Vec<(Range<usize>, u32)>,
    /// Pin as the stream goes, where the API can ([`Progressive`]); others pin up front.
    pub progressive: Option<Progressive>,
    /// Measure the VRAM cost of the memory's registration with each device of
    /// [`Self::shared_with`], where the API registers it per device
    /// ([`Pinned::shared_with`]).
    pub measure_shared: bool,
    /// The largest chunk the memory is made of, where the API makes it of chunks (OpenCL,
    /// Vulkan); `None`: the API's own limit.
    pub max_chunk: Option<usize>,
    /// One contiguous range (a C caller's one pointer): a pinning that would give pieces is
    /// refused ([`HostError::NotContiguous`]) instead.
    pub contiguous: bool,
    /// Measure the memory's VRAM cost where the API can (OpenCL; [`Pinned`] reports it).
    pub measure_vram: bool,
}

/// What [`HostApi::register`] is asked for, beyond the range.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegisterRequest {
    /// The largest chunk a registration covers, where the API registers in chunks (OpenCL,
    /// Vulkan); `None`: the API's own limit.
    pub max_chunk: Option<usize>,
    /// Measure the registration's VRAM cost where the API can (OpenCL).
    pub measure_vram: bool,
}

impl<A: HostApi> Default for PinRequest<'_, A> {
    fn default() -> Self {
        PinRequest {
            pinning: None,
            shared_with: &[],
            placement: Vec::new(),
            progressive: None,
            measure_shared: false,
            max_chunk: None,
            contiguous: false,
            measure_vram: false,
        }
    }
}

/// What pinned host memory says of itself.
pub trait Pinned {
    /// How it was pinned (a strategy's or call's name).
    fn pinning_name(&self) -> String;
    /// Why it was pinned that way.
    fn reason(&self) -> String;
    /// True where the API honours [`PinRequest::placement`].
    fn places_pages(&self) -> bool;
    /// Whether the driver pinned it for DMA, never assumed. The default:
    /// [`PinState::Unknown`], not claimed.
    fn pin_state(&self) -> PinState {
        PinState::Unknown
    }
    /// Wall time it took to pin (a progressive pin: its first chunk; see
    /// [`Self::chunk_pins`]).
    fn pin_time(&self) -> Duration;
    /// True for memory pinned as the stream goes ([`PinRequest::progressive`]).
    fn is_progressive(&self) -> bool {
        false
    }
    /// A progressive pin's chunks, each as the driver pinned it, and the failure that
    /// stopped the others; empty for memory pinned up front.
    fn chunk_pins(&self) -> (Vec<ChunkPin>, Option<String>) {
        (Vec::new(), None)
    }
    /// Its registration with each other device of [`PinRequest::shared_with`], where the API
    /// registers it per device; empty where it pins once for every device.
    fn shared_with(&self) -> Vec<SharedRegistration> {
        Vec::new()
    }
    /// Driver allocations or registrations it is made of. The default: one.
    fn chunk_count(&self) -> usize {
        1
    }
    /// True when it is one contiguous range. The default: true.
    fn is_contiguous(&self) -> bool {
        true
    }
    /// Of [`Self::pin_time`], the part spent making pages resident, where the memory is
    /// made resident before it is pinned (OpenCL's `register`, `mlock`, `pageable`).
    fn resident_time(&self) -> Option<Duration> {
        None
    }
    /// For mapped memory (kernels read and write it in place), the mechanism's name
    /// ([`super::ZeroCopy`]); `None` (the default) for memory kernels cannot use.
    fn zero_copy(&self) -> Option<String> {
        None
    }
}

/// The empty API's only way to "pin": a plain heap vector, which it needs no more than.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap;

impl Display for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("heap")
    }
}

impl Pinned for HeapMemory {
    fn pinning_name(&self) -> String {
        Heap.to_string()
    }

    fn reason(&self) -> String {
        "the empty API's devices are host memory: nothing to pin".into()
    }

    fn pin_time(&self) -> Duration {
        Duration::ZERO
    }

    fn places_pages(&self) -> bool {
        false
    }

    fn pin_state(&self) -> PinState {
        PinState::NotNeeded
    }
}

/// The empty API's one way, on every device.
fn heap_offer() -> PinOffer<Heap> {
    PinOffer {
        offered: vec![Heap],
        lacking: Vec::new(),
        default: Some(Heap),
        why: "the empty API's only way".into(),
    }
}

impl HostApi for Empty {
    type HostMemory = HeapMemory;
    type Pinning = Heap;
    type Details = NoDetails;

    fn vram(_: &DeviceOf<Self>) -> VramProbe {
        VramProbe::none("the empty API has no device memory to count")
    }

    fn pin(
        _: &DeviceOf<Self>,
        bytes: usize,
        _: PinRequest<'_, Self>,
    ) -> Result<HeapMemory, HostError> {
        super::check_size(bytes)?;
        Ok(HeapMemory(vec![0; bytes]))
    }

    /// Checks the range as every API does, then refuses it: the empty API's memory is a
    /// heap vector of its own, so it has no way to hold the caller's.
    fn register(
        _: &DeviceOf<Self>,
        range: CallerRange,
        _: RegisterRequest,
    ) -> Result<HeapMemory, HostError> {
        range.check()?;
        Err(HostError::Backend(Empty::no_registration().into()))
    }

    fn up_front(_: &DeviceOf<Self>, _: Option<Heap>) -> Option<String> {
        Some("on the empty API (its heap vector is made whole)".into())
    }

    fn offer(_: &AdapterOf<Self>) -> PinOffer<Heap> {
        heap_offer()
    }

    fn offer_on(_: &DeviceOf<Self>) -> PinOffer<Heap> {
        heap_offer()
    }
}

/// `A` with a fault injected ([`Faulty`]) pins as `A` does: pinning is no command of a device
/// and counts nothing.
impl<A: HostApi> HostApi for Faulty<A>
where
    A::Error: OutOfResources,
{
    type HostMemory = A::HostMemory;
    type Pinning = A::Pinning;
    type Details = A::Details;

    fn vram(device: &DeviceOf<Self>) -> VramProbe {
        A::vram(device.inner())
    }

    fn pin(
        device: &DeviceOf<Self>,
        bytes: usize,
        request: PinRequest<'_, Self>,
    ) -> Result<A::HostMemory, HostError> {
        let others: Vec<&DeviceOf<A>> = request.shared_with.iter().map(|d| d.inner()).collect();
        let request = PinRequest {
            pinning: request.pinning,
            shared_with: &others,
            placement: request.placement,
            progressive: request.progressive,
            measure_shared: request.measure_shared,
            max_chunk: request.max_chunk,
            contiguous: request.contiguous,
            measure_vram: request.measure_vram,
        };
        A::pin(device.inner(), bytes, request)
    }

    fn register(
        device: &DeviceOf<Self>,
        range: CallerRange,
        request: RegisterRequest,
    ) -> Result<A::HostMemory, HostError> {
        A::register(device.inner(), range, request)
    }

    fn up_front(device: &DeviceOf<Self>, pinning: Option<A::Pinning>) -> Option<String> {
        A::up_front(device.inner(), pinning)
    }

    fn offer_on(device: &DeviceOf<Self>) -> PinOffer<A::Pinning> {
        A::offer_on(device.inner())
    }

    fn pin_kind(pinning: A::Pinning) -> PinKind {
        A::pin_kind(pinning)
    }

    fn driver_details(adapter: &AdapterOf<Self>) -> Option<A::Details> {
        A::driver_details(adapter.inner())
    }

    fn offer(adapter: &AdapterOf<Self>) -> PinOffer<A::Pinning> {
        A::offer(adapter.inner())
    }

    #[cfg(feature = "baselines")]
    fn native_copies(device: &DeviceOf<Self>) -> Option<&dyn NativeCopies> {
        A::native_copies(device.inner())
    }

    fn mapped(
        device: &DeviceOf<Self>,
        bytes: usize,
        measure_vram: bool,
    ) -> Result<A::HostMemory, HostError> {
        A::mapped(device.inner(), bytes, measure_vram)
    }

    fn device_buffer(memory: &A::HostMemory) -> Result<A::Buffer, HostError> {
        A::device_buffer(memory)
    }

    fn device_buffers(memory: &A::HostMemory) -> Result<Vec<(Range<usize>, A::Buffer)>, HostError> {
        A::device_buffers(memory)
    }

    fn largest_mapped(device: &DeviceOf<Self>) -> u64 {
        A::largest_mapped(device.inner())
    }

    fn one_buffer_covers(device: &DeviceOf<Self>, bytes: usize) -> Result<(), HostError> {
        A::one_buffer_covers(device.inner(), bytes)
    }

    fn mapped_mechanism(adapter: &AdapterOf<Self>) -> (Option<String>, String) {
        A::mapped_mechanism(adapter.inner())
    }
}
