//! The `psVk*` calls refuse what they cannot serve, with a code and a detail naming what is
//! needed, and never crash: sizes near `SIZE_MAX`, a `vkGetInstanceProcAddr` that lacks a
//! function the calls use, a Vulkan 1.0 instance, and ranges nothing maps (refused as
//! `psHostRegister` refuses them). On the first Vulkan device (lavapipe in CI).
// Linux: the ranges it makes (mmap at a fixed address, mprotect) and lavapipe; Wine offers
// Vulkan 1.0 only.
#![cfg(all(feature = "vulkan", target_os = "linux"))]

mod common;
mod vk_common;

use ash::vk;
use pinstream_capi::*;
use std::ffi::c_void;
use vk_common::{detail, fake, Handles, HostilePages, Vk};

/// `psVkHostAlloc` with `h`: its code, and the pointer (NULL on failure).
fn alloc(h: Handles, bytes: usize) -> (psError_t, *mut c_void) {
    let mut p = std::ptr::dangling_mut::<c_void>();
    // SAFETY: live handles of this test; `p` is writable.
    let code = unsafe { psVkHostAlloc(h.instance, h.physical, h.device, h.gipa, bytes, 0, &mut p) };
    (code, p)
}

/// `psVkHostRegister` of `bytes` at `at` with `h`.
fn register(h: Handles, at: usize, bytes: usize) -> psError_t {
    // SAFETY: live handles; the range is this test's memory or refused before any use.
    unsafe {
        psVkHostRegister(
            h.instance,
            h.physical,
            h.device,
            h.gipa,
            at as *mut c_void,
            bytes,
            0,
        )
    }
}

#[test]
fn sizes_near_size_max_are_refused_with_their_size() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    for import in [true, false] {
        let dev = vk.device(import);
        let h = vk.args(&dev, vk.gipa);
        for bytes in [
            usize::MAX,
            usize::MAX - 1,
            usize::MAX - 4095,
            usize::MAX - 100,
            1 << 63,
        ] {
            let (code, p) = alloc(h, bytes);
            let d = detail();
            assert!(
                code == PS_ERROR_MEMORY_ALLOCATION || code == PS_ERROR_STRATEGY_UNAVAILABLE,
                "{bytes} bytes (import {import}): {code}: {d}"
            );
            assert!(p.is_null(), "{bytes}: {p:?}");
            assert!(
                !d.contains(" 0 bytes") && !d.contains("at most 0"),
                "{bytes}: {d}"
            );
        }
    }
}

/// Every function the calls look up, hidden in turn: each call succeeds without it (one
/// the calls never use) or is refused naming it; none aborts ("panic in a function that
/// cannot unwind").
#[test]
fn a_missing_function_is_refused_naming_it() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let gipa = fake::install(vk.gipa, vk.instance.handle());
    let (with, without) = (vk.device(true), vk.device(false));
    let (h, plain) = (vk.args(&with, gipa), vk.args(&without, gipa));
    fake::record();
    every_call(h, plain, None);
    let names = fake::looked_up();
    assert!(names.len() > 20, "{} names looked up", names.len());
    let mut refused = 0;
    for name in &names {
        fake::hide(name);
        refused += every_call(h, plain, Some(name.to_str().unwrap()));
        fake::reset();
    }
    eprintln!(
        "{} functions looked up, {refused} calls refused",
        names.len()
    );
    assert!(
        refused >= 8,
        "only {refused} refusals among {} functions",
        names.len()
    );
    assert_eq!(fake::live(), (0, 0), "buffers or memory left");
}

/// psVkHostAlloc (both devices) and psVkHostRegister, each released where it succeeded; with
/// `hidden` missing, each succeeds or is refused naming it. How many were refused.
fn every_call(h: Handles, plain: Handles, hidden: Option<&str>) -> usize {
    let mut mem = vec![7u8; 3 * 4096];
    let mut refused = 0;
    let mut check = |code: psError_t, what: &str| {
        if code == PS_SUCCESS {
            return true;
        }
        let d = detail();
        let name = hidden.unwrap_or("(nothing hidden)");
        assert!(
            code != PS_ERROR_INTERNAL && d.contains(name),
            "{what} without {name}: {code}: {d}"
        );
        refused += 1;
        false
    };
    for (h, what) in [(h, "psVkHostAlloc"), (plain, "psVkHostAlloc (no import)")] {
        let (code, p) = alloc(h, 5000);
        if check(code, what) {
            assert_eq!(psVkHostFree(p), PS_SUCCESS, "{}", detail());
        }
    }
    let at = mem.as_mut_ptr() as usize + 100;
    if check(register(h, at, 8000), "psVkHostRegister") {
        assert_eq!(
            psVkHostUnregister(at as *mut c_void),
            PS_SUCCESS,
            "{}",
            detail()
        );
    }
    refused
}

/// A 1.0 instance: vkGetPhysicalDeviceProperties2 is the loader's emulation, which fills no
/// 1.1 structure: refused naming the version needed, on devices with and without the
/// import extension.
#[test]
fn a_vulkan_1_0_instance_is_refused_naming_the_version_needed() {
    let vk = Vk::new(vk::API_VERSION_1_0);
    let mut mem = vec![0u8; 4096];
    for import in [true, false] {
        let dev = vk.device(import);
        let h = vk.args(&dev, vk.gipa);
        let (code, p) = alloc(h, 4096);
        let d = detail();
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "import {import}: {d}");
        assert!(
            p.is_null() && d.contains("apiVersion") && d.contains("1.1"),
            "{d}"
        );
        let code = register(h, mem.as_mut_ptr() as usize, 4096);
        let d = detail();
        assert_eq!(code, PS_ERROR_INVALID_VALUE, "import {import}: {d}");
        assert!(d.contains("apiVersion") && d.contains("1.1"), "{d}");
    }
}

/// What `psHostRegister` refuses as not pinnable (addresses nothing maps, a read-only
/// mapping), `psVkHostRegister` refuses the same way, by the same check.
#[test]
fn ranges_nothing_maps_are_refused_as_ps_host_register_refuses_them() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let dev = vk.device(true);
    let h = vk.args(&dev, vk.gipa);
    let cl = common::Cl::new();
    let page = 4096;
    let HostilePages {
        hole,
        no_access,
        read_only,
    } = vk_common::hostile_pages();
    let stack = [0u8; 64];
    let cases = [
        ("a hole after a mapping", hole + 100, page),
        (
            "1 TiB over a 64-byte stack array",
            stack.as_ptr() as usize,
            1 << 40,
        ),
        ("the top of the address space", usize::MAX - page + 1, 64),
        ("the first page", 0x10, 64),
        ("a read-only mapping", read_only, 100),
        ("a page with no access", no_access + 100, 2 * page),
    ];
    for (what, at, bytes) in cases {
        let code = register(h, at, bytes);
        let d = detail();
        assert_eq!(code, PS_ERROR_NOT_PINNABLE, "{what}: {d}");
        assert!(d.starts_with("psVkHostRegister: "), "{what}: {d}");
        assert!(
            !d.contains("psHostAlloc"),
            "{what}: the OpenCL call named: {d}"
        );
        // SAFETY: a live context; the range is refused before any use.
        let cl_code = unsafe { psHostRegister(cl.ctx.cast(), at as *mut c_void, bytes, 0) };
        assert_eq!(cl_code, code, "{what}: psHostRegister: {}", detail());
        let mut info = std::mem::MaybeUninit::<psVkHostInfo>::uninit();
        // SAFETY: a writable psVkHostInfo.
        let known = unsafe { psVkHostGetInfo(at as *const c_void, info.as_mut_ptr()) };
        assert_eq!(
            known, PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            "{what}: left registered"
        );
    }
}

/// One registry holds both APIs' ranges, keyed by API: the same memory may be registered for
/// OpenCL and for Vulkan, never twice for one; each API's calls find and release their own.
#[test]
fn the_same_memory_registers_once_per_api() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let dev = vk.device(true);
    let h = vk.args(&dev, vk.gipa);
    let cl = common::Cl::new();
    let mut memory = vec![0u8; 1 << 20];
    let (at, bytes) = (memory.as_mut_ptr() as usize, memory.len());
    // SAFETY: a live context; the memory outlives the registration (released below).
    let cl_register = || unsafe { psHostRegister(cl.ctx.cast(), at as *mut c_void, bytes, 0) };
    assert_eq!(cl_register(), PS_SUCCESS, "{}", detail());
    assert_eq!(register(h, at, bytes), PS_SUCCESS, "{}", detail());
    // Twice for one API: refused, naming that API's call.
    assert_eq!(
        register(h, at + 4096, 4096),
        PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    );
    assert!(
        detail().contains("registered by psVkHostRegister"),
        "{}",
        detail()
    );
    assert_eq!(cl_register(), PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    assert!(
        detail().contains("registered by psHostRegister"),
        "{}",
        detail()
    );
    // Each API releases its own; the other's stays.
    assert_eq!(
        psVkHostUnregister(at as *mut c_void),
        PS_SUCCESS,
        "{}",
        detail()
    );
    let mut info = std::mem::MaybeUninit::<psHostInfo>::uninit();
    // SAFETY: a writable psHostInfo.
    let found = unsafe { psHostGetInfo(at as *const c_void, info.as_mut_ptr()) };
    assert_eq!(found, PS_SUCCESS, "the OpenCL range stays: {}", detail());
    let mut vk_info = std::mem::MaybeUninit::<psVkHostInfo>::uninit();
    // SAFETY: a writable psVkHostInfo.
    let gone = unsafe { psVkHostGetInfo(at as *const c_void, vk_info.as_mut_ptr()) };
    assert_eq!(gone, PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert_eq!(
        psVkHostUnregister(at as *mut c_void),
        PS_ERROR_HOST_MEMORY_NOT_REGISTERED
    );
    assert_eq!(
        psHostUnregister(at as *mut c_void),
        PS_SUCCESS,
        "{}",
        detail()
    );
    drop(memory);
}

/// A pointer given to the other API's call is refused as before, and the detail names the
/// call that takes it.
#[test]
fn a_pointer_of_the_other_api_is_refused_naming_its_call() {
    let vk = Vk::new(vk::API_VERSION_1_2);
    let dev = vk.device(true);
    let h = vk.args(&dev, vk.gipa);
    let cl = common::Cl::new();
    let (code, vk_ptr) = alloc(h, 1 << 16);
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    let mut cl_ptr = std::ptr::null_mut();
    // SAFETY: a live context; a writable pointer.
    let code = unsafe { psHostAlloc(cl.ctx.cast(), 1 << 16, 0, &mut cl_ptr) };
    assert_eq!(code, PS_SUCCESS, "{}", detail());
    assert_eq!(psHostFree(vk_ptr), PS_ERROR_INVALID_HOST_POINTER);
    let d = detail();
    assert!(
        d.contains("allocated by psVkHostAlloc: pass its start, as psVkHostFree("),
        "{d}"
    );
    assert_eq!(psVkHostFree(cl_ptr), PS_ERROR_INVALID_HOST_POINTER);
    let d = detail();
    assert!(
        d.contains("allocated by psHostAlloc: pass its start, as psHostFree("),
        "{d}"
    );
    let mut info = std::mem::MaybeUninit::<psHostInfo>::uninit();
    // SAFETY: a writable psHostInfo.
    let code = unsafe { psHostGetInfo(vk_ptr, info.as_mut_ptr()) };
    assert_eq!(code, PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert!(
        detail().contains("allocated by psVkHostAlloc (another API's range)"),
        "{}",
        detail()
    );
    // Each is still its own API's, and released there.
    assert_eq!(psVkHostFree(vk_ptr), PS_SUCCESS, "{}", detail());
    assert_eq!(psHostFree(cl_ptr), PS_SUCCESS, "{}", detail());
}
