//! `--devices` through the real binary on two PoCL CPU devices: the child process gets
//! `POCL_DEVICES` with two devices (PoCL 3.x names its CPU device `pthread`, PoCL 4 and later
//! `cpu`; the caller's value is kept where it already lists two) and, where PoCL's ICD file is
//! in the usual place, only PoCL (`OCL_ICD_VENDORS`, so that a GPU machine's other platforms do
//! not change the indices), so that every run here is a run over two devices, two contexts and
//! two rings. Where the loader ignores `OCL_ICD_VENDORS` and lists more devices (CUDA's
//! libOpenCL on the H200 machine), each test is skipped visibly (`common::skip`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// A `POCL_DEVICES` value under which `pinstream devices` lists two devices; `None` where the
/// loader lists more than PoCL's two (CUDA's libOpenCL ignores `OCL_ICD_VENDORS`, so a GPU
/// machine's other platforms are listed too and the indices are not PoCL's alone).
fn two_devices() -> Option<&'static str> {
    static FOUND: OnceLock<Option<String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let given = std::env::var("POCL_DEVICES").ok();
            let tries = given
                .into_iter()
                .chain(["pthread pthread".into(), "cpu cpu".into()]);
            let mut most = 0;
            for t in tries {
                let o = Command::new(common::bin())
                    .arg("devices")
                    .env("POCL_DEVICES", &t)
                    .envs(pocl_only())
                    .output()
                    .unwrap();
                let listed = String::from_utf8_lossy(&o.stdout)
                    .matches("  device ")
                    .count();
                if listed == 2 {
                    return Some(t);
                }
                most = most.max(listed);
            }
            assert!(
                most > 2,
                "PoCL lists two devices under neither POCL_DEVICES=\"pthread pthread\" nor \"cpu cpu\""
            );
            None
        })
        .as_deref()
}

/// True (and the test is reported skipped) where PoCL's two devices are not all the loader
/// lists; the caller returns.
fn skipped() -> bool {
    let skip = two_devices().is_none();
    if skip {
        common::skip(
            "needs PoCL's two devices alone; this OpenCL loader lists other platforms too \
             (it ignores OCL_ICD_VENDORS, as CUDA's libOpenCL.so.1 does)",
        );
    }
    skip
}

/// `OCL_ICD_VENDORS` naming PoCL's ICD file alone, where it is in the usual place.
fn pocl_only() -> Option<(&'static str, &'static str)> {
    let icd = "/etc/OpenCL/vendors/pocl.icd";
    Path::new(icd).exists().then_some(("OCL_ICD_VENDORS", icd))
}

fn pinstream(args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = Command::new(common::bin())
        .args(args)
        .env(
            "POCL_DEVICES",
            two_devices().expect("the test checked skipped()"),
        )
        .envs(pocl_only())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    common::clean_exit(&o);
    o
}

fn dir(name: &str) -> PathBuf {
    common::fresh_dir("devices", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor + (float)block;
}
"#;

/// `run` of SCALE in place over `input` into `out` with `devices` (`None`: one device).
fn scale(
    d: &Path,
    input: &Path,
    out: &Path,
    devices: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    let kernel = d.join("scale.cl");
    std::fs::write(&kernel, SCALE).unwrap();
    let mut args = vec![
        "run",
        "--kernel",
        s(&kernel),
        "--entry",
        "scale",
        "--input",
        s(input),
        "--output",
        s(out),
        "--arg",
        "factor=3",
        "--block",
        "256KiB",
        "--vram-budget",
        "2MiB",
        "--json",
    ];
    if let Some(list) = devices {
        args.extend(["--devices", list]);
    }
    pinstream(&args, env)
}

/// `run` arguments of SCALE (written into `d`) over `size` of synthetic data, factor 2.
fn synthetic_scale(d: &Path, size: &str) -> Vec<String> {
    let kernel = d.join("scale.cl");
    std::fs::write(&kernel, SCALE).unwrap();
    let k = s(&kernel);
    [
        "run",
        "--kernel",
        k,
        "--entry",
        "scale",
        "--synthetic",
        size,
        "--arg",
        "factor=2",
    ]
    .map(String::from)
    .to_vec()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn two_devices_give_the_result_of_one_with_a_column_each() {
    if skipped() {
        return;
    }
    let d = dir("same");
    let input = d.join("x.f32");
    let n = (1 << 20) + 7;
    let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(&input, bytes).unwrap();
    let (one, two) = (d.join("one.f32"), d.join("two.f32"));
    let o1 = scale(&d, &input, &one, None, &[]);
    assert!(o1.status.success(), "{}", common::stderr(&o1));
    let o2 = scale(&d, &input, &two, Some("0,1"), &[]);
    assert!(o2.status.success(), "{}", common::stderr(&o2));
    let (r1, r2) = (std::fs::read(&one).unwrap(), std::fs::read(&two).unwrap());
    assert_eq!(r1.len(), n * 4);
    assert!(r1 == r2, "two devices wrote another result than one");
    let rep: serde_json::Value = serde_json::from_slice(&o2.stdout).unwrap();
    let devices = rep["stream"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let blocks: Vec<u64> = devices
        .iter()
        .map(|x| x["blocks"].as_u64().unwrap())
        .collect();
    assert_eq!(blocks, [8, 9], "17 blocks of 256 KiB, contiguous shares");
    assert_eq!(rep["stream"]["blocks"], 17);
    assert!(rep["numa"].as_str().unwrap().contains("NUMA"));
    // One device: no per-device part.
    let rep1: serde_json::Value = serde_json::from_slice(&o1.stdout).unwrap();
    assert!(rep1["stream"].get("devices").is_none());
}

#[test]
fn the_text_report_has_a_column_per_device_and_the_total() {
    if skipped() {
        return;
    }
    let d = dir("text");
    let mut args = synthetic_scale(&d, "4MiB");
    args.extend(
        [
            "--block",
            "512KiB",
            "--vram-budget",
            "4MiB",
            "--devices",
            "all",
        ]
        .map(String::from),
    );
    let o = pinstream(&strs(&args), &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(text.contains("per device:"), "{text}");
    assert!(text.contains("budget per device"), "{text}");
    let header = text
        .lines()
        .skip_while(|l| !l.starts_with("per device"))
        .nth(1)
        .unwrap();
    assert!(
        header.contains("0 (") && header.contains("1 (") && header.contains("total"),
        "{header}"
    );
}

#[test]
fn a_failure_on_one_device_names_the_device_and_the_block_and_writes_nothing() {
    if skipped() {
        return;
    }
    let d = dir("fault");
    let input = d.join("x.f32");
    std::fs::write(&input, vec![0u8; 4 << 20]).unwrap();
    let out = d.join("out.f32");
    let o = scale(
        &d,
        &input,
        &out,
        Some("0,1"),
        // Device 1 streams blocks 8..16: its launch 0 is the warm-up, launch 5 block 12's.
        &[("PINSTREAM_INJECT_FAULT", "kernel:5@1")],
    );
    let err = common::stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("device 1 (") && err.contains("block 12 (kernel)"),
        "{err}"
    );
    assert!(!out.exists(), "no output after a failure");
}

#[test]
fn bad_device_lists_say_what_to_give() {
    if skipped() {
        return;
    }
    let d = dir("bad");
    let owned = synthetic_scale(&d, "1MiB");
    let base = strs(&owned);
    for (list, needle) in [
        ("0,0", "named twice"),
        ("0,x", "not a device index"),
        ("0,7", "device index 7 is out of range"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--devices", list]);
        let o = pinstream(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{list}: {}", common::stderr(&o));
        assert!(
            common::stderr(&o).contains(needle),
            "{list}: {}",
            common::stderr(&o)
        );
    }
    let mut args = base.to_vec();
    args.extend(["--devices", "0,1", "--device", "0"]);
    let o = pinstream(&args, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
}

#[test]
fn demo_over_two_devices_checks_every_value_and_row() {
    if skipped() {
        return;
    }
    let o = pinstream(
        &["demo", "--size", "64MiB", "--devices", "all", "--json"],
        &[],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["devices"].as_array().unwrap().len(), 2);
    for w in rep["workloads"].as_array().unwrap() {
        assert_eq!(w["mismatches"], 0, "{}", w["name"]);
        assert!(w["checked"].as_u64().unwrap() > 0);
        // The second device reads the region through its own registration, its VRAM cost
        // measured there (PoCL has no counter: it says so).
        let regs = w["registrations"].as_array().unwrap();
        assert_eq!(regs.len(), 1, "{}", w["name"]);
        assert!(regs[0]["device"].as_str().unwrap().starts_with("1 ("));
        assert!(
            regs[0]["vram"].get("unknown").is_some() || regs[0]["vram"].get("measured").is_some()
        );
        let shares = w["stream"]["devices"].as_array().unwrap();
        assert_eq!(shares.len(), 2, "{}", w["name"]);
        let blocks: u64 = shares.iter().map(|d| d["blocks"].as_u64().unwrap()).sum();
        assert_eq!(blocks, w["stream"]["blocks"].as_u64().unwrap());
    }
}

#[test]
fn compare_over_two_devices_reports_each_devices_streams() {
    if skipped() {
        return;
    }
    let o = pinstream(
        &[
            "compare",
            "--size",
            "64MiB",
            "--devices",
            "all",
            "--sizes",
            "1MiB",
            "--repeat",
            "1",
            "--point-repeats",
            "1",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["devices"].as_array().unwrap().len(), 2);
    for key in ["in_place_devices", "gemv_devices"] {
        let repeats = rep["opencl"][key].as_array().unwrap();
        assert_eq!(repeats.len(), 1, "{key}");
        assert_eq!(repeats[0].as_array().unwrap().len(), 2, "{key}");
    }
}

#[test]
fn bench_over_two_devices_gives_each_device_the_total_and_the_scaling() {
    if skipped() {
        return;
    }
    let o = pinstream(
        &[
            "bench",
            "devices",
            "--devices",
            "all",
            "--sizes",
            "64KiB,1MiB",
            "--repeat",
            "1",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rep["devices"].as_array().unwrap().len(), 2);
    let cl = &rep["apis"][0];
    assert_eq!(cl["api"], "opencl");
    assert!(cl["error"].is_null(), "{}", cl["error"]);
    let points = cl["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        assert_eq!(p["per_device"].as_array().unwrap().len(), 2);
        for dir in ["h2d", "d2h", "both"] {
            let (alone, total) = (
                p["alone"][dir].as_f64().unwrap(),
                p["total"][dir].as_f64().unwrap(),
            );
            assert!(alone > 0.0 && total > 0.0, "{dir}: {p}");
            let scaling = p["scaling"][dir].as_f64().unwrap();
            assert!(
                (scaling - total / alone).abs() < 1e-9 * scaling.max(1.0),
                "{dir}: {p}"
            );
            // The total is the bytes of both devices over the slower one's time: never more
            // than the two devices' own rates added.
            let sum: f64 = p["per_device"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d[dir].as_f64().unwrap())
                .sum();
            assert!(
                total <= sum * 1.000001,
                "{dir}: total {total} above the devices' sum {sum}"
            );
        }
    }
    // PoCL is not NVIDIA's driver: CUDA says why it is not there (the default build has the
    // cuda feature; without it, that it was not built).
    assert!(rep["cuda_unavailable"]
        .as_str()
        .is_some_and(|w| !w.is_empty()));

    let o = pinstream(
        &[
            "bench",
            "devices",
            "--devices",
            "0,1",
            "--sizes",
            "64KiB",
            "--repeat",
            "1",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for col in ["alone", "dev 0", "dev 1", "total", "scaling"] {
        assert!(text.contains(col), "no `{col}` column:\n{text}");
    }
}

#[test]
fn bench_over_devices_refuses_what_takes_one_device() {
    if skipped() {
        return;
    }
    for (extra, says) in [
        (&["--latency"][..], "unexpected argument '--latency'"),
        (
            &["--api", "cuda"][..],
            "invalid value 'cuda' for '--api <API>'",
        ),
    ] {
        let mut args = vec!["bench", "devices", "--devices", "all", "--sizes", "64KiB"];
        args.extend_from_slice(extra);
        let o = pinstream(&args, &[]);
        assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
        assert!(common::stderr(&o).contains(says), "{}", common::stderr(&o));
    }
}

/// `--kernel-timeout` over several devices names the device whose kernel never ended (and
/// its block), not only a block number.
#[test]
fn a_kernel_timeout_names_the_device_that_hangs() {
    if skipped() {
        return;
    }
    const SPIN_FROM: &str = r#"
__kernel void spin(__global float* x, ulong n, ulong block, ulong offset, uint from) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float v = x[i];
    for (uint k = 0; k < 1 || block >= from; k++) v = v * 0.999f + 0.001f;
    x[i] = v;
}
"#;
    let d = dir("timeout");
    let k = d.join("spin.cl");
    std::fs::write(&k, SPIN_FROM).unwrap();
    // Four blocks: device 0 streams blocks 0 and 1, device 1 spins forever on block 2.
    let o = pinstream(
        &[
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
            "from=2",
            "--devices",
            "0,1",
            "--kernel-timeout",
            "5",
        ],
        &[],
    );
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(
        err.contains("no block completed within --kernel-timeout 5 s (waiting for the kernel of "),
        "{err}"
    );
    // Device 0 may be named too where the spinning kernel starved it of the CPU (PoCL's
    // devices share the host's cores): it had not completed its blocks either.
    assert!(err.contains("block 2 on device 1 ("), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
