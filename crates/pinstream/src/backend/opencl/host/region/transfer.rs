//! Transfers between a region and device buffers, and the work of batch calls on their
//! callers' queues, kept in the region until they are waited for.

use super::HostRegion;
use crate::backend::opencl::{ClError, DeviceBuffer, Event, Queue};
use crate::backend::pinning::HostError;
use crate::sync::lock;
use std::ops::Range;

impl HostRegion {
    /// Notes that `queue` may now have transfers in flight on this region (a reference to
    /// it the first time; nothing after).
    pub(crate) fn touch(&self, queue: &Queue) -> Result<(), ClError> {
        let mut f = lock(&self.in_flight);
        if !f.queues.iter().any(|q| q.raw == queue.raw) {
            f.queues.push(queue.retained()?);
        }
        Ok(())
    }

    /// Runs `enqueue`, which enqueues work on this region's memory on `queue`, a queue that
    /// is not ours (a batch call's caller's), and keeps the event it returns as `queue`'s
    /// last, which is all that [`Self::wait`] and `Drop` then wait for: never the caller's
    /// queue. The lock is held while `enqueue` runs, so no other thread finds the region idle
    /// in between; a queue new to the region is retained first, so a failure there enqueues
    /// nothing.
    pub(crate) fn in_flight_until<E: From<ClError>>(
        &self,
        queue: &Queue,
        enqueue: impl FnOnce() -> Result<Event, E>,
    ) -> Result<Event, E> {
        let mut f = lock(&self.in_flight);
        let at = match f.events.iter().position(|(q, _)| q.raw == queue.raw) {
            Some(at) => at,
            None => {
                let held = queue.named()?;
                let done = enqueue()?;
                f.events.push((held, done.clone()));
                return Ok(done);
            }
        };
        let done = enqueue()?;
        f.events[at].1 = done.clone();
        Ok(done)
    }

    /// Enqueues a copy of `range` of this region into `dst` at `dst_offset` on `queue`, after
    /// `wait`. Returns one event per chunk crossed.
    pub fn upload(
        &self,
        queue: &Queue,
        range: Range<usize>,
        dst: &DeviceBuffer,
        dst_offset: usize,
        wait: &[&Event],
    ) -> Result<Vec<Event>, HostError> {
        // SAFETY: each piece is inside this region; `queue` is in `queues` before anything is
        // enqueued, and nothing hands out a mutable slice or frees the memory before every
        // queue there is finished.
        self.enqueue_pieces(queue, range, |ptr, n, rel| unsafe {
            // Saturated: the driver refuses an offset past the buffer (never a wrapped one).
            queue.write_raw(dst, dst_offset.saturating_add(rel), ptr, n, wait)
        })
    }

    /// Enqueues a copy of `src` at `src_offset` into `range` of this region on `queue`, after
    /// `wait`. Returns one event per chunk crossed.
    pub fn download(
        &mut self,
        queue: &Queue,
        src: &DeviceBuffer,
        src_offset: usize,
        range: Range<usize>,
        wait: &[&Event],
    ) -> Result<Vec<Event>, HostError> {
        // SAFETY: as in `upload`; `&mut self` also excludes every outstanding slice.
        self.enqueue_pieces(queue, range, |ptr, n, rel| unsafe {
            queue.read_raw(src, src_offset.saturating_add(rel), ptr, n, wait)
        })
    }

    /// Enqueues one command per chunk piece of `range` on `queue`, which is tracked first, so
    /// a later piece's failure leaves the earlier ones waited for by `wait` and `Drop`.
    fn enqueue_pieces(
        &self,
        queue: &Queue,
        range: Range<usize>,
        mut enqueue: impl FnMut(*mut u8, usize, usize) -> Result<Event, ClError>,
    ) -> Result<Vec<Event>, HostError> {
        self.wait_pinned(range.clone())?;
        self.touch(queue)?;
        let mut events = Vec::with_capacity(1);
        self.each_piece(range, |ptr, n, rel| {
            events.push(enqueue(ptr, n, rel)?);
            Ok::<(), HostError>(())
        })?;
        Ok(events)
    }
}
