//! `psStrategy`: the C names of the pinning strategies, below both the calls that take one
//! (`api`) and the info that reports one (`info`).

use pinstream::host::Strategy;

/// How host memory was pinned: `PS_STRATEGY_AUTO` in flags asks pinstream to choose; the
/// others force one strategy (the names `PINSTREAM_STRATEGY` and the CLI's `--strategy` take).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum psStrategy {
    /// Chosen by driver and extensions (flags only; a block reports the strategy used).
    PS_STRATEGY_AUTO = 0,
    /// `register`: pinstream's pages, registered by never-mapped `CL_MEM_USE_HOST_PTR` buffers.
    PS_STRATEGY_REGISTER = 1,
    /// `nv-host`: `clCreateBufferNV` host memory (`cl_nv_create_buffer`), mapped.
    PS_STRATEGY_NV_HOST = 2,
    /// `intel-usm`: `clHostMemAllocINTEL` (`cl_intel_unified_shared_memory`).
    PS_STRATEGY_INTEL_USM = 3,
    /// `alloc-host-ptr`: classic `CL_MEM_ALLOC_HOST_PTR` buffers, mapped (costs VRAM on NVIDIA).
    PS_STRATEGY_ALLOC_HOST_PTR = 4,
    /// `svm`: coarse-grained `clSVMAlloc`, mapped (costs VRAM on NVIDIA).
    PS_STRATEGY_SVM = 5,
    /// `mlock`: locked pages the driver does not know (a baseline: not pinned for DMA).
    PS_STRATEGY_MLOCK = 6,
    /// `pageable`: plain memory (a baseline: not pinned).
    PS_STRATEGY_PAGEABLE = 7,
}

pub(crate) const STRATEGIES: [(psStrategy, Strategy); 7] = [
    (psStrategy::PS_STRATEGY_REGISTER, Strategy::Register),
    (psStrategy::PS_STRATEGY_NV_HOST, Strategy::NvHost),
    (psStrategy::PS_STRATEGY_INTEL_USM, Strategy::IntelUsm),
    (
        psStrategy::PS_STRATEGY_ALLOC_HOST_PTR,
        Strategy::AllocHostPtr,
    ),
    (psStrategy::PS_STRATEGY_SVM, Strategy::Svm),
    (psStrategy::PS_STRATEGY_MLOCK, Strategy::Mlock),
    (psStrategy::PS_STRATEGY_PAGEABLE, Strategy::Pageable),
];

/// The C code of a strategy (`PS_STRATEGY_AUTO` for none of them).
pub(crate) fn c_strategy(s: Strategy) -> psStrategy {
    STRATEGIES
        .iter()
        .find(|(_, x)| *x == s)
        .map_or(psStrategy::PS_STRATEGY_AUTO, |(c, _)| *c)
}
