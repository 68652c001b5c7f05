//! How the host waits for an OpenCL command: the driver's `clWaitForEvents` (the default),
//! or polling the event's status with short sleeps between looks, for drivers whose wait
//! spins a core (NVIDIA's is reported to). The choice is process-wide, as CUDA's is
//! (`cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync)` against the default spin), and
//! every wait of the library follows it: `Event::wait` and so the engine's ring.

use super::error::{Call, ClError};
use cl3::types::cl_event;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// A way of waiting for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// `clWaitForEvents`: the driver decides (it may spin a core).
    #[default]
    Driver,
    /// Flush the command's queue, then look at the event's status every [`POLL_SLEEP`],
    /// sleeping between looks.
    Sleep,
}

/// The sleep between two looks at a command's status in [`WaitMode::Sleep`] (Linux adds its
/// timer slack, 50 µs by default, to it).
pub const POLL_SLEEP: Duration = Duration::from_micros(50);

static MODE: AtomicU8 = AtomicU8::new(0);

impl std::str::FromStr for WaitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "driver" => Ok(WaitMode::Driver),
            "sleep" => Ok(WaitMode::Sleep),
            _ => Err(format!("`{s}`: the ways of waiting are driver and sleep")),
        }
    }
}

impl std::fmt::Display for WaitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WaitMode::Driver => "driver",
            WaitMode::Sleep => "sleep",
        })
    }
}

/// Sets how every later wait of this process waits.
pub fn set_wait_mode(mode: WaitMode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

/// How waits wait now.
pub fn wait_mode() -> WaitMode {
    match MODE.load(Ordering::Relaxed) {
        0 => WaitMode::Driver,
        _ => WaitMode::Sleep,
    }
}

/// Waits for `e` as [`wait_mode`] says; an error if the command failed.
pub(crate) fn wait_event(e: cl_event) -> Result<(), ClError> {
    match wait_mode() {
        WaitMode::Driver => cl3::event::wait_for_events(&[e]).call("clWaitForEvents"),
        WaitMode::Sleep => sleep_poll(e),
    }
}

fn status(e: cl_event) -> Result<i32, ClError> {
    let s = cl3::event::get_event_info(e, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS)
        .call("clGetEventInfo")?;
    Ok(i32::from(s))
}

fn sleep_poll(e: cl_event) -> Result<(), ClError> {
    let mut flushed = false;
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
            _ => std::thread::sleep(POLL_SLEEP),
        }
    }
}
