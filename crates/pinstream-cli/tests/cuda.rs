//! The CUDA backend, the engine through CUDA, and `pinstream run --api cuda`. Tests that need a
//! CUDA driver and an NVIDIA GPU are `#[ignore]`d, so a machine without them reports them as
//! ignored (skipped), never as passed; the GPU check runs them with `--include-ignored`, where
//! a missing driver fails them. What runs without a GPU: the reasons CUDA is missing, and
//! `run --api cuda`'s argument handling.
#![cfg(feature = "cuda")]

#[path = "cuda/batch.rs"]
mod batch;
#[path = "cuda/commands.rs"]
mod commands;
mod common;
#[path = "cuda/engine.rs"]
mod engine;
#[path = "cuda/run.rs"]
mod run;

use common::{pinstream, stderr};
use pinstream::backend::cuda::{unavailable_reason, CudaKernel, CudaPinning, Gpu};
use pinstream::engine::{run, DType, Job, StreamError, StreamOptions, WorkSize};
use pinstream_lab::kernels::{gemv_row_ref, mix_u32_ref, value, GEMV_F16_CUDA, MIX_U32_CUDA};
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

/// The arguments `run --api cuda --kernel KERNEL --entry ENTRY`.
fn cuda_run_args<'a>(kernel: &'a Path, entry: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--api",
        "cuda",
        "--kernel",
        s(kernel),
        "--entry",
        entry,
    ]
}

/// `pinstream run --api cuda --kernel KERNEL --entry ENTRY` with `rest`.
fn run_cuda(kernel: &Path, entry: &str, rest: &[&str]) -> std::process::Output {
    let mut args = cuda_run_args(kernel, entry);
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

fn read_f32(p: &Path) -> Vec<f32> {
    bytemuck::cast_slice(&std::fs::read(p).unwrap()).to_vec()
}

fn write_f32(p: &Path, n: usize, k: f32) {
    let v: Vec<f32> = (0..n).map(|i| i as f32 * k).collect();
    std::fs::write(p, bytemuck::cast_slice(&v)).unwrap();
}
