//! Two streams at once from two threads, on one context and on two contexts.

use pinstream::backend::opencl::{default_device, devices, Context, DeviceInfo};
use pinstream::engine::{run, DType, Job, StreamOptions, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{mix_u32_ref, value, MIX_U32};

fn device() -> DeviceInfo {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    default_device(&all).unwrap().clone()
}

/// Streams `n` u32 values in place through `ctx` and checks every one; returns the slots used.
fn stream_and_check(ctx: &Context, n: usize, seed: u64) -> usize {
    let mut kernel = ctx
        .build_program(MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let mut r = HostRegion::new(ctx, n * 4, &PinOptions::default()).unwrap();
    for (i, v) in r.typed_mut::<u32>().unwrap().iter_mut().enumerate() {
        *v = value(seed, i as u64) as u32;
    }
    let opts = StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: 256 << 10,
        in_per_out: 1,
        slots: None,
        vram_budget: 4 << 20,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: pinstream::engine::BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    };
    let job = Job {
        in_place: Some(&mut r),
        ..Job::default()
    };
    let rep = run(ctx, &mut kernel, job, &opts, &|_, _| {}).unwrap();
    for (i, v) in r.typed::<u32>().unwrap().iter().enumerate() {
        assert_eq!(
            *v,
            mix_u32_ref(value(seed, i as u64) as u32, i as u64),
            "seed {seed}, element {i}"
        );
    }
    rep.slots
}

#[test]
fn two_streams_on_one_context() {
    let ctx = Context::new(&device()).unwrap();
    std::thread::scope(|s| {
        let a = s.spawn(|| stream_and_check(&ctx, 3 << 20, 1));
        let b = s.spawn(|| stream_and_check(&ctx, (2 << 20) + 5, 2));
        assert_eq!(a.join().unwrap(), 4);
        assert_eq!(b.join().unwrap(), 4);
    });
}

#[test]
fn two_streams_on_two_contexts() {
    let dev = device();
    let (c1, c2) = (Context::new(&dev).unwrap(), Context::new(&dev).unwrap());
    std::thread::scope(|s| {
        let a = s.spawn(|| stream_and_check(&c1, 3 << 20, 3));
        let b = s.spawn(|| stream_and_check(&c2, 3 << 20, 4));
        a.join().unwrap();
        b.join().unwrap();
    });
}

#[test]
fn regions_and_contexts_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Context>();
    assert_send_sync::<HostRegion>();
    assert_send_sync::<pinstream::backend::opencl::Queue>();
    assert_send_sync::<pinstream::backend::opencl::DeviceBuffer>();
    fn assert_send<T: Send>() {}
    assert_send::<pinstream::backend::opencl::Kernel>();
    let ctx = Context::new(&device()).unwrap();
    let region = HostRegion::new(&ctx, 1 << 20, &PinOptions::default()).unwrap();
    let len = std::thread::spawn(move || region.len()).join().unwrap();
    assert_eq!(len, 1 << 20);
}
