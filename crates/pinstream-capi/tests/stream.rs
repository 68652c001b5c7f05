//! The psStream* calls through their extern "C" functions, as a C program makes them, on the
//! first OpenCL device (PoCL in CI): every kind of job with exact results, passes with and
//! without residency, the refusals, async runs with their event, a cancel mid-run and a fault
//! injected at each stage. Each test ends with the stream destroyed, the pinned memory freed
//! and the context's reference count back to the test's own (nothing of pinstream's left).

mod common;
mod streams;

use common::{context_refcount, Cl};
use pinstream_capi::*;
use std::ffi::{c_void, CString};
use std::ptr;
use streams::{
    detail, each_fault_fails_the_run, in_place_exact, ok, passes_with_and_without_residency,
    seeded, step_cpu, Pinned, S,
};

const STEP: &str = "__kernel void seed_step(__global uint* d, ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) d[i] = d[i] * 2654435761u + 12345u; }";

/// Memory of `words` u32 from psHostAlloc ([`Pinned`] frees it when dropped).
impl Pinned {
    fn new(cl: &Cl, words: usize) -> Pinned {
        let mut p = ptr::null_mut();
        // SAFETY: a live context and a writable pointer.
        ok(
            unsafe { psHostAlloc(cl.ctx.cast(), words * 4, 0, &mut p) },
            "psHostAlloc",
        );
        Pinned(p, words, psHostFree)
    }
}

/// A stream on `cl`'s context ([`S`] is destroyed when dropped).
impl S {
    fn new(cl: &Cl, budget: usize, block: usize) -> S {
        let mut s = ptr::null_mut();
        // SAFETY: a live context, no queue.
        ok(
            unsafe { psStreamCreate(&mut s, cl.ctx.cast(), ptr::null_mut(), budget, block) },
            "psStreamCreate",
        );
        S(s)
    }
    fn kernel(&self, k: &common::Kern) {
        // SAFETY: a live kernel.
        ok(
            unsafe { psStreamSetKernel(self.0, k.0.cast()) },
            "psStreamSetKernel",
        );
    }
}

#[test]
fn in_place_passes_with_and_without_residency_are_exact() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let k = cl.kernel(STEP, "seed_step");
        let mut data = Pinned::new(&cl, 64 << 10); // 256 KiB
        let s = S::new(&cl, 256 << 10, 16 << 10);
        s.kernel(&k);
        passes_with_and_without_residency(&s, &mut data, |_| {});
        let mut got = psStreamReport::default();
        // SAFETY: a writable report.
        ok(
            unsafe { psStreamGetReport(s.0, &mut got) },
            "psStreamGetReport",
        );
        assert_eq!(got.passes, 5);
    }
    assert_eq!(
        context_refcount(cl.ctx),
        base,
        "pinstream left references to the context"
    );
}

#[test]
fn inputs_to_an_output_with_a_resident_and_a_scalar() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let src =
            "__kernel void axpy(__global const uint* a, __global const uint* b, __global uint* c,
                       __global const uint* w, ulong n, uint k) {
            size_t i = get_global_id(0); if (i < n) c[i] = a[i] + k * b[i] + w[i % 16]; }";
        let k = cl.kernel(src, "axpy");
        let words = 20_000;
        let (mut a, mut b, mut c, mut w) = (
            Pinned::new(&cl, words),
            Pinned::new(&cl, words),
            Pinned::new(&cl, words),
            Pinned::new(&cl, 16),
        );
        a.words().copy_from_slice(&seeded(words));
        b.words()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as u32);
        w.words()
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = 1000 * i as u32);
        let s = S::new(&cl, 128 << 10, 8 << 10);
        s.kernel(&k);
        ok(psStreamAddInput(s.0, a.0, a.bytes()), "input a");
        ok(psStreamAddInput(s.0, b.0, b.bytes()), "input b");
        ok(psStreamSetOutput(s.0, c.0, c.bytes(), 1), "output");
        ok(psStreamAddResident(s.0, w.0, w.bytes()), "resident");
        ok(
            psStreamSetTypes(
                s.0,
                psDType::PS_DTYPE_U32 as u32,
                psDType::PS_DTYPE_U32 as u32,
            ),
            "types",
        );
        s.arg("k", "3");
        let r = s
            .run(1, PS_RESIDENCY_AUTO)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(r.resident_bytes, 64);
        let (aw, bw, ww) = (a.words().to_vec(), b.words().to_vec(), w.words().to_vec());
        for (i, &got) in c.words().iter().enumerate() {
            let want = aw[i]
                .wrapping_add(3u32.wrapping_mul(bw[i]))
                .wrapping_add(ww[i % 16]);
            assert_eq!(got, want, "c[{i}]");
        }
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

#[test]
fn k_inputs_per_output() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let src = "__kernel void sum4(__global const uint* x, __global uint* y, ulong n) {
            size_t i = get_global_id(0);
            if (i < n / 4) y[i] = x[4*i] + x[4*i+1] + x[4*i+2] + x[4*i+3]; }";
        let k = cl.kernel(src, "sum4");
        let words = 32 << 10;
        let (mut x, mut y) = (Pinned::new(&cl, words), Pinned::new(&cl, words / 4));
        x.words().copy_from_slice(&seeded(words));
        let s = S::new(&cl, 64 << 10, 8 << 10);
        s.kernel(&k);
        ok(psStreamAddInput(s.0, x.0, x.bytes()), "input");
        ok(psStreamSetOutput(s.0, y.0, y.bytes(), 4), "output");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        s.run(1, PS_RESIDENCY_OFF)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let xs = x.words().to_vec();
        for (i, &got) in y.words().iter().enumerate() {
            let want = xs[4 * i..4 * i + 4]
                .iter()
                .fold(0u32, |s, &v| s.wrapping_add(v));
            assert_eq!(got, want, "y[{i}]");
        }
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

#[test]
fn refusals_name_the_fix_and_leave_the_context_usable() {
    let cl = Cl::new();
    let other = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let k = cl.kernel(STEP, "seed_step");
        let s = S::new(&cl, 64 << 10, 8 << 10);
        // No kernel yet.
        let mut plain = vec![1u32; 4096];
        ok(
            psStreamSetInPlace(s.0, plain.as_mut_ptr().cast(), 4 * 4096),
            "set",
        );
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        assert_eq!(
            s.run(1, PS_RESIDENCY_AUTO).unwrap_err().0,
            PS_ERROR_INVALID_VALUE
        );
        s.kernel(&k);
        // Unpinned memory.
        let (code, why) = s.run(1, PS_RESIDENCY_AUTO).unwrap_err();
        assert_eq!(code, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "{why}");
        assert!(why.contains("psHostRegister"), "{why}");
        assert!(plain.iter().all(|&x| x == 1));
        // A kernel of another context.
        let foreign = other.kernel(STEP, "seed_step");
        // SAFETY: a live kernel.
        let code = unsafe { psStreamSetKernel(s.0, foreign.0.cast()) };
        assert_eq!(code, PS_ERROR_INVALID_KERNEL);
        assert!(detail().contains("another context"), "{}", detail());
        // A kernel whose arguments do not fit an in-place job.
        let two = cl.kernel(
            "__kernel void two(__global uint* a, __global uint* b, ulong n) {}",
            "two",
        );
        s.kernel(&two);
        let mut data = Pinned::new(&cl, 4096);
        ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
        assert_eq!(
            s.run(1, PS_RESIDENCY_AUTO).unwrap_err().0,
            PS_ERROR_INVALID_KERNEL
        );
        // A range running past its pinned block.
        ok(psStreamSetInPlace(s.0, data.0, data.bytes() + 4), "set");
        s.kernel(&k);
        assert_eq!(
            s.run(1, PS_RESIDENCY_AUTO).unwrap_err().0,
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED
        );
        // Still usable.
        in_place_exact(&s, &mut data, 2, PS_RESIDENCY_AUTO);
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

#[test]
fn an_async_run_completes_its_event_and_a_cancel_stops_one() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let k = cl.kernel(STEP, "seed_step");
        let mut data = Pinned::new(&cl, 64 << 10);
        let start = seeded(data.1);
        data.words().copy_from_slice(&start);
        let s = S::new(&cl, 64 << 10, 4 << 10);
        s.kernel(&k);
        ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        let mut ev = ptr::null_mut();
        // SAFETY: a writable event.
        ok(
            unsafe { psStreamRunAsync(s.0, 3, PS_RESIDENCY_OFF, &mut ev) },
            "async",
        );
        assert_eq!(cl3::event::wait_for_events(&[ev.cast()]), Ok(()));
        assert_eq!(common::status(ev.cast()), 0);
        common::release(ev.cast());
        let want: Vec<u32> = start
            .iter()
            .map(|&x| step_cpu(step_cpu(step_cpu(x))))
            .collect();
        assert!(data.words() == want.as_slice());
        ok(psStreamSynchronize(s.0), "sync");
        // A long run, cancelled mid-way.
        // SAFETY: a writable event.
        ok(
            unsafe { psStreamRunAsync(s.0, 200, PS_RESIDENCY_OFF, &mut ev) },
            "async",
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        ok(psStreamCancel(s.0), "cancel");
        let _ = cl3::event::wait_for_events(&[ev.cast()]);
        assert_eq!(common::status(ev.cast()), -PS_ERROR_CANCELLED);
        common::release(ev.cast());
        assert_eq!(psStreamSynchronize(s.0), PS_ERROR_CANCELLED);
        assert_eq!(psStreamSynchronize(s.0), PS_SUCCESS);
        // The stream and the context carry on.
        in_place_exact(&s, &mut data, 1, PS_RESIDENCY_AUTO);
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

#[test]
fn a_fault_at_each_stage_fails_the_run_and_leaves_everything_usable() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let k = cl.kernel(STEP, "seed_step");
        let mut data = Pinned::new(&cl, 16 << 10);
        let s = S::new(&cl, 32 << 10, 4 << 10);
        s.kernel(&k);
        each_fault_fails_the_run(&s, &mut data, |what, code, why| {
            assert_ne!(code, PS_ERROR_INTERNAL, "{what}: {why}");
            assert!(why.contains("CL_OUT_OF_RESOURCES"), "{what}: {why}");
        });
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

#[test]
fn a_queue_picks_the_device_and_bad_handles_are_refused() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    let mut s = ptr::null_mut();
    // SAFETY: a live context and queue.
    ok(
        unsafe { psStreamCreate(&mut s, cl.ctx.cast(), cl.queue.cast(), 1 << 20, 1 << 16) },
        "create",
    );
    ok(psStreamDestroy(s), "destroy");
    assert_eq!(psStreamDestroy(s), PS_ERROR_INVALID_VALUE);
    assert_eq!(psStreamCancel(s), PS_ERROR_INVALID_VALUE);
    assert_eq!(psStreamCancel(0x1234 as psStream_t), PS_ERROR_INVALID_VALUE);
    assert_eq!(psStreamSynchronize(ptr::null_mut()), PS_ERROR_INVALID_VALUE);
    // SAFETY: a live context; sizes refused before anything is made.
    unsafe {
        assert_eq!(
            psStreamCreate(&mut s, cl.ctx.cast(), ptr::null_mut(), 1 << 10, 1 << 20),
            PS_ERROR_INVALID_VALUE
        );
        assert!(s.is_null());
        assert_eq!(
            psStreamCreate(&mut s, ptr::null_mut(), ptr::null_mut(), 1 << 20, 1 << 10),
            PS_ERROR_INVALID_CONTEXT
        );
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

/// A queue on the second of two devices picks the device the stream runs on (its runs are
/// exact there); an out-of-order queue and one of another context are refused.
#[test]
#[cfg_attr(
    windows,
    ignore = "under Wine a child process's POCL_DEVICES does not reach PoCL"
)]
fn a_queue_on_the_second_of_two_devices_runs_the_stream_there() {
    if common::in_two_device_child("a_queue_on_the_second_of_two_devices_runs_the_stream_there") {
        return;
    }
    let platform = cl3::platform::get_platform_ids().unwrap()[0];
    let devices = cl3::device::get_device_ids(platform, cl3::device::CL_DEVICE_TYPE_ALL).unwrap();
    assert_eq!(devices.len(), 2, "POCL_DEVICES gives two devices");
    let ctx = cl3::context::create_context(&devices, ptr::null(), None, ptr::null_mut()).unwrap();
    let cl = Cl {
        ctx,
        device: devices[1],
        queue: common::queue(ctx, devices[1], 0),
    };
    let base = context_refcount(cl.ctx);
    {
        let k = cl.kernel(STEP, "seed_step");
        let mut data = Pinned::new(&cl, 16 << 10);
        let mut s = ptr::null_mut();
        // SAFETY: a live context and queue.
        let code =
            unsafe { psStreamCreate(&mut s, ctx.cast(), cl.queue.cast(), 64 << 10, 8 << 10) };
        ok(code, "psStreamCreate");
        let s = S(s);
        s.kernel(&k);
        in_place_exact(&s, &mut data, 2, PS_RESIDENCY_AUTO);
        let ooo = common::queue(
            ctx,
            devices[0],
            cl3::command_queue::CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE,
        );
        let other = Cl::new();
        let mut t = ptr::null_mut();
        // SAFETY: live contexts and queues.
        unsafe {
            let code = psStreamCreate(&mut t, ctx.cast(), ooo.cast(), 64 << 10, 8 << 10);
            assert_eq!(code, PS_ERROR_NOT_SUPPORTED, "{}", detail());
            let code = psStreamCreate(&mut t, ctx.cast(), other.queue.cast(), 64 << 10, 8 << 10);
            assert_eq!(code, PS_ERROR_INVALID_VALUE, "{}", detail());
            let _ = cl3::command_queue::release_command_queue(ooo);
        }
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

/// A range the run writes (in place, the output) that overlaps another range of the job is
/// refused before anything runs, the detail naming both ranges and the fix; read ranges may
/// overlap each other.
#[test]
fn a_written_range_overlapping_another_is_refused_naming_both() {
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    {
        let src = "__kernel void add(__global const uint* a, __global uint* c,
                       __global const uint* w, ulong n) {
            size_t i = get_global_id(0); if (i < n) c[i] = a[i] + w[0]; }";
        let k = cl.kernel(src, "add");
        let mut block = Pinned::new(&cl, 8192);
        block.words().fill(1);
        let base_ptr = block.0.cast::<u32>();
        let at = |word: usize| base_ptr.wrapping_add(word).cast::<c_void>();
        let s = S::new(&cl, 64 << 10, 8 << 10);
        s.kernel(&k);
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        // The output's last word is the input's first.
        ok(psStreamAddInput(s.0, at(4095), 4096 * 4), "input");
        ok(psStreamSetOutput(s.0, at(0), 4096 * 4, 1), "output");
        ok(psStreamAddResident(s.0, at(8191), 4), "resident");
        let (code, why) = s.run(1, PS_RESIDENCY_AUTO).unwrap_err();
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "{why}");
        let (input, output) = (at(4095) as usize, at(0) as usize);
        for want in [
            "psStreamRun: ",
            &format!("the output (psStreamSetOutput) at {output:#x}, 16384 bytes"),
            &format!("input 0 (psStreamAddInput) at {input:#x}, 16384 bytes"),
            "memory of its own",
        ] {
            assert!(why.contains(want), "`{want}` missing: {why}");
        }
        let mut ev = ptr::null_mut();
        // SAFETY: a writable event.
        let code = unsafe { psStreamRunAsync(s.0, 1, PS_RESIDENCY_AUTO, &mut ev) };
        assert_eq!(code, PS_ERROR_INVALID_VALUE);
        assert!(
            ev.is_null() && detail().contains("overlaps"),
            "{}",
            detail()
        );
        assert!(block.words().iter().all(|&x| x == 1), "a refused run wrote");
        // A resident inside the in-place range.
        ok(psStreamResetJob(s.0), "reset");
        s.kernel(&cl.kernel(STEP, "seed_step"));
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        ok(psStreamSetInPlace(s.0, at(0), 4096 * 4), "in place");
        ok(psStreamAddResident(s.0, at(100), 4), "resident");
        let (code, why) = s.run(1, PS_RESIDENCY_AUTO).unwrap_err();
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "{why}");
        assert!(
            why.contains("the in-place range (psStreamSetInPlace)")
                && why.contains("resident 0 (psStreamAddResident)"),
            "{why}"
        );
        // Side by side in one block, and inputs that overlap each other: both run.
        ok(psStreamResetJob(s.0), "reset");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        s.kernel(&k);
        ok(psStreamAddInput(s.0, at(0), 2048 * 4), "input");
        ok(psStreamSetOutput(s.0, at(2048), 2048 * 4, 1), "output");
        ok(
            psStreamAddResident(s.0, at(1), 4),
            "resident overlapping the input",
        );
        s.run(1, PS_RESIDENCY_AUTO)
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(block.words()[2048..4096].iter().all(|&x| x == 2));
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

/// What a callback of a run's event saw on the thread the driver ran it on.
struct Probe {
    stream: psStream_t,
    told: std::sync::Mutex<Option<std::sync::mpsc::Sender<Seen>>>,
}

/// The callback's thread, the codes of psStreamSynchronize, psStreamRun and psStreamDestroy
/// with their details, and psStreamRunAsync's code and event.
struct Seen {
    thread: Option<String>,
    refused: Vec<(psError_t, String)>,
    chained: (psError_t, usize),
}

extern "C" fn call_the_stream(_: cl3::types::cl_event, _: i32, user: *mut c_void) {
    // SAFETY: the test keeps the probe alive until the callback has told it what it saw.
    let probe = unsafe { &*user.cast::<Probe>() };
    let s = probe.stream;
    let mut refused = Vec::new();
    refused.push((psStreamSynchronize(s), detail()));
    // PoCL calls it on the thread that set the status, the stream's worker; NVIDIA on a thread
    // of its own, where psStreamRun and psStreamDestroy would be ordinary calls (and the
    // latter would destroy the stream the test goes on with): they are made on the worker only.
    if std::thread::current().name() == Some("pinstream-stream") {
        // SAFETY: no report.
        refused.push((
            unsafe { psStreamRun(s, 1, PS_RESIDENCY_AUTO, ptr::null_mut()) },
            detail(),
        ));
        refused.push((psStreamDestroy(s), detail()));
    }
    let mut ev = ptr::null_mut();
    // SAFETY: a writable event.
    let code = unsafe { psStreamRunAsync(s, 1, PS_RESIDENCY_AUTO, &mut ev) };
    let seen = Seen {
        thread: std::thread::current().name().map(str::to_owned),
        refused,
        chained: (code, ev as usize),
    };
    if let Some(tx) = probe.told.lock().unwrap().take() {
        let _ = tx.send(seen);
    }
}

/// The calls that wait for the stream's worker, made in a callback the worker runs (PoCL runs
/// a user event's callbacks on the thread that sets its status), are refused with a code
/// instead of waiting for themselves; psStreamRunAsync, which waits for nothing, issues a run
/// there. Where the driver runs callbacks on a thread of its own (NVIDIA, seen on an H200),
/// psStreamSynchronize there is an ordinary call. The stream then carries on.
#[test]
fn calls_that_would_wait_for_the_worker_are_refused_in_its_event_callback() {
    let done = common::within(std::time::Duration::from_secs(120), || {
        let cl = Cl::new();
        let k = cl.kernel(STEP, "seed_step");
        let mut data = Pinned::new(&cl, 64 << 10);
        let s = S::new(&cl, 64 << 10, 4 << 10);
        s.kernel(&k);
        ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        let (mut first, mut ev) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: writable events. The first run holds the worker while the callback is set
        // on the second's event, so that the worker completes it.
        unsafe {
            ok(
                psStreamRunAsync(s.0, 20, PS_RESIDENCY_OFF, &mut first),
                "async",
            );
            ok(psStreamRunAsync(s.0, 1, PS_RESIDENCY_OFF, &mut ev), "async");
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let probe = Probe {
            stream: s.0,
            told: std::sync::Mutex::new(Some(tx)),
        };
        let user = &probe as *const Probe as *mut c_void;
        cl3::event::set_event_callback(ev.cast(), 0, call_the_stream, user)
            .expect("clSetEventCallback");
        let seen = rx.recv().expect("the callback ran");
        if common::on_cpu_device(&cl) {
            // PoCL runs it on the thread that sets the status: the worker. Required there, so
            // that a refusal that broke cannot pass as "the driver's own thread".
            assert_eq!(seen.thread.as_deref(), Some("pinstream-stream"));
        }
        if seen.thread.as_deref() == Some("pinstream-stream") {
            assert_eq!(seen.refused.len(), 3);
            for (call, (code, why)) in ["Synchronize", "Run", "Destroy"].iter().zip(&seen.refused) {
                assert_eq!(*code, PS_ERROR_INVALID_VALUE, "psStream{call}: {why}");
                assert!(
                    why.starts_with(&format!("psStream{call}: "))
                        && why.contains(
                            "called from the stream's own worker thread (an event callback)"
                        )
                        && why.contains("call it from another thread"),
                    "{why}"
                );
            }
        } else {
            // The driver's own thread: an ordinary call, which returns at once (the runs
            // before this event have ended).
            assert_eq!(seen.refused.len(), 1);
            assert_eq!(seen.refused[0].0, PS_SUCCESS, "{}", seen.refused[0].1);
        }
        assert_eq!(
            seen.chained.0, PS_SUCCESS,
            "psStreamRunAsync in the callback"
        );
        let chained = seen.chained.1 as cl3::types::cl_event;
        for e in [first.cast(), ev.cast(), chained] {
            assert_eq!(cl3::event::wait_for_events(&[e]), Ok(()));
            assert_eq!(common::status(e), 0);
            common::release(e);
        }
        ok(psStreamSynchronize(s.0), "sync");
        in_place_exact(&s, &mut data, 1, PS_RESIDENCY_AUTO);
    });
    assert!(done.is_some(), "the test hung or failed (see its output)");
}

/// psStreamDestroy while other threads run, describe and synchronize the same stream: every
/// call returns success or PS_ERROR_INVALID_VALUE saying the stream was destroyed (never
/// another code, a crash or a hang), and every call after the destroy is refused so.
#[test]
fn calls_racing_a_destroy_succeed_or_are_told_the_stream_was_destroyed() {
    let done = common::within(std::time::Duration::from_secs(200), || {
        let cl = Cl::new();
        let k = cl.kernel(STEP, "seed_step");
        let data = Pinned::new(&cl, 4 << 10);
        for round in 0..40 {
            let s = S::new(&cl, 32 << 10, 4 << 10);
            s.kernel(&k);
            ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
            ok(psStreamSetTypes(s.0, 8, 8), "types");
            let handle = common::Raw(s.0.cast());
            let racers: Vec<_> = (0..3)
                .map(|t| std::thread::spawn(move || race(handle, t + round)))
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(round as u64 % 7));
            assert_eq!(psStreamDestroy(s.0), PS_SUCCESS, "{}", detail());
            std::mem::forget(s);
            for r in racers {
                r.join().expect("a racing thread failed");
            }
            check_destroyed(handle.0.cast());
        }
    });
    assert!(done.is_some(), "the test hung or failed (see its output)");
}

/// Calls on `handle` until one is refused (a destroy on another thread); each returns
/// success or the refusal of a destroyed stream.
fn race(handle: common::Raw, seed: usize) {
    let s: psStream_t = handle.0.cast();
    for i in seed.. {
        let (call, code) = match i % 4 {
            // SAFETY: no report.
            0 => ("psStreamRun", unsafe {
                psStreamRun(s, 1, PS_RESIDENCY_AUTO, ptr::null_mut())
            }),
            1 => ("psStreamSynchronize", psStreamSynchronize(s)),
            2 => {
                let mut ev = ptr::null_mut();
                // SAFETY: a writable event.
                let code = unsafe { psStreamRunAsync(s, 1, PS_RESIDENCY_OFF, &mut ev) };
                if code == PS_SUCCESS {
                    let _ = cl3::event::wait_for_events(&[ev.cast()]);
                    common::release(ev.cast());
                }
                ("psStreamRunAsync", code)
            }
            _ => ("psStreamCancel", psStreamCancel(s)),
        };
        match code {
            PS_SUCCESS | PS_ERROR_CANCELLED => continue,
            _ => {
                let why = detail();
                assert_eq!(code, PS_ERROR_INVALID_VALUE, "{call}: {why}");
                assert!(
                    why.starts_with(call) && why.contains("was destroyed"),
                    "{why}"
                );
                return;
            }
        }
    }
}

/// Every call on a destroyed stream is refused with PS_ERROR_INVALID_VALUE, saying so.
fn check_destroyed(s: psStream_t) {
    let name = CString::new("k").unwrap();
    // SAFETY: no report, NUL-terminated strings, a writable event.
    let codes = unsafe {
        [
            (
                "psStreamRun",
                psStreamRun(s, 1, PS_RESIDENCY_AUTO, ptr::null_mut()),
            ),
            ("psStreamSynchronize", psStreamSynchronize(s)),
            ("psStreamDestroy", psStreamDestroy(s)),
            (
                "psStreamSetArg",
                psStreamSetArg(s, name.as_ptr(), name.as_ptr()),
            ),
            ("psStreamCancel", psStreamCancel(s)),
        ]
    };
    for (call, code) in codes {
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "{call}");
    }
    assert!(
        detail().contains("the stream was destroyed"),
        "{}",
        detail()
    );
    assert_eq!(psStreamCancel(0x11 as psStream_t), PS_ERROR_INVALID_VALUE);
    assert!(detail().contains("is not a stream"), "{}", detail());
}

/// A kernel that writes past its block fails the run with `PS_ERROR_INVALID_KERNEL` (the
/// engine's bounds guard, on by default on a CPU device, sees it), nothing of the run is
/// left, and the same stream then runs a good kernel exactly.
#[test]
fn a_kernel_writing_past_its_block_is_named_and_the_stream_runs_again() {
    const PAST: &str = "__kernel void past(__global uint* d, ulong n) {
        size_t i = get_global_id(0);
        if (i < n) d[i + n] = 7u; }";
    let cl = Cl::new();
    if !common::on_cpu_device(&cl) {
        // On a GPU the guard is off by default, and a write past a buffer is undefined.
        common::skip("the bounds guard is on by default on a CPU device only (PoCL)");
        return;
    }
    let base = context_refcount(cl.ctx);
    {
        let (bad, good) = (cl.kernel(PAST, "past"), cl.kernel(STEP, "seed_step"));
        let mut data = Pinned::new(&cl, 16 << 10);
        // Twice the blocks: on a CPU device the guard follows each device buffer.
        let s = S::new(&cl, 64 << 10, 4 << 10);
        s.kernel(&bad);
        ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        let (code, why) = s.run(1, PS_RESIDENCY_OFF).unwrap_err();
        assert_eq!(code, PS_ERROR_INVALID_KERNEL, "{why}");
        assert!(why.contains("past"), "{why}");
        s.kernel(&good);
        in_place_exact(&s, &mut data, 2, PS_RESIDENCY_AUTO);
    }
    assert_eq!(context_refcount(cl.ctx), base);
}

/// psStreamRunAsync waits for nothing (the header says so): not even for a zero-copy batch
/// copy out of the same block, queued behind a user event on the caller's queue. It found the
/// block's pieces by settling the block, which waited for that copy while holding the
/// registry's lock, so the call (and every psHost* call of the process) stalled until the
/// caller set the event, and forever where the caller's thread would set it.
#[test]
fn an_async_run_waits_for_no_batch_copy_in_flight_from_its_block() {
    let cl = Cl::new();
    let k = cl.kernel(STEP, "seed_step");
    let bytes = 1 << 20;
    let mut block: *mut c_void = ptr::null_mut();
    // SAFETY: a live context; `block` is writable.
    ok(
        unsafe { psHostAlloc(cl.ctx.cast(), bytes, PS_HOST_ALLOC_MAPPED, &mut block) },
        "psHostAlloc",
    );
    // SAFETY: the block's bytes, ours until psHostFree.
    let words = unsafe { std::slice::from_raw_parts_mut(block.cast::<u32>(), bytes / 4) };
    words.fill(7);
    let buf = cl.buffer(cl3::memory::CL_MEM_READ_WRITE, 4096);
    /// The user event, set when dropped, so a failed assertion leaves no copy pending.
    struct Gate(pinstream_capi::cl_event);
    impl Drop for Gate {
        fn drop(&mut self) {
            let _ = cl3::event::set_user_event_status(self.0.cast(), 0);
            common::release(self.0.cast());
        }
    }
    let gate = Gate(cl.gate().cast());
    // A zero-copy upload of the block's first page, behind the gate.
    let (offs, srcs, sizes) = ([0usize], [block.cast_const()], [4096usize]);
    let mut copy: pinstream_capi::cl_event = ptr::null_mut();
    // SAFETY: a live queue and buffer; arrays of one entry; the source stays until `copy`.
    ok(
        unsafe {
            psMemcpyBatchHtoDAsync(
                cl.queue.cast(),
                buf.0.cast(),
                offs.as_ptr(),
                srcs.as_ptr(),
                sizes.as_ptr(),
                1,
                &mut copy,
            )
        },
        "psMemcpyBatchHtoDAsync",
    );
    // The stream over the block's second half, which the copy does not touch.
    let s = S::new(&cl, 64 << 10, 4 << 10);
    s.kernel(&k);
    // SAFETY: the second half of the block.
    let half = unsafe { block.cast::<u8>().add(bytes / 2) }.cast::<c_void>();
    ok(psStreamSetInPlace(s.0, half, bytes / 2), "set");
    ok(psStreamSetTypes(s.0, 8, 8), "types");
    let stream = common::Raw(s.0.cast());
    let issued = common::within(std::time::Duration::from_secs(30), move || {
        let stream = stream;
        let mut ev = ptr::null_mut();
        // SAFETY: a live stream and a writable event.
        let code = unsafe { psStreamRunAsync(stream.0.cast(), 1, PS_RESIDENCY_OFF, &mut ev) };
        (code, common::Raw(ev))
    });
    let Some((code, ev)) = issued else {
        panic!("psStreamRunAsync waited for a batch copy in flight from its block");
    };
    ok(code, "psStreamRunAsync");
    assert_eq!(cl3::event::wait_for_events(&[ev.0.cast()]), Ok(()));
    assert_eq!(common::status(ev.0.cast()), 0);
    common::release(ev.0.cast());
    assert!(
        common::status(copy.cast()) > 0,
        "the batch copy ran before its gate was set"
    );
    drop(gate);
    assert_eq!(cl3::event::wait_for_events(&[copy.cast()]), Ok(()));
    common::release(copy.cast());
    // SAFETY: the block's bytes; the copy and the run have ended.
    let words = unsafe { std::slice::from_raw_parts(block.cast::<u32>(), bytes / 4) };
    assert!(
        words[..bytes / 8].iter().all(|&x| x == 7),
        "the copy's half changed"
    );
    assert!(
        words[bytes / 8..].iter().all(|&x| x == step_cpu(7)),
        "the stream's half is not one step on"
    );
    drop(s);
    assert_eq!(psHostFree(block), PS_SUCCESS);
    assert_eq!(psMemcpyBatchRelease(cl.ctx.cast()), PS_SUCCESS);
}
