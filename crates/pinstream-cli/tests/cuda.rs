//! The CUDA backend, the engine through CUDA, and `pinstream run --api cuda`. Tests that need a
//! CUDA driver and an NVIDIA GPU are `#[ignore]`d, so a machine without them reports them as
//! ignored (skipped), never as passed; the GPU check runs them with `--include-ignored`, where
//! a missing driver fails them. What runs without a GPU: the reasons CUDA is missing, and
//! `run --api cuda`'s argument handling.
#![cfg(feature = "cuda")]

mod common;

use common::{pinstream, stderr};
use pinstream::backend::cuda::{unavailable_reason, CudaKernel, CudaPinning, Gpu};
use pinstream::engine::kernels::{gemv_row_ref, mix_u32_ref, value, GEMV_F16_CUDA, MIX_U32_CUDA};
use pinstream::engine::{run, DType, Job, StreamError, StreamOptions, WorkSize};
use std::path::{Path, PathBuf};

/// Runs everywhere: without CUDA the reason names the fix, and nothing panics (cudarc
/// panics when a library is missing; the backend checks first).
#[test]
fn a_missing_driver_is_reported_with_the_fix() {
    match unavailable_reason() {
        None => assert!(!pinstream::backend::cuda::devices().unwrap().is_empty()),
        Some(why) => {
            // Every reason names what to do: a path, a driver update or a rebuild.
            let fixes = [
                "LD_LIBRARY_PATH",
                "repair the driver",
                "add its bin folder to PATH",
                "lists no device",
                "did not start",
                "update the NVIDIA driver",
            ];
            assert!(fixes.iter().any(|f| why.contains(f)), "{why}");
            assert!(Gpu::open(0).is_err());
        }
    }
}

/// Runs everywhere: where CUDA is missing, `devices --api cuda` and `doctor --api cuda` say
/// why, with the fix, exit 1 as `run --api cuda` does, and print and save nothing.
#[test]
fn devices_and_doctor_api_cuda_say_why_cuda_is_missing() {
    let Some(why) = unavailable_reason() else {
        return; // CUDA is here: the ignored tests below cover the GPU path
    };
    let d = dir("missing-doctor");
    let saved = d.join("doctor.json");
    for args in [
        vec!["devices", "--api", "cuda"],
        vec!["devices", "--api", "cuda", "--json"],
        vec![
            "doctor",
            "--api",
            "cuda",
            "--size",
            "8MiB",
            "--save",
            s(&saved),
        ],
    ] {
        let o = pinstream(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("--api cuda: CUDA is not usable here:") && err.contains(&why),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    assert!(!saved.exists());
}

/// A fresh folder with the CUDA kernels of these tests.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pinstream-cuda-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("scale.cu"), SCALE_CU).unwrap();
    std::fs::write(d.join("axpy.cu"), AXPY_CU).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `pinstream run --api cuda --kernel KERNEL --entry ENTRY` with `rest`.
fn run_cuda(kernel: &Path, entry: &str, rest: &[&str]) -> std::process::Output {
    let mut args = vec![
        "run",
        "--api",
        "cuda",
        "--kernel",
        s(kernel),
        "--entry",
        entry,
    ];
    args.extend(rest);
    pinstream(&args)
}

const SCALE_CU: &str = r#"
extern "C" __global__ void scale(float* x, unsigned long long n, unsigned long long block,
                                 unsigned long long offset, float factor) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * factor + (float)block;
}
"#;

const AXPY_CU: &str = r#"
extern "C" {
__global__ void axpy(const float* x, const float* y, float* out, unsigned long long n,
                     unsigned long long block, unsigned long long offset, float a) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
}
__global__ void mangled(float* x, unsigned long long n, unsigned long long b, unsigned long long o) {}
"#;

/// Runs everywhere: `--api` takes opencl, cuda or vulkan, and `--api cuda` refuses an OpenCL
/// strategy before anything else.
#[test]
fn run_api_cuda_checks_its_arguments() {
    let d = dir("args");
    let k = d.join("scale.cu");
    let o = pinstream(&[
        "run",
        "--api",
        "metal",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[possible values: opencl, cuda, vulkan]"),
        "{}",
        stderr(&o)
    );
    let o = run_cuda(
        &k,
        "scale",
        &[
            "--synthetic",
            "1MiB",
            "--arg",
            "factor=2",
            "--strategy",
            "register",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "--strategy does not apply with --api cuda: --strategy picks OpenCL strategies"
        ),
        "{}",
        stderr(&o)
    );
}

/// Runs everywhere: where CUDA is missing, `run --api cuda` says why, with the fix, exits 1
/// and writes nothing.
#[test]
fn run_api_cuda_says_why_cuda_is_missing() {
    let Some(why) = unavailable_reason() else {
        return; // CUDA is here: the ignored tests below cover the GPU path
    };
    let d = dir("missing");
    let (k, out) = (d.join("scale.cu"), d.join("out.bin"));
    let o = run_cuda(
        &k,
        "scale",
        &[
            "--synthetic",
            "1MiB",
            "--arg",
            "factor=2",
            "--output",
            s(&out),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--api cuda: CUDA is not usable here:"),
        "{err}"
    );
    assert!(err.contains(&why), "{err}");
    assert!(!out.exists());
}

fn gpu() -> Gpu {
    if let Some(why) = unavailable_reason() {
        panic!("CUDA is not usable here: {why}");
    }
    Gpu::open(0).expect("CUDA device 0 opens")
}

fn kernel(g: &Gpu, src: &str, name: &str) -> CudaKernel {
    g.build(src, "").unwrap().kernel(name).unwrap()
}

fn opts(block: usize, budget: u64) -> StreamOptions {
    StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: block,
        in_per_out: 1,
        slots: None,
        vram_budget: budget,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: pinstream::engine::BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn pinned_memory_round_trips_and_costs_no_vram() {
    let g = gpu();
    for how in [CudaPinning::HostAlloc, CudaPinning::Register] {
        let n = 1 << 30;
        let free_before = g.mem_info().unwrap().0;
        let mut host = g.pinned(n, how).unwrap();
        let free_after = g.mem_info().unwrap().0;
        assert!(
            free_before.saturating_sub(free_after) < 64 << 20,
            "{how}: pinning 1 GiB took {} bytes of VRAM",
            free_before - free_after
        );
        pinstream_cli::tools::random::fill_random(vec![host.as_mut_slice()], 99);
        let want = host.as_slice()[..n / 2].to_vec();
        let dev = g.alloc(n / 2).unwrap();
        let s = g.stream().unwrap();
        let up = host.upload(&s, 0..n / 2, &dev, 0, &[]).unwrap();
        // The download's event is dropped unwaited: the memory's in-flight guard must wait
        // for it before `as_slice` reads the bytes.
        drop(host.download(&s, &dev, 0, n / 2..n, &[&up]).unwrap());
        drop(up);
        assert!(host.as_slice()[n / 2..] == want[..], "{how}: data changed");
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn streams_in_place_through_a_small_budget_and_checks_every_element() {
    let g = gpu();
    let mut k = kernel(&g, MIX_U32_CUDA, "mix_u32");
    let n = 64 << 20;
    let mut x = g.pinned(n, CudaPinning::Register).unwrap();
    pinstream::par::fill_with::<u32>(vec![x.as_mut_slice()], |i| i as u32 ^ 0xabcd);
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let r = run(&g, &mut k, job, &opts(4 << 20, 16 << 20), &|_, _| {}).unwrap();
    assert_eq!(r.blocks, 16);
    assert_eq!(r.slots, 4);
    assert!(r.pool_bytes <= 16 << 20);
    assert_eq!(r.records.len(), 3 * 16);
    assert!(r.totals.upload.bytes == n as u64 && r.totals.download.bytes == n as u64);
    let v: &[u32] = bytemuck::cast_slice(x.as_slice());
    let bad = v
        .iter()
        .enumerate()
        .filter(|(i, &v)| v != mix_u32_ref(*i as u32 ^ 0xabcd, *i as u64))
        .count();
    assert_eq!(bad, 0);
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn gemv_through_the_engine_matches_the_cpu() {
    let g = gpu();
    let mut k = kernel(&g, GEMV_F16_CUDA, "gemv_f16");
    let (rows, cols) = (1000usize, 512usize);
    let mut w = g.pinned(rows * cols * 2, CudaPinning::HostAlloc).unwrap();
    for (i, v) in bytemuck::cast_slice_mut::<u8, half::f16>(w.as_mut_slice())
        .iter_mut()
        .enumerate()
    {
        *v = half::f16::from_f32((value(3, i as u64) % 2001) as f32 / 1000.0 - 1.0);
    }
    let mut x = g.pinned(cols * 4, CudaPinning::HostAlloc).unwrap();
    for (i, v) in bytemuck::cast_slice_mut::<u8, f32>(x.as_mut_slice())
        .iter_mut()
        .enumerate()
    {
        *v = (value(4, i as u64) % 1000) as f32 / 500.0 - 1.0;
    }
    let mut y = g.pinned(rows * 4, CudaPinning::HostAlloc).unwrap();
    let o = StreamOptions {
        dtype: DType::F16,
        out_dtype: DType::F32,
        in_per_out: cols,
        work: WorkSize {
            per_output: true,
            items_per: 256,
            local: Some(256),
        },
        ..opts(64 * cols * 2, 64 << 20)
    };
    let job = Job {
        inputs: vec![&w],
        output: Some(&mut y),
        residents: vec![&x],
        args: vec![("cols".into(), cols.to_string())],
        ..Job::default()
    };
    let rep = run(&g, &mut k, job, &o, &|_, _| {}).unwrap();
    assert_eq!(rep.blocks, 16);
    let wv: &[half::f16] = bytemuck::cast_slice(w.as_slice());
    let xv: &[f32] = bytemuck::cast_slice(x.as_slice());
    for (r, got) in bytemuck::cast_slice::<u8, f32>(y.as_slice())
        .iter()
        .enumerate()
    {
        let (want, scale) = gemv_row_ref(&wv[r * cols..(r + 1) * cols], xv);
        assert!(
            (*got as f64 - want).abs() <= 1e-5 * scale + 1e-6,
            "row {r}: {got} vs {want}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn a_budget_too_small_is_refused_with_the_fix() {
    let g = gpu();
    let mut k = kernel(&g, MIX_U32_CUDA, "mix_u32");
    let mut x = g.pinned(16 << 20, CudaPinning::HostAlloc).unwrap();
    let job = Job {
        in_place: Some(&mut x),
        ..Job::default()
    };
    let e = run(&g, &mut k, job, &opts(4 << 20, 4 << 20), &|_, _| {}).unwrap_err();
    assert!(matches!(e, StreamError::Budget(_)), "{e}");
    let e = pinstream_cli::advice::stream_error(&e, pinstream_cli::advice::Flags::RUN);
    assert!(e.contains("raise --vram-budget"), "{e}");
}

fn read_f32(p: &Path) -> Vec<f32> {
    bytemuck::cast_slice(&std::fs::read(p).unwrap()).to_vec()
}

fn write_f32(p: &Path, n: usize, k: f32) {
    let v: Vec<f32> = (0..n).map(|i| i as f32 * k).collect();
    std::fs::write(p, bytemuck::cast_slice(&v)).unwrap();
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn run_api_cuda_streams_a_user_kernel_in_place_and_out_of_place() {
    let d = dir("run");
    let (x, y, out) = (d.join("x.bin"), d.join("y.bin"), d.join("out.bin"));
    write_f32(&x, 1_000_003, 1.0);
    write_f32(&y, 1_000_003, 0.5);
    let k = d.join("scale.cu");
    let o = run_cuda(
        &k,
        "scale",
        &[
            "--input",
            s(&x),
            "--arg",
            "factor=2",
            "--block",
            "1MiB",
            "--vram-budget",
            "8MiB",
            "--output",
            s(&out),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["in_place"], true);
    assert_eq!(v["strategy"], "cuda-register");
    let block_elems = (1 << 20) / 4;
    for (i, got) in read_f32(&out).iter().enumerate() {
        let want = i as f32 * 2.0 + (i / block_elems) as f32;
        assert_eq!(*got, want, "element {i}");
    }
    let k = d.join("axpy.cu");
    let o = run_cuda(
        &k,
        "axpy",
        &[
            "--input",
            s(&x),
            "--input",
            s(&y),
            "--arg",
            "a=3",
            "--block",
            "1MiB",
            "--output",
            s(&out),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for (i, got) in read_f32(&out).iter().enumerate() {
        assert_eq!(*got, 3.0 * i as f32 + 0.5 * i as f32, "element {i}");
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn run_api_cuda_names_the_fix_for_bad_kernels_and_budgets() {
    let d = dir("bad");
    let (k, axpy, broken) = (d.join("scale.cu"), d.join("axpy.cu"), d.join("broken.cu"));
    std::fs::write(
        &broken,
        "extern \"C\" __global__ void scale(float* x) {\n  x[0] = undefined_name;\n}\n",
    )
    .unwrap();
    let refused = |args: &[&str], needles: &[&str]| {
        let mut all = vec!["run", "--api", "cuda", "--synthetic", "4MiB"];
        all.extend(args);
        let o = pinstream(&all);
        assert!(!o.status.success(), "{args:?} succeeded");
        for n in needles {
            assert!(
                stderr(&o).contains(n),
                "{args:?}: `{n}` not in {}",
                stderr(&o)
            );
        }
    };
    refused(
        &["--kernel", s(&broken), "--entry", "scale"],
        &["does not build", "undefined_name"],
    );
    refused(
        &["--kernel", s(&k), "--entry", "scal"],
        &["has no kernel `scal`", "it defines scale"],
    );
    refused(
        &["--kernel", s(&axpy), "--entry", "mangled"],
        &["not declared extern \"C\""],
    );
    refused(
        &["--kernel", s(&k), "--entry", "scale"],
        &[
            "argument `factor` (float) needs a value",
            "--arg factor=VALUE",
        ],
    );
    refused(
        &[
            "--kernel",
            s(&k),
            "--entry",
            "scale",
            "--arg",
            "factor=1",
            "--block",
            "1KiB",
            "--vram-budget",
            "1500",
        ],
        &["raise --vram-budget to at least 2 KiB", "--slots 1"],
    );
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn run_api_cuda_reports_injected_faults_like_a_driver() {
    let d = dir("fault");
    let (k, out) = (d.join("scale.cu"), d.join("out.bin"));
    // The N-th command of its kind on the device: launch 0 is the engine's warm-up, so block
    // 3's launch is launch 4 (a GPU has no bounds guard by default: no canary uploads).
    for (spec, needles) in [
        (
            "kernel:4",
            [
                "block 3 (kernel)",
                "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            ],
        ),
        (
            "upload:5",
            [
                "block 5 (upload)",
                "cuMemcpyHtoDAsync failed: CUDA_ERROR_OUT_OF_MEMORY",
            ],
        ),
        (
            "download:2",
            [
                "block 2 (download)",
                "cuMemcpyDtoHAsync failed: CUDA_ERROR_OUT_OF_MEMORY",
            ],
        ),
        (
            "alloc:2",
            [
                "allocating slot 2",
                "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY",
            ],
        ),
    ] {
        let o = std::process::Command::new(common::bin())
            .args([
                "run",
                "--api",
                "cuda",
                "--kernel",
                s(&k),
                "--entry",
                "scale",
            ])
            .args([
                "--synthetic",
                "8MiB",
                "--block",
                "1MiB",
                "--arg",
                "factor=1",
            ])
            .args(["--output", s(&out)])
            .env("PINSTREAM_INJECT_FAULT", spec)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{spec}: {}", stderr(&o));
        for n in needles {
            assert!(
                stderr(&o).contains(n),
                "{spec}: `{n}` not in {}",
                stderr(&o)
            );
        }
        assert!(!out.exists(), "{spec}: output written");
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn compare_measures_both_halves_on_the_gpu() {
    let o = pinstream(&[
        "compare",
        "--size",
        "256MiB",
        "--vram-budget",
        "128MiB",
        "--sizes",
        "1MiB,64MiB",
        "--repeat",
        "2",
        "--point-repeats",
        "4",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cuda"]["status"], "measured", "{}", v["cuda"]);
    let ratios = v["ratios"].as_array().unwrap();
    // Per block size H2D, D2H and both ways; the two streams; and the gather against CUDA's
    // per-piece loop and its batch call, and the zero-copy gather against CUDA's zero-copy
    // kernel, each direction.
    assert_eq!(ratios.len(), 2 * 3 + 2 + 2 * 3, "{ratios:?}");
    for dir in ["H2D", "D2H"] {
        for label in [
            "gather / CUDA per-piece loop",
            "gather / CUDA cuMemcpyBatchAsync",
            "zero-copy gather / CUDA zero-copy kernel",
        ] {
            let figure = format!("4096 x 4 KiB scattered {dir}: {label}");
            assert!(
                ratios.iter().any(|r| r["figure"] == figure.as_str()),
                "no {figure}"
            );
        }
    }
    for r in ratios {
        let (a, b) = (r["opencl"].as_f64().unwrap(), r["cuda"].as_f64().unwrap());
        assert!(a > 0.0 && b > 0.0, "{r}");
        assert_eq!(r["marked"].as_bool().unwrap(), a / b < 0.97, "{r}");
        assert!(r["paired"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(v["cuda"]["half"]["in_place"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["cuda"]["half"]["bench_passes"][1]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

/// `devices --api cuda`: every CUDA device with the fields every API reports, one default.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn devices_api_cuda_lists_the_gpus() {
    let o = pinstream(&["devices", "--api", "cuda", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["devices"].as_array().unwrap();
    assert!(!list.is_empty(), "{v}");
    for (i, d) in list.iter().enumerate() {
        assert_eq!(
            (d["api"].as_str(), d["index"].as_u64()),
            (Some("CUDA"), Some(i as u64))
        );
        assert!(d["name"].as_str().unwrap().contains("NVIDIA"), "{d}");
        assert!(d["pci_address"].as_str().unwrap().contains(':'), "{d}");
        assert!(d["memory"].as_u64().unwrap() > 1 << 30, "{d}");
        assert_eq!(d["kind"], "Gpu", "{d}");
    }
    assert_eq!(list.iter().filter(|d| d["default"] == true).count(), 1);
    let o = pinstream(&["devices", "--api", "cuda"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("CUDA devices:\n  device 0: "), "{text}");
    assert!(
        text.contains("(default)") && text.contains("PCI "),
        "{text}"
    );
}

/// `doctor --api cuda`: both of CUDA's ways to pin measured on the GPU, every byte checked,
/// and one recommended, in the report OpenCL's doctor gives.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn doctor_api_cuda_measures_both_pinnings_and_recommends_one() {
    let o = pinstream(&[
        "doctor", "--api", "cuda", "--size", "512MiB", "--block", "64MiB", "--repeat", "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["strategies"].as_array().unwrap();
    let names: Vec<&str> = list
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cuda-host-alloc", "cuda-register"]);
    for s in list {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["verified_bytes"], 512 << 20, "{s}");
        assert_eq!(s["mismatched_bytes"], 0, "{s}");
        assert!(s["pin_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["h2d"]["wall_gbps"].as_f64().unwrap() > 1.0, "{s}");
        assert!(s["both"]["events_gbps"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(v["device"]["api"], "CUDA", "{}", v["device"]);
    assert_eq!(v["auto_strategy"], "cuda-register");
    assert!(
        names.contains(&v["recommendation"].as_str().unwrap()),
        "{v}"
    );
    let o = pinstream(&[
        "doctor",
        "--api",
        "cuda",
        "--size",
        "128MiB",
        "--block",
        "64MiB",
        "--repeat",
        "1",
        "--strategy",
        "cuda-host-alloc",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows = text.lines().filter(|l| l.starts_with("cuda-"));
    assert_eq!(rows.count(), 1, "{text}");
    assert!(
        text.contains("128 MiB ok") && text.contains("recommendation: "),
        "{text}"
    );
    let o = pinstream(&["doctor", "--api", "cuda", "--strategy", "register"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown strategy `register`: choose all, auto or one of cuda-host-alloc, cuda-register"),
        "{}",
        stderr(&o)
    );
}

/// The embedding lookup through CUDA on `cudaHostAllocMapped` memory: the same kernel shape
/// as OpenCL's, every checked bag equal to the CPU's, and the table not copied into VRAM.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn the_embedding_demo_runs_through_cuda_on_mapped_memory() {
    let o = pinstream(&[
        "demo",
        "--workload",
        "embedding",
        "--api",
        "cuda",
        "--size",
        "1GiB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["api"], "CUDA", "{v}");
    assert_eq!(v["mechanism"], "cuda-host-alloc-mapped", "{v}");
    assert_eq!(v["mismatched_bags"], 0, "{v}");
    assert_eq!(v["checked_bags"], 512, "{v}");
    let cost = v["vram_cost"]
        .as_i64()
        .expect("NVML counts the H200's VRAM");
    assert!(
        cost < 64 << 20,
        "a 1 GiB mapped table cost {cost} bytes of VRAM"
    );
}

/// Mapped memory's buffer outlives the memory's own handle (the buffer holds it), and a
/// kernel's writes through it are the host's bytes.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn a_mapped_buffer_keeps_its_memory_alive() {
    use pinstream::host::HostApi;
    let g = gpu();
    let host = <pinstream::backend::cuda::Cuda as HostApi>::mapped(&g, 1 << 20, false).unwrap();
    assert!(host.is_mapped());
    let buffer = <pinstream::backend::cuda::Cuda as HostApi>::device_buffer(&host).unwrap();
    assert_eq!(buffer.len(), 1 << 20);
    drop(host);
    let s = g.stream().unwrap();
    let mut back = g.pinned(1 << 20, CudaPinning::HostAlloc).unwrap();
    drop(back.download(&s, &buffer, 0, 0..1 << 20, &[]).unwrap());
    assert!(
        back.as_slice().iter().all(|&b| b == 0),
        "cuMemHostAlloc memory is zeroed"
    );
    let plain = g.pinned(4096, CudaPinning::HostAlloc).unwrap();
    let refused = <pinstream::backend::cuda::Cuda as HostApi>::device_buffer(&plain);
    let e = refused.err().expect("memory that is not mapped is refused");
    assert!(e.to_string().contains("is not mapped"), "{e}");
}

/// `run --api cuda --host-table`: the kernel reads a table in `cudaHostAllocMapped` memory by
/// name, beside a streamed input, and its sums equal the CPU's.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn run_api_cuda_reads_a_host_table_in_place() {
    const ROW_SUMS_CU: &str = r#"
extern "C" __global__ void row_sums(const unsigned int* ids, float* out, const float* table,
                                    unsigned long long n, unsigned int dim) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
        for (unsigned int d = 0; d < dim; d++) s += table[(unsigned long long)ids[i] * dim + d];
        out[i] = s;
    }
}
"#;
    let d = dir("host-table");
    let (k, ids, table, out) = (
        d.join("rows.cu"),
        d.join("ids.bin"),
        d.join("table.bin"),
        d.join("out.bin"),
    );
    std::fs::write(&k, ROW_SUMS_CU).unwrap();
    let (rows, dim) = (4096usize, 16usize);
    let t: Vec<f32> = (0..rows * dim).map(|i| (i % 97) as f32).collect();
    let id: Vec<u32> = (0..100_000u32).map(|i| (i * 7919) % rows as u32).collect();
    std::fs::write(
        &table,
        t.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    std::fs::write(
        &ids,
        id.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    let flag = format!("table={}", s(&table));
    let o = run_cuda(
        &k,
        "row_sums",
        &[
            "--input",
            s(&ids),
            "--dtype",
            "u32",
            "--out-dtype",
            "f32",
            "--output",
            s(&out),
            "--arg",
            "dim=16",
            "--host-table",
            &flag,
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let got = std::fs::read(&out).unwrap();
    for (c, &i) in got.chunks(4).zip(&id) {
        let want: f32 = t[i as usize * dim..(i as usize + 1) * dim].iter().sum();
        assert_eq!(f32::from_le_bytes(c.try_into().unwrap()), want, "row {i}");
    }
}

/// `run --api cuda --host-table --check-bounds on`: a kernel that writes 64 bytes past its
/// table is stopped by the guard, which names the table and its flag, and no output is
/// written (issue 34: every buffer a kernel is bound to is guarded, on every API).
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn run_api_cuda_stops_a_kernel_writing_past_its_host_table() {
    const ROW_SUMS_OVER_CU: &str = r#"
extern "C" __global__ void row_sums(const unsigned int* ids, float* out, float* table,
                                    unsigned long long n, unsigned long long block,
                                    unsigned int dim, unsigned int rows, unsigned int bad) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
        for (unsigned int d = 0; d < dim; d++) s += table[(unsigned long long)ids[i] * dim + d];
        out[i] = s;
    }
    if (block == bad && i < 16) table[(unsigned long long)rows * dim + i] = 1.0f;
}
"#;
    let d = dir("host-table-over");
    let (k, ids, table, out) = (
        d.join("rows.cu"),
        d.join("ids.bin"),
        d.join("table.bin"),
        d.join("out.bin"),
    );
    std::fs::write(&k, ROW_SUMS_OVER_CU).unwrap();
    let (rows, dim) = (4096usize, 16usize);
    let t: Vec<u8> = (0..rows * dim)
        .flat_map(|i| ((i % 97) as f32).to_le_bytes())
        .collect();
    let id: Vec<u8> = (0..100_000u32)
        .flat_map(|i| ((i * 7919) % rows as u32).to_le_bytes())
        .collect();
    std::fs::write(&table, t).unwrap();
    std::fs::write(&ids, id).unwrap();
    let (flag, r) = (format!("table={}", s(&table)), format!("rows={rows}"));
    let o = run_cuda(
        &k,
        "row_sums",
        &[
            "--input",
            s(&ids),
            "--dtype",
            "u32",
            "--out-dtype",
            "f32",
            "--output",
            s(&out),
            "--block",
            "64KiB",
            "--arg",
            "dim=16",
            "--arg",
            &r,
            "--arg",
            "bad=2",
            "--check-bounds",
            "on",
            "--host-table",
            &flag,
        ],
    );
    common::stopped_writing_past_host_table(&o, None, rows * dim * 4, &out, "");
}
