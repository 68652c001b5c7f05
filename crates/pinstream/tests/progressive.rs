//! Pinning as the stream goes (issue 13, goal 3) on the default OpenCL device (PoCL in CI):
//! chunks on block boundaries, the stream waiting block by block for the background pin,
//! the data written chunk by chunk as it is made resident, and results against the CPU
//! reference. The background failure is in `progressive_fault.rs` (its fault hook is
//! process-wide).

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::{run, Job, StreamOptions, StreamReport};
use pinstream::host::{chunk_plan, HostRegion, PinOptions, PinState, Progressive, Strategy};
use pinstream_lab::kernels::{mix_u32_ref, value, MIX_U32};
use std::sync::Arc;

const BLOCK: usize = 64 << 10;

mod common;

fn ctx() -> Context {
    common::test_ctx()
}

fn mix(ctx: &Context) -> Kernel {
    ctx.build_program(MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap()
}

fn opts_of(block_bytes: usize) -> StreamOptions {
    common::u32_opts(block_bytes)
}

/// Options for a progressive `register` pin with blocks of `BLOCK`, chunks of at most
/// `max_chunk`, and (with `seed`) the data written chunk by chunk in the background.
fn progressive(max_chunk: usize, seed: Option<u64>) -> PinOptions {
    let fill = seed.map(|seed| {
        Arc::new(move |off: usize, bytes: &mut [u8]| {
            // Slower than the stream, so that the stream does wait for the pin.
            if off > 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let first = (off / 4) as u64;
            for (k, v) in bytemuck::cast_slice_mut::<u8, u32>(bytes)
                .iter_mut()
                .enumerate()
            {
                *v = value(seed, first + k as u64) as u32;
            }
            Ok(())
        }) as pinstream::host::Fill
    });
    PinOptions {
        strategy: pinstream::host::StrategyChoice::Forced(Strategy::Register),
        max_chunk: Some(max_chunk),
        progressive: Some(Progressive {
            block_bytes: BLOCK,
            fill,
        }),
        ..PinOptions::default()
    }
}

fn stream_in_place(ctx: &Context, r: &mut HostRegion) -> StreamReport {
    stream_with(ctx, &mut mix(ctx), r)
}

fn stream_with(ctx: &Context, k: &mut Kernel, r: &mut HostRegion) -> StreamReport {
    let job = Job {
        in_place: Some(r),
        ..Job::default()
    };
    run(ctx, k, job, &opts_of(BLOCK), &|_, _| {}).unwrap()
}

fn check(r: &HostRegion, seed: u64) {
    for (i, v) in r.typed::<u32>().unwrap().iter().enumerate() {
        let want = mix_u32_ref(value(seed, i as u64) as u32, i as u64);
        assert_eq!(*v, want, "element {i}");
    }
}

#[test]
fn a_progressive_pin_streams_the_right_data_in_chunks_of_whole_blocks() {
    let ctx = ctx();
    // A first run compiles the kernel (PoCL compiles at the first launch), so that the run
    // below starts streaming while the background pin (20 ms a chunk) is far from done.
    let mut k = mix(&ctx);
    let mut warm = HostRegion::new(&ctx, BLOCK, &PinOptions::default()).unwrap();
    stream_with(&ctx, &mut k, &mut warm);
    let len = 37 * BLOCK + 4 * 100; // a partial last block
    let mut r = HostRegion::new(&ctx, len, &progressive(8 * BLOCK, Some(5))).unwrap();
    assert!(r.is_progressive());
    let chunks = r.chunk_ranges();
    let page = 4096;
    assert_eq!(chunks, chunk_plan(len, BLOCK, 8 * BLOCK, page));
    assert!(chunks.len() >= 6, "{chunks:?}");
    assert_eq!(chunks[0], 0..BLOCK, "the first chunk is one block");
    assert!(chunks
        .iter()
        .all(|c| c.start % BLOCK == 0 && c.len() <= 8 * BLOCK));
    let rep = stream_with(&ctx, &mut k, &mut r);
    check(&r, 5);
    assert_eq!(rep.blocks, 38);
    let first = rep
        .first_upload_s
        .expect("the first block's upload was seen");
    assert!(first > 0.0 && first <= rep.host_wall_s + 1.0, "{first}");
    let (pins, failed) = r.chunk_pins();
    assert!(failed.is_none(), "{failed:?}");
    assert_eq!(pins.len(), chunks.len(), "every chunk was pinned");
    assert!(!pins[0].background && pins[1..].iter().all(|p| p.background));
    for (p, c) in pins.iter().zip(&chunks) {
        assert_eq!(&p.range, c);
    }
    assert_ne!(r.pin_state(), PinState::NotPinned);
    assert!(
        rep.pin_wait_s > 0.02,
        "the stream waited for the pin: {}",
        rep.pin_wait_s
    );
}

#[test]
fn without_a_fill_the_accessors_wait_for_the_whole_pin() {
    let ctx = ctx();
    let len = 20 * BLOCK;
    let mut r = HostRegion::new(&ctx, len, &progressive(4 * BLOCK, None)).unwrap();
    // typed_mut waits for the background pin before it hands out the memory.
    for (i, v) in r.typed_mut::<u32>().unwrap().iter_mut().enumerate() {
        *v = value(9, i as u64) as u32;
    }
    assert_eq!(r.chunk_pins().0.len(), r.chunk_count());
    let rep = stream_in_place(&ctx, &mut r);
    check(&r, 9);
    assert!(rep.first_upload_s.is_some());
}

#[test]
fn one_chunk_or_other_strategies_pin_up_front() {
    let ctx = ctx();
    let one = HostRegion::new(&ctx, BLOCK, &progressive(4 * BLOCK, None)).unwrap();
    assert!(
        !one.is_progressive(),
        "a single chunk has nothing to overlap"
    );
    let pageable = PinOptions {
        strategy: pinstream::host::StrategyChoice::Forced(Strategy::Pageable),
        ..progressive(4 * BLOCK, None)
    };
    let r = HostRegion::new(&ctx, 20 * BLOCK, &pageable).unwrap();
    assert!(!r.is_progressive());
    assert!(r.chunk_pins().0.is_empty());
}

#[test]
fn dropping_a_region_mid_pin_joins_the_background_thread() {
    let ctx = ctx();
    let mut opts = progressive(2 * BLOCK, None);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let fill: pinstream::host::Fill = Arc::new(move |off, _| {
        log.lock().unwrap().push(off);
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(())
    });
    opts.progressive.as_mut().unwrap().fill = Some(fill.clone());
    let r = HostRegion::new(&ctx, 64 * BLOCK, &opts).unwrap();
    let planned = r.chunk_count();
    drop(r);
    // The drop stopped the pin after the chunk in progress and joined its thread: the
    // thread's reference to the fill is gone, and no chunk was begun after the drop.
    assert_eq!(
        Arc::strong_count(&fill),
        2,
        "the fill is held by `opts` and here only"
    );
    let begun = seen.lock().unwrap().len();
    std::thread::sleep(std::time::Duration::from_millis(60));
    assert_eq!(seen.lock().unwrap().len(), begun);
    assert!(
        begun < planned,
        "{begun} of {planned} chunks begun: the drop cancelled"
    );
}

#[test]
fn a_failing_fill_stops_the_stream_at_its_chunk() {
    let ctx = ctx();
    let mut opts = progressive(2 * BLOCK, None);
    let fill: pinstream::host::Fill = Arc::new(|off, bytes: &mut [u8]| {
        if off == 3 * BLOCK {
            return Err("the input file ended early".into());
        }
        bytes.fill(1);
        Ok(())
    });
    opts.progressive.as_mut().unwrap().fill = Some(fill);
    let mut r = HostRegion::new(&ctx, 16 * BLOCK, &opts).unwrap();
    assert_eq!(r.chunk_ranges()[2], 3 * BLOCK..5 * BLOCK);
    let mut k = mix(&ctx);
    let job = Job {
        in_place: Some(&mut r),
        ..Job::default()
    };
    let err = run(&ctx, &mut k, job, &opts_of(BLOCK), &|_, _| {}).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("block 3") && msg.contains("chunk 2 of"),
        "{msg}"
    );
    assert!(msg.contains("the input file ended early"), "{msg}");
    assert_eq!(r.pin_state(), PinState::NotPinned);
    assert_eq!(r.chunk_pins().0.len(), 2, "chunks 0 and 1 were pinned");
}

#[test]
fn a_stop_mid_pin_ends_the_stream_and_the_drop_cancels_the_pin() {
    let ctx = ctx();
    let mut opts = progressive(2 * BLOCK, None);
    let fill: pinstream::host::Fill = Arc::new(|off, bytes: &mut [u8]| {
        std::thread::sleep(std::time::Duration::from_millis(if off > 0 {
            30
        } else {
            0
        }));
        bytes.fill(0);
        Ok(())
    });
    opts.progressive.as_mut().unwrap().fill = Some(fill);
    let mut r = HostRegion::new(&ctx, 64 * BLOCK, &opts).unwrap();
    let planned = r.chunk_count();
    let stop = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let so = StreamOptions {
        stop: Some(stop.clone()),
        ..opts_of(BLOCK)
    };
    let mut k = mix(&ctx);
    let job = Job {
        in_place: Some(&mut r),
        ..Job::default()
    };
    // As a Ctrl-C would: the stop flag set once the first block is back.
    let progress = |done: u64, _| {
        if done >= 1 {
            stop.store(2, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let err = run(&ctx, &mut k, job, &so, &progress).unwrap_err();
    assert!(
        matches!(err, pinstream::engine::StreamError::Stopped { code: 2, .. }),
        "{err}"
    );
    let pinned = r.chunk_pins().0.len();
    let t = std::time::Instant::now();
    drop(r);
    // The drop waits for the chunk in progress at most (30 ms here), never the whole pin.
    assert!(
        pinned < planned,
        "{pinned} of {planned}: the stop came mid-pin"
    );
    assert!(t.elapsed().as_millis() < 500, "{:?}", t.elapsed());
}
