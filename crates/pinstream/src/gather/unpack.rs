//! Unpacking downloads: on the calling thread ([`unpack`], what
//! [`Gather::download_scatter`] does), or on a thread of the gather's own for
//! [`Gather::download_scatter_async`], which returns once everything is enqueued: that
//! thread waits for each batch's DMA, copies the batch into the caller's pieces, gives the
//! stage back, and once the call's last batch is done completes the user event that a marker
//! on the caller's queue waits for. So the caller's thread never waits for its queue.
//!
//! Every path ends the call's event: it is set when the last holder of the call lets go
//! ([`Call`]'s `Drop`), failed unless every batch was copied, so a panic while unpacking or
//! a call that failed half-way never leaves a caller's `clFinish` hanging. And nothing is
//! copied into the caller's memory once the call has returned an error ([`Pending`]).

use super::error::GatherError;
use super::plan::{self, Batch};
use super::stage::{copy_all, not_contiguous};
use super::{cl, Gather, Stage};
use crate::backend::opencl::{ClError, DeviceBuffer, Event, Queue};
use crate::host::HostRegion;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, SendError, Sender};
use std::sync::{Arc, Mutex};

/// Where an asynchronous download's piece goes: memory the caller keeps valid, and
/// untouched, until the call's event completes.
pub type Destination = Box<dyn AsMut<[u8]> + Send>;

/// `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`: the user event's status when a batch
/// failed, so the marker (and what waits on it) fails too.
const FAILED: i32 = -14;

/// Copies a downloaded batch from `host` (waiting for its DMA) into the pieces; the
/// seconds the copy took.
pub(super) fn unpack(
    host: &mut HostRegion,
    batch: &Batch,
    pieces: &mut [(&mut [u8], usize)],
) -> Result<f64, GatherError> {
    host.wait().map_err(cl)?;
    let staged = host.as_slice().ok_or_else(not_contiguous)?;
    let mut outs: Vec<(&mut [u8], &[u8])> = Vec::with_capacity(batch.segments.len());
    // Each piece's bytes not yet handed out, and where they start in the piece: a
    // batch's segments of one piece come in order.
    let mut rest: Vec<(&mut [u8], usize)> = pieces.iter_mut().map(|(h, _)| (&mut **h, 0)).collect();
    for seg in &batch.segments {
        let (left, base) = std::mem::take(&mut rest[seg.piece]);
        let (_, tail) = left.split_at_mut(seg.piece_offset - base);
        let (mine, after) = tail.split_at_mut(seg.len);
        rest[seg.piece] = (after, seg.piece_offset + seg.len);
        outs.push((mine, &staged[seg.stage..seg.stage + seg.len]));
    }
    Ok(copy_all(outs, batch.data_end, false))
}

/// One asynchronous download call: its pieces, the user event its marker waits for, and
/// whether it failed (a batch, or the call itself: batches not yet copied then never are).
struct Call {
    pieces: Mutex<Vec<(Destination, usize)>>,
    user: Event,
    failed: AtomicBool,
    /// The call's marker, where the call failed after enqueueing it: released only once the
    /// user event is set (PoCL 3.1 aborts, `pocl_update_event_failed`, when it fails a
    /// marker already released).
    marker: Mutex<Option<Event>>,
}

impl Call {
    /// Marks the call failed, then takes the pieces' lock once: a copy in progress ends
    /// before it is ours (pinstream's own thread, which never waits for the caller's queue
    /// while holding it), and `failed` is read under it, so no copy starts after this.
    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        drop(crate::sync::lock(&self.pieces));
    }
}

impl Drop for Call {
    /// Completes the user event when the last holder lets go: the unpacking thread after the
    /// call's last batch, or the call itself when it returned after that (or failed before
    /// handing every batch over). Failed unless every batch was copied, so the marker and
    /// what waits on it fail too, and never hang.
    fn drop(&mut self) {
        let status = match *self.failed.get_mut() {
            true => FAILED,
            false => 0,
        };
        if let Err(e) = self.user.set_user_status(status) {
            tracing::warn!("{e}");
        }
        let marker = self.marker.get_mut().unwrap_or_else(|p| p.into_inner());
        drop(marker.take());
    }
}

/// A call in progress: dropped before [`Pending::succeeded`] (an error returned, or a panic
/// unwinding out of the call) it fails the call, so the unpacking thread copies nothing into
/// the caller's memory once the call has failed, whatever step failed.
struct Pending<'a>(Option<&'a Call>);

impl Pending<'_> {
    /// The call returned its event: the pieces are the thread's to fill.
    fn succeeded(mut self) {
        self.0 = None;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.0 {
            call.fail();
        }
    }
}

/// One batch to unpack once its DMA (`down`) completes.
struct Job {
    stage: Stage,
    batch: Batch,
    down: Vec<Event>,
    call: Arc<Call>,
}

/// The unpacking thread's two ends: jobs to it, stages back.
pub(super) struct Unpacker {
    jobs: Sender<Job>,
    back: Receiver<Stage>,
}

impl Unpacker {
    /// A new thread, which unpacks `first` (if any) before the jobs sent to it.
    fn start(first: Option<Job>) -> Result<Self, GatherError> {
        let (jobs, todo) = channel::<Job>();
        let (done, back) = channel();
        let work = move || {
            first
                .into_iter()
                .chain(todo)
                .for_each(|job| run(job, &done))
        };
        std::thread::Builder::new()
            .name("pinstream-unpack".into())
            .spawn(work)
            .map_err(|e| GatherError::Unpacker(e.to_string()))?;
        Ok(Unpacker { jobs, back })
    }

    /// Hands `job` to the thread. Should the thread have ended (it catches its panics, so it
    /// should not), a new one takes the job: dropping it here would wait for its DMA, that
    /// is for the caller's queue (only when no thread can be made at all is it dropped here,
    /// with the error). Stages the old thread gave back are settled; they go too.
    fn send(&mut self, job: Job) -> Result<(), GatherError> {
        if let Err(SendError(job)) = self.jobs.send(job) {
            tracing::warn!("the gather's unpacking thread had ended: starting another");
            *self = Unpacker::start(Some(job))?;
        }
        Ok(())
    }

    /// Stages the thread has finished with.
    pub(super) fn returned(&self) -> impl Iterator<Item = Stage> + '_ {
        self.back.try_iter()
    }
}

/// Waits for a job's DMA, unpacks it (a panic while unpacking, say in a piece's `as_mut`,
/// fails the call and is caught: the thread goes on) and gives the stage back; the call's
/// user event completes as its last holder lets go ([`Call`]'s `Drop`). A dropped gather
/// leaves this thread to finish its jobs; the stages it still holds are freed as it does.
fn run(job: Job, back: &Sender<Stage>) {
    let Job {
        mut stage,
        batch,
        down,
        call,
    } = job;
    let copy = AssertUnwindSafe(|| copy_job(&mut stage.host, &batch, &down, &call));
    if !catch_unwind(copy).unwrap_or(false) {
        call.failed.store(true, Ordering::Release);
    }
    let _ = back.send(stage);
}

/// Waits for `down`, then copies the batch into the call's pieces unless the call has
/// failed; whether it copied.
fn copy_job(host: &mut HostRegion, batch: &Batch, down: &[Event], call: &Call) -> bool {
    if !down.iter().all(|e| e.wait().is_ok()) {
        return false;
    }
    // `failed` is read under the lock, which a failing call takes after setting it
    // (`Call::fail`): no copy into the caller's memory starts after the call failed.
    let mut pieces = crate::sync::lock(&call.pieces);
    if call.failed.load(Ordering::Acquire) {
        return false;
    }
    let mut refs: Vec<(&mut [u8], usize)> = pieces
        .iter_mut()
        .map(|(d, o)| (d.as_mut().as_mut(), *o))
        .collect();
    unpack(host, batch, &mut refs).is_ok()
}

impl Gather {
    /// Copies `src` at each piece's offset into the piece's memory, on `queue` after `wait`,
    /// and returns at once: the returned event (a marker on `queue`, so later commands on
    /// `queue` wait for it too) completes when every piece is in host memory, and fails
    /// when a batch failed. Each piece must stay valid and untouched until then. Refused as
    /// [`Self::download_scatter`] refuses. The call never waits for `queue`; it may take a
    /// new host stage while every stage holds a batch not yet unpacked.
    pub fn download_scatter_async(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        mut pieces: Vec<(Destination, usize)>,
        wait: &[&Event],
    ) -> Result<Event, GatherError> {
        super::access::kernel_may(src, false)?;
        let start = std::time::Instant::now();
        let shape: Vec<(usize, usize)> = pieces
            .iter_mut()
            .map(|(d, o)| (d.as_mut().as_mut().len(), *o))
            .collect();
        plan::check(&shape, src.size(), false)?;
        let batches = self.plan(&shape, false);
        self.begin(batches.len(), start.elapsed().as_secs_f64());
        let user = self.devices.ctx.user_event().map_err(cl)?;
        let call = Arc::new(Call {
            pieces: Mutex::new(pieces),
            user,
            failed: AtomicBool::new(false),
            marker: Mutex::new(None),
        });
        let pending = Pending(Some(&call));
        let n = batches.len();
        self.enqueue_downloads(queue, src, batches, wait, &call)?;
        let done = mark_after(queue, &call.user, n)?;
        if let Err(e) = flush(queue, n) {
            *crate::sync::lock(&call.marker) = Some(done);
            return Err(e);
        }
        pending.succeeded();
        self.last.call_s = start.elapsed().as_secs_f64();
        Ok(done)
    }

    /// Enqueues each batch's commands and hands it to the unpacking thread.
    fn enqueue_downloads(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        batches: Vec<Batch>,
        wait: &[&Event],
        call: &Arc<Call>,
    ) -> Result<(), GatherError> {
        if self.unpacker.is_none() {
            self.unpacker = Some(Unpacker::start(None)?);
        }
        for (k, batch) in batches.into_iter().enumerate() {
            let first_wait = if k == 0 { wait } else { &[] };
            let (stage, down) = self.download_batch(queue, src, &batch, first_wait)?;
            let call = Arc::clone(call);
            let job = Job {
                stage,
                batch,
                down,
                call,
            };
            self.unpacker.as_mut().expect("started above").send(job)?;
            if crate::backend::injected_fault() == Some(("panic-sent", k + 1)) {
                panic!("PINSTREAM_INJECT_FAULT: a panic once {} batch(es) went to the unpacking thread, on purpose", k + 1);
            }
        }
        Ok(())
    }
}

/// Flushes `queue` after the call's marker. The test hook `PINSTREAM_INJECT_FAULT=flush:N`
/// fails it as a driver would, in a call whose N batches went to the unpacking thread.
fn flush(queue: &Queue, batches: usize) -> Result<(), GatherError> {
    if crate::backend::injected_fault() == Some(("flush", batches)) {
        tracing::warn!("PINSTREAM_INJECT_FAULT: failing the flush of a download on purpose");
        let code = cl3::error_codes::CL_OUT_OF_RESOURCES;
        return Err(cl(ClError::new("clFlush", code)));
    }
    queue.flush().map_err(cl)
}

/// The call's marker on `queue`, after `user`. The test hook `PINSTREAM_INJECT_FAULT=mark:N`
/// fails it as a driver would, in a call whose N batches went to the unpacking thread.
fn mark_after(queue: &Queue, user: &Event, batches: usize) -> Result<Event, GatherError> {
    if crate::backend::injected_fault() == Some(("mark", batches)) {
        tracing::warn!("PINSTREAM_INJECT_FAULT: failing the marker of a download on purpose");
        let code = cl3::error_codes::CL_OUT_OF_RESOURCES;
        return Err(cl(ClError::new("clEnqueueMarkerWithWaitList", code)));
    }
    queue.mark_after(&[user]).map_err(cl)
}
