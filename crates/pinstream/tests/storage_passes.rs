//! Several passes over files streamed from storage (`engine::storage` with
//! `StreamOptions::passes`), on the default OpenCL device (PoCL in CI): in place each pass
//! reads what the one before wrote, so the result is that of N runs in a row; out of place
//! each pass reads the inputs again. Checked byte for byte against CPU references, with the
//! bytes each pass read from storage.

mod common;
#[path = "common/storage_files.rs"]
mod storage_files;

use pinstream::backend::opencl::{Context, Kernel};
use pinstream::engine::storage::{StorageError, StorageOptions, StorageReport};
use pinstream::engine::{Residency, ResidencyReason, StreamOptions};
use pinstream_lab::kernels::value;
use std::path::{Path, PathBuf};
use storage_files::{
    check_add, check_mixed, kernel, mix_in_out, names, read_u32s, stop_in_the_second_pass,
    two_inputs, write_u32s, ADD,
};

/// `passes` passes with no VRAM tier (`Residency::Off`): every pass uploads every block.
fn opts(block_bytes: usize, passes: usize) -> StreamOptions {
    StreamOptions {
        passes,
        residency: Residency::Off,
        ..storage_files::opts(block_bytes, Some(2))
    }
}

/// A storage run of `o` with the default storage options.
fn stream(
    ctx: &Context,
    k: &mut Kernel,
    files: (Vec<PathBuf>, &Path),
    in_place: bool,
    o: &StreamOptions,
) -> Result<StorageReport, StorageError> {
    tiered(ctx, k, files, (in_place, o), 0)
}

/// As [`stream`], with a host tier of `tier` bytes.
fn tiered(
    ctx: &Context,
    k: &mut Kernel,
    files: (Vec<PathBuf>, &Path),
    (in_place, o): (bool, &StreamOptions),
    tier: usize,
) -> Result<StorageReport, StorageError> {
    let s = StorageOptions::default();
    storage_files::stream_tiered(ctx, k, files, (in_place, o, &s), (tier, &|_| {}))
}

#[test]
fn in_place_passes_over_the_input_itself_replace_it_once_at_the_end() {
    let (ctx, mut k, dir, data, _) = mix_in_out();
    let n = 9 * 4096 + 3;
    // Without and with a VRAM tier (all 10 blocks on the device across the passes).
    for residency in [Residency::Off, Residency::Auto] {
        write_u32s(&data, n, 8);
        let o = StreamOptions {
            residency,
            ..opts(16 << 10, 3)
        };
        let r = stream(&ctx, &mut k, (vec![data.clone()], &data), true, &o).unwrap();
        let kept = if residency == Residency::Off { 0 } else { 10 };
        assert_eq!(r.stream.residency.blocks, kept);
        check_mixed(&data, n, 8, 3, &residency.to_string());
        assert_eq!(names(dir.path()), ["in"]);
    }
}

/// The bytes each of `passes` passes reads from storage and takes from a host tier that
/// holds `held` of the `all` bytes: the first reads everything, later ones only the rest.
fn per_pass(passes: usize, all: u64, held: u64) -> (Vec<u64>, Vec<u64>) {
    let (mut reads, mut served) = (vec![all - held; passes], vec![held; passes]);
    (reads[0], served[0]) = (all, 0);
    (reads, served)
}

#[test]
fn in_place_passes_from_storage_are_n_runs_in_a_row_with_and_without_a_host_tier() {
    let (ctx, mut k, dir, src, dst) = mix_in_out();
    // 21 blocks of 16 KiB (the last 308 bytes): more than the ring holds. Host tiers of
    // none, of 10 blocks and a half (10 held), and of more than the data (all held).
    let n = 20 * 4096 + 77;
    let all = 4 * n as u64;
    let block = (16 << 10) as u64;
    for (tier, held) in [(0, 0), (10 * block + 8192, 10 * block), (2 * all, all)] {
        for passes in [1, 2, 3] {
            write_u32s(&src, n, 5);
            let o = opts(16 << 10, passes);
            let files = (vec![src.clone()], dst.as_path());
            let r = tiered(&ctx, &mut k, files, (true, &o), tier as usize).unwrap();
            check_mixed(&dst, n, 5, passes, &format!("{passes} passes, tier {tier}"));
            let (reads, served) = per_pass(passes, all, if passes > 1 { held } else { 0 });
            assert_eq!(r.pass_read_bytes, reads, "{passes} passes, tier {tier}");
            assert_eq!(r.pass_host_bytes, served, "{passes} passes, tier {tier}");
            // Each pass but the last writes back the blocks the disk holds; the last every one.
            let mut writes = vec![all - if passes > 1 { held } else { 0 }; passes];
            writes[passes - 1] = all;
            assert_eq!(r.pass_written_bytes, writes, "{passes} passes, tier {tier}");
            let st = &r.stream;
            if passes > 1 {
                let why = st.residency.reason;
                assert_eq!((why, st.residency.blocks), (ResidencyReason::Off, 0));
            }
            assert_eq!(
                (st.passes, st.pass_bytes.len(), st.pass_seconds.len()),
                (passes, passes, passes)
            );
            assert!(
                st.pass_bytes.iter().all(|p| p.h2d == all && p.d2h == all),
                "{st:?}"
            );
            // The input stays as it was; no pass's file stays beside the output.
            assert_eq!(read_u32s(&src)[7], value(5, 7) as u32);
            assert_eq!(names(dir.path()), ["in", "out"]);
        }
    }
}

#[test]
fn out_of_place_passes_read_the_inputs_each_pass_but_what_a_host_tier_holds() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, ADD, "add");
    let dir = tempfile::tempdir().unwrap();
    let n = 30 * 4096 + 5;
    let (a, b, c) = two_inputs(dir.path(), n);
    let (all, block) = (8 * n as u64, (16 << 10) as u64);
    // None, and 8 blocks of room: 4 of each input.
    for (tier, held) in [(0, 0), (8 * block, 8 * block)] {
        for passes in [1, 2, 3] {
            let o = opts(16 << 10, passes);
            let files = (vec![a.clone(), b.clone()], c.as_path());
            let r = tiered(&ctx, &mut k, files, (false, &o), tier as usize).unwrap();
            check_add(&c, n);
            let (reads, _) = per_pass(passes, all, if passes > 1 { held } else { 0 });
            assert_eq!(r.pass_read_bytes, reads, "{passes} passes, tier {tier}");
            // Only the last pass writes the output.
            assert_eq!(r.written_bytes, 4 * n as u64);
            let mut writes = vec![0; passes];
            writes[passes - 1] = 4 * n as u64;
            assert_eq!(r.pass_written_bytes, writes, "{passes} passes, tier {tier}");
            assert_eq!(names(dir.path()), ["a", "b", "c"]);
        }
    }
}

#[test]
fn a_run_stopped_in_a_later_pass_replaces_nothing_and_leaves_no_pass_file() {
    let (ctx, mut k, _dir, src, dst) = mix_in_out();
    // 20 blocks of 16 KiB a pass; stopped 3 blocks into the second pass.
    write_u32s(&src, 20 * 4096, 3);
    std::fs::write(&dst, b"before").unwrap();
    for tier in [0, 5 * (16 << 10)] {
        let (files, o) = ((src.as_path(), dst.as_path()), opts(16 << 10, 3));
        stop_in_the_second_pass(&ctx, &mut k, files, &o, tier, &format!("tier {tier}"));
    }
}
