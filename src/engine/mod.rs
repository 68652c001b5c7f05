//! Engine layer: device pool, the stream, profiles and traces. No FFI here.

pub mod bind;
pub mod dtype;
pub mod io;
pub mod kernels;
pub mod pool;
pub mod profile;
pub mod stream;

pub use dtype::DType;
pub use stream::{run, Job, StreamError, StreamOptions, StreamReport, WorkSize};
