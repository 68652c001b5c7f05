//! A caller's own OpenCL objects, made with plain OpenCL calls as a C program makes them, on
//! the first device of the first platform (PoCL in CI), and released when dropped.
#![allow(dead_code)]

use cl3::types::{cl_command_queue, cl_context, cl_device_id, cl_event, cl_mem};
use std::ffi::c_void;
use std::ptr;
use std::sync::mpsc;
use std::time::Duration;

/// A context with one in-order queue on its device.
pub struct Cl {
    pub ctx: cl_context,
    pub device: cl_device_id,
    pub queue: cl_command_queue,
}

impl Cl {
    pub fn new() -> Cl {
        // PoCL answers concurrent first device queries with no devices: one at a time.
        static FIRST: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = FIRST.lock().unwrap_or_else(|p| p.into_inner());
        let device = test_device();
        let ctx = cl3::context::create_context(&[device], ptr::null(), None, ptr::null_mut())
            .expect("clCreateContext");
        let queue = queue(ctx, device, 0);
        Cl { ctx, device, queue }
    }

    /// A buffer of `size` bytes made with `flags`.
    pub fn buffer(&self, flags: u64, size: usize) -> Mem {
        // SAFETY: a live context, no host pointer.
        let raw = unsafe { cl3::memory::create_buffer(self.ctx, flags, size, ptr::null_mut()) }
            .expect("clCreateBuffer");
        Mem(raw)
    }

    /// A 1-D RGBA8 image of `width` pixels.
    pub fn image(&self, width: usize) -> Mem {
        let format = cl3::types::cl_image_format {
            image_channel_order: cl3::memory::CL_RGBA,
            image_channel_data_type: cl3::memory::CL_UNSIGNED_INT8,
        };
        // SAFETY: all-zero is a valid image description (no buffer, no pitches).
        let mut desc: cl3::types::cl_image_desc = unsafe { std::mem::zeroed() };
        desc.image_type = cl3::memory::CL_MEM_OBJECT_IMAGE1D;
        desc.image_width = width;
        // SAFETY: a live context; format and description outlive the call.
        let raw = unsafe {
            cl3::memory::create_image(
                self.ctx,
                cl3::memory::CL_MEM_READ_WRITE,
                &format,
                &desc,
                ptr::null_mut(),
            )
        }
        .expect("clCreateImage");
        Mem(raw)
    }

    /// `n` bytes of `mem` at 0, read with a blocking clEnqueueReadBuffer.
    pub fn read(&self, mem: &Mem, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        // SAFETY: `out` holds `n` bytes; the read is blocking.
        unsafe {
            cl3::command_queue::enqueue_read_buffer(
                self.queue,
                mem.0,
                1,
                0,
                n,
                out.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map(release)
        .expect("clEnqueueReadBuffer");
        out
    }

    /// A user event, and a marker on the queue that waits for it: every later command on
    /// the queue waits until the event is set (what a long kernel does, without timing one).
    pub fn gate(&self) -> cl_event {
        let gate = cl3::event::create_user_event(self.ctx).expect("clCreateUserEvent");
        // SAFETY: a live queue; the wait list is one live event.
        let marker =
            unsafe { cl3::command_queue::enqueue_marker_with_wait_list(self.queue, 1, &gate) }
                .expect("clEnqueueMarkerWithWaitList");
        release(marker);
        gate
    }
}

impl Drop for Cl {
    fn drop(&mut self) {
        // SAFETY: the references this value made, released once.
        unsafe {
            let _ = cl3::command_queue::release_command_queue(self.queue);
            let _ = cl3::context::release_context(self.ctx);
        }
    }
}

/// A queue on `device` made with `properties` (clCreateCommandQueue, the 1.x call).
pub fn queue(ctx: cl_context, device: cl_device_id, properties: u64) -> cl_command_queue {
    #[allow(deprecated)]
    // SAFETY: a live context and one of its devices.
    unsafe { cl3::command_queue::create_command_queue(ctx, device, properties) }
        .expect("clCreateCommandQueue")
}

/// A memory object, released when dropped.
pub struct Mem(pub cl_mem);

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: the reference clCreateBuffer/clCreateImage gave, released once.
        let _ = unsafe { cl3::memory::release_mem_object(self.0) };
    }
}

/// Releases an event reference.
pub fn release(e: cl_event) {
    // SAFETY: a reference the caller owns, released once.
    let _ = unsafe { cl3::event::release_event(e) };
}

/// The event's `CL_EVENT_COMMAND_EXECUTION_STATUS` (0: complete; above 0: not yet).
pub fn status(e: cl_event) -> i32 {
    match cl3::event::get_event_info(e, cl3::event::CL_EVENT_COMMAND_EXECUTION_STATUS) {
        Ok(cl3::info_type::InfoType::Int(s)) => s,
        other => panic!("clGetEventInfo: {other:?}"),
    }
}

/// Runs `f` on a thread of its own and returns its result, or `None` when it has not
/// returned after `limit` (the thread is left behind: a hang fails the test, not the run).
pub fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// A raw pointer that may cross to another thread (the test keeps what it points at alive).
#[derive(Clone, Copy)]
pub struct Raw(pub *mut c_void);
// SAFETY: plain addresses of OpenCL handles and buffers the test keeps alive meanwhile.
unsafe impl Send for Raw {}

/// Writes `bytes` at the start of `mem` on `queue` and waits (a blocking write).
pub fn write(queue: cl_command_queue, mem: cl_mem, bytes: &[u8]) {
    // SAFETY: a live queue and buffer of at least `bytes.len()` bytes; a blocking write.
    unsafe {
        cl3::command_queue::enqueue_write_buffer(
            queue,
            mem,
            1,
            0,
            bytes.len(),
            bytes.as_ptr().cast(),
            0,
            ptr::null(),
        )
    }
    .map(release)
    .expect("clEnqueueWriteBuffer");
}

/// A `psMemcpyBatch*AsyncWithFlags` call of `pieces` (host pointer, length, device offset)
/// between the host and `mem` on `queue`, up (`true`: host to device) or down: its code and
/// event. The pointers are the caller's: hostile ones must be refused before any is touched.
pub fn batch_call(
    (queue, mem): (cl_command_queue, cl_mem),
    pieces: &[(*mut u8, usize, usize)],
    flags: u32,
    up: bool,
) -> (pinstream_capi::psError_t, cl_event) {
    use pinstream_capi::{psMemcpyBatchDtoHAsyncWithFlags, psMemcpyBatchHtoDAsyncWithFlags};
    let offs: Vec<usize> = pieces.iter().map(|p| p.2).collect();
    let sizes: Vec<usize> = pieces.iter().map(|p| p.1).collect();
    let ptrs: Vec<*mut c_void> = pieces.iter().map(|p| p.0.cast()).collect();
    let (n, mut ev) = (pieces.len(), ptr::null_mut());
    // SAFETY: a live queue and buffer (the caller's); arrays of `n` entries; the pieces are
    // as the caller's promise says.
    let code = unsafe {
        match up {
            true => psMemcpyBatchHtoDAsyncWithFlags(
                queue,
                mem,
                offs.as_ptr(),
                ptrs.as_ptr().cast(),
                sizes.as_ptr(),
                n,
                flags,
                &mut ev,
            ),
            false => psMemcpyBatchDtoHAsyncWithFlags(
                queue,
                ptrs.as_ptr(),
                mem,
                offs.as_ptr(),
                sizes.as_ptr(),
                n,
                flags,
                &mut ev,
            ),
        }
    };
    (code, ev)
}

/// A kernel built from source in a context, and its program, released when dropped.
pub struct Kern(pub cl3::types::cl_kernel, cl3::types::cl_program);

impl Cl {
    /// Kernel `name` of `source`, built for the context's device.
    pub fn kernel(&self, source: &str, name: &str) -> Kern {
        let program = cl3::program::create_program_with_source(self.ctx, &[source])
            .expect("clCreateProgramWithSource");
        let built =
            cl3::program::build_program(program, &[self.device], c"", None, ptr::null_mut());
        built.expect("clBuildProgram");
        let cname = std::ffi::CString::new(name).unwrap();
        let kernel = cl3::kernel::create_kernel(program, &cname).expect("clCreateKernel");
        Kern(kernel, program)
    }
}

impl Drop for Kern {
    fn drop(&mut self) {
        // SAFETY: the references this value made, released once.
        unsafe {
            let _ = cl3::kernel::release_kernel(self.0);
            let _ = cl3::program::release_program(self.1);
        }
    }
}

/// The context's `CL_CONTEXT_REFERENCE_COUNT`: back to the test's own once pinstream has
/// released everything it made in it.
pub fn context_refcount(ctx: cl_context) -> u32 {
    match cl3::context::get_context_info(ctx, cl3::context::CL_CONTEXT_REFERENCE_COUNT) {
        Ok(cl3::info_type::InfoType::Uint(n)) => n,
        other => panic!("clGetContextInfo: {other:?}"),
    }
}

/// Runs `test` in a child process of this test binary with two PoCL CPU devices (PoCL 3 calls
/// its CPU driver `pthread`, PoCL 5 `cpu`); true in the parent, false in the child.
pub fn in_two_device_child(test: &str) -> bool {
    if std::env::var_os("PINSTREAM_TEST_TWO_DEVICES").is_some() {
        return false;
    }
    let mut outputs = Vec::new();
    for devices in ["pthread pthread", "cpu cpu"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture"])
            .env("PINSTREAM_TEST_TWO_DEVICES", "1")
            .env("POCL_DEVICES", devices)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains("1 passed") {
            return true;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        outputs.push(format!("POCL_DEVICES={devices:?}: {text}\n{err}"));
    }
    panic!("{}", outputs.join("\n"));
}

/// The device the tests run on: the first of the first platform (PoCL in CI), or, where
/// `PINSTREAM_TEST_DEVICE_NAME` is set (scripts/gpu-tests.sh sets `NVIDIA`), the first device
/// of any platform whose name contains it: on the GPU machine CUDA's loader lists PoCL first.
fn test_device() -> cl_device_id {
    let platforms = cl3::platform::get_platform_ids().expect("an OpenCL platform (PoCL in CI)");
    let devices = |p| cl3::device::get_device_ids(p, cl3::device::CL_DEVICE_TYPE_ALL);
    let Ok(want) = std::env::var("PINSTREAM_TEST_DEVICE_NAME") else {
        return devices(platforms[0]).expect("an OpenCL device")[0];
    };
    let named = |d: &cl_device_id| {
        cl3::device::get_device_info(*d, cl3::device::CL_DEVICE_NAME)
            .map(|n| String::from(n).contains(&want))
            .unwrap_or(false)
    };
    let all = platforms
        .iter()
        .flat_map(|&p| devices(p).unwrap_or_default());
    all.into_iter()
        .find(named)
        .unwrap_or_else(|| panic!("no OpenCL device named like PINSTREAM_TEST_DEVICE_NAME={want}"))
}

/// Whether `cl`'s device is a CPU device (PoCL), where the engine's bounds guard is on by
/// default (`BoundsCheck::Auto`).
pub fn on_cpu_device(cl: &Cl) -> bool {
    let t = cl3::device::get_device_info(cl.device, cl3::device::CL_DEVICE_TYPE)
        .map(u64::from)
        .unwrap_or(0);
    t & cl3::device::CL_DEVICE_TYPE_CPU != 0
}

/// Skips the calling test visibly (`pinstream_testkit::skip`: reported, counted by
/// scripts/gpu-tests.sh, never a pass).
#[allow(unused_imports)] // each test binary includes this module; not all of them skip
pub use pinstream_testkit::skip;
