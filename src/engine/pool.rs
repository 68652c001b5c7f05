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
    /// The driver refused (e.g. `CL_MEM_OBJECT_ALLOCATION_FAILURE`).
    #[error("allocating {what} of {} on the device failed: {source}", Bytes(*.bytes as u64))]
    Device {
        /// What was asked for.
        what: String,
        /// Its size.
        bytes: usize,
        /// The driver's error.
        source: ClError,
    },
}

/// Device buffers counted against a budget.
pub struct DevicePool {
    ctx: Context,
    budget: u64,
    used: u64,
}

impl DevicePool {
    /// An empty pool on `ctx` that will never allocate more than `budget` bytes.
    pub fn new(ctx: &Context, budget: u64) -> Self {
        DevicePool {
            ctx: ctx.clone(),
            budget,
            used: 0,
        }
    }

    /// Allocates `bytes` for `what`, or says why not. Buffers are touched once so that drivers
    /// that commit memory lazily commit it now, inside the run's VRAM reading.
    pub fn alloc(&mut self, bytes: usize, what: &str) -> Result<DeviceBuffer, PoolError> {
        if self.used + bytes as u64 > self.budget {
            return Err(PoolError::OverBudget {
                what: what.into(),
                bytes,
                used: self.used,
                budget: self.budget,
            });
        }
        let device = |source| PoolError::Device {
            what: what.into(),
            bytes,
            source,
        };
        let buf = self.ctx.device_buffer(bytes).map_err(device)?;
        let q = self.ctx.queue().map_err(device)?;
        q.fill(&buf, 0, bytes, 0)
            .and_then(|e| e.wait())
            .map_err(device)?;
        self.used += bytes as u64;
        Ok(buf)
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
