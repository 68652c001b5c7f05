//! The C library as C programs use it: installed by scripts/install-capi.sh, found by
//! pkg-config, compiled by the system C compiler, run on the first GPU, else the
//! first device (PoCL in CI) under AddressSanitizer. A missing compiler, ASan runtime or
//! pkg-config fails these tests with the package to install; nothing is skipped. CMake's
//! find_package (shared and static) is tested on the C archive: scripts/test-dist.sh.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const APT: &str =
    "apt-get install gcc libasan8 pkg-config cmake ocl-icd-opencl-dev pocl-opencl-icd";

/// Where cargo put libpinstream_capi.{so,a} for this test run: target/<profile>/deps, where
/// `cargo test` builds the library's every crate type for the integration tests (it copies
/// them up to target/<profile> only for `cargo build`, so that copy may be stale or absent).
fn built_libs() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    for f in ["libpinstream_capi.so", "libpinstream_capi.a"] {
        assert!(
            dir.join(f).exists(),
            "{} was not built",
            dir.join(f).display()
        );
    }
    dir
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {:?} ({e}): {APT}", cmd.get_program()));
    out
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(cmd: &mut Command, what: &str) -> Output {
    let out = run(cmd, what);
    assert!(out.status.success(), "{what} failed: {}", text(&out));
    out
}

/// An installed prefix: removed when the test that made it passes (the static archive alone
/// is 140 MiB, and CI's disk is not large), kept for a look when it fails.
struct Prefix(PathBuf);

impl std::ops::Deref for Prefix {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Installs the library into a fresh prefix named `name`, as users do.
fn install(name: &str) -> Prefix {
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&prefix);
    ok(
        Command::new("bash")
            .arg(format!("{ROOT}/scripts/install-capi.sh"))
            .arg(&prefix)
            .env("PINSTREAM_LIB_DIR", built_libs()),
        "scripts/install-capi.sh",
    );
    Prefix(prefix)
}

fn pkg_config(prefix: &Path, args: &[&str]) -> Vec<String> {
    let out = ok(
        Command::new("pkg-config")
            .args(args)
            .arg("pinstream")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
        "pkg-config",
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Compiles `source` with AddressSanitizer against the installed shared library.
fn compile_asan(prefix: &Path, source: &str, exe: &str) -> PathBuf {
    compile_asan_with(prefix, source, exe, &[])
}

/// As [`compile_asan`], linking `libs` too. Every ASan program is linked with
/// tests/c/keep_loaded.c, whose `dlclose` keeps libraries loaded, so that a driver's one-time
/// state is still found at exit once the Vulkan or OpenCL loader has closed the driver (the
/// file says why).
fn compile_asan_with(prefix: &Path, source: &str, exe: &str, libs: &[&str]) -> PathBuf {
    let keep_loaded = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/keep_loaded.c");
    let asan = [
        "-O1",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        keep_loaded,
    ];
    compile(
        prefix,
        (source, exe),
        libs,
        (&asan, "with AddressSanitizer"),
    )
}

/// Compiles C `source` against the library installed at `prefix` into `prefix/exe`, with
/// `flags` (named `what` in a failure), linking `libs` too.
fn compile(
    prefix: &Path,
    (source, exe): (&str, &str),
    libs: &[&str],
    (flags, what): (&[&str], &str),
) -> PathBuf {
    let out = prefix.join(exe);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    ok(
        Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
            .args(flags)
            .args(pkg_config(prefix, &["--cflags"]))
            .arg(source)
            .args(pkg_config(prefix, &["--libs"]))
            .args(libs)
            .args(["-lOpenCL", "-lpthread", "-o"])
            .arg(&out),
        &format!("{cc} ({what}) on {source}"),
    );
    out
}

/// Which API's device a C program runs on, for [`ran_on_the_wanted_device`].
#[derive(Clone, Copy)]
enum On {
    OpenCl,
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    Vulkan,
}

/// Runs an ASan build of an OpenCL program; `suppressions` names third-party leaks to ignore.
/// The program must have run on the wanted device ([`ran_on_the_wanted_device`]).
fn run_asan(prefix: &Path, exe: &Path, args: &[&str], suppressions: Option<&str>) -> Output {
    run_asan_on(On::OpenCl, prefix, exe, args, suppressions)
}

/// [`run_asan`] for a program on API `on`'s device.
fn run_asan_on(
    on: On,
    prefix: &Path,
    exe: &Path,
    args: &[&str],
    suppressions: Option<&str>,
) -> Output {
    let out = run_asan_refused(prefix, exe, args, suppressions);
    ran_on_the_wanted_device(&out, on);
    out
}

/// [`run_asan`] for a run refused before it opens a device (bad arguments): no sanitizer
/// report, and no device to have run on.
fn run_asan_refused(
    prefix: &Path,
    exe: &Path,
    args: &[&str],
    suppressions: Option<&str>,
) -> Output {
    let out = asan_output(prefix, exe, args, suppressions);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("AddressSanitizer") && !err.contains("LeakSanitizer"),
        "sanitizer report: {}",
        text(&out)
    );
    out
}

/// Where `PINSTREAM_TEST_DEVICE_NAME` names a device (scripts/gpu-tests.sh: NVIDIA), the program
/// must have said it ran on it (test_capi: "test_capi: device NAME" on stderr, seed_port:
/// `device="NAME"`): both take the first GPU, which on the H200 machine is not the loader's
/// first platform, and under ASan NVIDIA's platform starts only with protect_shadow_gap=0.
/// Vulkan programs are checked against `PINSTREAM_TEST_VK_DEVICE_NAME` where it is set (CI:
/// `llvmpipe`, beside `pthread` for PoCL's device), else the same name. A run refused before it
/// opens a device names none: [`run_asan_refused`].
fn ran_on_the_wanted_device(out: &Output, on: On) {
    let var = |name: &'static str| std::env::var(name).ok().map(|v| (name, v));
    let want = match on {
        On::OpenCl => var("PINSTREAM_TEST_DEVICE_NAME"),
        On::Vulkan => {
            var("PINSTREAM_TEST_VK_DEVICE_NAME").or_else(|| var("PINSTREAM_TEST_DEVICE_NAME"))
        }
    };
    let Some((name, want)) = want else {
        return;
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.lines()
            .any(|l| l.contains("device") && l.contains(&want)),
        "{name}={want}, but the program ran elsewhere: {}",
        text(out)
    );
}

/// Runs an ASan build and returns what it did, sanitizer reports included. A run in which
/// LeakSanitizer itself crashed ("Tracer caught signal 11 … LeakSanitizer has encountered a
/// fatal error": its stop-the-world thread, seen once, under CI's load, and in none of 60
/// runs of the program by hand) found nothing either way, so it is run again, twice at most,
/// saying so; a leak report ("detected memory leaks") is never retried.
fn asan_output(prefix: &Path, exe: &Path, args: &[&str], suppressions: Option<&str>) -> Output {
    let mut out = asan_output_once(prefix, exe, args, suppressions);
    for _ in 0..2 {
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("LeakSanitizer has encountered a fatal error") {
            break;
        }
        eprintln!("note: LeakSanitizer's own tracer crashed in {exe:?}; running it again:\n{err}");
        out = asan_output_once(prefix, exe, args, suppressions);
    }
    out
}

fn asan_output_once(
    prefix: &Path,
    exe: &Path,
    args: &[&str],
    suppressions: Option<&str>,
) -> Output {
    let mut lsan = "print_suppressions=0".to_string();
    if let Some(s) = suppressions {
        lsan = format!("suppressions={s}:{lsan}");
    }
    run(
        Command::new(exe)
            .args(args)
            .env("LD_LIBRARY_PATH", library_path(&prefix.join("lib")))
            // protect_shadow_gap=0: NVIDIA's driver maps memory where ASan's protected shadow
            // gap lies; with the gap protected its platform fails to start, and the programs
            // ran on PoCL on the H200 machine instead of the GPU (google/sanitizers#629).
            .env(
                "ASAN_OPTIONS",
                "detect_leaks=1:halt_on_error=1:protect_shadow_gap=0",
            )
            .env("LSAN_OPTIONS", lsan)
            // Compile the kernel every time, so that the same leaks are suppressed every run.
            .env("POCL_KERNEL_CACHE", "0")
            // CI caps PoCL's memory (.ci/run); with the cap set (any value), LeakSanitizer's
            // tracer crashed in every run of the seed port (signal 11 at the same address), so
            // the ASan programs see PoCL's own size.
            .env_remove("POCL_MEMORY_LIMIT"),
        &exe.display().to_string(),
    )
}

/// The third-party suppressions name the OpenCL loader, LLVM and PoCL only: a leak allocated
/// outside them, by a program that loaded the loader and the driver through pinstream, is
/// still reported.
#[test]
fn a_leak_outside_the_third_party_libraries_is_still_reported() {
    let prefix = install("capi-leak");
    let src = format!("{}/tests/c/leak_on_purpose.c", env!("CARGO_MANIFEST_DIR"));
    let exe = compile_asan(&prefix, &src, "leak_on_purpose");
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = asan_output(&prefix, &exe, &[], Some(&supp));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("LeakSanitizer") && err.contains("77 byte(s)"),
        "{}",
        text(&out)
    );
}

#[test]
fn c_suite_passes_under_address_sanitizer_with_no_leak() {
    let prefix = install("capi-suite");
    let src = format!("{}/tests/c/test_capi.c", env!("CARGO_MANIFEST_DIR"));
    let exe = compile_asan(&prefix, &src, "test_capi");
    // The batched copies compile their kernels with PoCL (LLVM), whose compiler state lives
    // for the process: the same third-party suppressions as the seed port, nothing of ours.
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = run_asan(&prefix, &exe, &[], Some(&supp));
    assert!(checks_passed(&out) > 100, "{}", text(&out));
}

/// How many checks a C test program passed; fails the test unless it passed every one
/// ("N passed, 0 failed") and exited 0.
fn checks_passed(out: &Output) -> u32 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "{}",
        text(out)
    );
    let last = stdout.lines().rfind(|l| l.contains(" passed, "));
    let count = last.and_then(|l| l.split(" passed").next());
    count.and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

fn seed_port(prefix: &Path) -> PathBuf {
    compile_asan(
        prefix,
        &format!("{ROOT}/examples/c/seed_port.c"),
        "seed_port",
    )
}

const SMALL: [&str; 8] = [
    "--total", "24MiB", "--block", "2MiB", "--budget", "8MiB", "--repeat", "2",
];

#[test]
fn seed_port_matches_the_cpu_in_both_modes() {
    let prefix = install("capi-seed");
    let exe = seed_port(&prefix);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    for mode in [&[][..], &["--register"][..]] {
        let args: Vec<&str> = mode.iter().chain(SMALL.iter()).copied().collect();
        let out = run_asan(&prefix, &exe, &args, Some(&supp));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", text(&out));
        assert!(stdout.contains("mismatches=0 PASS"), "{stdout}");
        // psGetVersion through the installed library.
        let version = format!("seed_port: libpinstream {}\n", env!("CARGO_PKG_VERSION"));
        assert!(stdout.contains(&version), "{stdout}");
        assert!(
            stdout.contains("slots=4") && stdout.contains("write busy"),
            "{stdout}"
        );
        let want = if mode.is_empty() {
            "mode=alloc"
        } else {
            "mode=register"
        };
        assert!(stdout.contains(want), "{stdout}");
    }
}

#[test]
fn seed_port_fails_when_a_result_is_wrong() {
    let prefix = install("capi-seed-corrupt");
    let exe = seed_port(&prefix);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = [
        "--corrupt-one",
        "--total",
        "4MiB",
        "--block",
        "1MiB",
        "--budget",
        "2MiB",
    ];
    let out = run_asan(&prefix, &exe, &args, Some(&supp));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("mismatches=1 FAIL"));
}

fn seed_stream(prefix: &Path) -> PathBuf {
    compile_asan(
        prefix,
        &format!("{ROOT}/examples/c/seed_stream.c"),
        "seed_stream",
    )
}

/// The seed program on the psStream calls (its loop replaced by psStreamRun): right in both
/// modes under ASan, with seed_port's per-stage lines, and failing on a corrupted result.
#[test]
fn seed_stream_matches_the_cpu_in_both_modes_and_fails_on_a_wrong_result() {
    let prefix = install("capi-seed-stream");
    let exe = seed_stream(&prefix);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    for mode in [&[][..], &["--register"][..]] {
        let args: Vec<&str> = mode.iter().chain(SMALL.iter()).copied().collect();
        let out = run_asan(&prefix, &exe, &args, Some(&supp));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", text(&out));
        assert!(stdout.contains("mismatches=0 PASS"), "{stdout}");
        for line in ["pass 2: write busy", "combined", "stream blocks=12"] {
            assert!(stdout.contains(line), "{line}: {stdout}");
        }
    }
    let corrupt = [
        "--corrupt-one",
        "--total",
        "4MiB",
        "--block",
        "1MiB",
        "--budget",
        "4MiB",
    ];
    let out = run_asan(&prefix, &exe, &corrupt, Some(&supp));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("mismatches=1 FAIL"));
}

/// `--passes N`: each run is one psStreamRun of N passes in a row, so every value is N kernel
/// steps on (the check counts them: a run of 3 passes checked as 1 would fail), and its
/// figures are the whole run's; the hand-written loop refuses it, naming the option to use.
#[test]
fn seed_stream_runs_several_passes_in_one_call_and_seed_port_refuses_them() {
    let prefix = install("capi-seed-passes");
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let exe = seed_stream(&prefix);
    let args: Vec<&str> = ["--passes", "3"]
        .iter()
        .chain(SMALL.iter())
        .copied()
        .collect();
    let out = run_asan(&prefix, &exe, &args, Some(&supp));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("passes_per_run=3"), "{stdout}");
    assert!(stdout.contains("mismatches=0 PASS"), "{stdout}");
    let port = seed_port(&prefix);
    // Refused before it opens a device (the GPU run of 2026-12-07 checked a device here).
    let out = run_asan_refused(&prefix, &port, &["--passes", "2"], Some(&supp));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use --repeat"));
}

/// The psVk calls from a Vulkan program with its own instance and device (lavapipe in CI:
/// mesa-vulkan-drivers; libvulkan-dev for the headers; it loads libvulkan.so.1 itself).
#[cfg(feature = "vulkan")]
fn vulkan_program(prefix: &Path) -> PathBuf {
    compile_asan_with(prefix, &vulkan_source(), "test_vulkan", &["-ldl"])
}

/// crates/pinstream-capi/tests/c/test_vulkan.c.
#[cfg(feature = "vulkan")]
fn vulkan_source() -> String {
    format!("{}/tests/c/test_vulkan.c", env!("CARGO_MANIFEST_DIR"))
}

/// Runs test_vulkan in `mode` and checks it passed every check.
#[cfg(feature = "vulkan")]
fn vulkan_passes(mode: &str, at_least: u32) {
    let prefix = install(&format!("capi-vulkan-{mode}"));
    let exe = vulkan_program(&prefix);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = run_asan_on(On::Vulkan, &prefix, &exe, &[mode], Some(&supp));
    let passed = checks_passed(&out);
    assert!(passed >= at_least, "{passed} checks ran: {}", text(&out));
}

#[cfg(feature = "vulkan")]
#[test]
fn vulkan_misuse_is_refused_with_codes_under_address_sanitizer() {
    vulkan_passes("misuse", 60);
}

/// The one large test: a range 1.25x maxMemoryAllocationSize (2.5 GiB on lavapipe),
/// registered and then allocated, streamed to the device and back over its chunks, every
/// byte checked. Built with -O2 and without AddressSanitizer: over 2.5 GiB, ASan's shadow
/// memory took 16 s of system time of the test's 16 s (7 s without); the psVk calls are run
/// under ASan by the misuse mode above and by examples/c/vk_stream.c (below), over ranges of
/// several chunks.
#[cfg(feature = "vulkan")]
#[test]
fn vulkan_range_larger_than_one_allocation_streams_both_ways() {
    let prefix = install("capi-vulkan-stream");
    let exe = compile(
        &prefix,
        (&vulkan_source(), "test_vulkan"),
        &["-ldl"],
        (&["-O2"], "optimized"),
    );
    let out = run(
        Command::new(&exe)
            .arg("stream")
            .env("LD_LIBRARY_PATH", library_path(&prefix.join("lib"))),
        &exe.display().to_string(),
    );
    ran_on_the_wanted_device(&out, On::Vulkan);
    let passed = checks_passed(&out);
    assert!(passed >= 8, "{passed} checks ran: {}", text(&out));
}

/// examples/c/vk_stream.c (psVkHostRegister of malloc memory streamed in blocks over its
/// chunks, on two queues where offered) under AddressSanitizer with a small range in 3 MiB
/// chunks, so 2 MiB blocks cross chunks: it registers, streams every way, and every byte comes
/// back.
#[cfg(feature = "vulkan")]
#[test]
fn the_vulkan_streaming_example_streams_a_registered_range_over_its_chunks() {
    let prefix = install("capi-vk-stream");
    let src = format!("{ROOT}/examples/c/vk_stream.c");
    let exe = compile_asan_with(&prefix, &src, "vk_stream", &["-ldl"]);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = [
        "--total",
        "20MiB",
        "--block",
        "2MiB",
        "--repeat",
        "1",
        "--max-chunk",
        "3MiB",
    ];
    let out = run_asan_on(On::Vulkan, &prefix, &exe, &args, Some(&supp));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("registered 20971520 bytes of malloc memory in ")
            && stdout.contains(" s: 7 chunk(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("blocks of 2097152 bytes: H2D ") && stdout.contains(" GB/s, D2H "),
        "{stdout}"
    );
    assert!(
        stdout.contains("check: PASS (0 of 2621440 words differ)"),
        "{stdout}"
    );
    // Bad arguments: the usage, exit 2.
    let out = run_asan_refused(&prefix, &exe, &["--total", "lots"], Some(&supp));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: vk_stream"));
}

/// examples/c/vk_stream.c with `--engine` (the engine from a Vulkan program: psVkStreamCreate
/// on its GPU, psVkStreamSetKernel with examples/seed.wgsl, psStreamRun in place over its
/// psVkHostRegister range) under AddressSanitizer: 3 runs of 2 passes over 6 MiB in 3 MiB
/// chunks through a 2 MiB budget, every word checked, nothing leaked; a kernel that does not
/// compile is refused naming the call, exit 2, with nothing leaked either.
#[cfg(feature = "vulkan")]
#[test]
fn the_vulkan_example_streams_through_the_engine_with_psvkstream() {
    let prefix = install("capi-vk-engine");
    let src = format!("{ROOT}/examples/c/vk_stream.c");
    let exe = compile_asan_with(&prefix, &src, "vk_stream", &["-ldl"]);
    let supp = format!(
        "{}/tests/c/lsan-third-party.supp",
        env!("CARGO_MANIFEST_DIR")
    );
    let kernel = format!("{ROOT}/examples/seed.wgsl");
    let args = [
        "--engine",
        &kernel,
        "--total",
        "6MiB",
        "--block",
        "512KiB",
        "--budget",
        "2MiB",
        "--repeat",
        "3",
        "--passes",
        "2",
        "--max-chunk",
        "3MiB",
    ];
    let out = run_asan_on(On::Vulkan, &prefix, &exe, &args, Some(&supp));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    for k in 1..=3 {
        assert!(
            stdout.contains(&format!("engine run {k}: 2 pass(es), combined ")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("engine check: PASS (0 of 1572864 words differ)"),
        "{stdout}"
    );
    // A kernel that does not compile: psVkStreamSetKernel's refusal with the line, exit 2.
    let bad = prefix.join("bad.wgsl");
    std::fs::write(
        &bad,
        "@compute @workgroup_size(1) fn seed() { let a: u32 = 1.5; }\n",
    )
    .unwrap();
    let bad = bad.display().to_string();
    let args = [
        "--engine", &bad, "--total", "1MiB", "--block", "256KiB", "--budget", "1MiB",
    ];
    let out = run_asan_refused(&prefix, &exe, &args, Some(&supp));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("psVkStreamSetKernel") && stderr.contains(":1:"),
        "{stderr}"
    );
}

/// `lib` first on the library path, then what the environment had (the GPU machine's carried
/// Vulkan loader: scripts/gpu-common.sh's use_nvidia_vulkan).
fn library_path(lib: &Path) -> std::ffi::OsString {
    let mut path = lib.as_os_str().to_owned();
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(rest);
    }
    path
}
