//! OpenCL's pinned host memory as the memory layer sees it: [`HostApi`] for [`OpenCl`], over
//! the backend's [`HostRegion`] (its strategies, registration and progressive pins).

use super::{
    ChunkPin, HostApi, HostError, HostRegion, PinKind, PinOffer, PinOptions, PinRequest, PinState,
    Pinned, RegisterOptions, RegisterRequest, SharedRegistration, Strategy, StrategyChoice,
};
use crate::backend::api::DeviceOf;
#[cfg(feature = "baselines")]
use crate::backend::native::NativeCopies;
use crate::backend::opencl::{Context, DeviceBuffer, DeviceInfo, OpenCl};
use crate::backend::pinning::CallerRange;
use crate::vram::VramProbe;
use std::time::Duration;

impl Pinned for HostRegion {
    fn pinning_name(&self) -> String {
        self.strategy().to_string()
    }

    fn reason(&self) -> String {
        HostRegion::reason(self).to_string()
    }

    fn places_pages(&self) -> bool {
        true
    }

    fn pin_state(&self) -> PinState {
        HostRegion::pin_state(self)
    }

    fn pin_time(&self) -> Duration {
        HostRegion::pin_time(self)
    }

    fn is_progressive(&self) -> bool {
        HostRegion::is_progressive(self)
    }

    fn chunk_pins(&self) -> (Vec<ChunkPin>, Option<String>) {
        HostRegion::chunk_pins(self)
    }

    fn shared_with(&self) -> Vec<SharedRegistration> {
        HostRegion::shared_with(self)
    }

    fn chunk_count(&self) -> usize {
        HostRegion::chunk_count(self)
    }

    fn is_contiguous(&self) -> bool {
        HostRegion::is_contiguous(self)
    }

    fn resident_time(&self) -> Option<Duration> {
        HostRegion::resident_time(self)
    }

    fn zero_copy(&self) -> Option<String> {
        HostRegion::zero_copy(self).map(|m| m.to_string())
    }
}

impl HostApi for OpenCl {
    type HostMemory = HostRegion;
    type Pinning = Strategy;
    type Details = DeviceInfo;

    fn vram(device: &DeviceOf<Self>) -> VramProbe {
        VramProbe::new(device.device())
    }

    fn pin(
        device: &DeviceOf<Self>,
        bytes: usize,
        request: PinRequest<'_, Self>,
    ) -> Result<HostRegion, HostError> {
        let opts = PinOptions {
            strategy: request
                .pinning
                .map_or(StrategyChoice::Auto, StrategyChoice::Forced),
            placement: request.placement,
            progressive: request.progressive,
            max_chunk: request.max_chunk,
            contiguous: request.contiguous,
            measure_vram: request.measure_vram,
            ..Default::default()
        };
        let mut region = HostRegion::new(device, bytes, &opts)?;
        // Every other device reads the region through a registration in its own context.
        for other in request.shared_with {
            region.register_with(other, request.measure_shared)?;
        }
        Ok(region)
    }

    /// The driver's own `clEnqueueWriteBuffer`, waited for each way a program can
    /// (`backend::opencl::raw_writes`), and its per-piece write/read loop
    /// (`backend::opencl::native`).
    #[cfg(feature = "baselines")]
    fn native_copies(device: &Context) -> Option<&dyn NativeCopies> {
        Some(device)
    }

    /// One `CL_MEM_USE_HOST_PTR` registration per chunk ([`HostRegion::register_range`]).
    fn register(
        device: &Context,
        range: CallerRange,
        request: RegisterRequest,
    ) -> Result<HostRegion, HostError> {
        let opts = RegisterOptions {
            max_chunk: request.max_chunk,
            measure_vram: request.measure_vram,
            ..RegisterOptions::default()
        };
        HostRegion::register_range(device, range, &opts)
    }

    fn up_front(device: &DeviceOf<Self>, pinning: Option<Strategy>) -> Option<String> {
        let s = match pinning {
            Some(s) => s,
            None => *super::auto_order_for(device.devices()).0.first()?,
        };
        super::up_front_with(s)
    }

    fn offer_on(device: &DeviceOf<Self>) -> PinOffer<Strategy> {
        Self::offer(device.device())
    }

    fn offer(adapter: &DeviceInfo) -> PinOffer<Strategy> {
        let (order, why) = super::auto_order(adapter);
        PinOffer {
            offered: Strategy::offered(adapter),
            lacking: Strategy::unavailable(adapter),
            default: order.first().copied(),
            why: why.to_string(),
        }
    }

    fn pin_kind(s: Strategy) -> PinKind {
        s.pin_kind()
    }

    fn driver_details(adapter: &DeviceInfo) -> Option<DeviceInfo> {
        Some(adapter.clone())
    }

    fn mapped_mechanism(adapter: &DeviceInfo) -> (Option<String>, String) {
        let (m, note) = super::ZeroCopy::report(adapter);
        (m.map(|m| m.to_string()), note)
    }

    fn mapped(device: &Context, bytes: usize, measure_vram: bool) -> Result<HostRegion, HostError> {
        HostRegion::mapped(device, bytes, measure_vram)
    }

    fn device_buffer(memory: &HostRegion) -> Result<DeviceBuffer, HostError> {
        memory.device_buffer()
    }
}
