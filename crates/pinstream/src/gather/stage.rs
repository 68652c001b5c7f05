//! The gather's moving parts below a call: its staging (pinned host memory and the device
//! buffers it is copied through), the kernel launches over a batch's segments, and packing
//! pieces into a stage with the host's cores.

use super::plan::{self, Batch, ROW_BYTES};
use super::{cl, GatherError, GatherOptions, Stage, PARALLEL_FROM};
use crate::backend::opencl::{Context, DeviceBuffer, Event, Kernel, Queue};
use crate::backend::os::copy_streaming;
use crate::host::{HostRegion, PinOptions};

/// Bytes of one stage: piece data, its padding, and the segment table; `usize::MAX`, which
/// no allocation gets (refused as above the host memory), where the sum would not fit.
pub(super) fn stage_bytes(options: &GatherOptions) -> usize {
    let table = options.rows.saturating_mul(ROW_BYTES);
    data_cap(options).saturating_add(8).saturating_add(table)
}

pub(super) fn stage(ctx: &Context, options: &GatherOptions) -> Result<Stage, GatherError> {
    let pin = PinOptions {
        contiguous: true,
        ..PinOptions::default()
    };
    let host = HostRegion::new(ctx, stage_bytes(options), &pin)?;
    Ok(Stage {
        host,
        dma: match options.profile {
            true => ctx.queue(),
            false => ctx.plain_queue(),
        }
        .map_err(cl)?,
    })
}

/// Staging bytes for piece data: the capacity, plus the alignment padding its rows may need
/// (each segment sits at its device offset's alignment mod 16), so that `capacity` bytes of
/// pieces fit one batch whatever their offsets.
pub(super) fn data_cap(options: &GatherOptions) -> usize {
    let padding = (plan::ALIGN - 1).saturating_mul(options.rows);
    options.capacity.saturating_add(padding)
}

pub(super) fn not_contiguous() -> GatherError {
    GatherError::NotContiguous
}

/// Launches `kernel` over `batch`'s segments: one work-group each.
pub(super) fn launch(
    kernel: &mut Kernel,
    queue: &Queue,
    staging: &DeviceBuffer,
    buffer: &DeviceBuffer,
    batch: &Batch,
    group: usize,
    wait: &[&Event],
) -> Result<Event, GatherError> {
    kernel.set_buffer(0, staging).map_err(cl)?;
    kernel.set_buffer(1, buffer).map_err(cl)?;
    kernel
        .set_bytes(2, &(batch.table_offset() as u64).to_ne_bytes())
        .map_err(cl)?;
    let local = local_size(batch, group);
    let global = batch.segments.len() * local;
    let done = queue.launch(kernel, global, Some(local), wait).map_err(cl);
    // The command holds its own references; the kernel lets go of the caller's buffer, so a
    // kept gather never keeps it alive.
    kernel.unbind_buffers();
    done
}

/// Launches the zero-copy `kernel` over `rows` segments of at most `longest` bytes (one
/// work-group each, sized as [`local_for`] says), copying from `bufs.0` to `bufs.1` as
/// `table` says.
pub(super) fn launch_rows(
    kernel: &mut Kernel,
    queue: &Queue,
    (bufs, host_len): ((&DeviceBuffer, &DeviceBuffer), usize),
    (table, narrow): (&DeviceBuffer, bool),
    (rows, longest): (usize, usize),
    group: usize,
    wait: &[&Event],
) -> Result<Event, GatherError> {
    kernel.set_buffer(0, bufs.0).map_err(cl)?;
    kernel.set_buffer(1, bufs.1).map_err(cl)?;
    kernel.set_buffer(2, table).map_err(cl)?;
    kernel
        .set_bytes(3, &(host_len as u64).to_ne_bytes())
        .map_err(cl)?;
    kernel
        .set_bytes(4, &u32::from(narrow).to_ne_bytes())
        .map_err(cl)?;
    let local = local_for(longest, group);
    let done = queue
        .launch(kernel, rows * local, Some(local), wait)
        .map_err(cl);
    kernel.unbind_buffers();
    done
}

/// Work items per segment: one 16-byte access each for the batch's longest segment (so
/// 256-byte pieces take a warp, not eight), at least 32 and at most `group`.
pub(super) fn local_size(batch: &Batch, group: usize) -> usize {
    let longest = batch.segments.iter().map(|s| s.len).max().unwrap_or(0);
    local_for(longest, group)
}

/// Work items for segments of at most `longest` bytes: one 16-byte access each, at least 32
/// and at most `group`.
pub(super) fn local_for(longest: usize, group: usize) -> usize {
    longest
        .div_ceil(plan::ALIGN)
        .next_power_of_two()
        .clamp(32.min(group), group)
}

/// Writes `bytes` at `at` in the (settled) staging region.
pub(super) fn write_at(host: &mut HostRegion, at: usize, bytes: &[u8]) -> Result<(), GatherError> {
    let staged = host.as_mut_slice().ok_or_else(not_contiguous)?;
    staged[at..at + bytes.len()].copy_from_slice(bytes);
    Ok(())
}

/// Packs a batch's segments and table into the staging region (waiting for its last DMA);
/// the seconds the copy took.
pub(super) fn pack(
    host: &mut HostRegion,
    pieces: &[(&[u8], usize)],
    batch: &Batch,
) -> Result<f64, GatherError> {
    let staged = host.as_mut_slice().ok_or_else(not_contiguous)?;
    let (data, rest) = staged.split_at_mut(batch.data_end);
    let at = batch.table_offset() - batch.data_end;
    let table = batch.table();
    rest[at..at + table.len()].copy_from_slice(&table);
    let mut outs = Vec::with_capacity(batch.segments.len());
    let mut free = data;
    let mut cursor = 0;
    for seg in &batch.segments {
        let (_, tail) = std::mem::take(&mut free).split_at_mut(seg.stage - cursor);
        let (mine, after) = tail.split_at_mut(seg.len);
        free = after;
        cursor = seg.stage + seg.len;
        let src = pieces[seg.piece].0;
        outs.push((mine, &src[seg.piece_offset..seg.piece_offset + seg.len]));
    }
    Ok(copy_all(outs, batch.data_end, true))
}

/// Copies every `(to, from)` pair, on rayon's persistent pool for large batches (tasks of at
/// least [`TASK_BYTES`]); the seconds it took. A pool, not threads spawned per batch: on the
/// H200's VM spawning cost more than copying a batch of 4 KiB pieces. `for_dma`: the
/// destination is staging a DMA reads next, written with stores that bypass the caches
/// ([`copy_streaming`]).
pub(super) fn copy_all(pairs: Vec<(&mut [u8], &[u8])>, bytes: usize, for_dma: bool) -> f64 {
    use rayon::prelude::*;
    // Short segments are copied through the caches: streaming stores of a few lines with
    // unaligned ends cost more than the snoops they save (65536 × 256 B packed 5× slower).
    let copy = |(d, s): (&mut [u8], &[u8])| match for_dma && d.len() >= STREAM_FROM {
        true => copy_streaming(d, s),
        false => d.copy_from_slice(s),
    };
    let start = std::time::Instant::now();
    if bytes < PARALLEL_FROM {
        pairs.into_iter().for_each(copy);
    } else {
        let per_task = (TASK_BYTES * pairs.len()).div_ceil(bytes.max(1)).max(1);
        pairs.into_par_iter().with_min_len(per_task).for_each(copy);
    }
    start.elapsed().as_secs_f64()
}

/// Segments of at least this many bytes are packed with streaming stores.
const STREAM_FROM: usize = 2048;

/// The least a pool task of [`copy_all`] copies.
const TASK_BYTES: usize = 64 << 10;
