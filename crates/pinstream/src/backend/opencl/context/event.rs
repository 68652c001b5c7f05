//! [`Event`]: an owned `cl_event`, waited for as its context's wait mode says, and user
//! events.

use super::Context;
use crate::backend::api::Profile;
use crate::backend::opencl::error::{Call, ClError};
use crate::backend::opencl::wait::WaitMode;
use cl3::types::cl_event;

/// An owned `cl_event`, with the wait mode of its context when its command was enqueued.
pub struct Event(pub(crate) cl_event, pub(crate) WaitMode);

// SAFETY: events are thread-safe OpenCL objects (see ContextInner).
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// Blocks until the command is complete; an error if it failed.
    /// ([`Self::wait_mode`] says how: the driver's wait, or sleeping between looks.)
    pub fn wait(&self) -> Result<(), ClError> {
        crate::backend::opencl::wait::wait_event(self.0, self.1)
    }

    /// How this event is waited for: its context's mode when its command was enqueued
    /// ([`Context::set_wait_mode`]).
    pub fn wait_mode(&self) -> WaitMode {
        self.1
    }

    /// Blocks until the command completed, as the engine's ring waits (`auto`: a short spin,
    /// then sleeps; see [`super::wait`]).
    pub(crate) fn wait_streaming(&self) -> Result<(), ClError> {
        crate::backend::opencl::wait::wait_stream_event(self.0, self.1)
    }

    /// True once the command has completed successfully (`CL_COMPLETE`; a failed command
    /// has a negative status and is not complete).
    pub fn is_complete(&self) -> bool {
        matches!(
            cl3::event::get_event_info(self.0, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS),
            Ok(cl3::info_type::InfoType::Int(0))
        )
    }

    /// True once the command has ended, successfully or not (`CL_COMPLETE` or a negative
    /// status): nothing will use what it used any more. False while it is queued or running,
    /// or when its status cannot be read. Never waits.
    pub fn is_done(&self) -> bool {
        matches!(
            cl3::event::get_event_info(self.0, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS),
            Ok(cl3::info_type::InfoType::Int(s)) if s <= 0
        )
    }

    /// The command's profiling times (the queue must have profiling on, the command done):
    /// OpenCL gives all four, on the device's absolute clock.
    pub fn profile(&self) -> Result<Profile, ClError> {
        let get = |p| -> Result<u64, ClError> {
            cl3::event::get_event_profiling_info(self.0, p)
                .map(u64::from)
                .call("clGetEventProfilingInfo")
        };
        Ok(Profile {
            queued: Some(get(cl3::event::CL_PROFILING_COMMAND_QUEUED)?),
            submit: Some(get(cl3::event::CL_PROFILING_COMMAND_SUBMIT)?),
            start: get(cl3::event::CL_PROFILING_COMMAND_START)?,
            end: get(cl3::event::CL_PROFILING_COMMAND_END)?,
        })
    }
}

impl Context {
    /// A user event (`clCreateUserEvent`): complete when [`Event::set_user_status`] says.
    pub fn user_event(&self) -> Result<Event, ClError> {
        cl3::event::create_user_event(self.inner.raw)
            .call("clCreateUserEvent")
            .map(|raw| self.event(raw))
    }
}

impl Event {
    /// Completes a user event made by [`Context::user_event`]: `0` (`CL_COMPLETE`), or a
    /// negative error code that fails every command waiting on it.
    pub fn set_user_status(&self, status: i32) -> Result<(), ClError> {
        cl3::event::set_user_event_status(self.0, status).call("clSetUserEventStatus")
    }

    /// Gives the reference up to the caller (who releases it with `clReleaseEvent`).
    pub fn into_raw(self) -> cl_event {
        let raw = self.0;
        std::mem::forget(self);
        raw
    }
}

impl Clone for Event {
    fn clone(&self) -> Self {
        // SAFETY: retaining a live event adds one reference, released by the clone's Drop.
        if let Err(code) = unsafe { cl3::event::retain_event(self.0) } {
            tracing::warn!("{}", ClError::new("clRetainEvent", code));
        }
        Event(self.0, self.1)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: we own one reference to the event.
        if let Err(code) = unsafe { cl3::event::release_event(self.0) } {
            tracing::warn!("{}", ClError::new("clReleaseEvent", code));
        }
    }
}
