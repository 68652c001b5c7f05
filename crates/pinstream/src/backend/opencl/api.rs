//! OpenCL as an [`Api`]: a [`Context`] is the device, a [`Queue`] the queue (in order, with
//! profiling), a [`DeviceBuffer`] the memory, an [`Event`] the point in a queue.

use super::context::{Context, DeviceBuffer, Event, Queue};
use super::error::{Call, ClError};
use super::program::Kernel;
use crate::backend::api::{
    self, Api, ArgInfo, HostSpan, KernelArg, LaunchSize, Operation, Profile, WorkGroupLimits,
};
use crate::backend::error::BackendError;

/// The OpenCL API.
#[derive(Debug, Clone, Copy)]
pub struct OpenCl;

impl Api for OpenCl {
    const NAME: &'static str = "OpenCL";
    type Device = Context;
    type Queue = Queue;
    type Buffer = DeviceBuffer;
    type Event = Event;
    type Kernel = Kernel;
    type Error = ClError;

    fn injected_fault(op: Operation) -> ClError {
        let call = match op {
            Operation::Allocate => "clCreateBuffer",
            Operation::Upload => "clEnqueueWriteBuffer",
            Operation::Launch => "clEnqueueNDRangeKernel",
            Operation::Download => "clEnqueueReadBuffer",
        };
        ClError::new(call, cl3::error_codes::CL_OUT_OF_RESOURCES)
    }
}

impl From<ClError> for BackendError {
    fn from(e: ClError) -> Self {
        BackendError {
            api: OpenCl::NAME,
            call: e.call,
            code: i64::from(e.code),
            message: format!("{} ({})", e.name(), e.code),
            kind: e.kind(),
        }
    }
}

impl From<super::context::Profile> for Profile {
    fn from(p: super::context::Profile) -> Self {
        Profile {
            queued: Some(p.queued),
            submit: Some(p.submit),
            start: p.start,
            end: p.end,
        }
    }
}

impl api::Device for Context {
    type A = OpenCl;

    fn describe(&self) -> String {
        format!("{} ({})", self.device().index, self.device().name)
    }

    fn max_alloc(&self) -> u64 {
        self.device().max_alloc
    }

    fn memory(&self) -> u64 {
        self.device().global_mem
    }

    fn is_cpu(&self) -> bool {
        self.device().device_type == "CPU"
    }

    fn queue(&self) -> Result<Queue, ClError> {
        Context::queue(self)
    }

    fn allocate(&self, bytes: usize) -> Result<DeviceBuffer, ClError> {
        let buf = self.device_buffer(bytes)?;
        self.queue()?.fill(&buf, 0, bytes, 0)?.wait()?;
        Ok(buf)
    }

    fn wait(&self, event: &Event) -> Result<(), ClError> {
        event.wait_streaming()
    }

    fn profile(&self, event: &Event, _origin: &Event) -> Result<Profile, ClError> {
        // Device clock times are absolute in OpenCL: no origin needed.
        event.profile().map(Profile::from)
    }
}

impl api::Queue for Queue {
    type A = OpenCl;

    unsafe fn upload(
        &self,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: HostSpan,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        // SAFETY: the caller keeps `src` alive and unwritten until the event completes.
        unsafe { self.write_raw(dst, dst_offset, src.ptr, src.len, wait) }
    }

    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &DeviceBuffer,
        src_offset: usize,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        // SAFETY: the caller keeps `dst` alive and untouched until the event completes.
        unsafe { self.read_raw(src, src_offset, dst.ptr, dst.len, wait) }
    }

    unsafe fn launch(
        &self,
        kernel: &mut Kernel,
        args: &[KernelArg<'_, OpenCl>],
        size: LaunchSize,
        wait: &[&Event],
    ) -> Result<Event, ClError> {
        for (index, arg) in (0u32..).zip(args) {
            match arg {
                KernelArg::Buffer(b) => kernel.set_buffer(index, b)?,
                KernelArg::Value(v) => kernel.set_bytes(index, v)?,
            }
        }
        // The kernel holds a reference to every buffer bound to it and the command takes its
        // own, so this launch is safe whatever the caller does with the buffers.
        Queue::launch(self, kernel, size.global, size.local, wait)
    }

    fn mark(&self) -> Result<Event, ClError> {
        // SAFETY: a live queue, an empty wait list; the driver returns a new event.
        unsafe { cl3::command_queue::enqueue_marker_with_wait_list(self.raw, 0, std::ptr::null()) }
            .call("clEnqueueMarkerWithWaitList")
            .map(Event)
    }

    fn flush(&self) -> Result<(), ClError> {
        Queue::flush(self)
    }

    fn finish(&self) -> Result<(), ClError> {
        Queue::finish(self)
    }
}

impl api::Kernel for Kernel {
    type A = OpenCl;

    fn name(&self) -> &str {
        Kernel::name(self)
    }

    fn params(&self) -> Result<Vec<ArgInfo>, ClError> {
        self.args()
    }

    fn work_group_limits(&self) -> Result<WorkGroupLimits, ClError> {
        Kernel::work_group_limits(self)
    }

    fn release_buffers(&mut self) {
        self.unbind_buffers();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_faults_read_as_the_driver_would_say_them() {
        let e: BackendError = OpenCl::injected_fault(Operation::Launch).into();
        assert_eq!(
            e.to_string(),
            "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES (-5)"
        );
        assert_eq!((e.api, e.code), ("OpenCL", -5));
    }
}
