//! Unpacking downloads: on the calling thread ([`unpack`], what
//! [`Gather::download_scatter`] does), or on a thread of the gather's own for
//! [`Gather::download_scatter_async`], which returns once everything is enqueued: that
//! thread waits for each batch's DMA, copies the batch into the caller's pieces, gives the
//! stage back, and after the call's last batch completes the user event that a marker on
//! the caller's queue waits for. So the caller's thread never waits for its queue.

use super::error::GatherError;
use super::plan::{self, Batch};
use super::{cl, copy_all, not_contiguous, Gather, Stage};
use crate::backend::opencl::{DeviceBuffer, Event, Queue};
use crate::host::HostRegion;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
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

/// One asynchronous download call: its pieces, the user event completed after its last
/// batch, and whether a batch failed (later batches are then not copied).
struct Call {
    pieces: Mutex<Vec<(Destination, usize)>>,
    user: Event,
    failed: AtomicBool,
}

/// One batch to unpack once its DMA (`down`) completes.
struct Job {
    stage: Stage,
    batch: Batch,
    down: Vec<Event>,
    call: Arc<Call>,
    last: bool,
}

/// The unpacking thread's two ends: jobs to it, stages back.
pub(super) struct Unpacker {
    jobs: Sender<Job>,
    back: Receiver<Stage>,
}

impl Unpacker {
    fn start() -> Result<Self, GatherError> {
        let (jobs, todo) = channel::<Job>();
        let (done, back) = channel();
        std::thread::Builder::new()
            .name("pinstream-unpack".into())
            .spawn(move || todo.into_iter().for_each(|job| run(job, &done)))
            .map_err(|e| GatherError::Unpacker(e.to_string()))?;
        Ok(Unpacker { jobs, back })
    }

    /// Stages the thread has finished with.
    pub(super) fn returned(&self) -> impl Iterator<Item = Stage> + '_ {
        self.back.try_iter()
    }
}

/// Waits for a job's DMA, unpacks it, gives the stage back and, after the call's last
/// batch, completes its user event. A dropped gather leaves this thread to finish its jobs;
/// the stages it still holds are freed as it does.
fn run(mut job: Job, back: &Sender<Stage>) {
    let call = &job.call;
    let copied = job.down.iter().all(|e| e.wait().is_ok()) && {
        // `failed` is read under the lock: a call that failed while enqueueing sets it and
        // then takes the lock, so no copy into the caller's memory starts after it returns.
        let mut pieces = call.pieces.lock().unwrap_or_else(|p| p.into_inner());
        !call.failed.load(Ordering::Acquire) && {
            let mut refs: Vec<(&mut [u8], usize)> = pieces
                .iter_mut()
                .map(|(d, o)| (d.as_mut().as_mut(), *o))
                .collect();
            unpack(&mut job.stage.host, &job.batch, &mut refs).is_ok()
        }
    };
    if !copied {
        call.failed.store(true, Ordering::Release);
    }
    let _ = back.send(job.stage);
    if job.last {
        let status = if call.failed.load(Ordering::Acquire) {
            FAILED
        } else {
            0
        };
        if let Err(e) = call.user.set_user_status(status) {
            tracing::warn!("{e}");
        }
    }
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
        });
        if let Err(e) = self.enqueue_downloads(queue, src, batches, wait, &call) {
            // Batches already sent are not copied into the caller's memory once this returns:
            // a copy in progress ends before the lock is ours (pinstream's own thread, which
            // never waits for the caller's queue while holding it).
            call.failed.store(true, Ordering::Release);
            drop(call.pieces.lock().unwrap_or_else(|p| p.into_inner()));
            return Err(e);
        }
        let done = queue.mark_after(&[&call.user]).map_err(cl)?;
        queue.flush().map_err(cl)?;
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
            self.unpacker = Some(Unpacker::start()?);
        }
        let n = batches.len();
        for (k, batch) in batches.into_iter().enumerate() {
            let first_wait = if k == 0 { wait } else { &[] };
            let (stage, down) = self.download_batch(queue, src, &batch, first_wait)?;
            let call = Arc::clone(call);
            let job = Job {
                stage,
                batch,
                down,
                call,
                last: k + 1 == n,
            };
            let jobs = &self.unpacker.as_ref().expect("started above").jobs;
            jobs.send(job)
                .map_err(|_| GatherError::Unpacker("the thread has ended".into()))?;
        }
        Ok(())
    }
}
