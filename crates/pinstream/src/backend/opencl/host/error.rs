//! OpenCL's failures as the neutral [`HostError`]: a strategy by its name, a failed call or
//! allocation as a [`BackendError`].

use super::Strategy;
use crate::backend::api::Api;
use crate::backend::error::{BackendError, ErrorKind};
use crate::backend::opencl::{AllocError, ClError, OpenCl};
use crate::backend::os;
use crate::backend::pinning::HostError;

impl From<ClError> for HostError {
    fn from(e: ClError) -> Self {
        HostError::Backend(e.into())
    }
}

/// A raw allocation's failure as the backend's error: an OpenCL call's as that call's, one
/// before any call (an empty `call`, code 0) with its own text, and `Unsupported` where the
/// platform lacks the function.
impl From<AllocError> for BackendError {
    fn from(e: AllocError) -> Self {
        let kind = match &e {
            AllocError::Cl(cl) => return cl.clone().into(),
            AllocError::Missing(_) => ErrorKind::Unsupported,
            AllocError::Map { .. } | AllocError::Lock { .. } | AllocError::Populate { .. } => {
                ErrorKind::OutOfMemory
            }
            AllocError::Fill(_) => ErrorKind::Other,
        };
        BackendError {
            api: OpenCl::NAME,
            call: "",
            code: 0,
            message: e.to_string(),
            kind,
        }
    }
}

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
