//! `Faulty<A>`'s device, queue, program and kernel: `A`'s, each passing every call through,
//! the device and its queues first counting the commands the fault is among.

use super::{spring, Fault, Faulty, Operation, OutOfResources, Trap};
use crate::backend::adapter::AdapterInfo;
use crate::backend::api::{
    self, Api, ArgInfo, BuildError, EventOf, HostSpan, KernelArg, KernelError, LaunchSize, Profile,
    WaitMode, WorkGroupLimits,
};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// A context on a device of `A`, with the count of its commands.
pub struct FaultyDevice<A: Api> {
    inner: A::Device,
    trap: Option<Arc<Trap>>,
}

impl<A: Api> FaultyDevice<A> {
    pub(super) fn new(inner: A::Device, trap: Option<Arc<Trap>>) -> Self {
        FaultyDevice { inner, trap }
    }

    /// `inner`, a device opened elsewhere (a context a front adopted from its caller), its
    /// commands counted from now and failing at `fault` (`None`: passing every call
    /// through). `fault.device` is not consulted: the caller chose this device.
    pub fn with_fault(inner: A::Device, fault: Option<Fault>) -> Self {
        let trap = fault.map(|fault| {
            Arc::new(Trap {
                fault,
                seen: AtomicUsize::new(0),
            })
        });
        FaultyDevice { inner, trap }
    }

    /// The wrapped device (commands given to it directly count nothing).
    pub fn inner(&self) -> &A::Device {
        &self.inner
    }
}

/// A queue of `A`, counting its commands with its device's.
pub struct FaultyQueue<A: Api> {
    inner: A::Queue,
    trap: Option<Arc<Trap>>,
}

impl<A: Api> FaultyQueue<A> {
    /// The wrapped queue (commands given to it directly count nothing).
    pub fn inner(&self) -> &A::Queue {
        &self.inner
    }
}

/// A program of `A`.
pub struct FaultyProgram<A: Api>(A::Program);

/// A kernel of `A`.
pub struct FaultyKernel<A: Api>(A::Kernel);

impl<A: Api> FaultyKernel<A> {
    /// `inner` (a kernel made outside the wrapper: one adopted from a caller) as a kernel of
    /// `Faulty<A>`.
    pub fn new(inner: A::Kernel) -> Self {
        FaultyKernel(inner)
    }

    /// The wrapped kernel.
    pub fn inner(&self) -> &A::Kernel {
        &self.0
    }
}

impl<A: Api> api::Device for FaultyDevice<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    fn info(&self) -> AdapterInfo {
        self.inner.info()
    }

    fn build(&self, source: &str, options: &str) -> Result<FaultyProgram<A>, BuildError> {
        self.inner.build(source, options).map(FaultyProgram)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn max_alloc(&self) -> u64 {
        self.inner.max_alloc()
    }

    fn memory(&self) -> u64 {
        self.inner.memory()
    }

    fn is_cpu(&self) -> bool {
        self.inner.is_cpu()
    }

    fn copy_way(&self) -> Option<String> {
        self.inner.copy_way()
    }

    fn set_wait_mode(&self, mode: WaitMode) {
        self.inner.set_wait_mode(mode)
    }

    fn wait_mode(&self) -> Option<WaitMode> {
        self.inner.wait_mode()
    }

    fn queue(&self) -> Result<FaultyQueue<A>, A::Error> {
        Ok(FaultyQueue {
            inner: self.inner.queue()?,
            trap: self.trap.clone(),
        })
    }

    fn plain_queue(&self) -> Result<Option<FaultyQueue<A>>, A::Error> {
        let trap = &self.trap;
        Ok(self.inner.plain_queue()?.map(|inner| FaultyQueue {
            inner,
            trap: trap.clone(),
        }))
    }

    fn allocate(&self, bytes: usize) -> Result<A::Buffer, A::Error> {
        spring(&self.trap, Operation::Allocate)?;
        self.inner.allocate(bytes)
    }

    fn buffer_len(&self, buffer: &A::Buffer) -> usize {
        self.inner.buffer_len(buffer)
    }

    fn wait(&self, event: &A::Event) -> Result<(), A::Error> {
        self.inner.wait(event)
    }

    fn wait_call(&self, event: &A::Event) -> Result<(), A::Error> {
        self.inner.wait_call(event)
    }

    fn profile(&self, event: &A::Event, origin: &A::Event) -> Result<Profile, A::Error> {
        self.inner.profile(event, origin)
    }
}

impl<A: Api> api::Queue for FaultyQueue<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    unsafe fn upload(
        &self,
        dst: &A::Buffer,
        dst_offset: usize,
        src: HostSpan,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, A::Error> {
        spring(&self.trap, Operation::Upload)?;
        // SAFETY: the caller's own arguments, which it keeps alive (and `src` unwritten)
        // until the event completes, as `A`'s upload asks.
        unsafe { self.inner.upload(dst, dst_offset, src, wait) }
    }

    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &A::Buffer,
        src_offset: usize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, A::Error> {
        spring(&self.trap, Operation::Download)?;
        // SAFETY: the caller's own arguments, which it keeps alive (and `dst` untouched)
        // until the event completes, as `A`'s download asks.
        unsafe { self.inner.download(dst, src, src_offset, wait) }
    }

    unsafe fn launch(
        &self,
        kernel: &mut FaultyKernel<A>,
        args: &[KernelArg<'_, Faulty<A>>],
        size: LaunchSize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, A::Error> {
        spring(&self.trap, Operation::Launch)?;
        let args: Vec<KernelArg<'_, A>> = args.iter().map(|&a| untag(a)).collect();
        // SAFETY: the caller's own kernel and buffers, which it keeps alive (and the host
        // memory the kernel reaches unreferenced) until the event completes, as `A` asks.
        unsafe { self.inner.launch(&mut kernel.0, &args, size, wait) }
    }

    fn mark(&self) -> Result<EventOf<A>, A::Error> {
        self.inner.mark()
    }

    fn flush(&self) -> Result<(), A::Error> {
        self.inner.flush()
    }

    fn finish(&self) -> Result<(), A::Error> {
        self.inner.finish()
    }
}

/// `arg` as `A`'s (its buffer is `A`'s own).
fn untag<'a, A: Api>(arg: KernelArg<'a, Faulty<A>>) -> KernelArg<'a, A>
where
    A::Error: OutOfResources,
{
    match arg {
        KernelArg::Buffer(b) => KernelArg::Buffer(b),
        KernelArg::Within(b, n) => KernelArg::Within(b, n),
        KernelArg::Value(v) => KernelArg::Value(v),
    }
}

impl<A: Api> api::Program for FaultyProgram<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    fn kernel_names(&self) -> Vec<String> {
        self.0.kernel_names()
    }

    fn kernel(&self, name: &str) -> Result<FaultyKernel<A>, KernelError> {
        self.0.kernel(name).map(FaultyKernel)
    }
}

impl<A: Api> api::Kernel for FaultyKernel<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    fn name(&self) -> &str {
        self.0.name()
    }

    fn params(&self) -> Result<Vec<ArgInfo>, A::Error> {
        self.0.params()
    }

    fn work_group_limits(&self) -> Result<WorkGroupLimits, A::Error> {
        self.0.work_group_limits()
    }

    fn release_buffers(&mut self) {
        self.0.release_buffers()
    }
}
