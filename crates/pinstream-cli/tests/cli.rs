//! The real binary: listings, doctor, and every bad-input class with its message.

mod common;

use common::{bin, pinstream, stderr};
use std::process::Command;

/// Asserts a failure with a non-zero exit code whose message contains every `needle`.
fn fails_with(args: &[&str], needles: &[&str]) {
    let o = pinstream(args);
    let err = stderr(&o);
    assert!(
        !o.status.success(),
        "{args:?} succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
}

#[test]
fn devices_lists_strategies_and_json_parses() {
    let o = pinstream(&["devices"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("strategies: register"), "{text}");
    assert!(text.contains("(default)"));
    // Mapped memory's mechanism, or why there is none, for every device.
    let devices = text.matches("  device ").count();
    let mapped = text.matches("    mapped memory (kernels read host memory in place): ");
    assert_eq!(mapped.count(), devices, "{text}");
    let o = pinstream(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let first = &v["devices"][0];
    assert!(first["max_alloc"].as_u64().unwrap() > 0);
    assert!(first["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "pageable"));
    assert!(first["auto_reason"].as_str().unwrap().len() > 10);
    let zero_copy = first["zero_copy"].as_str().map_or(0, str::len);
    assert!(zero_copy > 0 || first["zero_copy"].is_null(), "{first}");
    assert!(
        first["zero_copy_note"].as_str().unwrap().len() > 10,
        "{first}"
    );
}

#[test]
fn doctor_measures_every_strategy_and_checks_data() {
    let o = pinstream(&[
        "doctor",
        "--size",
        "48MiB",
        "--block",
        "16MiB",
        "--max-chunk",
        "32MiB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["strategies"].as_array().unwrap();
    assert!(list.len() >= 4, "{v}");
    for s in list {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["verified_bytes"], 48 << 20, "{s}");
        assert_eq!(s["mismatched_bytes"], 0, "{s}");
        assert!(s["h2d"]["wall_gbps"].as_f64().unwrap() > 0.0);
        assert!(s["both"]["events_gbps"].as_f64().unwrap() > 0.0);
        assert_eq!(s["chunks"], 2, "48 MiB in chunks of at most 32 MiB: {s}");
    }
    assert!(v["recommendation"].is_string());
    // Mapped memory: a kernel's read and write of all 48 MiB across the bus, checked on the
    // host, and its VRAM cost where a counter exists (never a copy of it in VRAM).
    let m = &v["mapped"];
    assert!(m["unavailable"].is_null(), "{m}");
    assert!(m["mechanism"].is_string(), "{m}");
    assert_eq!(
        (m["bytes"].as_u64(), m["verified"].as_bool()),
        (Some(48 << 20), Some(true))
    );
    for way in ["read_gbps", "write_gbps"] {
        let g = m[way].as_f64().unwrap();
        assert!(g > 0.0 && g < 10_000.0, "{way}: {m}");
    }
    match m["vram_cost"].as_i64() {
        Some(cost) => assert!(cost < 48 << 20, "the table stays in host memory: {m}"),
        None => assert!(m["vram_cost"].is_null(), "{m}"),
    }
}

#[test]
fn doctor_prints_a_table_and_a_recommendation() {
    let o = pinstream(&[
        "doctor",
        "--size",
        "8MiB",
        "--block",
        "4MiB",
        "--strategy",
        "auto",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("strategy") && text.contains("VRAM cost") && text.contains("round trip"),
        "{text}"
    );
    assert!(text.contains("8 MiB ok"), "{text}");
    assert!(
        text.contains("\nmapped memory (kernels read host memory in place): "),
        "{text}"
    );
    assert!(
        text.contains(", 8 MiB): a kernel reads it across the bus at ")
            && text.contains("checked against the CPU); VRAM cost "),
        "{text}"
    );
    // Where a VRAM counter measures each strategy (NVML on the H200), 1% of an 8 MiB region is
    // below the driver's fixed cost per registration (+0.01 GiB whatever the size, gpu-facts.md)
    // and the counter's noise: "none" is then a verdict the table must explain. Without a
    // counter (PoCL) the choice is measured.
    let explained = text.contains("VRAM counter: NVML")
        && text.contains("recommendation: none: ")
        && text.contains("of VRAM on this driver");
    assert!(
        text.contains("recommendation: --strategy") || explained,
        "{text}"
    );
}

/// With every pin over 20 MiB failing (`PINSTREAM_INJECT_FAULT=pin:BYTES`, as a too-large
/// pin fails under WDDM or RLIMIT_MEMLOCK), doctor reports each pinning strategy's failure
/// with the largest size that pinned, the platform's limit and what to do.
#[test]
fn doctor_searches_for_the_largest_pin_after_a_failed_one() {
    let o = Command::new(bin())
        .args([
            "doctor", "--size", "64MiB", "--block", "16MiB", "--repeat", "1", "--json",
        ])
        .env("PINSTREAM_INJECT_FAULT", format!("pin:{}", 20 << 20))
        .output()
        .unwrap();
    common::clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let found = "the largest size that pinned, searching down from 64 MiB: ";
    let driver_limit = if cfg!(windows) {
        "WDDM"
    } else {
        "driver's own limit"
    };
    let mut driver_strategies = 0;
    for s in v["strategies"].as_array().unwrap() {
        let (name, error) = (s["strategy"].as_str().unwrap(), s["error"].as_str());
        match name {
            "pageable" => assert!(error.is_none(), "pageable pins nothing: {s}"),
            "mlock" => {
                let e = error.unwrap();
                let limit = if cfg!(windows) {
                    "ERROR_WORKING_SET_QUOTA"
                } else {
                    "RLIMIT_MEMLOCK"
                };
                assert!(
                    e.contains(limit) && e.contains("driver-pinning strategy"),
                    "{e}"
                );
                assert!(e.contains(found) || e.contains("nothing of 1 MiB"), "{e}");
            }
            _ => {
                let e = error.unwrap();
                assert!(e.contains("CL_OUT_OF_RESOURCES"), "{e}");
                assert!(e.contains(&format!("{found}20 MiB.")), "{e}");
                assert!(
                    e.contains(driver_limit) && e.contains("stream through a ring"),
                    "{e}"
                );
                driver_strategies += 1;
            }
        }
        assert!(s["verdict"].as_str().unwrap().starts_with("failed") == error.is_some());
    }
    assert!(
        driver_strategies >= 2,
        "register and alloc-host-ptr at least: {v}"
    );
}

#[test]
fn unknown_strategy() {
    fails_with(
        &["doctor", "--strategy", "pinned"],
        &["unknown strategy `pinned`", "register", "nv-host"],
    );
}

#[test]
fn zero_size() {
    fails_with(
        &["doctor", "--size", "0"],
        &["size must be greater than 0", "--size"],
    );
}

#[test]
fn unparsable_size() {
    fails_with(
        &["doctor", "--size", "12XB"],
        &["invalid size `12XB`", "256MiB"],
    );
    fails_with(&["doctor", "--block", "lots"], &["invalid size `lots`"]);
}

#[test]
fn size_above_available_memory() {
    fails_with(
        &["doctor", "--size", "64TiB"],
        &["exceeds the ", "choose a smaller size"],
    );
}

#[test]
fn block_above_max_allocation() {
    fails_with(
        &["doctor", "--size", "8MiB", "--block", "64TiB"],
        &["block size", "max allocation", "--block"],
    );
}

#[test]
fn forced_strategy_the_driver_lacks() {
    let o = pinstream(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let dev = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["default"] == true)
        .unwrap();
    let missing = ["nv-host", "intel-usm"]
        .into_iter()
        .find(|s| !dev["strategies"].as_array().unwrap().iter().any(|x| x == s))
        .expect("the test device lacks nv-host or intel-usm");
    fails_with(
        &["doctor", "--size", "1MiB", "--strategy", missing],
        &["is not available", "pinstream devices"],
    );
    // demo has no check of its own: the library's refusal, with the CLI's fix added.
    fails_with(
        &["demo", "--size", "1MiB", "--strategy", missing],
        &["is not available", "pinstream devices", "--strategy auto"],
    );
}

#[test]
fn device_index_out_of_range() {
    fails_with(
        &["doctor", "--device", "99"],
        &["device index 99 is out of range", "pinstream devices"],
    );
}

/// `mlock` under an 8 MiB RLIMIT_MEMLOCK: root ignores the limit (CAP_IPC_LOCK), so as root
/// the test drops to user `nobody` as the GPU script does.
#[cfg(unix)] // prlimit and RLIMIT_MEMLOCK; Windows' limit is the working set (backend/os/windows.rs)
#[test]
fn mlock_over_the_memlock_limit() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    // User nobody may not reach the build folder (CI clones under /root): run a copy in /tmp.
    let copy = std::env::temp_dir().join(format!("pinstream-nobody-{}", std::process::id()));
    std::fs::copy(bin(), &copy).unwrap();
    // The copy is as large as the binary (~115 MiB): removed when the test ends, passed or not.
    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _removed = Removed(copy.clone());
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let bin = copy.to_str().unwrap();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--memlock=8388608:8388608", "--"]);
    if root {
        cmd.args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ]);
    }
    cmd.args([
        bin,
        "doctor",
        "--size",
        "64MiB",
        "--block",
        "16MiB",
        "--strategy",
        "mlock",
    ]);
    cmd.env(
        "POCL_CACHE_DIR",
        std::env::temp_dir().join("pinstream-pocl-nobody"),
    );
    let o = cmd.output().expect("prlimit (util-linux) runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "doctor runs and reports the failure per strategy: {}",
        stderr(&o)
    );
    for needle in [
        "RLIMIT_MEMLOCK is 8 MiB",
        "ulimit -l",
        "register",
        "does not count against RLIMIT_MEMLOCK",
    ] {
        assert!(out.contains(needle), "`{needle}` not in: {out}");
    }
    // Forced through the library path the same message is an error for the user.
    let o = Command::new("prlimit")
        .args(["--memlock=8388608:8388608", "--"])
        .args(if root {
            vec![
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]
        } else {
            vec![]
        })
        .args([
            bin,
            "doctor",
            "--size",
            "64MiB",
            "--block",
            "16MiB",
            "--strategy",
            "register",
            "--json",
        ])
        .env(
            "POCL_CACHE_DIR",
            std::env::temp_dir().join("pinstream-pocl-nobody"),
        )
        .output()
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    assert!(
        v["strategies"][0]["error"].is_null(),
        "register needs no memlock allowance: {v}"
    );
}

#[test]
fn output_folder_missing() {
    fails_with(
        &[
            "doctor",
            "--size",
            "1MiB",
            "--save",
            "/nonexistent-dir/x.json",
        ],
        &["cannot write /nonexistent-dir/x.json", "does not exist"],
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "OCL_ICD_VENDORS is the Linux ICD loader's; Windows' loader reads the registry, and under Wine a child's variables do not reach the host loader"
)]
fn no_opencl_platform() {
    let empty = std::env::temp_dir().join(format!("pinstream-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = Command::new(bin())
        .arg("devices")
        .env("OCL_ICD_VENDORS", &empty)
        // The GPU machine's environment lists ICDs by name too (PoCL and NVIDIA's).
        .env_remove("OCL_ICD_FILENAMES")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("lists no platform") && err.contains("apt-get install pocl-opencl-icd"),
        "{err}"
    );
}

/// Without the `cuda` feature, `devices --api cuda` and `doctor --api cuda` say how to get it,
/// exiting 1 as `run --api cuda` does (with it, `tests/cuda.rs` covers them).
#[cfg(not(feature = "cuda"))]
#[test]
fn devices_and_doctor_api_cuda_without_the_feature_name_the_build() {
    for args in [
        &["devices", "--api", "cuda"][..],
        &["doctor", "--api", "cuda", "--size", "1MiB"],
    ] {
        let o = pinstream(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("--api cuda: this pinstream was built without the `cuda` cargo feature"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// `--version` names the build: version, the commit checked out here, and each backend
/// (CUDA with its API version where built, what to pass where not). `-V`: the version alone.
#[test]
fn version_names_the_commit_and_the_backends() {
    let o = pinstream(&["--version"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // build.rs sets PINSTREAM_COMMIT for the tests too: from this checkout, 12 hex digits.
    let commit = env!("PINSTREAM_COMMIT");
    assert!(
        commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "commit {commit:?}"
    );
    // (Not compared with `git rev-parse HEAD` here: the tests also run from a bundle built
    // elsewhere, scripts/gpu-tests.sh, whose tree's HEAD is not the build's.)
    let lines = [
        format!("pinstream {}", env!("CARGO_PKG_VERSION")),
        format!("commit: {commit}"),
    ];
    for line in &lines {
        assert!(out.lines().any(|l| l == line), "no `{line}` in: {out}");
    }
    let cuda = match (cfg!(feature = "cuda"), cfg!(feature = "cuda-13000")) {
        (true, true) => "backends: opencl, cuda (CUDA API 13.0)",
        (true, false) => "backends: opencl, cuda (CUDA API ",
        (false, _) => "backends: opencl, cuda not built (--features cuda)",
    };
    assert!(
        out.lines().any(|l| l.starts_with(cuda)),
        "no `{cuda}` in: {out}"
    );
    let vulkan = match cfg!(feature = "vulkan") {
        true => ", vulkan",
        false => ", vulkan not built (--features vulkan)",
    };
    assert!(
        out.lines()
            .any(|l| l.starts_with("backends: ") && l.ends_with(vulkan)),
        "no `{vulkan}` at the end of the backends in: {out}"
    );
    let short = pinstream(&["-V"]);
    assert_eq!(String::from_utf8_lossy(&short.stdout).trim(), lines[0]);
}
