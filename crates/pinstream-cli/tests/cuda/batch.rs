//! The batch copies (`BatchApi`) through CUDA: the checks the OpenCL and Vulkan tests run
//! (`crates/pinstream/tests/batch/checks.rs`), on the GPU: random pieces both ways, calls cut
//! into many batches (`cuMemcpyBatchAsync` per batch where the driver has it, else a copy per
//! piece), the refusals, and zero-copy's refusal as data.

use super::gpu;
use pinstream::backend::cuda::Cuda;
use pinstream::gather::{BatchApi, GatherOptions};

#[path = "../../../pinstream/tests/batch/checks.rs"]
mod checks;

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn cuda_moves_random_pieces_both_ways() {
    let g = gpu();
    let small = GatherOptions {
        rows: 8,
        ..GatherOptions::for_capacity(4096)
    };
    for seed in 1..4 {
        checks::round_trip::<Cuda>(&g, &GatherOptions::default(), seed, 300, 5000);
        checks::round_trip::<Cuda>(&g, &small, seed, 60, 9000);
    }
    let batch = Cuda::batch(&g, &small).unwrap();
    assert!(Cuda::batch_way(&batch).contains("cuMemcpy"));
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn cuda_refuses_as_the_gather_does() {
    checks::refusals::<Cuda>(&gpu());
}

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn cuda_says_why_it_has_no_zero_copy() {
    checks::zero_copy::<Cuda>(&gpu());
}
