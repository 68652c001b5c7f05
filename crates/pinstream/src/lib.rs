#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
//! pinstream: pinned host memory for OpenCL with no VRAM cost, streamed through a ring of
//! device buffers, measured.
//!
//! This crate is the library alone. The `pinstream` command lives in the `pinstream-cli`
//! crate of the same workspace, and its measuring tools (doctor, bench, compare, demo, soak)
//! in `pinstream-lab`.
//!
//! | layer | modules | errors | raw handles / `unsafe` |
//! |---|---|---|---|
//! | engine | [`engine`] (stream, device, ring, layout, pool, job, bind, profile, io), [`vram`], [`units`], [`par`] | [`engine::error`] | no |
//! | gather (OpenCL only, beside the engine) | [`gather`]: many small pieces in few large transfers | [`gather::error`] | no |
//! | memory | [`host`]: [`host::HostApi`] (each API's pinned memory, registration of the caller's included), the range registry, and re-exports of each backend's host memory ([`host::HostRegion`], [`host::Strategy`]) | [`host::HostError`] | no |
//! | backend | [`backend::api`] (the trait), [`backend::lanes`] (its safe layer), [`backend::pinning`] (what every API's pinned memory shares), [`backend::opencl`] (with its host memory, [`backend::opencl::host`]: `HostRegion`, its strategies, registration, progressive pins), `backend::cuda` (feature `cuda`), `backend::vulkan` (feature `vulkan`), [`backend::os`] | [`backend::error::BackendError`] | yes, and only here |
//!
//! # The backend trait
//! [`backend::api::Api`] is the seam, in wgpu-hal's shape: associated types for the device (a
//! context on one device), the queue, device memory, the event (an opaque point in a queue)
//! and the error, and the operations allocate, upload, download, launch, wait and profile.
//! OpenCL ([`backend::opencl::OpenCl`]) and CUDA (`backend::cuda::Cuda`) implement it. The
//! enqueueing operations are `unsafe` (what they use must outlive their commands);
//! [`backend::lanes::in_flight`] is the safe layer above them: it opens a run's queues and
//! waits for every command before returning, so everything borrowed for the run outlives what
//! it enqueued. The engine ([`engine::run`], [`engine::run_on`] for several devices) is one
//! generic piece over the trait: layout, VRAM budget, slots, queues, warm-up, the schedule,
//! progress and stop, the report. Only the kernel's parameters (read from the driver for
//! OpenCL, from the source for CUDA) and its launch differ by API.
//!
//! # Safety
//! OpenCL objects (contexts, queues, memory objects, events) are thread-safe by the OpenCL
//! specification (1.1 onwards), so the owning types over them are `Send` and `Sync`; so are
//! CUDA's, whose calls bind the context to the calling thread first.
//! [`host::HostRegion`] is `Send` and `Sync` because it owns its memory exclusively (or, for
//! memory the caller registered with the `unsafe` [`host::HostRegion::register`] or through
//! [`host::HostApi::register`] over a [`host::CallerRange`], whose `unsafe` constructor
//! carries the promise, the caller promises that exclusivity for the region's life), hands out
//! `&[u8]` only through `&self` and `&mut [u8]` only through `&mut self`, and waits for the
//! events of its transfers in flight before handing out either or freeing the memory.
//! A run lends host memory to the devices as [`backend::lanes::HostView`]s made from slices:
//! `&` for memory devices only read, `&mut` for memory they write, borrowed for the whole run,
//! which waits for every command before it returns (a panic included).
//! [`backend::opencl::Kernel`] is `Send` but not `Sync`: setting arguments (`clSetKernelArg`,
//! the one OpenCL call that is not thread-safe on one object) needs `&mut`. A stream
//! ([`engine::run`]) is synchronous and borrows its memory for its whole length, so two
//! threads may stream at once (on one context or two) with a kernel and regions each; the
//! tests in `tests/concurrency.rs` do that, and [`engine::run_on`] runs one thread per device.
//! `Drop` of every owning type releases its object and never panics; a region waits for its
//! transfers before its memory is freed.

pub mod backend;
pub mod engine;
pub mod gather;
pub mod host;
/// Parallel host work over large buffers: [`backend::os::par`], kept at this path for the fronts.
pub use backend::os::par;
mod sync;
pub mod units;
/// Device memory in use, measured: [`backend::vram`], kept at this path for the fronts.
pub use backend::vram;
