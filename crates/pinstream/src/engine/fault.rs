//! A test hook that makes one step of a stream fail as a driver would, so that tests can
//! provoke failures in the middle of a stream on any device, through any API.
//!
//! `PINSTREAM_INJECT_FAULT=STAGE:INDEX`, with STAGE one of `upload`, `kernel`, `download`
//! (INDEX is the block) or `alloc` (INDEX is the slot), fails that step with the API's
//! out-of-resources error (`CL_OUT_OF_RESOURCES`; CUDA: `CUDA_ERROR_OUT_OF_MEMORY`, or
//! `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` for a launch). Unset, it costs one comparison per step.
//! `chunk:K` fails the registration of chunk K of a progressive pin
//! (`host::PinOptions::progressive`; the memory layer reads it, being below the engine).
//! The stage `pin:BYTES` (a pin size ceiling, for `pinstream doctor`) is the backend's:
//! `backend/opencl/pin_ceiling.rs`.
//! A value the hook does not know (`upload`, `bogus:1`, `pin:abc`, `upload:-1`, not UTF-8)
//! is an error at the start of a stream or a pin ([`crate::backend::check_injected_fault`]),
//! never read as "no fault".

use crate::backend::api::{Api, Operation};

/// The hook's name of `op`.
fn stage(op: Operation) -> &'static str {
    match op {
        Operation::Allocate => "alloc",
        Operation::Upload => "upload",
        Operation::Launch => "kernel",
        Operation::Download => "download",
    }
}

/// Fails with the error `A` would give for `op` when the hook names `op` and `index`.
pub(crate) fn check<A: Api>(op: Operation, index: usize) -> Result<(), A::Error> {
    match crate::backend::injected_fault() {
        Some((s, i)) if s == stage(op) && i == index => {
            tracing::warn!("PINSTREAM_INJECT_FAULT: failing {s} {index} on purpose");
            Err(A::injected_fault(op))
        }
        _ => Ok(()),
    }
}
