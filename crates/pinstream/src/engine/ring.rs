//! The ring's schedule, the same for every API and device: which command of a block waits
//! for which, how far ahead blocks are enqueued, when progress is reported and a stop is
//! answered.
//!
//! Block `i` goes to slot `i % N`. Its upload waits for the kernel of block `i - N` (which
//! read that slot) and, in place, for that block's download; its kernel waits for the upload
//! and, out of place, for the download of block `i - N` (which read the slot's output); its
//! download waits for its kernel. [`Stages`] enqueues the commands; the engine's one
//! implementation ([`super::device`]) does it through any [`crate::backend::api::Api`].
//!
//! A block's events are kept only while the block is in flight: once its download is waited
//! for, its commands' device times become compact [`Record`]s and the events are released.

use super::error::StreamError;
use super::profile::{Record, Stage};
use crate::backend::api::Profile;
use crate::backend::error::BackendError;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One step of a ring: block `block` of the run in pass `pass`, on `slot` (a slot of the
/// ring, `0..slots`, or a resident block's own, `slots..`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// The block, in the run's numbering.
    pub block: usize,
    /// The pass, from 0.
    pub pass: usize,
    /// The slot whose buffers it uses.
    pub slot: usize,
}

/// One way to enqueue the three stages of a block. The commands of one stage of one block go
/// to one in-order queue, so waiting for the last of them waits for all.
pub(crate) trait Stages {
    /// What a command returns and later commands wait for.
    type Event;
    /// Enqueues `step`'s uploads into its slot after `wait`; events with bytes.
    fn upload(
        &mut self,
        step: Step,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Enqueues `step`'s kernel on its slot after `wait`.
    fn kernel(&mut self, step: Step, wait: &[&Self::Event]) -> Result<Self::Event, StreamError>;
    /// Enqueues `step`'s download from its slot after `wait`; events with bytes.
    fn download(
        &mut self,
        step: Step,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Checks `step` once its commands completed (the bounds guard); steps are checked in
    /// order, each once.
    fn check(&mut self, step: Step) -> Result<(), StreamError>;
    /// Submits what was enqueued.
    fn flush(&self) -> Result<(), StreamError>;
    /// Waits for everything enqueued (errors ignored: used on the way out).
    fn finish(&self);
    /// Waits for one command; its failure if it failed.
    fn wait(&self, e: &Self::Event) -> Result<(), BackendError>;
    /// Device times of a completed command.
    fn profile(&self, e: &Self::Event) -> Result<Profile, StreamError>;
}

/// The shape of one ring's run.
pub(crate) struct Schedule<'a> {
    /// The first block of the run this ring streams (its blocks are `first..first + blocks`).
    pub first: usize,
    /// Blocks this ring streams.
    pub blocks: usize,
    /// Slots in the ring.
    pub slots: usize,
    /// Each block's result goes back where it came from.
    pub in_place: bool,
    /// Passes over the blocks.
    pub passes: usize,
    /// The pass of the caller's that this run's first pass is, and the caller's passes: a
    /// caller that makes each pass a run of its own with its resident blocks kept across
    /// them (`slots::Carry`) runs pass `k` as `(k, n)`; other runs are `(0, passes)`.
    pub carried: (usize, usize),
    /// The blocks (ring-local) that stay in device memory across passes, each in a slot of
    /// its own: uploaded in the first pass only and, in place, downloaded after the last.
    pub resident: Range<usize>,
    /// The device's index in the run, for the records.
    pub device: u16,
    /// Stop request (see [`super::StreamOptions::stop`]).
    pub stop: Option<&'a AtomicUsize>,
    /// Set when another ring of the run failed: this one stops too.
    pub abort: Option<&'a AtomicBool>,
}

impl Schedule<'_> {
    /// Steps in the run: every block in every pass.
    fn steps(&self) -> usize {
        self.blocks.saturating_mul(self.passes.max(1))
    }

    /// The order of a later pass's blocks (ring-local), position by position, where it is not
    /// the blocks' own: in a run of several passes with resident blocks and streamed ones, the
    /// resident blocks are spread evenly among the streamed ones. Their kernels wait for
    /// nothing but their own of the pass before: taken in the blocks' order they reach the
    /// compute queue all at once after the streamed ones, and the next pass's first streamed
    /// kernel waits behind them while its uploads fill the ring and stop (measured on an
    /// H100, 124 resident kernels of 64 MiB: the upload queue stood 4.8 ms in each pass of
    /// 50 ms). The first pass keeps the blocks' order: host memory may still be pinned in that
    /// order. So does a caller's pass that is a run of its own (`carried`: one pass a run),
    /// whose host memory is a staging ring filled in that order.
    fn later_order(&self) -> Option<Vec<usize>> {
        let resident = self.resident.len();
        let streamed = self.blocks.checked_sub(resident)?;
        let carried = self.carried.1 != self.passes;
        if streamed == 0 || resident == 0 || self.passes < 2 || carried {
            return None;
        }
        let mut order = Vec::with_capacity(self.blocks);
        let mut kept = self.resident.clone();
        let own = (0..self.blocks).filter(|b| !self.resident.contains(b));
        let (r, s) = (resident as u128, streamed as u128);
        for (j, block) in own.enumerate() {
            order.push(block);
            // After streamed block j, the resident blocks up to round((j + 1/2) r / s): each
            // at the middle of its share of the streamed ones.
            let upto = (((2 * j as u128 + 1) * r + s) / (2 * s)).min(r) as usize;
            let placed = order.len() - j - 1;
            order.extend(kept.by_ref().take(upto.saturating_sub(placed)));
        }
        order.extend(kept);
        Some(order)
    }

    /// Ring-local step `i` (`later`: [`Schedule::later_order`]); `turn` counts the steps on
    /// the ring's slots so far.
    fn step(&self, i: usize, later: Option<&[usize]>, turn: &mut usize) -> Step {
        let (pass, at) = (i / self.blocks, i % self.blocks);
        let local = match later {
            Some(order) if pass > 0 => order[at],
            _ => at,
        };
        let slot = if self.resident.contains(&local) {
            self.slots + local - self.resident.start
        } else {
            *turn += 1;
            (*turn - 1) % self.slots
        };
        Step {
            block: self.first + local,
            pass,
            slot,
        }
    }

    /// Steps in flight at most: two rings, and the resident blocks where the run makes
    /// every pass (their steps of the next pass run beside the ring's). One pass of a
    /// caller's (`carried`) stays within two rings: its host memory may be a staging ring
    /// that holds little more, refilled only as steps complete.
    fn window(&self) -> usize {
        let carried = self.carried.1 != self.passes;
        2 * self.slots + if carried { 0 } else { self.resident.len() }
    }

    /// The caller's pass `step` is part of (0-based): a run that is pass `k` of a caller's
    /// (`carried`) counts its own steps from pass 0.
    fn pass_of(&self, step: &Step) -> usize {
        step.pass + self.carried.0
    }

    /// `step` has a block to upload: not a resident block after the first pass.
    fn uploads(&self, step: &Step) -> bool {
        step.pass + self.carried.0 == 0 || step.slot < self.slots
    }

    /// `step` has a result to download: not a resident block in place before the last pass.
    fn downloads(&self, step: &Step) -> bool {
        let last = step.pass + self.carried.0 + 1 >= self.carried.1.max(1);
        !self.in_place || step.slot < self.slots || last
    }
}

/// The events of one step in flight.
struct InFlight<E> {
    step: Step,
    up: Vec<(E, u64)>,
    kernel: E,
    down: Vec<(E, u64)>,
}

/// Enqueues every step of `sched` through `s`, at most two rings (and the resident blocks)
/// ahead of the last completed step (so a stop is answered within a few blocks and progress
/// is live); returns every command's record. `progress(steps_done, bytes_done)` counts this
/// ring's.
pub(crate) fn run_ring<S: Stages>(
    stages: &mut S,
    sched: &Schedule,
    progress: &dyn Fn(u64, u64),
) -> Result<Vec<Record>, StreamError> {
    let window = sched.window();
    let steps = sched.steps();
    // Steps `waited..` (at most `window` of them) are in flight, oldest first.
    let mut flight: VecDeque<InFlight<S::Event>> = VecDeque::with_capacity(window + 1);
    // Three records a step where no transfer crosses a chunk boundary: reserved at once, so
    // a run of many tiny blocks does not hold a doubled buffer while the Vec grows.
    // Several passes: one pass's worth, then the Vec grows (a long run is not reserved whole).
    let mut records = Vec::with_capacity(steps.min(2 * sched.blocks.max(1)).saturating_mul(3));
    // The last step on each slot, and the steps on the ring's slots so far.
    let mut last = vec![None; sched.slots + sched.resident.len()];
    let later = sched.later_order();
    let (mut waited, mut bytes, mut turn) = (0, 0, 0);
    for i in 0..=steps {
        while waited < i && (i == steps || waited + window <= i) {
            let done = flight.pop_front().expect("step `waited` is in flight");
            bytes += complete(stages, sched, &done, &mut records)
                .map_err(|e| e.in_pass(sched.pass_of(&done.step)))?;
            stages.check(done.step).map_err(|e| {
                let pass = sched.pass_of(&done.step);
                e.after_passes(sched.carried.0).in_pass(pass)
            })?;
            waited += 1;
            progress(waited as u64, bytes);
            check_stop(stages, sched, waited)?;
        }
        if i < steps {
            check_stop(stages, sched, waited)?;
            let step = sched.step(i, later.as_deref(), &mut turn);
            let in_flight = |p: Option<usize>| p.filter(|&p| p >= waited).map(|p| p - waited);
            let prev = in_flight(last[step.slot].replace(i)).map(|p| &flight[p]);
            // In place, the block's previous pass wrote what this pass reads: the first pass
            // took the blocks in their order, later ones all in the same order.
            let before = match step.pass {
                0 => None,
                1 => Some(step.block - sched.first),
                _ => Some(i - sched.blocks),
            };
            let before = before.filter(|_| sched.in_place);
            let before = in_flight(before).map(|p| &flight[p]);
            let events = enqueue_step(stages, sched, step, (prev, before))
                .map_err(|e| e.in_pass(sched.pass_of(&step)))?;
            flight.push_back(events);
            stages.flush()?;
        }
    }
    Ok(records)
}

/// Waits for a step's downloads and kernel, records its commands' device times and returns
/// the bytes it downloaded; its events are released when `events` is dropped.
fn complete<S: Stages>(
    stages: &S,
    sched: &Schedule,
    events: &InFlight<S::Event>,
    records: &mut Vec<Record>,
) -> Result<u64, StreamError> {
    let Step { block, pass, .. } = events.step;
    for (e, _) in &events.down {
        stages
            .wait(e)
            .map_err(|e| stage_error(block, first_failed(stages, events), e))?;
    }
    stages
        .wait(&events.kernel)
        .map_err(|e| stage_error(block, "kernel", e))?;
    let mut push = |stage, e: &S::Event, bytes| -> Result<(), StreamError> {
        let p = stages.profile(e)?;
        // `stream::check_passes` keeps every pass under u32::MAX.
        let at = (sched.device, u32::try_from(pass).unwrap_or(u32::MAX));
        records.push(Record::new(stage, at, block, bytes, &p));
        Ok(())
    };
    for (e, b) in &events.up {
        push(Stage::Upload, e, *b)?;
    }
    push(Stage::Kernel, &events.kernel, 0)?;
    for (e, b) in &events.down {
        push(Stage::Download, e, *b)?;
    }
    Ok(events.down.iter().map(|(_, b)| b).sum())
}

/// The steps a step waits for, while in flight: the last on its slot, and, in place, the
/// same block's step in the pass before.
type Before<'f, E> = (Option<&'f InFlight<E>>, Option<&'f InFlight<E>>);

/// The last download of a step in flight, if any.
fn down_of<E>(p: Option<&InFlight<E>>) -> Option<&E> {
    p.and_then(|p| p.down.last().map(|(e, _)| e))
}

/// Enqueues `step` behind `prev`, the last step on its slot, and, in place, `before`, the
/// same block's step in the pass before (each while still in flight).
fn enqueue_step<S: Stages>(
    stages: &mut S,
    sched: &Schedule,
    step: Step,
    (prev, before): Before<'_, S::Event>,
) -> Result<InFlight<S::Event>, StreamError> {
    // Upload: the slot's previous kernel (and, in place, its download, and the download of
    // the block's previous pass, which wrote what this one reads) must be done.
    let mut wait: Vec<&S::Event> = prev.map(|p| vec![&p.kernel]).unwrap_or_default();
    if sched.in_place {
        wait.extend(down_of(prev));
        wait.extend(down_of(before));
    }
    let up = match sched.uploads(&step) {
        true => stages.upload(step, &wait)?,
        false => Vec::new(),
    };
    // Kernel: after the upload (without one, after the slot's previous kernel) and, out of
    // place, after the slot's previous download.
    let mut kwait: Vec<&S::Event> = match up.last() {
        Some((e, _)) => vec![e],
        None => prev.map(|p| vec![&p.kernel]).unwrap_or_default(),
    };
    if !sched.in_place {
        kwait.extend(down_of(prev));
    }
    let kernel = stages.kernel(step, &kwait)?;
    // Download: after the kernel.
    let down = match sched.downloads(&step) {
        true => stages.download(step, &[&kernel])?,
        false => Vec::new(),
    };
    Ok(InFlight {
        step,
        up,
        kernel,
        down,
    })
}

/// Returns `Stopped` (after letting the blocks in flight finish) once a stop is requested or
/// another ring of the run failed (code 0: the run reports that ring's error instead).
fn check_stop<S: Stages>(stages: &S, sched: &Schedule, done: usize) -> Result<(), StreamError> {
    let code = sched.stop.map_or(0, |f| f.load(Ordering::Relaxed));
    let aborted = sched.abort.is_some_and(|a| a.load(Ordering::Relaxed));
    if code == 0 && !aborted {
        return Ok(());
    }
    stages.finish();
    Err(StreamError::Stopped {
        code,
        done,
        blocks: sched.steps(),
    })
}

/// The first stage of a block whose command failed: a failed upload or kernel makes the
/// download that waits for it fail too, and the cause is what the user needs to see.
fn first_failed<S: Stages>(stages: &S, events: &InFlight<S::Event>) -> &'static str {
    if events.up.iter().any(|(e, _)| stages.wait(e).is_err()) {
        "upload"
    } else if stages.wait(&events.kernel).is_err() {
        "kernel"
    } else {
        "download"
    }
}

/// A failed command of block `block` in `stage`.
pub(crate) fn stage_error(
    block: usize,
    stage: &'static str,
    source: impl Into<BackendError>,
) -> StreamError {
    StreamError::Stage {
        block,
        pass: 0,
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

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
