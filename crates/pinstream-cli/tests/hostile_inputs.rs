//! Issue 12, classes 2, 3, 5, 6 and 7, through the real binary: kernels and arguments that
//! would crash, hang or silently mislead are refused before anything is pinned; the first
//! Ctrl-C is honoured in every phase; degenerate sizes and silent coercions are errors that
//! name the accepted range; messages name the fix. No case may panic or die by a signal.

mod common;

use common::{bin, clean_exit, finish_within, fresh_dir, pinstream, signal, spawn_until, stderr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor;
}
"#;

/// Out of place: y[o] = sum of R inputs (float in, float out).
const SUM: &str = r#"
__kernel void sum(__global const float* x, __global float* y, ulong n, ulong block, ulong offset, uint r) {
    size_t o = get_global_id(0);
    if (o * r >= n) return;
    float s = 0;
    for (size_t k = o * r; k < min((size_t)n, o * r + r); k++) s += x[k];
    y[o] = s;
}
"#;

/// Never ends for `forever = 7` (while n > 0).
const SPIN: &str = r#"
__kernel void spin(__global float* x, ulong n, ulong block, ulong offset, uint forever) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    for (uint k = 0; k < forever || forever == 7; k++) v = v * 0.999f + 0.001f;
    x[i] = v;
}
"#;

fn dir(name: &str) -> PathBuf {
    let d = fresh_dir("hin", name);
    for (f, src) in [("scale.cl", SCALE), ("sum.cl", SUM), ("spin.cl", SPIN)] {
        std::fs::write(d.join(f), src).unwrap();
    }
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Refused with exit code 2, every needle in the message, quickly (before any real work).
fn refused(args: &[&str], needles: &[&str]) -> Output {
    let t = Instant::now();
    // Shown with a failure (the test's output is captured): which call crashed, where the
    // process died by a signal with nothing on its stderr (SIGSEGV on the H200, 2026-12-01).
    eprintln!("refused? {args:?}");
    let o = pinstream(args);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
    assert!(!err.contains('\u{fffd}'), "garbage bytes: {err}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "{args:?} took {:?}",
        t.elapsed()
    );
    o
}

/// `run` of `scale.cl` (`k`) over 1 MiB of synthetic data, doubling, with `extra`.
fn scale_args<'a>(k: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "run",
        "--kernel",
        k,
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
        "--arg",
        "factor=2",
    ];
    v.extend(extra);
    v
}

fn spawn(args: &[&str]) -> Child {
    Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
#[cfg_attr(
    windows,
    ignore = "reads /dev/zero as an endless source; Windows has no such device path"
)]
fn an_endless_kernel_source_is_refused() {
    let args = [
        "run",
        "--kernel",
        "/dev/zero",
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
    ];
    refused(&args, &["larger than 16 MiB"]);
}

#[test]
fn kernels_that_would_crash_or_mislead_are_refused_before_pinning() {
    let d = dir("kernels");
    let scale = d.join("scale.cl");
    let scale = s(&scale).to_string();
    let empty = d.join("empty.cl");
    std::fs::write(&empty, "").unwrap();
    let none = d.join("none.cl");
    std::fs::write(&none, "int helper(int a) { return a; }\n").unwrap();
    let binary = d.join("binary.cl");
    std::fs::write(&binary, [0u8, 1, 2, 0xff]).unwrap();
    for (k, needles) in [
        (s(&empty), &["is empty", "__kernel"][..]),
        (s(&binary), &["NUL bytes"][..]),
        (s(&d), &["is a folder"][..]),
        (s(&none), &["defines no kernel"][..]),
    ] {
        refused(
            &[
                "run",
                "--kernel",
                k,
                "--entry",
                "scale",
                "--synthetic",
                "1MiB",
            ],
            needles,
        );
    }
    // Element types against the kernel's pointers, in and out.
    for t in ["f64", "u8", "f16", "i32"] {
        let o = refused(&scale_args(&scale, &["--dtype", t]), &["pass --dtype f32"]);
        assert!(stderr(&o).contains("argument `x` is float*"));
    }
    let sum = d.join("sum.cl");
    let sum_args = |extra: &[&str]| {
        let mut v = vec![
            "run",
            "--kernel",
            s(&sum),
            "--entry",
            "sum",
            "--synthetic",
            "1MiB",
            "--arg",
            "r=4",
            "--reduce",
            "4",
            "--work",
            "output",
        ];
        v.extend(extra);
        v.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let ok = pinstream(&sum_args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok.status.success(), "{}", stderr(&ok));
    refused(
        &sum_args(&["--out-dtype", "f16"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &["argument `y` is float*", "pass --out-dtype f32"],
    );
    // --reduce must divide the block: the message gives a block that works.
    refused(
        &sum_args(&["--block", "1000004"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[
            "1000004 bytes is not a positive multiple of 16 bytes",
            "(1000000 bytes)",
        ],
    );
    // Work items past what a launch may have, and work-groups past the kernel's limit.
    refused(
        &scale_args(&scale, &["--items", "4294967296"]),
        &["2^32 - 1", "lower --block or --items"],
    );
    refused(
        &scale_args(&scale, &["--local", "100000"]),
        &["CL_KERNEL_WORK_GROUP_SIZE", "pass --local", "or less"],
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "sends SIGINT with kill(1); on Windows Ctrl-C is a console event (ctrlc), which a test cannot send to a child under Wine"
)]
fn the_first_ctrl_c_is_honoured_where_nothing_can_be_cleaned_up() {
    let d = dir("exit");
    // A kernel file that is a FIFO nobody writes: the read blocks in the kernel.
    let fifo = d.join("kernel.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let child = spawn(&[
        "run",
        "--kernel",
        s(&fifo),
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
    ]);
    std::thread::sleep(Duration::from_millis(800));
    signal(&child, "INT");
    let o = finish_within(child, Duration::from_secs(5));
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("interrupted by SIGINT while reading and building"),
        "{}",
        stderr(&o)
    );
    // An input FIFO nobody writes.
    let input = d.join("input.fifo");
    assert!(Command::new("mkfifo")
        .arg(&input)
        .status()
        .unwrap()
        .success());
    let k = d.join("scale.cl");
    let reading = "while pinning and reading the inputs";
    let args = [
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        s(&input),
        "--elements",
        "1000",
        "--arg",
        "factor=2",
    ];
    let (child, rest) = spawn_until(&args, reading);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "TERM");
    let o = finish_within(child, Duration::from_secs(5));
    let err = rest.join().unwrap();
    assert_eq!(o.status.code(), Some(143), "{err}");
    assert!(
        err.contains(&format!("interrupted by SIGTERM {reading}")),
        "{err}"
    );
    // doctor, which had no signal handling at all.
    let args = [
        "doctor", "--size", "256MiB", "--block", "1MiB", "--repeat", "50",
    ];
    let (child, rest) = spawn_until(&args, "while measuring");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    let o = finish_within(child, Duration::from_secs(5));
    let err = rest.join().unwrap();
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted by SIGINT while measuring"),
        "{err}"
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "sends SIGINT with kill(1); on Windows Ctrl-C is a console event (ctrlc), which a test cannot send to a child under Wine"
)]
fn a_kernel_that_never_ends_is_announced_and_aborted_on_the_second_signal() {
    let d = dir("spin");
    let (k, out) = (d.join("spin.cl"), d.join("out.bin"));
    let args = [
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "spin",
        "--synthetic",
        "256KiB",
        "--block",
        "64KiB",
        "--arg",
        "forever=7",
        "--output",
        s(&out),
    ];
    let (child, rest) = spawn_until(&args, "waiting for the kernel of block 0");
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "INT");
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    let o = finish_within(child, Duration::from_secs(5));
    clean_exit(&o);
    let err = rest.join().unwrap();
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(
        err.contains(
            "SIGINT: stopping, waiting for the kernel of block 0; Ctrl-C again to abort now"
        ),
        "{err}"
    );
    assert!(!out.exists());
    // The time limit ends it without any signal.
    let mut limited = args.to_vec();
    limited.extend(["--kernel-timeout", "1.5"]);
    let o = finish_within(spawn(&limited), Duration::from_secs(60));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(
        err.contains("no block completed within --kernel-timeout 1.5 s"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn degenerate_sizes_are_refused_with_a_size_that_works() {
    let d = dir("sizes");
    let scale = d.join("scale.cl");
    let scale = s(&scale).to_string();
    let block4 = scale_args(&scale, &["--block", "4"]);
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["doctor", "--size", "8MiB", "--max-chunk", "0"],
            &["--max-chunk 0 B", "pass --max-chunk 4 KiB or more"],
        ),
        (
            &["doctor", "--size", "8MiB", "--max-chunk", "1"],
            &["pass --max-chunk 4 KiB or more"],
        ),
        (
            &["doctor", "--size", "64MiB", "--block", "4"],
            &["16777216 blocks", "pass --block 1 KiB (1024 bytes) or more"],
        ),
        (
            &["doctor", "--size", "1GiB", "--block", "1KiB"],
            &["pass --block 16 KiB (16384 bytes) or more"],
        ),
        (
            &block4,
            &["262144 blocks", "pass --block 1 KiB (1024 bytes) or more"],
        ),
        (
            &["soak", "--size", "16MiB", "--block", "4"],
            &["pass --block"],
        ),
    ];
    for (args, needles) in cases {
        refused(args, needles);
    }
    // All regions of a run together, before anything is pinned: two inputs that each fit
    // the host memory but not both.
    let avail = pinstream::backend::os::host_room().unwrap().bytes / 1024;
    let each = format!("{}KiB", avail * 6 / 10 / 4 * 4);
    let k = d.join("scale.cl");
    let axpy = d.join("axpy.cl");
    std::fs::write(&axpy, "__kernel void axpy(__global const float* x, __global const float* y, __global float* o, ulong n) { size_t i = get_global_id(0); if (i < n) o[i] = x[i] + y[i]; }").unwrap();
    refused(
        &[
            "run",
            "--kernel",
            s(&axpy),
            "--entry",
            "axpy",
            "--synthetic",
            &each,
            "--synthetic",
            &each,
        ],
        &[
            "the run would pin",
            "2 input(s) of",
            "an output of",
            "MemAvailable",
        ],
    );
    let _ = k;
}

#[test]
fn silent_coercions_are_errors_naming_the_range() {
    let d = dir("coerce");
    let scale = d.join("scale.cl");
    let scale = s(&scale).to_string();
    for flag in ["--slots", "--items", "--reduce"] {
        let upper = flag.trim_start_matches('-').to_uppercase();
        let named = format!("'0' for '{flag} <{upper}>'");
        refused(
            &scale_args(&scale, &[flag, "0"]),
            &[&named, "0 is not in 1.."],
        );
    }
    for (v, needle) in [
        ("1e40", "would become infinite"),
        ("-1e39", "would become infinite"),
        ("1e-50", "would become 0"),
    ] {
        let arg = format!("factor={v}");
        refused(
            &[
                "run",
                "--kernel",
                &scale,
                "--entry",
                "scale",
                "--synthetic",
                "1MiB",
                "--arg",
                &arg,
            ],
            &[needle, "float"],
        );
    }
    for v in ["nan", "-0.5", "inf", "1e400"] {
        refused(
            &["soak", "--max-rss-growth", v],
            &["--max-rss-growth", "a fraction of 0 or more"],
        );
    }
    refused(&["soak", "--cycles", "1"], &["--cycles", "16 or more"]);
}

#[test]
fn messages_name_the_fix() {
    let d = dir("messages");
    let scale = d.join("scale.cl");
    let scale = s(&scale).to_string();
    // A definition on the command line, with a value starting with `-`.
    let defined = d.join("defined.cl");
    std::fs::write(&defined, "__kernel void scale(__global float* x, ulong n) { size_t i = get_global_id(0); if (i < n) x[i] *= FACTOR; }").unwrap();
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&defined),
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
        "--build-options",
        "-DFACTOR=2",
    ]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    // Bad options blame the options, not the kernel file.
    let o = refused(
        &scale_args(&scale, &["--build-options", "-cl-std=CL9.9"]),
        &["bad --build-options", "-cl-std=CL9.9"],
    );
    assert!(!stderr(&o).contains("does not build"), "{}", stderr(&o));
}

#[test]
#[cfg_attr(
    windows,
    ignore = "reads /dev/zero, /dev/null and /dev/urandom as streams with no length; Windows has no such device paths"
)]
fn device_inputs_without_a_length_need_elements() {
    let d = dir("devices");
    let k = d.join("scale.cl");
    // A FIFO input needs --elements; a short stream says it ended, not "stated with --elements".
    refused(
        &[
            "run",
            "--kernel",
            s(&k),
            "--entry",
            "scale",
            "--input",
            "/dev/zero",
            "--arg",
            "factor=1",
        ],
        &["no length of its own", "--elements"],
    );
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        "/dev/null",
        "--elements",
        "10",
        "--arg",
        "factor=1",
    ]);
    clean_exit(&o);
    assert!(
        stderr(&o).contains("/dev/null ended after 0 bytes while being read, but 40 were expected"),
        "{}",
        stderr(&o)
    );
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        "/dev/urandom",
        "--elements",
        "1000",
        "--arg",
        "factor=1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
#[cfg_attr(
    windows,
    ignore = "runs the binary as `nobody` through setpriv(1), with PoCL's cache under an unwritable HOME: unix users and PoCL's unix cache"
)]
fn an_unwritable_home_is_diagnosed_as_poc_l_cache_not_a_missing_driver() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !root || !setpriv {
        common::skip("needs root and setpriv to run as `nobody`");
        return;
    }
    // The binary where `nobody` can run it.
    let d = std::env::temp_dir().join(format!("pinstream-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let copy = d.join("pinstream");
    std::fs::copy(bin(), &copy).unwrap();
    let o = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "env",
            "-u",
            "XDG_CACHE_HOME",
            "-u",
            "POCL_CACHE_DIR",
            "HOME=/nonexistent",
        ])
        .arg(&copy)
        .arg("devices")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&d).unwrap();
    let err = stderr(&o);
    if !err.contains("PoCL") && o.status.success() {
        common::skip("this machine's OpenCL platform is not PoCL");
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot create its kernel cache /nonexistent/.cache/pocl/kcache")
            && err.contains("POCL_CACHE_DIR"),
        "{err}"
    );
    assert!(!err.contains("install a driver"), "{err}");
    // An empty POCL_CACHE_DIR makes PoCL abort: refused before PoCL is loaded.
    let o = Command::new(bin())
        .arg("devices")
        .env("POCL_CACHE_DIR", "")
        .output()
        .unwrap();
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("POCL_CACHE_DIR is set but empty"));
}
