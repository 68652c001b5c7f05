//! The seam between the layers above and the compute APIs, in wgpu-hal's shape: one [`Api`]
//! with associated types for the instance (the loaded API, which lists its devices), the
//! adapter (one device, not yet opened), the device (a context on one device), the queue,
//! device memory, the event (an opaque point in a queue: an OpenCL event, a CUDA event pair,
//! later a Vulkan timeline value), the program and its kernels, and the error; and small
//! traits for their operations: find and open devices ([`Instance::adapters`],
//! [`Adapter::open`]), build ([`Device::build`], [`Program::kernel`]), allocate
//! ([`Device::allocate`]), upload and download ([`Queue::upload`], [`Queue::download`]), launch
//! ([`Queue::launch`]), wait ([`Device::wait`]) and profile ([`Device::profile`]).
//!
//! Pinned host memory is the memory layer's extension of this trait
//! (`crate::host::HostApi`); each API's own host memory lives in its backend (OpenCL's in
//! `opencl::host`), and what they share in [`super::pinning`].
//!
//! Static dispatch: the engine is generic over `A: Api`. The enqueueing operations are
//! `unsafe` (host memory and buffers in flight must outlive their commands); the safe layer
//! above them is [`super::lanes`], which the engine uses. OpenCL ([`super::opencl::OpenCl`])
//! and CUDA (`super::cuda::Cuda`, feature `cuda`) implement the traits.

use super::adapter::AdapterInfo;
use super::error::BackendError;
use serde::Serialize;

/// The language an API's kernels are written in ([`Api::LANGUAGE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelLanguage {
    /// OpenCL C (`__kernel void f(...)`).
    OpenClC,
    /// CUDA C++, compiled by NVRTC (`extern "C" __global__ void f(...)`).
    CudaC,
    /// WGSL, compiled to SPIR-V by naga (`@compute fn f(...)`).
    Wgsl,
    /// None that a program can write for: a test's API, whose kernels the test defines.
    Other,
}

/// One compute API.
pub trait Api: Sized + Send + Sync + 'static {
    /// Its name in messages: `OpenCL`, `CUDA`.
    const NAME: &'static str;
    /// Its name in flags and reports (`--api opencl`, `"api": "cuda"`): `opencl`, `cuda`.
    const ID: &'static str;
    /// How a kernel is declared in the API's language, for messages:
    /// `__kernel void NAME(...)`.
    const KERNEL_FORM: &'static str;
    /// True where the API's kernels read f16 data as packed 32-bit words (WGSL: no 16-bit
    /// storage without shaderFloat16), so a `uint*` parameter may take f16 input as raw bits.
    const HALVES_IN_WORDS: bool = false;
    /// The language [`Device::build`] takes: a program that carries kernels for several APIs
    /// picks its sources by it.
    const LANGUAGE: KernelLanguage;
    /// The API loaded in this process: lists its devices.
    type Instance: Instance<A = Self>;
    /// One device, before it is opened.
    type Adapter: Adapter<A = Self>;
    /// A context on one device: allocates memory, makes queues, waits for events.
    type Device: Device<A = Self>;
    /// An in-order queue of commands (OpenCL command queue, CUDA stream).
    type Queue: Queue<A = Self>;
    /// Device memory.
    type Buffer: Send + Sync;
    /// An opaque point in a queue: later commands wait for it, the host waits for it, and it
    /// gives the device times of the command it ends.
    type Event: Send + Sync;
    /// A compiled kernel.
    type Kernel: Kernel<A = Self>;
    /// A built program: its kernels by name.
    type Program: Program<A = Self>;
    /// The API's own error, with the detail of its calls.
    type Error: std::error::Error + Into<BackendError> + Send + Sync + 'static;
}

/// The device of `A`.
pub type DeviceOf<A> = <A as Api>::Device;
/// The adapter of `A`.
pub type AdapterOf<A> = <A as Api>::Adapter;
/// The kernel of `A`.
pub type KernelOf<A> = <A as Api>::Kernel;
/// The program of `A`.
pub type ProgramOf<A> = <A as Api>::Program;
/// The event of `A`.
pub type EventOf<A> = <A as Api>::Event;
/// The error of `A`.
pub type ErrorOf<A> = <A as Api>::Error;

/// The API loaded in this process.
pub trait Instance: Sized + Send + Sync {
    /// The API.
    type A: Api<Instance = Self>;
    /// Loads the API (its driver and loader are loaded at run time), or says why it is not
    /// usable here and what to install.
    fn new() -> Result<Self, Unavailable>;
    /// Every device of the API, in its order ([`AdapterInfo::index`]).
    fn adapters(&self) -> Result<Vec<AdapterOf<Self::A>>, Unavailable>;
}

/// One device of an API, found but not opened.
pub trait Adapter: Clone + Send + Sync {
    /// The API.
    type A: Api<Adapter = Self>;
    /// What the API says of it.
    fn info(&self) -> AdapterInfo;
    /// A context on it.
    fn open(&self) -> Result<DeviceOf<Self::A>, ErrorOf<Self::A>>;
}

/// Why an API cannot be used in this process, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{api} is not usable here: {reason}")]
pub struct Unavailable {
    /// The API.
    pub api: &'static str,
    /// What is missing and what to install or set.
    pub reason: String,
}

/// A built program.
pub trait Program: Send + Sync {
    /// The API.
    type A: Api<Program = Self>;
    /// The kernels it defines, by name.
    fn kernel_names(&self) -> Vec<String>;
    /// Its kernel `name`.
    fn kernel(&self, name: &str) -> Result<KernelOf<Self::A>, KernelError>;
}

/// Why a program did not build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The compiler refused the options, not the source.
    #[error("{0}")]
    Options(String),
    /// The compiler refused the source (an empty source included); the log names lines.
    #[error("{0}")]
    Source(String),
    /// Another failure.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Why a program gave no kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// It defines no kernel of that name.
    #[error("no kernel `{name}`")]
    NotDefined {
        /// The name asked for.
        name: String,
    },
    /// Its parameters cannot be read or passed (CUDA: a signature pinstream does not parse).
    #[error("{0}")]
    Signature(String),
    /// Another failure.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// A context on one device.
pub trait Device: Send + Sync {
    /// The API.
    type A: Api<Device = Self>;
    /// What the API says of the device.
    fn info(&self) -> AdapterInfo;
    /// Builds `source` in the API's kernel language with compiler `options`.
    fn build(&self, source: &str, options: &str) -> Result<ProgramOf<Self::A>, BuildError>;
    /// The device's name and index, for messages.
    fn describe(&self) -> String {
        let info = self.info();
        format!("{} ({})", info.index, info.name)
    }
    /// The largest single allocation the device allows, bytes.
    fn max_alloc(&self) -> u64 {
        self.info().max_alloc
    }
    /// The device's global memory, bytes.
    fn memory(&self) -> u64 {
        self.info().memory
    }
    /// True for a CPU device, whose buffers are the process's own heap memory (a kernel's
    /// write past a buffer corrupts the process: the engine's bounds guard is on by default
    /// there).
    fn is_cpu(&self) -> bool {
        self.info().kind == super::adapter::DeviceKind::Cpu
    }
    /// How the device copies between host memory and its buffers, in words, where the API
    /// offers a choice (Vulkan: `VkCopy`); `None` elsewhere.
    fn copy_way(&self) -> Option<String> {
        None
    }
    /// How the host waits for commands enqueued on this device from now on (OpenCL: see
    /// `opencl::wait`). APIs with one way of waiting ignore it.
    fn set_wait_mode(&self, _mode: WaitMode) {}
    /// How the host waits for commands enqueued on this device now, where the API has ways to
    /// choose from ([`Self::set_wait_mode`]); `None` where it has one way of waiting.
    fn wait_mode(&self) -> Option<WaitMode> {
        None
    }
    /// A new in-order queue with per-command device times. Dropping a queue waits for its
    /// commands first.
    fn queue(&self) -> Result<<Self::A as Api>::Queue, ErrorOf<Self::A>>;
    /// A new in-order queue without per-command device times, where the API makes such
    /// queues (OpenCL: without `CL_QUEUE_PROFILING_ENABLE`, what a program that never reads
    /// command times uses, and which the NVIDIA driver waits for a few µs sooner); `None`
    /// (the default) where every queue is [`Self::queue`]'s kind.
    fn plain_queue(&self) -> Result<Option<<Self::A as Api>::Queue>, ErrorOf<Self::A>> {
        Ok(None)
    }
    /// `bytes` of device memory, committed now (written once, so that drivers that commit
    /// lazily do it inside the caller's VRAM reading).
    fn allocate(&self, bytes: usize) -> Result<<Self::A as Api>::Buffer, ErrorOf<Self::A>>;
    /// The bytes `buffer` holds (as [`Self::allocate`] made it, or as a buffer over host
    /// memory covers it).
    fn buffer_len(&self, buffer: &<Self::A as Api>::Buffer) -> usize;
    /// Blocks until `event`'s command completed; its failure if it failed. This is the
    /// engine's ring's wait, which may trade a little latency for a free core (OpenCL's
    /// `auto` sleeps between looks after a short spin).
    fn wait(&self, event: &EventOf<Self::A>) -> Result<(), ErrorOf<Self::A>>;
    /// Blocks until `event`'s command completed, as a program waits for one call it made
    /// (a batch copy's event): at the latency the context's wait mode gives a caller's own
    /// wait (OpenCL's `auto`: the driver's). The same as [`Self::wait`] where the API has one
    /// way of waiting.
    fn wait_call(&self, event: &EventOf<Self::A>) -> Result<(), ErrorOf<Self::A>> {
        self.wait(event)
    }
    /// The device times of `event`'s completed command. `origin` is an earlier completed
    /// event of the same run: APIs without an absolute device clock count from it.
    fn profile(
        &self,
        event: &EventOf<Self::A>,
        origin: &EventOf<Self::A>,
    ) -> Result<Profile, ErrorOf<Self::A>>;
}

/// An in-order queue: each command starts after the previous one ends.
pub trait Queue: Send + Sync {
    /// The API.
    type A: Api<Queue = Self>;

    /// Copies host bytes `src` into `dst` at `dst_offset` after `wait`.
    ///
    /// # Safety
    /// `src` must stay alive and unwritten until the returned event completed (or the queue
    /// was finished or dropped), and so must `dst`.
    unsafe fn upload(
        &self,
        dst: &<Self::A as Api>::Buffer,
        dst_offset: usize,
        src: HostSpan,
        wait: &[&EventOf<Self::A>],
    ) -> Result<EventOf<Self::A>, ErrorOf<Self::A>>;

    /// Copies `dst.len()` bytes of `src` at `src_offset` into host bytes `dst` after `wait`.
    ///
    /// # Safety
    /// `dst` must stay alive and untouched (no reads, no writes) until the returned event
    /// completed (or the queue was finished or dropped), and `src` alive.
    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &<Self::A as Api>::Buffer,
        src_offset: usize,
        wait: &[&EventOf<Self::A>],
    ) -> Result<EventOf<Self::A>, ErrorOf<Self::A>>;

    /// Launches `kernel` with `args` (one per parameter, in order; the backend checks their
    /// number and sizes against the kernel's parameters) over `size`, after `wait`.
    ///
    /// # Safety
    /// The buffers in `args` and the kernel must stay alive until the returned event
    /// completed (or the queue was finished or dropped), and no host memory the kernel can
    /// reach may be used through a Rust reference meanwhile.
    unsafe fn launch(
        &self,
        kernel: &mut <Self::A as Api>::Kernel,
        args: &[KernelArg<'_, Self::A>],
        size: LaunchSize,
        wait: &[&EventOf<Self::A>],
    ) -> Result<EventOf<Self::A>, ErrorOf<Self::A>>;

    /// An event at the current end of the queue: it completes when every command enqueued
    /// so far did (the origin of a run's profile).
    fn mark(&self) -> Result<EventOf<Self::A>, ErrorOf<Self::A>>;
    /// Submits what was enqueued.
    fn flush(&self) -> Result<(), ErrorOf<Self::A>>;
    /// Blocks until every command enqueued so far completed.
    fn finish(&self) -> Result<(), ErrorOf<Self::A>>;
}

/// A compiled kernel.
pub trait Kernel: Send {
    /// The API.
    type A: Api<Kernel = Self>;
    /// Its name in the source.
    fn name(&self) -> &str;
    /// Its parameters in order, as the compiler (OpenCL) or the source (CUDA) describes them.
    fn params(&self) -> Result<Vec<ArgInfo>, ErrorOf<Self::A>>;
    /// The work-group (CUDA: thread-block) sizes a one-dimensional launch of it may use on
    /// its device.
    fn work_group_limits(&self) -> Result<WorkGroupLimits, ErrorOf<Self::A>>;
    /// Lets go of any buffer the kernel keeps bound after a run (OpenCL kernels hold a
    /// reference to their arguments), so a finished run's device memory is freed.
    fn release_buffers(&mut self) {}
}

/// One kernel argument.
pub enum KernelArg<'a, A: Api> {
    /// Device memory, passed as a pointer.
    Buffer(&'a A::Buffer),
    /// The first `.1` bytes of device memory, the rest being the bounds guard's zone
    /// (`engine::guard`), which the kernel is not meant to use. APIs that pass a pointer pass
    /// the buffer's. Vulkan binds those bytes alone to a kernel that reads the buffer's length
    /// (`arrayLength`), so that it reads the data's length, and the whole buffer to one that
    /// does not, so that a write past the end lands in the zone even on drivers that drop
    /// writes past a binding (lavapipe).
    Within(&'a A::Buffer, usize),
    /// A plain value, its bytes in the parameter's own width.
    Value(&'a [u8]),
}

impl<A: Api> Clone for KernelArg<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: Api> Copy for KernelArg<'_, A> {}

/// How many work items a launch runs, as OpenCL counts them: `global` items in groups of
/// `local` (the driver's choice when `None`; CUDA then takes 256). `global` is a multiple
/// of `local` where `local` is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchSize {
    /// Work items in all.
    pub global: usize,
    /// Work items per group.
    pub local: Option<usize>,
}

/// The work-group sizes a one-dimensional launch of a kernel may use on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkGroupLimits {
    /// The most this kernel allows on this device (`CL_KERNEL_WORK_GROUP_SIZE`,
    /// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`).
    pub kernel: usize,
    /// The device's limit in the first dimension (`CL_DEVICE_MAX_WORK_ITEM_SIZES[0]`,
    /// `CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X`).
    pub device_dim0: usize,
    /// `reqd_work_group_size` declared in the source (first dimension), if any.
    pub required: Option<usize>,
    /// The API's names of `kernel` and `device_dim0`, for messages.
    pub names: [&'static str; 2],
}

impl WorkGroupLimits {
    /// OpenCL's names of the two limits.
    pub const OPENCL_NAMES: [&'static str; 2] = [
        "CL_KERNEL_WORK_GROUP_SIZE",
        "CL_DEVICE_MAX_WORK_ITEM_SIZES[0]",
    ];
    /// CUDA's names of the two limits.
    pub const CUDA_NAMES: [&'static str; 2] = [
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
        "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X",
    ];

    /// The largest work-group size allowed.
    pub fn max(&self) -> usize {
        self.kernel.min(self.device_dim0).max(1)
    }
}

/// A way of waiting for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// The caller's own waits the driver's way; the engine's ring spins briefly, then
    /// sleeps between looks (see the module documentation).
    #[default]
    Auto,
    /// `clWaitForEvents`: the driver decides (it may spin a core).
    Driver,
    /// Flush the command's queue, then look at the event's status every `opencl::wait::POLL_SLEEP`,
    /// sleeping between looks.
    Sleep,
}

impl std::str::FromStr for WaitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(WaitMode::Auto),
            "driver" => Ok(WaitMode::Driver),
            "sleep" => Ok(WaitMode::Sleep),
            _ => Err(format!(
                "`{s}`: the ways of waiting are auto, driver and sleep"
            )),
        }
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitMode::Auto => "auto",
            WaitMode::Driver => "driver",
            WaitMode::Sleep => "sleep",
        })
    }
}

/// Device times of one command, in nanoseconds of the device's clock (CUDA: since the run's
/// origin event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// When the host enqueued it, where the API says (`CL_PROFILING_COMMAND_QUEUED`).
    pub queued: Option<u64>,
    /// When it was submitted to the device, where the API says.
    pub submit: Option<u64>,
    /// When it started on the device.
    pub start: u64,
    /// When it ended.
    pub end: u64,
}

impl Profile {
    /// Busy time of the command in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

/// Where a kernel parameter lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AddressSpace {
    /// Global memory pointer (`__global`; every CUDA pointer parameter).
    Global,
    /// `__constant` pointer.
    Constant,
    /// `__local` pointer.
    Local,
    /// A value.
    Private,
}

/// A kernel parameter.
#[derive(Debug, Clone, Serialize)]
pub struct ArgInfo {
    /// Parameter name in the source.
    pub name: String,
    /// Type name in OpenCL C's spelling, e.g. `float*`, `ulong`, `half*` (CUDA's
    /// `unsigned long long` is `ulong`).
    pub type_name: String,
    /// Address space.
    pub space: AddressSpace,
}

impl ArgInfo {
    /// True for buffer parameters (`__global` or `__constant` pointers).
    pub fn is_buffer(&self) -> bool {
        matches!(self.space, AddressSpace::Global | AddressSpace::Constant)
    }
}

/// Host bytes as a raw pointer and a length, for copies: making one creates no Rust
/// reference, so copies in flight never overlap a live `&[u8]`/`&mut [u8]` of theirs. Only
/// this crate makes them, from memory it knows to be live.
#[derive(Debug, Clone, Copy)]
pub struct HostSpan {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

impl HostSpan {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
