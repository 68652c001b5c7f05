//! Engine layer: device pool, the stream, profiles and traces. No FFI here.
//!
//! Streaming a pinned region through a kernel, in place, inside a VRAM budget:
//!
//! ```
//! use pinstream::backend::opencl::{default_device, devices, Context};
//! use pinstream::engine::{run, DType, Job, StreamOptions, WorkSize};
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
//!     stop: None };
//! let job = Job { kernel: &mut kernel, kernel_name: "twice", in_place: Some(&mut data),
//!     inputs: vec![], output: None, residents: vec![], args: vec![] };
//! let report = run(&ctx, job, &opts, &|_blocks, _bytes| {})?; // `data` is lent until here
//! assert!(data.typed::<f32>().unwrap().iter().all(|&x| x == 3.0));
//! println!("{:.1} GB/s, overlap {:.2}", report.totals.combined_gbps, report.totals.overlap);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod bind;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod dtype;
pub(crate) mod fault;
pub mod io;
pub mod kernels;
pub mod pool;
pub mod profile;
pub(crate) mod ring;
pub mod stream;
pub mod validate;

pub use dtype::DType;
pub use stream::{run, Job, StreamError, StreamOptions, StreamReport, WorkSize};
