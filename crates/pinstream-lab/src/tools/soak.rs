//! Soak: pin, stream and release a region again and again, reading the process's resident
//! memory and the device's used memory after every release, to show nothing leaks.

use crate::kernels::MIX_U32;
use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::{run, DType, Job, StreamError, StreamOptions, WorkSize};
use pinstream::host::{HostError, HostRegion, PinOptions};
use pinstream::vram::VramProbe;
use serde::Serialize;

/// One cycle's readings, taken after the region and the stream's buffers were released.
#[derive(Debug, Clone, Serialize)]
pub struct Cycle {
    /// Process resident set (VmRSS), bytes.
    pub rss: u64,
    /// Device memory used, bytes, where a counter exists.
    pub vram: Option<u64>,
}

/// The soak's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    /// Bytes pinned per cycle.
    pub size: usize,
    /// Device memory used before the first cycle.
    pub vram_baseline: Option<u64>,
    /// Every cycle.
    pub cycles: Vec<Cycle>,
    /// (max − min) / min of the RSS from the settled cycles on ([`spread_from`]) (from the middle for short soaks).
    pub rss_spread: f64,
    /// Steady rise of the RSS level over the cycles from [`spread_from`] on: their three thirds'
    /// medians L1, L2, L3 give min(L2/L1, L3/L2)^2 - 1. A leak raises both ratios; a one-off
    /// step of a few MiB (a thread's malloc arena) raises one, and moves the spread, not this.
    pub rss_growth: f64,
    /// Largest |VRAM after a cycle − baseline|, bytes.
    pub vram_max_drift: Option<u64>,
    /// Seconds for the whole soak.
    pub seconds: f64,
}

/// Why the soak stopped.
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    /// Pinning failed.
    #[error("cycle {cycle}: {source}")]
    Host {
        /// The cycle.
        cycle: usize,
        /// The failure.
        source: HostError,
    },
    /// Streaming failed.
    #[error("cycle {cycle}: {source}")]
    Stream {
        /// The cycle.
        cycle: usize,
        /// The failure.
        source: StreamError,
    },
    /// The built-in kernel did not build.
    #[error("the built-in kernel did not build: {0}")]
    Build(String),
}

/// The fewest cycles a soak may have: the level is compared between the first and the last
/// quarter of the cycles from [`spread_from`] on, and each quarter needs two cycles.
pub const MIN_CYCLES: usize = 16;

/// The first cycle the spread and the level are judged from, once the allocator has settled:
/// a fifth of the cycles, at least cycle 50, for more than 100 cycles; else the middle. Soaks
/// of 1,500 cycles of 16 MiB on PoCL (2026-12-01, two at once on two cores) settle from about
/// 97 to 101-103 MiB over the first 100 to 200 cycles and stay there, so a window starting
/// at cycle 50 of 500 read that settling as 5-6% of growth; a leak still raises the level over
/// the remaining four fifths.
pub fn spread_from(cycles: usize) -> usize {
    if cycles > 100 {
        (cycles / 5).max(50)
    } else {
        cycles / 2
    }
}

/// Resident memory of this process in bytes (`VmRSS` on Linux, the working set on Windows).
pub fn rss_bytes() -> u64 {
    pinstream::backend::os::resident_bytes()
}

/// Runs `cycles` cycles of: pin `size` bytes, stream them in place through `block`-sized
/// blocks within `budget`, release. `each(cycle, reading)` sees every reading.
pub fn soak(
    ctx: &Context,
    probe: &VramProbe,
    cycles: usize,
    size: usize,
    block: usize,
    budget: u64,
    each: &dyn Fn(usize, &Cycle),
) -> Result<SoakReport, SoakError> {
    let start = std::time::Instant::now();
    let mut kernel = build_mix(ctx)?;
    let opts = StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: block,
        in_per_out: 1,
        slots: None,
        vram_budget: budget,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: pinstream::engine::BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    };
    let vram_baseline = probe.used();
    let mut readings = Vec::with_capacity(cycles);
    for cycle in 0..cycles {
        one_cycle(ctx, &mut kernel, size, &opts, cycle)?;
        let c = Cycle {
            rss: rss_bytes(),
            vram: probe.used(),
        };
        each(cycle, &c);
        readings.push(c);
    }
    Ok(summarize(size, vram_baseline, readings, start.elapsed()))
}

fn build_mix(ctx: &Context) -> Result<Kernel, SoakError> {
    let program = ctx
        .build_program(MIX_U32, "")
        .map_err(|e| SoakError::Build(e.to_string()))?;
    program
        .kernel("mix_u32")
        .map_err(|e| SoakError::Build(e.to_string()))
}

/// Pins `size` bytes, streams them in place, releases them.
fn one_cycle(
    ctx: &Context,
    kernel: &mut Kernel,
    size: usize,
    opts: &StreamOptions,
    cycle: usize,
) -> Result<(), SoakError> {
    let mut region = HostRegion::new(ctx, size, &PinOptions::default())
        .map_err(|source| SoakError::Host { cycle, source })?;
    let job = Job {
        in_place: Some(&mut region),
        ..Job::default()
    };
    run(ctx, kernel, job, opts, &|_, _| {})
        .map(drop)
        .map_err(|source| SoakError::Stream { cycle, source })
}

/// The soak's figures from its readings (see [`SoakReport`]).
fn summarize(
    size: usize,
    vram_baseline: Option<u64>,
    readings: Vec<Cycle>,
    took: std::time::Duration,
) -> SoakReport {
    let cycles = readings.len();
    let from = spread_from(cycles);
    let tail: Vec<u64> = readings[from..].iter().map(|c| c.rss).collect();
    let (lo, hi) = (
        tail.iter().min().copied().unwrap_or(0),
        tail.iter().max().copied().unwrap_or(0),
    );
    let vram_max_drift = vram_baseline.map(|b| {
        readings
            .iter()
            .filter_map(|c| c.vram)
            .map(|v| v.abs_diff(b))
            .max()
            .unwrap_or(0)
    });
    let level = |r: &[Cycle]| {
        let mut v: Vec<u64> = r.iter().map(|c| c.rss).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0) as f64
    };
    // Three consecutive thirds of the settled cycles: a leak raises the level across both
    // pairs, a one-off step (a thread's malloc arena, seen up to 10% on a loaded 2-core
    // machine) across one only, so the steady rise is the smaller of the two, over both.
    let third = ((cycles - from) / 3).max(1);
    let at = |k: usize| {
        level(
            &readings[(from + k * third).min(cycles.saturating_sub(1))
                ..(from + (k + 1) * third).min(cycles)],
        )
    };
    let (l1, l2, l3) = (at(0), at(1), at(2));
    let rss_growth = if l1 > 0.0 && l2 > 0.0 {
        (l2 / l1).min(l3 / l2).powi(2) - 1.0
    } else {
        0.0
    };
    SoakReport {
        size,
        rss_growth,
        vram_baseline,
        rss_spread: if lo > 0 {
            (hi - lo) as f64 / lo as f64
        } else {
            0.0
        },
        vram_max_drift,
        cycles: readings,
        seconds: took.as_secs_f64(),
    }
}
