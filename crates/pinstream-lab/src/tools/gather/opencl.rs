//! The names OpenCL's rows of pinstream's batch copies (`ours`, its `Gather`) have always
//! had. OpenCL's own rows come from its `NativeCopies` (`pieces::native_rows`) and the peak
//! from `api::peak`, as every API's.

use super::ours::Names;

/// OpenCL's names of pinstream's rows (`Gather`'s calls).
pub(super) const NAMES: Names = Names {
    staged: [
        "Gather::upload_gather (pack, DMA, scatter kernel)",
        "Gather::download_scatter (gather kernel, DMA, unpack)",
    ],
    zero_copy: [
        "Gather::upload_gather_mapped (one kernel reads mapped memory)",
        "Gather::download_scatter_mapped (one kernel writes mapped memory)",
    ],
    vouched: [
        "Gather::upload_gather_mapped (one kernel reads mapped memory), disjointness vouched: no overlap check",
        "Gather::download_scatter_mapped (one kernel writes mapped memory), disjointness vouched: no overlap check",
    ],
};
