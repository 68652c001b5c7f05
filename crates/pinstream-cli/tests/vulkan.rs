//! Every command that takes `--api vulkan`, on the machine's Vulkan device (lavapipe in CI:
//! `mesa-vulkan-drivers`). Without Vulkan these tests fail, saying what to install: they are
//! never skipped.

mod common;

use common::{clean_exit, fresh_dir, pinstream, stderr};
use pinstream::engine::kernels::mix_u32_ref;
use std::process::Output;

/// Standard output as text, after checking the command succeeded.
fn ok(o: &Output) -> String {
    clean_exit(o);
    let err = stderr(o);
    assert!(
        !err.contains("Vulkan is not usable here"),
        "these tests need a Vulkan device: apt-get install mesa-vulkan-drivers (lavapipe): {err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).expect("a JSON report")
}

#[test]
fn devices_lists_the_vulkan_device() {
    let text = ok(&pinstream(&["devices", "--api", "vulkan"]));
    assert!(text.starts_with("Vulkan devices:"), "{text}");
    let j = json(&pinstream(&["devices", "--api", "vulkan", "--json"]));
    let d = &j["devices"][0];
    assert_eq!(d["api"], "Vulkan");
    assert!(d["max_alloc"].as_u64().unwrap() > 0, "{j}");
}

#[test]
fn bench_measures_every_vulkan_pinning() {
    let j = json(&pinstream(&[
        "bench",
        "--api",
        "vulkan",
        "--sizes",
        "64KiB,256KiB",
        "--repeat",
        "1",
        "--json",
    ]));
    let names: Vec<&str> = j["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"host-visible"), "{names:?}");
    for s in j["strategies"].as_array().unwrap() {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["points"].as_array().unwrap().len(), 2, "{s}");
    }
    for flag in [
        &["--latency"][..],
        &["--gather"],
        &["--strategy", "register"],
    ] {
        let mut args = vec!["bench", "--api", "vulkan"];
        args.extend_from_slice(flag);
        let o = pinstream(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let want = format!("{} does not apply with --api vulkan", flag[0]);
        assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    }
}

#[test]
fn demo_checks_both_workloads_through_vulkan() {
    let j = json(&pinstream(&[
        "demo", "--api", "vulkan", "--size", "8MiB", "--json",
    ]));
    assert_eq!(j["device"]["api"], "Vulkan");
    for w in j["workloads"].as_array().unwrap() {
        assert_eq!(w["mismatches"], 0, "{w}");
        assert!(w["checked"].as_u64().unwrap() > 0, "{w}");
    }
}

#[test]
fn doctor_measures_through_vulkan() {
    let text = ok(&pinstream(&["doctor", "--api", "vulkan", "--size", "4MiB"]));
    assert!(text.contains("host-visible"), "{text}");
}

#[test]
fn run_streams_a_file_through_a_wgsl_kernel() {
    let d = fresh_dir("vulkan", "run");
    let n = 300_000u32;
    let input: Vec<u8> = (0..n).flat_map(|i| (i ^ 0x5a5a).to_ne_bytes()).collect();
    let (inp, out) = (d.join("in.bin"), d.join("out.bin"));
    std::fs::write(&inp, &input).unwrap();
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    ok(&pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        kernel,
        "--entry",
        "mix_u32",
        "--input",
        inp.to_str().unwrap(),
        "--dtype",
        "u32",
        "--output",
        out.to_str().unwrap(),
        "--block",
        "256KiB",
    ]));
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), input.len());
    for (i, v) in got.chunks(4).enumerate() {
        let v = u32::from_ne_bytes(v.try_into().unwrap());
        assert_eq!(v, mix_u32_ref(i as u32 ^ 0x5a5a, i as u64), "element {i}");
    }
}

#[test]
fn a_wgsl_mistake_is_refused_with_its_line() {
    let d = fresh_dir("vulkan", "bad");
    let k = d.join("bad.wgsl");
    std::fs::write(
        &k,
        "@compute @workgroup_size(64)\nfn k() { let a: u32 = 1.5; }\n",
    )
    .unwrap();
    let o = pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        k.to_str().unwrap(),
        "--entry",
        "k",
        "--synthetic",
        "1MiB",
        "--dtype",
        "u32",
    ]);
    clean_exit(&o);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains(":2:"), "{}", stderr(&o));
}

#[test]
fn no_vulkan_driver_names_what_to_install() {
    let o = std::process::Command::new(common::bin())
        .args(["devices", "--api", "vulkan"])
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("mesa-vulkan-drivers"), "{}", stderr(&o));
}

#[test]
fn run_refuses_the_flags_vulkan_would_ignore() {
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    for flag in [
        ["--strategy", "register"],
        ["--wait", "sleep"],
        ["--numa", "on"],
    ] {
        let mut args = vec![
            "run",
            "--api",
            "vulkan",
            "--kernel",
            kernel,
            "--entry",
            "mix_u32",
            "--synthetic",
            "1MiB",
            "--dtype",
            "u32",
        ];
        args.extend_from_slice(&flag);
        let o = pinstream(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{} does not apply with --api vulkan", flag[0])),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn a_work_group_size_the_kernel_does_not_declare_is_refused() {
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    let o = pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        kernel,
        "--entry",
        "mix_u32",
        "--synthetic",
        "1MiB",
        "--dtype",
        "u32",
        "--local",
        "128",
    ]);
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("declares @workgroup_size(256)"),
        "{}",
        stderr(&o)
    );
}
