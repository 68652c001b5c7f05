//! `HostApi::register` (the caller's own memory, pinned as `cudaHostRegister` does) on the
//! default OpenCL device (PoCL in CI) and on the empty API: the data the caller wrote reaches
//! the device and comes back into the caller's memory, with the pin state the driver's basis
//! gives, and ranges that registration would not pin are refused before any driver call.
//! Vulkan's is in `vulkan.rs` (it needs the feature).

use pinstream::backend::api::{Adapter, Instance as _};
use pinstream::backend::empty::{Empty, EmptyInstance};
use pinstream::backend::opencl::OpenCl;
use pinstream::host::{CallerRange, HostApi, HostError, PinState};

mod common;
#[path = "common/registered.rs"]
mod registered;

#[test]
fn opencl_registers_the_callers_memory_and_streams_it_both_ways() {
    let ctx = common::test_ctx();
    let pin = registered::round_trip::<OpenCl>(&ctx, 1 << 20, &common::u32_opts(64 << 10));
    // PoCL's CPU device needs no pin; a GPU's driver pins `register` where its basis says.
    let cpu_only = ctx.devices().iter().all(|d| !d.is_gpu());
    assert_eq!(pin == PinState::NotNeeded, cpu_only, "{pin:?}");
}

#[test]
fn opencl_refuses_a_null_range_before_any_call() {
    let ctx = common::test_ctx();
    // SAFETY: a null range is refused before anything is registered.
    let range = unsafe { CallerRange::new(std::ptr::null_mut(), 4096) };
    assert!(matches!(
        OpenCl::register(&ctx, range, Default::default()),
        Err(HostError::NullPointer)
    ));
}

#[test]
fn the_empty_api_checks_the_range_then_refuses_it() {
    let dev = EmptyInstance::new_with(1, 1 << 20).adapters().unwrap()[0]
        .open()
        .unwrap();
    let mut owned = registered::Owned::new(64 << 10);
    // SAFETY: refused; nothing is registered over `owned`.
    let range = unsafe { CallerRange::new(owned.words().as_mut_ptr().cast(), 64 << 10) };
    let e = Empty::register(&dev, range, Default::default()).unwrap_err();
    assert!(e.to_string().contains("registers no caller memory"), "{e}");
    // SAFETY: as above.
    let null = unsafe { CallerRange::new(std::ptr::null_mut(), 1) };
    assert!(matches!(
        Empty::register(&dev, null, Default::default()),
        Err(HostError::NullPointer)
    ));
}
