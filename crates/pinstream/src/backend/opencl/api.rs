//! OpenCL as an [`Api`]: a [`Context`] is the device, a [`Queue`] the queue (in order, with
//! profiling), a [`DeviceBuffer`] the memory, an [`Event`] the point in a queue.

use super::context::{Context, DeviceBuffer, Event, Queue};
use super::error::{Call, ClError};
use super::platform::{devices, DeviceInfo, DiscoveryError};
use super::program::{BuildError, Kernel, Program};
use crate::backend::adapter::{AdapterInfo, DeviceKind};
use crate::backend::api::{
    self, Api, ArgInfo, HostSpan, KernelArg, KernelError, LaunchSize, Profile, Unavailable,
    WorkGroupLimits,
};
use crate::backend::error::BackendError;
use crate::backend::fault::{Operation, OutOfResources};

/// The OpenCL API.
#[derive(Debug, Clone, Copy)]
pub struct OpenCl;

/// OpenCL loaded in this process: the loader, its platforms and their devices, as listed
/// when it was made.
#[derive(Debug, Clone)]
pub struct ClInstance {
    devices: Vec<DeviceInfo>,
}

impl Api for OpenCl {
    const NAME: &'static str = "OpenCL";
    const ID: &'static str = "opencl";
    const KERNEL_FORM: &'static str = "__kernel void NAME(...)";
    const LANGUAGE: crate::backend::api::KernelLanguage =
        crate::backend::api::KernelLanguage::OpenClC;
    type Instance = ClInstance;
    type Adapter = DeviceInfo;
    type Program = Program;
    type Device = Context;
    type Queue = Queue;
    type Buffer = DeviceBuffer;
    type Event = Event;
    type Kernel = Kernel;
    type Error = ClError;
}

impl OutOfResources for ClError {
    /// `CL_OUT_OF_RESOURCES` from the call that makes the command.
    fn out_of_resources(op: Operation) -> ClError {
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

impl From<DiscoveryError> for Unavailable {
    fn from(e: DiscoveryError) -> Self {
        Unavailable {
            api: OpenCl::NAME,
            reason: e.to_string(),
        }
    }
}

impl api::Instance for ClInstance {
    type A = OpenCl;

    fn new() -> Result<Self, Unavailable> {
        Ok(ClInstance {
            devices: devices()?,
        })
    }

    fn adapters(&self) -> Result<Vec<DeviceInfo>, Unavailable> {
        Ok(self.devices.clone())
    }
}

impl api::Adapter for DeviceInfo {
    type A = OpenCl;

    fn info(&self) -> AdapterInfo {
        AdapterInfo {
            api: OpenCl::NAME,
            index: self.index,
            name: self.name.clone(),
            driver: self.platform_name.clone(),
            pci_address: self.pci_address.clone(),
            memory: self.global_mem,
            max_alloc: self.max_alloc,
            kind: match self.device_type.as_str() {
                "GPU" => DeviceKind::Gpu,
                "CPU" => DeviceKind::Cpu,
                _ => DeviceKind::Other,
            },
            vendor: self.vendor_kind,
        }
    }

    fn open(&self) -> Result<Context, ClError> {
        Context::new(self)
    }
}

impl From<BuildError> for api::BuildError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Options { .. } => api::BuildError::Options(e.to_string()),
            BuildError::Compile { .. } | BuildError::EmptySource => {
                api::BuildError::Source(e.to_string())
            }
            BuildError::Cl(e) => api::BuildError::Backend(e.into()),
        }
    }
}

impl api::Program for Program {
    type A = OpenCl;

    fn kernel_names(&self) -> Vec<String> {
        Program::kernel_names(self)
    }

    fn kernel(&self, name: &str) -> Result<Kernel, KernelError> {
        Program::kernel(self, name).map_err(|e| {
            if e.code == cl3::error_codes::CL_INVALID_KERNEL_NAME
                || !self.kernel_names().iter().any(|k| k == name)
            {
                KernelError::NotDefined { name: name.into() }
            } else {
                KernelError::Backend(e.into())
            }
        })
    }
}

impl api::Device for Context {
    type A = OpenCl;

    fn info(&self) -> AdapterInfo {
        api::Adapter::info(self.device())
    }

    fn set_wait_mode(&self, mode: api::WaitMode) {
        Context::set_wait_mode(self, mode);
    }

    fn wait_mode(&self) -> Option<api::WaitMode> {
        Some(Context::wait_mode(self))
    }

    fn build(&self, source: &str, options: &str) -> Result<Program, api::BuildError> {
        self.build_program(source, options).map_err(Into::into)
    }

    fn queue(&self) -> Result<Queue, ClError> {
        Context::queue(self)
    }

    fn plain_queue(&self) -> Result<Option<Queue>, ClError> {
        Context::plain_queue(self).map(Some)
    }

    fn allocate(&self, bytes: usize) -> Result<DeviceBuffer, ClError> {
        let buf = self.device_buffer(bytes)?;
        self.queue()?.fill(&buf, 0, bytes, 0)?.wait()?;
        Ok(buf)
    }

    fn buffer_len(&self, buffer: &DeviceBuffer) -> usize {
        buffer.size()
    }

    fn wait(&self, event: &Event) -> Result<(), ClError> {
        event.wait_streaming()
    }

    fn wait_call(&self, event: &Event) -> Result<(), ClError> {
        event.wait()
    }

    fn profile(&self, event: &Event, _origin: &Event) -> Result<Profile, ClError> {
        // Device clock times are absolute in OpenCL: no origin needed.
        event.profile()
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
                KernelArg::Buffer(b) | KernelArg::Within(b, _) => kernel.set_buffer(index, b)?,
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
            .map(|raw| self.event(raw))
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
        let e: BackendError = ClError::out_of_resources(Operation::Launch).into();
        assert_eq!(
            e.to_string(),
            "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES (-5)"
        );
        assert_eq!((e.api, e.code), ("OpenCL", -5));
    }
}
