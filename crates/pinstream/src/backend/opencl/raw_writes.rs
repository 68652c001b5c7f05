//! The driver's own floor for small writes: `clEnqueueWriteBuffer` called directly, waited
//! for in each of the ways a program can wait, with nothing of pinstream's around it, so
//! `pinstream bench --latency` can put pinstream's path beside the driver's in one run.
//! The host bytes are borrowed for the whole call and every command is complete before it
//! returns, which makes the raw loops safe to offer.

use super::context::{DeviceBuffer, Queue};
use super::error::{Call, ClError};
use cl3::types::{cl_event, CL_BLOCKING, CL_NON_BLOCKING};
use std::time::Instant;

/// How a raw write is issued and waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum WriteWay {
    /// Non-blocking write, then `clWaitForEvents` on its event.
    WaitEvent,
    /// Non-blocking write, then `clFinish`.
    Finish,
    /// Blocking write (`CL_TRUE`).
    Blocking,
    /// Non-blocking write, `clFlush`, then polling the event's status until complete.
    FlushPoll,
    /// The enqueue call alone (its wait is done outside the timed span).
    EnqueueOnly,
    /// `batch` non-blocking writes back to back, then one `clFinish`; per transfer.
    Batch,
    /// `batch` non-blocking writes back to back, then `clWaitForEvents` on each one's
    /// event in turn (how `bench` waited before issue 13); per transfer.
    BatchWaitEach,
}

impl WriteWay {
    /// Every way, in the order of the table.
    pub const ALL: [WriteWay; 7] = [
        WriteWay::WaitEvent,
        WriteWay::Finish,
        WriteWay::Blocking,
        WriteWay::FlushPoll,
        WriteWay::EnqueueOnly,
        WriteWay::Batch,
        WriteWay::BatchWaitEach,
    ];

    /// What the way does, for tables.
    pub fn label(self) -> &'static str {
        match self {
            WriteWay::WaitEvent => "non-blocking + clWaitForEvents",
            WriteWay::Finish => "non-blocking + clFinish",
            WriteWay::Blocking => "blocking (CL_TRUE)",
            WriteWay::FlushPoll => "clFlush + polling the event",
            WriteWay::EnqueueOnly => "the enqueue call alone",
            WriteWay::Batch => "N enqueued, one clFinish (per transfer)",
            WriteWay::BatchWaitEach => "N enqueued, clWaitForEvents on each (per transfer)",
        }
    }
}

/// Writes `src` into `dst` at offset 0 `count` times (`count` batches of `batch` for
/// [`WriteWay::Batch`] and [`WriteWay::BatchWaitEach`]) and returns each one's wall time per transfer, in microseconds.
pub fn write_floor(
    queue: &Queue,
    dst: &DeviceBuffer,
    src: &[u8],
    way: WriteWay,
    count: usize,
    batch: usize,
) -> Result<Vec<f64>, ClError> {
    if src.len() > dst.size() {
        return Err(ClError::new(
            "clEnqueueWriteBuffer",
            cl3::error_codes::CL_INVALID_VALUE,
        ));
    }
    let mut out = Vec::with_capacity(count);
    let mut events = Vec::with_capacity(batch.max(1));
    for _ in 0..count {
        let r = one(queue, dst, src, way, batch.max(1), &mut events);
        // Nothing outlives the borrow of `src`: wait whatever happened, then release.
        let done = queue.finish();
        release(&mut events);
        out.push(r?);
        done?;
    }
    Ok(out)
}

/// One timed sample; the events it made go into `events` (released by the caller, after
/// the queue is finished).
fn one(
    queue: &Queue,
    dst: &DeviceBuffer,
    src: &[u8],
    way: WriteWay,
    batch: usize,
    events: &mut Vec<cl_event>,
) -> Result<f64, ClError> {
    let start = Instant::now();
    let n = match way {
        WriteWay::Batch | WriteWay::BatchWaitEach => batch,
        _ => 1,
    };
    for _ in 0..n {
        let blocking = way == WriteWay::Blocking;
        events.push(enqueue(queue, dst, src, blocking)?);
    }
    let last = events[events.len() - 1];
    match way {
        WriteWay::WaitEvent => cl3::event::wait_for_events(&[last]).call("clWaitForEvents")?,
        WriteWay::Finish | WriteWay::Batch => queue.finish()?,
        WriteWay::FlushPoll => {
            queue.flush()?;
            poll(last)?;
        }
        WriteWay::BatchWaitEach => {
            for e in events.iter() {
                cl3::event::wait_for_events(&[*e]).call("clWaitForEvents")?;
            }
        }
        WriteWay::Blocking | WriteWay::EnqueueOnly => {}
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn enqueue(
    queue: &Queue,
    dst: &DeviceBuffer,
    src: &[u8],
    blocking: bool,
) -> Result<cl_event, ClError> {
    // SAFETY: `src` is borrowed by `write_floor` until the queue is finished; the range was
    // checked against the buffer's size.
    unsafe {
        cl3::command_queue::enqueue_write_buffer(
            queue.raw,
            dst.mem.raw,
            if blocking {
                CL_BLOCKING
            } else {
                CL_NON_BLOCKING
            },
            0,
            src.len(),
            src.as_ptr().cast(),
            0,
            std::ptr::null(),
        )
    }
    .call("clEnqueueWriteBuffer")
}

/// Polls the event's status until it is complete, or fails with its (negative) status.
fn poll(e: cl_event) -> Result<(), ClError> {
    loop {
        let status = cl3::event::get_event_info(e, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS)
            .call("clGetEventInfo")?;
        match i32::from(status) {
            0 => return Ok(()),
            s if s < 0 => return Err(ClError::new("clEnqueueWriteBuffer", s)),
            _ => std::hint::spin_loop(),
        }
    }
}

fn release(events: &mut Vec<cl_event>) {
    for e in events.drain(..) {
        // SAFETY: each event is ours, created by the enqueue above and released once.
        if let Err(code) = unsafe { cl3::event::release_event(e) } {
            tracing::warn!("{}", ClError::new("clReleaseEvent", code));
        }
    }
}
