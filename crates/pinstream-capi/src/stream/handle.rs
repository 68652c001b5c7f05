//! A stream behind its C handle: the device it runs on (the caller's adopted OpenCL context,
//! or a Vulkan device of the stream's own), the job being described, and one worker thread
//! that runs the stream's runs in the order they were issued, as a CUDA stream runs its work.
//! Handles are numbers looked up in a table, never dereferenced, so a destroyed or made-up
//! handle is refused with a code. Everything past the device and the kernel is written once
//! over the engine's `Api` ([`run_on`]).

use super::host::{borrow, Borrowed, Span};
pub(crate) use super::on::On;
use super::report::{psStreamReport, stream_failure};
use crate::error::{Failure, PS_ERROR_CANCELLED, PS_ERROR_INTERNAL, PS_ERROR_INVALID_VALUE};
use pinstream::backend::api::{Api, DeviceOf};
use pinstream::backend::fault::{Fault, FaultyDevice, FaultyKernel, OutOfResources};
use pinstream::backend::opencl::{Context, Event, OpenCl};
#[cfg(feature = "vulkan")]
use pinstream::backend::vulkan::Vulkan;
use pinstream::engine::job::{aliased, JobRange};
use pinstream::engine::{run, DType, HostMemory, Job, StreamOptions, StreamReport};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{JoinHandle, ThreadId};

/// The kernel a stream runs: pinstream's own object of the caller's function, of the
/// stream's API.
#[derive(Clone)]
pub(crate) enum StreamKernel {
    /// `psStreamSetKernel`'s.
    OpenCl(Arc<Mutex<FaultyKernel<OpenCl>>>),
    /// `psVkStreamSetKernel`'s.
    #[cfg(feature = "vulkan")]
    Vulkan(Arc<Mutex<FaultyKernel<Vulkan>>>),
}

/// The job a stream's calls describe, copied into each run when it is issued.
#[derive(Clone)]
pub(crate) struct JobSpec {
    pub kernel: Option<StreamKernel>,
    pub in_place: Option<Span>,
    pub inputs: Vec<Span>,
    pub output: Option<Span>,
    pub residents: Vec<Span>,
    pub args: Vec<(String, String)>,
    pub dtype: DType,
    pub out_dtype: DType,
    pub in_per_out: usize,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            kernel: None,
            in_place: None,
            inputs: Vec::new(),
            output: None,
            residents: Vec::new(),
            args: Vec::new(),
            dtype: DType::F32,
            out_dtype: DType::F32,
            in_per_out: 1,
        }
    }
}

/// One run's memory, borrowed from the registry when it was issued.
struct Lent {
    in_place: Option<Borrowed>,
    inputs: Vec<Borrowed>,
    output: Option<Borrowed>,
    residents: Vec<Borrowed>,
}

/// A run issued to the worker.
struct Work {
    kernel: StreamKernel,
    lent: Lent,
    args: Vec<(String, String)>,
    opts: StreamOptions,
    fault: Option<Fault>,
    done: Done,
}

/// Who hears of a run's end: the caller blocked in `psStreamRun`, a user event
/// (`psStreamRunAsync`), or only `psStreamSynchronize` (`psVkStreamRunAsync`).
enum Done {
    Sync(Sender<Result<StreamReport, Failure>>),
    Async(Event),
    #[cfg(feature = "vulkan")]
    Quiet,
}

/// What the caller's thread and the worker share.
#[derive(Default)]
struct State {
    /// Runs issued and not ended.
    pending: usize,
    /// The last run's report that ended well.
    report: Option<psStreamReport>,
    /// The first failure of an asynchronous run not yet returned by `psStreamSynchronize`.
    error: Option<Failure>,
    /// The stop flags of the runs issued and not ended (`psStreamCancel` sets them all).
    stops: Vec<Arc<AtomicUsize>>,
    /// The lists of blocks' imports into the stream's own device that hold one of the
    /// stream's: emptied of them when the stream is destroyed.
    #[cfg(feature = "vulkan")]
    guests: Vec<std::sync::Weak<Mutex<Vec<super::host::Guest>>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ended: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A stream: its device, budget, block size, job and worker.
pub(crate) struct Stream {
    pub on: On,
    pub budget: u64,
    pub block: usize,
    pub job: Mutex<JobSpec>,
    /// The fault its runs inject (`PINSTREAM_INJECT_FAULT`, or the test hook).
    pub fault: Mutex<Option<Fault>>,
    tx: Mutex<Option<Sender<Box<Work>>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// The worker's id: the calls that wait for the worker refuse to run on it.
    worker_id: ThreadId,
    shared: Arc<Shared>,
}

static STREAMS: Mutex<Option<HashMap<usize, Arc<Stream>>>> = Mutex::new(None);
/// The next handle's number: handles are never reused within a process.
static NEXT: AtomicUsize = AtomicUsize::new(FIRST);
/// The first handle's number.
const FIRST: usize = 0x5057_0001;

fn table() -> MutexGuard<'static, Option<HashMap<usize, Arc<Stream>>>> {
    STREAMS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stream {
    /// A stream on `on` with its worker started; its handle.
    pub fn open(on: On, budget: u64, block: usize) -> Result<usize, Failure> {
        let (tx, rx) = channel::<Box<Work>>();
        let shared = Arc::new(Shared::default());
        let worker_on = on.clone();
        let worker_shared = shared.clone();
        let handle = NEXT.fetch_add(1, Ordering::Relaxed);
        let worker = std::thread::Builder::new()
            .name("pinstream-stream".into())
            .spawn(move || {
                for work in rx {
                    execute(&worker_on, handle, &worker_shared, *work);
                }
            })
            .map_err(|e| {
                Failure::new(
                    PS_ERROR_INTERNAL,
                    format!("cannot start the stream's thread: {e}"),
                )
            })?;
        let stream = Stream {
            worker_id: worker.thread().id(),
            on,
            budget,
            block,
            job: Mutex::new(JobSpec::default()),
            fault: Mutex::new(Fault::from_env()),
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
            shared,
        };
        table()
            .get_or_insert_with(HashMap::new)
            .insert(handle, Arc::new(stream));
        Ok(handle)
    }

    /// The live stream of `handle`.
    pub fn get(handle: usize) -> Result<Arc<Stream>, Failure> {
        table()
            .as_ref()
            .and_then(|t| t.get(&handle).cloned())
            .ok_or_else(|| unknown(handle))
    }

    /// Removes `handle` from the table, waits for its runs to end and stops its worker;
    /// refused on the worker itself (in a callback of one of the stream's events), which
    /// cannot wait for its own end.
    pub fn close(handle: usize) -> Result<(), Failure> {
        let stream = {
            let mut table = table();
            let live = table.as_mut().ok_or_else(|| unknown(handle))?;
            live.get(&handle)
                .ok_or_else(|| unknown(handle))?
                .off_worker("psStreamDestroy")?;
            live.remove(&handle).ok_or_else(|| unknown(handle))?
        };
        drop(stream.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let worker = stream
            .worker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(w) = worker {
            let _ = w.join();
        }
        // The list is taken in a statement of its own: the stream's lock is not held while
        // the imports are released (another stream's worker may hold a block's list through a
        // long import).
        #[cfg(feature = "vulkan")]
        let guests = std::mem::take(&mut stream.shared.lock().guests);
        #[cfg(feature = "vulkan")]
        super::host::forget_guests(handle, guests);
        Ok(())
    }

    /// Refuses `call` on the stream's own worker thread (a callback of one of its events
    /// that the driver runs there): it would wait for the worker, which waits for it.
    fn off_worker(&self, call: &str) -> Result<(), Failure> {
        if std::thread::current().id() != self.worker_id {
            return Ok(());
        }
        Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            format!("{call} called from the stream's own worker thread (an event callback): it would wait for that thread, which runs the callback; call it from another thread"),
        ))
    }

    /// The stream's OpenCL context; `refusal` (which names the call to use) for a stream of
    /// `psVkStreamCreate`.
    #[cfg_attr(not(feature = "vulkan"), allow(unused_variables))]
    pub fn cl_context(&self, refusal: &'static str) -> Result<&Context, Failure> {
        match &self.on {
            On::OpenCl(ctx) => Ok(ctx),
            #[cfg(feature = "vulkan")]
            On::Vulkan(_) => Err(Failure::new(PS_ERROR_INVALID_VALUE, refusal)),
        }
    }

    /// The job as described now, locked.
    pub fn job(&self) -> MutexGuard<'_, JobSpec> {
        self.job.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Issues a run of the described job with `opts`; `done` hears of its end.
    fn issue(&self, mut opts: StreamOptions, done: Done) -> Result<(), Failure> {
        let spec = self.job().clone();
        let kernel = spec.kernel.clone().ok_or_else(|| {
            let call = match self.on {
                On::OpenCl(_) => "psStreamSetKernel",
                #[cfg(feature = "vulkan")]
                On::Vulkan(_) => "psVkStreamSetKernel",
            };
            Failure::new(
                PS_ERROR_INVALID_VALUE,
                format!("no kernel: give the stream one with {call} first"),
            )
        })?;
        let lent = lend(&spec, &self.on)?;
        opts.dtype = spec.dtype;
        opts.out_dtype = spec.out_dtype;
        opts.in_per_out = spec.in_per_out;
        let stop = Arc::new(AtomicUsize::new(0));
        opts.stop = Some(stop.clone());
        let fault = *self.fault.lock().unwrap_or_else(|p| p.into_inner());
        let work = Box::new(Work {
            kernel,
            lent,
            args: spec.args,
            opts,
            fault,
            done,
        });
        let mut state = self.shared.lock();
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let sent = tx.as_ref().is_some_and(|tx| tx.send(work).is_ok());
        if !sent {
            // psStreamDestroy took the sender while this call ran (on another thread).
            return Err(destroyed());
        }
        state.pending += 1;
        state.stops.push(stop);
        Ok(())
    }

    /// Runs the job and waits for it (`psStreamRun`).
    pub fn run_sync(&self, opts: StreamOptions) -> Result<StreamReport, Failure> {
        self.off_worker("psStreamRun")?;
        let (tx, rx) = channel();
        self.issue(opts, Done::Sync(tx))?;
        rx.recv().unwrap_or_else(|_| {
            Err(Failure::new(
                PS_ERROR_INTERNAL,
                "the stream's thread ended during the run",
            ))
        })
    }

    /// Issues the job; `event` completes when it ends (`psStreamRunAsync`).
    pub fn run_async(&self, opts: StreamOptions, event: Event) -> Result<(), Failure> {
        self.issue(opts, Done::Async(event))
    }

    /// Issues the job; `psStreamSynchronize` hears of its end (`psVkStreamRunAsync`).
    #[cfg(feature = "vulkan")]
    pub fn run_quiet(&self, opts: StreamOptions) -> Result<(), Failure> {
        self.issue(opts, Done::Quiet)
    }

    /// Waits until every run issued has ended; the first asynchronous failure since the
    /// last call, if any.
    pub fn synchronize(&self) -> Result<(), Failure> {
        self.off_worker("psStreamSynchronize")?;
        let mut state = self.shared.lock();
        while state.pending > 0 {
            state = self
                .shared
                .ended
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.error.take().map_or(Ok(()), Err)
    }

    /// Stops every run issued and not ended: a running one after its blocks in flight.
    pub fn cancel(&self) {
        for stop in &self.shared.lock().stops {
            stop.store(1, Ordering::Relaxed);
        }
    }

    /// The last report of a run that ended well.
    pub fn report(&self) -> Option<psStreamReport> {
        self.shared.lock().report
    }
}

/// The refusal of a handle not in the table: one psStreamCreate gave (handles are never
/// reused) was destroyed, any other was never a stream.
fn unknown(handle: usize) -> Failure {
    if (FIRST..NEXT.load(Ordering::Relaxed)).contains(&handle) {
        return destroyed();
    }
    Failure::new(
        PS_ERROR_INVALID_VALUE,
        format!("{handle:#x} is not a stream: pass a handle psStreamCreate returned"),
    )
}

/// The refusal of a call on a stream psStreamDestroy ended (or is ending, on another thread).
fn destroyed() -> Failure {
    Failure::new(
        PS_ERROR_INVALID_VALUE,
        "the stream was destroyed (psStreamDestroy): pass a live stream, and destroy it only once no other thread uses it",
    )
}

/// The job's memory, each range looked up in the registry among `on`'s API's blocks;
/// refused where a range the run writes shares memory with another ([`disjoint`]).
fn lend(spec: &JobSpec, on: &On) -> Result<Lent, Failure> {
    disjoint(spec)?;
    let all = |spans: &[Span], what: &str| -> Result<Vec<Borrowed>, Failure> {
        spans
            .iter()
            .enumerate()
            .map(|(i, s)| borrow(*s, &format!("{what} {i}"), on))
            .collect()
    };
    Ok(Lent {
        in_place: spec
            .in_place
            .map(|s| borrow(s, "the in-place range", on))
            .transpose()?,
        inputs: all(&spec.inputs, "input")?,
        output: (spec.output)
            .map(|s| borrow(s, "the output", on))
            .transpose()?,
        residents: all(&spec.residents, "resident")?,
    })
}

impl Lent {
    /// Every range lent.
    #[cfg(feature = "vulkan")]
    fn all_mut(&mut self) -> impl Iterator<Item = &mut Borrowed> {
        (self.in_place.iter_mut())
            .chain(self.inputs.iter_mut())
            .chain(self.output.iter_mut())
            .chain(self.residents.iter_mut())
    }
}

/// Refuses a job whose in-place range or output overlaps another of its ranges: the run
/// would write memory it reads through another slice (undefined behaviour, and a device
/// writing what another block reads). The detail names both ranges and the fix.
fn disjoint(spec: &JobSpec) -> Result<(), Failure> {
    let mut named: Vec<(String, Span, bool)> = Vec::new();
    if let Some(s) = spec.in_place {
        named.push(("the in-place range (psStreamSetInPlace)".into(), s, true));
    }
    for (i, s) in spec.inputs.iter().enumerate() {
        named.push((format!("input {i} (psStreamAddInput)"), *s, false));
    }
    if let Some(s) = spec.output {
        named.push(("the output (psStreamSetOutput)".into(), s, true));
    }
    for (i, s) in spec.residents.iter().enumerate() {
        named.push((format!("resident {i} (psStreamAddResident)"), *s, false));
    }
    let ranges: Vec<JobRange> = (named.iter())
        .map(|(_, s, writes)| JobRange {
            span: s.ptr..s.ptr + s.len,
            writes: *writes,
        })
        .collect();
    let Some((w, other)) = aliased(&ranges) else {
        return Ok(());
    };
    let say =
        |(what, s, _): &(String, Span, bool)| format!("{what} at {:#x}, {} bytes", s.ptr, s.len);
    Err(Failure::new(
        PS_ERROR_INVALID_VALUE,
        format!(
            "{} overlaps {}, and the run writes the first: give each range memory of its own (another allocation, or a part of the block that no other range of the job covers); to update data where it lies, stream it alone with psStreamSetInPlace",
            say(&named[w]),
            say(&named[other])
        ),
    ))
}

/// Runs `work` on the worker thread of stream `handle` (on `on`) and tells its end.
fn execute(on: &On, handle: usize, shared: &Shared, work: Work) {
    let Work {
        kernel,
        mut lent,
        args,
        opts,
        fault,
        done,
    } = work;
    let stop = opts.stop.clone();
    let cancelled = stop
        .as_ref()
        .is_some_and(|s| s.load(Ordering::Relaxed) != 0);
    let outcome = if cancelled {
        Err(Failure::new(
            PS_ERROR_CANCELLED,
            "cancelled by psStreamCancel before it started",
        ))
    } else {
        catch_unwind(AssertUnwindSafe(|| match (on, &kernel) {
            (On::OpenCl(ctx), StreamKernel::OpenCl(k)) => {
                run_on::<OpenCl>(ctx.clone(), k, fault, &mut lent, args, &opts)
            }
            #[cfg(feature = "vulkan")]
            (On::Vulkan(device), StreamKernel::Vulkan(k)) => {
                for b in lent.all_mut() {
                    if let Some(list) = b.import_into(device, handle)? {
                        let mut state = shared.lock();
                        // Blocks freed since went with their imports: their entries too.
                        state.guests.retain(|w| w.strong_count() > 0);
                        state.guests.push(list);
                    }
                }
                run_on::<Vulkan>(device.clone(), k, fault, &mut lent, args, &opts)
            }
            #[cfg(feature = "vulkan")]
            _ => Err(Failure::new(
                PS_ERROR_INTERNAL,
                "internal error: a stream's kernel is of another API than its device; please report it",
            )),
        }))
        .unwrap_or_else(|_| {
            Err(Failure::new(
                PS_ERROR_INTERNAL,
                "internal error (a panic inside the stream's run); please report it",
            ))
        })
    };
    #[cfg(not(feature = "vulkan"))]
    let _ = handle;
    // The run's hold on the caller's memory (a Vulkan stream's imports of it) ends before
    // the caller hears of the end: once psStreamRun or psStreamSynchronize returns, the
    // caller may free the memory, and no import of it may outlive it.
    drop(lent);
    drop(kernel);
    finish(shared, stop, outcome, done);
}

/// One run of the engine on `device` (its commands failing at `fault`) with `kernel` over
/// `lent`: the same for every API.
fn run_on<A: Api>(
    device: DeviceOf<A>,
    kernel: &Mutex<FaultyKernel<A>>,
    fault: Option<Fault>,
    lent: &mut Lent,
    args: Vec<(String, String)>,
    opts: &StreamOptions,
) -> Result<StreamReport, Failure>
where
    A::Error: OutOfResources,
{
    let device = FaultyDevice::<A>::with_fault(device, fault);
    let mut kernel = kernel.lock().unwrap_or_else(|p| p.into_inner());
    let job = Job {
        in_place: lent.in_place.as_mut().map(|b| b as &mut dyn HostMemory),
        inputs: lent.inputs.iter().map(|b| b as &dyn HostMemory).collect(),
        output: lent.output.as_mut().map(|b| b as &mut dyn HostMemory),
        residents: lent
            .residents
            .iter()
            .map(|b| b as &dyn HostMemory)
            .collect(),
        args,
    };
    run(&device, &mut kernel, job, opts, &|_, _| {}).map_err(|e| stream_failure(&e))
}

/// Records a run's end, then tells whoever waits for it (outside the lock: a callback the
/// caller set on the event may call the stream again).
fn finish(
    shared: &Shared,
    stop: Option<Arc<AtomicUsize>>,
    outcome: Result<StreamReport, Failure>,
    done: Done,
) {
    let mut state = shared.lock();
    if let Some(stop) = stop {
        state.stops.retain(|s| !Arc::ptr_eq(s, &stop));
    }
    if let Ok(report) = &outcome {
        state.report = Some(psStreamReport::from(report));
    }
    let status = match (&done, &outcome) {
        (Done::Sync(_), _) | (_, Ok(_)) => 0,
        (_, Err(f)) => {
            let status = -f.code;
            if state.error.is_none() {
                state.error = Some(Failure::new(f.code, f.detail.clone()));
            }
            status
        }
    };
    state.pending -= 1;
    drop(state);
    shared.ended.notify_all();
    match done {
        Done::Sync(tx) => {
            let _ = tx.send(outcome);
        }
        Done::Async(event) => {
            // Nothing is left to tell a failure to: the status is the caller's news.
            let _ = event.set_user_status(status);
        }
        #[cfg(feature = "vulkan")]
        Done::Quiet => {}
    }
}
