//! What the measuring code asks of a streaming workload, whatever its API: the leaf the halves
//! ([`super::half`]) and the pairing of runs ([`super::stream`]) both use.

use super::CompareError;

/// One streaming run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFigures {
    /// GB/s: combined up + down (in place), or of the weights (y = W·x).
    pub gbps: f64,
    /// How much of the transfers overlapped.
    pub overlap: f64,
    /// The process's CPU seconds per GiB moved across the bus.
    pub cpu_s_per_gib: f64,
    /// With several devices: the same GB/s per device (empty with one).
    pub per_device_gbps: Vec<f64>,
}

/// A streaming workload of one API, pinned, filled and built once, run as often as asked.
pub trait Runs {
    /// Restores what a run starts from (the in-place input; y's NaNs).
    fn reset(&mut self) -> Result<(), CompareError>;
    /// One run.
    fn run(&mut self) -> Result<RunFigures, CompareError>;
    /// Fails unless the last run's results match the CPU reference.
    fn check(&self) -> Result<(), CompareError>;
}
