//! Several passes over files streamed from storage (`engine::storage` with
//! `StreamOptions::passes`), on the default OpenCL device (PoCL in CI): in place each pass
//! reads what the one before wrote, so the result is that of N runs in a row; out of place
//! each pass reads the inputs again. Checked byte for byte against CPU references, with the
//! bytes each pass read from storage.

mod common;
#[path = "common/storage_files.rs"]
mod storage_files;

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::kernels::{mix_u32_ref, value, MIX_U32};
use pinstream::engine::storage::{StorageError, StorageOptions, StorageReport};
use pinstream::engine::StreamOptions;
use std::path::{Path, PathBuf};
use storage_files::{check_add, kernel, read_u32s, two_inputs, write_u32s, ADD};

fn opts(block_bytes: usize, passes: usize) -> StreamOptions {
    StreamOptions {
        passes,
        ..storage_files::opts(block_bytes, Some(2))
    }
}

/// A storage run of `o` with the default storage options.
fn stream(
    ctx: &Context,
    k: &mut Kernel,
    (inputs, out): (Vec<PathBuf>, &Path),
    in_place: bool,
    o: &StreamOptions,
) -> Result<StorageReport, StorageError> {
    storage_files::stream(ctx, k, inputs, out, in_place, o, &StorageOptions::default())
}

/// The names in `dir`, sorted: no temporary file of a pass may stay.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn in_place_passes_from_storage_are_n_runs_in_a_row() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    // 20 blocks of 16 KiB and a tail: more than the ring holds.
    let n = 20 * 4096 + 77;
    for passes in [1, 2, 3] {
        write_u32s(&src, n, 5);
        let r = stream(
            &ctx,
            &mut k,
            (vec![src.clone()], &dst),
            true,
            &opts(16 << 10, passes),
        )
        .unwrap();
        let got = read_u32s(&dst);
        assert_eq!(got.len(), n);
        for (i, v) in got.iter().enumerate() {
            let mut want = value(5, i as u64) as u32;
            for _ in 0..passes {
                want = mix_u32_ref(want, i as u64);
            }
            assert_eq!(*v, want, "{passes} passes, element {i}");
        }
        let bytes = 4 * n as u64;
        assert_eq!(r.pass_read_bytes, vec![bytes; passes], "{passes} passes");
        assert_eq!(
            (r.read_bytes, r.written_bytes),
            (bytes * passes as u64, bytes * passes as u64)
        );
        assert_eq!(
            (r.stream.passes, r.stream.pass_bytes.len()),
            (passes, passes)
        );
        assert_eq!(r.stream.pass_seconds.len(), passes);
        assert!(r
            .stream
            .pass_bytes
            .iter()
            .all(|p| p.h2d == bytes && p.d2h == bytes));
        // The input stays as it was; no pass's file stays beside the output.
        assert_eq!(read_u32s(&src)[7], value(5, 7) as u32);
        assert_eq!(names(dir.path()), ["in", "out"]);
    }
}

#[test]
fn in_place_passes_over_the_input_itself_replace_it_once_at_the_end() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, MIX_U32, "mix_u32");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let n = 9 * 4096 + 3;
    write_u32s(&data, n, 8);
    stream(
        &ctx,
        &mut k,
        (vec![data.clone()], &data),
        true,
        &opts(16 << 10, 3),
    )
    .unwrap();
    let got = read_u32s(&data);
    for (i, v) in got.iter().enumerate() {
        let x = value(8, i as u64) as u32;
        let want = mix_u32_ref(mix_u32_ref(mix_u32_ref(x, i as u64), i as u64), i as u64);
        assert_eq!(*v, want, "element {i}");
    }
    assert_eq!(names(dir.path()), ["data"]);
}

#[test]
fn out_of_place_passes_from_storage_read_the_inputs_each_pass() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let n = 30 * 4096 + 5;
    let (a, b, c) = two_inputs(dir.path(), n);
    for passes in [1, 2, 3] {
        let o = opts(16 << 10, passes);
        let r = stream(&ctx, &mut k, (vec![a.clone(), b.clone()], &c), false, &o).unwrap();
        check_add(&c, n);
        assert_eq!(r.pass_read_bytes, vec![8 * n as u64; passes]);
        // Only the last pass writes the output.
        assert_eq!(r.written_bytes, 4 * n as u64);
        assert_eq!(names(dir.path()), ["a", "b", "c"]);
    }
}
