//! The ring's schedule, the same for every API: which command of a block waits for which,
//! how far ahead blocks are enqueued, when progress is reported and a stop is answered.
//!
//! Block `i` goes to slot `i % N`. Its upload waits for the kernel of block `i - N` (which
//! read that slot) and, in place, for that block's download; its kernel waits for the upload
//! and, out of place, for the download of block `i - N` (which read the slot's output); its
//! download waits for its kernel. A backend ([`Stages`]) enqueues the commands: OpenCL on
//! three command queues ([`super::stream`]), CUDA on three streams ([`super::cuda`]).

use super::profile::{Record, Stage};
use super::stream::StreamError;
use crate::backend::opencl::Profile;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A failure of one command, as the backend reports it.
pub type CommandError = Box<dyn std::error::Error + Send + Sync>;

/// One API's way to enqueue the three stages of a block. The commands of one stage of one
/// block go to one in-order queue, so waiting for the last of them waits for all.
pub(crate) trait Stages {
    /// What a command returns and later commands wait for.
    type Event;
    /// Enqueues block `block`'s uploads into slot `slot` after `wait`; events with bytes.
    fn upload(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Enqueues block `block`'s kernel on slot `slot` after `wait`.
    fn kernel(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Self::Event, StreamError>;
    /// Enqueues block `block`'s download from slot `slot` after `wait`; events with bytes.
    fn download(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Submits what was enqueued.
    fn flush(&self) -> Result<(), StreamError>;
    /// Waits for everything enqueued (errors ignored: used on the way out).
    fn finish(&self);
    /// Waits for one command; its failure if it failed.
    fn wait(&self, e: &Self::Event) -> Result<(), CommandError>;
    /// Device times of a completed command.
    fn profile(&self, e: &Self::Event) -> Result<Profile, StreamError>;
}

/// The shape of a ring run.
pub(crate) struct Schedule<'a> {
    /// Blocks in the run.
    pub blocks: usize,
    /// Slots in the ring.
    pub slots: usize,
    /// Each block's result goes back where it came from.
    pub in_place: bool,
    /// Stop request (see [`super::StreamOptions::stop`]).
    pub stop: Option<&'a AtomicUsize>,
}

/// The events of one block.
struct Done<E> {
    up: Vec<(E, u64)>,
    kernel: E,
    down: Vec<(E, u64)>,
}

/// Enqueues every block of `sched` through `s`, at most two rings ahead of the last
/// completed download (so a stop is answered within a few blocks and progress is live),
/// then returns every command's profile. `progress(blocks_done, bytes_done)`.
pub(crate) fn run_ring<S: Stages>(
    s: &mut S,
    sched: &Schedule,
    progress: &dyn Fn(u64, u64),
) -> Result<Vec<Record>, StreamError> {
    let window = 2 * sched.slots;
    let blocks = sched.blocks;
    let mut done: Vec<Done<S::Event>> = Vec::with_capacity(blocks);
    let mut waited = 0;
    let mut bytes = 0;
    for i in 0..=blocks {
        while waited < done.len() && (i == blocks || waited + window <= i) {
            for (e, b) in &done[waited].down {
                s.wait(e)
                    .map_err(|e| stage_error(waited, first_failed(s, &done[waited]), e))?;
                bytes += b;
            }
            waited += 1;
            progress(waited as u64, bytes);
            check_stop(s, sched, waited)?;
        }
        if i < blocks {
            check_stop(s, sched, waited)?;
            let d = enqueue_block(s, sched, i, &done)?;
            done.push(d);
            s.flush()?;
        }
    }
    let mut records = Vec::new();
    for (i, d) in done.iter().enumerate() {
        s.wait(&d.kernel).map_err(|e| stage_error(i, "kernel", e))?;
        let mut push = |stage, e: &S::Event, bytes| -> Result<(), StreamError> {
            records.push(Record {
                stage,
                block: i,
                bytes,
                profile: s.profile(e)?,
            });
            Ok(())
        };
        for (e, b) in &d.up {
            push(Stage::Upload, e, *b)?;
        }
        push(Stage::Kernel, &d.kernel, 0)?;
        for (e, b) in &d.down {
            push(Stage::Download, e, *b)?;
        }
    }
    Ok(records)
}

fn enqueue_block<S: Stages>(
    s: &mut S,
    sched: &Schedule,
    i: usize,
    done: &[Done<S::Event>],
) -> Result<Done<S::Event>, StreamError> {
    let slot = i % sched.slots;
    let prev = i.checked_sub(sched.slots).map(|p| &done[p]);
    // Upload: the slot's previous kernel (and, in place, its download) must be done.
    let mut wait: Vec<&S::Event> = prev.map(|p| vec![&p.kernel]).unwrap_or_default();
    if let (true, Some(p)) = (sched.in_place, prev) {
        wait.extend(p.down.last().map(|d| &d.0));
    }
    let up = s.upload(i, slot, &wait)?;
    // Kernel: after the upload and, out of place, after the slot's previous download.
    let mut kwait: Vec<&S::Event> = up.last().map(|d| &d.0).into_iter().collect();
    if let (false, Some(p)) = (sched.in_place, prev) {
        kwait.extend(p.down.last().map(|d| &d.0));
    }
    let kernel = s.kernel(i, slot, &kwait)?;
    // Download: after the kernel.
    let down = s.download(i, slot, &[&kernel])?;
    Ok(Done { up, kernel, down })
}

/// Returns `Stopped` (after letting the blocks in flight finish) once a stop is requested.
fn check_stop<S: Stages>(s: &S, sched: &Schedule, done: usize) -> Result<(), StreamError> {
    let code = sched.stop.map_or(0, |f| f.load(Ordering::Relaxed));
    if code == 0 {
        return Ok(());
    }
    s.finish();
    Err(StreamError::Stopped {
        code,
        done,
        blocks: sched.blocks,
    })
}

/// The first stage of a block whose command failed: a failed upload or kernel makes the
/// download that waits for it fail too, and the cause is what the user needs to see.
fn first_failed<S: Stages>(s: &S, d: &Done<S::Event>) -> &'static str {
    if d.up.iter().any(|(e, _)| s.wait(e).is_err()) {
        "upload"
    } else if s.wait(&d.kernel).is_err() {
        "kernel"
    } else {
        "download"
    }
}

/// A failed command of block `block` in `stage`.
pub(crate) fn stage_error(
    block: usize,
    stage: &'static str,
    source: impl Into<CommandError>,
) -> StreamError {
    StreamError::Stage {
        block,
        stage,
        source: source.into(),
    }
}

/// Attributes `total` bytes to the events of one stage of one block (they are per chunk
/// piece; their exact split does not matter for totals).
pub(crate) fn spread_bytes<E>(events: &mut [(E, u64)], total: u64) {
    let n = events.len() as u64;
    for (k, e) in events.iter_mut().enumerate() {
        e.1 = total / n.max(1) + u64::from((k as u64) < total % n.max(1));
    }
}
