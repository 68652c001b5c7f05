//! `pinstream run --api cuda` on the GPU: user kernels in place and out of place, the fixes
//! it names, injected faults, and host tables.

use super::*;

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
