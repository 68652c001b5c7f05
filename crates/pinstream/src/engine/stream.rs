//! The stream: blocks of host data through a ring of device slots per device, on three queues
//! each, through any API. [`run`] streams on one device, [`run_on`] on several (each gets a
//! contiguous share of the blocks and a ring of its own, on a thread of its own).
//!
//! The schedule (which command waits for which) is `engine::ring`'s; one device's share
//! (slots, residents, warm-up, the stages) is `engine::device`'s. Everything is enqueued
//! ahead and chained by events, so the three queues overlap; `sequential` puts all of it on
//! one in-order queue for the baseline.
//!
//! The run is synchronous and borrows its memory for its whole length (`&mut` for the
//! output or the in-place memory, `&` for inputs and residents), so the caller cannot touch
//! it while a device may; every command is waited for before the run returns.

use super::bind::{bind_hosted, Binding, Shape};
use super::device::{run_share, Share, ShareReport};
use super::error::{LayoutError, StreamError};
use super::job::{Job, JobViews, Target};
use super::layout::{shape_layout, Layout};
pub use super::options::{StreamOptions, WorkSize};
use super::profile::{combine, totals, Record, Totals};
use super::resident::{pass_bytes, pass_seconds, PassBytes, ResidencyReason, ResidencyReport};
use super::slots::Carry;
use super::validate::check_job;
use crate::backend::api::{Api, Device, ErrorOf, Kernel};
use serde::Serialize;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One device's part of a run of several devices.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceShare {
    /// The device.
    pub device: String,
    /// Blocks it streamed.
    pub blocks: usize,
    /// Slots in its ring.
    pub slots: usize,
    /// Device memory its pool allocated.
    pub pool_bytes: u64,
    /// Its stage totals, on its own clock.
    pub totals: Totals,
    /// Its blocks that stayed in device memory across passes (in its own budget).
    pub resident_blocks: usize,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    /// `three queues` or `one in-order queue`.
    pub mode: &'static str,
    /// Blocks streamed.
    pub blocks: usize,
    /// Slots in the ring (the largest ring, with several devices).
    pub slots: usize,
    /// Input bytes per block (per input).
    pub block_bytes: usize,
    /// Output bytes per full block.
    pub out_block_bytes: usize,
    /// Resident bytes uploaded once (to each device).
    pub resident_bytes: u64,
    /// Device memory the pools allocated, all devices together.
    pub pool_bytes: u64,
    /// The budget (per device).
    pub vram_budget: u64,
    /// Wall time on the host, enqueue to last completion (the longest device's).
    pub host_wall_s: f64,
    /// Stage totals, bandwidth, overlap (all devices together, see
    /// [`super::profile::combine`]).
    pub totals: Totals,
    /// Seconds from the start of the run (the call) until the host saw the first block's
    /// upload complete (the earliest device's).
    pub first_upload_s: Option<f64>,
    /// When that was, for callers that count from an earlier start (the pinning of the
    /// memory: [`crate::host::PinOptions::progressive`]).
    #[serde(skip)]
    pub first_upload_at: Option<Instant>,
    /// Seconds the rings waited for host memory still being pinned in the background (all
    /// devices together; 0 for memory pinned up front).
    pub pin_wait_s: f64,
    /// Every device's buffers had bounds guards, checked after each kernel
    /// ([`StreamOptions::check_bounds`]).
    pub bounds_guard: bool,
    /// Passes over the blocks ([`StreamOptions::passes`]); the totals count them all.
    pub passes: usize,
    /// The blocks that stayed in device memory across passes, and why.
    pub residency: ResidencyReport,
    /// The bytes each pass moved, by its commands' records: with resident blocks, the first
    /// pass uploads them, later ones do not, and in place the last downloads them.
    /// [`PassBytes::floor_s`] gives the time they take at a link's peak.
    pub pass_bytes: Vec<PassBytes>,
    /// The device seconds each pass took (`resident::pass_seconds`: on each device, from the
    /// end of the pass before to the end of the pass's last command; the slowest device's).
    /// With [`PassBytes::floor_s`] over a link peak measured beside the run, how close each
    /// pass came to the bytes it had to move.
    pub pass_seconds: Vec<f64>,
    /// Each device's part, with several devices (empty with one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceShare>,
    /// Every command, for traces.
    #[serde(skip)]
    pub records: Vec<Record>,
}

/// Streams `job` through `kernel` on `device`; `progress(blocks_done, bytes_done)` is called
/// as blocks come back.
pub fn run<D: Device>(
    device: &D,
    kernel: &mut <D::A as Api>::Kernel,
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<StreamReport, StreamError> {
    run_on(&mut [Target::new(device, kernel)], job, opts, progress)
}

/// Streams `job` over several devices at once: each streams a contiguous share of the blocks
/// ([`partition`]) through a ring of its own, inside a VRAM budget of `o.vram_budget` of its
/// own, with the residents uploaded to each. With one target it is [`run`]. A failure on one
/// device stops the others after their blocks in flight; the first failure is returned.
/// `progress(blocks_done, bytes_done)` counts every device's.
pub fn run_on<D: Device>(
    targets: &mut [Target<'_, D>],
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<StreamReport, StreamError> {
    run_on_each(targets, job, opts, &|p: Progress| {
        progress(p.blocks, p.bytes)
    })
}

/// Where a run stands when a block comes back on one of its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The device the block came back on: its index in the targets.
    pub device: usize,
    /// Blocks that device has completed, of its share.
    pub device_blocks: u64,
    /// Blocks completed on every device together.
    pub blocks: u64,
    /// Bytes completed on every device together.
    pub bytes: u64,
}

/// As [`run_on`], with each device's progress: a caller that watches for a stalled device
/// (a kernel that never ends) can name it.
pub fn run_on_each<D: Device>(
    targets: &mut [Target<'_, D>],
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<StreamReport, StreamError> {
    run_each_with(targets, job, opts, progress, None)
}

/// As [`run_on_each`] on one device, as pass `carry.pass` of a caller's passes whose
/// resident blocks `carry` keeps across the runs ([`Carry`]).
pub(crate) fn run_carried<D: Device>(
    target: &mut Target<'_, D>,
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(Progress) + Sync),
    carry: &mut Carry<D::A>,
) -> Result<StreamReport, StreamError> {
    run_each_with(
        std::slice::from_mut(target),
        job,
        opts,
        progress,
        Some(carry),
    )
}

fn run_each_with<D: Device>(
    targets: &mut [Target<'_, D>],
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(Progress) + Sync),
    carry: Option<&mut Carry<D::A>>,
) -> Result<StreamReport, StreamError> {
    let start = Instant::now();
    let mut result = stream_job(targets, job, opts, progress, carry);
    if let Ok(r) = &mut result {
        r.first_upload_s = r
            .first_upload_at
            .map(|t| t.saturating_duration_since(start).as_secs_f64());
    }
    // The slots and residents go with this run: kernels must not keep them alive (VRAM).
    for t in targets.iter_mut() {
        t.kernel.release_buffers();
    }
    result
}

fn stream_job<D: Device>(
    targets: &mut [Target<'_, D>],
    job: Job,
    opts: &StreamOptions,
    progress: &(dyn Fn(Progress) + Sync),
    carry: Option<&mut Carry<D::A>>,
) -> Result<StreamReport, StreamError> {
    if targets.is_empty() {
        return Err(LayoutError::NoDevice.into());
    }
    crate::backend::check_injected_fault()?;
    if opts.passes == 0 {
        return Err(LayoutError::ZeroPasses.into());
    }
    let views = JobViews::new(job)?;
    let layout = shape_layout(
        views.input_len(),
        views.in_place(),
        views.output_len(),
        opts,
    )?;
    check_passes(layout.blocks, opts.passes)?;
    let shape = Shape {
        inputs: views.input_count(),
        output: !views.in_place(),
        residents: views.residents.len(),
    };
    let bindings = targets
        .iter()
        .map(|t| bind_kernel(t.kernel, &shape, &views, opts, &t.hosted_names()))
        .collect::<Result<Vec<_>, _>>()?;
    let abort = AtomicBool::new(false);
    let shares: Vec<Share> = partition(layout.blocks, targets.len())
        .into_iter()
        .zip(bindings)
        .enumerate()
        .map(|(d, (blocks, binding))| Share {
            layout: &layout,
            opts,
            views: &views,
            binding,
            blocks,
            index: d as u16,
            abort: (targets.len() > 1).then_some(&abort),
        })
        .collect();
    let outcomes = match targets {
        [one] => vec![run_share(one, &shares[0], &alone(progress), carry)],
        several => run_shares(several, &shares, progress, &abort),
    };
    let reports = merge(outcomes, layout.blocks * opts.passes)?;
    Ok(report(opts, &layout, &views, reports))
}

/// The progress of a run on one device, as its ring counts it.
fn alone(progress: &(dyn Fn(Progress) + Sync)) -> impl Fn(u64, u64) + '_ {
    move |b, bytes| {
        progress(Progress {
            device: 0,
            device_blocks: b,
            blocks: b,
            bytes,
        })
    }
}

/// Refuses more block-passes than a run counts: steps are counted in `u32` (a record's pass)
/// and their records are held for the report, so `blocks × passes` stays under `u32::MAX`.
fn check_passes(blocks: usize, passes: usize) -> Result<(), LayoutError> {
    let max = (u32::MAX as usize) / blocks.max(1);
    if passes > max {
        return Err(LayoutError::TooManyPasses {
            passes,
            blocks,
            max,
        });
    }
    Ok(())
}

/// Binds the job to `kernel`'s parameters and checks the run against them and the kernel's
/// work-group limits on its device ([`super::validate::check_job`]: counts, element types,
/// block and launch sizes), before anything is allocated.
fn bind_kernel<K: Kernel>(
    kernel: &K,
    shape: &Shape,
    views: &JobViews,
    opts: &StreamOptions,
    hosted: &[String],
) -> Result<Binding, StreamError> {
    let backend = |e: ErrorOf<K::A>| StreamError::Backend(e.into());
    let params = kernel.params().map_err(backend)?;
    let binding = bind_hosted(kernel.name(), &params, shape, &views.args, hosted)?;
    let limits = kernel.work_group_limits().map_err(backend)?;
    let words = <K::A as crate::backend::api::Api>::HALVES_IN_WORDS;
    check_job(kernel.name(), views, &params, &binding, opts, limits, words)?;
    Ok(binding)
}

/// Contiguous shares of `blocks` for `devices` devices, as even as whole blocks allow: the
/// blocks each device of [`run_on`] streams (device `d` gets the `d`-th range). Contiguous
/// rather than round-robin so that each device reads one range of host memory (one NUMA
/// placement per device) and writes one range of the output (y = W·x: its own rows).
pub fn partition(blocks: usize, devices: usize) -> Vec<Range<usize>> {
    (0..devices)
        .map(|d| blocks * d / devices..blocks * (d + 1) / devices)
        .collect()
}

/// Runs each share on its device, one thread per device, with one progress for them all.
fn run_shares<D: Device>(
    targets: &mut [Target<'_, D>],
    shares: &[Share],
    progress: &(dyn Fn(Progress) + Sync),
    abort: &AtomicBool,
) -> Vec<Result<ShareReport, StreamError>> {
    let done = Mutex::new(vec![(0u64, 0u64); targets.len()]);
    let report = |d: usize, blocks: u64, bytes: u64| {
        let mut all = crate::sync::lock(&done);
        all[d] = (blocks, bytes);
        let (b, by) = all.iter().fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        progress(Progress {
            device: d,
            device_blocks: blocks,
            blocks: b,
            bytes: by,
        });
    };
    std::thread::scope(|s| {
        let running: Vec<_> = targets
            .iter_mut()
            .zip(shares)
            .enumerate()
            .filter(|(_, (_, share))| !share.blocks.is_empty())
            .map(|(d, (target, share))| {
                let report = &report;
                s.spawn(move || {
                    let r = run_share(target, share, &|b, by| report(d, b, by), None);
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    r.map_err(|e| on_device(target.device.describe(), e))
                })
            })
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// A device's failure, naming the device (a stop is the whole run's, and stays as it is).
fn on_device(device: String, e: StreamError) -> StreamError {
    match e {
        e @ StreamError::Stopped { .. } => e,
        e => StreamError::OnDevice {
            device,
            source: Box::new(e),
        },
    }
}

/// The devices' reports, or the run's error: the first failure that is not a stop, else the
/// stop with every device's blocks counted (`blocks`: the run's, every pass counted).
fn merge(
    outcomes: Vec<Result<ShareReport, StreamError>>,
    blocks: usize,
) -> Result<Vec<ShareReport>, StreamError> {
    if outcomes.len() == 1 {
        return outcomes
            .into_iter()
            .map(|r| r.map(|x| vec![x]))
            .next()
            .unwrap();
    }
    let (mut reports, mut stop, mut done) = (Vec::new(), None, 0);
    for r in outcomes {
        match r {
            Ok(rep) => {
                done += rep.blocks;
                reports.push(rep);
            }
            Err(StreamError::Stopped { code, done: d, .. }) => {
                done += d;
                stop = stop.max(Some(code));
            }
            Err(e) => return Err(e),
        }
    }
    match stop {
        Some(code) => Err(StreamError::Stopped { code, done, blocks }),
        None => Ok(reports),
    }
}

fn report(
    opts: &StreamOptions,
    layout: &Layout,
    views: &JobViews,
    shares: Vec<ShareReport>,
) -> StreamReport {
    let per_device: Vec<Totals> = shares.iter().map(|s| totals(&s.records)).collect();
    let devices = match shares.len() {
        1 => Vec::new(),
        _ => shares
            .iter()
            .zip(&per_device)
            .map(|(s, t)| DeviceShare {
                device: s.device.clone(),
                blocks: s.blocks,
                slots: s.slots,
                pool_bytes: s.pool_bytes,
                totals: t.clone(),
                resident_blocks: s.resident.0,
            })
            .collect(),
    };
    let mut rep = StreamReport {
        mode: if opts.sequential {
            "one in-order queue"
        } else {
            "three queues"
        },
        blocks: layout.blocks,
        slots: shares.iter().map(|s| s.slots).max().unwrap_or(0),
        block_bytes: layout.in_block_bytes(),
        out_block_bytes: if views.in_place() {
            layout.in_block_bytes()
        } else {
            layout.out_block_bytes()
        },
        resident_bytes: views.resident_bytes(),
        pool_bytes: shares.iter().map(|s| s.pool_bytes).sum(),
        vram_budget: opts.vram_budget,
        host_wall_s: shares.iter().map(|s| s.wall_s).fold(0.0, f64::max),
        first_upload_s: None,
        first_upload_at: shares.iter().filter_map(|s| s.first_upload).min(),
        pin_wait_s: shares.iter().map(|s| s.pin_wait.as_secs_f64()).sum(),
        bounds_guard: shares.iter().all(|s| s.guarded),
        totals: combine(&per_device),
        devices,
        passes: opts.passes,
        residency: residency(opts, layout, &shares),
        pass_bytes: Vec::new(),
        pass_seconds: Vec::new(),
        records: concat(shares.into_iter().map(|s| s.records)),
    };
    rep.pass_bytes = pass_bytes(&rep.records, opts.passes);
    rep.pass_seconds = pass_seconds(&rep.records, opts.passes);
    rep
}

/// The resident blocks of every device, with the first device's reason.
fn residency(opts: &StreamOptions, layout: &Layout, shares: &[ShareReport]) -> ResidencyReport {
    ResidencyReport {
        policy: opts.residency,
        blocks: shares.iter().map(|s| s.resident.0).sum(),
        of: layout.blocks,
        bytes: shares.iter().map(|s| s.resident.1).sum(),
        reason: shares
            .first()
            .map_or(ResidencyReason::OnePass, |s| s.resident.2),
    }
}

/// The devices' records in one Vec, moving the first device's instead of copying it.
fn concat(mut each: impl Iterator<Item = Vec<Record>>) -> Vec<Record> {
    let mut all = each.next().unwrap_or_default();
    for mut more in each {
        all.append(&mut more);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::partition;

    #[test]
    fn shares_are_contiguous_and_cover_every_block() {
        assert_eq!(partition(10, 1)[0], 0..10);
        assert_eq!(partition(10, 3), [0..3, 3..6, 6..10]);
        assert_eq!(partition(1, 2), [0..0, 0..1]);
    }
}
