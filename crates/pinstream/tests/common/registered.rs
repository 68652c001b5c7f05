//! `HostApi::register` on any API: the caller's own memory, registered, streamed through a
//! kernel in place, and read back in the caller's memory (included with `#[path]` by the
//! tests that register).

use pinstream::backend::api::{Device, DeviceOf, Program};
use pinstream::engine::{run, Job, StreamOptions};
use pinstream::host::{CallerRange, HostApi, PinState, Pinned, RegisterRequest};
use pinstream_lab::kernels::{mix_u32_ref, Builtins};
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Memory the test owns, aligned for every API's registration (64 KiB: a page or more).
pub struct Owned {
    ptr: *mut u8,
    layout: Layout,
}

impl Owned {
    pub fn new(bytes: usize) -> Owned {
        let layout = Layout::from_size_align(bytes, 64 << 10).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocating {bytes} bytes failed");
        Owned { ptr, layout }
    }

    pub fn words(&mut self) -> &mut [u32] {
        // SAFETY: the allocation is `layout.size()` bytes, 64 KiB-aligned, zeroed, and
        // borrowed exclusively here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.layout.size() / 4) }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// Registers `n` bytes of the test's memory with `device`, streams `mix_u32` in place over
/// them in blocks of `block` (up to the device and back into the caller's memory), and checks
/// every element in the caller's memory once the registration is released. Returns the pin
/// state the registered memory reported.
pub fn round_trip<A: HostApi + Builtins>(
    device: &DeviceOf<A>,
    n: usize,
    opts: &StreamOptions,
) -> PinState {
    round_trip_at::<A>(device, (0, n), RegisterRequest::default(), opts)
}

/// [`round_trip`] of the `n` bytes `at` bytes into the test's memory (a multiple of 4),
/// registered as `request` asks.
pub fn round_trip_at<A: HostApi + Builtins>(
    device: &DeviceOf<A>,
    (at, n): (usize, usize),
    request: RegisterRequest,
    opts: &StreamOptions,
) -> PinState {
    let mut owned = Owned::new(at + n);
    for (i, v) in owned.words().iter_mut().skip(at / 4).enumerate() {
        *v = i as u32 ^ 0xabcd;
    }
    // SAFETY: `owned` outlives `memory`, which is dropped below before `owned` is read, and
    // nothing else touches it while `memory` lives.
    let range = unsafe { CallerRange::new(owned.ptr.wrapping_add(at), n) };
    let mut memory = A::register(device, range, request).expect("registering the caller's memory");
    let pin = memory.pin_state();
    let mut kernel = device
        .build(A::MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let job = Job {
        in_place: Some(&mut memory),
        ..Job::default()
    };
    let r = run(device, &mut kernel, job, opts, &|_, _| {}).unwrap();
    assert_eq!(r.blocks, n.div_ceil(opts.block_bytes));
    drop(memory);
    for (i, v) in owned.words().iter().skip(at / 4).enumerate() {
        let i = i as u32;
        assert_eq!(*v, mix_u32_ref(i ^ 0xabcd, u64::from(i)), "element {i}");
    }
    pin
}
