//! What the doctor reports: each way to pin's figures and verdict, and the whole report.

use super::DoctorDevice;
use crate::tools::passes::Bandwidth;
use pinstream::host::PinKind;
use pinstream::vram::VramSource;
use serde::Serialize;

/// One strategy's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    /// The way to pin (OpenCL: a strategy's name).
    pub strategy: String,
    /// How that way reaches the device.
    #[serde(skip)]
    pub kind: PinKind,
    /// Why it could not be measured, if it could not.
    pub error: Option<String>,
    /// Seconds to allocate and pin the region.
    pub pin_s: Option<f64>,
    /// Of `pin_s`, seconds to map and make the pages resident (memory pinstream maps itself).
    pub resident_s: Option<f64>,
    /// Chunks in the region.
    pub chunks: usize,
    /// One contiguous range.
    pub contiguous: bool,
    /// VRAM in use before pinning (bytes).
    pub vram_before: Option<u64>,
    /// VRAM in use after pinning.
    pub vram_after_pin: Option<u64>,
    /// VRAM in use after all transfers, before release.
    pub vram_after_transfers: Option<u64>,
    /// VRAM in use after the region was released.
    pub vram_after_release: Option<u64>,
    /// VRAM cost of the region: the larger rise, after pinning or after transfers.
    pub vram_cost: Option<i64>,
    /// Host to device.
    pub h2d: Option<Bandwidth>,
    /// Device to host.
    pub d2h: Option<Bandwidth>,
    /// Both ways at once on two queues.
    pub both: Option<Bandwidth>,
    /// Bytes that made the round trip and were compared.
    pub verified_bytes: u64,
    /// Bytes that came back different.
    pub mismatched_bytes: u64,
    /// Pinned by the driver with VRAM cost under 1% (or unknown), and data intact.
    pub good: bool,
    /// The one-line verdict.
    pub verdict: String,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// The device measured.
    pub device: DoctorDevice,
    /// Where VRAM figures come from.
    pub vram_source: VramSource,
    /// Why the counter is missing, where one was expected.
    pub vram_note: Option<String>,
    /// Region size.
    pub size: usize,
    /// Block size.
    pub block: usize,
    /// Seed of the random data.
    pub seed: u64,
    /// Timed passes per direction.
    pub repeats: usize,
    /// `auto`'s choice on this device (the API's own choice).
    pub auto_strategy: Option<String>,
    /// Why.
    pub auto_reason: String,
    /// One entry per strategy.
    pub strategies: Vec<StrategyReport>,
    /// The strategy to use here.
    pub recommendation: Option<String>,
    /// Why that one.
    pub recommendation_reason: String,
    /// Mapped memory: kernel read and write bandwidth across the bus and its VRAM cost, or
    /// why the device has none; `None` where it was not measured.
    pub mapped: Option<crate::tools::mapped::MappedReport>,
}

impl StrategyReport {
    pub(super) fn empty(strategy: String, kind: PinKind) -> Self {
        StrategyReport {
            strategy,
            kind,
            error: None,
            pin_s: None,
            resident_s: None,
            chunks: 0,
            contiguous: false,
            vram_before: None,
            vram_after_pin: None,
            vram_after_transfers: None,
            vram_after_release: None,
            vram_cost: None,
            h2d: None,
            d2h: None,
            both: None,
            verified_bytes: 0,
            mismatched_bytes: 0,
            good: false,
            verdict: String::new(),
        }
    }

    /// True where the way to pin makes pages resident before the driver pins them, and the
    /// report shows both times.
    pub fn resident_then_pinned(&self) -> bool {
        self.kind == PinKind::Driver && self.resident_s.is_some()
    }
}
