//! The classic recipe (c/classic_recipe.c: ALLOC_HOST_PTR buffers mapped and filled, then the
//! mapped pointers as WriteBuffer sources, the buffers as CopyBuffer sources and kernel
//! arguments, every byte checked) run on this machine's OpenCL (PoCL, through ocl-icd) without
//! the layer, and with it through OPENCL_LAYERS, LD_PRELOAD and both: the results must be
//! identical. PoCL has no cl_nv_create_buffer, so the layer passes everything through; the
//! tests marked "TEST HOOK" set PINSTREAM_LAYER_TEST_FAKE_NV=1 to drive the layer's rewrite
//! path on PoCL (clCreateBufferNV stood in for by clCreateBuffer with the same flags). They
//! prove the layer's own path keeps a program's results both ways in; what NVIDIA's
//! clCreateBufferNV does is for scripts/gpu-layer.sh on the H200.
//!
//! The PoCL tests pick PoCL's platform (`--platform`), so they hold on a GPU machine too; where
//! the loader ignores OPENCL_LAYERS (CUDA's libOpenCL.so.1 on the H200 machine), that way in is
//! skipped visibly (`common::skip`) and LD_PRELOAD still runs.
//!
//! Needs `cc`, the OpenCL headers and an OpenCL platform (CI: PoCL); fails, saying so, without.
#![cfg(unix)] // the layer is a Linux ICD-loader / LD_PRELOAD layer (see the crate docs)

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

struct Programs {
    classic: PathBuf,
    classic_library: PathBuf,
    via_dlopen: PathBuf,
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let dir = common::scratch_dir("classic");
        let src = common::c_dir().join("classic_recipe.c");
        let src = src.to_str().expect("UTF-8 path");
        let via = common::c_dir().join("via_dlopen.c");
        Programs {
            classic: common::cc_args(&dir, "classic_recipe", &[src, "-lOpenCL"]),
            classic_library: common::cc_args(
                &dir,
                "libclassic.so",
                &["-shared", "-fPIC", "-Dmain=classic_main", src, "-lOpenCL"],
            ),
            via_dlopen: common::cc_args(
                &dir,
                "via_dlopen",
                &[via.to_str().expect("UTF-8 path"), "-ldl"],
            ),
        }
    })
}

/// One run's output.
struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    /// The lines that must not change with the layer.
    fn results(&self) -> BTreeMap<String, String> {
        const KEYS: [&str; 6] = [
            "device",
            "buffers",
            "words_checked",
            "checksum",
            "mismatches",
            "result",
        ];
        self.stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| KEYS.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn count(&self, needle: &str) -> usize {
        self.stderr.matches(needle).count()
    }

    fn says(&self, needle: &str) -> bool {
        self.stderr.contains(needle)
    }
}

fn run_cmd(mut cmd: Command, env: &[(&str, &str)]) -> Run {
    for var in common::LAYER_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let run = Run {
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    };
    assert!(
        out.status.success(),
        "{cmd:?} with {env:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        run.stdout,
        run.stderr
    );
    run
}

fn classic(env: &[(&str, &str)], extra: &[&str]) -> Run {
    let mut cmd = Command::new(&programs().classic);
    cmd.args(common::CLASSIC_ARGS).args(extra);
    run_cmd(cmd, env)
}

fn baseline(extra: &[&str]) -> BTreeMap<String, String> {
    let results = classic(&[], extra).results();
    assert_eq!(
        results.get("result").map(String::as_str),
        Some("ok"),
        "{results:?}"
    );
    assert_eq!(
        results.get("mismatches").map(String::as_str),
        Some("0"),
        "{results:?}"
    );
    results
}

fn layer() -> String {
    common::layer_library().display().to_string()
}

/// The PoCL tests run on PoCL whatever else is installed (a GPU machine's default is its GPU).
const ON_POCL: &[&str] = &["--platform", "Portable Computing Language"];

#[test]
fn through_opencl_layers_pocl_keeps_everything_as_asked() {
    if !common::opencl_layers_honoured() {
        return;
    }
    let lib = layer();
    let run = classic(
        &[("OPENCL_LAYERS", &lib), ("PINSTREAM_LAYER_LOG", "1")],
        ON_POCL,
    );
    assert_eq!(run.results(), baseline(ON_POCL));
    assert!(
        run.says("entered through OPENCL_LAYERS"),
        "the loader loaded the layer:\n{}",
        run.stderr
    );
    assert_eq!(run.count("lacks cl_nv_create_buffer"), 3, "{}", run.stderr);
    assert!(
        run.says("rewritten to pinned host memory: 0 buffers"),
        "{}",
        run.stderr
    );
}

#[test]
fn through_ld_preload_pocl_keeps_everything_as_asked() {
    let lib = layer();
    let run = classic(
        &[("LD_PRELOAD", &lib), ("PINSTREAM_LAYER_LOG", "1")],
        ON_POCL,
    );
    assert_eq!(run.results(), baseline(ON_POCL));
    assert!(run.says("entered through LD_PRELOAD"), "{}", run.stderr);
    assert_eq!(run.count("lacks cl_nv_create_buffer"), 3, "{}", run.stderr);
}

/// TEST HOOK: the rewrite path, through each way in.
#[test]
fn the_rewrite_path_keeps_the_results_both_ways_in() {
    let lib = layer();
    for way in common::ways_in() {
        let run = classic(
            &[
                (way, &lib),
                ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
                ("PINSTREAM_LAYER_LOG", "1"),
            ],
            &[],
        );
        assert_eq!(run.results(), baseline(&[]), "{way}");
        assert!(
            run.says(&format!("entered through {way}")),
            "{}",
            run.stderr
        );
        assert!(
            run.says("TEST HOOK PINSTREAM_LAYER_TEST_FAKE_NV=1"),
            "{}",
            run.stderr
        );
        assert_eq!(run.count("rewrote buffer #"), 3, "{way}:\n{}", run.stderr);
        assert_eq!(
            run.count("bound to a kernel"),
            3,
            "one notice per buffer and kernel:\n{}",
            run.stderr
        );
        assert!(
            run.says("rewritten to pinned host memory: 3 buffers, 6.00 MiB in all"),
            "{}",
            run.stderr
        );
        // Release callbacks reach the ledger. PoCL may still hold a released buffer for an
        // event it retires on its own thread when the summary is printed at exit, so "all of
        // them" is racy there (seen once under load in CI); "some, and the rest accounted" is not.
        assert!(
            run.says("still alive at exit: 0 B")
                || (run.says("(released: ") && !run.says("(released: 0 B)")),
            "release callbacks reached the ledger:\n{}",
            run.stderr
        );
    }
}

/// TEST HOOK: COPY_HOST_PTR buffers are never rewritten (the copy probe crashed NVIDIA's
/// driver on the H200): each is kept, with the reason, and the results are the same. Under
/// audit they are reported as buffers the rewrite would not take.
#[test]
fn copy_host_ptr_buffers_are_kept_with_the_reason() {
    let lib = layer();
    let want = baseline(&["--copy-host-ptr"]);
    let ways = common::ways_in();
    for (policy, summary) in [
        ("rewrite", "rewritten to pinned host memory: 0 buffers"),
        (
            "audit",
            "would be rewritten (audit: nothing was): 0 buffers",
        ),
    ] {
        for &way in &ways {
            let env = [
                (way, lib.as_str()),
                ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
                ("PINSTREAM_LAYER_LOG", "1"),
                ("PINSTREAM_LAYER_POLICY", policy),
            ];
            let run = classic(&env, &["--copy-host-ptr"]);
            let at = format!("{policy} through {way}:\n{}", run.stderr);
            assert_eq!(run.results(), want, "{at}");
            assert_eq!(run.count("rewrote buffer #"), 0, "{at}");
            assert_eq!(
                run.count("would be rewritten to pinned host memory"),
                0,
                "{at}"
            );
            assert_eq!(
                run.count("COPY_HOST_PTR: not rewritten; the copy probe through clCreateBufferNV crashed NVIDIA's driver"),
                3,
                "{at}"
            );
            assert!(run.says(summary), "{at}");
            assert!(run.says("3 with COPY_HOST_PTR (6.00 MiB)"), "{at}");
        }
    }
}

/// TEST HOOK: named both ways, the layer does its work once.
#[test]
fn loaded_both_ways_the_work_is_done_once() {
    if !common::opencl_layers_honoured() {
        return;
    }
    let lib = layer();
    let env = [
        ("OPENCL_LAYERS", lib.as_str()),
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_LOG", "1"),
    ];
    let run = classic(&env, &[]);
    assert_eq!(run.results(), baseline(&[]));
    assert_eq!(run.count("rewrote buffer #"), 3, "{}", run.stderr);
    assert_eq!(run.count("bound to a kernel"), 3, "{}", run.stderr);
    assert!(
        run.says("the LD_PRELOAD entry did the work"),
        "{}",
        run.stderr
    );
}

/// TEST HOOK: a program whose libOpenCL is not in the global scope (opened RTLD_LOCAL, as
/// Python opens PyOpenCL) is still served under LD_PRELOAD, through the objects' own tables.
#[test]
fn a_loader_opened_rtld_local_is_reached_through_the_objects() {
    let lib = layer();
    let p = programs();
    let mut cmd = Command::new(&p.via_dlopen);
    cmd.arg(&p.classic_library).args(common::CLASSIC_ARGS);
    let run = run_cmd(
        cmd,
        &[
            ("LD_PRELOAD", &lib),
            ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
            ("PINSTREAM_LAYER_LOG", "1"),
        ],
    );
    assert_eq!(run.results(), baseline(&[]));
    assert!(
        run.says("calls go on through each object's dispatch table"),
        "{}",
        run.stderr
    );
    assert_eq!(run.count("rewrote buffer #"), 3, "{}", run.stderr);
}

/// TEST HOOK: audit rewrites nothing and says what it would do, unasked.
#[test]
fn audit_rewrites_nothing_and_reports_what_it_would() {
    let lib = layer();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_POLICY", "audit"),
    ];
    let run = classic(&env, &[]);
    assert_eq!(run.results(), baseline(&[]));
    assert_eq!(run.count("rewrote buffer #"), 0, "{}", run.stderr);
    assert_eq!(
        run.count("would be rewritten to pinned host memory"),
        3,
        "{}",
        run.stderr
    );
    assert!(
        run.says("would be rewritten (audit: nothing was): 3 buffers, 6.00 MiB"),
        "{}",
        run.stderr
    );
}

/// TEST HOOK: off is silent and changes nothing; a bad policy is reported and means off.
#[test]
fn off_is_silent_and_a_bad_policy_means_off() {
    let lib = layer();
    let off = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_LOG", "1"),
        ("PINSTREAM_LAYER_POLICY", "off"),
    ];
    let run = classic(&off, &[]);
    assert_eq!(run.results(), baseline(&[]));
    assert!(
        !run.says("pinstream-layer"),
        "off says nothing:\n{}",
        run.stderr
    );
    let bad = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_POLICY", "rewirte"),
    ];
    let run = classic(&bad, &[]);
    assert_eq!(run.results(), baseline(&[]));
    assert!(
        run.says("PINSTREAM_LAYER_POLICY=\"rewirte\" is not a policy: use rewrite, audit or off"),
        "{}",
        run.stderr
    );
    assert_eq!(run.count("rewrote buffer #"), 0, "{}", run.stderr);
}

/// The minimum size is the user's: above it, the same buffers are left alone.
#[test]
fn buffers_below_the_minimum_size_are_left_alone() {
    let lib = layer();
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_LOG", "1"),
        ("PINSTREAM_LAYER_MIN_SIZE", "4MiB"),
    ];
    let run = classic(&env, &[]);
    assert_eq!(run.results(), baseline(&[]));
    assert_eq!(run.count("rewrote buffer #"), 0, "{}", run.stderr);
    assert!(
        run.says("3 below the minimum size (6.00 MiB)"),
        "{}",
        run.stderr
    );
}
