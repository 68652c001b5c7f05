//! One run over several devices (`engine::run_on`): a ring per device over contiguous shares
//! of the blocks. Two devices of the default device's platform where it lists two (PoCL with
//! `POCL_DEVICES="pthread pthread"`, as CI runs this file; newer PoCL names them `cpu cpu`),
//! else two contexts on the default device: either way two rings, two sets of queues and
//! pools, one result.

mod common;

use pinstream::backend::opencl::{default_device, devices, Context, DeviceInfo, Kernel};
use pinstream::engine::profile::chrome_trace;
use pinstream::engine::{run_on, DType, Job, StreamError, StreamOptions, Target, WorkSize};
use pinstream::host::{
    numa_placement, HostError, HostRegion, PinOptions, Strategy, StrategyChoice,
};
use pinstream_lab::kernels::{mix_u32_ref, value, GEMV_F16, MIX_U32};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// Two contexts: on two devices of one platform where there are two, else both on one.
fn two_contexts() -> [Context; 2] {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    let first = default_device(&all).unwrap().clone();
    let second: DeviceInfo = all
        .iter()
        .find(|d| d.platform == first.platform && d.index != first.index)
        .unwrap_or(&first)
        .clone();
    eprintln!(
        "devices {} and {}{}",
        first.index,
        second.index,
        if first.index == second.index {
            " (one device, two contexts)"
        } else {
            ""
        }
    );
    [
        Context::new(&first).unwrap(),
        Context::new(&second).unwrap(),
    ]
}

fn kernel(ctx: &Context, src: &str, name: &str) -> Kernel {
    ctx.build_program(src, "").unwrap().kernel(name).unwrap()
}

fn opts(dtype: DType, block_bytes: usize) -> StreamOptions {
    StreamOptions {
        dtype,
        out_dtype: dtype,
        block_bytes,
        in_per_out: 1,
        slots: None,
        vram_budget: 8 << 20,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: pinstream::engine::BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

#[test]
fn two_rings_stream_one_region_in_place() {
    let ctxs = two_contexts();
    let [mut k0, mut k1] = [0, 1].map(|i| kernel(&ctxs[i], MIX_U32, "mix_u32"));
    let n = (3 << 20) + 5;
    let mut x = HostRegion::new(&ctxs[0], n * 4, &PinOptions::default()).unwrap();
    for (i, v) in x.typed_mut::<u32>().unwrap().iter_mut().enumerate() {
        *v = value(21, i as u64) as u32;
    }
    // The second device reads the region through a registration in its own context.
    x.register_with(&ctxs[1], true).unwrap();
    let shared = x.shared_with();
    assert_eq!(shared.len(), 1);
    assert!(shared[0]
        .device
        .starts_with(&ctxs[1].device().index.to_string()));
    let mut targets = [
        Target::new(&ctxs[0], &mut k0),
        Target::new(&ctxs[1], &mut k1),
    ];
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let progress = std::sync::Mutex::new(Vec::new());
    let rep = run_on(
        &mut targets,
        job,
        &opts(DType::U32, 256 << 10),
        &|b, bytes| progress.lock().unwrap().push((b, bytes)),
    )
    .unwrap();
    for (i, v) in x.typed::<u32>().unwrap().iter().enumerate() {
        assert_eq!(
            *v,
            mix_u32_ref(value(21, i as u64) as u32, i as u64),
            "element {i}"
        );
    }
    assert_eq!(
        rep.blocks, 49,
        "48 full blocks of 256 KiB and one of 20 bytes"
    );
    assert_eq!(rep.devices.len(), 2);
    assert_eq!(
        rep.devices.iter().map(|d| d.blocks).collect::<Vec<_>>(),
        [24, 25]
    );
    assert_eq!(rep.totals.upload.bytes, n as u64 * 4);
    assert_eq!(rep.totals.kernel.commands, 49);
    assert_eq!(
        rep.pool_bytes,
        rep.devices.iter().map(|d| d.pool_bytes).sum::<u64>()
    );
    // Each device's records are its blocks, on its own track of the trace.
    for (d, blocks) in [(0u16, 0..24), (1, 24..49)] {
        let mine: Vec<_> = rep.records.iter().filter(|r| r.device == d).collect();
        assert_eq!(mine.len(), 3 * 24 + 3 * usize::from(d), "device {d}");
        assert!(mine.iter().all(|r| blocks.contains(&r.block)), "device {d}");
    }
    let trace = chrome_trace(&rep.records, "two devices", false);
    let tracks = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .count();
    assert_eq!(tracks, 6);
    // Progress counts both devices' blocks, and reaches them all.
    let seen = progress.into_inner().unwrap();
    assert_eq!(seen.iter().map(|p| p.0).max(), Some(49));
    assert_eq!(seen.last().map(|p| p.1), Some(n as u64 * 4));
}

#[test]
fn two_rings_share_the_rows_of_y_equals_w_x() {
    let ctxs = two_contexts();
    let [mut k0, mut k1] = [0, 1].map(|i| kernel(&ctxs[i], GEMV_F16, "gemv_f16"));
    let (rows, cols) = (999usize, 256usize);
    let (w, x) = common::gemv_data(&ctxs[0], &ctxs[1], rows, cols, 5);
    let mut y = HostRegion::new(&ctxs[0], rows * 4, &PinOptions::default()).unwrap();
    let o = common::gemv_opts(opts(DType::F16, 0), cols, 100);
    let job = Job {
        inputs: vec![&w],
        output: Some(&mut y),
        residents: vec![&x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    };
    let mut targets = [
        Target::new(&ctxs[0], &mut k0),
        Target::new(&ctxs[1], &mut k1),
    ];
    let rep = run_on(&mut targets, job, &o, &|_, _| {}).unwrap();
    assert_eq!(rep.blocks, 10);
    assert_eq!(rep.resident_bytes, cols as u64 * 4);
    common::check_gemv(&w, &x, &y, cols);
}

#[test]
fn a_stop_stops_every_ring_and_counts_every_block() {
    let ctxs = two_contexts();
    let [mut k0, mut k1] = [0, 1].map(|i| kernel(&ctxs[i], MIX_U32, "mix_u32"));
    let mut x = HostRegion::new(&ctxs[0], 4 << 20, &PinOptions::default()).unwrap();
    let mut targets = [
        Target::new(&ctxs[0], &mut k0),
        Target::new(&ctxs[1], &mut k1),
    ];
    let o = StreamOptions {
        stop: Some(Arc::new(AtomicUsize::new(15))),
        ..opts(DType::U32, 256 << 10)
    };
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    match run_on(&mut targets, job, &o, &|_, _| {}) {
        Err(StreamError::Stopped {
            code: 15,
            done: 0,
            blocks: 16,
        }) => {}
        other => panic!("{other:?}"),
    }
    // A run on no device says so.
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let none: &mut [Target<'_, Context>] = &mut [];
    let e = run_on(none, job, &o, &|_, _| {}).unwrap_err();
    assert!(e.to_string().contains("no device"), "{e}");
}

#[test]
fn a_second_registration_keeps_the_regions_chunk_boundaries() {
    let ctxs = two_contexts();
    let opts = PinOptions {
        max_chunk: Some(1 << 20),
        ..PinOptions::default()
    };
    let mut x = HostRegion::new(&ctxs[0], (3 << 20) + 100, &opts).unwrap();
    let chunks = x.chunk_ranges();
    assert_eq!(chunks.len(), 4);
    x.register_with(&ctxs[1], false).unwrap();
    x.register_with(&ctxs[0], false).unwrap();
    assert_eq!(x.shared_with().len(), 2);
    assert_eq!(
        x.chunk_ranges(),
        chunks,
        "registering again changes no boundary"
    );
    // Memory that is not `register`'s cannot be shared: it says so and changes nothing.
    let pageable = PinOptions {
        strategy: StrategyChoice::Forced(Strategy::Pageable),
        ..PinOptions::default()
    };
    let mut p = HostRegion::new(&ctxs[0], 4096, &pageable).unwrap();
    let e = p.register_with(&ctxs[1], false).unwrap_err();
    assert!(matches!(e, HostError::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("register"), "{e}");
    assert!(p.shared_with().is_empty());
}

#[test]
fn numa_placement_binds_each_share_to_its_devices_node() {
    let ctxs = two_contexts();
    let node = pinstream::backend::os::numa::nodes()[0];
    let len = 8 << 20;
    // On a host of one node, placement changes nothing and says so (empty).
    let plan = numa_placement(&[0..len / 2, len / 2..len], &[Some(node), Some(node)]);
    if pinstream::backend::os::numa::nodes().len() < 2 {
        assert!(plan.is_empty());
    }
    // Forced placement on this host's first node: the pages are bound before they are first
    // touched, and the region is usable.
    let opts = PinOptions {
        placement: vec![(0..len / 2, node), (len / 2..len, node)],
        ..PinOptions::default()
    };
    let mut x = HostRegion::new(&ctxs[0], len, &opts).unwrap();
    x.as_mut_slice().unwrap().fill(7);
    assert!(x.as_slice().unwrap().iter().all(|&b| b == 7));
}
