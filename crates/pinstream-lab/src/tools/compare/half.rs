//! One API's half of the comparison, written once over [`HostApi`]: its devices and how it
//! pins, asked for bench transfers and the streaming workloads. The OpenCL and the CUDA half
//! are this same code made for each API; the measuring code sees them as [`Half`] objects.

use super::runs::Runs;
use crate::kernels::Builtins;
use crate::tools::bench::{Point, Points};
use crate::tools::demo::{DemoConfig, Gemv, InPlace};
use pinstream::backend::api::{Device, Program};
use pinstream::host::{HostApi, PinRequest};

/// One API's half, as the measuring code sees it (object-safe, so both halves go through the
/// same loops whatever their API).
pub trait Half {
    /// The API's name (`OpenCL`, `CUDA`).
    fn api(&self) -> &'static str;
    /// How it pins (a strategy's or call's name).
    fn memory(&self) -> String;
    /// The first device: name, PCI bus id and driver.
    fn device(&self) -> String;
    /// How the first device copies, where the API offers a choice (Vulkan's copy way).
    fn copies(&self) -> Option<String>;
    /// Bench transfers with `2 * top` bytes of pinned memory on the first device.
    fn points(&self, top: usize) -> Result<Box<dyn PointSide + '_>, String>;
    /// The in-place workload's data, pinned (filled by [`Runs::reset`]).
    fn in_place<'a>(&'a self, d: &'a DemoConfig) -> Result<Box<dyn Runs + 'a>, String>;
    /// The y = W·x workload, pinned and filled (W and x).
    fn gemv<'a>(&'a self, d: &'a DemoConfig) -> Result<Box<dyn Runs + 'a>, String>;
}

/// Bench transfers kept across paired passes.
pub trait PointSide {
    /// One pass of each direction at `size`.
    fn point(&mut self, size: usize) -> Result<Point, String>;
}

impl<A: HostApi> PointSide for Points<'_, A> {
    fn point(&mut self, size: usize) -> Result<Point, String> {
        Points::point(self, size, 1).map_err(|e| e.to_string())
    }
}

/// The half of API `A`: the same workloads through the same engine, with `A`'s built-in
/// kernels and pinned memory.
pub struct ApiHalf<A: HostApi> {
    /// Every device of the streams (the bench points run on the first).
    devices: Vec<A::Device>,
    pinning: A::Pinning,
    /// What the report says of the devices beside their names (why they are not the same
    /// GPUs as OpenCL's), where anything.
    note: Option<String>,
}

impl<A: HostApi + Builtins> ApiHalf<A> {
    /// The half over `devices` (one at least), pinning with `pinning`. The built-in kernels
    /// are compiled once here, so a driver that cannot build them says so before any work.
    pub fn new(devices: Vec<A::Device>, pinning: A::Pinning) -> Result<Self, String> {
        let half = ApiHalf {
            devices,
            pinning,
            note: None,
        };
        half.kernels(A::MIX_U32, "mix_u32")?;
        half.kernels(A::GEMV_F16, "gemv_f16")?;
        Ok(half)
    }

    /// The same half, its device described with `note` too.
    pub fn noting(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// The built-in kernel `name` from `source`, built for every device.
    fn kernels(&self, source: &str, name: &str) -> Result<Vec<A::Kernel>, String> {
        let one = |d: &A::Device| -> Result<A::Kernel, String> {
            let program = d.build(source, "").map_err(|e| e.to_string())?;
            program.kernel(name).map_err(|e| e.to_string())
        };
        self.devices.iter().map(one).collect()
    }

    /// `bytes` pinned for every device of the half.
    fn pin(&self, bytes: usize) -> Result<A::HostMemory, String> {
        let others: Vec<&A::Device> = self.devices[1..].iter().collect();
        let request = PinRequest {
            pinning: Some(self.pinning),
            shared_with: &others,
            ..Default::default()
        };
        A::pin(&self.devices[0], bytes, request).map_err(|e| {
            format!("{e} (compare holds OpenCL's and CUDA's copy of --size at once: pass a smaller --size)")
        })
    }
}

impl<A: HostApi + Builtins> Half for ApiHalf<A> {
    fn api(&self) -> &'static str {
        A::NAME
    }

    fn memory(&self) -> String {
        self.pinning.to_string()
    }

    fn device(&self) -> String {
        let i = self.devices[0].info();
        let bus = i.pci_address.as_deref().unwrap_or("PCI bus unknown");
        let note = self
            .note
            .as_ref()
            .map_or(String::new(), |n| format!(" ({n})"));
        format!("{} ({bus}), {}{note}", i.name, i.driver)
    }

    fn copies(&self) -> Option<String> {
        self.devices[0].copy_way()
    }

    fn points(&self, top: usize) -> Result<Box<dyn PointSide + '_>, String> {
        let points = Points::<A>::new(&self.devices[0], self.pinning, top);
        Ok(Box::new(points.map_err(|e| e.to_string())?))
    }

    fn in_place<'a>(&'a self, d: &'a DemoConfig) -> Result<Box<dyn Runs + 'a>, String> {
        let x = self.pin(d.data_bytes / 4 * 4)?;
        let k = self.kernels(A::MIX_U32, "mix_u32")?;
        Ok(Box::new(InPlace::<A, _>::with(&self.devices, d, k, x)))
    }

    fn gemv<'a>(&'a self, d: &'a DemoConfig) -> Result<Box<dyn Runs + 'a>, String> {
        let (rows, cols, _) = d.gemv_shape();
        let memory = [
            self.pin(rows * cols * 2)?,
            self.pin(cols * 4)?,
            self.pin(rows * 4)?,
        ];
        let k = self.kernels(A::GEMV_F16, "gemv_f16")?;
        let g = Gemv::<A, _>::with(&self.devices, d, k, memory).map_err(|e| e.to_string())?;
        Ok(Box::new(g))
    }
}
