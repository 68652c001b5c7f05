//! Engine layer: the stream over any backend ([`crate::backend::api::Api`]), the device pool,
//! profiles and traces. No FFI and no `unsafe` here.
//!
//! | module | what |
//! |---|---|
//! | [`stream`] | [`run`] (one device), [`run_on`] (several): layout, binding, shares, report |
//! | `device` | one device's share: queues, warm-up, stages |
//! | `slots` | one device's buffers in its budget: residents, the ring's slots, resident blocks |
//! | `ring` | the schedule over every pass: which command waits for which, progress, stop, compact records |
//! | [`resident`] | blocks kept in device memory across passes ([`Residency`]), and the bytes each pass moved |
//! | [`job`] | what a run streams ([`Job`], [`HostMemory`]) and where ([`Target`]) |
//! | [`options`] | how to stream: [`StreamOptions`], [`WorkSize`], [`Residency`] (a leaf the others read) |
//! | [`pool`], `layout` | the VRAM budget, the blocks and how many slots fit |
//! | [`bind`] | the kernel argument convention, checked against the kernel's parameters |
//! | [`validate`] | the checks of a run before anything is allocated: element types, counts, block, chunk and launch sizes, host memory |
//! | [`profile`] | stage totals, bandwidth, overlap, Perfetto traces |
//! | [`error`], [`mismatch`] | every engine error (leaf modules); `mismatch`: what the binding and the checks refuse, as fields |
//! | [`guard`] | the bounds guard: a canary after every buffer, checked after each kernel |
//! | [`io`], [`dtype`] | files in and out, element types |
//! | [`storage`] | files larger than host memory, streamed through staging rings of pinned memory |
//!
//! Streaming a pinned region through a kernel, in place, inside a VRAM budget:
//!
//! ```
//! use pinstream::backend::opencl::{default_device, devices, Context};
//! use pinstream::engine::{run, BoundsCheck, DType, Job, Residency, StreamOptions, WorkSize};
//! use pinstream::host::{HostRegion, PinOptions};
//!
//! let all = devices()?;
//! let ctx = Context::new(default_device(&all).unwrap())?;
//! let src = "__kernel void twice(__global float* x, ulong n, ulong block, ulong offset) {
//!                size_t i = get_global_id(0); if (i < n) x[i] *= 2.0f; }";
//! let mut kernel = ctx.build_program(src, "")?.kernel("twice")?;
//! let mut data = HostRegion::new(&ctx, 64 << 20, &PinOptions::default())?; // pinned, no VRAM
//! data.typed_mut::<f32>().unwrap().fill(1.5);
//! let opts = StreamOptions { dtype: DType::F32, out_dtype: DType::F32, block_bytes: 4 << 20,
//!     in_per_out: 1, slots: None, vram_budget: 16 << 20, work: WorkSize::default(), sequential: false,
//!     stop: None, check_bounds: BoundsCheck::Auto, passes: 1, residency: Residency::Auto };
//! let job = Job { in_place: Some(&mut data), ..Job::default() };
//! let report = run(&ctx, &mut kernel, job, &opts, &|_blocks, _bytes| {})?; // `data` is lent until here
//! assert!(data.typed::<f32>().unwrap().iter().all(|&x| x == 3.0));
//! println!("{:.1} GB/s, overlap {:.2}", report.totals.combined_gbps, report.totals.overlap);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The same [`run`] takes a `backend::cuda::Gpu` and a kernel built by
//! `Gpu::build` (feature `cuda`), with `backend::cuda::PinnedHost`
//! or any [`HostMemory`] in the job; [`run_on`] takes several devices of one API.

pub mod bind;
mod device;
pub mod dtype;
pub mod error;
pub mod guard;
pub mod io;
pub mod job;
mod layout;
pub mod mismatch;
pub mod options;
pub mod pool;
pub mod profile;
pub mod resident;
pub(crate) mod ring;
mod slots;
pub mod storage;
pub mod stream;
pub mod validate;

pub use dtype::DType;
pub use error::{BindError, BudgetError, LayoutError, OverrunError, PoolError, StreamError};
pub use guard::BoundsCheck;
pub use job::{HostMemory, Hosted, Job, Target};
pub use options::{Residency, StreamOptions, WorkSize};
pub use resident::{PassBytes, ResidencyReason, ResidencyReport};
pub use stream::{partition, run, run_on, run_on_each, DeviceShare, Progress, StreamReport};
