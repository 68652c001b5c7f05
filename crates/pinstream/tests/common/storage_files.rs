//! Helpers of the storage tests (`storage.rs`, `storage_passes.rs`, `storage_vram.rs`): kernels, options, files
//! of u32s, a storage run with staging rings pinned as the plan says, a run stopped in its
//! second pass, and the checks of results and of what a failed run leaves. Each test crate that
//! includes it has `mod common;` too.
#![allow(dead_code)]

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::io::prepare_output;
use pinstream::engine::storage::{
    run_from_storage, run_from_storage_tiered, staging_plan, StorageError, StorageJob,
    StorageOptions, StorageReport,
};
use pinstream::engine::{BoundsCheck, DType, HostMemory, StreamOptions, Target, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{mix_u32_ref, value, MIX_U32};
use std::path::{Path, PathBuf};

pub const ADD: &str = r#"
__kernel void add(__global const uint* a, __global const uint* b, __global uint* c,
                  ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + 3u * b[i] + (uint)(offset + i);
}
"#;

pub fn kernel(ctx: &Context, src: &str, name: &str) -> Kernel {
    let p = ctx.build_program(src, "").unwrap_or_else(|e| panic!("{e}"));
    p.kernel(name).unwrap()
}

/// What most storage tests start from: the test context, the `mix_u32` kernel on it, a
/// temporary folder, and the paths `in` and `out` in it.
pub fn mix_in_out() -> (Context, Kernel, tempfile::TempDir, PathBuf, PathBuf) {
    let ctx = crate::common::test_ctx();
    let k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    (ctx, k, dir, src, dst)
}

pub fn opts(block_bytes: usize, slots: Option<usize>) -> StreamOptions {
    StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes,
        in_per_out: 1,
        slots,
        vram_budget: 64 << 20,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

pub fn write_u32s(path: &Path, n: usize, seed: u64) {
    let bytes: Vec<u8> = (0..n as u64)
        .flat_map(|i| (value(seed, i) as u32).to_le_bytes())
        .collect();
    std::fs::write(path, bytes).unwrap();
}

pub fn read_u32s(path: &Path) -> Vec<u32> {
    let b = std::fs::read(path).unwrap();
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs `kernel` over `inputs` into `out` with staging rings pinned as the plan says.
pub fn stream(
    ctx: &Context,
    k: &mut Kernel,
    inputs: Vec<PathBuf>,
    out: &Path,
    in_place: bool,
    o: &StreamOptions,
    s: &StorageOptions,
) -> Result<StorageReport, StorageError> {
    stream_watched(ctx, k, inputs, out, (in_place, o, s), &|_| {})
}

/// As [`stream`], with `progress` called as blocks complete.
pub fn stream_watched(
    ctx: &Context,
    k: &mut Kernel,
    inputs: Vec<PathBuf>,
    out: &Path,
    (in_place, o, s): (bool, &StreamOptions, &StorageOptions),
    progress: &(dyn Fn(pinstream::engine::Progress) + Sync),
) -> Result<StorageReport, StorageError> {
    stream_tiered(ctx, k, (inputs, out), (in_place, o, s), (0, progress))
}

/// As [`stream_watched`], with a host tier of `tier` bytes (none: 0).
pub fn stream_tiered(
    ctx: &Context,
    k: &mut Kernel,
    (inputs, out): (Vec<PathBuf>, &Path),
    (in_place, o, s): (bool, &StreamOptions, &StorageOptions),
    (tier, progress): (usize, &(dyn Fn(pinstream::engine::Progress) + Sync)),
) -> Result<StorageReport, StorageError> {
    stream_with(
        ctx,
        k,
        (inputs, out),
        (in_place, o, s),
        (tier, progress),
        Vec::new(),
    )
}

/// As [`stream_tiered`], with `residents` bound after the output.
pub fn stream_with(
    ctx: &Context,
    k: &mut Kernel,
    (inputs, out): (Vec<PathBuf>, &Path),
    (in_place, o, s): (bool, &StreamOptions, &StorageOptions),
    (tier, progress): (usize, &(dyn Fn(pinstream::engine::Progress) + Sync)),
    residents: Vec<&dyn HostMemory>,
) -> Result<StorageReport, StorageError> {
    let len = std::fs::metadata(&inputs[0]).unwrap().len() as usize;
    let plan = staging_plan(len, in_place, o, s)?;
    let pin = |n: usize| HostRegion::new(ctx, n, &PinOptions::default()).unwrap();
    let mut rings: Vec<HostRegion> = inputs.iter().map(|_| pin(plan.input_bytes)).collect();
    if !in_place {
        rings.push(pin(plan.output_bytes));
    }
    let staging = rings.iter_mut().map(|r| r as &mut dyn HostMemory).collect();
    let job = StorageJob {
        inputs,
        in_place,
        output: Some(prepare_output(out).unwrap()),
        residents,
        args: Vec::new(),
    };
    let target = &mut Target::new(ctx, k);
    if tier == 0 {
        return run_from_storage(target, job, staging, o, s, progress);
    }
    let mut tier = pin(tier);
    let t = Some(&mut tier as &mut dyn HostMemory);
    run_from_storage_tiered(target, job, staging, t, o, s, progress)
}

/// Inputs `a` (seed 1) and `b` (seed 2) of `n` u32s in `dir`, and the output's path `c`.
pub fn two_inputs(dir: &Path, n: usize) -> (PathBuf, PathBuf, PathBuf) {
    let [a, b, c] = ["a", "b", "c"].map(|f| dir.join(f));
    write_u32s(&a, n, 1);
    write_u32s(&b, n, 2);
    (a, b, c)
}

/// Checks `c` against [`ADD`] over [`two_inputs`]' files of `n` elements.
pub fn check_add(c: &Path, n: usize) {
    let got = read_u32s(c);
    assert_eq!(got.len(), n);
    for (i, v) in got.iter().enumerate() {
        let (x, y) = (value(1, i as u64) as u32, value(2, i as u64) as u32);
        let want = x.wrapping_add(y.wrapping_mul(3)).wrapping_add(i as u32);
        assert_eq!(*v, want, "element {i}");
    }
}

/// Checks `path` against `passes` runs of `mix_u32` in a row over the `n` u32s of `seed`
/// ([`write_u32s`]); `what` names the case.
pub fn check_mixed(path: &Path, n: usize, seed: u64, passes: usize, what: &str) {
    let got = read_u32s(path);
    assert_eq!(got.len(), n, "{what}");
    for (i, v) in got.iter().enumerate() {
        let mut want = value(seed, i as u64) as u32;
        for _ in 0..passes {
            want = mix_u32_ref(want, i as u64);
        }
        assert_eq!(*v, want, "{what}: element {i}");
    }
}

/// Runs `o` in place over the 20 blocks of `src` into `dst`, which holds "before", with a
/// host tier of `tier` bytes, and stops it 3 blocks into its second pass: the error counts
/// the run's blocks (all passes') and the run replaced nothing ([`replaced_nothing`]).
pub fn stop_in_the_second_pass(
    ctx: &Context,
    k: &mut Kernel,
    (src, dst): (&Path, &Path),
    o: &StreamOptions,
    tier: usize,
    what: &str,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let o = StreamOptions {
        stop: Some(stop.clone()),
        ..o.clone()
    };
    let halt = |p: pinstream::engine::Progress| {
        if p.blocks >= 23 {
            stop.store(2, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let s = StorageOptions::default();
    let files = (vec![src.to_path_buf()], dst);
    let e = stream_tiered(ctx, k, files, (true, &o, &s), (tier, &halt)).unwrap_err();
    assert!(matches!(e, StorageError::Stream(_)), "{what}: {e}");
    let blocks = 20 * o.passes;
    assert!(
        e.to_string().contains(&format!(" of {blocks} blocks")),
        "{what}: {e}"
    );
    replaced_nothing(dst, 2, what);
}

/// Checks what a failed or stopped run leaves: `dst` still holding "before", and no
/// temporary file beside it (its folder holds `entries` files); `what` names the case.
pub fn replaced_nothing(dst: &Path, entries: usize, what: &str) {
    assert_eq!(std::fs::read(dst).unwrap(), b"before", "{what}");
    let dir = dst.parent().unwrap();
    assert_eq!(names(dir).len(), entries, "{what}: no temporary file left");
}

/// The names in `dir`, sorted: no temporary file of a pass may stay.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = (std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
