//! Backend layer: the only place with raw handles and `unsafe`.
//!
//! [`api`] is the seam the engine sees (an [`api::Api`] per compute API); [`lanes`] is the
//! safe layer over it; [`error::BackendError`] is the one error type the layers above see.
//! [`opencl`] and `cuda` (feature `cuda`) implement the API; [`os`] is page allocation and
//! locking, one interface over each platform.
//!
//! Three steps, as in `cudarc`: bindings come from `cl3` (loaded at run time) and `libc`;
//! thin `Result`-returning calls live next to the owning safe types that use them;
//! those types release what they own in `Drop`, which never panics (a failed release is
//! logged through `tracing`).

pub mod api;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
pub mod lanes;
pub mod opencl;
pub mod os;

/// The test hook `PINSTREAM_INJECT_FAULT=STAGE:INDEX`, read once per process: its stage and
/// index, or `None` when unset or malformed. One parser for every layer's stages: the
/// engine's (`upload`, `kernel`, `download`, `alloc`: `engine::fault`), the pin ceiling's
/// (`pin`: `opencl::pin_ceiling`) and progressive pinning's (`chunk`: `host::progressive`).
pub(crate) fn injected_fault() -> Option<(&'static str, usize)> {
    static SPEC: std::sync::OnceLock<Option<(String, usize)>> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| {
        let v = std::env::var("PINSTREAM_INJECT_FAULT").ok()?;
        parse_fault(&v).map(|(s, i)| (s.to_string(), i))
    })
    .as_ref()
    .map(|(s, i)| (s.as_str(), *i))
}

/// `STAGE:INDEX` split, the index a plain number of bytes or a count.
pub(crate) fn parse_fault(spec: &str) -> Option<(&str, usize)> {
    let (stage, index) = spec.split_once(':')?;
    Some((stage, index.parse().ok()?))
}
