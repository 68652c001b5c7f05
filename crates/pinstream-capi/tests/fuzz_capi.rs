//! Random calls of the C API from several threads at once, as a careless or hostile
//! program makes them: psHostAlloc / psHostFree / psHostRegister / psHostUnregister /
//! psHostGetInfo / psHostGetDeviceBuffer and the batched copies, with NULL and odd pointers, sizes from 0 to
//! `usize::MAX`, flags the calls do not take, NULL arrays and ranges past the buffer.
//!
//! Every call must return a known code (no crash, no panic across the boundary) and the
//! whole run must end within a time limit (no hang). What succeeds must be right: an
//! allocation is writable over its whole size, a registration leaves the memory's bytes
//! alone, psHostGetInfo describes the range, a batched upload lands (checked against a
//! shadow copy of each thread's buffer) and a batched download returns those bytes. At the
//! end nothing is left: every pointer is unknown to psHostGetInfo again and the context's
//! reference count is back to the test's own.
//!
//! The seed is printed; `PINSTREAM_FUZZ_SEED=N` replays a run.

mod common;
mod fuzzing;

use common::{release, Cl, Raw};
use fuzzing::detail;
use pinstream_capi::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ffi::c_void;
use std::ptr;
use std::time::{Duration, Instant};

const THREADS: usize = 4;
const CALLS: usize = 400;
/// Each thread's device buffer.
const BUF: usize = 64 << 10;
const LIMIT: Duration = Duration::from_secs(120);

/// An allocation psHostAlloc returned: its start, length and fill byte.
struct Alloc(usize, usize, u8);

/// Memory the thread registered: the backing bytes, and the registered range in them.
struct Reg {
    mem: Vec<u8>,
    at: usize,
    len: usize,
}

impl Reg {
    fn ptr(&mut self) -> *mut c_void {
        self.mem[self.at..].as_mut_ptr().cast()
    }
}

/// One thread's view: its queue and buffer, what it holds, and the buffer's expected bytes.
struct Fuzz {
    rng: SmallRng,
    ctx: cl_context,
    queue: cl_command_queue,
    buf: cl_mem,
    shadow: Vec<u8>,
    allocs: Vec<Alloc>,
    regs: Vec<Reg>,
    /// Every pointer a call handed out or took, for the final check.
    seen: Vec<usize>,
    /// A user event the queue waits on (a marker behind it) while a batch call is made:
    /// the call must return before it is set.
    gate: Option<cl_event>,
}

/// Successful calls, all threads together (the run says how many, so that a run whose
/// calls all fail is seen).
static SUCCESSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A known code, with a detail whenever it is not success.
fn known(call: &str, code: psError_t) -> psError_t {
    if code == PS_SUCCESS {
        SUCCESSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fuzzing::known(call, code, PS_ERROR_NOT_MAPPED)
}

fn pick<T: Copy>(rng: &mut SmallRng, from: &[T]) -> T {
    from[rng.gen_range(0..from.len())]
}

impl Fuzz {
    fn step(&mut self) {
        match self.rng.gen_range(0..8) {
            0 => self.alloc(),
            1 => self.free(),
            2 => self.register(),
            3 => self.unregister(),
            4 => self.info(),
            5 => self.gated(Self::upload),
            6 => self.device_buffer(),
            _ => self.gated(Self::download),
        }
    }

    /// `call`, a third of the time with the queue held back by a user event until the
    /// batch call has returned.
    fn gated(&mut self, call: fn(&mut Self)) {
        if self.rng.gen_bool(0.3) {
            let gate = cl3::event::create_user_event(self.ctx.cast()).expect("clCreateUserEvent");
            // SAFETY: a live queue; one live event in the wait list.
            let marker =
                unsafe { cl3::command_queue::enqueue_marker_with_wait_list(self.queue, 1, &gate) };
            release(marker.expect("clEnqueueMarkerWithWaitList"));
            self.gate = Some(gate);
        }
        call(self);
        self.open_gate();
    }

    /// Sets the gate, if any (the batch call has returned: waiting for its event is next).
    fn open_gate(&mut self) {
        if let Some(gate) = self.gate.take() {
            cl3::event::set_user_event_status(gate, 0).expect("clSetUserEventStatus");
            release(gate);
        }
    }

    fn alloc(&mut self) {
        let sizes = [0, 1, 7, 4096, 65537, 1 << 20, 1 << 62, usize::MAX];
        let bytes = pick(&mut self.rng, &sizes);
        let flags = pick(&mut self.rng, &[0, 0, 1, 6, 7, 8, 0x100, u32::MAX]);
        let ctx = if self.rng.gen_bool(0.1) {
            ptr::null_mut()
        } else {
            self.ctx
        };
        let mut p: *mut c_void = ptr::null_mut();
        let out = if self.rng.gen_bool(0.1) {
            ptr::null_mut()
        } else {
            &mut p as *mut _
        };
        // SAFETY: `ctx` is NULL or live; `out` is NULL or writable.
        let code = known("psHostAlloc", unsafe {
            psHostAlloc(ctx, bytes, flags, out)
        });
        if code != PS_SUCCESS {
            return;
        }
        assert!(!p.is_null() && !ctx.is_null() && bytes > 0 && bytes < 1 << 30);
        let fill = self.rng.gen();
        // SAFETY: psHostAlloc returned `bytes` writable bytes at `p`.
        let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), bytes) };
        mem.fill(fill);
        self.seen.push(p as usize);
        self.allocs.push(Alloc(p as usize, bytes, fill));
    }

    fn free(&mut self) {
        let choice = self.rng.gen_range(0..4);
        if choice == 0 && !self.allocs.is_empty() {
            let Alloc(p, len, fill) = self
                .allocs
                .swap_remove(self.rng.gen_range(0..self.allocs.len()));
            // SAFETY: still allocated: the bytes this thread wrote.
            let mem = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
            assert!(
                mem.iter().all(|&b| b == fill),
                "an allocation's bytes changed"
            );
            assert_eq!(
                known("psHostFree", psHostFree(p as *mut c_void)),
                PS_SUCCESS
            );
            return;
        }
        // Never another thread's range: an interior pointer of our own, NULL, a low
        // address nothing maps, the stack.
        let local = 0u64;
        let interior = self.allocs.iter().find(|a| a.1 > 1).map(|a| a.0 + 1);
        let target = match choice {
            1 => interior.unwrap_or(0x11),
            2 => 0x11,
            _ => &local as *const u64 as usize,
        };
        assert_ne!(
            known("psHostFree", psHostFree(target as *mut c_void)),
            PS_SUCCESS
        );
        assert_ne!(known("psHostFree", psHostFree(ptr::null_mut())), PS_SUCCESS);
    }

    fn register(&mut self) {
        let len = pick(&mut self.rng, &[0, 1, 100, 4096, 12345, 1 << 20]);
        let at = self.rng.gen_range(0..64);
        let byte = self.rng.gen();
        let mut reg = Reg {
            mem: vec![byte; len + 64],
            at,
            len,
        };
        let flags = pick(&mut self.rng, &[0, 0, 0, 1]);
        let p = match self.rng.gen_range(0..10) {
            0 => ptr::null_mut(),
            1 => 0x10 as *mut c_void, // the first page: never mapped
            _ => reg.ptr(),
        };
        // SAFETY: `p` is NULL, unmapped, or `len` bytes of `reg.mem`, kept until unregistered.
        let code = known("psHostRegister", unsafe {
            psHostRegister(self.ctx, p, len, flags)
        });
        if code == PS_SUCCESS {
            assert!(p == reg.ptr() && len > 0 && flags == 0);
            assert!(
                reg.mem.iter().all(|&b| b == byte),
                "registration changed the bytes"
            );
            self.seen.push(p as usize);
            self.regs.push(reg);
        }
    }

    fn unregister(&mut self) {
        if !self.regs.is_empty() && self.rng.gen_bool(0.5) {
            let i = self.rng.gen_range(0..self.regs.len());
            let inner = self.regs[i].ptr().cast::<u8>().wrapping_add(1).cast();
            if self.regs[i].len > 1 {
                assert_ne!(
                    known("psHostUnregister", psHostUnregister(inner)),
                    PS_SUCCESS
                );
            }
            let mut reg = self.regs.swap_remove(i);
            assert_eq!(
                known("psHostUnregister", psHostUnregister(reg.ptr())),
                PS_SUCCESS
            );
            return;
        }
        if let Some(a) = self.allocs.first() {
            // Allocated, not registered.
            assert_ne!(
                known("psHostUnregister", psHostUnregister(a.0 as *mut c_void)),
                PS_SUCCESS
            );
        }
        assert_ne!(
            known("psHostUnregister", psHostUnregister(ptr::null_mut())),
            PS_SUCCESS
        );
    }

    fn info(&mut self) {
        let mut ranges: Vec<(usize, usize)> = self.allocs.iter().map(|a| (a.0, a.1)).collect();
        ranges.extend(self.regs.iter_mut().map(|r| (r.ptr() as usize, r.len)));
        let (start, len) = match ranges.is_empty() {
            true => (0x11, 0),
            false => pick(&mut self.rng, &ranges),
        };
        let at = start
            + if len > 0 {
                self.rng.gen_range(0..len)
            } else {
                0
            };
        let mut info = std::mem::MaybeUninit::<psHostInfo>::uninit();
        let out = if self.rng.gen_bool(0.1) {
            ptr::null_mut()
        } else {
            info.as_mut_ptr()
        };
        // SAFETY: `out` is NULL or a writable psHostInfo.
        let code = known("psHostGetInfo", unsafe {
            psHostGetInfo(at as *const c_void, out)
        });
        if out.is_null() || len == 0 {
            assert_ne!(code, PS_SUCCESS);
            return;
        }
        assert_eq!(code, PS_SUCCESS, "{}", detail());
        // SAFETY: filled by the successful call.
        let info = unsafe { info.assume_init() };
        assert_eq!((info.base as usize, info.bytes), (start, len));
    }

    /// psHostGetDeviceBuffer of an address inside a block (or a foreign one), with outputs
    /// that may be NULL: a buffer and the address's offset for mapped memory, refusals else.
    fn device_buffer(&mut self) {
        let ranges: Vec<(usize, usize)> = self.allocs.iter().map(|a| (a.0, a.1)).collect();
        let (start, len) = match ranges.is_empty() || self.rng.gen_bool(0.1) {
            true => (0x11, 0),
            false => pick(&mut self.rng, &ranges),
        };
        let at = start + self.rng.gen_range(0..len.max(1));
        let (mut buf, mut off): (cl_mem, usize) = (ptr::null_mut(), 7);
        let null_out = self.rng.gen_bool(0.1);
        let out = if null_out {
            ptr::null_mut()
        } else {
            &mut buf as *mut _
        };
        // SAFETY: `out` is NULL or a writable cl_mem; `off` a writable size_t.
        let code = known("psHostGetDeviceBuffer", unsafe {
            psHostGetDeviceBuffer(at as *const c_void, out, &mut off)
        });
        let mut info = std::mem::MaybeUninit::<psHostInfo>::uninit();
        // SAFETY: a writable psHostInfo.
        let mapped = unsafe { psHostGetInfo(at as *const c_void, info.as_mut_ptr()) }
            == PS_SUCCESS
            // SAFETY: filled by the successful call.
            && unsafe { info.assume_init() }.mapped == 1;
        let want = match (null_out, len, mapped) {
            (true, _, _) => PS_ERROR_INVALID_VALUE,
            (_, 0, _) => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            (_, _, false) => PS_ERROR_NOT_MAPPED,
            _ => PS_SUCCESS,
        };
        assert_eq!(code, want, "{}", detail());
        if code == PS_SUCCESS {
            assert!(
                !buf.is_null() && off == at - start,
                "{off} for {at:#x} in {start:#x}"
            );
            // SAFETY: the reference psHostGetDeviceBuffer handed out, released once.
            unsafe { cl3::memory::release_mem_object(buf.cast()) }.unwrap();
        }
    }

    /// Random pieces: (device offset, length), mostly inside the buffer, some past it.
    fn pieces(&mut self) -> Vec<(usize, usize)> {
        let count = pick(&mut self.rng, &[0, 1, 2, 5, 9]);
        (0..count)
            .map(|_| {
                let len = pick(&mut self.rng, &[0, 1, 3, 100, 4096, 5000]);
                let past = self.rng.gen_bool(0.05);
                let end = if past { BUF + 200 } else { BUF - len.min(BUF) };
                (self.rng.gen_range(0..=end), len)
            })
            .collect()
    }

    /// NULL (sometimes) or the array.
    fn maybe<T>(&mut self, v: &[T]) -> *const T {
        if self.rng.gen_bool(0.05) {
            ptr::null()
        } else {
            v.as_ptr()
        }
    }

    fn queue(&mut self) -> cl_command_queue {
        if self.rng.gen_bool(0.05) {
            ptr::null_mut()
        } else {
            self.queue
        }
    }

    fn upload(&mut self) {
        let pieces = self.pieces();
        let data: Vec<Vec<u8>> = pieces
            .iter()
            .map(|&(_, n)| (0..n).map(|_| self.rng.gen()).collect())
            .collect();
        let mut srcs: Vec<*const c_void> = data.iter().map(|d| d.as_ptr().cast()).collect();
        if !srcs.is_empty() && self.rng.gen_bool(0.05) {
            srcs[0] = ptr::null();
        }
        let offs: Vec<usize> = pieces.iter().map(|p| p.0).collect();
        let sizes: Vec<usize> = pieces.iter().map(|p| p.1).collect();
        let (q, o, s, z) = (
            self.queue(),
            self.maybe(&offs),
            self.maybe(&srcs),
            self.maybe(&sizes),
        );
        let mut ev: cl_event = ptr::null_mut();
        // SAFETY: `q` NULL or live, the buffer live; arrays NULL or of `len` entries;
        // every non-NULL source readable for its size.
        let code = unsafe { psMemcpyBatchHtoDAsync(q, self.buf, o, s, z, pieces.len(), &mut ev) };
        self.open_gate();
        if known("psMemcpyBatchHtoDAsync", code) != PS_SUCCESS {
            return;
        }
        cl3::event::wait_for_events(&[ev]).expect("the upload's event completes");
        release(ev);
        for (&(off, n), d) in pieces.iter().zip(&data) {
            self.shadow[off..off + n].copy_from_slice(d);
        }
    }

    fn download(&mut self) {
        let pieces = self.pieces();
        let mut got: Vec<Vec<u8>> = pieces.iter().map(|&(_, n)| vec![0u8; n]).collect();
        let dsts: Vec<*mut c_void> = got.iter_mut().map(|d| d.as_mut_ptr().cast()).collect();
        let offs: Vec<usize> = pieces.iter().map(|p| p.0).collect();
        let sizes: Vec<usize> = pieces.iter().map(|p| p.1).collect();
        let (q, o, d, z) = (
            self.queue(),
            self.maybe(&offs),
            self.maybe(&dsts),
            self.maybe(&sizes),
        );
        let mut ev: cl_event = ptr::null_mut();
        let out = if self.rng.gen_bool(0.2) {
            ptr::null_mut()
        } else {
            &mut ev as *mut _
        };
        // SAFETY: as in `upload`; the destinations are kept and untouched until the copies
        // are done (the event, or clFinish when no event was asked for).
        let code = unsafe { psMemcpyBatchDtoHAsync(q, d, self.buf, o, z, pieces.len(), out) };
        self.open_gate();
        if known("psMemcpyBatchDtoHAsync", code) != PS_SUCCESS {
            return;
        }
        match out.is_null() {
            true => cl3::command_queue::finish(self.queue).expect("clFinish"),
            false => {
                cl3::event::wait_for_events(&[ev]).expect("the download's event completes");
                release(ev);
            }
        }
        for (&(off, n), g) in pieces.iter().zip(&got) {
            assert!(
                g[..] == self.shadow[off..off + n],
                "a downloaded piece differs"
            );
        }
    }

    /// Releases everything the thread still holds.
    fn finish(mut self) -> Vec<usize> {
        for Alloc(p, ..) in self.allocs.drain(..) {
            assert_eq!(psHostFree(p as *mut c_void), PS_SUCCESS, "{}", detail());
        }
        for mut r in std::mem::take(&mut self.regs) {
            assert_eq!(psHostUnregister(r.ptr()), PS_SUCCESS, "{}", detail());
        }
        self.seen
    }
}

/// One thread's run; its pointers.
fn run(seed: u64, cl: Raw, queue: Raw, buf: Raw) -> Vec<usize> {
    let mut f = Fuzz {
        rng: SmallRng::seed_from_u64(seed),
        ctx: { cl }.0,
        queue: { queue }.0,
        buf: { buf }.0,
        shadow: vec![0u8; BUF],
        allocs: Vec::new(),
        regs: Vec::new(),
        seen: Vec::new(),
        gate: None,
    };
    for _ in 0..CALLS {
        f.step();
    }
    f.finish()
}

fn context_refcount(ctx: cl_context) -> u32 {
    match cl3::context::get_context_info(ctx.cast(), cl3::context::CL_CONTEXT_REFERENCE_COUNT) {
        Ok(cl3::info_type::InfoType::Uint(n)) => n,
        other => panic!("clGetContextInfo: {other:?}"),
    }
}

#[test]
fn random_calls_from_several_threads_return_codes_end_and_leave_nothing() {
    let seed = fuzzing::seed();
    let cl = Cl::new();
    let base = context_refcount(cl.ctx.cast());
    let queues: Vec<_> = (0..THREADS)
        .map(|_| common::queue(cl.ctx, cl.device, 0))
        .collect();
    let bufs: Vec<_> = (0..THREADS)
        .map(|_| cl.buffer(cl3::memory::CL_MEM_READ_WRITE, BUF))
        .collect();
    let mut runs: Vec<fuzzing::Work<Vec<usize>>> = Vec::new();
    for t in 0..THREADS {
        let (c, q, b) = (Raw(cl.ctx.cast()), Raw(queues[t]), Raw(bufs[t].0));
        // Zero the buffer first: the shadow starts at zero.
        cl3::command_queue::finish(queues[t]).unwrap();
        common::write(queues[t], bufs[t].0, &[0u8; BUF]);
        runs.push(Box::new(move |seed| run(seed, c, q, b)));
    }
    let seen = fuzzing::threads(seed, LIMIT, runs).concat();
    let ok = SUCCESSES.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{ok} of about {} calls succeeded", THREADS * CALLS);
    assert!(
        ok >= THREADS * CALLS / 5,
        "too few calls succeeded to test what success gives"
    );
    for p in seen {
        let mut info = std::mem::MaybeUninit::<psHostInfo>::uninit();
        // SAFETY: a writable psHostInfo; `p` is only looked up.
        let code = unsafe { psHostGetInfo(p as *const c_void, info.as_mut_ptr()) };
        assert_eq!(
            code, PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            "{p:#x} still known after every release"
        );
    }
    assert_eq!(psMemcpyBatchRelease(cl.ctx.cast()), PS_SUCCESS);
    for q in queues {
        // SAFETY: the queues made above, released once.
        let _ = unsafe { cl3::command_queue::release_command_queue(q) };
    }
    drop(bufs);
    let settled = Instant::now() + Duration::from_secs(10);
    while context_refcount(cl.ctx.cast()) > base && Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        context_refcount(cl.ctx.cast()),
        base,
        "pinstream kept references to the context (seed {seed})"
    );
}
