#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
//! pinstream: pinned host memory for OpenCL with no VRAM cost, streamed through a ring of
//! device buffers, measured.
//!
//! This crate is the library alone. The `pinstream` command and its measuring tools (doctor,
//! bench, compare, demo, soak) live in the `pinstream-cli` crate of the same workspace.
//!
//! | layer | modules | raw handles / `unsafe` |
//! |---|---|---|
//! | engine | [`engine`] (pool, stream, bind, profile, io, kernels), [`vram`], [`units`], [`par`] | no |
//! | memory | [`host`]: [`host::HostRegion`], [`host::Strategy`] | behind a safe type |
//! | backend | [`backend::opencl`], [`backend::os`] | yes, and only here |
//!
//! # Safety
//! OpenCL objects (contexts, queues, memory objects, events) are thread-safe by the OpenCL
//! specification (1.1 onwards), so the owning types over them are `Send` and `Sync`.
//! [`host::HostRegion`] is `Send` and `Sync` because it owns its memory exclusively (or, for
//! memory the caller registered with the `unsafe` [`host::HostRegion::register`], the caller
//! promises that exclusivity for the region's life), hands out
//! `&[u8]` only through `&self` and `&mut [u8]` only through `&mut self`, and waits for the
//! events of its transfers in flight before handing out either or freeing the memory.
//! Device reads of host memory (uploads) take `&self`; device writes (downloads) take `&mut self`.
//! [`backend::opencl::Kernel`] is `Send` but not `Sync`: setting arguments (`clSetKernelArg`,
//! the one OpenCL call that is not thread-safe on one object) needs `&mut`. A stream
//! ([`engine::run`]) is synchronous and borrows its regions for its whole length, so two
//! threads may stream at once (on one context or two) with a kernel and regions each; the
//! tests in `tests/concurrency.rs` do that. `Drop` of every owning type releases its object
//! and never panics; a region waits for its transfers before its memory is freed.

pub mod backend;
pub mod engine;
pub mod host;
pub mod par;
pub mod units;
pub mod vram;
