//! A fixed set of device buffers inside a VRAM budget: allocated once, never past the budget.

use crate::backend::api::Device;
use crate::backend::error::BackendError;
use crate::units::Bytes;
use crate::vram::VramProbe;

pub use super::error::PoolError;

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
    pub fn take<B, E: Into<BackendError>>(
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

/// Device buffers of one device, counted against a budget.
pub struct DevicePool<'d, D: Device> {
    device: &'d D,
    budget: Budget,
}

impl<'d, D: Device> DevicePool<'d, D> {
    /// An empty pool on `device` that will never allocate more than `budget` bytes.
    pub fn new(device: &'d D, budget: u64) -> Self {
        DevicePool {
            device,
            budget: Budget::new(budget),
        }
    }

    /// Allocates `bytes` for `what`, or says why not. Buffers are committed at once (see
    /// [`Device::allocate`]), inside the run's VRAM reading.
    pub fn alloc(
        &mut self,
        bytes: usize,
        what: &str,
    ) -> Result<<D::A as crate::backend::api::Api>::Buffer, PoolError> {
        let device = self.device;
        self.budget.take(bytes, what, || device.allocate(bytes))
    }

    /// Counts `bytes` of buffers allocated before (by an earlier run, kept across it) against
    /// the budget, or says why the budget does not hold them.
    pub fn adopt(&mut self, bytes: u64, what: &str) -> Result<(), PoolError> {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        (self.budget).take(bytes, what, || Ok::<(), BackendError>(()))
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
/// one exists, else half of the device's `global_mem` bytes), and how it was found.
pub fn default_budget(global_mem: u64, probe: &VramProbe) -> (u64, String) {
    match probe.used() {
        Some(used) => {
            let free = global_mem.saturating_sub(used);
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
            global_mem / 2,
            format!(
                "half of the device's {} global memory (no free-memory counter)",
                Bytes(global_mem)
            ),
        ),
    }
}
