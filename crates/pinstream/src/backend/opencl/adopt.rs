//! Objects adopted from the caller: [`Queue::from_raw`] and [`DeviceBuffer::from_raw`]
//! check them as the driver would before pinstream uses them, and say which condition
//! failed. An adopted object is only retained and released: pinstream never finishes or
//! waits on it (see `Drop for Queue`).

use super::context::{
    queue_context, queue_info, Context, ContextInner, DeviceBuffer, MemFlags, MemObject, Queue,
};
use super::error::{Call, ClError};
use cl3::types::{cl_command_queue, cl_device_id, cl_mem};
use std::sync::Arc;

/// Why a caller's queue cannot carry pinstream's commands: one variant per condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueRefusal {
    /// An OpenCL call on it failed: NULL, released, or not a command queue.
    Invalid(ClError),
    /// It belongs to another context than the one its work is for.
    OtherContext,
    /// Its device is not one of the context's devices (`CL_CONTEXT_DEVICES`), as a
    /// sub-device's queue may be.
    DeviceNotInContext,
    /// It was made with `CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE`: its commands would not
    /// run in the order pinstream enqueues them.
    OutOfOrder,
    /// A device-side queue (`CL_QUEUE_ON_DEVICE`), which the host cannot enqueue on.
    OnDevice,
    /// It is on `queue_device`, not on `device`, the context's device pinstream builds for.
    /// Each is described by its place among the context's devices (`CL_CONTEXT_DEVICES`, from
    /// 0), its name and, where the driver tells, its PCI address: two GPUs of one model share
    /// a name.
    OtherDevice {
        /// The queue's device, e.g. ``device 1 (`NVIDIA H100`, PCI 0000:41:00)``.
        queue_device: String,
        /// The device pinstream's kernels are built for, described alike.
        device: String,
    },
}

impl std::fmt::Display for QueueRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueRefusal::Invalid(e) => write!(f, "the queue is not a valid command queue ({e})"),
            QueueRefusal::OtherContext => f.write_str("the queue belongs to another context"),
            QueueRefusal::DeviceNotInContext => {
                f.write_str("the queue's device is not one of its context's devices")
            }
            QueueRefusal::OutOfOrder => f.write_str(
                "the queue is out of order (made with CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)",
            ),
            QueueRefusal::OnDevice => f.write_str("the queue is a device-side queue (CL_QUEUE_ON_DEVICE)"),
            QueueRefusal::OtherDevice { queue_device, device } => write!(
                f,
                "the queue is on the context's {queue_device}, not on its {device} (the context's first GPU, else its first device)"
            ),
        }
    }
}

impl std::error::Error for QueueRefusal {}

impl From<ClError> for QueueRefusal {
    fn from(e: ClError) -> Self {
        QueueRefusal::Invalid(e)
    }
}

impl Context {
    /// The same OpenCL context with `device`, one of [`Self::devices`], as the device its
    /// queues and programs use ([`Self::device`]): how a front streams on the device of a
    /// caller's queue. Holds its own reference to the context (`clRetainContext`); the
    /// context itself is unchanged. `CL_INVALID_DEVICE` for a device the context lacks.
    pub fn on_device(&self, device: cl_device_id) -> Result<Context, ClError> {
        let Some(chosen) = self.devices().iter().find(|d| d.id.0 == device) else {
            return Err(ClError::new(
                "clGetContextInfo",
                cl3::error_codes::CL_INVALID_DEVICE,
            ));
        };
        if chosen.id.0 == self.device().id.0 {
            return Ok(self.clone());
        }
        let mut devices = vec![chosen.clone()];
        devices.extend(self.devices().iter().filter(|d| d.id.0 != device).cloned());
        let raw = self.as_raw();
        // SAFETY: `raw` is live while `self` holds its reference; the one added here is
        // released by the new ContextInner's Drop.
        unsafe { cl3::context::retain_context(raw) }.call("clRetainContext")?;
        Ok(Context {
            inner: Arc::new(ContextInner::new(raw, devices)),
        })
    }
}

impl Context {
    /// This context on the device of the caller's queue `raw` ([`Self::on_device`]), with the
    /// queue checked against it as [`Queue::from_raw`] does: how a front that is given a queue
    /// streams on that queue's device, whichever of the context's devices it is. The queue is
    /// only read (its context, device and properties), never retained past the call.
    ///
    /// # Safety
    /// `raw` must be a valid command queue its owner does not release before this returns.
    pub unsafe fn on_queue_device(&self, raw: cl_command_queue) -> Result<Context, QueueRefusal> {
        if queue_context(raw)? != self.inner.raw {
            return Err(QueueRefusal::OtherContext);
        }
        let device = queue_info(raw, cl3::command_queue::CL_QUEUE_DEVICE)?;
        let on = (self.on_device(device as cl_device_id))
            .map_err(|_| QueueRefusal::DeviceNotInContext)?;
        // SAFETY: the caller's promise on `raw`; the checked queue is dropped at once.
        drop(unsafe { Queue::from_raw(raw, &on) }?);
        Ok(on)
    }
}

impl Queue {
    /// Another owner of a caller's queue `raw` (`clRetainCommandQueue`), checked to be an
    /// in-order host queue on `ctx`'s device; the refusal names the condition that failed.
    /// The returned queue is never finished by pinstream, only released when dropped.
    ///
    /// # Safety
    /// `raw` must be a valid command queue its owner does not release before this returns.
    pub unsafe fn from_raw(raw: cl_command_queue, ctx: &Context) -> Result<Queue, QueueRefusal> {
        if queue_context(raw)? != ctx.inner.raw {
            return Err(QueueRefusal::OtherContext);
        }
        let props = queue_info(raw, cl3::command_queue::CL_QUEUE_PROPERTIES)? as u64;
        if props & cl3::command_queue::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0 {
            return Err(QueueRefusal::OutOfOrder);
        }
        if props & cl3::command_queue::CL_QUEUE_ON_DEVICE != 0 {
            return Err(QueueRefusal::OnDevice);
        }
        let device = queue_info(raw, cl3::command_queue::CL_QUEUE_DEVICE)?;
        if device != ctx.inner.device.id.0 as usize {
            return Err(QueueRefusal::OtherDevice {
                queue_device: describe(ctx, device),
                device: describe(ctx, ctx.inner.device.id.0 as usize),
            });
        }
        // SAFETY: `raw` is live (the caller's promise); the reference is released by Drop.
        unsafe { cl3::command_queue::retain_command_queue(raw) }.call("clRetainCommandQueue")?;
        Ok(Queue {
            raw,
            _ctx: ctx.inner.clone(),
            adopted: true,
        })
    }
}

/// Device `id` of `ctx` as [`QueueRefusal::OtherDevice`] names it: ``device 1 (`NAME`, PCI
/// ADDRESS)``, its place among the context's devices; its handle where the context does not
/// list it.
fn describe(ctx: &Context, id: usize) -> String {
    let found = ctx
        .devices()
        .iter()
        .enumerate()
        .find(|(_, d)| d.id.0 as usize == id);
    match found {
        Some((i, d)) => match &d.pci_address {
            Some(pci) => format!("device {i} (`{}`, PCI {pci})", d.name),
            None => format!("device {i} (`{}`)", d.name),
        },
        None => format!("device {id:#x} (not one of its devices)"),
    }
}

impl DeviceBuffer {
    /// Another owner of a caller's buffer `raw` (`clRetainMemObject`), its size read from
    /// the driver (`CL_MEM_SIZE`). Refused as the driver refuses a buffer transfer:
    /// `CL_INVALID_MEM_OBJECT` for NULL or an image or pipe, `CL_INVALID_CONTEXT` for a
    /// buffer of another context.
    ///
    /// # Safety
    /// `raw` must be a valid memory object its owner does not release before this returns.
    pub unsafe fn from_raw(raw: cl_mem, ctx: &Context) -> Result<DeviceBuffer, ClError> {
        let invalid = |code| Err(ClError::new("clGetMemObjectInfo", code));
        if raw.is_null() || mem_info(raw, cl3::memory::CL_MEM_TYPE)? != MEM_OBJECT_BUFFER {
            return invalid(cl3::error_codes::CL_INVALID_MEM_OBJECT);
        }
        if mem_info(raw, cl3::memory::CL_MEM_CONTEXT)? != ctx.as_raw() as u64 {
            return invalid(cl3::error_codes::CL_INVALID_CONTEXT);
        }
        let size = mem_info(raw, cl3::memory::CL_MEM_SIZE)? as usize;
        // SAFETY: `raw` is live (the caller's promise); the reference is released by Drop.
        unsafe { cl3::memory::retain_mem_object(raw) }.call("clRetainMemObject")?;
        // SAFETY: a memory object of `size` bytes in `ctx`, with the reference just taken.
        let mem = unsafe { MemObject::from_raw(raw, size, ctx) };
        Ok(DeviceBuffer { mem })
    }

    /// True when the buffer belongs to `ctx` (`CL_MEM_CONTEXT`): known without a driver
    /// call, since a buffer is made in its own context and an adopted one was checked
    /// against it ([`Self::from_raw`]), so a call's check costs nothing on the hot path.
    pub fn in_context(&self, ctx: &Context) -> Result<bool, ClError> {
        Ok(self.mem.of_context(ctx))
    }

    /// The buffer's `CL_MEM_FLAGS`: read from the driver once per buffer (they never
    /// change; a buffer pinstream made knows them), so a front's check and the gather's
    /// share one `clGetMemObjectInfo`.
    pub fn flags(&self) -> Result<MemFlags, ClError> {
        if let Some(&known) = self.mem.flags.get() {
            return Ok(known);
        }
        let read = mem_info(self.mem.raw, cl3::memory::CL_MEM_FLAGS).map(MemFlags)?;
        Ok(*self.mem.flags.get_or_init(|| read))
    }
}

const MEM_OBJECT_BUFFER: u64 = cl3::memory::CL_MEM_OBJECT_BUFFER as u64;

/// One `clGetMemObjectInfo` value that is a number or a handle, widened.
fn mem_info(raw: cl_mem, param: u32) -> Result<u64, ClError> {
    use cl3::info_type::InfoType;
    #[cfg(test)]
    tests::QUERIES.with(|q| q.borrow_mut().push(param));
    match cl3::memory::get_mem_object_info(raw, param).call("clGetMemObjectInfo")? {
        InfoType::Uint(v) => Ok(u64::from(v)),
        InfoType::Ulong(v) => Ok(v),
        InfoType::Size(v) => Ok(v as u64),
        InfoType::Ptr(p) => Ok(p as u64),
        _ => Err(ClError::new(
            "clGetMemObjectInfo",
            cl3::error_codes::CL_INVALID_VALUE,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{default_device, devices, Context, DeviceBuffer};
    use crate::gather::{Gather, GatherOptions};
    use crate::host::HostRegion;
    use std::cell::RefCell;

    thread_local! {
        /// The `clGetMemObjectInfo` parameters this thread asked for.
        pub(super) static QUERIES: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    }

    /// The `clGetMemObjectInfo` parameters this thread asked for while `f` ran.
    fn queries(f: impl FnOnce()) -> Vec<u32> {
        QUERIES.with(|q| q.borrow_mut().clear());
        f();
        QUERIES.with(|q| q.borrow().clone())
    }

    /// How often this thread asked for `CL_MEM_FLAGS` while `f` ran.
    fn flag_queries(f: impl FnOnce()) -> usize {
        let flags = cl3::memory::CL_MEM_FLAGS;
        queries(f).iter().filter(|&&p| p == flags).count()
    }

    /// A buffer's flags are read from the driver once (they never change): a front that
    /// checks them (the C library's host-access check) and the gather's kernel-access check
    /// share one `clGetMemObjectInfo`, and a buffer pinstream made asks for none.
    #[test]
    fn a_buffers_flags_are_read_once_for_every_check_of_a_call() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let q = ctx.queue().unwrap();
        let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
        let host = HostRegion::mapped(&ctx, 4096, false).unwrap();
        let made = ctx.device_buffer(4096).unwrap();
        let one = [(0, 16, 0)];
        let call = |buf: &DeviceBuffer, g: &mut Gather| {
            buf.flags().unwrap(); // the front's own check
            g.upload_gather_mapped(&q, buf, &host, &one, &[]).unwrap();
        };
        assert_eq!(flag_queries(|| call(&made, &mut g)), 0, "made here");
        // SAFETY: `made` is a live buffer of `ctx`, held past the call.
        let adopted = unsafe { DeviceBuffer::from_raw(made.mem.raw, &ctx) }.unwrap();
        assert_eq!(flag_queries(|| call(&adopted, &mut g)), 1, "adopted");
        assert_eq!(flag_queries(|| call(&adopted, &mut g)), 0, "adopted, again");
        host.wait().unwrap();
    }

    /// A zero-copy call asks the driver nothing about its buffers once their flags are
    /// known: the mapped buffer's context is the one it was made in (an adopted buffer's was
    /// checked when it was adopted), so the call's "of this context" checks cost no query.
    #[test]
    fn a_zero_copy_call_asks_the_driver_nothing_about_its_buffers() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let other = Context::new(default_device(&all).unwrap()).unwrap();
        let q = ctx.queue().unwrap();
        let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
        let host = HostRegion::mapped(&ctx, 4096, false).unwrap();
        let dst = ctx.device_buffer(4096).unwrap();
        let one = [(0, 16, 0)];
        let asked = queries(|| {
            let up = g.upload_gather_mapped(&q, &dst, &host, &one, &[]);
            up.unwrap().wait().unwrap();
        });
        assert_eq!(asked, Vec::<u32>::new());
        let mapped = host.device_buffer().unwrap();
        assert!(mapped.in_context(&ctx).unwrap());
        assert!(!mapped.in_context(&other).unwrap());
    }
}
