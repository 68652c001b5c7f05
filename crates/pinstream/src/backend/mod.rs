//! Backend layer: the only place with raw handles and `unsafe`.
//!
//! [`api`] is the seam the engine sees (an [`api::Api`] per compute API); [`lanes`] is the
//! safe layer over it; [`error::BackendError`] is the one error type the layers above see.
//! [`opencl`], `cuda` (feature `cuda`) and `vulkan` (feature `vulkan`) implement the API; [`os`] is page allocation and
//! locking, one interface over each platform.
//!
//! Three steps, as in `cudarc`: bindings come from `cl3` (loaded at run time) and `libc`;
//! thin `Result`-returning calls live next to the owning safe types that use them;
//! those types release what they own in `Drop`, which never panics (a failed release is
//! logged through `tracing`).

pub mod adapter;
pub mod api;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod empty;
pub mod error;
pub mod lanes;
#[cfg(feature = "baselines")]
pub mod native;
pub mod opencl;
pub mod os;
#[cfg(feature = "vulkan")]
pub mod vulkan;

/// The stages `PINSTREAM_INJECT_FAULT` knows: the engine's (`engine::fault`), progressive
/// pinning's chunks (`host::progressive`), the pin ceiling (`opencl::pin_ceiling`) and the
/// marker of the gather's asynchronous download (`gather::unpack`, `mark:BATCHES`).
const FAULT_STAGES: [&str; 7] = [
    "upload", "kernel", "download", "alloc", "chunk", "pin", "mark",
];

/// A `PINSTREAM_INJECT_FAULT` value that is not a fault the hook knows. A typo must not pass
/// for "no fault": a test would pass for the wrong reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PINSTREAM_INJECT_FAULT=`{value}` is not a fault this test hook knows ({why}): write upload:BLOCK, kernel:BLOCK, download:BLOCK, alloc:SLOT, chunk:CHUNK, pin:BYTES or mark:BATCHES, each a whole number, or unset it")]
pub struct FaultSpecError {
    /// The value as set (lossily decoded when it is not UTF-8).
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

/// The test hook `PINSTREAM_INJECT_FAULT=STAGE:INDEX`, read once per process: its stage and
/// index (`Ok(None)` when unset), or why the value is malformed. One parser for every layer's
/// stages; each layer's first use ([`check_injected_fault`]) reports a malformed value.
fn fault_spec() -> &'static Result<Option<(String, usize)>, FaultSpecError> {
    static SPEC: std::sync::OnceLock<Result<Option<(String, usize)>, FaultSpecError>> =
        std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        let Some(v) = std::env::var_os("PINSTREAM_INJECT_FAULT") else {
            return Ok(None);
        };
        let Some(text) = v.to_str() else {
            return Err(FaultSpecError {
                value: v.to_string_lossy().into_owned(),
                why: "not UTF-8".into(),
            });
        };
        parse_fault(text).map(|(s, i)| Some((s.to_string(), i)))
    })
}

/// The injected fault's stage and index, for the steps that check it: `None` when unset, or
/// when malformed (which [`check_injected_fault`] has reported where the work began).
pub(crate) fn injected_fault() -> Option<(&'static str, usize)> {
    match fault_spec() {
        Ok(Some((s, i))) => Some((s.as_str(), *i)),
        _ => None,
    }
}

/// `Err` when `PINSTREAM_INJECT_FAULT` is set to something the hook does not know: what
/// streams, allocations and registrations call before their first step.
pub fn check_injected_fault() -> Result<(), FaultSpecError> {
    fault_spec().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// `STAGE:INDEX` split and checked: a known stage, the index a whole number (of bytes for
/// `pin`, else a block, slot or chunk).
pub(crate) fn parse_fault(spec: &str) -> Result<(&str, usize), FaultSpecError> {
    let err = |why: String| FaultSpecError {
        value: spec.to_string(),
        why,
    };
    let (stage, index) = spec
        .split_once(':')
        .ok_or_else(|| err("no `:INDEX` after the stage".into()))?;
    if !FAULT_STAGES.contains(&stage) {
        return Err(err(format!("unknown stage `{stage}`")));
    }
    let index = index
        .parse()
        .map_err(|_| err(format!("`{index}` is not a whole number")))?;
    Ok((stage, index))
}

#[cfg(test)]
mod tests {
    use super::parse_fault;

    #[test]
    fn fault_specs_parse_or_name_the_valid_forms() {
        assert_eq!(parse_fault("upload:3").unwrap(), ("upload", 3));
        assert_eq!(parse_fault("pin:1048576").unwrap(), ("pin", 1 << 20));
        for (bad, why) in [
            ("upload", "no `:INDEX`"),
            ("bogus:1", "unknown stage `bogus`"),
            ("pin:abc", "`abc` is not a whole number"),
            ("upload:-1", "`-1` is not a whole number"),
            ("pin:1MiB", "`1MiB` is not a whole number"),
        ] {
            let e = parse_fault(bad).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("upload:BLOCK") && e.contains("pin:BYTES"),
                "{bad}: {e}"
            );
        }
    }
}
