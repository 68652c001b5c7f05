//! Library tests on the default OpenCL device (PoCL's CPU device in CI).

mod common;

use pinstream::backend::opencl::{default_device, devices, Context, DeviceInfo};
use pinstream::host::{HostError, HostRegion, PinOptions, Strategy, StrategyChoice};
use pinstream::par;

fn device() -> DeviceInfo {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    default_device(&all)
        .expect("an OpenCL device is needed")
        .clone()
}

fn forced(s: Strategy) -> PinOptions {
    PinOptions {
        strategy: StrategyChoice::Forced(s),
        ..Default::default()
    }
}

/// Writes fresh random data, uploads it, poisons the host copy, downloads, compares.
fn round_trip(ctx: &Context, region: &mut HostRegion, seed: u64) {
    let len = region.len();
    common::fill_random(region.slices_mut(0..len).unwrap(), seed);
    let mut want = vec![0u8; len];
    par::copy(&mut want, region.slices(0..len).unwrap());
    let q = ctx.queue().unwrap();
    let dev = ctx.device_buffer(len).unwrap();
    region.upload(&q, 0..len, &dev, 0, &[]).unwrap();
    region.wait().unwrap();
    par::invert(region.slices_mut(0..len).unwrap());
    assert_eq!(
        par::count_diff(region.slices(0..len).unwrap(), &want),
        len as u64,
        "poison must touch every byte"
    );
    region.download(&q, &dev, 0, 0..len, &[]).unwrap();
    // slices() waits for the download first.
    assert_eq!(
        par::count_diff(region.slices(0..len).unwrap(), &want),
        0,
        "{:?}",
        region
    );
}

#[test]
fn every_offered_strategy_round_trips_random_data() {
    let dev = device();
    let ctx = Context::new(&dev).unwrap();
    let offered = Strategy::offered(&dev);
    assert!(offered.contains(&Strategy::Register) && offered.contains(&Strategy::Pageable));
    for (i, s) in offered.into_iter().enumerate() {
        let size = (8 << 20) + 123;
        let mut region =
            HostRegion::new(&ctx, size, &forced(s)).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(region.strategy(), s);
        assert_eq!(region.len(), size);
        assert_eq!(region.reason(), format!("forced: {s} asked for by name"));
        round_trip(&ctx, &mut region, 1000 + i as u64);
        drop(region);
    }
}

#[test]
fn auto_chooses_register_on_pocl_and_says_why() {
    let dev = device();
    let ctx = Context::new(&dev).unwrap();
    let region = HostRegion::new(&ctx, 1 << 20, &PinOptions::default()).unwrap();
    if dev.platform_name.contains("Portable Computing Language") {
        assert_eq!(region.strategy(), Strategy::Register);
        assert!(
            region.reason().starts_with("auto: PoCL CPU device"),
            "{}",
            region.reason()
        );
    } else {
        assert!(region.reason().starts_with("auto: "), "{}", region.reason());
    }
    let (order, why) = pinstream::host::auto_order(&dev);
    assert_eq!(order[0], region.strategy());
    assert!(region.reason().contains(&why.to_string()));
}

#[test]
fn forced_chunks_cover_the_region_and_transfers_cross_them() {
    let ctx = Context::new(&device()).unwrap();
    for s in [Strategy::Register, Strategy::AllocHostPtr] {
        let opts = PinOptions {
            max_chunk: Some(1 << 20),
            ..forced(s)
        };
        let size = (5 << 20) + (1 << 19) + 7;
        let mut region = HostRegion::new(&ctx, size, &opts).unwrap();
        assert_eq!(region.chunk_count(), 6, "{s}");
        let ranges = region.chunk_ranges();
        assert_eq!(ranges.first().unwrap().start, 0);
        assert_eq!(ranges.last().unwrap().end, size);
        assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(region.is_contiguous(), s == Strategy::Register);
        assert_eq!(region.as_slice().is_some(), s == Strategy::Register);
        round_trip(&ctx, &mut region, 7);
        // A range that straddles a chunk boundary comes back as two slices.
        assert_eq!(
            region.slices((1 << 20) - 10..(1 << 20) + 10).unwrap().len(),
            2
        );
    }
}

#[test]
fn regions_above_the_max_allocation_are_chunked() {
    let dev = device();
    let ctx = Context::new(&dev).unwrap();
    let size = dev.max_alloc as usize + (4 << 20);
    let avail = pinstream::backend::os::host_room().map_or(u64::MAX, |r| r.bytes);
    assert!(
        avail > size as u64 / 4 * 5,
        "test needs {} bytes of host memory free",
        size / 4 * 5
    );
    // Default chunks: one registration (or allocation) up to the max allocation.
    let reg = HostRegion::new(&ctx, size, &forced(Strategy::Register)).unwrap();
    assert_eq!(reg.chunk_count(), size.div_ceil(dev.max_alloc as usize));
    assert!(reg.is_contiguous() && reg.as_slice().unwrap().len() == size);
    drop(reg);
    for s in [Strategy::Register, Strategy::AllocHostPtr] {
        // Asking for chunks above the max allocation gets max-allocation chunks.
        let opts = PinOptions {
            max_chunk: Some(usize::MAX),
            ..forced(s)
        };
        let mut region = HostRegion::new(&ctx, size, &opts).unwrap();
        assert_eq!(region.chunk_count(), 2, "{s}: max alloc {}", dev.max_alloc);
        assert!(region.chunk_ranges()[0].len() as u64 <= dev.max_alloc);
        // Round trip across the boundary only (the whole region would need a device buffer
        // above the max allocation).
        let mid = region.chunk_ranges()[0].end;
        let range = mid - (1 << 20)..mid + (1 << 20);
        common::fill_random(region.slices_mut(range.clone()).unwrap(), 3);
        let mut want = vec![0u8; range.len()];
        par::copy(&mut want, region.slices(range.clone()).unwrap());
        let q = ctx.queue().unwrap();
        let devbuf = ctx.device_buffer(range.len()).unwrap();
        region.upload(&q, range.clone(), &devbuf, 0, &[]).unwrap();
        par::invert(region.slices_mut(range.clone()).unwrap());
        region.download(&q, &devbuf, 0, range.clone(), &[]).unwrap();
        assert_eq!(par::count_diff(region.slices(range).unwrap(), &want), 0);
    }
}

#[test]
fn typed_views() {
    let ctx = Context::new(&device()).unwrap();
    let mut region = HostRegion::new(&ctx, 4096 * 4, &forced(Strategy::Register)).unwrap();
    region
        .typed_mut::<f32>()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = i as f32);
    assert_eq!(region.typed::<f32>().unwrap()[4095], 4095.0);
    assert_eq!(region.typed::<half::f16>().unwrap().len(), 8192);
    let odd = HostRegion::new(&ctx, 4095, &forced(Strategy::Register)).unwrap();
    assert!(
        odd.typed::<f32>().is_none(),
        "a length that is not a multiple of 4 has no f32 view"
    );
}

#[test]
fn bad_requests_are_errors_that_name_the_fix() {
    let dev = device();
    let ctx = Context::new(&dev).unwrap();
    assert!(matches!(
        HostRegion::new(&ctx, 0, &PinOptions::default()),
        Err(HostError::ZeroSize)
    ));
    let huge = HostRegion::new(&ctx, usize::MAX / 2, &PinOptions::default()).unwrap_err();
    assert!(huge.to_string().contains("choose a smaller size"), "{huge}");
    if !dev.has_extension("cl_nv_create_buffer") {
        let e = HostRegion::new(&ctx, 4096, &forced(Strategy::NvHost)).unwrap_err();
        assert!(
            e.to_string().contains("cl_nv_create_buffer")
                && e.to_string()
                    .ends_with("choose a strategy every device of the context offers, or auto"),
            "{e}"
        );
    }
    let region = HostRegion::new(&ctx, 4096, &PinOptions::default()).unwrap();
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(4096).unwrap();
    assert!(matches!(
        region.upload(&q, 0..4097, &buf, 0, &[]),
        Err(HostError::Range { .. })
    ));
    assert!(
        region.upload(&q, 0..4096, &buf, 1, &[]).is_err(),
        "device range checked too"
    );
}

#[test]
fn a_slice_waits_for_a_download_another_thread_is_waiting_for() {
    let ctx = Context::new(&device()).unwrap();
    let size = 256 << 20;
    let mut region = HostRegion::new(&ctx, size, &forced(Strategy::Register)).unwrap();
    region.as_mut_slice().unwrap().fill(0);
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(size).unwrap();
    q.fill(&buf, 0, size, 0x5A).unwrap().wait().unwrap();
    region.download(&q, &buf, 0, 0..size, &[]).unwrap();
    let region = &region;
    std::thread::scope(|s| {
        s.spawn(move || region.wait().unwrap());
        s.spawn(move || {
            let bytes = region.as_slice().unwrap();
            let unwritten = bytes.iter().step_by(4096).filter(|&&b| b != 0x5A).count();
            assert_eq!(
                unwritten, 0,
                "a slice was handed out while the download still ran"
            );
        });
    });
}
