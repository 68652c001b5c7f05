//! `pinstream doctor`: for every way an API pins host memory on a device (OpenCL's
//! strategies, CUDA's `cuMemHostAlloc` and `cuMemHostRegister`), measure the time to pin, the
//! VRAM cost, H2D, D2H and both-ways bandwidth, and check every round trip byte for byte.
//! Written once over [`HostApi`]: what differs per API (its ways to pin, its default, what a
//! way gives the device) is the API's to say.

use crate::tools::passes::{Bandwidth, Pass};
use crate::tools::pin_search;
use pinstream::backend::adapter::AdapterInfo;
use pinstream::backend::api::{Device, ErrorOf, EventOf};
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView, Lanes, OutOfRange};
use pinstream::backend::opencl::DeviceInfo;
use pinstream::host::{HostApi, HostError, PinKind, PinRequest, Pinned};
use pinstream::par;
use pinstream::units::Bytes;
use pinstream::vram::{VramProbe, VramSource};
use serde::Serialize;
use std::ops::Range;

/// What to measure (the ways to pin are given to [`run`], as [`chosen`] picks them).
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// Region size per way to pin.
    pub size: usize,
    /// Transfer block size (device buffer size).
    pub block: usize,
    /// Cap on chunk size, where the API makes memory of chunks (tests force chunking).
    pub max_chunk: Option<usize>,
    /// Seed of the random data; `None`: fresh from the clock.
    pub seed: Option<u64>,
    /// Timed passes per direction; figures are their median.
    pub repeats: usize,
}

/// Which ways to pin to measure (`--strategy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every way the device offers.
    All,
    /// The API's own choice ([`HostApi::default_pinning`]; OpenCL's `auto`).
    Auto,
    /// The one of this name.
    Named(String),
}

impl From<&str> for Selection {
    fn from(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Selection::All,
            "auto" => Selection::Auto,
            name => Selection::Named(name.to_string()),
        }
    }
}

/// Why the doctor could not run at all (a failing strategy is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// Block size of zero or above the device's max allocation.
    #[error("block size {} is not usable on this device: it must be between 1 byte and the max allocation {}; pass a smaller --block", Bytes(*.block as u64), Bytes(*.max_alloc))]
    Block {
        /// Requested block.
        block: usize,
        /// Device limit.
        max_alloc: u64,
    },
    /// Region size problems (zero, above available memory).
    #[error(transparent)]
    Size(#[from] HostError),
    /// A way to pin that the API knows but this device lacks.
    #[error("strategy `{strategy}` is not available on this device: {why}; run `pinstream devices` to see the strategies it offers")]
    Unsupported {
        /// The way to pin.
        strategy: String,
        /// Why not.
        why: String,
    },
    /// A name that is no way to pin of the API.
    #[error("unknown strategy `{name}`: choose all, auto or one of {}", .known.join(", "))]
    Unknown {
        /// The name given.
        name: String,
        /// Every way the API knows.
        known: Vec<String>,
    },
    /// Queue or device buffer failure.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The ways to pin on `device` that `selection` names, or why it names none there.
pub fn chosen<A: HostApi>(
    device: &A::Device,
    selection: &Selection,
) -> Result<Vec<A::Pinning>, DoctorError> {
    let offered = A::pinnings(device);
    let name = match selection {
        Selection::All => return Ok(offered),
        Selection::Auto => return Ok(A::default_pinning(device).0.into_iter().collect()),
        Selection::Named(name) => name,
    };
    let named = |p: &A::Pinning| p.to_string().eq_ignore_ascii_case(name);
    if let Some(&p) = offered.iter().find(|p| named(p)) {
        return Ok(vec![p]);
    }
    let lacking = A::lacking(device);
    if let Some((p, why)) = lacking.iter().find(|(p, _)| named(p)) {
        let (strategy, why) = (p.to_string(), why.clone());
        return Err(DoctorError::Unsupported { strategy, why });
    }
    let known = offered.iter().chain(lacking.iter().map(|(p, _)| p));
    Err(DoctorError::Unknown {
        name: name.clone(),
        known: known.map(ToString::to_string).collect(),
    })
}

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

/// The device a report is of: what its driver says (OpenCL's [`DeviceInfo`], as
/// [`HostApi::driver_details`] gives it), else what every API says ([`AdapterInfo`]).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DoctorDevice {
    /// The driver's own description.
    Driver(DeviceInfo),
    /// The API's common description.
    Adapter(AdapterInfo),
}

impl DoctorDevice {
    /// `INDEX: NAME (DRIVER, VERSION)`, as the report's first line names it.
    pub fn label(&self) -> String {
        match self {
            DoctorDevice::Driver(d) => format!(
                "{}: {} ({}, {})",
                d.index, d.name, d.platform_name, d.driver_version
            ),
            DoctorDevice::Adapter(a) => a.label(),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        match self {
            DoctorDevice::Driver(d) => &d.name,
            DoctorDevice::Adapter(a) => &a.name,
        }
    }

    /// `INDEX: NAME (PLATFORM or DRIVER)`, as the demo and the bench name it.
    pub fn short_label(&self) -> String {
        match self {
            DoctorDevice::Driver(d) => format!("{}: {} ({})", d.index, d.name, d.platform_name),
            DoctorDevice::Adapter(a) => a.label(),
        }
    }
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

/// Progress: (units done so far, a message). One unit per block moved or checked.
pub type ProgressFn<'a> = &'a (dyn Fn(u64, &str) + Sync);

/// Units of work [`run`] reports for `cfg` over `n` ways to pin (a progress bar's length).
pub fn total_units(cfg: &DoctorConfig, n: usize) -> u64 {
    (n * (1 + 3 * cfg.repeats.max(1)) * cfg.size.div_ceil(cfg.block.max(1))) as u64
}

/// What the doctor measures every way to pin through: two device buffers of the block size
/// (committed before the VRAM baseline) and the VRAM counter.
struct Doctor<'d, A: HostApi> {
    device: &'d A::Device,
    dev_a: A::Buffer,
    dev_b: A::Buffer,
    probe: VramProbe,
    cfg: &'d DoctorConfig,
    block: usize,
}

/// A measurement that broke off: a device call, or host memory shorter than it said.
#[derive(Debug, thiserror::Error)]
enum Broke {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Range(#[from] OutOfRange),
}

/// Measures each of `pinnings` on `device` (`details`: how the report names it).
pub fn run<A: HostApi>(
    device: &A::Device,
    details: DoctorDevice,
    pinnings: &[A::Pinning],
    cfg: &DoctorConfig,
    progress: ProgressFn,
) -> Result<DoctorReport, DoctorError> {
    let max_alloc = device.max_alloc();
    if cfg.block == 0 || cfg.block as u64 > max_alloc {
        let block = cfg.block;
        return Err(DoctorError::Block { block, max_alloc });
    }
    pinstream::host::check_size(cfg.size)?;
    let doctor = Doctor::<A>::new(device, cfg)?;
    let seed = cfg.seed.unwrap_or_else(clock_seed);
    let mut reports = doctor.measure_all(pinnings, seed, progress);
    let pageable_h2d = reports
        .iter()
        .find(|r| r.kind == PinKind::Pageable)
        .and_then(|r| r.h2d.as_ref().map(|b| b.wall_gbps));
    for r in &mut reports {
        judge(r, cfg.size, device.is_cpu(), pageable_h2d);
    }
    let (auto, auto_reason) = A::default_pinning(device);
    let auto_strategy = auto.map(|p| p.to_string());
    let (recommendation, recommendation_reason) = recommend(auto_strategy.as_deref(), &reports);
    Ok(DoctorReport {
        vram_source: doctor.probe.source(),
        vram_note: doctor.probe.note().map(str::to_string),
        device: details,
        size: cfg.size,
        block: doctor.block,
        seed,
        repeats: cfg.repeats.max(1),
        auto_strategy,
        auto_reason,
        strategies: reports,
        recommendation,
        recommendation_reason,
        mapped: None,
    })
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// One copy of a pass: a range of the host memory up to the device or down from it, on a lane
/// (lane 0 through the first device buffer, lane 1 through the second).
#[derive(Debug, Clone)]
struct Move {
    up: bool,
    lane: usize,
    range: Range<usize>,
}

impl<'d, A: HostApi> Doctor<'d, A> {
    fn new(device: &'d A::Device, cfg: &'d DoctorConfig) -> Result<Self, BackendError> {
        let block = cfg.block.min(cfg.size);
        Ok(Doctor {
            dev_a: device.allocate(block).map_err(Into::into)?,
            dev_b: device.allocate(block).map_err(Into::into)?,
            probe: A::vram(device),
            device,
            cfg,
            block,
        })
    }

    /// Each of `pinnings` in turn, each with its own seed.
    fn measure_all(
        &self,
        pinnings: &[A::Pinning],
        seed: u64,
        progress: ProgressFn,
    ) -> Vec<StrategyReport> {
        let mut done = 0u64;
        let mut reports = Vec::new();
        for (i, &p) in pinnings.iter().enumerate() {
            let mut tick = |n: u64, msg: &str| {
                done += n;
                progress(done, &format!("{p}: {msg}"));
            };
            reports.push(self.measure(p, seed.wrapping_add(i as u64), &mut tick));
        }
        reports
    }

    fn request(&self, pinning: A::Pinning) -> PinRequest<'static, A> {
        PinRequest {
            pinning: Some(pinning),
            max_chunk: self.cfg.max_chunk,
            ..Default::default()
        }
    }

    /// The largest size `pinning` pins, searched for after a pin of the whole size failed
    /// ([`pin_search`]), with the limit that stops it and what to do, as a note for the
    /// failure. Each try is released before the next.
    fn largest_pin(&self, pinning: A::Pinning) -> String {
        let size = self.cfg.size;
        let try_pin = |n| A::pin(self.device, n, self.request(pinning)).is_ok();
        let found = pin_search::largest_pinnable(size, try_pin);
        pin_search::note(A::pin_kind(pinning), size, found, cfg!(windows))
    }

    fn measure(&self, p: A::Pinning, seed: u64, tick: &mut dyn FnMut(u64, &str)) -> StrategyReport {
        let mut r = StrategyReport::empty(p.to_string(), A::pin_kind(p));
        r.vram_before = self.probe.used();
        let mut memory = match A::pin(self.device, self.cfg.size, self.request(p)) {
            Ok(memory) => memory,
            Err(e) => {
                r.error = Some(format!("{e}{}", self.largest_pin(p)));
                tick(total_units(self.cfg, 1), "failed");
                return r;
            }
        };
        r.pin_s = Some(memory.pin_time().as_secs_f64());
        r.resident_s = memory.resident_time().map(|t| t.as_secs_f64());
        r.chunks = memory.chunk_count();
        r.contiguous = memory.is_contiguous();
        r.vram_after_pin = self.probe.used();
        if let Err(e) = self.transfers(&mut memory, seed, &mut r, tick) {
            r.error = Some(e.to_string());
        }
        r.vram_after_transfers = self.probe.used();
        drop(memory);
        r.vram_after_release = self.probe.used();
        r.vram_cost = r.vram_before.and_then(|b| {
            let peak = r.vram_after_pin.max(r.vram_after_transfers)?;
            Some(peak as i64 - b as i64)
        });
        r
    }

    fn transfers(
        &self,
        memory: &mut A::HostMemory,
        seed: u64,
        r: &mut StrategyReport,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(), Broke> {
        let blocks = blocks(memory.len(), self.block);
        crate::tools::random::fill_random(memory.slices_mut(0..memory.len())?, seed);
        let (checked, bad) = self.round_trips(memory, &blocks, tick)?;
        r.verified_bytes = checked;
        r.mismatched_bytes = bad;
        let one_way = |up| {
            let each = |b: &Range<usize>| Move {
                up,
                lane: 0,
                range: b.clone(),
            };
            blocks.iter().map(each).collect::<Vec<_>>()
        };
        let bytes = total_bytes(&blocks);
        let mut timed = |moves: &[Move], what: &str| {
            self.timed(memory, moves, bytes, blocks.len() as u64, what, tick)
        };
        r.h2d = Some(timed(&one_way(true), "H2D")?);
        r.d2h = Some(timed(&one_way(false), "D2H")?);
        r.both = Some(timed(&both_ways(&blocks), "both ways")?);
        Ok(())
    }

    /// Every block: upload, invert the host copy, download, compare with the original.
    fn round_trips(
        &self,
        memory: &mut A::HostMemory,
        blocks: &[Range<usize>],
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(u64, u64), Broke> {
        let mut original = vec![0u8; blocks[0].len()];
        let mut bad = 0;
        for b in blocks {
            let want = &mut original[..b.len()];
            par::copy(want, memory.slices(b.clone())?);
            self.pass(
                memory,
                &[Move {
                    up: true,
                    lane: 0,
                    range: b.clone(),
                }],
            )?;
            par::invert(memory.slices_mut(b.clone())?);
            self.pass(
                memory,
                &[Move {
                    up: false,
                    lane: 0,
                    range: b.clone(),
                }],
            )?;
            bad += par::count_diff(memory.slices(b.clone())?, want);
            tick(1, "round trip checked");
        }
        Ok((memory.len() as u64, bad))
    }

    /// `repeats` passes of `moves` (`bytes` in `units` blocks each).
    fn timed(
        &self,
        memory: &mut A::HostMemory,
        moves: &[Move],
        bytes: u64,
        units: u64,
        what: &str,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<Bandwidth, BackendError> {
        let mut passes = Vec::new();
        for _ in 0..self.cfg.repeats.max(1) {
            passes.push(self.pass(memory, moves)?);
            tick(units, what);
        }
        Ok(Bandwidth::from_passes(bytes, passes))
    }

    /// One timed pass of `moves` on two lanes of their own, every copy waited for.
    fn pass(&self, memory: &mut A::HostMemory, moves: &[Move]) -> Result<Pass, BackendError> {
        let view = HostView::of_mut(memory);
        let buffers = [&self.dev_a, &self.dev_b];
        let enqueue = |lanes: &Lanes<'_, A>| enqueue(lanes, &view, &buffers, moves);
        copies_in_flight::<A, _>(self.device, 2, |lanes| {
            crate::tools::passes::timed_pass(lanes, enqueue)
        })
        .and_then(|r| r)
        .map(|(pass, _)| pass)
        .map_err(Into::into)
    }
}

/// Uploads from the first half of `blocks` on lane 0 while downloading into the second half
/// on lane 1.
fn both_ways(blocks: &[Range<usize>]) -> Vec<Move> {
    let (ups, downs) = blocks.split_at(blocks.len().div_ceil(2));
    let mut moves = Vec::new();
    for (i, up) in ups.iter().enumerate() {
        moves.push(Move {
            up: true,
            lane: 0,
            range: up.clone(),
        });
        if let Some(d) = downs.get(i) {
            moves.push(Move {
                up: false,
                lane: 1,
                range: d.clone(),
            });
        }
    }
    moves
}

/// Enqueues `moves`, each through the device buffer of its lane.
fn enqueue<'s, A: HostApi>(
    lanes: &Lanes<'s, A>,
    view: &HostView<'s>,
    buffers: &[&'s A::Buffer; 2],
    moves: &[Move],
) -> Result<Vec<EventOf<A>>, ErrorOf<A>> {
    let mut events = Vec::new();
    for m in moves {
        let (lane, buf, range) = (m.lane, buffers[m.lane], m.range.clone());
        events.extend(match m.up {
            true => lanes.upload(lane, buf, 0, view, range, &[])?,
            false => lanes.download(lane, view, range, buf, 0, &[])?,
        });
    }
    Ok(events)
}

fn total_bytes(blocks: &[Range<usize>]) -> u64 {
    blocks.iter().map(|b| b.len() as u64).sum()
}

/// Splits `len` bytes into blocks of `block` (the last may be shorter).
pub fn blocks(len: usize, block: usize) -> Vec<Range<usize>> {
    (0..len.div_ceil(block))
        .map(|i| i * block..((i + 1) * block).min(len))
        .collect()
}

impl StrategyReport {
    fn empty(strategy: String, kind: PinKind) -> Self {
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

fn judge(r: &mut StrategyReport, size: usize, cpu: bool, pageable_h2d: Option<f64>) {
    let cheap = r.vram_cost.map(|c| (c as f64) < 0.01 * size as f64);
    r.verdict = if let Some(e) = &r.error {
        format!("failed: {e}")
    } else if r.mismatched_bytes > 0 {
        format!(
            "DATA MISMATCH: {} of {} bytes came back different",
            r.mismatched_bytes, r.verified_bytes
        )
    } else if cpu {
        "works; CPU device: host memory is device memory, nothing needs pinning".into()
    } else {
        pinned_verdict(r, cheap, pageable_h2d)
    };
    r.good = r.error.is_none()
        && r.mismatched_bytes == 0
        && r.kind == PinKind::Driver
        && cheap != Some(false);
}

/// The verdict on memory that moved intact to a GPU, by how it was pinned.
fn pinned_verdict(r: &StrategyReport, cheap: Option<bool>, pageable_h2d: Option<f64>) -> String {
    let s = &r.strategy;
    match (r.kind, cheap, r.vram_cost) {
        (PinKind::Resident, ..) => {
            let speed = match (pageable_h2d, &r.h2d) {
                (Some(p), Some(h)) => format!(" (H2D {:.1} GB/s; pageable {:.1})", h.wall_gbps, p),
                _ => String::new(),
            };
            format!("not pinned for DMA: {s} keeps pages resident but the driver does not know them{speed}")
        }
        (PinKind::Pageable, ..) => "not pinned: plain pageable memory, the baseline".into(),
        (PinKind::Driver, Some(true), _) => "pinned, VRAM cost < 1% of size".into(),
        (PinKind::Driver, Some(false), Some(c)) => format!(
            "{s}: costs {} of VRAM on this driver",
            Bytes(c.max(0) as u64)
        ),
        _ => "pinned by the driver; VRAM cost unknown: this driver has no counter".into(),
    }
}

fn recommend(auto: Option<&str>, reports: &[StrategyReport]) -> (Option<String>, String) {
    let good = |s: &str| reports.iter().find(|r| r.strategy == s && r.good);
    if let Some(r) = auto.and_then(good) {
        return (
            Some(r.strategy.clone()),
            format!("auto's choice, measured here: {}", why(r)),
        );
    }
    let best = reports
        .iter()
        .filter(|r| r.good)
        .max_by(|a, b| speed(a).total_cmp(&speed(b)));
    match best {
        Some(r) => (
            Some(r.strategy.clone()),
            format!(
                "auto's choice did not pass here; this is the fastest that did: {}",
                why(r)
            ),
        ),
        None => (
            None,
            "no strategy was pinned by the driver at low VRAM cost with intact data".into(),
        ),
    }
}

fn why(r: &StrategyReport) -> String {
    let cost = match r.vram_cost {
        Some(c) => format!(
            "VRAM cost {}",
            if c <= 0 {
                "0".into()
            } else {
                Bytes(c as u64).to_string()
            }
        ),
        None => "VRAM cost not measurable on this driver".into(),
    };
    format!("pinned through the driver, data intact, {cost}")
}

fn speed(r: &StrategyReport) -> f64 {
    r.h2d.as_ref().map_or(0.0, |b| b.wall_gbps) + r.d2h.as_ref().map_or(0.0, |b| b.wall_gbps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::api::{Adapter, Api, Instance};
    use pinstream::backend::empty::{Empty, EmptyInstance};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn empty_device() -> <Empty as Api>::Device {
        let instance = EmptyInstance::new_with(1, 1 << 30);
        instance.adapters().unwrap()[0].open().unwrap()
    }

    /// The doctor is the same code on any API: on the empty one (a device of host memory)
    /// it pins its one way, moves and checks every byte, times every pass and recommends it.
    #[test]
    fn the_doctor_measures_every_way_to_pin_of_any_api() {
        let device = empty_device();
        let cfg = DoctorConfig {
            size: (10 << 20) + 123,
            block: 4 << 20,
            max_chunk: None,
            seed: Some(3),
            repeats: 2,
        };
        let pinnings = chosen::<Empty>(&device, &Selection::All).unwrap();
        let done = AtomicU64::new(0);
        let progress = |n: u64, _: &str| done.store(n, Ordering::Relaxed);
        let details = DoctorDevice::Adapter(device.info());
        let r = run::<Empty>(&device, details, &pinnings, &cfg, &progress).unwrap();
        assert_eq!(done.into_inner(), total_units(&cfg, 1));
        let [s] = &r.strategies[..] else {
            panic!("{r:?}")
        };
        assert_eq!((s.strategy.as_str(), s.error.as_deref()), ("heap", None));
        assert_eq!((s.verified_bytes, s.mismatched_bytes), (cfg.size as u64, 0));
        for b in [&s.h2d, &s.d2h, &s.both] {
            let b = b.as_ref().unwrap();
            assert_eq!((b.bytes, b.passes.len()), (cfg.size as u64, 2));
        }
        assert_eq!((s.chunks, s.contiguous), (1, true));
        assert_eq!(r.auto_strategy.as_deref(), Some("heap"));
        assert_eq!(r.recommendation.as_deref(), Some("heap"));
        assert!(r
            .recommendation_reason
            .starts_with("auto's choice, measured here"));
        assert_eq!(r.device.label(), "0: empty device 0 (none)");
    }

    /// `--strategy` names one of the API's own ways, in any case; a name it does not know is
    /// refused with the ones it does.
    #[test]
    fn a_strategy_is_named_in_the_apis_own_terms() {
        let device = empty_device();
        let pick = |s: &str| chosen::<Empty>(&device, &Selection::from(s));
        assert_eq!(pick("HEAP").unwrap().len(), 1);
        assert_eq!(pick("auto").unwrap().len(), 1);
        let e = pick("register").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown strategy `register`: choose all, auto or one of heap"
        );
    }

    #[test]
    fn a_block_past_the_devices_largest_allocation_is_refused() {
        let device = empty_device();
        let cfg = DoctorConfig {
            size: 1 << 20,
            block: (1 << 30) + 1,
            max_chunk: None,
            seed: None,
            repeats: 1,
        };
        let details = DoctorDevice::Adapter(device.info());
        let e = run::<Empty>(&device, details, &[], &cfg, &|_, _| {}).unwrap_err();
        assert!(matches!(e, DoctorError::Block { .. }), "{e}");
    }
}
