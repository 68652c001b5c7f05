//! The CUDA backend and engine. Tests that need a CUDA driver and an NVIDIA GPU are
//! `#[ignore]`d, so a machine without them reports them as ignored (skipped), never as
//! passed; the GPU check runs them with `--ignored`, where a missing driver fails them.
#![cfg(feature = "cuda")]

mod common;

use common::{pinstream, stderr};
use pinstream::backend::cuda::{unavailable_reason, CudaPinning, Gpu};
use pinstream::engine::cuda::{run_cuda, CudaKernels, CudaWork};
use pinstream::engine::kernels::mix_u32_ref;
use pinstream::engine::{DType, StreamError, StreamOptions, WorkSize};

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
                "lists no device",
                "did not start",
                "update the NVIDIA driver",
            ];
            assert!(fixes.iter().any(|f| why.contains(f)), "{why}");
            assert!(Gpu::open(0).is_err());
        }
    }
}

fn gpu() -> Gpu {
    if let Some(why) = unavailable_reason() {
        panic!("CUDA is not usable here: {why}");
    }
    Gpu::open(0).expect("CUDA device 0 opens")
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
        let (lo, hi) = (host.span(0..n / 2), host.span_mut(n / 2..n));
        // SAFETY: `host` outlives the stream's work and is not touched until it is waited for.
        unsafe {
            let up = s.upload(&dev, 0, lo, &[]).unwrap();
            s.download(hi, &dev, 0, &[&up]).unwrap().wait().unwrap();
        }
        assert!(host.as_slice()[n / 2..] == want[..], "{how}: data changed");
    }
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn streams_in_place_through_a_small_budget_and_checks_every_element() {
    let g = gpu();
    let k = CudaKernels::build(&g).unwrap();
    let n = 64 << 20;
    let mut x = g.pinned(n, CudaPinning::Register).unwrap();
    pinstream::par::fill_with::<u32>(vec![x.as_mut_slice()], |i| i as u32 ^ 0xabcd);
    let r = run_cuda(
        &g,
        &k,
        CudaWork::InPlace { data: &mut x },
        &opts(4 << 20, 16 << 20),
        &|_, _| {},
    )
    .unwrap();
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
fn a_budget_too_small_is_refused_with_the_fix() {
    let g = gpu();
    let k = CudaKernels::build(&g).unwrap();
    let mut x = g.pinned(16 << 20, CudaPinning::HostAlloc).unwrap();
    let e = run_cuda(
        &g,
        &k,
        CudaWork::InPlace { data: &mut x },
        &opts(4 << 20, 4 << 20),
        &|_, _| {},
    )
    .unwrap_err();
    assert!(matches!(e, StreamError::Budget(_)), "{e}");
    assert!(e.to_string().contains("raise --vram-budget"), "{e}");
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
    assert_eq!(ratios.len(), 2 * 3 + 2);
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
