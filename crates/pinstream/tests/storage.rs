//! Files streamed from storage through staging rings smaller than the data
//! (`engine::storage`), on the default OpenCL device (PoCL in CI), checked against CPU
//! references byte for byte, for sizes that are and are not multiples of a page and of a
//! block, in place and out of place, direct and buffered.

mod common;

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::io::prepare_output;
use pinstream::engine::kernels::{mix_u32_ref, value, MIX_U32};
use pinstream::engine::storage::{
    run_from_storage, staging_plan, StorageError, StorageJob, StorageOptions, StorageReport,
};
use pinstream::engine::{BoundsCheck, DType, HostMemory, StreamOptions, Target, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use std::path::{Path, PathBuf};

const ADD: &str = r#"
__kernel void add(__global const uint* a, __global const uint* b, __global uint* c,
                  ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + 3u * b[i] + (uint)(offset + i);
}
"#;

fn kernel(ctx: &Context, src: &str, name: &str) -> Kernel {
    let p = ctx.build_program(src, "").unwrap_or_else(|e| panic!("{e}"));
    p.kernel(name).unwrap()
}

fn opts(block_bytes: usize, slots: Option<usize>) -> StreamOptions {
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
    }
}

fn write_u32s(path: &Path, n: usize, seed: u64) {
    let bytes: Vec<u8> = (0..n as u64)
        .flat_map(|i| (value(seed, i) as u32).to_le_bytes())
        .collect();
    std::fs::write(path, bytes).unwrap();
}

fn read_u32s(path: &Path) -> Vec<u32> {
    let b = std::fs::read(path).unwrap();
    b.chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs `kernel` over `inputs` into `out` with staging rings pinned as the plan says.
fn stream(
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
fn stream_watched(
    ctx: &Context,
    k: &mut Kernel,
    inputs: Vec<PathBuf>,
    out: &Path,
    (in_place, o, s): (bool, &StreamOptions, &StorageOptions),
    progress: &(dyn Fn(pinstream::engine::Progress) + Sync),
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
        residents: Vec::new(),
        args: Vec::new(),
    };
    run_from_storage(&mut Target::new(ctx, k), job, staging, o, s, progress)
}

#[test]
fn in_place_files_of_every_size_come_back_exact_through_a_smaller_ring() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    // Elements: 1 (4 bytes), a page less one element, a page, a page and one, 1 MiB + 12
    // bytes, and 20 blocks of 64 KiB and a tail: more than the ring's 12 blocks.
    for (n, direct, slots, uring) in [
        (1, true, None, true),
        (1023, true, None, true),
        (1024, false, None, true),
        (1025, true, Some(2), false),
        ((1 << 18) + 3, true, None, true),
        ((1 << 18) + 3, true, None, false),
        (20 * 16384 + 77, true, Some(1), true),
        (20 * 16384 + 77, false, None, true),
    ] {
        write_u32s(&src, n, 5);
        let s = StorageOptions {
            direct,
            uring,
            ..StorageOptions::default()
        };
        let o = opts(64 << 10, slots);
        let r = stream(&ctx, &mut k, vec![src.clone()], &dst, true, &o, &s).unwrap();
        let got = read_u32s(&dst);
        assert_eq!(got.len(), n);
        for (i, v) in got.iter().enumerate() {
            let want = mix_u32_ref(value(5, i as u64) as u32, i as u64);
            assert_eq!(*v, want, "{n} elements, element {i}");
        }
        assert_eq!(
            (r.read_bytes, r.written_bytes),
            (4 * n as u64, 4 * n as u64)
        );
        // Direct only where asked for and taken (this file system takes O_DIRECT, or the
        // report has the note saying it did not).
        assert!(!r.direct || direct, "forced buffered, reported direct");
        assert_eq!(r.direct, direct && r.notes.is_empty(), "{:?}", r.notes);
        let ring = staging_plan(4 * n, true, &o, &s).unwrap();
        assert!(
            ring.input_bytes <= 12 * (64 << 10),
            "the ring stays its size"
        );
    }
}

#[test]
fn two_inputs_stream_out_of_place_into_a_whole_output() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    let n = 30 * 8192 + 5;
    write_u32s(&a, n, 1);
    write_u32s(&b, n, 2);
    let o = opts(32 << 10, Some(2));
    let s = StorageOptions::default();
    let r = stream(&ctx, &mut k, vec![a, b], &c, false, &o, &s).unwrap();
    let got = read_u32s(&c);
    assert_eq!(got.len(), n);
    for (i, v) in got.iter().enumerate() {
        let (x, y) = (value(1, i as u64) as u32, value(2, i as u64) as u32);
        let want = x.wrapping_add(y.wrapping_mul(3)).wrapping_add(i as u32);
        assert_eq!(*v, want, "element {i}");
    }
    assert_eq!(r.read_bytes, 8 * n as u64);
    assert!(r.stream.blocks > 12 && r.read_s > 0.0 && r.write_s > 0.0);
}

#[test]
fn empty_and_mismatched_inputs_are_refused_and_nothing_is_written() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    write_u32s(&a, 100, 1);
    std::fs::write(&b, b"").unwrap();
    let (o, s) = (opts(4096, None), StorageOptions::default());
    let none = pinstream::engine::storage::open_inputs(&[], &s).err();
    assert!(matches!(none, Some(StorageError::NoInputs)), "{none:?}");
    let e = stream(&ctx, &mut k, vec![a.clone(), b.clone()], &c, false, &o, &s).unwrap_err();
    assert!(matches!(e, StorageError::Empty { .. }), "{e}");
    write_u32s(&b, 99, 1);
    let e = stream(&ctx, &mut k, vec![a.clone(), b], &c, false, &o, &s).unwrap_err();
    assert!(e.to_string().contains("must have one length"), "{e}");
    // Staging that is not what the plan says: refused before anything is read.
    let mut small = HostRegion::new(&ctx, 4096, &PinOptions::default()).unwrap();
    let job = StorageJob {
        inputs: vec![a],
        in_place: true,
        output: Some(prepare_output(&c).unwrap()),
        residents: Vec::new(),
        args: Vec::new(),
    };
    let mut kt = kernel(&ctx, MIX_U32, "mix_u32");
    let staging: Vec<&mut dyn HostMemory> = vec![&mut small];
    let e = run_from_storage(
        &mut Target::new(&ctx, &mut kt),
        job,
        staging,
        &o,
        &s,
        &|_| {},
    );
    let e = e.unwrap_err();
    assert!(
        matches!(
            e,
            StorageError::Staging {
                index: 0,
                have: 4096,
                need: 400
            }
        ),
        "{e}"
    );
    assert!(!c.exists());
}

#[test]
fn a_stopped_run_ends_its_readers_and_writer_and_replaces_nothing() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    write_u32s(&src, 40 * 1024, 3);
    std::fs::write(&dst, b"before").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(2));
    let o = StreamOptions {
        stop: Some(stop),
        ..opts(4096, None)
    };
    let e = stream(
        &ctx,
        &mut k,
        vec![src],
        &dst,
        true,
        &o,
        &StorageOptions::default(),
    );
    let e = e.unwrap_err();
    assert!(matches!(e, StorageError::Stream(_)), "{e}");
    assert_eq!(std::fs::read(&dst).unwrap(), b"before");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "no temporary file left"
    );
}

#[test]
fn an_input_that_shrinks_mid_run_stops_it_naming_the_file_and_nothing_is_written() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("shrinks"), dir.path().join("out"));
    // 40 blocks of 4 KiB: the ring holds 12, so blocks past it are read only after the first
    // completes, which is when the file is cut.
    write_u32s(&src, 40 * 1024, 9);
    let cut = |p: pinstream::engine::Progress| {
        if p.blocks == 1 {
            std::fs::File::options()
                .write(true)
                .open(&src)
                .unwrap()
                .set_len(4096)
                .unwrap();
        }
    };
    let (o, s) = (opts(4096, None), StorageOptions::default());
    let e =
        stream_watched(&ctx, &mut k, vec![src.clone()], &dst, (true, &o, &s), &cut).unwrap_err();
    assert!(matches!(&e, StorageError::Io(_)), "{e:?}");
    assert!(
        e.to_string().contains("shrinks") && e.to_string().contains("ended"),
        "{e}"
    );
    assert!(!dst.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}
