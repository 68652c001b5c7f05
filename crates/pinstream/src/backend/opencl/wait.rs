//! How the host waits for an OpenCL command: the driver's `clWaitForEvents`, polling the
//! event's status with short sleeps between looks (for drivers whose wait spins a core:
//! NVIDIA's does, measured), or `auto` (the default): a transfer or kernel the caller waits
//! for itself ([`super::Event::wait`]) waits the driver's way, for the lowest latency, and
//! the engine's ring (through `api::Device::wait`) looks without
//! sleeping for [`SPIN_FIRST`], then sleeps between looks. The choice belongs to a context
//! ([`super::Context::set_wait_mode`]), as CUDA's belongs to a device
//! (`cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)` against the default spin); each
//! command waits as its context said when it was enqueued.
//!
//! Measured on the H200 (bench/results/h200/small-transfers): `demo` with the ring waiting by
//! sleeping moved 10 GiB in place at 1.007× and y = W·x at 0.998× the throughput of the
//! driver's wait, for 0.18× and 0.17× the CPU seconds per GiB; a single 4 KiB write waited
//! by sleeping takes ~120 µs against ~8 µs, hence the driver's way for single waits.

use super::error::{Call, ClError};
use cl3::types::cl_event;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

pub use crate::backend::api::WaitMode;

/// The sleep between two looks at a command's status in [`WaitMode::Sleep`] (Linux adds its
/// timer slack, 50 µs by default, to it).
pub const POLL_SLEEP: Duration = Duration::from_micros(50);

/// A context's wait mode: set by its owner, read as each command is enqueued.
pub(crate) struct WaitCell(AtomicU8);

impl WaitCell {
    pub(crate) fn new(mode: WaitMode) -> Self {
        WaitCell(AtomicU8::new(mode as u8))
    }

    pub(crate) fn set(&self, mode: WaitMode) {
        self.0.store(mode as u8, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> WaitMode {
        match self.0.load(Ordering::Relaxed) {
            0 => WaitMode::Auto,
            1 => WaitMode::Driver,
            _ => WaitMode::Sleep,
        }
    }
}

/// How long the engine's ring looks at a command without sleeping, in `auto`: a block that
/// completes within it is seen at once; a longer one costs sleeps, not a core.
pub const SPIN_FIRST: Duration = Duration::from_micros(100);

/// Waits for `e` as `mode` says (`auto`: the driver's way); an error if the command failed.
pub(crate) fn wait_event(e: cl_event, mode: WaitMode) -> Result<(), ClError> {
    match mode {
        WaitMode::Auto | WaitMode::Driver => driver_wait(e),
        WaitMode::Sleep => sleep_poll(e, Duration::ZERO),
    }
}

/// Waits for `e` for the engine's ring as `mode` says (`auto`: looking without sleeping for
/// [`SPIN_FIRST`], then sleeping between looks).
pub(crate) fn wait_stream_event(e: cl_event, mode: WaitMode) -> Result<(), ClError> {
    match mode {
        WaitMode::Driver => driver_wait(e),
        WaitMode::Auto => sleep_poll(e, SPIN_FIRST),
        WaitMode::Sleep => sleep_poll(e, Duration::ZERO),
    }
}

fn driver_wait(e: cl_event) -> Result<(), ClError> {
    cl3::event::wait_for_events(&[e]).call("clWaitForEvents")
}

fn status(e: cl_event) -> Result<i32, ClError> {
    let s = cl3::event::get_event_info(e, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS)
        .call("clGetEventInfo")?;
    Ok(i32::from(s))
}

/// Looks at `e`'s status until it completes: without sleeping for `spin`, then sleeping
/// [`POLL_SLEEP`] between looks.
fn sleep_poll(e: cl_event, spin: Duration) -> Result<(), ClError> {
    let mut flushed = false;
    let start = std::time::Instant::now();
    loop {
        match status(e)? {
            0 => return Ok(()),
            s if s < 0 => return Err(ClError::new("clWaitForEvents", s)),
            _ if !flushed => {
                // A command not yet submitted may never start unless its queue is flushed
                // (`clWaitForEvents` does this itself).
                let q = cl3::event::get_event_info(e, cl3::event::CL_EVENT_COMMAND_QUEUE)
                    .call("clGetEventInfo")?;
                let q = isize::from(q) as cl3::types::cl_command_queue;
                if !q.is_null() {
                    cl3::command_queue::flush(q).call("clFlush")?;
                }
                flushed = true;
            }
            _ if start.elapsed() < spin => std::thread::yield_now(),
            _ => std::thread::sleep(POLL_SLEEP),
        }
    }
}
