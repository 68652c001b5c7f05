//! Passes and residency (issue 36): a run of N passes gives the result of N single-pass runs
//! in a row, with blocks resident in device memory or not, in place and y = W·x, on the empty
//! API (every byte counted, one device and two) and on the default OpenCL device (PoCL in CI,
//! with its bounds guard on).

mod common;

use common::u32_opts;
use pinstream::backend::api::{Adapter, Device, Instance, Program};
use pinstream::backend::empty::{Empty, EmptyDevice, EmptyInstance};
use pinstream::backend::opencl::Context;
use pinstream::engine::{
    run, run_on, BudgetError, HostMemory, Job, PassBytes, Residency, ResidencyReason, StreamError,
    StreamOptions, StreamReport, Target,
};
use pinstream::host::{HostApi, HostRegion, PinOptions, PinRequest};
use pinstream_lab::kernels::{mix_u32_ref, value, GEMV_F16, MIX_U32};

/// Devices of 64 MiB with `mix_u32` (in place, the engine's test kernel) and `gemv_u32`
/// (y[r] = sum of W[r][c] * x[c], wrapping u32: exact), computed on the CPU.
fn instance(devices: usize) -> EmptyInstance {
    let params = [
        ("uint*", "x"),
        ("ulong", "n"),
        ("ulong", "block"),
        ("ulong", "offset"),
    ];
    let word = |v: &[u8]| u64::from_ne_bytes(v.try_into().unwrap());
    let gemv = [
        ("uint*", "w"),
        ("uint*", "y"),
        ("ulong", "n"),
        ("ulong", "block"),
        ("ulong", "offset"),
        ("uint*", "x"),
        ("uint", "cols"),
    ];
    EmptyInstance::new_with(devices, 64 << 20)
        .with_kernel("mix_u32", &params, move |bufs, values, _| {
            let (n, offset) = (word(values[0]) as usize, word(values[2]));
            let x: &mut [u32] = bytemuck::cast_slice_mut(&mut bufs[0][..n * 4]);
            for (i, v) in x.iter_mut().enumerate() {
                *v = mix_u32_ref(*v, offset + i as u64);
            }
        })
        .with_kernel("gemv_u32", &gemv, move |bufs, values, _| {
            let n = word(values[0]) as usize;
            let cols = u32::from_ne_bytes(values[3].try_into().unwrap()) as usize;
            let w: Vec<u32> = bytemuck::cast_slice(&bufs[0][..n * 4]).to_vec();
            let x: Vec<u32> = bytemuck::cast_slice(&bufs[2][..cols * 4]).to_vec();
            let y: &mut [u32] = bytemuck::cast_slice_mut(&mut bufs[1][..n / cols * 4]);
            for (r, y) in y.iter_mut().enumerate() {
                let row = &w[r * cols..(r + 1) * cols];
                *y =
                    (row.iter().zip(&x)).fold(0u32, |a, (w, x)| a.wrapping_add(w.wrapping_mul(*x)));
            }
        })
}

fn devices(n: usize) -> Vec<EmptyDevice> {
    let inst = instance(n);
    (inst.adapters().unwrap().iter())
        .map(|a| a.open().unwrap())
        .collect()
}

fn opts(block: usize, budget_blocks: u64, passes: usize, residency: Residency) -> StreamOptions {
    StreamOptions {
        vram_budget: budget_blocks * block as u64,
        passes,
        residency,
        ..u32_opts(block)
    }
}

/// `n` u32 values drawn from `seed`.
fn drawn(n: usize, seed: u64) -> Vec<u32> {
    (0..n as u64).map(|i| value(seed, i) as u32).collect()
}

/// Streams `x` in place over `devs` (each with its `mix_u32`) with `o`.
fn mix_on(devs: &[EmptyDevice], x: &mut [u8], o: &StreamOptions) -> StreamReport {
    let mut kernels: Vec<_> = (devs.iter())
        .map(|d| d.build("mix_u32", "").unwrap().kernel("mix_u32").unwrap())
        .collect();
    let mut targets: Vec<Target<'_, EmptyDevice>> = (devs.iter().zip(kernels.iter_mut()))
        .map(|(d, k)| Target::new(d, k))
        .collect();
    let mut mem = Empty::pin(&devs[0], x.len(), PinRequest::default()).unwrap();
    mem.0.copy_from_slice(x);
    let job = Job {
        in_place: Some(&mut mem),
        ..Job::default()
    };
    let rep = run_on(&mut targets, job, o, &|_, _| {}).unwrap();
    x.copy_from_slice(&mem.0);
    rep
}

/// 40 blocks of 64 KiB, a budget of 10 blocks (4 slots, 6 left for resident blocks).
const BLOCK: usize = 64 << 10;
const BLOCKS: usize = 40;

#[test]
fn n_passes_in_place_equal_n_runs_in_a_row_with_and_without_residency() {
    for n_devices in [1, 2] {
        let devs = devices(n_devices);
        let start: Vec<u8> = bytemuck::cast_slice(&drawn(BLOCKS * BLOCK / 4, 5)).to_vec();
        for passes in [1, 2, 5] {
            let mut want = start.clone();
            for _ in 0..passes {
                mix_on(&devs, &mut want, &opts(BLOCK, 10, 1, Residency::Off));
            }
            for residency in [
                Residency::Off,
                Residency::Auto,
                Residency::Bytes(BLOCK as u64 * 3),
            ] {
                let mut got = start.clone();
                let rep = mix_on(&devs, &mut got, &opts(BLOCK, 10, passes, residency));
                assert!(
                    got == want,
                    "{n_devices} device(s), {passes} passes, {residency:?}"
                );
                assert_eq!(rep.passes, passes);
                assert_eq!(rep.pass_bytes.len(), passes);
            }
        }
    }
}

#[test]
fn later_passes_move_only_the_blocks_that_are_not_resident() {
    let devs = devices(1);
    let mut x: Vec<u8> = bytemuck::cast_slice(&drawn(BLOCKS * BLOCK / 4, 6)).to_vec();
    let rep = mix_on(&devs, &mut x, &opts(BLOCK, 10, 4, Residency::Auto));
    let (all, kept) = ((BLOCKS * BLOCK) as u64, 6 * BLOCK as u64);
    assert_eq!(rep.residency.blocks, 6, "{}", rep.residency);
    assert_eq!(rep.residency.bytes, kept);
    assert!(
        matches!(
            rep.residency.reason,
            ResidencyReason::Room {
                slots: 4,
                asked: false,
                ..
            }
        ),
        "{:?}",
        rep.residency.reason
    );
    let text = rep.residency.to_string();
    assert!(text.starts_with("6 of 40 blocks resident"), "{text}");
    let streamed = all - kept;
    assert_eq!(
        rep.pass_bytes,
        [
            PassBytes {
                h2d: all,
                d2h: streamed
            },
            PassBytes {
                h2d: streamed,
                d2h: streamed
            },
            PassBytes {
                h2d: streamed,
                d2h: streamed
            },
            PassBytes {
                h2d: streamed,
                d2h: all
            },
        ]
    );
    assert_eq!(rep.totals.upload.bytes, all + 3 * streamed);
    assert_eq!(rep.totals.kernel.commands, 4 * BLOCKS);
    let off = mix_on(&devs, &mut x, &opts(BLOCK, 10, 4, Residency::Off));
    assert_eq!(off.residency.blocks, 0);
    assert!(off
        .pass_bytes
        .iter()
        .all(|p| *p == PassBytes { h2d: all, d2h: all }));
    let one = mix_on(&devs, &mut x, &opts(BLOCK, 10, 1, Residency::Auto));
    assert_eq!(one.residency.reason, ResidencyReason::OnePass);
    assert_eq!(one.records.len(), 3 * BLOCKS, "one pass moves as before");
}

#[test]
fn each_device_keeps_resident_blocks_in_its_own_budget() {
    let devs = devices(2);
    let mut x: Vec<u8> = bytemuck::cast_slice(&drawn(BLOCKS * BLOCK / 4, 7)).to_vec();
    let rep = mix_on(&devs, &mut x, &opts(BLOCK, 10, 3, Residency::Auto));
    let kept: Vec<usize> = rep.devices.iter().map(|d| d.resident_blocks).collect();
    assert_eq!(kept, [6, 6]);
    assert_eq!(rep.residency.blocks, 12);
    let streamed = ((BLOCKS - 12) * BLOCK) as u64;
    assert_eq!(rep.pass_bytes[1].h2d, streamed);
}

#[test]
fn more_residency_than_the_budget_leaves_and_zero_passes_are_refused() {
    let devs = devices(1);
    let mut x = vec![0u8; BLOCKS * BLOCK];
    let mut mem = Empty::pin(&devs[0], x.len(), PinRequest::default()).unwrap();
    let mut k = devs[0]
        .build("mix_u32", "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let o = opts(BLOCK, 10, 2, Residency::Bytes(7 * BLOCK as u64));
    let job = Job {
        in_place: Some(&mut mem),
        ..Job::default()
    };
    match run(&devs[0], &mut k, job, &o, &|_, _| {}) {
        Err(StreamError::Budget(BudgetError::ResidencyAbove {
            asked, left, slots, ..
        })) => {
            assert_eq!(
                (asked, left, slots),
                (7 * BLOCK as u64, 6 * BLOCK as u64, 4)
            )
        }
        other => panic!("{other:?}"),
    }
    let o = opts(BLOCK, 10, 0, Residency::Auto);
    let job = Job {
        in_place: Some(&mut mem),
        ..Job::default()
    };
    let e = run(&devs[0], &mut k, job, &o, &|_, _| {}).unwrap_err();
    assert!(e.to_string().contains("at least one pass"), "{e}");
    x.copy_from_slice(&mem.0);
    assert!(x.iter().all(|&b| b == 0), "a refused run wrote nothing");
}

#[test]
fn a_stop_mid_pass_returns_stopped_counting_every_pass() {
    let devs = devices(1);
    let mut mem = Empty::pin(&devs[0], BLOCKS * BLOCK, PinRequest::default()).unwrap();
    let mut k = devs[0]
        .build("mix_u32", "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let o = StreamOptions {
        stop: Some(stop.clone()),
        ..opts(BLOCK, 10, 3, Residency::Auto)
    };
    let job = Job {
        in_place: Some(&mut mem),
        ..Job::default()
    };
    let flag = stop.clone();
    let progress = move |done: u64, _| {
        if done == BLOCKS as u64 + 5 {
            flag.store(2, std::sync::atomic::Ordering::Relaxed);
        }
    };
    match run(&devs[0], &mut k, job, &o, &progress) {
        Err(StreamError::Stopped {
            code: 2,
            done,
            blocks,
        }) => {
            assert_eq!(blocks, 3 * BLOCKS);
            assert_eq!(done, BLOCKS + 5, "stopped in the second pass");
        }
        other => panic!("{other:?}"),
    }
}

/// y = W·x: W streamed, x resident, `cols` columns.
fn gemv_job<'a>(
    w: &'a dyn HostMemory,
    y: &'a mut dyn HostMemory,
    x: &'a dyn HostMemory,
    cols: usize,
) -> Job<'a> {
    Job {
        inputs: vec![w],
        output: Some(y),
        residents: vec![x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    }
}

/// y = W·x over `rows` x `cols` u32 with x resident, `passes` passes.
fn gemv_empty(
    rows: usize,
    cols: usize,
    passes: usize,
    residency: Residency,
) -> (Vec<u32>, StreamReport) {
    let devs = devices(1);
    let d = &devs[0];
    let mut k = d.build("gemv_u32", "").unwrap().kernel("gemv_u32").unwrap();
    let mut w = Empty::pin(d, rows * cols * 4, PinRequest::default()).unwrap();
    w.0.copy_from_slice(bytemuck::cast_slice(&drawn(rows * cols, 8)));
    let mut x = Empty::pin(d, cols * 4, PinRequest::default()).unwrap();
    x.0.copy_from_slice(bytemuck::cast_slice(&drawn(cols, 9)));
    let mut y = Empty::pin(d, rows * 4, PinRequest::default()).unwrap();
    let rows_per_block = 16;
    let o = StreamOptions {
        in_per_out: cols,
        block_bytes: rows_per_block * cols * 4,
        vram_budget: 12 * (rows_per_block * cols * 4) as u64 + (cols * 4) as u64,
        passes,
        residency,
        ..u32_opts(1)
    };
    let rep = run(d, &mut k, gemv_job(&w, &mut y, &x, cols), &o, &|_, _| {}).unwrap();
    (bytemuck::cast_slice(&y.0).to_vec(), rep)
}

#[test]
fn y_equals_w_x_over_n_passes_with_x_resident_and_blocks_resident_or_not() {
    let (rows, cols) = (40 * 16, 64);
    let (want, _) = gemv_empty(rows, cols, 1, Residency::Off);
    let w = drawn(rows * cols, 8);
    let x = drawn(cols, 9);
    let row = |r: usize| {
        (0..cols).fold(0u32, |a, c| {
            a.wrapping_add(w[r * cols + c].wrapping_mul(x[c]))
        })
    };
    assert!((0..rows).all(|r| want[r] == row(r)), "one pass is y = W·x");
    for passes in [2, 5] {
        for residency in [Residency::Off, Residency::Auto] {
            let (got, rep) = gemv_empty(rows, cols, passes, residency);
            assert!(got == want, "{passes} passes, {residency:?}");
            let kept = rep.residency.blocks;
            assert_eq!(kept > 0, residency == Residency::Auto, "{}", rep.residency);
            let block = (16 * cols * 4) as u64;
            let later = rep.pass_bytes[1];
            assert_eq!(
                later.h2d,
                (40 - kept) as u64 * block,
                "resident blocks are not uploaded again"
            );
            assert_eq!(
                later.d2h,
                (rows * 4) as u64,
                "out of place, every pass downloads y"
            );
        }
    }
}

// The same on the default OpenCL device (PoCL in CI: a CPU device, so the bounds guard
// watches every slot, resident blocks' included).

fn region(ctx: &Context, bytes: usize) -> HostRegion {
    HostRegion::new(ctx, bytes, &PinOptions::default()).unwrap()
}

#[test]
fn opencl_in_place_n_passes_equal_the_cpu_reference_applied_n_times() {
    let ctx = common::test_ctx();
    let mut k = ctx
        .build_program(MIX_U32, "")
        .unwrap()
        .kernel("mix_u32")
        .unwrap();
    let n = 20 * (BLOCK / 4) + 3;
    for passes in [1, 2, 5] {
        for residency in [Residency::Off, Residency::Auto] {
            let mut r = region(&ctx, n * 4);
            let start = drawn(n, 3);
            r.typed_mut::<u32>().unwrap().copy_from_slice(&start);
            let o = opts(BLOCK, 20, passes, residency);
            let job = Job {
                in_place: Some(&mut r),
                ..Job::default()
            };
            let rep = run(&ctx, &mut k, job, &o, &|_, _| {}).unwrap();
            assert_eq!(
                rep.residency.blocks > 0,
                passes > 1 && residency == Residency::Auto
            );
            for (i, v) in r.typed::<u32>().unwrap().iter().enumerate() {
                let want = (0..passes).fold(start[i], |v, _| mix_u32_ref(v, i as u64));
                assert_eq!(*v, want, "element {i}, {passes} passes, {residency:?}");
            }
        }
    }
}

#[test]
fn opencl_y_equals_w_x_over_passes_as_in_one() {
    let ctx = common::test_ctx();
    let (rows, cols) = (256, 512);
    let (w, x) = common::gemv_data(&ctx, &ctx, rows, cols, 4);
    let base = StreamOptions {
        vram_budget: 16 << 20,
        ..u32_opts(1)
    };
    let stream = |passes, residency| {
        let mut y = region(&ctx, rows * 4);
        let o = StreamOptions {
            passes,
            residency,
            ..common::gemv_opts(base.clone(), cols, 16)
        };
        let job = gemv_job(&w, &mut y, &x, cols);
        let mut k = ctx
            .build_program(GEMV_F16, "")
            .unwrap()
            .kernel("gemv_f16")
            .unwrap();
        let rep = run(&ctx, &mut k, job, &o, &|_, _| {}).unwrap();
        (y, rep)
    };
    let (one, _) = stream(1, Residency::Off);
    common::check_gemv(&w, &x, &one, cols);
    for passes in [2, 5] {
        for residency in [Residency::Off, Residency::Auto] {
            let (y, rep) = stream(passes, residency);
            assert!(y.typed::<f32>().unwrap() == one.typed::<f32>().unwrap());
            assert_eq!(rep.residency.blocks > 0, residency == Residency::Auto);
        }
    }
}
