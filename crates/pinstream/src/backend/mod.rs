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
pub mod batch;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod details;
pub mod empty;
pub mod error;
pub mod fault;
pub mod lanes;
#[cfg(feature = "baselines")]
pub mod native;
pub mod opencl;
pub mod os;
pub mod pinning;
pub mod staging;
pub mod vram;
#[cfg(feature = "vulkan")]
pub mod vulkan;

/// The stages `PINSTREAM_INJECT_FAULT` knows: a device's commands (the wrapping backend
/// [`fault::Faulty`]: `alloc`, `upload`, `kernel`, `download`), progressive pinning's chunks
/// (`opencl::host::region::progressive`, `chunk:CHUNK`), the pin ceiling (`opencl::pin_ceiling`,
/// `pin:BYTES`), the marker and the flush of the gather's asynchronous download, and a panic
/// once it handed batches to its thread (`gather::unpack`, `mark:BATCHES`, `flush:BATCHES`,
/// `panic-sent:BATCHES`), io_uring's waits (`os::uring`, `uring:WAIT`) and direct transfers
/// of files streamed from storage (`engine::io::direct`, `direct:TRANSFER`).
const FAULT_STAGES: [&str; 11] = [
    "upload",
    "kernel",
    "download",
    "alloc",
    "chunk",
    "pin",
    "mark",
    "flush",
    "panic-sent",
    "uring",
    "direct",
];

/// A `PINSTREAM_INJECT_FAULT` value that is not a fault the hook knows. A typo must not pass
/// for "no fault": a test would pass for the wrong reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PINSTREAM_INJECT_FAULT=`{value}` is not a fault this test hook knows ({why}): write upload:N, kernel:N, download:N or alloc:N (a device's N-th such command, from 0; add @DEVICE to fail that device only), chunk:CHUNK, pin:BYTES, mark:BATCHES, flush:BATCHES, panic-sent:BATCHES, uring:WAIT or direct:TRANSFER, each a whole number, or unset it")]
pub struct FaultSpecError {
    /// The value as set (lossily decoded when it is not UTF-8).
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

/// A `PINSTREAM_INJECT_FAULT` value: its stage, its index and the device it is limited to.
type FaultSpec = (String, usize, Option<usize>);

/// The test hook `PINSTREAM_INJECT_FAULT=STAGE:INDEX[@DEVICE]`, read once per process
/// (`Ok(None)` when unset), or why the value is malformed. One parser for every layer's
/// stages; each layer's first use ([`check_injected_fault`]) reports a malformed value.
fn fault_spec() -> &'static Result<Option<FaultSpec>, FaultSpecError> {
    static SPEC: std::sync::OnceLock<Result<Option<FaultSpec>, FaultSpecError>> =
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
        parse_fault_on(text).map(|(s, i, d)| Some((s.to_string(), i, d)))
    })
}

/// The injected fault's stage and index, for the steps that check it: `None` when unset, or
/// when malformed (which [`check_injected_fault`] has reported where the work began).
pub(crate) fn injected_fault() -> Option<(&'static str, usize)> {
    injected_fault_on().map(|(s, i, _)| (s, i))
}

/// [`injected_fault`] with the device it is limited to (`@DEVICE`), if any.
pub(crate) fn injected_fault_on() -> Option<(&'static str, usize, Option<usize>)> {
    match fault_spec() {
        Ok(Some((s, i, d))) => Some((s.as_str(), *i, *d)),
        _ => None,
    }
}

/// `Err` when `PINSTREAM_INJECT_FAULT` is set to something the hook does not know: what
/// streams, allocations and registrations call before their first step.
pub fn check_injected_fault() -> Result<(), FaultSpecError> {
    fault_spec().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// `STAGE:INDEX` split and checked (see [`parse_fault_on`]), any `@DEVICE` dropped.
#[cfg(test)]
pub(crate) fn parse_fault(spec: &str) -> Result<(&str, usize), FaultSpecError> {
    parse_fault_on(spec).map(|(s, i, _)| (s, i))
}

/// `STAGE:INDEX[@DEVICE]` split and checked: a known stage, the index a whole number (of
/// bytes for `pin`, else a command, chunk or batch), and `@DEVICE` (a device index) only
/// after a device's command.
fn parse_fault_on(spec: &str) -> Result<(&str, usize, Option<usize>), FaultSpecError> {
    let err = |why: String| FaultSpecError {
        value: spec.to_string(),
        why,
    };
    let whole = |n: &str| {
        n.parse()
            .map_err(|_| err(format!("`{n}` is not a whole number")))
    };
    let (stage, rest) = spec
        .split_once(':')
        .ok_or_else(|| err("no `:INDEX` after the stage".into()))?;
    if !FAULT_STAGES.contains(&stage) {
        return Err(err(format!("unknown stage `{stage}`")));
    }
    let (index, device) = match rest.split_once('@') {
        None => (rest, None),
        Some((i, d)) if fault::Operation::of_stage(stage).is_some() => (i, Some(whole(d)?)),
        Some(_) => {
            return Err(err(format!(
                "`@DEVICE` follows a device's command, not `{stage}`"
            )))
        }
    };
    Ok((stage, whole(index)?, device))
}

#[cfg(test)]
mod tests {
    use super::{parse_fault, parse_fault_on};

    #[test]
    fn fault_specs_parse_or_name_the_valid_forms() {
        assert_eq!(parse_fault("upload:3").unwrap(), ("upload", 3));
        assert_eq!(parse_fault("pin:1048576").unwrap(), ("pin", 1 << 20));
        assert_eq!(parse_fault_on("kernel:5").unwrap(), ("kernel", 5, None));
        assert_eq!(
            parse_fault_on("kernel:5@1").unwrap(),
            ("kernel", 5, Some(1))
        );
        for (bad, why) in [
            ("upload", "no `:INDEX`"),
            ("bogus:1", "unknown stage `bogus`"),
            ("pin:abc", "`abc` is not a whole number"),
            ("upload:-1", "`-1` is not a whole number"),
            ("pin:1MiB", "`1MiB` is not a whole number"),
            ("kernel:5@x", "`x` is not a whole number"),
            ("kernel:x@1", "`x` is not a whole number"),
            (
                "chunk:1@0",
                "`@DEVICE` follows a device's command, not `chunk`",
            ),
        ] {
            let e = parse_fault(bad).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("upload:N") && e.contains("pin:BYTES"),
                "{bad}: {e}"
            );
        }
    }
}
