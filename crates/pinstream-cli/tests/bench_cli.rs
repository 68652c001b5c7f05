//! `pinstream bench` end to end on the default device: JSON, plot, knees, bad sizes.

mod common;

use common::{pinstream, stderr};

#[test]
fn bench_measures_every_size_and_draws_a_plot() {
    let plot = std::env::temp_dir().join(format!("pinstream-bench-{}.svg", std::process::id()));
    let o = pinstream(&[
        "bench",
        "--sizes",
        "4KiB..64KiB",
        "--repeat",
        "2",
        "--strategy",
        "register",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["strategies"][0];
    assert_eq!(s["strategy"], "register");
    let points = s["points"].as_array().unwrap();
    assert_eq!(
        points
            .iter()
            .map(|p| p["size"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![4096, 8192, 16384, 32768, 65536]
    );
    for p in points {
        for d in ["h2d", "d2h", "both"] {
            let b = &p[d];
            assert_eq!(b["passes"].as_array().unwrap().len(), 2);
            assert!(b["min_gbps"].as_f64().unwrap() <= b["wall_gbps"].as_f64().unwrap());
            assert!(b["wall_gbps"].as_f64().unwrap() <= b["max_gbps"].as_f64().unwrap());
        }
        assert!(p["h2d_latency"]["wall_us"].as_f64().unwrap() > 0.0);
    }
    let knee = s["h2d"]["size_at_95"].as_u64().unwrap();
    assert!((4096..=65536).contains(&knee));
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg")
            && svg.contains("register (opencl)")
            && svg.contains("device to host"),
        "{}",
        &svg[..100.min(svg.len())]
    );
    std::fs::remove_file(&plot).unwrap();
}

#[test]
fn bench_refuses_bad_sizes() {
    let o = pinstream(&["bench", "--sizes", "1MiB..4KiB"]);
    assert!(
        !o.status.success() && stderr(&o).contains("invalid --sizes"),
        "{}",
        stderr(&o)
    );
    let o = pinstream(&["bench", "--sizes", "64TiB"]);
    assert!(
        !o.status.success() && stderr(&o).contains("max allocation"),
        "{}",
        stderr(&o)
    );
}

/// `--gather-shape`: each shape asked for gets its own rows, every row checked, the first as
/// `gather` and the others in order as `more_gather`; a shape that is not PIECESxSIZE is
/// refused before anything runs, naming the form.
#[test]
fn compare_measures_each_gather_shape_asked_for() {
    let o = pinstream(&[
        "compare",
        "--size",
        "8MiB",
        "--vram-budget",
        "8MiB",
        "--sizes",
        "1MiB",
        "--repeat",
        "1",
        "--point-repeats",
        "1",
        "--gather-shape",
        "64x256",
        "--gather-shape",
        "32X4KiB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let more = v["more_gather"].as_array().unwrap();
    assert_eq!(more.len(), 1, "{more:?}");
    for (g, pieces, size) in [(&v["gather"], 64, 256), (&more[0], 32, 4096)] {
        assert_eq!(g["shape"]["pieces"], pieces);
        assert_eq!(g["total_bytes"], pieces * size);
        let rows = g["rows"].as_array().unwrap();
        assert!(rows.iter().all(|r| r["verified"] == true), "{g}");
    }
    // Malformed, then well-formed but past the address space, then within it (1 PiB) but past
    // the host memory, where the host memory can be read.
    let mut huge = vec!["18446744073709551615x1", "1099511627776x1GiB"];
    if pinstream::backend::os::host_room().is_some() {
        huge.push("1073741824x1MiB");
    }
    for bad in ["4096", "0x4KiB", "4096x0", "ax4KiB", "4096x4Q"]
        .iter()
        .chain(&huge)
    {
        let o = pinstream(&["compare", "--gather-shape", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--gather-shape"),
            "{bad}: {}",
            stderr(&o)
        );
    }
    let twice = [
        "compare",
        "--gather-shape",
        "64x256",
        "--gather-shape",
        "64x256",
    ];
    let o = pinstream(&twice);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("given twice"), "{}", stderr(&o));
}

#[test]
fn compare_runs_the_opencl_half_and_says_why_cuda_is_missing() {
    let o = pinstream(&[
        "compare",
        "--size",
        "16MiB",
        "--vram-budget",
        "8MiB",
        "--sizes",
        "1MiB",
        "--repeat",
        "2",
        "--point-repeats",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let passes = v["opencl"]["bench_passes"][0].as_array().unwrap();
    assert_eq!(passes.len(), 3, "one entry per paired pass");
    assert!(passes.iter().all(|p| p[2].as_f64().unwrap() > 0.0));
    assert_eq!(v["point_repeats"], 3);
    // The scattered pieces: 4096 x 4 KiB both ways, every row checked.
    let g = &v["gather"];
    assert_eq!(g["total_bytes"], 4096 * 4096);
    assert!(g["h2d"]["of_peak"].as_f64().unwrap() > 0.0, "{g}");
    assert!(g["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["verified"] == true));
    if v["cuda"]["status"] == "measured" {
        // A machine whose default device is an NVIDIA GPU with CUDA (the GPU check).
        assert!(!v["ratios"].as_array().unwrap().is_empty());
        return;
    }
    assert_eq!(v["cuda"]["status"], "unavailable");
    let why = v["cuda"]["reason"].as_str().unwrap();
    assert!(why.contains(cuda_missing_reason()), "{why}");
    assert!(
        v["ratios"].as_array().unwrap().is_empty(),
        "no ratio without CUDA"
    );
    let b = &v["opencl"]["bench"][0];
    assert_eq!(b[0], 1 << 20);
    assert!(b[1].as_f64().unwrap() > 0.0 && b[3].as_f64().unwrap() > 0.0);
    for k in [
        "in_place",
        "gemv",
        "in_place_overlap",
        "in_place_cpu_s_per_gib",
        "gemv_cpu_s_per_gib",
    ] {
        let each = v["opencl"][k].as_array().unwrap();
        assert_eq!(each.len(), 2, "{k}: one figure per repeat");
        // Windows counts process CPU time in clock ticks (~15.6 ms), longer than these 4 MiB
        // streams: a CPU figure may read 0 there, never below.
        let cpu_may_be_zero = cfg!(windows) && k.ends_with("cpu_s_per_gib");
        assert!(
            each.iter().all(|x| {
                let x = x.as_f64().unwrap();
                x > 0.0 || (cpu_may_be_zero && x == 0.0)
            }),
            "{k}"
        );
    }
    // The human report says the same.
    let o = pinstream(&[
        "compare",
        "--size",
        "4MiB",
        "--vram-budget",
        "4MiB",
        "--sizes",
        "64KiB",
        "--repeat",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("CUDA: not measured:"), "{text}");
}

/// What the CUDA half says on a machine without CUDA (CI: PoCL, no NVIDIA driver).
fn cuda_missing_reason() -> &'static str {
    if cfg!(feature = "cuda") {
        // The default device is PoCL's CPU device: no CUDA twin, whatever the driver.
        "not driven by NVIDIA's OpenCL driver"
    } else {
        "built without the `cuda` cargo feature"
    }
}

#[test]
fn bench_says_why_cuda_is_missing_and_refuses_cuda_only() {
    let o = pinstream(&[
        "bench",
        "--sizes",
        "64KiB",
        "--repeat",
        "1",
        "--strategy",
        "auto",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let apis: Vec<&str> = v["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["api"].as_str().unwrap())
        .collect();
    if apis.contains(&"cuda") {
        return; // measured: the GPU check covers this case
    }
    assert_eq!(apis, vec!["opencl"]);
    let why = v["cuda_unavailable"].as_str().unwrap();
    assert!(why.contains(cuda_missing_reason()), "{why}");
    let o = pinstream(&[
        "bench", "--sizes", "64KiB", "--repeat", "1", "--api", "cuda",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--api cuda: CUDA cannot measure this device"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compare_fails_cleanly_when_the_opencl_bench_cannot_run() {
    // A block above every device's max allocation: the OpenCL bench refuses it, and compare
    // must say so (it used to index an empty curve and panic).
    let o = pinstream(&[
        "compare",
        "--size",
        "4MiB",
        "--vram-budget",
        "4MiB",
        "--sizes",
        "64TiB",
        "--repeat",
        "1",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("error: the OpenCL bench with strategy") && err.contains("max allocation"),
        "{err}"
    );
}

#[test]
fn compare_refuses_a_size_the_host_memory_cannot_hold() {
    let o = pinstream(&[
        "compare",
        "--size",
        "64TiB",
        "--vram-budget",
        "4MiB",
        "--sizes",
        "64KiB",
        "--repeat",
        "1",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("x --size 64 TiB plus y: one copy per API measured")
            && err.contains("of host memory available: pass --size ")
            && err.contains(" or less"),
        "{err}"
    );
}

#[test]
fn compare_takes_the_opencl_strategy_to_use() {
    let o = pinstream(&[
        "compare",
        "--size",
        "4MiB",
        "--vram-budget",
        "4MiB",
        "--sizes",
        "64KiB",
        "--repeat",
        "1",
        "--strategy",
        "pageable",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["opencl"]["memory"], "pageable");
    let o = pinstream(&["compare", "--strategy", "no-such"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no-such"), "{}", stderr(&o));
}

#[test]
fn bench_refuses_an_opencl_strategy_with_api_cuda() {
    let o = pinstream(&["bench", "--api", "cuda", "--strategy", "register"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--strategy does not apply with --api cuda: ")
            && stderr(&o).contains("leave --strategy out, or use --api both"),
        "{}",
        stderr(&o)
    );
}

/// `bench latency` on PoCL: every way of waiting, pinstream's two rows, in one table per
/// size; the numbers are sane (no timing assertions: the machine is shared).
#[test]
fn bench_latency_puts_the_driver_floor_beside_pinstreams_path() {
    let o = pinstream(&[
        "bench",
        "latency",
        "--sizes",
        "4KiB,64KiB",
        "--samples",
        "40",
        "--strategy",
        "register",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["api"], &v["pinning"], &v["floor"]),
        (&"opencl".into(), &"register".into(), &"opencl".into())
    );
    let sizes = v["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    for s in sizes {
        let rows = s["rows"].as_array().unwrap();
        let count = |api: &str| rows.iter().filter(|r| r["api"] == api).count();
        assert_eq!((count("opencl"), count("pinstream")), (11, 5), "{s}");
        let plain = |api: &str| {
            rows.iter()
                .filter(|r| r["api"] == api && r["profiled"] == false)
                .count()
        };
        assert_eq!((plain("opencl"), plain("pinstream")), (4, 2), "{s}");
        for r in rows {
            let (med, min) = (
                r["median_us"].as_f64().unwrap(),
                r["min_us"].as_f64().unwrap(),
            );
            assert!(min > 0.0 && min <= med, "{r}");
            assert!(r["cpu_us"].as_f64().unwrap() >= 0.0, "{r}");
            let b2b = r["back_to_back"].as_bool().unwrap();
            assert_eq!(b2b, r["per_sample"].as_u64().unwrap() > 1, "{r}");
        }
        for key in ["waited_gap_us", "profiled_gap_us", "profiling_cost_us"] {
            assert!(s[key].as_f64().unwrap().is_finite(), "{key}: {s}");
        }
        if v["cuda_unavailable"].is_null() {
            // An NVIDIA GPU with CUDA (the GPU check): its two rows and the ratio.
            assert_eq!(count("cuda"), 2, "{s}");
            assert!(s["back_to_back_vs_cuda"].as_f64().unwrap() > 0.0);
            assert!(s["driver_back_to_back_vs_cuda"].as_f64().unwrap() > 0.0);
        } else {
            // PoCL has no CUDA: no CUDA rows, no CUDA ratio, and the report says why.
            assert_eq!(count("cuda"), 0);
            assert!(s["back_to_back_vs_cuda"].is_null());
            assert!(s["driver_back_to_back_vs_cuda"].is_null());
        }
    }
    let text = pinstream(&["bench", "latency", "--sizes", "4KiB", "--samples", "5"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let out = String::from_utf8_lossy(&text.stdout);
    for row in [
        "clFlush + polling the event",
        "N enqueued, one clFinish",
        "Lanes::upload + wait on its event",
        "Lanes::upload + wait on its event, WaitMode::Sleep",
        "pinstream waited - opencl's fastest wait, plain queues",
        "event profiling costs the driver",
        "plain",
        "profiled",
    ] {
        assert!(out.contains(row), "{row} missing from\n{out}");
    }
}

#[test]
fn bench_latency_refuses_a_plot() {
    let o = pinstream(&["bench", "latency", "--plot", "/tmp/never.svg"]);
    assert!(
        !o.status.success() && stderr(&o).contains("--plot"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_gather_moves_and_checks_every_row_both_ways() {
    let o = pinstream(&[
        "bench",
        "gather",
        "--pieces",
        "300",
        "--piece-size",
        "1001",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["total_bytes"], 300 * 1001);
    let rows = v["rows"].as_array().unwrap();
    let paths: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["direction"].as_str().unwrap(), r["api"].as_str().unwrap()))
        .collect();
    for dir in ["h2d", "d2h"] {
        assert!(paths.contains(&(dir, "pinstream")), "{paths:?}");
        assert_eq!(paths.iter().filter(|p| p == &&(dir, "opencl")).count(), 2);
    }
    for r in rows {
        assert_eq!(r["verified"], true);
        let (us, gbps) = (r["total_us"].as_f64().unwrap(), r["gbps"].as_f64().unwrap());
        assert!(
            us > 0.0 && (gbps - 300.0 * 1001.0 / us / 1e3).abs() < 1e-6,
            "{r}"
        );
    }
    assert!(v["h2d"]["of_peak"].as_f64().unwrap() > 0.0);
    for r in rows.iter().filter(|r| r["api"] == "pinstream") {
        let copy = r["host_copy_us"].as_f64().unwrap();
        // The zero-copy rows (pieces in mapped memory) pack nothing on the host.
        let zero_copy = r["path"].as_str().unwrap().contains("mapped memory");
        assert!(zero_copy == (copy == 0.0), "{r}");
        assert!(copy < r["total_us"].as_f64().unwrap(), "{r}");
        assert_eq!(
            r["batches"], 1,
            "300 x 1001 B fit one 4 MiB batch, or one launch"
        );
    }
    // The default device (PoCL's CPU device in CI) has mapped memory: both zero-copy rows.
    assert!(v["zero_copy_unavailable"].is_null(), "{v}");
    for dir in ["h2d", "d2h"] {
        assert!(v[dir]["zero_copy_of_peak"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v[dir]["vouched_of_peak"].as_f64().unwrap() > 0.0, "{v}");
        let vouched = rows
            .iter()
            .filter(|r| r["direction"] == dir && r["path"].as_str().unwrap().contains("vouched"));
        assert_eq!(vouched.count(), 1, "one row without the overlap check: {v}");
    }
    gather_cuda_rows_or_the_reason(&v);
}

/// Without CUDA (PoCL in CI) the report says why and has no CUDA rows or ratios; with it (the
/// H200), both directions have a verified CUDA per-piece loop row and zero-copy kernel row,
/// and ratios against them.
fn gather_cuda_rows_or_the_reason(v: &serde_json::Value) {
    let rows = v["rows"].as_array().unwrap();
    let cuda_rows = |what: &str| {
        rows.iter()
            .filter(|r| r["api"] == "cuda" && r["path"].as_str().unwrap().starts_with(what))
            .count()
    };
    // The per-piece loops (`cuMemcpy... per piece`) and the zero-copy kernels (`kernel ...`).
    let (cuda_loops, cuda_zero_copy) = (
        cuda_rows("cuMemcpyHtoDAsync per piece") + cuda_rows("cuMemcpyDtoHAsync per piece"),
        cuda_rows("kernel "),
    );
    match v["cuda_unavailable"].as_str() {
        Some(why) => {
            // The device is not NVIDIA's (PoCL in CI), which is said before whether this
            // pinstream was built with CUDA at all.
            let not_nvidia = "not driven by NVIDIA's OpenCL driver";
            assert!(
                why.contains(not_nvidia) || why.contains(cuda_missing_reason()),
                "{why}"
            );
            assert!(cuda_loops + cuda_zero_copy == 0, "{v}");
            assert!(v["h2d"]["vs_cuda_loop"].is_null(), "{v}");
        }
        None => {
            assert_eq!((cuda_loops, cuda_zero_copy), (2, 2), "{v}");
            for dir in ["h2d", "d2h"] {
                assert!(v[dir]["vs_cuda_loop"].as_f64().unwrap() > 0.0, "{v}");
                let zero = v[dir]["zero_copy_vs_cuda_zero_copy"].as_f64();
                assert!(zero.unwrap() > 0.0, "{v}");
            }
        }
    }
}

/// `--api opencl`: OpenCL's rows alone, CUDA not tried (so no reason either).
#[test]
fn bench_gather_through_opencl_alone_has_no_cuda_rows() {
    let o = pinstream(&[
        "bench", "gather", "--api", "opencl", "--pieces", "64", "--repeat", "1", "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["api"], "opencl");
    assert!(v["cuda_unavailable"].is_null(), "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["api"] != "cuda"), "{v}");
    assert!(v["h2d"]["of_peak"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn bench_gather_refuses_bad_shapes() {
    let o = pinstream(&["bench", "gather", "--piece-size", "4KiB..8KiB"]);
    assert!(
        !o.status.success() && stderr(&o).contains("invalid --piece-size"),
        "{}",
        stderr(&o)
    );
    let o = pinstream(&["bench", "gather", "--pieces", "0"]);
    assert!(!o.status.success(), "{}", stderr(&o));
    let o = pinstream(&["bench", "gather", "--latency"]);
    assert!(
        o.status.code() == Some(2) && stderr(&o).contains("unexpected argument '--latency'"),
        "{}",
        stderr(&o)
    );
}

/// With no OpenCL platform, `bench gather` and `bench latency` under the default `--api both`
/// name the value that chose OpenCL (`both`), not `--api opencl`, which was not given; under
/// `--api opencl`, that one.
#[cfg(target_os = "linux")]
#[test]
fn no_opencl_names_the_api_value_that_chose_it() {
    let no_platform = |args: &[&str]| {
        let o = std::process::Command::new(common::bin())
            .args(args)
            .env("OCL_ICD_VENDORS", "/nonexistent-pinstream-test")
            .env("OCL_ICD_FILENAMES", "")
            .output()
            .expect("binary runs");
        (o.status.code(), stderr(&o))
    };
    for (args, says) in [
        (
            &["bench", "gather", "--pieces", "4"][..],
            "--api both: OpenCL is not usable here",
        ),
        (
            &["bench", "latency", "--samples", "3"][..],
            "--api both: OpenCL is not usable here",
        ),
        (
            &["bench", "latency", "--api", "opencl", "--samples", "3"][..],
            "--api opencl: OpenCL is not usable here",
        ),
    ] {
        let (code, err) = no_platform(args);
        if code == Some(0) {
            // A loader that ignores OCL_ICD_VENDORS (the CUDA toolkit's) still lists its
            // platforms: nothing to check there.
            common::skip("this OpenCL loader ignores OCL_ICD_VENDORS (the CUDA toolkit's)");
            return;
        }
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
