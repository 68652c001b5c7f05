//! Passes over data streamed from storage ([`super`]): each pass reads its files
//! again, the first input in place from what the pass before wrote.
//!
//! In place, every pass but the last writes its results to a temporary file beside the
//! output (beside the first input where the output is no regular file, or there is none),
//! whole and synced, which the next pass reads as its first input; the pass after that
//! removes it. The last pass writes the output as one pass does: to a temporary file renamed
//! over it once whole, so the output is replaced only by the last pass's results, and a run
//! that fails or is stopped leaves it as it was (and no temporary file: each is removed on
//! every path, and listed for [`crate::engine::io::remove_temporaries`] meanwhile). Out of place,
//! every pass reads the inputs and only the last writes the output (the others' results are
//! dropped block by block, as a run with no output drops them).

use super::host_tier::{HostTier, Tier};
use super::vram::vram_tier;
use super::{open_inputs, staging_plan, StagingPlan};
use super::{run_once, StorageError, StorageJob, StorageOptions, StorageReport};
use crate::backend::api::{Api, Device};
use crate::engine::io::output::Target as OutTarget;
use crate::engine::io::temporary::Temporary;
use crate::engine::io::Output;
use crate::engine::job::{HostMemory, Target};
use crate::engine::profile::{totals, Record};
use crate::engine::resident::{pass_bytes, pass_seconds};
use crate::engine::slots::Carry;
use crate::engine::stream::{Progress, StreamReport};
use crate::engine::{StreamError, StreamOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What one pass of a run from storage does besides streaming.
pub(super) struct Pass<'t, A: Api> {
    /// Keep the output's temporary file for the next pass to read.
    pub keep: bool,
    /// The host tier, where there is one.
    pub tier: Option<&'t dyn Tier>,
    /// The VRAM tier across the passes, with the pass this one is ([`super::vram`]).
    pub vram: Option<&'t mut Carry<A>>,
}

/// As [`super::run_from_storage`], with `tier` as the host tier: host memory (any size; the
/// caller pins it) that keeps as many leading whole blocks of each input as it holds across
/// passes, so that passes after the first read only the rest from storage
/// (`StorageReport::pass_read_bytes`, and `pass_host_bytes` for the blocks it served). With
/// one pass it is not used.
pub fn run_from_storage_tiered<D: Device>(
    target: &mut Target<'_, D>,
    job: StorageJob,
    staging: Vec<&mut dyn HostMemory>,
    tier: Option<&mut dyn HostMemory>,
    opts: &StreamOptions,
    s: &StorageOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<StorageReport, StorageError> {
    let tier = tier.filter(|_| opts.passes > 1);
    run_passes(target, job, (staging, tier), opts, s, progress)
}

/// The bytes of each input a host tier of `tier` bytes holds, for `inputs` inputs of the
/// plan's length in its blocks, beside a VRAM tier of the last `vram_blocks` blocks
/// ([`super::vram_tier`]): whole blocks, as many leading ones as `tier` over the inputs
/// holds (the whole input where it holds all), none of those in VRAM.
pub fn host_tier_held(plan: &StagingPlan, inputs: usize, tier: usize, vram_blocks: usize) -> usize {
    let per_input = tier / inputs.max(1);
    let unit = plan.in_block.max(1);
    let held = match per_input >= plan.len {
        true => plan.len,
        false => per_input / unit * unit,
    };
    match plan.len.div_ceil(unit).checked_sub(vram_blocks) {
        Some(below) if vram_blocks > 0 => held.min(below * unit),
        Some(_) => held,
        None => 0,
    }
}

/// The host tier over `memory` for `job`'s files, holding none of the blocks from `below` on
/// (the VRAM tier's).
fn host_tier<'m>(
    memory: &'m mut dyn HostMemory,
    job: &StorageJob,
    (opts, s): (&StreamOptions, &StorageOptions),
    below: usize,
) -> Result<HostTier<'m>, StorageError> {
    let len = open_inputs(&job.inputs, s)?.first().map_or(0, |f| f.len());
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let unit = staging_plan(len, job.in_place, opts, s)?.in_block.max(1);
    let blocks = len.div_ceil(unit);
    let tail = len - blocks.saturating_sub(1) * unit;
    let shape = (blocks, unit, tail);
    Ok(HostTier::new(
        memory,
        (job.inputs.len(), job.in_place),
        shape,
        below,
    ))
}

/// The tiers of `job`'s passes on `device`: the VRAM tier, its device buffers kept across
/// the passes by the carry ([`super::vram`]), and the host tier over `tier`, if any, holding
/// none of the VRAM tier's blocks.
fn placed<'m, D: Device>(
    device: &D,
    job: &StorageJob,
    tier: Option<&'m mut dyn HostMemory>,
    (opts, s): (&StreamOptions, &StorageOptions),
) -> Result<(Carry<D::A>, Option<HostTier<'m>>), StorageError> {
    let vram = vram_tier(device, job, opts, s)?;
    let below = vram.blocks.start;
    let carry = Carry {
        pass: 0,
        passes: opts.passes.max(1),
        resident: vram.blocks,
        why: vram.reason,
        slots: Vec::new(),
    };
    let tier = (tier.map(|m| host_tier(m, job, (opts, s), below))).transpose()?;
    Ok((carry, tier))
}

/// [`super::run_from_storage`] with `opts.passes` passes, and the host tier where given.
pub(super) fn run_passes<D: Device>(
    target: &mut Target<'_, D>,
    job: StorageJob,
    (mut staging, tier): (Vec<&mut dyn HostMemory>, Option<&mut dyn HostMemory>),
    opts: &StreamOptions,
    s: &StorageOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<StorageReport, StorageError> {
    let passes = opts.passes.max(1);
    let one = StreamOptions {
        passes: 1,
        ..opts.clone()
    };
    let (mut carry, mut tier) = placed(target.device, &job, tier, (opts, s))?;
    let start = Instant::now();
    let mut reports: Vec<(f64, StorageReport)> = Vec::with_capacity(passes);
    // In place: the file the pass before wrote, read by this pass, removed after it.
    let mut carried: Option<Temporary> = None;
    let (mut blocks_before, mut bytes_before) = (0u64, 0u64);
    for k in 0..passes {
        let last = k + 1 == passes;
        let pass = pass_job(&job, last, carried.as_ref());
        let rings = (staging.iter_mut())
            .map(|m| &mut **m as &mut dyn HostMemory)
            .collect();
        let seen = AtomicU64::new(0);
        let told = |p: Progress| {
            seen.fetch_max(p.bytes, Ordering::Relaxed);
            progress(Progress {
                blocks: p.blocks + blocks_before,
                bytes: p.bytes + bytes_before,
                device_blocks: p.device_blocks + blocks_before,
                ..p
            })
        };
        let at = start.elapsed().as_secs_f64();
        if let Some(t) = tier.as_mut() {
            (t.pass, t.last) = (k, last);
            t.served = AtomicU64::new(0);
        }
        carry.pass = k;
        let how = Pass {
            keep: job.in_place && !last,
            tier: tier.as_ref().map(|t| t as &dyn Tier),
            vram: Some(&mut carry),
        };
        let ran = run_once(target, pass, rings, &one, s, &told, how);
        let (mut r, kept) = ran.map_err(|e| whole_run(e, blocks_before, passes))?;
        r.pass_host_bytes = vec![tier
            .as_ref()
            .map_or(0, |t| t.served.load(Ordering::Relaxed))];
        carried = kept;
        blocks_before += r.stream.blocks as u64;
        bytes_before += seen.into_inner();
        reports.push((at, r));
    }
    Ok(merge(reports, passes, start.elapsed().as_secs_f64()))
}

/// A pass's stop counted over the whole run (each pass is a run of its own, which counts
/// from its first block again): the blocks of the passes before it done, and every pass's
/// blocks in the run. (A failed command names its pass already: each pass's run is carried,
/// `ring::Schedule::carried`.)
fn whole_run(e: StorageError, before: u64, passes: usize) -> StorageError {
    match e {
        StorageError::Stream(StreamError::Stopped { code, done, blocks }) => {
            let done = done.saturating_add(usize::try_from(before).unwrap_or(usize::MAX));
            let blocks = blocks.saturating_mul(passes);
            StreamError::Stopped { code, done, blocks }.into()
        }
        e => e,
    }
}

/// The job of one pass of `job`: in place, reading what the pass before wrote (`carried`)
/// and, but for the last pass, writing beside the output for the next.
fn pass_job<'a>(job: &StorageJob<'a>, last: bool, carried: Option<&Temporary>) -> StorageJob<'a> {
    let mut inputs = job.inputs.clone();
    if let (Some(t), Some(first)) = (carried, inputs.first_mut()) {
        *first = t.path().to_path_buf();
    }
    let output = match (last, job.in_place) {
        (true, _) => job.output.clone(),
        (false, true) => Some(between(job)),
        (false, false) => None,
    };
    StorageJob {
        inputs,
        in_place: job.in_place,
        output,
        residents: job.residents.clone(),
        args: job.args.clone(),
    }
}

/// Where an in-place pass that is not the last writes: a temporary file beside the output
/// where it is a regular file, else beside the first input.
fn between(job: &StorageJob) -> Output {
    let beside = match job.output.as_ref().map(|o| &o.target) {
        Some(OutTarget::Replace(p)) => p.clone(),
        _ => job.inputs[0].clone(),
    };
    Output {
        given: beside.clone(),
        target: OutTarget::Replace(beside),
        removed: Vec::new(),
    }
}

/// One report for the passes, each `(its start, its report)`: bytes and transfers of all,
/// the commands numbered by pass, the totals over them all.
fn merge(reports: Vec<(f64, StorageReport)>, passes: usize, wall_s: f64) -> StorageReport {
    let mut records: Vec<Record> = Vec::new();
    let mut transfers = Vec::new();
    let (mut pass_read, mut pass_host, mut pass_written) = (Vec::new(), Vec::new(), Vec::new());
    let mut first: Option<StorageReport> = None;
    for (k, (at, r)) in reports.into_iter().enumerate() {
        let pass = u32::try_from(k).unwrap_or(u32::MAX);
        // A clock that restarts with each run (CUDA's origin event) would put the passes on
        // top of each other: such a pass is moved to start where the one before ended.
        let end = records.iter().map(|x| x.end).max().unwrap_or(0);
        let begin = r
            .stream
            .records
            .iter()
            .map(|x| x.start)
            .min()
            .unwrap_or(end);
        let shift = end.saturating_sub(begin);
        records.extend((r.stream.records.iter()).map(|x| Record {
            pass,
            start: x.start + shift,
            end: x.end + shift,
            ..*x
        }));
        transfers.extend(
            r.transfers
                .iter()
                .map(|&(w, a, b, n)| (w, a + at, b + at, n)),
        );
        pass_read.push(r.read_bytes);
        pass_written.push(r.written_bytes);
        pass_host.extend(r.pass_host_bytes.iter().copied());
        first.get_or_insert(r);
    }
    let mut r = first.expect("a run makes at least one pass");
    (r.read_bytes, r.read_s) = busy(&transfers, false);
    (r.written_bytes, r.write_s) = busy(&transfers, true);
    r.pass_read_bytes = pass_read;
    r.pass_host_bytes = pass_host;
    r.pass_written_bytes = pass_written;
    r.transfers = transfers;
    let st = &mut r.stream;
    st.passes = passes;
    st.totals = totals(&records);
    st.pass_bytes = pass_bytes(&records, passes);
    st.pass_seconds = pass_seconds(&records, passes);
    st.host_wall_s = wall_s;
    st.records = records;
    r
}

/// The storage report of a run that started at `start`.
pub(super) fn report(
    stream: StreamReport,
    plan: &StagingPlan,
    inputs: usize,
    notes: Vec<String>,
    transfers: &[(bool, Instant, Instant, u64)],
    start: Instant,
) -> StorageReport {
    let secs = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let transfers: Vec<(bool, f64, f64, u64)> = (transfers.iter())
        .map(|&(w, a, b, n)| (w, secs(a), secs(b), n))
        .collect();
    let (read_bytes, read_s) = busy(&transfers, false);
    let (written_bytes, write_s) = busy(&transfers, true);
    StorageReport {
        stream,
        read_bytes,
        pass_read_bytes: vec![read_bytes],
        pass_host_bytes: vec![0],
        read_s,
        written_bytes,
        pass_written_bytes: vec![written_bytes],
        write_s,
        staging_bytes: plan.total(inputs),
        direct: false, // set by the caller, which holds the files
        io_uring: false,
        notes,
        transfers,
    }
}

/// Bytes of the reads (or writes) and the seconds at least one was in progress.
pub(super) fn busy(transfers: &[(bool, f64, f64, u64)], write: bool) -> (u64, f64) {
    let mut spans: Vec<(f64, f64)> = (transfers.iter())
        .filter(|t| t.0 == write)
        .map(|t| (t.1, t.2))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut reach) = (0.0, f64::MIN);
    for (a, b) in spans {
        total += (b - a.max(reach)).max(0.0);
        reach = reach.max(b);
    }
    let bytes = transfers.iter().filter(|t| t.0 == write).map(|t| t.3).sum();
    (bytes, total)
}

#[cfg(test)]
mod tests {
    use super::busy;

    #[test]
    fn overlapping_transfers_count_once() {
        let t = [
            (false, 0.0, 2.0, 5),
            (false, 1.0, 3.0, 5),
            (false, 4.0, 5.0, 1),
            (true, 0.0, 9.0, 7),
        ];
        assert_eq!(busy(&t, false), (11, 4.0));
        assert_eq!(busy(&t, true), (7, 9.0));
    }
}
