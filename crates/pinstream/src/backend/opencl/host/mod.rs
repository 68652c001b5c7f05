//! OpenCL's pinned host memory: how its failures become the neutral
//! [`HostError`](crate::backend::pinning::HostError).

mod error;
