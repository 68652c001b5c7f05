#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
//! pinstream: pinned host memory for OpenCL with no VRAM cost, streamed through a ring of
//! device buffers, measured.
//!
//! | layer | modules | raw handles / `unsafe` |
//! |---|---|---|
//! | cli | the `pinstream` binary | no |
//! | engine | [`engine`] (pool, stream, bind, profile, io, kernels), [`doctor`], [`demo`], [`vram`], [`units`], [`par`] | no |
//! | memory | [`host`]: [`host::HostRegion`], [`host::Strategy`] | behind a safe type |
//! | backend | [`backend::opencl`], [`backend::os`] | yes, and only here |
//!
//! # Safety
//! OpenCL objects (contexts, queues, memory objects, events) are thread-safe by the OpenCL
//! specification (1.1 onwards), so the owning types over them are `Send` and `Sync`.
//! [`host::HostRegion`] is `Send` and `Sync` because it owns its memory exclusively, hands out
//! `&[u8]` only through `&self` and `&mut [u8]` only through `&mut self`, and waits for the
//! events of its transfers in flight before handing out either or freeing the memory.
//! Device reads of host memory (uploads) take `&self`; device writes (downloads) take `&mut self`.

pub mod backend;
pub mod demo;
pub mod doctor;
pub mod engine;
pub mod host;
pub mod par;
pub mod soak;
pub mod units;
pub mod vram;
