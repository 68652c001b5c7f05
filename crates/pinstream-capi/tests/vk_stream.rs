//! The psVkStream* calls through their extern "C" functions, as a Vulkan program makes them,
//! on the first Vulkan device (lavapipe in CI): the program's own instance and device, memory
//! from psVkHostAlloc and psVkHostRegister, a WGSL kernel, and the psStream* calls for the
//! rest. Exact results in place over passes with and without residency, inputs to an output
//! with a resident and a scalar, async runs, the refusals (each naming the call to use), a
//! fault injected at each stage leaving the stream usable, and each block's imports into the
//! streams' devices counted as streams come and go and blocks are freed.
#![cfg(all(feature = "vulkan", target_os = "linux"))]

mod streams;
mod vk_common;

use ash::vk;
use pinstream_capi::*;
use std::ffi::{c_void, CString};
use std::ptr;
use streams::{
    detail, each_fault_fails_the_run, in_place_exact, ok, passes_with_and_without_residency,
    seeded, Pinned, S,
};
use vk_common::Vk;

/// The in-place step (the seed's kernel in WGSL, entry `seed`).
const STEP: &str = include_str!("../../../examples/seed.wgsl");

/// c = a + k * b + w[i % 16], with `w` resident and `k` a scalar.
const AXPY: &str = "struct Args { n: u32, k: u32 }
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read> y: array<u32>;
@group(0) @binding(2) var<storage, read_write> c: array<u32>;
@group(0) @binding(3) var<storage, read> w: array<u32>;
var<immediate> a: Args;
@compute @workgroup_size(64)
fn axpy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>,
        @builtin(local_invocation_index) l: u32) {
    let i = (wg.y * g.x + wg.x) * 64u + l;
    if (i < a.n) { c[i] = x[i] + a.k * y[i] + w[i % 16u]; }
}";

/// The program: its instance (Vulkan 1.2) and a device with the import extension.
struct Program {
    dev: vk_common::Device,
    vk: Vk,
}

impl Program {
    fn new() -> Program {
        let vk = Vk::new(vk::API_VERSION_1_2);
        let dev = vk.device(true);
        Program { dev, vk }
    }
    fn handles(&self) -> vk_common::Handles {
        self.vk.args(&self.dev, self.vk.gipa)
    }
    /// `words` u32 from psVkHostAlloc.
    fn alloc(&self, words: usize) -> Pinned {
        let h = self.handles();
        let mut p = ptr::null_mut();
        // SAFETY: live handles of this program, a writable pointer.
        ok(
            unsafe {
                psVkHostAlloc(
                    h.instance,
                    h.physical,
                    h.device,
                    h.gipa,
                    words * 4,
                    0,
                    &mut p,
                )
            },
            "psVkHostAlloc",
        );
        Pinned(p, words, psVkHostFree)
    }
    /// A stream on the program's GPU.
    fn stream(&self, budget: usize, block: usize) -> S {
        let h = self.handles();
        let mut s = ptr::null_mut();
        // SAFETY: live handles of this program, a writable handle.
        ok(
            unsafe { psVkStreamCreate(&mut s, h.instance, h.physical, h.gipa, budget, block) },
            "psVkStreamCreate",
        );
        S(s)
    }
}

/// A Vulkan stream's WGSL kernel ([`S`] is destroyed when dropped).
impl S {
    fn kernel(&self, source: &str, entry: &str) -> Result<(), (psError_t, String)> {
        let (s, e) = (CString::new(source).unwrap(), CString::new(entry).unwrap());
        // SAFETY: NUL-terminated strings.
        match unsafe { psVkStreamSetKernel(self.0, s.as_ptr(), e.as_ptr()) } {
            PS_SUCCESS => Ok(()),
            code => Err((code, detail())),
        }
    }
}

#[test]
fn in_place_passes_with_and_without_residency_are_exact() {
    let p = Program::new();
    let mut data = p.alloc(64 << 10); // 256 KiB
    {
        let s = p.stream(256 << 10, 16 << 10);
        s.kernel(STEP, "seed").unwrap();
        assert_eq!(vk_stream_imports(data.0), 0, "imported before any run");
        passes_with_and_without_residency(&s, &mut data, |data| {
            // Imported once, on the first run, and kept for the later ones.
            assert_eq!(vk_stream_imports(data.0), 1);
        });
    }
    // The stream is gone, its import with it.
    assert_eq!(vk_stream_imports(data.0), 0);
}

#[test]
fn registered_memory_inputs_to_an_output_with_a_resident_and_a_scalar() {
    let p = Program::new();
    let words = 20_000;
    let (mut x, mut w) = (p.alloc(words), p.alloc(16));
    x.words().copy_from_slice(&seeded(words));
    w.words()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = 1000 * i as u32);
    // y and c in the program's own memory, registered (not page-aligned: a Vec's).
    let mut y: Vec<u32> = (0..words as u32).collect();
    let mut c = vec![0u32; words];
    let h = p.handles();
    for (ptr, bytes) in [
        (y.as_mut_ptr().cast::<c_void>(), words * 4),
        (c.as_mut_ptr().cast(), words * 4),
    ] {
        // SAFETY: live handles; the vectors outlive their registrations.
        ok(
            unsafe { psVkHostRegister(h.instance, h.physical, h.device, h.gipa, ptr, bytes, 0) },
            "psVkHostRegister",
        );
    }
    {
        let s = p.stream(256 << 10, 8 << 10);
        s.kernel(AXPY, "axpy").unwrap();
        ok(psStreamAddInput(s.0, x.0, words * 4), "input x");
        ok(
            psStreamAddInput(s.0, y.as_ptr().cast(), words * 4),
            "input y",
        );
        ok(
            psStreamSetOutput(s.0, c.as_mut_ptr().cast(), words * 4, 1),
            "output",
        );
        ok(psStreamAddResident(s.0, w.0, 64), "resident");
        ok(psStreamSetTypes(s.0, 8, 8), "types");
        s.arg("k", "3");
        for passes in [1, 2] {
            c.fill(0);
            let r = s
                .run(passes, PS_RESIDENCY_AUTO)
                .unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(r.passes, passes as u64);
            let xs = seeded(words);
            for (i, &got) in c.iter().enumerate() {
                let want = xs[i]
                    .wrapping_add(3u32.wrapping_mul(i as u32))
                    .wrapping_add(1000 * (i % 16) as u32);
                assert_eq!(got, want, "c[{i}] after {passes} passes");
            }
        }
        // Asynchronously: issued, then waited for with psStreamSynchronize.
        c.fill(0);
        ok(
            psVkStreamRunAsync(s.0, 1, PS_RESIDENCY_OFF),
            "psVkStreamRunAsync",
        );
        ok(psStreamSynchronize(s.0), "psStreamSynchronize");
        assert_eq!(
            c[words - 1],
            seeded(words)[words - 1]
                .wrapping_add(3 * (words as u32 - 1))
                .wrapping_add(1000 * ((words - 1) % 16) as u32)
        );
    }
    for ptr in [y.as_mut_ptr().cast::<c_void>(), c.as_mut_ptr().cast()] {
        ok(psVkHostUnregister(ptr), "psVkHostUnregister");
    }
}

#[test]
fn refusals_name_the_call_to_use() {
    let p = Program::new();
    let mut data = p.alloc(4096);
    let s = p.stream(64 << 10, 8 << 10);
    // No kernel yet.
    ok(
        psStreamSetInPlace(s.0, data.0, data.bytes()),
        "psStreamSetInPlace",
    );
    let e = s.run(1, PS_RESIDENCY_OFF).unwrap_err();
    assert_eq!(e.0, PS_ERROR_INVALID_VALUE, "{e:?}");
    assert!(e.1.contains("psVkStreamSetKernel"), "{}", e.1);
    // WGSL that does not compile: its line; an entry that is not there: the ones there are.
    let e = s
        .kernel(
            "@compute @workgroup_size(1) fn k() { let a: u32 = 1.5; }",
            "k",
        )
        .unwrap_err();
    assert_eq!(e.0, PS_ERROR_INVALID_KERNEL, "{e:?}");
    assert!(e.1.contains("WGSL") && e.1.contains(":1:"), "{}", e.1);
    let e = s.kernel(STEP, "nope").unwrap_err();
    assert_eq!(e.0, PS_ERROR_INVALID_KERNEL, "{e:?}");
    assert!(e.1.contains("entry points (seed)"), "{}", e.1);
    // The OpenCL spellings: each names the Vulkan one.
    // SAFETY: a Vulkan stream refuses any kernel, NULL too, before reading it.
    let code = unsafe { psStreamSetKernel(s.0, ptr::null_mut()) };
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(detail().contains("psVkStreamSetKernel"), "{}", detail());
    let fake = 0x1234usize as cl_kernel;
    // SAFETY: a Vulkan stream refuses any kernel before reading it.
    let code = unsafe { psStreamSetKernel(s.0, fake) };
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(detail().contains("psVkStreamSetKernel"), "{}", detail());
    s.kernel(STEP, "seed").unwrap();
    let mut event = ptr::null_mut();
    // SAFETY: a writable event.
    let code = unsafe { psStreamRunAsync(s.0, 1, PS_RESIDENCY_OFF, &mut event) };
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(detail().contains("psVkStreamRunAsync"), "{}", detail());
    assert!(event.is_null());
    // Memory no psVkHost* call pinned: refused, naming them.
    let mut plain = vec![0u32; 4096];
    ok(
        psStreamSetInPlace(s.0, plain.as_mut_ptr().cast(), 4096 * 4),
        "psStreamSetInPlace",
    );
    let e = s.run(1, PS_RESIDENCY_OFF).unwrap_err();
    assert_eq!(e.0, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "{e:?}");
    assert!(
        e.1.contains("psVkHostRegister") && e.1.contains("psVkHostAlloc"),
        "{}",
        e.1
    );
    // Past the end of a block.
    ok(
        psStreamSetInPlace(s.0, data.0, data.bytes() + 4),
        "psStreamSetInPlace",
    );
    let e = s.run(1, PS_RESIDENCY_OFF).unwrap_err();
    assert_eq!(e.0, PS_ERROR_HOST_MEMORY_NOT_REGISTERED, "{e:?}");
    assert!(e.1.contains("runs past the end"), "{}", e.1);
    // Still usable.
    in_place_exact(&s, &mut data, 2, PS_RESIDENCY_AUTO);
    // The create call's own refusals.
    let h = p.handles();
    let mut t = ptr::null_mut();
    // SAFETY: NULL handles are refused before use.
    let code = unsafe {
        psVkStreamCreate(
            &mut t,
            h.instance,
            vk::PhysicalDevice::null(),
            h.gipa,
            1 << 20,
            1 << 16,
        )
    };
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(detail().contains("VkPhysicalDevice"), "{}", detail());
    // SAFETY: as above.
    let code =
        unsafe { psVkStreamCreate(&mut t, h.instance, h.physical, h.gipa, 1 << 16, 1 << 20) };
    assert_eq!(code, PS_ERROR_INVALID_VALUE);
    assert!(t.is_null());
    // psVkStreamRunAsync with passes 0.
    assert_eq!(
        psVkStreamRunAsync(s.0, 0, PS_RESIDENCY_OFF),
        PS_ERROR_INVALID_VALUE
    );
}

#[test]
fn a_fault_at_each_stage_fails_the_run_and_leaves_the_stream_usable() {
    let p = Program::new();
    let mut data = p.alloc(64 << 10);
    let s = p.stream(256 << 10, 16 << 10);
    s.kernel(STEP, "seed").unwrap();
    each_fault_fails_the_run(&s, &mut data, |what, code, why| {
        // The driver's out-of-memory error, as the Vulkan backend's fault gives it.
        assert_eq!(code, PS_ERROR_MEMORY_ALLOCATION, "{what}: {why}");
        assert!(
            why.contains("VK_ERROR_OUT_OF_DEVICE_MEMORY"),
            "{what}: {why}"
        );
    });
}

/// Imports as streams and blocks come and go: two streams over one block import it once
/// each; destroying one releases its import only; a block freed while a stream lives takes
/// that stream's import with it, and the stream, destroyed later, has nothing left to release;
/// a block allocated afterwards (perhaps at the freed one's address) is imported anew and
/// streams exactly. (On lavapipe an import is the host memory itself, so a stale import
/// would read the new data: the counts, not the values, show that it was not used.)
#[test]
fn imports_go_with_their_stream_or_their_block() {
    let p = Program::new();
    let mut data = p.alloc(32 << 10);
    let (a, b) = (p.stream(64 << 10, 16 << 10), p.stream(64 << 10, 16 << 10));
    for s in [&a, &b] {
        s.kernel(STEP, "seed").unwrap();
        in_place_exact(s, &mut data, 1, PS_RESIDENCY_OFF);
    }
    assert_eq!(vk_stream_imports(data.0), 2);
    drop(a);
    assert_eq!(vk_stream_imports(data.0), 1);
    in_place_exact(&b, &mut data, 2, PS_RESIDENCY_OFF);
    assert_eq!(vk_stream_imports(data.0), 1);
    drop(data);
    for _ in 0..3 {
        let mut again = p.alloc(32 << 10);
        assert_eq!(vk_stream_imports(again.0), 0);
        in_place_exact(&b, &mut again, 2, PS_RESIDENCY_OFF);
        assert_eq!(vk_stream_imports(again.0), 1);
    }
    drop(b);
}
