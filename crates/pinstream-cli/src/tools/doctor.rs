//! `pinstream doctor`: for every strategy a device offers, measure the time to pin, the VRAM
//! cost, H2D, D2H and both-ways bandwidth, and check every round trip byte for byte.

use crate::tools::pin_search;
use pinstream::backend::api::Profile;
use pinstream::backend::opencl::{ClError, Context, DeviceBuffer, DeviceInfo, Event, Queue};
use pinstream::host::{auto_order, HostError, HostRegion, PinOptions, Strategy, StrategyChoice};
use pinstream::par;
use pinstream::units::{gb_per_s, median, Bytes};
use pinstream::vram::{VramProbe, VramSource};
use serde::Serialize;
use std::ops::Range;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// Region size per strategy.
    pub size: usize,
    /// Transfer block size (device buffer size).
    pub block: usize,
    /// Strategies to measure; `None`: every one the device offers.
    pub strategies: Option<Vec<Strategy>>,
    /// Cap on chunk size (tests use it to force chunking).
    pub max_chunk: Option<usize>,
    /// Seed of the random data; `None`: fresh from the clock.
    pub seed: Option<u64>,
    /// Timed passes per direction; figures are their median.
    pub repeats: usize,
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
    /// A forced strategy this device lacks.
    #[error("strategy `{strategy}` is not available on this device: {why}; run `pinstream devices` to see the strategies it offers")]
    Unsupported {
        /// The strategy.
        strategy: Strategy,
        /// Why not.
        why: String,
    },
    /// Context, queue or device buffer failure.
    #[error(transparent)]
    Cl(#[from] ClError),
}

/// One timed pass.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    /// Wall seconds from first enqueue to completion.
    pub wall_s: f64,
    /// Seconds from the first command's start to the last one's end (event profiling).
    pub events_s: f64,
}

/// A bandwidth figure from the wall clock and from event profiling: the median pass, with
/// the slowest and fastest beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    /// Bytes moved per pass (both directions added for both-ways).
    pub bytes: u64,
    /// Median GB/s by the wall clock.
    pub wall_gbps: f64,
    /// Median GB/s by event profiling.
    pub events_gbps: f64,
    /// Slowest pass, GB/s by the wall clock.
    pub min_gbps: f64,
    /// Fastest pass, GB/s by the wall clock.
    pub max_gbps: f64,
    /// Every pass.
    pub passes: Vec<Pass>,
}

impl Bandwidth {
    pub(crate) fn from_passes(bytes: u64, passes: Vec<Pass>) -> Self {
        let rates = |f: fn(&Pass) -> f64| {
            let mut v: Vec<f64> = passes.iter().map(|p| gb_per_s(bytes, f(p))).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let (wall, events) = (rates(|p| p.wall_s), rates(|p| p.events_s));
        Bandwidth {
            bytes,
            wall_gbps: median(&wall),
            events_gbps: median(&events),
            min_gbps: wall.first().copied().unwrap_or(0.0),
            max_gbps: wall.last().copied().unwrap_or(0.0),
            passes,
        }
    }
}

/// One strategy's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    /// The strategy.
    pub strategy: Strategy,
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
    pub device: DeviceInfo,
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
    /// `auto`'s choice on this device.
    pub auto_strategy: Option<Strategy>,
    /// Why.
    pub auto_reason: String,
    /// One entry per strategy.
    pub strategies: Vec<StrategyReport>,
    /// The strategy to use here.
    pub recommendation: Option<Strategy>,
    /// Why that one.
    pub recommendation_reason: String,
}

/// Progress: (units done so far, a message). One unit per block moved or checked.
pub type ProgressFn<'a> = &'a (dyn Fn(u64, &str) + Sync);

/// Units of work [`run`] reports for `cfg` over `n` strategies (for a progress bar's length).
pub fn total_units(cfg: &DoctorConfig, n: usize) -> u64 {
    (n * (1 + 3 * cfg.repeats.max(1)) * cfg.size.div_ceil(cfg.block.max(1))) as u64
}

/// What the doctor measures every strategy through: two queues, two device buffers of the
/// block size (committed before the VRAM baseline) and the VRAM counter.
struct DoctorTransfers {
    ctx: Context,
    q_up: Queue,
    q_down: Queue,
    dev_a: DeviceBuffer,
    dev_b: DeviceBuffer,
    probe: VramProbe,
}

/// Measures every requested strategy on `ctx`'s device.
pub fn run(
    ctx: &Context,
    cfg: &DoctorConfig,
    progress: ProgressFn,
) -> Result<DoctorReport, DoctorError> {
    let device = ctx.device().clone();
    if cfg.block == 0 || cfg.block as u64 > device.max_alloc {
        return Err(DoctorError::Block {
            block: cfg.block,
            max_alloc: device.max_alloc,
        });
    }
    pinstream::host::check_size(cfg.size)?;
    let block = cfg.block.min(cfg.size);
    let strategies = match &cfg.strategies {
        Some(list) => {
            for &s in list {
                s.offered_by(&device)
                    .map_err(|why| DoctorError::Unsupported { strategy: s, why })?;
            }
            list.clone()
        }
        None => Strategy::offered(&device),
    };
    let transfers = DoctorTransfers::new(ctx, block)?;
    let seed = cfg.seed.unwrap_or_else(clock_seed);
    let mut done = 0u64;
    let mut reports = Vec::new();
    for (i, &s) in strategies.iter().enumerate() {
        let mut tick = |n: u64, msg: &str| {
            done += n;
            progress(done, &format!("{s}: {msg}"));
        };
        reports.push(transfers.measure(s, cfg, block, seed.wrapping_add(i as u64), &mut tick));
    }
    let pageable_h2d = reports
        .iter()
        .find(|r| r.strategy == Strategy::Pageable)
        .and_then(|r| r.h2d.as_ref().map(|b| b.wall_gbps));
    for r in &mut reports {
        judge(r, cfg.size, &device, pageable_h2d);
    }
    let (order, auto_reason) = auto_order(&device);
    let auto_strategy = order.first().copied();
    let (recommendation, recommendation_reason) = recommend(auto_strategy, &reports);
    Ok(DoctorReport {
        vram_source: transfers.probe.source(),
        vram_note: transfers.probe.note().map(str::to_string),
        device,
        size: cfg.size,
        block,
        seed,
        repeats: cfg.repeats.max(1),
        auto_strategy,
        auto_reason: auto_reason.to_string(),
        strategies: reports,
        recommendation,
        recommendation_reason,
    })
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

impl DoctorTransfers {
    fn new(ctx: &Context, block: usize) -> Result<Self, ClError> {
        let (q_up, q_down) = (ctx.queue()?, ctx.queue()?);
        let (dev_a, dev_b) = (ctx.device_buffer(block)?, ctx.device_buffer(block)?);
        // Touch both device buffers so lazy drivers commit them before the VRAM baseline.
        q_up.fill(&dev_a, 0, block, 0x11)?.wait()?;
        q_up.fill(&dev_b, 0, block, 0x22)?.wait()?;
        Ok(DoctorTransfers {
            ctx: ctx.clone(),
            q_up,
            q_down,
            dev_a,
            dev_b,
            probe: VramProbe::new(ctx.device()),
        })
    }

    /// The largest size this strategy pins, searched for after a pin of `size` failed
    /// ([`pin_search`]), with the limit that stops it and what to do, as a note for the
    /// failure. Each try is released before the next.
    fn largest_pin(&self, s: Strategy, size: usize, opts: &PinOptions) -> String {
        let found =
            pin_search::largest_pinnable(size, |n| HostRegion::new(&self.ctx, n, opts).is_ok());
        pin_search::note(s, size, found, cfg!(windows))
    }

    fn measure(
        &self,
        s: Strategy,
        cfg: &DoctorConfig,
        block: usize,
        seed: u64,
        tick: &mut dyn FnMut(u64, &str),
    ) -> StrategyReport {
        let mut r = StrategyReport::empty(s);
        r.vram_before = self.probe.used();
        let opts = PinOptions {
            strategy: StrategyChoice::Forced(s),
            max_chunk: cfg.max_chunk,
            touch_threads: None,
            ..Default::default()
        };
        let mut region = match HostRegion::new(&self.ctx, cfg.size, &opts) {
            Ok(region) => region,
            Err(e) => {
                r.error = Some(format!("{e}{}", self.largest_pin(s, cfg.size, &opts)));
                tick(total_units(cfg, 1), "failed");
                return r;
            }
        };
        r.pin_s = Some(region.pin_time().as_secs_f64());
        r.resident_s = region.resident_time().map(|t| t.as_secs_f64());
        r.chunks = region.chunk_count();
        r.contiguous = region.is_contiguous();
        r.vram_after_pin = self.probe.used();
        if let Err(e) = self.transfers(&mut region, block, seed, cfg.repeats, &mut r, tick) {
            r.error = Some(e.to_string());
        }
        r.vram_after_transfers = self.probe.used();
        drop(region);
        r.vram_after_release = self.probe.used();
        r.vram_cost = r.vram_before.and_then(|b| {
            let peak = r.vram_after_pin.max(r.vram_after_transfers)?;
            Some(peak as i64 - b as i64)
        });
        r
    }

    fn transfers(
        &self,
        region: &mut HostRegion,
        block: usize,
        seed: u64,
        repeats: usize,
        r: &mut StrategyReport,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(), HostError> {
        let blocks = blocks(region.len(), block);
        crate::tools::random::fill_random(region.slices_mut(0..region.len())?, seed);
        let (checked, bad) = self.round_trips(region, &blocks, tick)?;
        r.verified_bytes = checked;
        r.mismatched_bytes = bad;
        let n = repeats.max(1);
        r.h2d = Some(self.timed(&blocks, n, tick, "H2D", |b, ev| {
            ev.extend(region.upload(&self.q_up, b.clone(), &self.dev_a, 0, &[])?);
            Ok(())
        })?);
        r.d2h = Some(self.timed(&blocks, n, tick, "D2H", |b, ev| {
            ev.extend(region.download(&self.q_up, &self.dev_a, 0, b.clone(), &[])?);
            Ok(())
        })?);
        r.both = Some(self.both_ways(region, &blocks, n, tick)?);
        Ok(())
    }

    /// Every block: upload, invert the host copy, download, compare with the original.
    fn round_trips(
        &self,
        region: &mut HostRegion,
        blocks: &[Range<usize>],
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(u64, u64), HostError> {
        let mut original = vec![0u8; blocks[0].len()];
        let mut bad = 0;
        for b in blocks {
            let want = &mut original[..b.len()];
            par::copy(want, region.slices(b.clone())?);
            wait_all(&region.upload(&self.q_up, b.clone(), &self.dev_a, 0, &[])?)?;
            par::invert(region.slices_mut(b.clone())?);
            wait_all(&region.download(&self.q_up, &self.dev_a, 0, b.clone(), &[])?)?;
            bad += par::count_diff(region.slices(b.clone())?, want);
            tick(1, "round trip checked");
        }
        Ok((region.len() as u64, bad))
    }

    fn timed(
        &self,
        blocks: &[Range<usize>],
        repeats: usize,
        tick: &mut dyn FnMut(u64, &str),
        what: &str,
        mut enqueue: impl FnMut(&Range<usize>, &mut Vec<Event>) -> Result<(), HostError>,
    ) -> Result<Bandwidth, HostError> {
        let mut passes = Vec::new();
        for _ in 0..repeats {
            let mut events = Vec::new();
            let start = Instant::now();
            for b in blocks {
                enqueue(b, &mut events)?;
            }
            self.q_up.flush()?;
            wait_all(&events)?;
            passes.push(pass(start, &events)?);
            tick(blocks.len() as u64, what);
        }
        Ok(Bandwidth::from_passes(total_bytes(blocks), passes))
    }

    /// Uploads from the first half while downloading into the second, on two queues.
    fn both_ways(
        &self,
        region: &mut HostRegion,
        blocks: &[Range<usize>],
        repeats: usize,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<Bandwidth, HostError> {
        let half = blocks.len().div_ceil(2);
        let (ups, downs) = blocks.split_at(half);
        let mut passes = Vec::new();
        for _ in 0..repeats {
            let mut events = Vec::new();
            let start = Instant::now();
            for (i, up) in ups.iter().enumerate() {
                events.extend(region.upload(&self.q_up, up.clone(), &self.dev_a, 0, &[])?);
                if let Some(d) = downs.get(i) {
                    events.extend(region.download(&self.q_down, &self.dev_b, 0, d.clone(), &[])?);
                }
            }
            self.q_up.flush()?;
            self.q_down.flush()?;
            wait_all(&events)?;
            passes.push(pass(start, &events)?);
            tick(blocks.len() as u64, "both ways");
        }
        Ok(Bandwidth::from_passes(total_bytes(blocks), passes))
    }
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

fn wait_all(events: &[Event]) -> Result<(), ClError> {
    events.iter().try_for_each(Event::wait)
}

pub(crate) fn pass(start: Instant, events: &[Event]) -> Result<Pass, ClError> {
    let wall_s = start.elapsed().as_secs_f64();
    let profiles = events
        .iter()
        .map(|e| e.profile())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Pass::from_profiles(wall_s, &profiles))
}

impl Pass {
    /// A pass of `wall_s` seconds whose commands ran as `profiles` (any API's device times):
    /// the event time is the span from the first start to the last end.
    pub(crate) fn from_profiles(wall_s: f64, profiles: &[Profile]) -> Self {
        let start = profiles.iter().map(|p| p.start).min().unwrap_or(0);
        let end = profiles.iter().map(|p| p.end).max().unwrap_or(0);
        Pass {
            wall_s,
            events_s: end.saturating_sub(start) as f64 / 1e9,
        }
    }
}

impl StrategyReport {
    fn empty(strategy: Strategy) -> Self {
        StrategyReport {
            strategy,
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
}

fn judge(r: &mut StrategyReport, size: usize, device: &DeviceInfo, pageable_h2d: Option<f64>) {
    let s = r.strategy;
    let cheap = r.vram_cost.map(|c| (c as f64) < 0.01 * size as f64);
    r.verdict = if let Some(e) = &r.error {
        format!("failed: {e}")
    } else if r.mismatched_bytes > 0 {
        format!(
            "DATA MISMATCH: {} of {} bytes came back different",
            r.mismatched_bytes, r.verified_bytes
        )
    } else if !device.is_gpu() {
        "works; CPU device: host memory is device memory, nothing needs pinning".into()
    } else if !s.driver_pinned() {
        let speed = match (pageable_h2d, &r.h2d) {
            (Some(p), Some(h)) if s == Strategy::Mlock => {
                format!(" (H2D {:.1} GB/s; pageable {:.1})", h.wall_gbps, p)
            }
            _ => String::new(),
        };
        match s {
            Strategy::Mlock => format!("not pinned for DMA: mlock keeps pages resident but the driver does not know them{speed}"),
            _ => "not pinned: plain pageable memory, the baseline".into(),
        }
    } else {
        match (cheap, r.vram_cost) {
            (Some(true), _) => "pinned, VRAM cost < 1% of size".into(),
            (Some(false), Some(c)) => format!(
                "{s}: costs {} of VRAM on this driver",
                Bytes(c.max(0) as u64)
            ),
            _ => "pinned by the driver; VRAM cost unknown: this driver has no counter".into(),
        }
    };
    r.good =
        r.error.is_none() && r.mismatched_bytes == 0 && s.driver_pinned() && cheap != Some(false);
}

fn recommend(auto: Option<Strategy>, reports: &[StrategyReport]) -> (Option<Strategy>, String) {
    let good = |s: Strategy| reports.iter().find(|r| r.strategy == s && r.good);
    if let Some(r) = auto.and_then(good) {
        return (
            Some(r.strategy),
            format!("auto's choice, measured here: {}", why(r)),
        );
    }
    let best = reports
        .iter()
        .filter(|r| r.good)
        .max_by(|a, b| speed(a).total_cmp(&speed(b)));
    match best {
        Some(r) => (
            Some(r.strategy),
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
