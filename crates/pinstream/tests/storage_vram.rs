//! The VRAM tier of passes from storage (`engine::storage::vram_tier`), on the default OpenCL
//! device (PoCL in CI): the last blocks stay on the device across the passes, so later
//! passes neither read nor upload them, and in place download them once, after the last
//! pass. Results checked byte for byte against N single-pass runs in a row, with the bytes
//! each pass read from storage, took from the host tier and moved each way, and the tier the
//! run kept against the one `vram_tier` planned.

mod common;
#[path = "common/storage_files.rs"]
mod storage_files;

use pinstream::backend::opencl::Context;
use pinstream::engine::storage::{vram_tier, StorageJob, StorageOptions, StorageReport, VramTier};
use pinstream::engine::{
    BoundsCheck, HostMemory, PassBytes, Residency, ResidencyReason, StreamOptions, WorkSize,
};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{mix_u32_ref, value};
use std::path::PathBuf;
use storage_files::{
    check_mixed, kernel, mix_in_out, read_u32s, stop_in_the_second_pass, write_u32s,
};

const BLOCK: usize = 16 << 10;

/// `passes` passes of 16 KiB blocks through 2 slots, no bounds guard (a slot is a block's
/// bytes exactly), the VRAM tier as `residency` says in a budget of `budget` bytes.
fn opts(passes: usize, residency: Residency, budget: u64) -> StreamOptions {
    StreamOptions {
        passes,
        residency,
        vram_budget: budget,
        check_bounds: BoundsCheck::Off,
        ..storage_files::opts(BLOCK, Some(2))
    }
}

/// The VRAM tier `vram_tier` plans for `inputs` on `ctx`.
fn planned(
    ctx: &Context,
    inputs: &[PathBuf],
    in_place: bool,
    o: &StreamOptions,
    residents: Vec<&dyn HostMemory>,
) -> VramTier {
    let job = StorageJob {
        inputs: inputs.to_vec(),
        in_place,
        output: None,
        residents,
        args: Vec::new(),
    };
    vram_tier(ctx, &job, o, &StorageOptions::default()).unwrap()
}

/// What each of `passes` passes should move: `all` input bytes, of which the VRAM tier holds
/// `v` and the host tier `h`; `out` result bytes, `vo` of them in VRAM in place (0 out of
/// place: every pass downloads every result).
struct Want {
    passes: usize,
    all: u64,
    v: u64,
    h: u64,
    out: u64,
    vo: u64,
}

impl Want {
    fn check(&self, r: &StorageReport, what: &str) {
        let later = |first: u64, rest: u64| {
            let mut v = vec![rest; self.passes];
            v[0] = first;
            v
        };
        let reads = later(self.all, self.all - self.v - self.h);
        assert_eq!(r.pass_read_bytes, reads, "{what}: read from storage");
        assert_eq!(r.pass_host_bytes, later(0, self.h), "{what}: host tier");
        let mut moved: Vec<PassBytes> = (later(self.all, self.all - self.v).into_iter())
            .map(|h2d| PassBytes {
                h2d,
                d2h: self.out - self.vo,
            })
            .collect();
        moved.last_mut().unwrap().d2h = self.out;
        assert_eq!(r.stream.pass_bytes, moved, "{what}: over the link");
    }
}

#[test]
fn in_place_passes_keep_the_last_blocks_on_the_device_and_are_n_runs_in_a_row() {
    let (ctx, mut k, _dir, src, dst) = mix_in_out();
    // 21 blocks of 16 KiB, the last 308 bytes.
    let n = 20 * 4096 + 77;
    let all = 4 * n as u64;
    let b = BLOCK as u64;
    let tail = |v: u64| if v == 0 { 0 } else { all - (21 - v) * b };
    let big = 64 << 20;
    // (policy, budget, host tier bytes, VRAM blocks, host tier blocks with several passes)
    let cases = [
        (Residency::Off, big, 0, 0, 0),
        (Residency::Off, big, 10 * b + 8192, 0, 10),
        (Residency::Auto, big, 0, 21, 0),
        (Residency::Auto, big, 2 * all, 21, 0),
        (Residency::Bytes(5 * b + 100), big, 0, 5, 0),
        (Residency::Bytes(5 * b + 100), big, 10 * b, 5, 10),
        // The ring's 2 slots leave 5 blocks of a 7-block budget; a tier larger than the
        // data holds the 16 blocks below them.
        (Residency::Auto, 7 * b, 2 * all, 5, 16),
    ];
    for (policy, budget, tier, v, h) in cases {
        for passes in [1, 2, 5] {
            let what = format!("{policy}, budget {budget}, tier {tier}, {passes} passes");
            write_u32s(&src, n, 5);
            let o = opts(passes, policy, budget);
            let plan = planned(&ctx, std::slice::from_ref(&src), true, &o, Vec::new());
            let files = (vec![src.clone()], dst.as_path());
            let s = StorageOptions::default();
            let r = storage_files::stream_tiered(
                &ctx,
                &mut k,
                files,
                (true, &o, &s),
                (tier as usize, &|_| {}),
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            check_mixed(&dst, n, 5, passes, &what);
            let (v, h) = if passes > 1 { (v, h) } else { (0, 0) };
            let st = &r.stream;
            assert_eq!(
                (st.residency.blocks, st.residency.of),
                (v as usize, 21),
                "{what}"
            );
            assert_eq!(plan.blocks, 21 - v as usize..21, "{what}: planned");
            assert_eq!((plan.bytes, st.residency.bytes), (v * b, v * b), "{what}");
            assert_eq!(plan.input_bytes, tail(v), "{what}");
            if passes > 1 && policy != Residency::Off {
                assert!(
                    matches!(st.residency.reason, ResidencyReason::Room { .. }),
                    "{what}"
                );
                let line = st.residency.to_string();
                assert!(
                    line.starts_with(&format!("{v} of 21 blocks resident")),
                    "{what}: {line}"
                );
            }
            let (v, h) = (tail(v), h * b);
            Want {
                passes,
                all,
                v,
                h,
                out: all,
                vo: v,
            }
            .check(&r, &what);
            assert_eq!(read_u32s(&src)[7], value(5, 7) as u32, "the input stays");
        }
    }
}

/// y = W·x over rows of 4: `x` resident (uploaded once), `w` streamed, `y` out of place.
const WX: &str = r#"
__kernel void wx(__global const uint* w, __global uint* y, __global const uint* x,
                 ulong n, ulong block, ulong offset) {
    size_t r = get_global_id(0);
    if (4 * r < n) {
        uint s = 0;
        for (int j = 0; j < 4; j++) s += w[4 * r + j] * x[j];
        y[r] = s + (uint)(offset / 4 + r);
    }
}
"#;

#[test]
fn out_of_place_passes_with_a_resident_argument_read_and_upload_only_what_vram_lacks() {
    let ctx = common::test_ctx();
    let mut k = kernel(&ctx, WX, "wx");
    let dir = tempfile::tempdir().unwrap();
    let (w, y) = (dir.path().join("w"), dir.path().join("y"));
    // 21 blocks of 1024 rows, the last 19 rows.
    let rows = 20 * 1024 + 19;
    write_u32s(&w, 4 * rows, 9);
    let mut x = HostRegion::new(&ctx, 16, &PinOptions::default()).unwrap();
    let xs = [3u32, 5, 7, 11];
    for (d, v) in x.typed_mut::<u32>().unwrap().iter_mut().zip(xs) {
        *d = v;
    }
    let (all, b) = (16 * rows as u64, BLOCK as u64);
    let tail = |v: u64| if v == 0 { 0 } else { all - (21 - v) * b };
    // A slot out of place: a 16 KiB input block and a 4 KiB output block.
    let slot = b + b / 4;
    let cases = [
        (Residency::Off, 0, 0, 0),
        (Residency::Bytes(3 * slot), 0, 3, 0),
        (Residency::Bytes(3 * slot), 4 * b, 3, 4),
        (Residency::Auto, 4 * b, 21, 0),
    ];
    for (policy, tier, v, h) in cases {
        for passes in [1, 2, 5] {
            let what = format!("{policy}, tier {tier}, {passes} passes");
            let o = StreamOptions {
                in_per_out: 4,
                work: WorkSize {
                    per_output: true,
                    ..WorkSize::default()
                },
                ..opts(passes, policy, 64 << 20)
            };
            let plan = planned(&ctx, std::slice::from_ref(&w), false, &o, vec![&x]);
            let s = StorageOptions::default();
            let files = (vec![w.clone()], y.as_path());
            let r = storage_files::stream_with(
                &ctx,
                &mut k,
                files,
                (false, &o, &s),
                (tier as usize, &|_| {}),
                vec![&x],
            )
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = read_u32s(&y);
            assert_eq!(got.len(), rows, "{what}");
            for (r, g) in got.iter().enumerate() {
                let dot = (0..4).fold(0u32, |s, j| {
                    let wv = value(9, (4 * r + j) as u64) as u32;
                    s.wrapping_add(wv.wrapping_mul(xs[j]))
                });
                assert_eq!(*g, dot.wrapping_add(r as u32), "{what}: row {r}");
            }
            let (v, h) = if passes > 1 { (v, h) } else { (0, 0) };
            assert_eq!(r.stream.residency.blocks, v as usize, "{what}");
            assert_eq!(
                (plan.blocks.len() as u64, plan.bytes),
                (v, v * slot),
                "{what}"
            );
            let out = 4 * rows as u64;
            Want {
                passes,
                all,
                v: tail(v),
                h: h * b,
                out,
                vo: 0,
            }
            .check(&r, &what);
            assert_eq!(r.written_bytes, out, "{what}: only the last pass writes");
            assert_eq!(r.pass_written_bytes.iter().sum::<u64>(), out, "{what}");
            assert_eq!(r.pass_written_bytes.last(), Some(&out), "{what}");
        }
    }
}

#[test]
fn a_stop_in_a_later_pass_with_a_vram_tier_leaves_the_output_and_no_pass_file() {
    let (ctx, mut k, _dir, src, dst) = mix_in_out();
    write_u32s(&src, 20 * 4096, 3);
    std::fs::write(&dst, b"before").unwrap();
    // Budgets of 7 and 22 blocks: 5 and all 20 blocks in VRAM; stopped 3 blocks into pass 2.
    for budget in [7 * BLOCK as u64, 22 * BLOCK as u64] {
        let o = opts(3, Residency::Auto, budget);
        let what = format!("budget {budget}");
        stop_in_the_second_pass(&ctx, &mut k, (&src, &dst), &o, 0, &what);
        // The same run, not stopped, gives three passes' results.
        let s = StorageOptions::default();
        let files = (vec![src.clone()], dst.as_path());
        let r = storage_files::stream_tiered(&ctx, &mut k, files, (true, &o, &s), (0, &|_| {}));
        assert!(r.is_ok(), "budget {budget}: {:?}", r.err());
        let x = value(3, 9) as u32;
        let want = mix_u32_ref(mix_u32_ref(mix_u32_ref(x, 9), 9), 9);
        assert_eq!(read_u32s(&dst)[9], want);
        write_u32s(&src, 20 * 4096, 3);
        std::fs::write(&dst, b"before").unwrap();
    }
}
