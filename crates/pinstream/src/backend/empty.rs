//! An API with no driver, as wgpu-hal's `empty` backend, for tests of the layers above: a
//! device is host memory, every command runs on the calling thread when it is enqueued, and
//! kernels are Rust functions the test registers ([`EmptyInstance::with_kernel`]). Streams,
//! pins and fronts written over [`Api`] run on it unchanged, on any machine, with no OpenCL or
//! CUDA installed, and a test can check every byte they moved.

use super::adapter::{AdapterInfo, DeviceKind, Vendor};
use super::api::{
    self, AddressSpace, Api, ArgInfo, BuildError, HostSpan, KernelArg, KernelError, LaunchSize,
    Profile, Unavailable, WorkGroupLimits,
};
use super::error::{BackendError, ErrorKind};
use super::fault::{Operation, OutOfResources};
use super::lanes::{HostMemory, OutOfRange};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// The API with no driver.
#[derive(Debug, Clone, Copy)]
pub struct Empty;

/// What a kernel of the empty API does: given its buffers (in parameter order, locked) and
/// its values (their bytes, in parameter order), for `global` work items.
pub type KernelFn = dyn Fn(&mut [&mut Vec<u8>], &[&[u8]], usize) + Send + Sync;

/// A kernel a test defines: its parameters and what it does.
#[derive(Clone)]
struct Definition {
    params: Vec<ArgInfo>,
    run: Arc<KernelFn>,
}

/// The empty API "loaded": its devices and the kernels its programs may define.
#[derive(Clone, Default)]
pub struct EmptyInstance {
    devices: usize,
    memory: u64,
    kernels: BTreeMap<String, Definition>,
}

impl EmptyInstance {
    /// `devices` devices of `memory` bytes each, with no kernel yet.
    pub fn new_with(devices: usize, memory: u64) -> Self {
        EmptyInstance {
            devices,
            memory,
            kernels: BTreeMap::new(),
        }
    }

    /// Defines kernel `name`: `params` as `(type, name)` pairs in OpenCL C's spelling (a type
    /// ending in `*` is a `__global` buffer), run by `run`.
    pub fn with_kernel(
        mut self,
        name: &str,
        params: &[(&str, &str)],
        run: impl Fn(&mut [&mut Vec<u8>], &[&[u8]], usize) + Send + Sync + 'static,
    ) -> Self {
        let params = params
            .iter()
            .map(|(ty, n)| ArgInfo {
                name: n.to_string(),
                type_name: ty.to_string(),
                space: if ty.ends_with('*') {
                    AddressSpace::Global
                } else {
                    AddressSpace::Private
                },
            })
            .collect();
        let run = Arc::new(run);
        self.kernels.insert(name.into(), Definition { params, run });
        self
    }
}

/// A device of the empty API, not opened.
#[derive(Clone)]
pub struct EmptyAdapter {
    info: AdapterInfo,
    kernels: BTreeMap<String, Definition>,
}

/// An opened device: buffers are host memory.
pub struct EmptyDevice {
    adapter: EmptyAdapter,
}

/// A queue: every command runs when enqueued, in order.
pub struct EmptyQueue {
    _device: (),
}

/// Device memory: host bytes behind a lock.
pub struct EmptyBuffer(Mutex<Vec<u8>>);

/// A point in a queue: the (host) times its command ran.
#[derive(Debug, Clone, Copy)]
pub struct EmptyEvent {
    start: u64,
    end: u64,
}

/// A program: the defined kernels its source names.
pub struct EmptyProgram {
    kernels: BTreeMap<String, Definition>,
}

/// A kernel.
pub struct EmptyKernel {
    name: String,
    def: Definition,
}

/// The empty API's error: a misuse a driver would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {what}")]
pub struct EmptyError {
    /// The operation.
    pub call: &'static str,
    /// What was wrong.
    pub what: String,
}

impl From<EmptyError> for BackendError {
    fn from(e: EmptyError) -> Self {
        BackendError {
            api: Empty::NAME,
            // As a driver would class them: an allocation past the device, or an injected
            // fault (which stands for running out of resources), is out of memory.
            kind: match e.call {
                "allocate" | "injected" => ErrorKind::OutOfMemory,
                _ => ErrorKind::Other,
            },
            call: e.call,
            code: 0,
            message: e.what,
        }
    }
}

fn refuse<T>(call: &'static str, what: impl ToString) -> Result<T, EmptyError> {
    Err(EmptyError {
        call,
        what: what.to_string(),
    })
}

impl Empty {
    /// The refusal of a registration of the caller's memory: the empty API's memory is a heap
    /// vector of its own.
    pub fn no_registration() -> EmptyError {
        EmptyError {
            call: "register",
            what: "the empty API's host memory is a heap vector of its own: it registers no caller memory".into(),
        }
    }
}

/// Nanoseconds since the first command of the process.
fn now_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Runs `f` as one command: its event holds the times it ran.
fn command(f: impl FnOnce() -> Result<(), EmptyError>) -> Result<EmptyEvent, EmptyError> {
    let start = now_ns();
    f()?;
    Ok(EmptyEvent {
        start,
        end: now_ns().max(start + 1),
    })
}

fn lock(b: &EmptyBuffer) -> MutexGuard<'_, Vec<u8>> {
    crate::sync::lock(&b.0)
}

fn within(call: &'static str, range: Range<usize>, len: usize) -> Result<Range<usize>, EmptyError> {
    if range.end <= len {
        Ok(range)
    } else {
        refuse(call, format!("bytes {range:?} lie past a buffer of {len}"))
    }
}

impl Api for Empty {
    const NAME: &'static str = "empty";
    const ID: &'static str = "empty";
    const KERNEL_FORM: &'static str = "NAME (a kernel the test defined)";
    const LANGUAGE: crate::backend::api::KernelLanguage =
        crate::backend::api::KernelLanguage::Other;
    type Instance = EmptyInstance;
    type Adapter = EmptyAdapter;
    type Device = EmptyDevice;
    type Queue = EmptyQueue;
    type Buffer = EmptyBuffer;
    type Event = EmptyEvent;
    type Kernel = EmptyKernel;
    type Program = EmptyProgram;
    type Error = EmptyError;
}

impl OutOfResources for EmptyError {
    /// An `injected` error, which reads as out of memory.
    fn out_of_resources(op: Operation) -> EmptyError {
        EmptyError {
            call: "injected",
            what: format!("{op:?} failed on purpose"),
        }
    }
}

impl api::Instance for EmptyInstance {
    type A = Empty;

    /// One device of 1 GiB.
    fn new() -> Result<Self, Unavailable> {
        Ok(EmptyInstance::new_with(1, 1 << 30))
    }

    fn adapters(&self) -> Result<Vec<EmptyAdapter>, Unavailable> {
        Ok((0..self.devices)
            .map(|index| EmptyAdapter {
                info: AdapterInfo {
                    api: Empty::NAME,
                    index,
                    name: format!("empty device {index}"),
                    driver: "none".into(),
                    pci_address: None,
                    memory: self.memory,
                    max_alloc: self.memory,
                    kind: DeviceKind::Other,
                    vendor: Vendor::Other,
                },
                kernels: self.kernels.clone(),
            })
            .collect())
    }
}

impl api::Adapter for EmptyAdapter {
    type A = Empty;

    fn info(&self) -> AdapterInfo {
        self.info.clone()
    }

    fn open(&self) -> Result<EmptyDevice, EmptyError> {
        Ok(EmptyDevice {
            adapter: self.clone(),
        })
    }
}

impl api::Device for EmptyDevice {
    type A = Empty;

    fn info(&self) -> AdapterInfo {
        self.adapter.info.clone()
    }

    /// The source names the kernels the program defines, separated by white space.
    fn build(&self, source: &str, _options: &str) -> Result<EmptyProgram, BuildError> {
        let mut kernels = BTreeMap::new();
        for name in source.split_whitespace() {
            let Some(def) = self.adapter.kernels.get(name) else {
                return Err(BuildError::Source(format!(
                    "no kernel `{name}` is defined for the empty API"
                )));
            };
            kernels.insert(name.to_string(), def.clone());
        }
        if kernels.is_empty() {
            return Err(BuildError::Source("the source names no kernel".into()));
        }
        Ok(EmptyProgram { kernels })
    }

    fn queue(&self) -> Result<EmptyQueue, EmptyError> {
        Ok(EmptyQueue { _device: () })
    }

    fn allocate(&self, bytes: usize) -> Result<EmptyBuffer, EmptyError> {
        if bytes as u64 > self.adapter.info.max_alloc {
            return refuse(
                "allocate",
                format!("{bytes} bytes exceed the device's largest allocation"),
            );
        }
        Ok(EmptyBuffer(Mutex::new(vec![0; bytes])))
    }

    fn buffer_len(&self, buffer: &EmptyBuffer) -> usize {
        lock(buffer).len()
    }

    fn wait(&self, _: &EmptyEvent) -> Result<(), EmptyError> {
        Ok(())
    }

    fn profile(&self, event: &EmptyEvent, _: &EmptyEvent) -> Result<Profile, EmptyError> {
        Ok(Profile {
            queued: None,
            submit: None,
            start: event.start,
            end: event.end,
        })
    }
}

impl api::Queue for EmptyQueue {
    type A = Empty;

    unsafe fn upload(
        &self,
        dst: &EmptyBuffer,
        dst_offset: usize,
        src: HostSpan,
        _: &[&EmptyEvent],
    ) -> Result<EmptyEvent, EmptyError> {
        command(|| {
            let mut d = lock(dst);
            let r = within("upload", dst_offset..dst_offset + src.len, d.len())?;
            // SAFETY: the caller keeps `src` alive and unwritten until the event completes,
            // which it does before this call returns; `d` is a distinct Rust allocation.
            let s = unsafe { std::slice::from_raw_parts(src.ptr, src.len) };
            d[r].copy_from_slice(s);
            Ok(())
        })
    }

    unsafe fn download(
        &self,
        dst: HostSpan,
        src: &EmptyBuffer,
        src_offset: usize,
        _: &[&EmptyEvent],
    ) -> Result<EmptyEvent, EmptyError> {
        command(|| {
            let s = lock(src);
            let r = within("download", src_offset..src_offset + dst.len, s.len())?;
            // SAFETY: the caller keeps `dst` alive and untouched until the event completes,
            // which it does before this call returns; `s` is a distinct Rust allocation.
            let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr, dst.len) };
            d.copy_from_slice(&s[r]);
            Ok(())
        })
    }

    unsafe fn launch(
        &self,
        kernel: &mut EmptyKernel,
        args: &[KernelArg<'_, Empty>],
        size: LaunchSize,
        _: &[&EmptyEvent],
    ) -> Result<EmptyEvent, EmptyError> {
        if args.len() != kernel.def.params.len() {
            return refuse(
                "launch",
                format!(
                    "{} takes {} arguments, given {}",
                    kernel.name,
                    kernel.def.params.len(),
                    args.len()
                ),
            );
        }
        command(|| {
            let mut buffers = Vec::new();
            let mut values = Vec::new();
            for a in args {
                match a {
                    KernelArg::Buffer(b) | KernelArg::Within(b, _) => buffers.push(b),
                    KernelArg::Value(v) => values.push(*v),
                }
            }
            // One buffer bound twice would lock twice: a driver would alias it, this API
            // refuses it.
            for (i, b) in buffers.iter().enumerate() {
                if buffers[..i].iter().any(|o| std::ptr::eq(*o, *b)) {
                    return refuse("launch", "one buffer bound to two parameters");
                }
            }
            let mut guards: Vec<_> = buffers.iter().map(|b| lock(b)).collect();
            let mut refs: Vec<&mut Vec<u8>> = guards.iter_mut().map(|g| &mut **g).collect();
            (kernel.def.run)(&mut refs, &values, size.global);
            Ok(())
        })
    }

    fn mark(&self) -> Result<EmptyEvent, EmptyError> {
        command(|| Ok(()))
    }

    fn flush(&self) -> Result<(), EmptyError> {
        Ok(())
    }

    fn finish(&self) -> Result<(), EmptyError> {
        Ok(())
    }
}

impl api::Program for EmptyProgram {
    type A = Empty;

    fn kernel_names(&self) -> Vec<String> {
        self.kernels.keys().cloned().collect()
    }

    fn kernel(&self, name: &str) -> Result<EmptyKernel, KernelError> {
        let def = self
            .kernels
            .get(name)
            .ok_or_else(|| KernelError::NotDefined { name: name.into() })?;
        Ok(EmptyKernel {
            name: name.into(),
            def: def.clone(),
        })
    }
}

impl api::Kernel for EmptyKernel {
    type A = Empty;

    fn name(&self) -> &str {
        &self.name
    }

    fn params(&self) -> Result<Vec<ArgInfo>, EmptyError> {
        Ok(self.def.params.clone())
    }

    fn work_group_limits(&self) -> Result<WorkGroupLimits, EmptyError> {
        Ok(WorkGroupLimits {
            kernel: 1024,
            device_dim0: 1024,
            required: None,
            names: [
                "the empty API's kernel limit",
                "the empty API's device limit",
            ],
        })
    }
}

/// Host memory for the empty API: a plain vector (nothing to pin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeapMemory(pub Vec<u8>);

impl HostMemory for HeapMemory {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        let len = self.0.len();
        self.0
            .get(range.clone())
            .map(|s| vec![s])
            .ok_or(OutOfRange { range, len })
    }

    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        let len = self.0.len();
        self.0
            .get_mut(range.clone())
            .map(|s| vec![s])
            .ok_or(OutOfRange { range, len })
    }
}
