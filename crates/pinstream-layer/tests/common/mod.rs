//! Shared by the integration tests: building C programs with the system compiler, running
//! them, and finding the layer library cargo built.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh directory for one test's files, under cargo's target tmpdir.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// The C source directory of this crate.
pub fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c")
}

/// Builds `out` in `dir` from `args` with the system C compiler; fails loudly without one.
pub fn cc_args(dir: &Path, out: &str, args: &[&str]) -> PathBuf {
    let exe = dir.join(out);
    let result = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .args(args)
        .output();
    let output = match result {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run the C compiler `cc` ({e}): these tests build C programs against the system \
             OpenCL headers and loader; install them (Debian: apt-get install gcc ocl-icd-opencl-dev)"
        ),
    };
    assert!(
        output.status.success(),
        "cc {args:?} failed:\n{}\n(needs the OpenCL headers and loader: apt-get install ocl-icd-opencl-dev)",
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

/// Builds a program from C `source` (written to `dir/name.c`), with extra `args` after it.
pub fn cc(dir: &Path, name: &str, source: &str, args: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write the C source");
    let mut all = vec![src.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    cc_args(dir, name, &all)
}

/// Runs `cmd`, fails with its output unless it succeeds, returns its stdout.
pub fn run_ok(mut cmd: Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout.into_owned()
}

/// The `libpinstream_layer.so` cargo built for this test run: beside the test executable in
/// target/<profile>/deps (cargo copies it up to target/<profile>/ only for `cargo build`).
pub fn layer_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let lib = exe.with_file_name("libpinstream_layer.so");
    assert!(
        lib.exists(),
        "{} is missing: cargo builds it with the tests (crate-type cdylib)",
        lib.display()
    );
    lib
}

/// Skips the calling test visibly (`pinstream_testkit::skip`: reported, counted by
/// scripts/gpu-tests.sh, never a pass).
#[allow(unused_imports)] // each test binary includes this module; not all of them skip
pub use pinstream_testkit::skip;

/// Whether this machine's `libOpenCL.so.1` loads the layers `OPENCL_LAYERS` names (ocl-icd
/// does; CUDA's own loader, first on the H200 machine, does not). Where it does not, the test
/// is reported skipped for that way in ([`skip`]) and the caller leaves it out.
pub fn opencl_layers_honoured() -> bool {
    let report = pinstream_layer::probe::report();
    let honoured = report.loader.as_ref().is_some_and(|l| l.honours_layers);
    if !honoured {
        skip(&format!(
            "the way in through OPENCL_LAYERS: this machine's OpenCL loader ({}) ignores it",
            report.loader.map_or("none found".into(), |l| l.path)
        ));
    }
    honoured
}

/// The ways in this machine's loader offers: OPENCL_LAYERS where honoured, and LD_PRELOAD.
pub fn ways_in() -> Vec<&'static str> {
    let mut ways = vec!["LD_PRELOAD"];
    if opencl_layers_honoured() {
        ways.insert(0, "OPENCL_LAYERS");
    }
    ways
}

/// The arguments the classic program runs with: 3 buffers of 2 MiB, once.
pub const CLASSIC_ARGS: &[&str] = &["--count", "3", "--size-mib", "2", "--repeat", "1"];

/// The variables the layer reads, cleared so the outer environment cannot leak in.
pub const LAYER_VARS: &[&str] = &[
    "OPENCL_LAYERS",
    "LD_PRELOAD",
    "PINSTREAM_LAYER_POLICY",
    "PINSTREAM_LAYER_MIN_SIZE",
    "PINSTREAM_LAYER_LOG",
    "PINSTREAM_LAYER_LOG_FILE",
    "PINSTREAM_LAYER_TEST_FAKE_NV",
    "PINSTREAM_LAYER_TEST_PANIC",
];
