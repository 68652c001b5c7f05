//! What psHostFree and psHostUnregister say about a pointer they cannot release: one
//! sentence, naming the range's start and the call that releases it.

mod common;

use common::Cl;
use pinstream_capi::*;
use std::ffi::{c_void, CStr};

fn detail() -> String {
    // SAFETY: this thread's NUL-terminated detail, read before another call.
    unsafe { CStr::from_ptr(psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn an_interior_pointer_is_told_the_start_to_pass_in_one_message() {
    let cl = Cl::new();
    let mut p: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: `psHostAlloc`'s contract holds: `cl.ctx` is a live context that `cl` owns until
        // it drops, and `p` is a writable local `void *`.
        unsafe { psHostAlloc(cl.ctx.cast(), 4096, 0, &mut p) },
        PS_SUCCESS,
        "{}",
        detail()
    );
    let start = format!("{:#x}", p as usize);
    let inner = p.cast::<u8>().wrapping_add(16).cast::<c_void>();
    assert_eq!(psHostFree(inner), PS_ERROR_INVALID_HOST_POINTER);
    let d = detail();
    assert!(
        d.contains("16 bytes into") && d.contains(&format!("psHostFree({start})")),
        "{d}"
    );
    for contradiction in ["never", "twice", "already", ". "] {
        assert!(!d.contains(contradiction), "`{contradiction}` in: {d}");
    }
    // The start of a block of the other kind names the call that releases it.
    assert_eq!(psHostUnregister(p), PS_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert!(
        detail().contains(&format!("psHostFree({start})")),
        "{}",
        detail()
    );
    assert_eq!(psHostFree(p), PS_SUCCESS);
    assert_eq!(psHostFree(p), PS_ERROR_INVALID_HOST_POINTER);
    assert!(
        detail().contains("released already") && !detail().contains("bytes into"),
        "{}",
        detail()
    );
}
