//! Fault injection as a backend that wraps another, in wgpu-hal's shape: [`Faulty<A>`] is an
//! [`Api`] that passes every call to `A` and fails one command on purpose, as `A`'s driver
//! would, so that tests provoke failures in the middle of a stream on any device, through any
//! API, with the engine knowing nothing of it.
//!
//! `PINSTREAM_INJECT_FAULT=STAGE:N` names the command: the N-th (0-based) device allocation
//! (`alloc`), host-to-device copy (`upload`), kernel launch (`kernel`) or device-to-host copy
//! (`download`) that an opened device is given; `STAGE:N@D` limits it to the device of index
//! D (the API's own index, as `--device` names it). It fails with the API's
//! out-of-resources error ([`OutOfResources`]: `CL_OUT_OF_RESOURCES`; CUDA:
//! `CUDA_ERROR_OUT_OF_MEMORY`, or `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` for a launch).
//!
//! **What counts.** Every command of that kind the device is given through the wrapper, from
//! when it was opened ([`api::Adapter::open`]): the counter belongs to the opened device
//! (its queues share it), not to the process, so a stream on one device fails at the same
//! command every time, and on several devices each device counts its own (in a process
//! total they would race). A stream's commands are not only its blocks': before the first
//! block the engine uploads its residents and the bounds guard's canaries (one per guarded
//! buffer; the guard is on by default on CPU devices) and launches the kernel once to warm
//! it up, and it reads each guard back after its kernels (downloads, between the blocks'
//! once the slots are full). So on one device `kernel:N` is block N-1's launch, `upload:N`
//! block N's upload only with no residents and no guard, and the error names the block (or
//! the bounds check) the command was part of. Pinning ([`crate::host::HostApi::pin`]) is no
//! command of the device and counts nothing.
//!
//! The other stages of `PINSTREAM_INJECT_FAULT` are no `Api` calls and live in the layers
//! that own them: `chunk:K` in `opencl::host::region::progressive`, `pin:BYTES` in
//! `backend::opencl::pin_ceiling`, `mark:BATCHES` in `gather::unpack`, `uring:WAIT` in
//! `backend::os::uring` and `direct:TRANSFER` in `engine::io::direct`. The value is parsed
//! once per process, by one parser ([`crate::backend::check_injected_fault`]).
//!
//! **Cost when unset.** Each command checks one value read when the instance was made (the
//! device's trap, `None`), then calls `A`; a launch also re-tags its argument list. A front
//! can therefore run over `Faulty<A>` always, which is what the CLI does.

#[cfg(test)]
mod tests;
mod wrap;

use super::api::{self, Api, Unavailable};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use wrap::{FaultyDevice, FaultyKernel, FaultyProgram, FaultyQueue};

/// `A`, with the command `PINSTREAM_INJECT_FAULT` names failing on purpose.
#[derive(Debug, Clone, Copy)]
pub struct Faulty<A>(std::marker::PhantomData<A>);

/// A command of a device that a fault can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Allocating device memory.
    Allocate,
    /// A host-to-device copy.
    Upload,
    /// A kernel launch.
    Launch,
    /// A device-to-host copy.
    Download,
}

/// `PINSTREAM_INJECT_FAULT`'s name of each operation.
const STAGES: [(&str, Operation); 4] = [
    ("alloc", Operation::Allocate),
    ("upload", Operation::Upload),
    ("kernel", Operation::Launch),
    ("download", Operation::Download),
];

impl Operation {
    /// The operation `PINSTREAM_INJECT_FAULT`'s `stage` names, if it names one of a device's
    /// commands (which `@DEVICE` may follow).
    pub(crate) fn of_stage(stage: &str) -> Option<Operation> {
        STAGES.iter().find(|(s, _)| *s == stage).map(|&(_, op)| op)
    }

    /// Its name in `PINSTREAM_INJECT_FAULT`.
    fn stage(self) -> &'static str {
        STAGES
            .iter()
            .find(|(_, op)| *op == self)
            .map_or("", |(s, _)| s)
    }
}

/// An API's error as its driver gives it when a device runs out of resources during `op`:
/// what [`Faulty`] fails a command with. Implemented by each API's error type.
pub trait OutOfResources {
    /// The error of `op` when the device is out of resources.
    fn out_of_resources(op: Operation) -> Self;
}

/// Which command fails: the `index`-th (0-based) of kind `op` of each opened device, or of
/// those with the API's device index `device` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The kind of command.
    pub op: Operation,
    /// Its place among the device's commands of that kind, from 0.
    pub index: usize,
    /// The device ([`crate::backend::adapter::AdapterInfo::index`]) it is limited to;
    /// `None`: every device.
    pub device: Option<usize>,
}

impl Fault {
    /// The fault `PINSTREAM_INJECT_FAULT` names among a device's commands, read once per
    /// process: `None` when unset, malformed (reported by
    /// [`crate::backend::check_injected_fault`] where work begins), or naming another
    /// layer's stage.
    pub fn from_env() -> Option<Fault> {
        let (stage, index, device) = super::injected_fault_on()?;
        Operation::of_stage(stage).map(|op| Fault { op, index, device })
    }
}

/// One opened device's count of the commands its fault is among.
#[derive(Debug)]
struct Trap {
    fault: Fault,
    seen: AtomicUsize,
}

/// Counts a command of kind `op` against `trap` and fails it if it is the one named.
fn spring<E: OutOfResources>(trap: &Option<Arc<Trap>>, op: Operation) -> Result<(), E> {
    let Some(t) = trap.as_deref().filter(|t| t.fault.op == op) else {
        return Ok(());
    };
    let n = t.seen.fetch_add(1, Ordering::Relaxed);
    if n != t.fault.index {
        return Ok(());
    }
    tracing::warn!(
        "PINSTREAM_INJECT_FAULT: failing {}:{n} on purpose",
        op.stage()
    );
    Err(E::out_of_resources(op))
}

/// `A` loaded, with the fault its devices will fail at.
pub struct FaultyInstance<A: Api> {
    inner: A::Instance,
    fault: Option<Fault>,
}

impl<A: Api> FaultyInstance<A> {
    /// `inner`, its devices failing at `fault` (`None`: passing every call through).
    pub fn with_fault(inner: A::Instance, fault: Option<Fault>) -> Self {
        FaultyInstance { inner, fault }
    }
}

/// A device of `A`, found, not opened.
pub struct FaultyAdapter<A: Api> {
    inner: A::Adapter,
    fault: Option<Fault>,
}

impl<A: Api> Clone for FaultyAdapter<A> {
    fn clone(&self) -> Self {
        FaultyAdapter {
            inner: self.inner.clone(),
            fault: self.fault,
        }
    }
}

impl<A: Api> FaultyAdapter<A> {
    /// The wrapped adapter.
    pub fn inner(&self) -> &A::Adapter {
        &self.inner
    }
}

impl<A: Api> Api for Faulty<A>
where
    A::Error: OutOfResources,
{
    const NAME: &'static str = A::NAME;
    const ID: &'static str = A::ID;
    const KERNEL_FORM: &'static str = A::KERNEL_FORM;
    const HALVES_IN_WORDS: bool = A::HALVES_IN_WORDS;
    const LANGUAGE: crate::backend::api::KernelLanguage = A::LANGUAGE;
    type Instance = FaultyInstance<A>;
    type Adapter = FaultyAdapter<A>;
    type Device = FaultyDevice<A>;
    type Queue = FaultyQueue<A>;
    type Buffer = A::Buffer;
    type Event = A::Event;
    type Kernel = FaultyKernel<A>;
    type Program = FaultyProgram<A>;
    type Error = A::Error;
}

impl<A: Api> api::Instance for FaultyInstance<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    /// `A` loaded, failing at the fault `PINSTREAM_INJECT_FAULT` names ([`Fault::from_env`]).
    fn new() -> Result<Self, Unavailable> {
        Ok(Self::with_fault(A::Instance::new()?, Fault::from_env()))
    }

    fn adapters(&self) -> Result<Vec<FaultyAdapter<A>>, Unavailable> {
        let adapters = api::Instance::adapters(&self.inner)?;
        Ok(adapters
            .into_iter()
            .map(|inner| FaultyAdapter {
                inner,
                fault: self.fault,
            })
            .collect())
    }
}

impl<A: Api> api::Adapter for FaultyAdapter<A>
where
    A::Error: OutOfResources,
{
    type A = Faulty<A>;

    fn info(&self) -> super::adapter::AdapterInfo {
        self.inner.info()
    }

    /// A context on the device, with a count of its commands of its own.
    fn open(&self) -> Result<FaultyDevice<A>, A::Error> {
        let index = self.inner.info().index;
        let here = self.fault.filter(|f| f.device.is_none_or(|d| d == index));
        let trap = here.map(|fault| {
            Arc::new(Trap {
                fault,
                seen: AtomicUsize::new(0),
            })
        });
        Ok(FaultyDevice::new(self.inner.open()?, trap))
    }
}
