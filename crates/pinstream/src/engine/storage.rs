//! Data larger than host memory: input files streamed from storage through staging rings of
//! pinned memory, and the results written to an output file, block by block, so the host
//! memory a run holds is its rings, whatever the files' size.
//!
//! [`staging_plan`] says how much pinned memory the rings need (a few blocks per input and for
//! the output); the caller pins it through its API and [`run_from_storage`] streams:
//! - reader threads ([`StorageOptions::readers`] per input, positional reads past the page
//!   cache, [`super::io::direct`]) fill each input's ring ahead of the device, so reads
//!   overlap uploads, kernels and downloads;
//! - the device's ring ([`super::run_on_each`]) uploads a block once it is read and downloads
//!   its result into the output's ring once that place was written out;
//! - a writer thread writes each result block to a temporary file as soon as it is down, so
//!   writes overlap the next reads; the file is renamed over the output when complete.
//!
//! A failed read or write stops the run and is its error (the file named); a stop request
//! (`StreamOptions::stop`) or a device failure stops the threads; the temporary file is
//! removed on every path but success.

use super::error::{LayoutError, StreamError};
use super::io::direct::{DirectReader, DirectWriter};
use super::io::temporary::Temporary;
use super::io::{IoError, Output};
use super::job::{HostMemory, Job, Target};
use super::layout::shape_layout;
use super::slots::Carry;
use super::stream::{run_carried, run_on_each, Progress, StreamReport};
use super::StreamOptions;
use crate::backend::api::Device;
use crate::backend::staging::{Role, Staging};
use host_tier::Tier;
use serde::Serialize;
use staged::Staged;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;
use tiers::{report, Pass};

mod host_tier;
mod staged;
mod tiers;
mod vram;

pub use tiers::{host_tier_held, run_from_storage_tiered};
pub use vram::{vram_tier, VramTier};

/// How to read and write the files.
#[derive(Debug, Clone, Copy)]
pub struct StorageOptions {
    /// Transfers past the page cache (`O_DIRECT`, `FILE_FLAG_NO_BUFFERING`); false forces the
    /// buffered fallback (each block dropped from the cache after it is read).
    pub direct: bool,
    /// Reader threads per input (positional reads of different blocks at once).
    pub readers: usize,
    /// Blocks each input's ring holds beyond the device's ring in flight: how far reads run
    /// ahead.
    pub read_ahead: usize,
    /// Read through io_uring where the kernel allows it (Linux, direct reads); false forces
    /// positional reads (`pread`) on the reader threads.
    pub uring: bool,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            direct: true,
            readers: 2,
            read_ahead: 4,
            uring: true,
        }
    }
}

/// What a storage run streams.
pub struct StorageJob<'a> {
    /// The input files, all of one length (the first processed in place when `in_place`).
    pub inputs: Vec<PathBuf>,
    /// Each block's result replaces the block of the first input (written to `output`).
    pub in_place: bool,
    /// Where the results go ([`super::io::prepare_output`]); `None`: nowhere (the run is
    /// measured, its results dropped block by block).
    pub output: Option<Output>,
    /// Uploaded once, bound after the output (as [`Job::residents`]).
    pub residents: Vec<&'a dyn HostMemory>,
    /// User scalars (as [`Job::args`]).
    pub args: Vec<(String, String)>,
}

/// The staging a storage run needs: one ring per input of `input_bytes`, and one of
/// `output_bytes` out of place (0 in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StagingPlan {
    /// Bytes per input file.
    pub len: usize,
    /// Bytes of the output.
    pub out_len: usize,
    /// Input bytes per block.
    pub in_block: usize,
    /// Output bytes per block.
    pub out_block: usize,
    /// Blocks each ring holds.
    pub ring_blocks: usize,
    /// Each input's ring, bytes.
    pub input_bytes: usize,
    /// The output's ring, bytes (0 in place).
    pub output_bytes: usize,
}

impl StagingPlan {
    /// Pinned bytes of all the rings of a run of `inputs` inputs (`u64::MAX` where the sum
    /// would pass it: no memory holds that).
    pub fn total(&self, inputs: usize) -> u64 {
        let bytes = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        (bytes(self.input_bytes).checked_mul(bytes(inputs)))
            .and_then(|i| i.checked_add(bytes(self.output_bytes)))
            .unwrap_or(u64::MAX)
    }
}

/// A storage run's outcome: the stream's report and the storage's.
#[derive(Debug, Clone, Serialize)]
pub struct StorageReport {
    /// The device side, as any run's.
    #[serde(skip)]
    pub stream: StreamReport,
    /// Bytes read from the input files.
    pub read_bytes: u64,
    /// Of them, each pass's.
    pub pass_read_bytes: Vec<u64>,
    /// Bytes each pass took from the host tier instead ([`run_from_storage_tiered`]).
    pub pass_host_bytes: Vec<u64>,
    /// Seconds some read was in progress (overlapping reads counted once).
    pub read_s: f64,
    /// Bytes written to the output.
    pub written_bytes: u64,
    /// Of them, each pass's (in place, a later pass writes back what it streamed, and the
    /// last one every block).
    pub pass_written_bytes: Vec<u64>,
    /// Seconds some write was in progress.
    pub write_s: f64,
    /// Pinned bytes of the staging rings.
    pub staging_bytes: u64,
    /// The files were read and written past the page cache (false: buffered, see `notes`).
    pub direct: bool,
    /// The inputs were read through io_uring (else with positional reads on threads).
    pub io_uring: bool,
    /// Fallbacks taken, one line each.
    pub notes: Vec<String>,
    /// Each read and write, seconds from the run's start: (is a write, start, end, bytes).
    #[serde(skip)]
    pub transfers: Vec<(bool, f64, f64, u64)>,
}

/// Why a storage run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A file could not be opened, read or written (the file named).
    #[error(transparent)]
    Io(#[from] IoError),
    /// The stream failed or was stopped.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// No input files at all.
    #[error("a storage run needs at least one input file: give one or more paths")]
    NoInputs,
    /// An input file with no bytes.
    #[error("{path} is empty: there is nothing to stream; pass a file with data")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The input files differ in length.
    #[error("{path} holds {other} bytes but the first input holds {first}: streamed inputs must have one length")]
    InputsDiffer {
        /// The file that differs.
        path: PathBuf,
        /// The first input's length.
        first: u64,
        /// This one's.
        other: u64,
    },
    /// The staging memory given does not match [`staging_plan`].
    #[error("staging ring {index} holds {have} bytes but the plan needs {need}: pin the sizes staging_plan gives")]
    Staging {
        /// The ring (inputs in order, then the output).
        index: usize,
        /// Bytes given.
        have: usize,
        /// Bytes planned.
        need: usize,
    },
}

/// The rings a run over inputs of `len` bytes needs: each holds the device ring's blocks in
/// flight (two per slot) plus `s.read_ahead`, at most the whole data.
pub fn staging_plan(
    len: usize,
    in_place: bool,
    opts: &StreamOptions,
    s: &StorageOptions,
) -> Result<StagingPlan, StreamError> {
    let layout = shape_layout(len, in_place, None, opts)?;
    let (in_block, out_block) = (layout.in_block_bytes(), layout.out_block_bytes());
    // A ring never holds more blocks than there are: sums past that (any `--slots`) are
    // capped there, never wrapped.
    let in_flight = opts.slots.unwrap_or(4).max(1).saturating_mul(2);
    let ring_blocks = (in_flight.saturating_add(s.read_ahead))
        .min(layout.blocks)
        .max(1);
    let out_len = (0..layout.blocks)
        .last()
        .map_or(0, |b| layout.output_bytes(b).end);
    Ok(StagingPlan {
        len,
        out_len: if in_place { len } else { out_len },
        in_block,
        out_block,
        ring_blocks,
        input_bytes: ring_bytes(ring_blocks, in_block)?,
        output_bytes: if in_place {
            0
        } else {
            ring_bytes(ring_blocks, out_block)?
        },
    })
}

/// Bytes of a ring of `blocks` blocks of `block` bytes; an error where no memory holds them.
fn ring_bytes(blocks: usize, block: usize) -> Result<usize, StreamError> {
    let what = || format!("a staging ring of {blocks} blocks of {block} bytes");
    (blocks.checked_mul(block)).ok_or_else(|| LayoutError::TooLarge { what: what() }.into())
}

/// The bytes `b * unit ..` of block `b` of blocks of `unit` bytes over `len` bytes (the last
/// is short); the end checked, never past `len`.
fn block_range(b: usize, unit: usize, len: usize) -> Range<usize> {
    let start = b.saturating_mul(unit).min(len);
    start..start.checked_add(unit).map_or(len, |end| end.min(len))
}

/// Opens every input as `s` says, and checks they make a run.
pub fn open_inputs(
    paths: &[PathBuf],
    s: &StorageOptions,
) -> Result<Vec<DirectReader>, StorageError> {
    if paths.is_empty() {
        return Err(StorageError::NoInputs);
    }
    let files = (paths.iter())
        .map(|p| DirectReader::open_with(p, s.direct, s.uring))
        .collect::<Result<Vec<_>, _>>()?;
    let first = files.first().map_or(0, DirectReader::len);
    for (f, p) in files.iter().zip(paths) {
        if f.is_empty() {
            return Err(StorageError::Empty { path: p.clone() });
        }
        if f.len() != first {
            let (path, other) = (p.clone(), f.len());
            return Err(StorageError::InputsDiffer { path, first, other });
        }
    }
    Ok(files)
}

/// Each read or write: (is a write, start, end, bytes).
type Transfers = Mutex<Vec<(bool, Instant, Instant, u64)>>;

/// Streams `job`'s files through `target` with `staging` as the rings (one per input, then
/// one for the output out of place; sized by [`staging_plan`]). `progress` as for
/// [`run_on_each`]. Several passes ([`StreamOptions::passes`]) read the files again each
/// pass, in place what the pass before wrote ([`run_from_storage_tiered`]).
pub fn run_from_storage<D: Device>(
    target: &mut Target<'_, D>,
    job: StorageJob,
    staging: Vec<&mut dyn HostMemory>,
    opts: &StreamOptions,
    s: &StorageOptions,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<StorageReport, StorageError> {
    if opts.passes > 1 {
        return tiers::run_passes(target, job, (staging, None), opts, s, progress);
    }
    let pass = Pass {
        keep: false,
        tier: None,
        vram: None,
    };
    run_once(target, job, staging, opts, s, progress, pass).map(|(r, _)| r)
}

/// One pass of [`run_from_storage`]; with `pass.keep`, the output's temporary file is kept
/// (whole, synced, not renamed) and returned for the next pass to read; `pass.tier` serves
/// and keeps the blocks it holds; `pass.vram`'s blocks stay on the device (not read after the
/// first pass, in place not written before the last).
fn run_once<D: Device>(
    target: &mut Target<'_, D>,
    job: StorageJob,
    staging: Vec<&mut dyn HostMemory>,
    opts: &StreamOptions,
    s: &StorageOptions,
    progress: &(dyn Fn(Progress) + Sync),
    pass: Pass<'_, D::A>,
) -> Result<(StorageReport, Option<Temporary>), StorageError> {
    let files = open_inputs(&job.inputs, s)?;
    let len = usize::try_from(files[0].len()).map_err(|_| {
        let what = format!("{} ({} bytes)", job.inputs[0].display(), files[0].len());
        StreamError::from(LayoutError::TooLarge { what })
    })?;
    let plan = staging_plan(len, job.in_place, opts, s)?;
    let roles = ring_roles(job.inputs.len(), job.in_place);
    check_staging(&staging, &plan, &roles)?;
    let rings: Vec<Staging> = (staging.into_iter().zip(&roles))
        .map(|(m, &(role, l))| Staging::new(m, if l { plan.out_len } else { len }, role))
        .collect();
    let writer = (job.output.as_ref())
        .map(|o| DirectWriter::create(o, plan.out_len as u64, s.direct))
        .transpose()?;
    let transfers = Transfers::default();
    let start = Instant::now();
    let io = Io {
        plan: &plan,
        rings: &rings,
        files: &files,
        writer: writer.as_ref(),
        transfers: &transfers,
        readers: s.readers.max(1),
        tier: pass.tier,
        skip: vram::skipped(pass.vram.as_deref(), job.in_place),
    };
    let (stream, io_error) = io.run(target, (job, pass.vram), opts, progress);
    if let Some(e) = io_error {
        return Err(e.into());
    }
    let stream = stream?;
    let notes: Vec<String> = files
        .iter()
        .filter_map(DirectReader::note)
        .chain(writer.as_ref().and_then(DirectWriter::note))
        .collect();
    let inputs = files.len();
    let uring = files.iter().all(DirectReader::uses_uring);
    let direct = files.iter().all(DirectReader::is_direct)
        && writer.as_ref().is_none_or(DirectWriter::is_direct);
    // The inputs are closed before the output replaces its target, which may be one of them
    // (updated in place; Windows cannot rename over an open file).
    drop(files);
    let kept = finish(writer, pass.keep)?;
    let transfers = transfers.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut r = report(stream, &plan, inputs, notes, &transfers, start);
    r.io_uring = uring;
    r.direct = direct;
    Ok((r, kept))
}

/// Writes the output's last bytes and puts it in place; with `keep`, keeps its temporary
/// file instead ([`DirectWriter::finish_kept`]).
fn finish(w: Option<DirectWriter>, keep: bool) -> Result<Option<Temporary>, IoError> {
    match w {
        Some(w) if keep => w.finish_kept(),
        Some(w) => w.finish().map(|()| None),
        None => Ok(None),
    }
}

/// Each ring's role and whether it holds the output's bytes: inputs in order (the first in
/// place where `in_place`), then the output out of place.
fn ring_roles(inputs: usize, in_place: bool) -> Vec<(Role, bool)> {
    let mut roles = vec![(Role::Source, false); inputs];
    if in_place {
        roles[0] = (Role::InPlace, true);
    } else {
        roles.push((Role::Sink, true));
    }
    roles
}

fn check_staging(
    staging: &[&mut dyn HostMemory],
    plan: &StagingPlan,
    roles: &[(Role, bool)],
) -> Result<(), StorageError> {
    for index in 0..staging.len().max(roles.len()) {
        let have = staging.get(index).map_or(0, |m| m.len());
        let need = roles.get(index).map_or(0, |(role, _)| match role {
            Role::Sink => plan.output_bytes,
            _ => plan.input_bytes,
        });
        if have != need {
            return Err(StorageError::Staging { index, have, need });
        }
    }
    Ok(())
}

/// The threads of a storage run and what they share.
struct Io<'a, 'h> {
    plan: &'a StagingPlan,
    rings: &'a [Staging<'h>],
    files: &'a [DirectReader],
    writer: Option<&'a DirectWriter>,
    transfers: &'a Transfers,
    readers: usize,
    tier: Option<&'a dyn Tier>,
    /// Blocks on the device across passes: not read this pass, and not written.
    skip: (Range<usize>, Range<usize>),
}

impl Io<'_, '_> {
    /// Runs the readers, the writer and the stream; the stream's result and the first file
    /// error, which is the run's error when there is one.
    fn run<D: Device>(
        &self,
        target: &mut Target<'_, D>,
        job: (StorageJob, Option<&mut Carry<D::A>>),
        opts: &StreamOptions,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> (Result<StreamReport, StreamError>, Option<IoError>) {
        std::thread::scope(|t| {
            let mut threads = Vec::new();
            for (i, (ring, file)) in self.rings.iter().zip(self.files).enumerate() {
                for k in 0..self.readers {
                    threads.push(t.spawn(move || self.read((i, ring, file), k)));
                }
            }
            // The output's ring: the last out of place, the first in place.
            let out = if self.rings.len() > self.files.len() {
                self.rings.last()
            } else {
                self.rings.first()
            };
            if let Some(ring) = out {
                threads.push(t.spawn(move || self.write(ring)));
            }
            // A panic in the stream must still stop the readers and the writer, or the scope
            // would wait for them forever: the rings are failed first, then it goes on.
            let run = || self.stream(target, job, opts, progress);
            let stream = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            if !matches!(stream, Ok(Ok(_))) {
                self.rings.iter().for_each(|r| r.fail("the run stopped"));
            }
            let stream = stream.unwrap_or_else(|p| std::panic::resume_unwind(p));
            let errors = threads.into_iter().filter_map(|h| h.join().ok()?.err());
            (stream, errors.flatten().next())
        })
    }

    /// The device's run over the rings, telling them as blocks complete.
    fn stream<D: Device>(
        &self,
        target: &mut Target<'_, D>,
        (job, carry): (StorageJob, Option<&mut Carry<D::A>>),
        opts: &StreamOptions,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<StreamReport, StreamError> {
        let p = self.plan;
        let mut staged: Vec<Staged> = (self.rings.iter().enumerate())
            .map(|(i, r)| {
                Staged(
                    r,
                    if i < self.files.len() {
                        p.len
                    } else {
                        p.out_len
                    },
                )
            })
            .collect();
        let (first, rest) = staged.split_at_mut(if job.in_place { 1 } else { 0 });
        let (inputs, output) = rest.split_at_mut(rest.len() - usize::from(!job.in_place));
        let j = Job {
            in_place: first.first_mut().map(|m| m as &mut dyn HostMemory),
            inputs: inputs.iter().map(|m| m as &dyn HostMemory).collect(),
            output: output.first_mut().map(|m| m as &mut dyn HostMemory),
            residents: job.residents,
            args: job.args,
        };
        let done = |pr: Progress| {
            // Every byte of the blocks done (capped at each ring's length by `complete`).
            let b = usize::try_from(pr.blocks).unwrap_or(usize::MAX);
            for (i, r) in self.rings.iter().enumerate() {
                let unit = if i < self.files.len() {
                    p.in_block
                } else {
                    p.out_block
                };
                r.complete(b.saturating_mul(unit));
            }
            progress(pr)
        };
        match carry {
            Some(c) => run_carried(target, j, opts, &done, c),
            None => run_on_each(std::slice::from_mut(target), j, opts, &done),
        }
    }

    /// Reader `k` of input `i`'s ring: blocks `k`, `k + readers`, ... of `file` (or of the
    /// host tier, where it holds them).
    fn read(
        &self,
        (i, ring, file): (usize, &Staging, &DirectReader),
        k: usize,
    ) -> Result<(), Option<IoError>> {
        let (unit, len) = (self.plan.in_block, self.plan.len);
        for b in (k..len.div_ceil(unit)).step_by(self.readers) {
            let r = block_range(b, unit, len);
            let (off, n) = (r.start as u64, r.len());
            let mut failed = None;
            let filled = ring.fill(r, |bufs| {
                // On the device since the first pass: nothing to read (nor upload).
                if self.skip.0.contains(&b) {
                    return Ok(());
                }
                if self.tier.is_some_and(|t| t.read(i, b, bufs)) {
                    return Ok(());
                }
                let read = self.timed(false, n, || file.read_at(off, bufs));
                if let (Ok(()), Some(t)) = (&read, self.tier) {
                    t.keep_read(i, b, bufs);
                }
                read.map_err(|e| keep(e, &mut failed))
            });
            filled.map_err(|_| failed)?;
        }
        Ok(())
    }

    /// The writer: every result block of `ring`, in order.
    fn write(&self, ring: &Staging) -> Result<(), Option<IoError>> {
        let (unit, len) = (self.plan.out_block, self.plan.out_len);
        for b in 0..len.div_ceil(unit) {
            let r = block_range(b, unit, len);
            let (off, n) = (r.start as u64, r.len());
            let mut failed = None;
            let drained = ring.drain(r, |bufs| {
                let on_device = self.skip.1.contains(&b);
                let Some(w) = self.writer.filter(|_| !on_device && !self.kept(b, bufs)) else {
                    return Ok(());
                };
                let written = self.timed(true, n, || w.write_at(off, bufs));
                written.map_err(|e| keep(e, &mut failed))
            });
            drained.map_err(|_| failed)?;
        }
        Ok(())
    }

    /// Result block `b` kept in the host tier for the next pass (not written to the file).
    fn kept(&self, b: usize, bufs: &[&[u8]]) -> bool {
        self.tier.is_some_and(|t| t.keep_result(b, bufs))
    }

    /// Runs transfer `f` of `bytes`, noting when it ran.
    fn timed(
        &self,
        write: bool,
        bytes: usize,
        f: impl FnOnce() -> Result<(), IoError>,
    ) -> Result<(), IoError> {
        let start = Instant::now();
        f()?;
        let mut t = crate::sync::lock(self.transfers);
        t.push((write, start, Instant::now(), bytes as u64));
        Ok(())
    }
}

/// Keeps a file error for the run to return, giving the ring its message.
fn keep(e: IoError, slot: &mut Option<IoError>) -> String {
    let m = e.to_string();
    *slot = Some(e);
    m
}
