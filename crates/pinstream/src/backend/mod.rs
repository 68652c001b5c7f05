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
