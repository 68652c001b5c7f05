//! What the psStream* tests of both APIs share (tests/stream.rs: OpenCL; tests/vk_stream.rs:
//! Vulkan): the in-place step and its CPU twin, a stream destroyed when dropped, and a run
//! of the step whose every value is checked.
#![allow(dead_code)]

use pinstream_capi::*;
use std::ffi::{c_void, CStr, CString};

/// The step the kernels make: x * 2654435761 + 12345 (mod 2^32).
pub fn step_cpu(x: u32) -> u32 {
    x.wrapping_mul(2654435761).wrapping_add(12345)
}

/// This thread's detail of its last failed call.
pub fn detail() -> String {
    // SAFETY: the detail is a NUL-terminated string of this thread's.
    unsafe { CStr::from_ptr(psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

pub fn ok(code: psError_t, what: &str) {
    assert_eq!(code, PS_SUCCESS, "{what}: {}", detail());
}

pub fn seeded(words: usize) -> Vec<u32> {
    (0..words as u32)
        .map(|i| i.wrapping_mul(0x9E37_79B1) ^ 0xA5A5_A5A5)
        .collect()
}

/// Pinned memory of `.1` u32 words at `.0`, from either API's allocation, freed with `.2`
/// (`psHostFree`, `psVkHostFree`) when dropped.
pub struct Pinned(
    pub *mut c_void,
    pub usize,
    pub extern "C" fn(*mut c_void) -> psError_t,
);

impl Pinned {
    pub fn words(&mut self) -> &mut [u32] {
        // SAFETY: the allocation gave `.1 * 4` bytes, page-aligned.
        unsafe { std::slice::from_raw_parts_mut(self.0.cast(), self.1) }
    }
    pub fn bytes(&self) -> usize {
        self.1 * 4
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        assert_eq!((self.2)(self.0), PS_SUCCESS, "{}", detail());
    }
}

/// A stream, destroyed when dropped.
pub struct S(pub psStream_t);

impl S {
    pub fn run(&self, passes: u32, residency: u64) -> Result<psStreamReport, (psError_t, String)> {
        let mut r = psStreamReport::default();
        // SAFETY: a writable report.
        match unsafe { psStreamRun(self.0, passes, residency, &mut r) } {
            PS_SUCCESS => Ok(r),
            code => Err((code, detail())),
        }
    }
    pub fn arg(&self, name: &str, value: &str) {
        let (n, v) = (CString::new(name).unwrap(), CString::new(value).unwrap());
        // SAFETY: NUL-terminated strings.
        ok(
            unsafe { psStreamSetArg(self.0, n.as_ptr(), v.as_ptr()) },
            "psStreamSetArg",
        );
    }
}

impl Drop for S {
    fn drop(&mut self) {
        assert_eq!(psStreamDestroy(self.0), PS_SUCCESS, "{}", detail());
    }
}

/// Runs the in-place step over `data`, `passes` passes with `residency`, and checks every
/// value.
pub fn in_place_exact(s: &S, data: &mut Pinned, passes: u32, residency: u64) -> psStreamReport {
    let start = seeded(data.1);
    data.words().copy_from_slice(&start);
    ok(
        psStreamSetInPlace(s.0, data.0, data.bytes()),
        "psStreamSetInPlace",
    );
    ok(psStreamSetTypes(s.0, 8, 8), "psStreamSetTypes");
    let r = s.run(passes, residency).unwrap_or_else(|e| panic!("{e:?}"));
    let want: Vec<u32> = start
        .iter()
        .map(|&x| (0..passes).fold(x, |v, _| step_cpu(v)))
        .collect();
    assert!(
        data.words() == want.as_slice(),
        "passes {passes} residency {residency:#x}: wrong values"
    );
    assert_eq!(r.passes, passes as u64);
    r
}

/// A fault at each device stage (the 1st and the 3rd command of its kind) fails a 2-pass run
/// of the step in place over `data`, each failure checked by `check(what, code, detail)`,
/// and leaves the stream usable: the next run is exact.
pub fn each_fault_fails_the_run(s: &S, data: &mut Pinned, check: impl Fn(&str, psError_t, &str)) {
    use pinstream::backend::fault::{Fault, Operation};
    ok(psStreamSetInPlace(s.0, data.0, data.bytes()), "set");
    ok(psStreamSetTypes(s.0, 8, 8), "types");
    for op in [
        Operation::Allocate,
        Operation::Upload,
        Operation::Launch,
        Operation::Download,
    ] {
        for index in [0, 2] {
            let fault = Fault {
                op,
                index,
                device: None,
            };
            ok(stream_inject_fault(s.0, Some(fault)), "hook");
            let (code, why) = s.run(2, PS_RESIDENCY_AUTO).unwrap_err();
            check(&format!("{op:?}:{index}"), code, &why);
            ok(stream_inject_fault(s.0, None), "hook");
            in_place_exact(s, data, 2, PS_RESIDENCY_AUTO);
        }
    }
}

/// The step in place over `data` (16 blocks of the stream's) for 1, 2 and 5 passes, with and
/// without residency, every value checked: blocks stay resident only over several passes with
/// residency on; `after` checks more after each run.
pub fn passes_with_and_without_residency(
    s: &S,
    data: &mut Pinned,
    mut after: impl FnMut(&mut Pinned),
) {
    for passes in [1, 2, 5] {
        for residency in [PS_RESIDENCY_AUTO, PS_RESIDENCY_OFF] {
            let r = in_place_exact(s, data, passes, residency);
            assert_eq!(r.blocks, 16);
            if residency == PS_RESIDENCY_OFF || passes == 1 {
                assert_eq!(r.resident_blocks, 0);
            } else {
                assert!(r.resident_blocks > 0, "{r:?}");
            }
            assert!(r.bytes_uploaded >= data.bytes() as u64 && r.upload_busy_s > 0.0);
            after(data);
        }
    }
}
