//! Random `psVk*` calls from several threads at once, as a careless or hostile Vulkan program
//! makes them (tests/fuzz_capi.rs does the same for the OpenCL calls): psVkHostAlloc /
//! psVkHostFree / psVkHostRegister / psVkHostUnregister / psVkHostGetChunks / psVkHostGetInfo
//! with NULL handles and pointers, a Vulkan 1.0 instance, a `vkGetInstanceProcAddr` that lacks
//! a function, sizes from 0 to `SIZE_MAX`, ranges nothing maps (a hole, the top of the address
//! space, 1 TiB over a stack array, a read-only page), ranges that wrap, flags the calls do not
//! take, interior pointers, the wrong release call, double frees and chunk arrays too small.
//!
//! Each call must return the code its arguments call for (the calls' checks in their
//! documented order), with a detail naming the call. What succeeds must be right: an
//! allocation is writable over its whole size, a registration leaves the bytes alone, the
//! chunks tile the range, psVkHostGetInfo describes it. The run must end within a time limit
//! (no hang), and leave nothing: every pointer unknown again, and every buffer and memory
//! object the calls made (counted by a wrapper around the loader's functions, `vk_common::fake`)
//! destroyed or freed.
//!
//! The seed is printed; `PINSTREAM_FUZZ_SEED=N` replays a run. On lavapipe in CI.
// Linux: the ranges it makes (mmap at a fixed address, mprotect) and lavapipe; Wine offers
// Vulkan 1.0 only.
#![cfg(all(feature = "vulkan", target_os = "linux"))]

mod fuzzing;
#[path = "fuzz_vulkan/oracle.rs"]
mod oracle;
mod vk_common;

use ash::vk;
use oracle::{expect, Dev, Target, World, HIDDEN};
use pinstream_capi::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ffi::c_void;
use std::ptr;
use std::sync::RwLock;
use std::time::Duration;
use vk_common::{detail, fake, hostile_pages, Vk};

const THREADS: usize = 4;
const CALLS: usize = 500;
const LIMIT: Duration = Duration::from_secs(120);
/// PINSTREAM_MAX_CHUNK for the run: ranges of a few MiB come in several chunks, and the
/// host-visible fallback takes at most this much.
const CHUNK: usize = 1 << 20;
/// Held for reading by calls that map memory, for writing from a free to its double free:
/// no other thread's new memory takes the freed address in between.
static GATE: RwLock<()> = RwLock::new(());

/// A range a call made: start, length, fill byte, how.
struct Alloc {
    at: usize,
    len: usize,
    fill: u8,
    pinning: psVkPinning,
}

/// Memory the thread registered: the backing bytes, and the registered range in them.
struct Reg {
    mem: Vec<u8>,
    at: usize,
    len: usize,
}

impl Reg {
    fn ptr(&self) -> usize {
        self.mem.as_ptr() as usize + self.at
    }
}

struct Fuzz {
    rng: SmallRng,
    world: World,
    allocs: Vec<Alloc>,
    regs: Vec<Reg>,
    /// Every pointer a call handed out or took, for the final check.
    seen: Vec<usize>,
}

fn pick<T: Copy>(rng: &mut SmallRng, from: &[T]) -> T {
    from[rng.gen_range(0..from.len())]
}

impl Fuzz {
    fn step(&mut self) {
        match self.rng.gen_range(0..7) {
            0 | 1 => self.alloc(),
            2 => self.free(),
            3 => self.register(),
            4 => self.unregister(),
            5 => self.chunks(),
            _ => self.info(),
        }
        fake::reset();
    }

    /// A device, its handles now and then NULL, a function now and then hidden.
    fn target(&mut self) -> Target {
        // Mostly the importing device, where most calls succeed.
        let (dev, mut h) = self.world.devices[pick(&mut self.rng, &[0, 0, 0, 0, 1, 2])];
        let r = &mut self.rng;
        if r.gen_bool(0.04) {
            h.instance = vk::Instance::null();
        }
        if r.gen_bool(0.04) {
            h.physical = vk::PhysicalDevice::null();
        }
        if r.gen_bool(0.04) {
            h.device = vk::Device::null();
        }
        if r.gen_bool(0.04) {
            h.gipa = None;
        }
        let hidden = r.gen_bool(0.1).then(|| pick(r, &HIDDEN));
        if let Some(name) = hidden {
            fake::hide(name);
        }
        Target { h, dev, hidden }
    }

    fn alloc(&mut self) {
        let t = self.target();
        let mut sizes = vec![0, 1, 7, 4096, 4096, 65537, 65537, CHUNK, 3 * CHUNK + 5];
        sizes.extend([1 << 62, usize::MAX - 4095, usize::MAX]);
        let bytes = pick(&mut self.rng, &sizes);
        let flags = pick(&mut self.rng, &[0, 0, 0, 0, 0, 1, 0x100, u32::MAX]);
        let null_out = self.rng.gen_bool(0.05);
        let want = match () {
            _ if null_out || bytes == 0 || flags != 0 => PS_ERROR_INVALID_VALUE,
            _ if bytes >= 1 << 62 => PS_ERROR_MEMORY_ALLOCATION,
            _ => match t.refused() {
                Some(code) => code,
                None if !t.imports() && bytes > CHUNK => PS_ERROR_STRATEGY_UNAVAILABLE,
                None => PS_SUCCESS,
            },
        };
        let mut p: *mut c_void = std::ptr::dangling_mut::<c_void>();
        let out = if null_out {
            ptr::null_mut()
        } else {
            &mut p as *mut _
        };
        let h = t.h;
        let _gate = GATE.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: live handles or NULL ones; `out` is NULL or writable.
        let code =
            unsafe { psVkHostAlloc(h.instance, h.physical, h.device, h.gipa, bytes, flags, out) };
        if expect("psVkHostAlloc", code, &[want]) != PS_SUCCESS {
            assert!(null_out || p.is_null(), "*ptr is not NULL after a failure");
            let args_passed = !(null_out || bytes == 0 || flags != 0 || bytes >= 1 << 62);
            if let Some(name) = t.named().filter(|_| args_passed) {
                assert!(detail().contains(&name), "not naming {name}: {}", detail());
            }
            return;
        }
        let fill = self.rng.gen();
        // SAFETY: psVkHostAlloc returned `bytes` writable bytes at `p`.
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), bytes) }.fill(fill);
        let pinning = match t.imports() {
            true => psVkPinning::PS_VK_PINNING_IMPORT,
            false => psVkPinning::PS_VK_PINNING_HOST_VISIBLE,
        };
        self.seen.push(p as usize);
        self.allocs.push(Alloc {
            at: p as usize,
            len: bytes,
            fill,
            pinning,
        });
    }

    fn free(&mut self) {
        let choice = self.rng.gen_range(0..4);
        if choice == 0 && !self.allocs.is_empty() {
            let i = self.rng.gen_range(0..self.allocs.len());
            let a = self.allocs.swap_remove(i);
            // SAFETY: still allocated: the bytes this thread wrote.
            let mem = unsafe { std::slice::from_raw_parts(a.at as *const u8, a.len) };
            assert!(
                mem.iter().all(|&b| b == a.fill),
                "an allocation's bytes changed"
            );
            let _gate = GATE.write().unwrap_or_else(|e| e.into_inner());
            let p = a.at as *mut c_void;
            expect("psVkHostFree", psVkHostFree(p), &[PS_SUCCESS]);
            expect(
                "psVkHostFree",
                psVkHostFree(p),
                &[PS_ERROR_INVALID_HOST_POINTER],
            );
            assert!(detail().contains("released already"), "{}", detail());
            return;
        }
        let local = 0u64;
        let interior = self.allocs.iter().find(|a| a.len > 1).map(|a| a.at + 1);
        let target = match choice {
            1 => interior.unwrap_or(0x11),
            2 => self.regs.first().map_or(0x11, Reg::ptr),
            _ => &local as *const u64 as usize,
        };
        let code = psVkHostFree(target as *mut c_void);
        expect("psVkHostFree", code, &[PS_ERROR_INVALID_HOST_POINTER]);
        let code = psVkHostFree(ptr::null_mut());
        expect("psVkHostFree", code, &[PS_ERROR_INVALID_VALUE]);
    }

    /// An address and length to register, and the code the range itself calls for once the
    /// handles passed (success for memory of our own).
    fn range(&mut self, reg: &Reg) -> (usize, usize, psError_t) {
        let stack = [0u8; 64];
        let own = self.regs.iter().map(|r| (r.ptr(), r.len));
        let imported = self
            .allocs
            .iter()
            .filter(|a| a.pinning == psVkPinning::PS_VK_PINNING_IMPORT);
        let ours: Vec<(usize, usize)> = own.chain(imported.map(|a| (a.at, a.len))).collect();
        let w = self.world;
        match self.rng.gen_range(0..20) {
            0 => (0, reg.len, PS_ERROR_INVALID_VALUE),
            1 => (0x10, 64, PS_ERROR_NOT_PINNABLE),
            2 => (stack.as_ptr() as usize, 1 << 40, PS_ERROR_NOT_PINNABLE),
            3 => (usize::MAX - 4095, 64, PS_ERROR_NOT_PINNABLE),
            4 => (usize::MAX - 8, 64, PS_ERROR_INVALID_VALUE),
            5 => (w.read_only, 100, PS_ERROR_NOT_PINNABLE),
            6 => (w.no_access + 100, 2 * 4096, PS_ERROR_NOT_PINNABLE),
            7 => (w.hole + 100, 4096, PS_ERROR_NOT_PINNABLE),
            8 if !ours.is_empty() => {
                let (at, len) = pick(&mut self.rng, &ours);
                let from = at + self.rng.gen_range(0..len);
                (from, 1, PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
            }
            _ => (reg.ptr(), reg.len, PS_SUCCESS),
        }
    }

    fn register(&mut self) {
        let len = pick(&mut self.rng, &[0, 1, 100, 4096, 12345, CHUNK, 3 * CHUNK]);
        let byte = self.rng.gen();
        let at = self.rng.gen_range(0..64);
        let reg = Reg {
            mem: vec![byte; len + 64],
            at,
            len,
        };
        let (p, bytes, range) = self.range(&reg);
        let flags = pick(&mut self.rng, &[0, 0, 0, 0, 1, 2]);
        let t = self.target();
        let invalid = p == 0 || bytes == 0 || flags != 0 || range == PS_ERROR_INVALID_VALUE;
        let want = match t.refused() {
            _ if invalid => PS_ERROR_INVALID_VALUE,
            Some(code) => code,
            None if !t.imports() => PS_ERROR_STRATEGY_UNAVAILABLE,
            None => range,
        };
        let h = t.h;
        let _gate = GATE.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: live or NULL handles; the range is `reg`'s, kept until unregistered, or
        // refused before any use.
        let code = unsafe {
            psVkHostRegister(
                h.instance,
                h.physical,
                h.device,
                h.gipa,
                p as *mut c_void,
                bytes,
                flags,
            )
        };
        if expect("psVkHostRegister", code, &[want]) == PS_SUCCESS {
            assert!(
                reg.mem.iter().all(|&b| b == byte),
                "registration changed the bytes"
            );
            self.seen.push(p);
            self.regs.push(reg);
        }
    }

    fn unregister(&mut self) {
        if !self.regs.is_empty() && self.rng.gen_bool(0.6) {
            let i = self.rng.gen_range(0..self.regs.len());
            let reg = self.regs.swap_remove(i);
            let p = reg.ptr() as *mut c_void;
            if reg.len > 1 {
                let inner = p.cast::<u8>().wrapping_add(1).cast();
                let code = psVkHostUnregister(inner);
                expect(
                    "psVkHostUnregister",
                    code,
                    &[PS_ERROR_HOST_MEMORY_NOT_REGISTERED],
                );
            }
            expect("psVkHostUnregister", psVkHostUnregister(p), &[PS_SUCCESS]);
            let again = psVkHostUnregister(p);
            expect(
                "psVkHostUnregister",
                again,
                &[PS_ERROR_HOST_MEMORY_NOT_REGISTERED],
            );
            return;
        }
        if let Some(a) = self.allocs.first() {
            let code = psVkHostUnregister(a.at as *mut c_void);
            expect(
                "psVkHostUnregister",
                code,
                &[PS_ERROR_HOST_MEMORY_NOT_REGISTERED],
            );
        }
        let code = psVkHostUnregister(ptr::null_mut());
        expect("psVkHostUnregister", code, &[PS_ERROR_INVALID_VALUE]);
    }

    /// One of this thread's ranges (start, length, how it came, how pinned), or a foreign
    /// address with length 0.
    fn some_range(&mut self) -> (usize, usize, psHostKind, psVkPinning) {
        use psHostKind::*;
        let mut all: Vec<_> = self
            .allocs
            .iter()
            .map(|a| (a.at, a.len, PS_HOST_ALLOCATED, a.pinning))
            .collect();
        let import = psVkPinning::PS_VK_PINNING_IMPORT;
        all.extend(
            self.regs
                .iter()
                .map(|r| (r.ptr(), r.len, PS_HOST_REGISTERED, import)),
        );
        match all.is_empty() || self.rng.gen_bool(0.1) {
            true => (0x11, 0, PS_HOST_ALLOCATED, import),
            false => pick(&mut self.rng, &all),
        }
    }

    fn chunks(&mut self) {
        let (start, len, ..) = self.some_range();
        let at = start + self.rng.gen_range(0..len.max(1));
        let mut count = 7usize;
        let null_count = self.rng.gen_bool(0.05);
        let out = if null_count {
            ptr::null_mut()
        } else {
            &mut count as *mut usize
        };
        // SAFETY: `out` is NULL or writable; no array.
        let code = unsafe { psVkHostGetChunks(at as *const c_void, ptr::null_mut(), 0, out) };
        let want = match (null_count, len) {
            (true, _) => PS_ERROR_INVALID_VALUE,
            (_, 0) => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            _ => PS_SUCCESS,
        };
        if expect("psVkHostGetChunks", code, &[want]) != PS_SUCCESS {
            return;
        }
        let n = count;
        let capacity = pick(&mut self.rng, &[n, n + 3, n - 1]);
        let mut list = vec![std::mem::MaybeUninit::<psVkChunk>::uninit(); capacity];
        let mut got = 0usize;
        // SAFETY: `list` holds `capacity` writable entries; `got` is writable.
        let code = unsafe {
            psVkHostGetChunks(
                at as *const c_void,
                list.as_mut_ptr().cast(),
                capacity,
                &mut got,
            )
        };
        let want = if capacity < n {
            PS_ERROR_INVALID_VALUE
        } else {
            PS_SUCCESS
        };
        assert_eq!(got, n, "the count of a second call");
        if expect("psVkHostGetChunks", code, &[want]) != PS_SUCCESS {
            return;
        }
        // SAFETY: the first `n` entries were written by the successful call.
        let chunks: Vec<psVkChunk> = list[..n]
            .iter()
            .map(|c| unsafe { c.assume_init() })
            .collect();
        let mut next = 0;
        for c in &chunks {
            assert!(
                c.offset == next && c.size > 0 && c.size <= CHUNK,
                "{c:?} at {next}"
            );
            assert!(c.buffer != vk::Buffer::null() && c.memory != vk::DeviceMemory::null());
            next += c.size;
        }
        assert_eq!(next, len, "the chunks cover {next} of {len} bytes");
    }

    fn info(&mut self) {
        let (start, len, kind, pinning) = self.some_range();
        let at = start + self.rng.gen_range(0..len.max(1));
        let mut info = std::mem::MaybeUninit::<psVkHostInfo>::uninit();
        let null_out = self.rng.gen_bool(0.05);
        let out = if null_out {
            ptr::null_mut()
        } else {
            info.as_mut_ptr()
        };
        // SAFETY: `out` is NULL or a writable psVkHostInfo.
        let code = unsafe { psVkHostGetInfo(at as *const c_void, out) };
        let want = match (null_out, len) {
            (true, _) => PS_ERROR_INVALID_VALUE,
            (_, 0) => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            _ => PS_SUCCESS,
        };
        if expect("psVkHostGetInfo", code, &[want]) == PS_SUCCESS {
            // SAFETY: filled by the successful call.
            let info = unsafe { info.assume_init() };
            assert_eq!((info.base as usize, info.bytes), (start, len));
            assert!(info.kind == kind && info.pinning == pinning && info.chunk_count >= 1);
        }
    }

    /// Releases everything the thread still holds.
    fn finish(mut self) -> Vec<usize> {
        for a in self.allocs.drain(..) {
            assert_eq!(
                psVkHostFree(a.at as *mut c_void),
                PS_SUCCESS,
                "{}",
                detail()
            );
        }
        for r in std::mem::take(&mut self.regs) {
            let code = psVkHostUnregister(r.ptr() as *mut c_void);
            assert_eq!(code, PS_SUCCESS, "{}", detail());
        }
        self.seen
    }
}

/// One thread's run; its pointers.
fn run(seed: u64, world: World) -> Vec<usize> {
    let mut f = Fuzz {
        rng: SmallRng::seed_from_u64(seed),
        world,
        allocs: Vec::new(),
        regs: Vec::new(),
        seen: Vec::new(),
    };
    for _ in 0..CALLS {
        f.step();
    }
    f.finish()
}

#[test]
fn random_vulkan_calls_from_several_threads_return_their_codes_end_and_leave_nothing() {
    let seed = fuzzing::seed();
    std::env::set_var("PINSTREAM_MAX_CHUNK", CHUNK.to_string());
    let (vk12, vk10) = (Vk::new(vk::API_VERSION_1_2), Vk::new(vk::API_VERSION_1_0));
    let gipa = fake::install(vk12.gipa, vk12.instance.handle());
    let (import, plain, old) = (vk12.device(true), vk12.device(false), vk10.device(true));
    let pages = hostile_pages();
    let world = World {
        devices: [
            (Dev::Import, vk12.args(&import, gipa)),
            (Dev::Plain, vk12.args(&plain, gipa)),
            (Dev::Old, vk10.args(&old, gipa)),
        ],
        hole: pages.hole,
        no_access: pages.no_access,
        read_only: pages.read_only,
    };
    let runs = (0..THREADS)
        .map(|_| Box::new(move |seed| run(seed, world)) as fuzzing::Work<_>)
        .collect();
    let seen: Vec<usize> = fuzzing::threads(seed, LIMIT, runs).concat();
    eprintln!("{} ranges made", seen.len());
    assert!(
        seen.len() >= THREADS * 10,
        "too few calls succeeded to test what success gives"
    );
    for p in seen {
        let mut info = std::mem::MaybeUninit::<psVkHostInfo>::uninit();
        // SAFETY: a writable psVkHostInfo; `p` is only looked up.
        let code = unsafe { psVkHostGetInfo(p as *const c_void, info.as_mut_ptr()) };
        assert_eq!(
            code, PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            "{p:#x} still known after every release"
        );
    }
    assert_eq!(
        fake::live(),
        (0, 0),
        "buffers and memory objects left (seed {seed})"
    );
}
