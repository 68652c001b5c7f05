//! A test hook that makes one step of a stream fail as a driver would, so that tests can
//! provoke failures in the middle of a stream on any device.
//!
//! `PINSTREAM_INJECT_FAULT=STAGE:INDEX`, with STAGE one of `upload`, `kernel`, `download`
//! (INDEX is the block) or `alloc` (INDEX is the slot), fails that step with
//! `CL_OUT_OF_RESOURCES`. Unset, it costs one comparison per step.

use crate::backend::opencl::ClError;
use std::sync::OnceLock;

fn target() -> &'static Option<(String, usize)> {
    static TARGET: OnceLock<Option<(String, usize)>> = OnceLock::new();
    TARGET.get_or_init(|| {
        let v = std::env::var("PINSTREAM_INJECT_FAULT").ok()?;
        let (stage, index) = v.split_once(':')?;
        Some((stage.to_string(), index.parse().ok()?))
    })
}

/// Fails with the error `call` would give when the hook names `stage` and `index`.
pub(crate) fn check(stage: &str, index: usize, call: &'static str) -> Result<(), ClError> {
    match target() {
        Some((s, i)) if s == stage && *i == index => {
            tracing::warn!("PINSTREAM_INJECT_FAULT: failing {stage} {index} on purpose");
            Err(ClError::new(call, cl3::error_codes::CL_OUT_OF_RESOURCES))
        }
        _ => Ok(()),
    }
}
