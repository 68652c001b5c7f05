//! [`Queue`]: an in-order command queue of a context, and its commands (writes, reads,
//! fills, markers) with their wait lists.

use super::{ContextInner, DeviceBuffer};
use crate::backend::opencl::error::{Call, ClError};
use crate::backend::opencl::Event;
use cl3::types::{cl_command_queue, cl_context, cl_event};
use std::ptr;
use std::sync::Arc;

/// An in-order command queue (with profiling, unless made by [`Context::plain_queue`](super::Context::plain_queue)).
pub struct Queue {
    pub(crate) raw: cl_command_queue,
    pub(in crate::backend::opencl) _ctx: Arc<ContextInner>,
    /// Adopted from the caller ([`Queue::from_raw`]): never finished by pinstream, only
    /// released (its commands are the caller's to wait for).
    pub(in crate::backend::opencl) adopted: bool,
}

// SAFETY: command queues are thread-safe OpenCL objects (see ContextInner).
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

impl Queue {
    /// An event of a command on this queue, waited as its context says now.
    pub(crate) fn event(&self, raw: cl_event) -> Event {
        Event(raw, self._ctx.wait.get())
    }

    /// Another owner of the same queue (`clRetainCommandQueue`): what a host region keeps of
    /// each queue that reads or writes it, so it can wait for them without holding an event
    /// per transfer.
    pub(crate) fn retained(&self) -> Result<Queue, ClError> {
        // SAFETY: retaining a live queue adds one reference, released by the copy's Drop.
        unsafe { cl3::command_queue::retain_command_queue(self.raw) }
            .call("clRetainCommandQueue")?;
        Ok(Queue {
            raw: self.raw,
            _ctx: Arc::clone(&self._ctx),
            adopted: self.adopted,
        })
    }

    /// A reference to the same queue that only names it (`clRetainCommandQueue`): its drop
    /// releases the reference and never finishes the queue, as an adopted queue's does. What a
    /// host region keeps of a caller's queue beside the event it waits for.
    pub(crate) fn named(&self) -> Result<Queue, ClError> {
        let mut named = self.retained()?;
        named.adopted = true;
        Ok(named)
    }

    /// Blocks until every command on the queue is done.
    pub fn finish(&self) -> Result<(), ClError> {
        cl3::command_queue::finish(self.raw).call("clFinish")
    }

    /// Submits queued commands to the device.
    pub fn flush(&self) -> Result<(), ClError> {
        cl3::command_queue::flush(self.raw).call("clFlush")
    }

    /// Fills `len` bytes of `buf` at `offset` with `byte`.
    pub fn fill(
        &self,
        buf: &DeviceBuffer,
        offset: usize,
        len: usize,
        byte: u8,
    ) -> Result<Event, ClError> {
        // SAFETY: the pattern is a local read before return (the driver copies it); range
        // validity is checked by the driver, which returns CL_INVALID_VALUE otherwise.
        unsafe {
            cl3::command_queue::enqueue_fill_buffer(
                self.raw,
                buf.mem.raw,
                (&byte as *const u8).cast(),
                1,
                offset,
                len,
                0,
                ptr::null(),
            )
        }
        .call("clEnqueueFillBuffer")
        .map(|raw| self.event(raw))
    }

    /// Copies `len` host bytes at `src` into `dst` at `offset`, after `wait`.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unwritten until the returned event completes.
    pub(crate) unsafe fn write_raw(
        &self,
        dst: &DeviceBuffer,
        offset: usize,
        src: *const u8,
        len: usize,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        check_range("write", dst, offset, len)?;
        let list = WaitList::new(wait);
        // SAFETY: the caller keeps `src` alive until the event completes; the range is checked.
        unsafe {
            cl3::command_queue::enqueue_write_buffer(
                self.raw,
                dst.mem.raw,
                cl3::types::CL_NON_BLOCKING,
                offset,
                len,
                src.cast(),
                list.count(),
                list.as_ptr(),
            )
        }
        .call("clEnqueueWriteBuffer")
        .map(|raw| self.event(raw))
    }

    /// Copies `len` bytes of `src` at `offset` to host memory at `dst`, after `wait`.
    ///
    /// # Safety
    /// `dst..dst+len` must stay valid and not be accessed until the returned event completes.
    pub(crate) unsafe fn read_raw(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: *mut u8,
        len: usize,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        check_range("read", src, offset, len)?;
        let list = WaitList::new(wait);
        // SAFETY: the caller keeps `dst` alive and untouched until the event completes.
        unsafe {
            cl3::command_queue::enqueue_read_buffer(
                self.raw,
                src.mem.raw,
                cl3::types::CL_NON_BLOCKING,
                offset,
                len,
                dst.cast(),
                list.count(),
                list.as_ptr(),
            )
        }
        .call("clEnqueueReadBuffer")
        .map(|raw| self.event(raw))
    }
}

fn check_range(
    what: &'static str,
    buf: &DeviceBuffer,
    offset: usize,
    len: usize,
) -> Result<(), ClError> {
    if offset.checked_add(len).is_none_or(|end| end > buf.size()) {
        tracing::error!(
            "{what} of {len} bytes at {offset} outside a {}-byte buffer",
            buf.size()
        );
        return Err(ClError::new(
            if what == "write" {
                "clEnqueueWriteBuffer"
            } else {
                "clEnqueueReadBuffer"
            },
            cl3::error_codes::CL_INVALID_VALUE,
        ));
    }
    Ok(())
}

/// One `clGetCommandQueueInfo` value that is a handle or a bit field.
pub(in crate::backend::opencl) fn queue_info(
    raw: cl_command_queue,
    param: u32,
) -> Result<usize, ClError> {
    match cl3::command_queue::get_command_queue_info(raw, param).call("clGetCommandQueueInfo")? {
        cl3::info_type::InfoType::Ptr(p) => Ok(p as usize),
        cl3::info_type::InfoType::Ulong(v) => Ok(v as usize),
        _ => Err(ClError::new(
            "clGetCommandQueueInfo",
            cl3::error_codes::CL_INVALID_VALUE,
        )),
    }
}

/// The context of a caller's queue (`CL_QUEUE_CONTEXT`).
pub fn queue_context(raw: cl_command_queue) -> Result<cl_context, ClError> {
    if raw.is_null() {
        return Err(ClError::new(
            "clGetCommandQueueInfo",
            cl3::error_codes::CL_INVALID_COMMAND_QUEUE,
        ));
    }
    Ok(queue_info(raw, cl3::command_queue::CL_QUEUE_CONTEXT)? as cl_context)
}

/// A command's wait list as the driver takes it, on the stack for up to four events (a
/// ring's commands wait for one or two), so enqueueing a command allocates nothing.
pub(crate) struct WaitList {
    inline: [cl_event; 4],
    heap: Vec<cl_event>,
    len: usize,
}

impl WaitList {
    pub(crate) fn new(wait: &[&Event]) -> Self {
        let mut list = WaitList {
            inline: [ptr::null_mut(); 4],
            heap: Vec::new(),
            len: wait.len(),
        };
        if wait.len() <= list.inline.len() {
            for (slot, e) in list.inline.iter_mut().zip(wait) {
                *slot = e.0;
            }
        } else {
            list.heap = wait.iter().map(|e| e.0).collect();
        }
        list
    }

    /// The number of events, as the driver takes it.
    pub(crate) fn count(&self) -> u32 {
        self.len as u32
    }

    /// The events, or null when there are none (what OpenCL asks for an empty list).
    pub(crate) fn as_ptr(&self) -> *const cl_event {
        match self.len {
            0 => ptr::null(),
            n if n <= self.inline.len() => self.inline.as_ptr(),
            _ => self.heap.as_ptr(),
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Commands still queued on a queue of ours may use host memory their owners track by
        // event; finishing here keeps the release from racing them. A caller's queue is
        // never finished: its commands may wait on what the caller does after this drop (a
        // user event), and pinstream's commands on it keep what they use alive themselves.
        if !self.adopted {
            let _ = cl3::command_queue::finish(self.raw);
        }
        // SAFETY: we own this queue reference.
        if let Err(code) = unsafe { cl3::command_queue::release_command_queue(self.raw) } {
            tracing::warn!("{}", ClError::new("clReleaseCommandQueue", code));
        }
    }
}

impl Queue {
    /// A marker after every command on the queue and after `wait` (an event of any queue
    /// of the context, or a user event): later commands on this in-order queue wait for it.
    pub fn mark_after(&self, wait: &[&Event]) -> Result<Event, ClError> {
        let list = WaitList::new(wait);
        // SAFETY: a live queue; the wait list holds live events of its context.
        unsafe {
            cl3::command_queue::enqueue_marker_with_wait_list(self.raw, list.count(), list.as_ptr())
        }
        .call("clEnqueueMarkerWithWaitList")
        .map(|raw| self.event(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::WaitList;
    use crate::backend::opencl::Event;
    use std::mem::ManuallyDrop;

    #[test]
    fn wait_lists_hold_every_event_in_order_and_none_is_null() {
        // Stand-in handles, never passed to a driver, never released.
        let fake: Vec<ManuallyDrop<Event>> = (1..=6usize)
            .map(|i| ManuallyDrop::new(Event(i as cl3::types::cl_event, Default::default())))
            .collect();
        for n in 0..=6 {
            let refs: Vec<&Event> = fake[..n].iter().map(|e| &**e).collect();
            let list = WaitList::new(&refs);
            assert_eq!(list.count() as usize, n);
            if n == 0 {
                assert!(list.as_ptr().is_null());
                continue;
            }
            // SAFETY: the list holds `n` events (inline or on the heap), alive with `list`.
            let got = unsafe { std::slice::from_raw_parts(list.as_ptr(), n) };
            let want: Vec<_> = (1..=n).map(|i| i as cl3::types::cl_event).collect();
            assert_eq!(got, &want[..], "{n} events");
        }
    }
}
