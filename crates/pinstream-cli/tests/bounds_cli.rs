//! `run`'s bounds guard (`--check-bounds`) through the real binary: a kernel that writes past
//! its buffers stops the run with a clear error instead of corrupting the process, and
//! writes no output; a kernel that stays inside its buffers runs as before.

use std::path::{Path, PathBuf};
mod common;

use common::{clean_exit, pinstream, stderr};

fn dir(name: &str) -> PathBuf {
    common::fresh_dir("bounds", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Out of place with `--reduce 2`, but writes all `n` outputs instead of `n / 2`: a whole
/// output block past the end of each block's output buffer (issue 21, class 12).
const OVER: &str = r#"
__kernel void over(__global const float* x, __global float* y, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = x[i] * 2.0f;
}
"#;

/// The same reduction, bounded right: pairs summed.
const PAIRS: &str = r#"
__kernel void pairs(__global const float* x, __global float* y, ulong n) {
    size_t i = get_global_id(0);
    if (i < n / 2) y[i] = x[2 * i] + x[2 * i + 1];
}
"#;

/// In place, off by one: a shifted index writes one float past the block.
const OFF_BY_ONE: &str = r#"
__kernel void off_by_one(__global float* x, ulong n) {
    size_t i = get_global_id(0);
    if (i < n) x[i + 1] = 1.0f;
}
"#;

fn write_f32(path: &Path, n: usize) {
    let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// `run` of `entry` in `src` over 1 MiB of floats in 64 KiB blocks, into `out`.
fn run(d: &Path, src: &str, entry: &str, extra: &[&str]) -> std::process::Output {
    let (k, input, out) = (d.join("k.cl"), d.join("in.bin"), d.join("out.bin"));
    std::fs::write(&k, src).unwrap();
    write_f32(&input, 1 << 18);
    let mut args = vec![
        "run",
        "--kernel",
        s(&k),
        "--entry",
        entry,
        "--input",
        s(&input),
        "--output",
        s(&out),
        "--block",
        "64KiB",
    ];
    args.extend(extra);
    pinstream(&args)
}

fn no_output_left(d: &Path) {
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("out") || n.contains("pinstream-tmp"))
        .collect();
    assert!(left.is_empty(), "left {left:?}");
}

#[test]
fn a_kernel_writing_past_its_output_with_reduce_stops_with_the_fix_and_no_output() {
    // Before the guard: `free(): invalid next size` (SIGABRT, 134) or SIGSEGV (139) on PoCL.
    // Without the flag (auto) it guards on a CPU device only.
    let checks = if common::default_device_is_cpu() {
        vec![None, Some("on")]
    } else {
        vec![Some("on")]
    };
    for check in checks {
        let d = dir(&format!("over-{check:?}"));
        let extra: Vec<&str> = ["--reduce", "2"]
            .into_iter()
            .chain(check.map(|c| ["--check-bounds", c]).into_iter().flatten())
            .collect();
        let o = run(&d, OVER, "over", &extra);
        clean_exit(&o);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        for needle in [
            "kernel `over` wrote at least 4096 bytes past the end of its buffer `y` (the output block, 32768 bytes) in block 0",
            "check the kernel's index bounds against its count argument and --reduce",
            "with --reduce 2, a block's output holds count / 2 elements",
            "wrote no output",
        ] {
            assert!(err.contains(needle), "`{needle}` not in: {err}");
        }
        no_output_left(&d);
    }
}

#[test]
fn with_reduce_4_the_guard_holds_all_n_outputs_too() {
    // The same kernel with --reduce 4 writes three output blocks past the end: before the
    // guard reached that far (one output block), PoCL's heap was overrun (SIGSEGV).
    let d = dir("over-4");
    let o = run(&d, OVER, "over", &["--reduce", "4", "--check-bounds", "on"]);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("buffer `y` (the output block, 16384 bytes) in block 0"),
        "{err}"
    );
    assert!(
        err.contains("with --reduce 4, a block's output holds count / 4 elements"),
        "{err}"
    );
    no_output_left(&d);
}

#[test]
fn an_off_by_one_in_place_is_counted_to_the_byte() {
    let d = dir("off-by-one");
    let o = run(&d, OFF_BY_ONE, "off_by_one", &["--check-bounds", "on"]);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("kernel `off_by_one` wrote 4 bytes past the end of its buffer `x` (the in-place block, 65536 bytes) in block 0"),
        "{err}"
    );
    assert!(!err.contains("--reduce"), "{err}");
    no_output_left(&d);
}

#[test]
fn a_kernel_inside_its_buffers_passes_with_the_guard_on() {
    for check in ["auto", "on", "off"] {
        let d = dir(&format!("pairs-{check}"));
        let o = run(
            &d,
            PAIRS,
            "pairs",
            &["--reduce", "2", "--check-bounds", check],
        );
        assert!(o.status.success(), "{check}: {}", stderr(&o));
        let got = std::fs::read(d.join("out.bin")).unwrap();
        assert_eq!(got.len(), (1 << 17) * 4);
        for (i, c) in got.chunks(4).enumerate() {
            let want = (4 * i + 1) as f32;
            assert_eq!(
                f32::from_le_bytes(c.try_into().unwrap()),
                want,
                "{check}: y[{i}]"
            );
        }
    }
}

#[test]
fn check_bounds_is_documented_and_a_bad_value_is_refused() {
    let help = String::from_utf8_lossy(&pinstream(&["run", "--help"]).stdout).into_owned();
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("--check-bounds <on|off|auto>"), "{help}");
    assert!(
        flat.contains(
            "off: unprotected, a kernel that writes past its buffers corrupts memory unseen"
        ),
        "{help}"
    );
    let d = dir("bad-value");
    let o = run(
        &d,
        PAIRS,
        "pairs",
        &["--reduce", "2", "--check-bounds", "yes"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give on, off or auto"),
        "{}",
        stderr(&o)
    );
    no_output_left(&d);
}

#[test]
fn a_budget_too_small_for_the_guard_zones_says_so() {
    let d = dir("budget");
    let o = run(
        &d,
        PAIRS,
        "pairs",
        &[
            "--reduce",
            "2",
            "--vram-budget",
            "200KiB",
            "--check-bounds",
            "on",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for needle in [
        "1 slot(s) of 192 KiB (1 input block(s) and an output block, each buffer followed by a bounds guard at least as large as itself)",
        "raise --vram-budget to at least 384 KiB",
        "or pass --check-bounds off (which drops the guard zones, and the protection)",
    ] {
        assert!(err.contains(needle), "`{needle}` not in: {err}");
    }
    no_output_left(&d);
    let o = run(
        &d,
        PAIRS,
        "pairs",
        &[
            "--reduce",
            "2",
            "--vram-budget",
            "200KiB",
            "--check-bounds",
            "off",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Writes past its output from block 8 on, inside it before.
const LATE: &str = r#"
__kernel void late(__global const float* x, __global float* y, ulong n, ulong block) {
    size_t i = get_global_id(0);
    if (i < (block >= 8 ? n : n / 2)) y[i] = x[i];
}
"#;

#[test]
fn on_two_devices_the_device_that_saw_it_is_named() {
    let d = dir("two-devices");
    let (k, input, out) = (d.join("k.cl"), d.join("in.bin"), d.join("out.bin"));
    std::fs::write(&k, LATE).unwrap();
    write_f32(&input, 1 << 18);
    let args = [
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "late",
        "--input",
        s(&input),
        "--output",
        s(&out),
        "--block",
        "64KiB",
        "--reduce",
        "2",
        "--devices",
        "0,1",
    ];
    // PoCL 3 names its CPU device `pthread`, later ones `cpu`.
    let runs = ["pthread pthread", "cpu cpu"].map(|devices| {
        std::process::Command::new(common::bin())
            .args(args)
            .env("POCL_DEVICES", devices)
            .output()
            .unwrap()
    });
    let o = runs
        .iter()
        .find(|o| !stderr(o).contains("--devices"))
        .expect("two PoCL devices");
    clean_exit(o);
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error: device 1 ("), "{err}");
    assert!(
        err.contains("kernel `late` wrote at least 4096 bytes past the end of its buffer `y` (the output block, 32768 bytes) in block 8"),
        "{err}"
    );
    no_output_left(&d);
}
