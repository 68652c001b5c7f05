//! Random psStream* calls from several threads at once, as a careless or hostile program
//! makes them: NULL and made-up handles, destroyed streams, NULL pointers, sizes from 0 to
//! `usize::MAX`, element types and residencies the calls do not take, argument names with
//! `=`, kernels that do not fit, unpinned memory, runs cancelled at random.
//!
//! Every call must return a known code with a detail that names it (no crash, no panic
//! across the boundary, no `PS_ERROR_INTERNAL`) and the run must end within a time limit (no
//! hang). What succeeds must be right: each thread mirrors its stream's job, and a run of the
//! in-place step over its pinned memory that succeeds must leave exactly `passes` steps
//! applied; no run over unpinned memory may succeed. At the end every stream is destroyed and
//! the context's reference count is back to the test's own.
//!
//! The same calls run on Vulkan streams (`psVkStreamCreate`, `psVkStreamSetKernel`,
//! `psVkStreamRunAsync`) over `psVkHostAlloc` memory, on the first Vulkan device, where each
//! thread also makes the OpenCL spellings on its Vulkan streams (refused, naming the call to
//! use), and the Vulkan ones on OpenCL streams.
//!
//! The seed is printed; `PINSTREAM_FUZZ_SEED=N` replays a run.

mod common;
mod fuzzing;
#[cfg(all(feature = "vulkan", target_os = "linux"))]
mod vk_common;

use common::{context_refcount, Cl, Kern};
use fuzzing::detail;
use pinstream_capi::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ffi::{c_void, CString};
use std::ptr;
use std::time::Duration;

const THREADS: usize = 3;
const CALLS: usize = 300;
const WORDS: usize = 4096;
const LIMIT: Duration = Duration::from_secs(240);

const SOURCE: &str = "__kernel void seed_step(__global uint* d, ulong n) {
    size_t i = get_global_id(0); if (i < n) d[i] = d[i] * 2654435761u + 12345u; }
    __kernel void two(__global uint* a, __global uint* b, uint n) {}";

/// The same two kernels in WGSL, for the Vulkan streams: the seed's (`seed`), and `two`.
#[cfg(all(feature = "vulkan", target_os = "linux"))]
const WGSL: &str = concat!(
    include_str!("../../../examples/seed.wgsl"),
    "@group(0) @binding(1) var<storage, read_write> e: array<u32>;
@compute @workgroup_size(64)
fn two(@builtin(local_invocation_index) l: u32) { if (counts.n > 0u) { d[l] = e[l]; } }"
);

/// The API a thread's streams run on, with the handles its calls take.
#[derive(Clone, Copy)]
enum On {
    /// `psStreamCreate` on the context, with its two kernels.
    Cl {
        ctx: cl_context,
        good: cl_kernel,
        two: cl_kernel,
    },
    /// `psVkStreamCreate` on the program's instance and physical device; its device takes
    /// `psVkHostAlloc`.
    #[cfg(all(feature = "vulkan", target_os = "linux"))]
    Vk(vk_common::Handles),
}

/// [`On`], sent to a thread.
struct SendOn(On);
// SAFETY: handles of live OpenCL and Vulkan objects the test keeps until every thread ended;
// the calls the threads make on them are thread-safe (the C library's contract).
unsafe impl Send for SendOn {}

fn step(x: u32) -> u32 {
    x.wrapping_mul(2654435761).wrapping_add(12345)
}

/// A known code, with a detail naming the call whenever it is not success.
fn known(call: &str, code: psError_t) -> psError_t {
    fuzzing::known(call, code, PS_ERROR_INVALID_KERNEL)
}

fn pick<T: Copy>(rng: &mut SmallRng, from: &[T]) -> T {
    from[rng.gen_range(0..from.len())]
}

/// Where the mirrored job's in-place range lies.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// All of the thread's pinned words, or their first half.
    Pinned(usize),
    /// Plain memory, never pinned.
    Plain,
    /// Anything else (an input, an output, a range past the block).
    Other,
}

/// What the thread knows of its stream's job.
#[derive(Clone, Copy, PartialEq)]
struct Model {
    good_kernel: bool,
    place: Option<Place>,
    extra: bool,
    u32s: bool,
}

const EMPTY: Model = Model {
    good_kernel: false,
    place: None,
    extra: false,
    u32s: false,
};

struct Fuzz {
    rng: SmallRng,
    on: On,
    pinned: *mut u32,
    shadow: Vec<u32>,
    plain: Vec<u32>,
    stream: Option<(psStream_t, Model)>,
    dead: Vec<psStream_t>,
    /// This thread's runs checked against the CPU.
    checked: usize,
}

impl Fuzz {
    fn handle(&mut self) -> psStream_t {
        match (self.stream, self.rng.gen_range(0..10)) {
            (Some((s, _)), 0..=7) => s,
            (_, 8) if !self.dead.is_empty() => pick(&mut self.rng, &self.dead),
            (_, 9) => ptr::null_mut(),
            _ => pick(&mut self.rng, &[0x11usize, 0x5057_0000, usize::MAX]) as psStream_t,
        }
    }

    /// The model after a successful call on `s`, when `s` is the live stream.
    fn mirror(&mut self, s: psStream_t, code: psError_t, f: impl FnOnce(&mut Model)) {
        if let Some((live, model)) = self.stream.as_mut() {
            if *live == s && code == PS_SUCCESS {
                f(model);
            }
        }
    }

    fn step(&mut self) {
        match self.rng.gen_range(0..16) {
            0 => self.create(),
            1 => self.destroy(),
            2 => self.kernel(),
            3 | 4 => self.data(),
            5 => self.types(),
            6 => self.arg(),
            7..=10 => self.run(),
            11 => self.cancel(),
            12 => self.report(),
            13 => match self.stream {
                Some((s, _)) => self.simple_job(s),
                None => self.create(),
            },
            _ => {
                let s = self.handle();
                let code = known("psStreamResetJob", psStreamResetJob(s));
                self.mirror(s, code, |m| {
                    *m = Model {
                        good_kernel: m.good_kernel,
                        ..EMPTY
                    }
                });
                known("psStreamSynchronize", psStreamSynchronize(s));
            }
        }
    }

    fn create(&mut self) {
        let budget = pick(
            &mut self.rng,
            &[0, 1, 4096, 32 << 10, 64 << 10, 1 << 62, usize::MAX],
        );
        let block = pick(&mut self.rng, &[0, 3, 4096, 8192, 16 << 10, usize::MAX]);
        let null = self.rng.gen_bool(0.1);
        let mut s: psStream_t = ptr::null_mut();
        let out = if self.rng.gen_bool(0.1) {
            ptr::null_mut()
        } else {
            &mut s as *mut _
        };
        let code = match self.on {
            On::Cl { ctx, .. } => {
                let ctx = if null { ptr::null_mut() } else { ctx };
                // SAFETY: ctx NULL or live; out NULL or writable.
                known("psStreamCreate", unsafe {
                    psStreamCreate(out, ctx, ptr::null_mut(), budget, block)
                })
            }
            #[cfg(all(feature = "vulkan", target_os = "linux"))]
            On::Vk(h) => {
                let mut h = h;
                if null {
                    match self.rng.gen_range(0..3) {
                        0 => h.instance = ash::vk::Instance::null(),
                        1 => h.physical = ash::vk::PhysicalDevice::null(),
                        _ => h.gipa = None,
                    }
                }
                // SAFETY: handles NULL or live; out NULL or writable.
                known("psVkStreamCreate", unsafe {
                    psVkStreamCreate(out, h.instance, h.physical, h.gipa, budget, block)
                })
            }
        };
        if code != PS_SUCCESS {
            return;
        }
        assert!(!s.is_null() && block > 0 && block <= budget);
        if let Some((old, _)) = self.stream.replace((s, EMPTY)) {
            assert_eq!(known("psStreamDestroy", psStreamDestroy(old)), PS_SUCCESS);
            self.dead.push(old);
        }
        if self.rng.gen_bool(0.7) {
            self.simple_job(s);
        }
    }

    /// The job whose results are checked: the step in place over the pinned words.
    fn simple_job(&mut self, s: psStream_t) {
        assert_eq!(self.set_kernel(s, true), PS_SUCCESS);
        let code = psStreamSetInPlace(s, self.pinned.cast(), WORDS * 4);
        assert_eq!(known("psStreamSetInPlace", code), PS_SUCCESS);
        assert_eq!(
            known("psStreamSetTypes", psStreamSetTypes(s, 8, 8)),
            PS_SUCCESS
        );
        let simple = Model {
            good_kernel: true,
            place: Some(Place::Pinned(WORDS)),
            extra: false,
            u32s: true,
        };
        self.mirror(s, PS_SUCCESS, |m| *m = simple);
    }

    fn destroy(&mut self) {
        let s = self.handle();
        let code = known("psStreamDestroy", psStreamDestroy(s));
        if self.stream.is_some_and(|(live, _)| live == s) {
            assert_eq!(code, PS_SUCCESS);
            self.stream = None;
            self.dead.push(s);
        } else {
            assert_ne!(code, PS_SUCCESS);
        }
    }

    /// Sets the good kernel (`good`) or the one that does not fit, in the stream's API.
    fn set_kernel(&mut self, s: psStream_t, good: bool) -> psError_t {
        match self.on {
            On::Cl { good: g, two, .. } => {
                let k = if good { g } else { two };
                // SAFETY: a live kernel.
                known("psStreamSetKernel", unsafe { psStreamSetKernel(s, k) })
            }
            #[cfg(all(feature = "vulkan", target_os = "linux"))]
            On::Vk(_) => {
                let (src, entry) = (
                    CString::new(WGSL).unwrap(),
                    CString::new(if good { "seed" } else { "two" }).unwrap(),
                );
                // SAFETY: NUL-terminated strings.
                known("psVkStreamSetKernel", unsafe {
                    psVkStreamSetKernel(s, src.as_ptr(), entry.as_ptr())
                })
            }
        }
    }

    fn kernel(&mut self) {
        let s = self.handle();
        let code = match self.rng.gen_range(0..5) {
            0 => {
                // SAFETY: a NULL kernel is refused before it is read.
                known("psStreamSetKernel", unsafe {
                    psStreamSetKernel(s, ptr::null_mut())
                })
            }
            1 => self.other_api_kernel(s),
            k => {
                let good = k != 2;
                let code = self.set_kernel(s, good);
                self.mirror(s, code, |m| m.good_kernel = good);
                return;
            }
        };
        assert_ne!(code, PS_SUCCESS);
    }

    /// The other API's kernel call on `s`: refused (naming the call to use) on a live
    /// stream, as on a dead one.
    fn other_api_kernel(&mut self, s: psStream_t) -> psError_t {
        match self.on {
            #[cfg(all(feature = "vulkan", target_os = "linux"))]
            On::Cl { .. } => {
                let (src, entry) = (CString::new(WGSL).unwrap(), CString::new("seed").unwrap());
                // SAFETY: NUL-terminated strings.
                known("psVkStreamSetKernel", unsafe {
                    psVkStreamSetKernel(s, src.as_ptr(), entry.as_ptr())
                })
            }
            #[cfg(not(all(feature = "vulkan", target_os = "linux")))]
            On::Cl { .. } => {
                // SAFETY: a NULL kernel is refused before it is read.
                known("psStreamSetKernel", unsafe {
                    psStreamSetKernel(s, ptr::null_mut())
                })
            }
            #[cfg(all(feature = "vulkan", target_os = "linux"))]
            On::Vk(_) => {
                // Any pointer: a Vulkan stream refuses a cl_kernel before reading it.
                let k = 0x1000usize as cl_kernel;
                // SAFETY: as above; on a dead handle the handle is refused first.
                known("psStreamSetKernel", unsafe { psStreamSetKernel(s, k) })
            }
        }
    }

    fn data(&mut self) {
        let s = self.handle();
        let half = WORDS / 2 * 4;
        let (p, n, place): (*mut c_void, usize, Place) = match self.rng.gen_range(0..8) {
            0 => (self.pinned.cast(), WORDS * 4, Place::Pinned(WORDS)),
            1 => (self.pinned.cast(), half, Place::Pinned(WORDS / 2)),
            2 => (self.plain.as_mut_ptr().cast(), WORDS * 4, Place::Plain),
            3 => (self.pinned.cast(), WORDS * 4 + 4, Place::Other),
            4 => (ptr::null_mut(), 16, Place::Other),
            5 => (
                self.pinned.cast(),
                pick(&mut self.rng, &[0, usize::MAX]),
                Place::Other,
            ),
            _ => (self.pinned.cast(), WORDS * 4, Place::Other),
        };
        match self.rng.gen_range(0..5) {
            0 | 1 => {
                let code = known("psStreamSetInPlace", psStreamSetInPlace(s, p, n));
                self.mirror(s, code, |m| m.place = Some(place));
            }
            2 => {
                let code = known("psStreamAddInput", psStreamAddInput(s, p, n));
                self.mirror(s, code, |m| m.place = Some(Place::Other));
            }
            3 => {
                let k = pick(&mut self.rng, &[0, 1, 4, usize::MAX]);
                let code = known("psStreamSetOutput", psStreamSetOutput(s, p, n, k));
                self.mirror(s, code, |m| m.place = Some(Place::Other));
            }
            _ => {
                let code = known("psStreamAddResident", psStreamAddResident(s, p, n));
                self.mirror(s, code, |m| m.extra = true);
            }
        }
    }

    fn types(&mut self) {
        let s = self.handle();
        let (i, o) = (
            pick(&mut self.rng, &[0, 8, 8, 11, u32::MAX]),
            pick(&mut self.rng, &[8, 12]),
        );
        let code = known("psStreamSetTypes", psStreamSetTypes(s, i, o));
        self.mirror(s, code, |m| m.u32s = i == 8);
    }

    fn arg(&mut self) {
        let s = self.handle();
        let name = pick(&mut self.rng, &["", "n", "a=b", "k", "\u{e9}"]);
        let (n, v) = (CString::new(name).unwrap(), CString::new("1").unwrap());
        let np = if self.rng.gen_bool(0.1) {
            ptr::null()
        } else {
            n.as_ptr()
        };
        // SAFETY: NULL or NUL-terminated strings.
        let code = known("psStreamSetArg", unsafe {
            psStreamSetArg(s, np, v.as_ptr())
        });
        self.mirror(s, code, |m| m.extra = true);
    }

    fn run(&mut self) {
        let s = self.handle();
        let passes = pick(&mut self.rng, &[0, 1, 1, 2, 3]);
        let residency = pick(
            &mut self.rng,
            &[PS_RESIDENCY_AUTO, PS_RESIDENCY_OFF, 4096, u64::MAX - 1],
        );
        let model = self.stream.filter(|(live, _)| *live == s).map(|(_, m)| m);
        let code = if self.rng.gen_bool(0.5) {
            let mut r = psStreamReport::default();
            // SAFETY: a writable report.
            known("psStreamRun", unsafe {
                psStreamRun(s, passes, residency, &mut r)
            })
        } else {
            self.run_async(s, passes, residency)
        };
        if model.is_some_and(|m| m.place == Some(Place::Plain)) {
            assert_ne!(code, PS_SUCCESS, "a run over unpinned memory succeeded");
        }
        let simple = Model {
            good_kernel: true,
            place: None,
            extra: false,
            u32s: true,
        };
        let words = match model {
            Some(m) if code == PS_SUCCESS && Model { place: None, ..m } == simple => {
                match m.place {
                    Some(Place::Pinned(w)) => Some(w),
                    _ => None,
                }
            }
            _ => None,
        };
        // SAFETY: the thread's pinned words, no run in flight on them now.
        let data = unsafe { std::slice::from_raw_parts_mut(self.pinned, WORDS) };
        if let Some(w) = words {
            self.checked += 1;
            for x in &mut self.shadow[..w] {
                *x = (0..passes).fold(*x, |v, _| step(v));
            }
            assert!(
                data == self.shadow.as_slice(),
                "a run's result differs from the CPU's"
            );
        }
        data.copy_from_slice(&self.shadow);
    }

    /// psStreamRunAsync (psVkStreamRunAsync on a Vulkan stream), sometimes cancelled at
    /// once; waits for the event and synchronizes.
    fn run_async(&mut self, s: psStream_t, passes: u32, residency: u64) -> psError_t {
        #[cfg(all(feature = "vulkan", target_os = "linux"))]
        if let On::Vk(_) = self.on {
            if self.rng.gen_bool(0.2) {
                // The OpenCL spelling: refused on a Vulkan stream, nothing issued.
                let mut ev: cl_event = ptr::null_mut();
                // SAFETY: a writable event.
                let code = known("psStreamRunAsync", unsafe {
                    psStreamRunAsync(s, passes, residency, &mut ev)
                });
                assert!(code != PS_SUCCESS && ev.is_null());
                return code;
            }
            let code = known(
                "psVkStreamRunAsync",
                psVkStreamRunAsync(s, passes, residency),
            );
            if code != PS_SUCCESS {
                return code;
            }
            if self.rng.gen_bool(0.3) {
                known("psStreamCancel", psStreamCancel(s));
            }
            return known("psStreamSynchronize", psStreamSynchronize(s));
        }
        let mut ev: cl_event = ptr::null_mut();
        let out = if self.rng.gen_bool(0.1) {
            ptr::null_mut()
        } else {
            &mut ev as *mut _
        };
        // SAFETY: out NULL or writable.
        let code = known("psStreamRunAsync", unsafe {
            psStreamRunAsync(s, passes, residency, out)
        });
        if code != PS_SUCCESS {
            assert!(ev.is_null());
            return code;
        }
        if self.rng.gen_bool(0.3) {
            known("psStreamCancel", psStreamCancel(s));
        }
        let _ = cl3::event::wait_for_events(&[ev.cast()]);
        let status = common::status(ev.cast());
        common::release(ev.cast());
        let synced = psStreamSynchronize(s);
        known("psStreamSynchronize", synced);
        assert_eq!(
            status, -synced,
            "the event's status and the synchronize's code"
        );
        synced
    }

    fn cancel(&mut self) {
        let s = self.handle();
        let code = known("psStreamCancel", psStreamCancel(s));
        assert_eq!(code == PS_SUCCESS, self.stream.is_some_and(|(l, _)| l == s));
    }

    fn report(&mut self) {
        let s = self.handle();
        let mut r = psStreamReport::default();
        let out = if self.rng.gen_bool(0.2) {
            ptr::null_mut()
        } else {
            &mut r as *mut _
        };
        // SAFETY: out NULL or writable.
        let code = known("psStreamGetReport", unsafe { psStreamGetReport(s, out) });
        if code == PS_SUCCESS {
            assert!(r.passes >= 1 && r.blocks >= 1, "{r:?}");
        }
    }
}

/// `WORDS` words pinned for `on`'s API.
fn pin(on: On) -> *mut c_void {
    let mut pinned = ptr::null_mut();
    let code = match on {
        // SAFETY: a live context, a writable pointer.
        On::Cl { ctx, .. } => unsafe { psHostAlloc(ctx, WORDS * 4, 0, &mut pinned) },
        #[cfg(all(feature = "vulkan", target_os = "linux"))]
        // SAFETY: live handles, a writable pointer.
        On::Vk(h) => unsafe {
            psVkHostAlloc(
                h.instance,
                h.physical,
                h.device,
                h.gipa,
                WORDS * 4,
                0,
                &mut pinned,
            )
        },
    };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    pinned
}

/// Frees what [`pin`] gave.
fn unpin(on: On, pinned: *mut c_void) {
    let code = match on {
        On::Cl { .. } => psHostFree(pinned),
        #[cfg(all(feature = "vulkan", target_os = "linux"))]
        On::Vk(_) => psVkHostFree(pinned),
    };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
}

/// One thread's calls; the streams it destroyed before the end, and its runs checked against
/// the CPU.
fn run(seed: u64, on: SendOn) -> (usize, usize) {
    let on = on.0;
    let pinned = pin(on);
    let shadow: Vec<u32> = (0..WORDS as u32)
        .map(|i| i.wrapping_mul(0x9E37_79B1))
        .collect();
    // SAFETY: WORDS words pin gave.
    unsafe { std::slice::from_raw_parts_mut(pinned.cast::<u32>(), WORDS) }.copy_from_slice(&shadow);
    let mut f = Fuzz {
        rng: SmallRng::seed_from_u64(seed),
        on,
        pinned: pinned.cast(),
        shadow,
        plain: vec![7; WORDS],
        stream: None,
        dead: Vec::new(),
        checked: 0,
    };
    for _ in 0..CALLS {
        f.step();
    }
    // Some seeds make no run that can be checked in CALLS calls (1 in 50 or so of the test's
    // runs on the 2-core host had none on any thread): the thread goes on until one is
    // checked, so every run of the test checks results, or fails below if none ever is.
    for _ in 0..10 * CALLS {
        if f.checked > 0 {
            break;
        }
        f.step();
    }
    if let Some((s, _)) = f.stream.take() {
        assert_eq!(psStreamDestroy(s), PS_SUCCESS, "{}", detail());
    }
    assert!(
        f.plain.iter().all(|&x| x == 7),
        "unpinned memory was written"
    );
    unpin(on, pinned);
    (f.dead.len(), f.checked)
}

/// Runs the threads on `on` (each `on` of its own); the streams destroyed before the end.
fn fuzz_threads(seed: u64, on: impl Fn() -> On) -> usize {
    let runs: Vec<fuzzing::Work<(usize, usize)>> = (0..THREADS)
        .map(|_| {
            let on = SendOn(on());
            Box::new(move |seed| run(seed, on)) as fuzzing::Work<(usize, usize)>
        })
        .collect();
    let ends = fuzzing::threads(seed, LIMIT, runs);
    let destroyed: usize = ends.iter().map(|e| e.0).sum();
    // Each test counts its own threads' checks (the two tests may run at once).
    let checked: usize = ends.iter().map(|e| e.1).sum();
    eprintln!(
        "{destroyed} streams destroyed before the end, {checked} runs checked against the CPU"
    );
    assert!(checked > 0, "no run succeeded to be checked (seed {seed})");
    destroyed
}

#[test]
fn random_stream_calls_from_several_threads_return_codes_end_and_leave_nothing() {
    let seed = fuzzing::seed();
    let cl = Cl::new();
    let base = context_refcount(cl.ctx);
    let (good, two): (Kern, Kern) = (cl.kernel(SOURCE, "seed_step"), cl.kernel(SOURCE, "two"));
    let kernels_base = context_refcount(cl.ctx);
    let on = On::Cl {
        ctx: cl.ctx.cast(),
        good: good.0.cast(),
        two: two.0.cast(),
    };
    fuzz_threads(seed, || on);
    // Each of the last driver calls says itself first: on NVIDIA the test once waited in one
    // of them for ever, after every random call had ended.
    eprintln!("reading the context's reference count");
    assert_eq!(
        context_refcount(cl.ctx),
        kernels_base,
        "streams kept references (seed {seed})"
    );
    eprintln!("releasing the kernels");
    drop((good, two));
    eprintln!("reading the context's reference count");
    assert_eq!(context_refcount(cl.ctx), base);
    eprintln!("releasing the queue and the context");
    drop(cl);
    eprintln!("done");
}

/// The same calls on Vulkan streams, one program device per thread, on the first Vulkan
/// device: every stream and block released at the end, the program's devices destroyed after.
#[cfg(all(feature = "vulkan", target_os = "linux"))]
#[test]
fn random_vulkan_stream_calls_from_several_threads_return_codes_end_and_leave_nothing() {
    let seed = fuzzing::seed();
    let vk = vk_common::Vk::new(ash::vk::API_VERSION_1_2);
    let devices: Vec<vk_common::Device> = (0..THREADS).map(|_| vk.device(true)).collect();
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    fuzz_threads(seed, || {
        let d = &devices[next.fetch_add(1, Ordering::Relaxed)];
        On::Vk(vk.args(d, vk.gipa))
    });
    drop(devices);
}
