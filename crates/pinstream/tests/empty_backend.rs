//! The layers above the backend, run on the empty API (no driver: devices are host memory,
//! kernels are Rust functions): finding and opening devices, building, pinning and streaming
//! are written once over `Api`/`HostApi`, so they run here exactly as on OpenCL or CUDA, and
//! every byte they move can be checked on any machine.

use pinstream::backend::adapter::{choose, DeviceChoice};
use pinstream::backend::api::{Adapter, BuildError, Device, Instance, KernelError, Program};
use pinstream::backend::empty::{Empty, EmptyInstance};
use pinstream_lab::kernels::mix_u32_ref;
mod common;

use common::u32_opts;
use pinstream::engine::{run, Job, StreamOptions};
use pinstream::host::{HostApi, PinRequest};

/// Two devices of 64 MiB whose programs may define `mix_u32(x, n, block, offset)`, the engine's
/// test kernel, computed by its CPU reference.
fn instance() -> EmptyInstance {
    let params = [
        ("uint*", "x"),
        ("ulong", "n"),
        ("ulong", "block"),
        ("ulong", "offset"),
    ];
    EmptyInstance::new_with(2, 64 << 20).with_kernel("mix_u32", &params, |bufs, values, global| {
        let value = |i: usize| u64::from_ne_bytes(values[i].try_into().unwrap());
        let (n, offset) = (value(0) as usize, value(2));
        assert!(global >= n, "a launch of {global} items for {n} elements");
        let x: &mut [u32] = bytemuck::cast_slice_mut(&mut bufs[0][..n * 4]);
        for (i, v) in x.iter_mut().enumerate() {
            *v = mix_u32_ref(*v, offset + i as u64);
        }
    })
}

#[test]
fn devices_are_found_and_chosen_as_on_any_api() {
    let inst = instance();
    let infos: Vec<_> = inst.adapters().unwrap().iter().map(Adapter::info).collect();
    assert_eq!(infos.len(), 2);
    assert_eq!(choose("empty", &infos, &DeviceChoice::Index(1)), Ok(1));
    let e = choose("empty", &infos, &DeviceChoice::Index(2)).unwrap_err();
    assert!(e.to_string().contains("0: empty device 0"), "{e}");
}

#[test]
fn a_program_gives_its_kernels_and_refuses_others() {
    let dev = instance().adapters().unwrap()[0].open().unwrap();
    let program = dev.build("mix_u32", "").unwrap();
    assert_eq!(program.kernel_names(), ["mix_u32"]);
    assert!(
        matches!(program.kernel("other"), Err(KernelError::NotDefined { name }) if name == "other")
    );
    assert!(matches!(dev.build("  ", ""), Err(BuildError::Source(_))));
    assert!(matches!(dev.build("nope", ""), Err(BuildError::Source(_))));
}

#[test]
fn a_pinned_region_streams_in_place_through_a_small_budget() {
    let dev = instance().adapters().unwrap()[0].open().unwrap();
    let mut kernel = dev.build("mix_u32", "").unwrap().kernel("mix_u32").unwrap();
    let n = 4 << 20;
    let mut x = Empty::pin(&dev, n, PinRequest::default()).unwrap();
    let want: Vec<u32> = (0..n as u32 / 4)
        .map(|i| mix_u32_ref(i ^ 0xabcd, u64::from(i)))
        .collect();
    for (i, v) in bytemuck::cast_slice_mut::<u8, u32>(&mut x.0)
        .iter_mut()
        .enumerate()
    {
        *v = i as u32 ^ 0xabcd;
    }
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let r = run(&dev, &mut kernel, job, &u32_opts(256 << 10), &|_, _| {}).unwrap();
    assert_eq!(r.blocks, 16);
    assert!(
        r.slots >= 2 && r.pool_bytes <= 1 << 20,
        "{} slots, {} bytes",
        r.slots,
        r.pool_bytes
    );
    assert_eq!(
        r.records.len(),
        3 * 16,
        "an upload, a launch and a download per block"
    );
    assert!(bytemuck::cast_slice::<u8, u32>(&x.0) == want.as_slice());
}

#[test]
fn a_budget_below_one_block_is_refused_before_anything_moves() {
    let dev = instance().adapters().unwrap()[0].open().unwrap();
    let mut kernel = dev.build("mix_u32", "").unwrap().kernel("mix_u32").unwrap();
    let mut x = Empty::pin(&dev, 1 << 20, PinRequest::default()).unwrap();
    let before = x.clone();
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    assert!(run(
        &dev,
        &mut kernel,
        job,
        &StreamOptions {
            vram_budget: 64 << 10,
            ..u32_opts(1 << 20)
        },
        &|_, _| {}
    )
    .is_err());
    assert_eq!(x, before, "a refused run wrote nothing");
}

/// An API whose queues all time their commands (the empty API, as CUDA and Vulkan) makes no
/// plain lanes: `plain_copies_in_flight` says so without running its closure; and it has one
/// way of waiting.
#[test]
fn an_api_without_plain_queues_gives_no_plain_lanes() {
    use pinstream::backend::lanes::plain_copies_in_flight;
    let adapter = instance().adapters().unwrap().remove(0);
    let device = adapter.open().unwrap();
    let ran = plain_copies_in_flight::<Empty, _>(&device, 1, |_| unreachable!("no plain lanes"));
    assert!(ran.unwrap().is_none());
    assert!(device.plain_queue().unwrap().is_none());
    assert_eq!(device.wait_mode(), None);
}
