//! A fixed set of device buffers inside a VRAM budget: allocated once, never past the budget.

use crate::backend::opencl::{ClError, Context, DeviceBuffer};
use crate::units::Bytes;
use crate::vram::VramProbe;

/// Why the pool could not give a buffer.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The budget cannot hold the buffer.
    #[error("the VRAM budget of {} cannot hold {what} of {} ({} already allocated): raise --vram-budget or lower --block", Bytes(*.budget), Bytes(*.bytes as u64), Bytes(*.used))]
    OverBudget {
        /// What was asked for.
        what: String,
        /// Its size.
        bytes: usize,
        /// Bytes already allocated.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// The driver refused (e.g. `CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CUDA_ERROR_OUT_OF_MEMORY`).
    #[error("allocating {what} of {} on the device failed: {source}", Bytes(*.bytes as u64))]
    Device {
        /// What was asked for.
        what: String,
        /// Its size.
        bytes: usize,
        /// The driver's error.
        source: crate::engine::ring::CommandError,
    },
}

/// The accounting of a pool, whatever the API: bytes allocated against a budget.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    budget: u64,
    used: u64,
}

impl Budget {
    /// Nothing allocated yet, at most `budget` bytes.
    pub fn new(budget: u64) -> Self {
        Budget { budget, used: 0 }
    }

    /// Allocates `bytes` for `what` with `alloc`, if the budget holds them.
    pub fn take<B, E: Into<crate::engine::ring::CommandError>>(
        &mut self,
        bytes: usize,
        what: &str,
        alloc: impl FnOnce() -> Result<B, E>,
    ) -> Result<B, PoolError> {
        if self.used + bytes as u64 > self.budget {
            return Err(PoolError::OverBudget {
                what: what.into(),
                bytes,
                used: self.used,
                budget: self.budget,
            });
        }
        let b = alloc().map_err(|e| PoolError::Device {
            what: what.into(),
            bytes,
            source: e.into(),
        })?;
        self.used += bytes as u64;
        Ok(b)
    }

    /// Bytes allocated so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }
}

/// OpenCL device buffers counted against a budget.
pub struct DevicePool {
    ctx: Context,
    budget: Budget,
}

impl DevicePool {
    /// An empty pool on `ctx` that will never allocate more than `budget` bytes.
    pub fn new(ctx: &Context, budget: u64) -> Self {
        DevicePool {
            ctx: ctx.clone(),
            budget: Budget::new(budget),
        }
    }

    /// Allocates `bytes` for `what`, or says why not. Buffers are touched once so that drivers
    /// that commit memory lazily commit it now, inside the run's VRAM reading.
    pub fn alloc(&mut self, bytes: usize, what: &str) -> Result<DeviceBuffer, PoolError> {
        let ctx = &self.ctx;
        self.budget.take(bytes, what, || -> Result<_, ClError> {
            let buf = ctx.device_buffer(bytes)?;
            ctx.queue()?.fill(&buf, 0, bytes, 0)?.wait()?;
            Ok(buf)
        })
    }

    /// Bytes allocated so far.
    pub fn used(&self) -> u64 {
        self.budget.used()
    }

    /// The budget.
    pub fn budget(&self) -> u64 {
        self.budget.budget()
    }
}

/// The default VRAM budget: half of the device memory free now (by the VRAM counter where
/// one exists, else half of the global memory), and how it was found.
pub fn default_budget(ctx: &Context, probe: &VramProbe) -> (u64, String) {
    let total = ctx.device().global_mem;
    match probe.used() {
        Some(used) => {
            let free = total.saturating_sub(used);
            (
                free / 2,
                format!(
                    "half of the {} free now ({})",
                    Bytes(free),
                    probe.source().describe()
                ),
            )
        }
        None => (
            total / 2,
            format!(
                "half of the device's {} global memory (no free-memory counter)",
                Bytes(total)
            ),
        ),
    }
}
