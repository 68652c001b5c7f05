//! CUDA's pinned host memory as the memory layer sees it: [`HostApi`] for [`Cuda`], over
//! the backend's [`PinnedHost`].

use super::{HostApi, HostError, PinOffer, PinRequest, PinState, Pinned};
use crate::backend::cuda::{Cuda, CudaDeviceInfo, CudaPinning, DeviceMem, Gpu, PinnedHost};
use crate::backend::pinning::CallerRange;

impl Pinned for PinnedHost {
    fn pinning_name(&self) -> String {
        self.pinning().to_string()
    }

    fn reason(&self) -> String {
        match self.pinning() {
            CudaPinning::HostAlloc => "cuMemHostAlloc, as cudaMallocHost does".into(),
            CudaPinning::Register if !self.owns_memory() => {
                "the caller's memory registered with cuMemHostRegister, as cudaHostRegister does"
                    .into()
            }
            CudaPinning::Register => {
                "huge-page memory registered with cuMemHostRegister, as cudaHostRegister does"
                    .into()
            }
        }
    }

    fn places_pages(&self) -> bool {
        false
    }

    /// `cuMemHostAlloc` and `cuMemHostRegister` page-lock the memory for the device by
    /// their contract, or fail.
    fn pin_state(&self) -> PinState {
        PinState::Pinned
    }

    fn pin_time(&self) -> std::time::Duration {
        PinnedHost::pin_time(self)
    }

    fn zero_copy(&self) -> Option<String> {
        self.is_mapped().then(|| "cuda-host-alloc-mapped".into())
    }
}

impl HostApi for Cuda {
    type HostMemory = PinnedHost;
    type Pinning = CudaPinning;
    /// CUDA says of a device what every API says ([`crate::backend::adapter::AdapterInfo`]).
    type Details = crate::backend::details::NoDetails;

    fn vram(gpu: &Gpu) -> crate::vram::VramProbe {
        crate::vram::VramProbe::nvidia(&gpu.info().pci_address, &gpu.info().name)
    }

    fn pin(
        gpu: &Gpu,
        bytes: usize,
        request: PinRequest<'_, Self>,
    ) -> Result<PinnedHost, HostError> {
        super::check_size(bytes)?;
        // Several GPUs: pinned for every context, or the others read it as pageable.
        let portable = !request.shared_with.is_empty();
        let how = request.pinning.unwrap_or(CudaPinning::Register);
        gpu.pinned_for(bytes, how, portable)
            .map_err(|e| HostError::Backend(e.into()))
    }

    /// `cuMemHostRegister`, portable (pinned for every CUDA context of the process): one
    /// registration of any size, which costs no VRAM.
    fn register(
        gpu: &Gpu,
        range: CallerRange,
        _: super::RegisterRequest,
    ) -> Result<PinnedHost, HostError> {
        range.check()?;
        gpu.register(range, true)
            .map_err(|e| HostError::Backend(e.into()))
    }

    fn offer_on(gpu: &Gpu) -> PinOffer<CudaPinning> {
        Self::offer(gpu.info())
    }

    /// Both ways on every device: CUDA pins host memory for any of them.
    fn offer(_: &CudaDeviceInfo) -> PinOffer<CudaPinning> {
        let why = "pinstream's default through CUDA: the program's own huge-page memory registered with cuMemHostRegister, as cudaHostRegister does";
        PinOffer {
            offered: vec![CudaPinning::HostAlloc, CudaPinning::Register],
            lacking: Vec::new(),
            default: Some(CudaPinning::Register),
            why: why.into(),
        }
    }

    fn up_front(_: &Gpu, _: Option<CudaPinning>) -> Option<String> {
        Some("through CUDA (cuMemHostRegister pins the whole range at once)".into())
    }

    #[cfg(feature = "baselines")]
    fn native_copies(gpu: &Gpu) -> Option<&dyn crate::backend::native::NativeCopies> {
        Some(gpu)
    }

    /// `cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)`, as `cudaHostAlloc(...,
    /// cudaHostAllocMapped)`: host memory kernels read across the bus (UVA). Its VRAM
    /// cost is not measured here (the VRAM probe measures it around the caller's use).
    fn mapped(gpu: &Gpu, bytes: usize, _measure_vram: bool) -> Result<PinnedHost, HostError> {
        super::check_size(bytes)?;
        gpu.pinned_mapped(bytes)
            .map_err(|e| HostError::Backend(e.into()))
    }

    fn mapped_mechanism(_: &CudaDeviceInfo) -> (Option<String>, String) {
        let why = "cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP), as cudaHostAlloc(..., cudaHostAllocMapped): kernels read host memory across the bus (UVA), no VRAM copy";
        (Some("cuda-host-alloc-mapped".into()), why.into())
    }

    fn device_buffer(memory: &PinnedHost) -> Result<DeviceMem, HostError> {
        match memory.device_mem() {
            Ok(Some(buffer)) => Ok(buffer),
            Ok(None) => Err(HostError::NoZeroCopy {
                why: format!("this CUDA memory ({}) is not mapped: make it with cudaHostAllocMapped (mapped memory) to hand it to kernels", memory.pinning()),
            }),
            Err(e) => Err(HostError::Backend(e.into())),
        }
    }
}
