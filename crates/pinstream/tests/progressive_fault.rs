//! A progressive pin whose background part fails (issue 13, goal 3), provoked by the fault
//! hook `PINSTREAM_INJECT_FAULT=chunk:K` (process-wide: this binary has this one test). The
//! stream stops with an error naming the chunk, the region says it is not pinned, and
//! dropping it joins the pinning thread and releases the memory.

use pinstream::engine::{run, Job, StreamError};
use pinstream_lab::kernels::MIX_U32;

mod common;
use pinstream::host::{HostRegion, PinOptions, PinState, Progressive, Strategy, StrategyChoice};

const BLOCK: usize = 64 << 10;

/// Threads of this process named `name` (Linux: `/proc/self/task`; elsewhere, and under
/// Wine, where `/proc` is the Linux host's, `None`: the check is not made).
fn threads_named(name: &str) -> Option<usize> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let n = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|n| n.trim() == name)
                .count()
        })
        .expect("/proc/self/task lists this process's threads");
    Some(n)
}

#[test]
fn a_background_pin_failure_stops_the_stream_and_names_the_chunk() {
    std::env::set_var("PINSTREAM_INJECT_FAULT", "chunk:3");
    let ctx = common::test_ctx();
    let mut k = ctx
        .build_program(MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let opts = PinOptions {
        strategy: StrategyChoice::Forced(Strategy::Register),
        max_chunk: Some(4 * BLOCK),
        progressive: Some(Progressive {
            block_bytes: BLOCK,
            fill: None,
        }),
        ..PinOptions::default()
    };
    let mut r = HostRegion::new(&ctx, 32 * BLOCK, &opts).unwrap();
    let plan = r.chunk_ranges();
    assert!(plan.len() > 4, "{plan:?}");
    let so = common::u32_opts(BLOCK);
    let job = Job {
        in_place: Some(&mut r),
        ..Job::default()
    };
    let err = run(&ctx, &mut k, job, &so, &|_, _| {}).unwrap_err();
    let StreamError::NotPinned { block, why } = &err else {
        panic!("{err}")
    };
    // Chunk 3 starts at block 1 + 2 + 4 = 7: the first block it holds is the one that fails.
    assert_eq!(*block, plan[3].start / BLOCK, "{err}");
    assert!(why.contains("chunk 3 of"), "{why}");
    assert!(
        why.contains("CL_OUT_OF_RESOURCES") || why.contains("-5"),
        "{why}"
    );
    let msg = err.to_string();
    assert!(msg.contains("never pinned"), "{msg}");
    // The region is truthful: not pinned as a whole, three chunks pinned, then the failure.
    assert_eq!(r.pin_state(), PinState::NotPinned);
    let (pins, failed) = r.chunk_pins();
    assert_eq!(pins.len(), 3);
    assert!(failed.unwrap().contains("chunk 3"));
    // The memory can still be read (it is mapped), and dropping releases everything.
    assert_eq!(r.as_slice().unwrap().len(), 32 * BLOCK);
    drop(r);
    if let Some(n) = threads_named("pinstream-pin") {
        assert_eq!(n, 0, "the pinning thread was joined");
    }
    // A library transfer of an unpinned range gets the same error, not a hang.
    let r = HostRegion::new(&ctx, 32 * BLOCK, &opts).unwrap();
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(BLOCK).unwrap();
    let e = r.upload(&q, plan[3].start..plan[3].start + BLOCK, &buf, 0, &[]);
    let Err(e) = e else {
        panic!("an upload of chunk 3 was enqueued")
    };
    let e = e.to_string();
    assert!(e.contains("chunk 3"), "{e}");
    assert!(
        r.upload(&q, 0..BLOCK, &buf, 0, &[]).is_ok(),
        "chunk 0 is pinned"
    );
    r.wait().unwrap();
    drop(r);
}
