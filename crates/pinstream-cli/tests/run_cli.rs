//! `pinstream run` and `pinstream demo` through the real binary: results, and every bad
//! input answered with a clear error, a non-zero exit code and no output file left behind.

use std::path::{Path, PathBuf};
mod common;
#[path = "run_cli/demo.rs"]
mod demo;

use common::pinstream;

/// A fresh folder for one test.
fn dir(name: &str) -> PathBuf {
    common::fresh_dir("run", name)
}

fn write_f32(path: &Path, n: usize) {
    let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor + (float)block;
}
"#;

const AXPY: &str = r#"
__kernel void axpy(__global const float* x, __global const float* y, __global float* out,
                   ulong n, ulong block, ulong offset, float a) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = a * x[i] + y[i];
}
"#;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn run_in_place_writes_the_result_and_a_trace() {
    let d = dir("inplace");
    let (k, input, out, trace) = (
        d.join("k.cl"),
        d.join("in.bin"),
        d.join("out.bin"),
        d.join("trace.json"),
    );
    std::fs::write(&k, SCALE).unwrap();
    write_f32(&input, 100_003);
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        s(&input),
        "--output",
        s(&out),
        "--arg",
        "factor=2",
        "--block",
        "64KiB",
        "--vram-budget",
        "1MiB",
        "--compare-sequential",
        "--trace",
        s(&trace),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["in_place"], true);
    assert!(v["stream"]["pool_bytes"].as_u64().unwrap() <= 1 << 20);
    assert_eq!(v["stream"]["blocks"], 7);
    assert!(v["sequential"]["totals"]["device_wall_s"].as_f64().unwrap() > 0.0);
    let got = std::fs::read(&out).unwrap();
    let block_elems = (64 << 10) / 4;
    for (i, c) in got.chunks(4).enumerate() {
        let want = i as f32 * 2.0 + (i / block_elems) as f32;
        assert_eq!(
            f32::from_le_bytes(c.try_into().unwrap()),
            want,
            "element {i}"
        );
    }
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let names: Vec<_> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .collect();
    assert_eq!(
        names.len(),
        4,
        "three queues for the stream, one for the baseline"
    );
}

#[test]
fn run_out_of_place_with_two_inputs_and_elements() {
    let d = dir("axpy");
    let (k, x, y, out) = (
        d.join("k.cl"),
        d.join("x.bin"),
        d.join("y.bin"),
        d.join("out.bin"),
    );
    std::fs::write(&k, AXPY).unwrap();
    write_f32(&x, 5000);
    write_f32(&y, 6000);
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "axpy",
        "--input",
        s(&x),
        "--input",
        s(&y),
        "--elements",
        "4999",
        "--output",
        s(&out),
        "--arg",
        "a=3",
        "--block",
        "4000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 4999 * 4);
    for (i, c) in got.chunks(4).enumerate() {
        assert_eq!(
            f32::from_le_bytes(c.try_into().unwrap()),
            4.0 * i as f32,
            "element {i}"
        );
    }
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("out of place") && text.contains("overlap efficiency"),
        "{text}"
    );
}

#[test]
fn run_synthetic_needs_no_file() {
    let d = dir("synth");
    let k = d.join("k.cl");
    std::fs::write(&k, SCALE).unwrap();
    let o = pinstream(&[
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--synthetic",
        "3MiB",
        "--arg",
        "factor=1.5",
        "--block",
        "1MiB",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("result not written"));
}

/// Runs a failing case: non-zero exit, every needle in stderr, and no output or temporary
/// file left in the folder.
fn refused(d: &Path, args: &[&str], needles: &[&str]) {
    let out = d.join("out.bin");
    let mut all = args.to_vec();
    all.extend(["--output", s(&out)]);
    let o = pinstream(&all);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            let n = n.to_string_lossy();
            n.starts_with("out") || n.contains("pinstream-tmp")
        })
        .collect();
    assert!(left.is_empty(), "{args:?} left {left:?}");
}

#[test]
fn bad_inputs_to_run() {
    let d = dir("bad");
    let (k, input, odd) = (d.join("k.cl"), d.join("in.bin"), d.join("odd.bin"));
    std::fs::write(&k, SCALE).unwrap();
    write_f32(&input, 1000);
    std::fs::write(&odd, [0u8; 4001]).unwrap();
    let broken = d.join("broken.cl");
    std::fs::write(
        &broken,
        "__kernel void scale(__global float* x) {\n  x[0] = undefined_name;\n}\n",
    )
    .unwrap();
    let (k, input, odd, broken) = (s(&k), s(&input), s(&odd), s(&broken));
    // Build failure: the compiler's log with line numbers.
    refused(
        &d,
        &[
            "run", "--kernel", broken, "--entry", "scale", "--input", input,
        ],
        &["does not build", "undefined_name", ":2:"],
    );
    refused(
        &d,
        &[
            "run",
            "--kernel",
            "/nonexistent.cl",
            "--entry",
            "scale",
            "--input",
            input,
        ],
        &["cannot read kernel file"],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scal", "--input", input, "--arg", "factor=1",
        ],
        &["has no kernel `scal`", "it defines scale", "--entry"],
    );
    refused(
        &d,
        &["run", "--kernel", k, "--entry", "scale", "--input", input],
        &[
            "argument `factor` (float) needs a value",
            "--arg factor=VALUE",
        ],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "fctor=1",
        ],
        &["no user argument `fctor`", "float factor"],
    );
    refused(
        &d,
        &[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--input",
            input,
            "--arg",
            "factor=big",
        ],
        &["`big` is not a valid float"],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "factor",
        ],
        &["is not NAME=VALUE"],
    );
    refused(
        &d,
        &[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--input",
            "/nonexistent.bin",
            "--arg",
            "factor=1",
        ],
        &["cannot open /nonexistent.bin"],
    );
    refused(
        &d,
        &[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--input",
            input,
            "--elements",
            "2000",
            "--arg",
            "factor=1",
        ],
        &["shorter than the 2000 f32 elements stated with --elements"],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", odd, "--arg", "factor=1",
        ],
        &["not a positive multiple of the f32 element size"],
    );
    refused(
        &d,
        &[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--input",
            input,
            "--arg",
            "factor=1",
            "--block",
            "1KiB",
            "--vram-budget",
            "1500",
            "--check-bounds",
            "off",
        ],
        &[
            "VRAM budget",
            "holds",
            "raise --vram-budget to at least 2 KiB",
        ],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "factor=1",
            "--block", "64TiB",
        ],
        &["max allocation", "--block"],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "factor=1",
            "--dtype", "f17",
        ],
        &["unknown dtype `f17`"],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--arg", "factor=1",
        ],
        &["no input"],
    );
    let axpy = d.join("axpy.cl");
    std::fs::write(&axpy, AXPY).unwrap();
    refused(
        &d,
        &[
            "run",
            "--kernel",
            s(&axpy),
            "--entry",
            "axpy",
            "--input",
            input,
            "--arg",
            "a=1",
        ],
        &["takes 3 buffer argument(s)", "binds 2", "in that order"],
    );
    std::fs::remove_file(&axpy).unwrap();
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "factor=1",
            "--reduce", "2",
        ],
        &[
            "runs in place",
            "--reduce and --out-dtype need a kernel with one more buffer",
        ],
    );
    refused(
        &d,
        &[
            "run", "--kernel", k, "--entry", "scale", "--input", input, "--arg", "factor=1",
            "--local", "0",
        ],
        &["--local"],
    );
    let narrow = d.join("narrow.cl");
    std::fs::write(&narrow, "__kernel void inc(__global uchar* x, int n, int block, int offset) { int i = get_global_id(0); if (i < n) x[i] += 1; }").unwrap();
    refused(
        &d,
        &[
            "run",
            "--kernel",
            s(&narrow),
            "--entry",
            "inc",
            "--synthetic",
            "2112MiB",
            "--dtype",
            "u8",
            "--block",
            "64MiB",
        ],
        &["argument `offset` (int) cannot hold", "declare it ulong"],
    );
    std::fs::remove_file(&narrow).unwrap();
}

/// Without the `cuda` feature, `run --api cuda` says how to get it (with it, `tests/cuda.rs`
/// covers `--api cuda`).
#[cfg(not(feature = "cuda"))]
#[test]
fn run_api_cuda_without_the_feature_names_the_build() {
    let d = dir("nocuda");
    let k = d.join("scale.cu");
    std::fs::write(&k, "extern \"C\" __global__ void scale(float* x) {}").unwrap();
    let o = pinstream(&[
        "run",
        "--api",
        "cuda",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--synthetic",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--api cuda: this pinstream was built without the `cuda` cargo feature"),
        "{err}"
    );
}

/// Kernels written for plain OpenCL run unchanged: the SDK's VectorAdd takes its buffers and
/// one trailing integer, the element count (issue 10, section 5).
#[test]
fn an_sdk_style_kernel_with_one_count_runs_unchanged() {
    let d = dir("sdk");
    let (k, a, b, out) = (
        d.join("VectorAdd.cl"),
        d.join("a.bin"),
        d.join("b.bin"),
        d.join("c.bin"),
    );
    std::fs::write(
        &k,
        r#"
__kernel void VectorAdd(__global const float* a, __global const float* b, __global float* c, int iNumElements)
{
    int iGID = get_global_id(0);
    if (iGID >= iNumElements) return;
    c[iGID] = a[iGID] + b[iGID];
}
"#,
    )
    .unwrap();
    let n = 100_003;
    let av: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let bv: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25).collect();
    common::write_le(&a, &av, f32::to_le_bytes);
    common::write_le(&b, &bv, f32::to_le_bytes);
    // c = a + b (+ the block index, for the kernel that takes it), element by element.
    let check = |entry: &str, per_block: f32| {
        let o = pinstream(&[
            "run",
            "--kernel",
            s(&k),
            "--entry",
            entry,
            "--input",
            s(&a),
            "--input",
            s(&b),
            "--output",
            s(&out),
            "--block",
            "64KiB",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = std::fs::read(&out).unwrap();
        assert_eq!(got.len(), n * 4);
        for (i, c) in got.chunks(4).enumerate() {
            let want = av[i] + bv[i] + per_block * (i / ((64 << 10) / 4)) as f32;
            let got = f32::from_le_bytes(c.try_into().unwrap());
            assert_eq!(got, want, "{entry}: element {i}");
        }
    };
    check("VectorAdd", 0.0);
    // Two trailing integers: the count and the block index.
    std::fs::write(
        &k,
        "__kernel void tag(__global const float* a, __global const float* b, __global float* c, uint n, uint block) { uint i = get_global_id(0); if (i < n) c[i] = a[i] + b[i] + (float)block; }",
    )
    .unwrap();
    check("tag", 1.0);
}

/// An empty POCL_CACHE_DIR makes PoCL abort the process: `run` refuses it before OpenCL is
/// loaded, exit 2, as `devices` does.
#[test]
fn run_refuses_an_empty_pocl_cache_dir_before_loading_opencl() {
    let d = dir("emptycache");
    let k = d.join("scale.cl");
    std::fs::write(&k, "__kernel void scale(__global float* x) {}").unwrap();
    let o = std::process::Command::new(common::bin())
        .args([
            "run",
            "--kernel",
            s(&k),
            "--entry",
            "scale",
            "--synthetic",
            "1MiB",
        ])
        .env("POCL_CACHE_DIR", "")
        .output()
        .unwrap();
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("POCL_CACHE_DIR is set but empty"), "{err}");
}
