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
            .args(cuda_run_args(&k, "scale"))
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

/// A host-table test's folder: the kernel `rows.cu`, a table of [`ROWS`] rows of [`DIM`]
/// floats (`table.bin`, `t`), 100,000 row ids (`ids.bin`, `id`), and the output's path.
struct HostTable {
    k: PathBuf,
    ids: PathBuf,
    table: PathBuf,
    out: PathBuf,
    t: Vec<f32>,
    id: Vec<u32>,
}

const ROWS: usize = 4096;
const DIM: usize = 16;

/// The files of a host-table test in the folder `name`, the kernel's source `src`.
fn host_table(name: &str, src: &str) -> HostTable {
    let d = dir(name);
    let h = HostTable {
        k: d.join("rows.cu"),
        ids: d.join("ids.bin"),
        table: d.join("table.bin"),
        out: d.join("out.bin"),
        t: (0..ROWS * DIM).map(|i| (i % 97) as f32).collect(),
        id: (0..100_000u32).map(|i| (i * 7919) % ROWS as u32).collect(),
    };
    std::fs::write(&h.k, src).unwrap();
    common::write_le(&h.table, &h.t, f32::to_le_bytes);
    common::write_le(&h.ids, &h.id, u32::to_le_bytes);
    h
}

/// `run --api cuda` of `row_sums` over `h` (its table as `--host-table table=…`), with `extra`.
fn run_row_sums(h: &HostTable, extra: &[&str]) -> std::process::Output {
    let flag = format!("table={}", s(&h.table));
    let mut args = common::row_sums_flags(s(&h.ids), s(&h.out));
    args.extend(extra);
    args.extend(["--host-table", &flag]);
    run_cuda(&h.k, "row_sums", &args)
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
    let h = host_table("host-table", ROW_SUMS_CU);
    let o = run_row_sums(&h, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = std::fs::read(&h.out).unwrap();
    for (c, &i) in got.chunks(4).zip(&h.id) {
        let want: f32 = h.t[i as usize * DIM..(i as usize + 1) * DIM].iter().sum();
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
    let h = host_table("host-table-over", ROW_SUMS_OVER_CU);
    let r = format!("rows={ROWS}");
    let extra = [
        "--block",
        "64KiB",
        "--arg",
        &r,
        "--arg",
        "bad=2",
        "--check-bounds",
        "on",
    ];
    let o = run_row_sums(&h, &extra);
    let table_bytes = ROWS * DIM * 4;
    common::stopped_writing_past_host_table(&o, None, table_bytes, &h.out, "");
}
