//! One module per measuring tool, plus what they share.

pub mod bench;
pub mod bench_devices;
pub mod compare;
pub mod cpu;
pub mod demo;
pub mod doctor;
pub mod embedding;
pub mod gather;
pub mod latency;
pub mod mapped;
pub mod passes;
pub mod pin_search;
pub mod random;
pub mod soak;

/// Runs a measurement on CUDA's own copy calls on the GPU a report is of (found by its PCI bus
/// by the CLI's one API dispatch); or says why CUDA cannot measure that GPU.
pub type OnCuda<'a> = &'a dyn Fn(
    &mut dyn FnMut(&dyn pinstream::backend::native::NativeCopies) -> Result<(), String>,
) -> Result<(), String>;
