//! A strategy's failed allocation as the neutral [`HostError`].

use super::{HostError, Strategy};
use crate::backend::opencl::AllocError;
use crate::backend::os;

/// Strategy `s` could not pin `bytes`: `e` as it came.
pub(crate) fn alloc_failed(s: Strategy, bytes: usize, e: AllocError) -> HostError {
    HostError::Alloc {
        pinning: s.to_string(),
        kind: s.pin_kind(),
        bytes,
        source: e.into(),
    }
}

/// The memory layer's error for a failed allocation by strategy `s`: a failed `mlock` names
/// its limit.
pub(crate) fn alloc_error(s: Strategy, size: usize, e: AllocError) -> HostError {
    match e {
        AllocError::Lock { bytes, source } => HostError::Memlock {
            bytes,
            limit: os::memlock_limit(),
            source,
        },
        e => alloc_failed(s, size, e),
    }
}
