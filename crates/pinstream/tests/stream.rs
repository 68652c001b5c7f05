//! The streaming engine on the default OpenCL device (PoCL in CI), against CPU references.

mod common;

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::error::BindProblem;
use pinstream::engine::pool::{DevicePool, PoolError};
use pinstream::engine::profile::chrome_trace;
use pinstream::engine::validate::ValidateError;
use pinstream::engine::{
    run, BoundsCheck, BudgetError, DType, Job, StreamError, StreamOptions, StreamReport, WorkSize,
};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{mix_u32_ref, value, GEMV_F16, MIX_U32};

fn ctx() -> Context {
    common::test_ctx()
}

fn kernel(ctx: &Context, src: &str, name: &str) -> Kernel {
    ctx.build_program(src, "")
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel(name)
        .unwrap()
}

fn region_u32(ctx: &Context, n: usize, seed: u64) -> HostRegion {
    let mut r = HostRegion::new(ctx, n * 4, &PinOptions::default()).unwrap();
    for (i, v) in r.typed_mut::<u32>().unwrap().iter_mut().enumerate() {
        *v = value(seed, i as u64) as u32;
    }
    r
}

fn opts(dtype: DType, block_bytes: usize) -> StreamOptions {
    StreamOptions {
        dtype,
        out_dtype: dtype,
        block_bytes,
        in_per_out: 1,
        slots: None,
        vram_budget: 256 << 20,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

fn in_place(
    ctx: &Context,
    n: usize,
    block: usize,
    slots: Option<usize>,
    sequential: bool,
) -> StreamReport {
    let mut k = kernel(ctx, MIX_U32, "mix_u32");
    let mut r = region_u32(ctx, n, 11);
    let o = StreamOptions {
        slots,
        sequential,
        ..opts(DType::U32, block)
    };
    let rep = run(
        ctx,
        &mut k,
        Job {
            in_place: Some(&mut r),
            ..Job::default()
        },
        &o,
        &|_, _| {},
    )
    .unwrap();
    for (i, v) in r.typed::<u32>().unwrap().iter().enumerate() {
        assert_eq!(
            *v,
            mix_u32_ref(value(11, i as u64) as u32, i as u64),
            "element {i}"
        );
    }
    rep
}

#[test]
fn in_place_with_an_uneven_last_block() {
    let rep = in_place(&ctx(), (10 << 18) + 3, 1 << 20, None, false);
    assert_eq!(
        rep.blocks, 11,
        "10 full blocks of 1 MiB and one of 12 bytes"
    );
    assert_eq!(rep.slots, 4);
    assert_eq!(rep.totals.upload.bytes, ((10 << 18) + 3) * 4);
    assert_eq!(rep.totals.download.bytes, rep.totals.upload.bytes);
    assert_eq!(rep.totals.kernel.commands, 11);
    assert!(rep.totals.overlap > 0.0 && rep.totals.overlap <= 1.0 + 1e-9);
}

#[test]
fn one_slot_and_many_slots_and_one_queue_agree() {
    let c = ctx();
    assert_eq!(in_place(&c, 1 << 20, 64 << 10, Some(1), false).slots, 1);
    assert_eq!(in_place(&c, 1 << 20, 64 << 10, Some(7), false).slots, 7);
    let seq = in_place(&c, 1 << 20, 64 << 10, None, true);
    assert_eq!(seq.mode, "one in-order queue");
}

const TWO_INPUTS: &str = r#"
__kernel void add3(__global const uint* a, __global const uint* b, __global uint* out,
                   ulong n, ulong block, ulong offset, uint k) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = a[i] + b[i] * k + (uint)(offset + i);
}
"#;

#[test]
fn out_of_place_with_two_inputs_and_a_scalar() {
    let c = ctx();
    let n = 300_001;
    let (a, b) = (region_u32(&c, n, 1), region_u32(&c, n, 2));
    let mut out = HostRegion::new(&c, n * 4, &PinOptions::default()).unwrap();
    let mut k = kernel(&c, TWO_INPUTS, "add3");
    let j = Job {
        inputs: vec![&a, &b],
        output: Some(&mut out),
        args: vec![("k".into(), "3".into())],
        ..Job::default()
    };
    let rep = run(&c, &mut k, j, &opts(DType::U32, 256 << 10), &|_, _| {}).unwrap();
    assert_eq!(rep.totals.upload.bytes, 2 * n as u64 * 4);
    let (av, bv) = (a.typed::<u32>().unwrap(), b.typed::<u32>().unwrap());
    for (i, v) in out.typed::<u32>().unwrap().iter().enumerate() {
        assert_eq!(
            *v,
            av[i]
                .wrapping_add(bv[i].wrapping_mul(3))
                .wrapping_add(i as u32),
            "element {i}"
        );
    }
}

const SUM64: &str = r#"
__kernel void sum64(__global const uint* in, __global ulong* out, ulong n, ulong block, ulong offset) {
    size_t o = get_global_id(0);
    ulong s = 0;
    for (size_t i = o * 64; i < n && i < o * 64 + 64; i++) s += in[i];
    if (o * 64 < n) out[o] = s;
}
"#;

#[test]
fn a_different_output_size_per_block() {
    let c = ctx();
    let n = 64 * 5000 + 17;
    let input = region_u32(&c, n, 5);
    let outs = n.div_ceil(64);
    let mut out = HostRegion::new(&c, outs * 8, &PinOptions::default()).unwrap();
    let mut k = kernel(&c, SUM64, "sum64");
    let o = StreamOptions {
        out_dtype: DType::U64,
        in_per_out: 64,
        work: WorkSize {
            per_output: true,
            items_per: 1,
            local: None,
        },
        ..opts(DType::U32, 64 * 4 * 300)
    };
    let rep = run(
        &c,
        &mut k,
        Job {
            inputs: vec![&input],
            output: Some(&mut out),
            ..Job::default()
        },
        &o,
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(rep.blocks, n.div_ceil(64 * 300));
    assert_eq!(rep.totals.download.bytes, outs as u64 * 8);
    let iv = input.typed::<u32>().unwrap();
    for (o, v) in out.typed::<u64>().unwrap().iter().enumerate() {
        let want: u64 = iv[o * 64..(o * 64 + 64).min(n)]
            .iter()
            .map(|&x| x as u64)
            .sum();
        assert_eq!(*v, want, "output {o}");
    }
}

#[test]
fn resident_arguments_gemv() {
    let c = ctx();
    let (rows, cols) = (1000usize, 512usize);
    let (w, x) = common::gemv_data(&c, &c, rows, cols, 3);
    let mut y = HostRegion::new(&c, rows * 4, &PinOptions::default()).unwrap();
    let mut k = kernel(&c, GEMV_F16, "gemv_f16");
    let o = common::gemv_opts(opts(DType::F16, 0), cols, 64);
    let j = Job {
        inputs: vec![&w],
        output: Some(&mut y),
        residents: vec![&x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    };
    let rep = run(&c, &mut k, j, &o, &|_, _| {}).unwrap();
    assert_eq!(rep.blocks, 16, "1000 rows in blocks of 64: the last has 40");
    assert_eq!(rep.resident_bytes, cols as u64 * 4);
    common::check_gemv(&w, &x, &y, cols);
}

#[test]
fn the_pool_never_exceeds_its_budget() {
    let c = ctx();
    let mut pool = DevicePool::new(&c, 3 << 20);
    let _a = pool.alloc(2 << 20, "a").unwrap();
    assert!(matches!(
        pool.alloc(2 << 20, "b"),
        Err(PoolError::OverBudget { .. })
    ));
    assert_eq!(pool.used(), 2 << 20);
    // A budget that holds exactly two slots of 1 MiB: the ring takes two, not four (no
    // bounds guard: its zones, as large as the buffers, count in the budget too, as
    // layout's `a_guarded_slot_counts_its_guard_zones` checks).
    let mut k = kernel(&c, MIX_U32, "mix_u32");
    let mut r = region_u32(&c, 1 << 20, 1);
    let o = StreamOptions {
        vram_budget: 2 << 20,
        check_bounds: BoundsCheck::Off,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
        ..opts(DType::U32, 1 << 20)
    };
    let rep = run(
        &c,
        &mut k,
        Job {
            in_place: Some(&mut r),
            ..Job::default()
        },
        &o,
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(rep.slots, 2);
    assert!(rep.pool_bytes <= o.vram_budget);
    // One that holds less than two slots says what it can hold.
    let o = StreamOptions {
        vram_budget: (1 << 20) + 5,
        ..o
    };
    let e = run(
        &c,
        &mut k,
        Job {
            in_place: Some(&mut r),
            ..Job::default()
        },
        &o,
        &|_, _| {},
    )
    .unwrap_err();
    assert!(matches!(e, StreamError::Budget(_)), "{e}");
    let msg = e.to_string();
    // The library says what fits and what the run needs; the CLI turns the fields into flag
    // advice ("raise --vram-budget to at least 2 MiB": pinstream-cli's `advice` tests).
    assert!(
        msg.contains("1 slot(s) of 1 MiB") && msg.contains("2 MiB in all"),
        "{msg}"
    );
    assert!(
        matches!(
            e,
            StreamError::Budget(BudgetError::TooSmall {
                fit: 1,
                need: 2,
                need_bytes: 0x20_0000,
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn traces_have_one_track_per_queue() {
    let c = ctx();
    for seq in [false, true] {
        let rep = in_place(&c, 1 << 18, 64 << 10, None, seq);
        let text = chrome_trace(&rep.records, "test", seq).to_string();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let tracks = ev.iter().filter(|e| e["name"] == "thread_name").count();
        assert_eq!(tracks, if seq { 1 } else { 3 });
        assert_eq!(
            ev.iter().filter(|e| e["ph"] == "X").count(),
            rep.records.len()
        );
        assert!(ev
            .iter()
            .filter(|e| e["ph"] == "X")
            .all(|e| e["ts"].as_f64().unwrap() >= 0.0));
    }
}

#[test]
fn mismatched_kernels_are_refused_before_anything_runs() {
    let c = ctx();
    let mut k = kernel(&c, TWO_INPUTS, "add3");
    let mut r = region_u32(&c, 1024, 1);
    let e = run(
        &c,
        &mut k,
        Job {
            in_place: Some(&mut r),
            ..Job::default()
        },
        &opts(DType::U32, 4096),
        &|_, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("3 buffer argument(s)"), "{e}");
    let err = c
        .build_program("__kernel void f(__global int* x) { x[0] = y; }", "")
        .err()
        .unwrap();
    assert!(err.to_string().contains("rejected"), "{err}");
}

/// A source with no `__kernel` function builds; it is counted as defining none, and naming or
/// creating a kernel of it is answered without asking the driver (NVIDIA's crashes on that).
#[test]
fn a_program_with_no_kernel_has_none_to_name_or_create() {
    let c = ctx();
    let p = c
        .build_program("int helper(int a) { return a; }", "")
        .unwrap();
    assert_eq!(p.kernel_count().unwrap(), 0);
    assert!(p.kernel_names().is_empty());
    let e = p.kernel("scale").err().unwrap();
    assert!(e.to_string().contains("CL_INVALID_KERNEL_NAME"), "{e}");
    let p = c.build_program(MIX_U32, "").unwrap();
    assert_eq!(p.kernel_count().unwrap(), 1);
    assert_eq!(p.kernel_names(), ["mix_u32"]);
}

/// A library caller gets the checks the CLI makes before pinning (`engine::validate`): the
/// engine runs them on each device's kernel before it allocates anything.
#[test]
fn the_engine_checks_element_types_block_and_launch_sizes_before_allocating() {
    let c = ctx();
    let mut k = kernel(&c, MIX_U32, "mix_u32");
    let limits = k.work_group_limits().unwrap();
    let mut r = region_u32(&c, 1 << 18, 3);
    let mut refused = |o: StreamOptions| {
        let job = Job {
            in_place: Some(&mut r),
            ..Job::default()
        };
        run(&c, &mut k, job, &o, &|_, _| {}).unwrap_err()
    };
    // mix_u32 takes uint*: f32 elements are refused, naming the argument.
    let e = refused(opts(DType::F32, 64 << 10));
    assert!(
        matches!(&e, StreamError::Bind(b) if matches!(&*b.problem, BindProblem::ElementType { declared: "u32", .. })),
        "{e}"
    );
    // 1 MiB in blocks of 16 bytes: 65536 blocks of per-block records.
    let e = refused(opts(DType::U32, 16));
    assert!(
        matches!(&e, StreamError::Check(ValidateError::Block { suggested, .. }) if *suggested == 1 << 10),
        "{e}"
    );
    // A work-group above what the kernel allows on this device.
    let o = StreamOptions {
        work: WorkSize {
            local: Some(limits.max() + 1),
            ..WorkSize::default()
        },
        ..opts(DType::U32, 64 << 10)
    };
    let e = refused(o);
    assert!(
        matches!(e, StreamError::Check(ValidateError::Launch(_))),
        "{e}"
    );
    assert!(e.to_string().contains("CL_KERNEL_WORK_GROUP_SIZE"), "{e}");
    // Nothing was streamed: the data is as drawn.
    for (i, v) in r.typed::<u32>().unwrap().iter().enumerate() {
        assert_eq!(*v, value(3, i as u64) as u32, "element {i}");
    }
}

#[test]
fn a_kernel_keeps_its_buffers_and_refuses_stale_ones() {
    let c = ctx();
    let mut k = kernel(&c, MIX_U32, "mix_u32");
    let q = c.queue().unwrap();
    // Bound, then dropped by the caller: the kernel still holds it, so the launch is safe.
    let buf = c.device_buffer(4096).unwrap();
    k.set_buffer(0, &buf).unwrap();
    drop(buf);
    for (i, v) in [(1u32, 1024u64), (2, 0), (3, 0)] {
        k.set_bytes(i, &v.to_ne_bytes()).unwrap();
    }
    q.launch(&k, 1024, None, &[]).unwrap().wait().unwrap();
    // After a stream the kernel lets its slots go and refuses to launch on them.
    let mut r = region_u32(&c, 1 << 16, 1);
    run(
        &c,
        &mut k,
        Job {
            in_place: Some(&mut r),
            ..Job::default()
        },
        &opts(DType::U32, 64 << 10),
        &|_, _| {},
    )
    .unwrap();
    let e = q
        .launch(&k, 1024, None, &[])
        .err()
        .expect("stale buffers are refused");
    assert_eq!(e.name(), "CL_INVALID_KERNEL_ARGS");
}
