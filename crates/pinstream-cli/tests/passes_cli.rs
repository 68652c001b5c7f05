//! `run --passes/--residency` and `demo --passes` through the real binary (issue 36): the
//! result of N runs in a row, the resident blocks and each pass's bytes in the report, and
//! the refusals.

use std::path::{Path, PathBuf};
mod common;

use common::{pinstream, refused_with};

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor + (float)block;
}
"#;

/// 50,000 floats in blocks of 16 KiB: 13 blocks.
const N: usize = 50_000;
const BLOCK_ELEMS: usize = (16 << 10) / 4;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A kernel and an input of `N` floats `i` in a fresh folder: (kernel, input, output).
fn files(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let d = common::fresh_dir("passes", name);
    let (k, input) = (d.join("k.cl"), d.join("in.bin"));
    std::fs::write(&k, SCALE).unwrap();
    let bytes: Vec<u8> = (0..N).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(&input, bytes).unwrap();
    (k, input, d.join("out.bin"))
}

/// `run` of `scale` (factor 2) in place over the input, with `more` flags (`--json` for
/// the report as JSON).
fn run_scale(name: &str, more: &[&str]) -> (std::process::Output, PathBuf) {
    run_scale_with(name, more, &[])
}

/// As [`run_scale`], with the environment variables `env`.
fn run_scale_with(
    name: &str,
    more: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, PathBuf) {
    let (k, input, out) = files(name);
    let mut args = vec![
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
        "16KiB",
        "--vram-budget",
        "256KiB",
    ];
    args.extend(more);
    let mut command = std::process::Command::new(common::bin());
    command.args(&args).envs(env.iter().copied());
    (command.output().expect("binary runs"), out)
}

/// Element `i` after `passes` runs of `scale` in a row.
fn want(i: usize, passes: usize) -> f32 {
    let block = (i / BLOCK_ELEMS) as f32;
    (0..passes).fold(i as f32, |x, _| x * 2.0 + block)
}

#[test]
fn run_passes_give_n_runs_in_a_row_and_count_each_pass() {
    for residency in ["auto", "off", "64KiB"] {
        let (o, out) = run_scale(
            residency,
            &["--passes", "3", "--residency", residency, "--json"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = std::fs::read(&out).unwrap();
        for (i, c) in got.chunks(4).enumerate() {
            let v = f32::from_le_bytes(c.try_into().unwrap());
            assert_eq!(v, want(i, 3), "element {i}, --residency {residency}");
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let st = &v["stream"];
        assert_eq!(st["passes"], 3);
        let kept = st["residency"]["blocks"].as_u64().unwrap();
        let passes = st["pass_bytes"].as_array().unwrap();
        assert_eq!(passes.len(), 3);
        let all = (N * 4) as u64;
        let h2d = |p: usize| passes[p]["h2d"].as_u64().unwrap();
        assert_eq!(h2d(0), all, "the first pass uploads every block");
        match residency {
            "off" => assert_eq!((kept, h2d(1)), (0, all)),
            _ => {
                assert!(kept > 0, "{st}");
                assert!(h2d(1) < all && h2d(1) == h2d(2), "{st}");
            }
        }
        if residency == "64KiB" {
            // 64 KiB holds exactly 64 KiB of slots' worth of blocks: on PoCL (a CPU device,
            // the bounds guard on) a guarded block takes 32 KiB, so 2, where auto would take
            // the 4 the budget leaves; on a GPU (no guard) 16 KiB, so 4.
            let slot = st["residency"]["reason"]["slot"].as_u64().unwrap();
            assert_eq!(kept, 65536 / slot, "{st}");
            assert_eq!(st["residency"]["reason"]["asked"], true, "{st}");
        }
    }
}

#[test]
fn run_passes_text_report_says_what_stayed_resident() {
    let (o, _) = run_scale("text", &["--passes", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 passes; resident blocks: "), "{text}");
    assert!(text.contains("of 13 blocks resident"), "{text}");
    assert!(text.contains("pass 2: "), "{text}");
}

#[test]
fn zero_passes_and_a_bad_residency_are_refused() {
    let (k, input, _) = files("refused");
    let base = [
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        s(&input),
    ];
    let with = |more: &[&'static str]| [&base[..], more].concat();
    refused_with(&with(&["--passes", "0"]), "--passes");
    refused_with(&with(&["--residency", "most"]), "not auto, off or a size");
}

#[test]
fn more_passes_than_a_run_counts_are_refused_with_the_most_that_fit() {
    for passes in ["18446744073709551615", "4000000000"] {
        let (o, out) = run_scale("many", &["--passes", passes]);
        let err = common::stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains("more steps than one run counts"), "{err}");
        assert!(
            err.contains("at most ") && err.contains(" passes over these blocks"),
            "{err}"
        );
        assert!(!out.exists(), "nothing written");
    }
}

#[test]
fn more_residency_than_the_budget_leaves_names_the_fix() {
    let (o, out) = run_scale("above", &["--passes", "2", "--residency", "10MiB"]);
    let err = common::stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("of resident blocks asked for"), "{err}");
    assert!(
        err.contains("pass --residency") && err.contains("or less"),
        "{err}"
    );
    assert!(err.contains("raise --vram-budget"), "{err}");
    assert!(!out.exists(), "no output is written");
}

#[test]
fn demo_passes_check_themselves() {
    let o = pinstream(&[
        "demo",
        "--size",
        "8MiB",
        "--block",
        "1MiB",
        "--vram-budget",
        "6MiB",
        "--passes",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for w in v["workloads"].as_array().unwrap() {
        assert_eq!(w["mismatches"], 0, "{w}");
        assert_eq!(w["stream"]["passes"], 3, "{w}");
        assert!(
            w["stream"]["residency"]["blocks"].as_u64().unwrap() > 0,
            "{w}"
        );
    }
    refused_with(
        &["demo", "--workload", "embedding", "--passes", "2"],
        "--passes",
    );
}

#[test]
fn a_fault_in_a_later_pass_stops_the_run_and_writes_nothing() {
    // Kernel 0 is the warm-up; 13 blocks a pass, so kernel 20 is the seventh of pass 2: block
    // 6 with every block streamed. With resident blocks a later pass spreads them among the
    // streamed ones, so the seventh kernel is another block's, still of pass 2.
    let fault = [("PINSTREAM_INJECT_FAULT", "kernel:20")];
    for (residency, block) in [("off", Some(6)), ("auto", None)] {
        let name = format!("fault-{residency}");
        let more = ["--passes", "3", "--residency", residency];
        let (o, out) = run_scale_with(&name, &more, &fault);
        common::clean_exit(&o);
        let err = common::stderr(&o);
        assert!(!o.status.success(), "{err}");
        let named = (err.split("error: block ").nth(1))
            .and_then(|e| e.split_once(" in pass 2 (kernel)"))
            .and_then(|(b, _)| b.parse::<usize>().ok());
        match block {
            Some(b) => assert_eq!(named, Some(b), "{err}"),
            None => assert!(named.is_some_and(|b| b < 13), "{err}"),
        }
        assert!(!out.exists(), "no output is written");
    }
}

#[test]
fn run_passes_from_storage_give_n_runs_in_a_row_and_read_what_the_host_tier_does_not_hold() {
    let all = (N * 4) as u64;
    // off: every pass reads everything; 64 KiB: 4 blocks of 16 KiB stay in host memory;
    // auto: this machine's room holds all 200 kB.
    for (tier, held) in [("off", 0), ("64KiB", 4 * (16 << 10)), ("auto", all)] {
        for passes in [1usize, 2, 3] {
            let p = passes.to_string();
            let name = format!("storage-{tier}-{passes}");
            // No VRAM tier: every block not in the host tier is read every pass.
            let more = [
                "--passes",
                &p,
                "--from-storage",
                "on",
                "--host-tier",
                tier,
                "--residency",
                "off",
                "--json",
            ];
            let (o, out) = run_scale(&name, &more);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let got = std::fs::read(&out).unwrap();
            assert_eq!(got.len(), N * 4);
            for (i, c) in got.chunks(4).enumerate() {
                let v = f32::from_le_bytes(c.try_into().unwrap());
                assert_eq!(v, want(i, passes), "element {i}, {passes} passes, {tier}");
            }
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let st = &v["storage"];
            assert_eq!(st["mode"], "storage", "{v}");
            assert_eq!(v["stream"]["passes"], passes);
            let bytes = |k: &str| -> Vec<u64> {
                let a = st[k].as_array().unwrap_or_else(|| panic!("{k}: {v}"));
                a.iter().map(|b| b.as_u64().unwrap()).collect()
            };
            let held = if passes > 1 { held } else { 0 };
            let mut reads = vec![all - held; passes];
            let mut served = vec![held; passes];
            (reads[0], served[0]) = (all, 0);
            assert_eq!(bytes("pass_read_bytes"), reads, "{tier}, {passes} passes");
            assert_eq!(bytes("pass_host_bytes"), served, "{tier}, {passes} passes");
            // In place, each pass writes back the blocks the disk holds; the host tier's go
            // back once, with the last pass (one pass: every block).
            let mut writes = vec![all - held; passes];
            writes[passes - 1] = all;
            assert_eq!(
                bytes("pass_written_bytes"),
                writes,
                "{tier}, {passes} passes"
            );
            assert_eq!(st["written_bytes"], writes.iter().sum::<u64>(), "{v}");
            if passes > 1 {
                let plan = &st["plan"];
                assert_eq!(plan["host_bytes"], held, "{v}");
                assert_eq!(plan["later_pass_storage_bytes"], all - held, "{v}");
                let blocks = (held as usize).div_ceil(16 << 10);
                assert_eq!(plan["host_blocks"], blocks, "{v}");
                let floor = &plan["floor"];
                let bound = floor["bound"].as_str().unwrap_or_else(|| panic!("{v}"));
                assert!(
                    ["storage", "host to device", "device to host"].contains(&bound),
                    "{v}"
                );
                assert_eq!(floor["measured_s"].as_array().unwrap().len(), passes - 1);
                let f = |k: &str| floor[k].as_f64().unwrap();
                assert!(f("h2d_gbps") > 0.0 && f("d2h_gbps") > 0.0, "{v}");
                assert!(f("storage_write_gbps") > 0.0, "{v}");
                // Each later pass's own floor is at least what the plan's links imply of it.
                let own = floor["pass_floor_s"].as_array().unwrap();
                assert_eq!(own.len(), passes - 1, "{v}");
                let least = f("storage_s").max(f("storage_write_s")).max(f("h2d_s"));
                for s in own {
                    assert!(s.as_f64().unwrap() >= least * 0.999, "{v}");
                }
                // Every byte comes from the tier: the disk's floor is 0, never the bound.
                if held == all {
                    assert_eq!(f("storage_s"), 0.0, "{v}");
                    assert_ne!(bound, "storage", "{v}");
                }
            }
            // No pass's file stays beside the output.
            let left = std::fs::read_dir(out.parent().unwrap()).unwrap().count();
            assert_eq!(left, 3, "kernel, input and output only");
        }
    }
    let dir = std::env::temp_dir().join(format!("pinstream-passes-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let more = [
        "--passes",
        "2",
        "--from-storage",
        "on",
        "--host-tier",
        "64KiB",
        "--residency",
        "off",
        "--trace",
        s(&trace),
    ];
    let (o, _) = run_scale("storage-text", &more);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("plan: 2 pass(es); VRAM tier none (off)"),
        "{text}"
    );
    assert!(
        text.contains("host tier 64 KiB (4 leading blocks)"),
        "{text}"
    );
    assert!(text.contains("resident blocks: off"), "{text}");
    assert!(text.contains("storage read per pass: pass 1 "), "{text}");
    assert!(
        text.contains("host tier per pass: pass 1 0 B, pass 2 64 KiB"),
        "{text}"
    );
    assert!(
        text.contains("floor per later pass at this run's rates: storage "),
        "{text}"
    );
    assert!(text.contains("storage write per pass: pass 1 "), "{text}");
    assert!(text.contains("against each pass's own floor"), "{text}");
    // The trace says where each upload's block came from: the tier holds blocks 0-3.
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let names: Vec<&str> = (t["traceEvents"].as_array().unwrap().iter())
        .filter(|e| e["cat"] == "upload")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for want in [
        "upload 0 (storage)",
        "upload 0 pass 2 (host tier)",
        "upload 3 pass 2 (host tier)",
        "upload 4 pass 2 (storage)",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn compare_passes_streams_every_workload_n_times_through_each_api() {
    for (passes, residency) in [("1", "auto"), ("3", "off"), ("3", "auto")] {
        let o = std::process::Command::new(common::bin())
            .args([
                "compare",
                "--size",
                "8MiB",
                "--vram-budget",
                "8MiB",
                "--sizes",
                "1MiB",
            ])
            .args(["--repeat", "1", "--point-repeats", "1", "--json"])
            .args(["--passes", passes, "--residency", residency])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        // A wrong result of any pass fails the comparison (checked against the CPU).
        assert!(o.status.success(), "{passes} passes, {residency}: {err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["config"]["passes"].to_string(), passes, "{v}");
        assert_eq!(v["config"]["residency"], residency, "{v}");
        for w in ["in_place", "gemv"] {
            let g = v["opencl"][w][0].as_f64().unwrap_or(0.0);
            assert!(g > 0.0, "{w}: {v}");
        }
    }
    let o = std::process::Command::new(common::bin())
        .args(["compare", "--passes", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// The numbers of a JSON array.
fn numbers(v: &serde_json::Value) -> Vec<u64> {
    let a = v.as_array().unwrap_or_else(|| panic!("not an array: {v}"));
    a.iter().map(|b| b.as_u64().unwrap()).collect()
}

#[test]
fn run_passes_from_storage_keep_the_last_blocks_in_vram_and_the_plan_says_so() {
    let all = (N * 4) as u64;
    for residency in ["off", "auto", "32KiB"] {
        for tier in ["off", "64KiB"] {
            for passes in [1usize, 2, 5] {
                let p = passes.to_string();
                let name = format!("vram-{residency}-{tier}-{passes}");
                let more = ["--passes", &p, "--from-storage", "on", "--json"];
                let more = [&more[..], &["--residency", residency, "--host-tier", tier]].concat();
                let (o, out) = run_scale(&name, &more);
                let what = format!("--residency {residency}, --host-tier {tier}, {passes} passes");
                assert!(o.status.success(), "{what}: {}", common::stderr(&o));
                let got = std::fs::read(&out).unwrap();
                assert_eq!(got.len(), N * 4, "{what}");
                for (i, c) in got.chunks(4).enumerate() {
                    let v = f32::from_le_bytes(c.try_into().unwrap());
                    assert_eq!(v, want(i, passes), "{what}: element {i}");
                }
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                let (st, plan) = (&v["stream"], &v["storage"]["plan"]);
                let kept = st["residency"]["blocks"].as_u64().unwrap();
                let moved = st["pass_bytes"].as_array().unwrap();
                let h2d: Vec<u64> = moved.iter().map(|m| m["h2d"].as_u64().unwrap()).collect();
                let d2h: Vec<u64> = moved.iter().map(|m| m["d2h"].as_u64().unwrap()).collect();
                if passes == 1 {
                    assert_eq!((kept, h2d[0], d2h[0]), (0, all, all), "{what}: {v}");
                    continue;
                }
                // The plan before the run is what the run kept and moved.
                assert_eq!(plan["vram_blocks"], kept, "{what}: {v}");
                let on_device = plan["vram_bytes"].as_u64().unwrap();
                let held = plan["host_bytes"].as_u64().unwrap();
                match residency {
                    "off" => assert_eq!(kept, 0, "{what}"),
                    // A 32 KiB slot on PoCL (the bounds guard on), 16 KiB on a GPU.
                    "32KiB" => assert!(kept == 1 || kept == 2, "{what}: {v}"),
                    // A CPU device (PoCL) keeps no VRAM tier by default: its memory is the
                    // host's, where the host tier keeps blocks.
                    _ => {
                        let cpu = plan["vram_cpu"] == true;
                        assert!(kept > 0 || cpu, "{what}: {v}");
                        let why = st["residency"].to_string();
                        assert_eq!(why.contains("cpu_device"), cpu, "{what}: {v}");
                    }
                }
                if kept > 0 {
                    // The last blocks: 13 blocks of 16 KiB, the last 3392 bytes.
                    assert_eq!(on_device, (kept - 1) * (16 << 10) + 3392, "{what}");
                }
                // The host tier keeps leading whole blocks of 16 KiB, at most the blocks the
                // VRAM tier leaves (on a GPU auto keeps nearly all of them in VRAM).
                let host = if tier == "off" {
                    0
                } else {
                    (64 << 10).min((13 - kept) * (16 << 10))
                };
                assert_eq!(held, host, "{what}: no block is in two tiers");
                let mut reads = vec![all - held - on_device; passes];
                let mut served = vec![held; passes];
                (reads[0], served[0]) = (all, 0);
                assert_eq!(numbers(&v["storage"]["pass_read_bytes"]), reads, "{what}");
                assert_eq!(numbers(&v["storage"]["pass_host_bytes"]), served, "{what}");
                assert_eq!(plan["later_pass_storage_bytes"], all - held - on_device);
                let mut up = vec![all - on_device; passes];
                up[0] = all;
                assert_eq!(h2d, up, "{what}: a VRAM block is uploaded once");
                let mut down = vec![all - on_device; passes];
                down[passes - 1] = all;
                assert_eq!(
                    d2h, down,
                    "{what}: and downloaded once, after the last pass"
                );
                assert_eq!(plan["pass_h2d_bytes"], all - on_device, "{what}");
                assert_eq!(plan["pass_d2h_bytes"], all - on_device, "{what}");
                let left = std::fs::read_dir(out.parent().unwrap()).unwrap().count();
                assert_eq!(left, 3, "{what}: kernel, input and output only");
            }
        }
    }
}

/// Three passes from storage with a VRAM tier of 32 KiB.
const THREE_WITH_32K: [&str; 6] = [
    "--passes",
    "3",
    "--from-storage",
    "on",
    "--residency",
    "32KiB",
];

#[test]
fn run_passes_from_storage_text_names_the_vram_tier_and_its_kernels() {
    let dir = common::fresh_dir("passes", "vram-trace-dir");
    let trace = dir.join("trace.json");
    // 32 KiB: block 12 (a guarded block's slot on PoCL), or blocks 11 and 12 (a GPU's).
    let more = [
        &THREE_WITH_32K[..],
        &["--host-tier", "64KiB", "--trace", s(&trace)],
    ]
    .concat();
    let (o, _) = run_scale("vram-text", &more);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("plan: 3 pass(es); VRAM tier "), "{text}");
    assert!(text.contains(" of 13 blocks, "), "{text}");
    assert!(
        text.contains("host tier 64 KiB (4 leading blocks)"),
        "{text}"
    );
    assert!(text.contains(" of 13 blocks resident ("), "{text}");
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let names: Vec<&str> = (t["traceEvents"].as_array().unwrap().iter())
        .filter_map(|e| e["name"].as_str())
        .collect();
    // Block 12, the last, stays in VRAM: its kernels in passes 2 and 3 say so, with no
    // upload; block 0 comes from the host tier.
    for want in [
        "upload 12 (storage)",
        "kernel 12 pass 2 (VRAM tier)",
        "kernel 12 pass 3 (VRAM tier)",
        "upload 0 pass 3 (host tier)",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("upload 12 pass")),
        "{names:?}"
    );
}

#[test]
fn a_fault_in_a_later_pass_from_storage_leaves_no_output_and_no_pass_file() {
    // Each pass is a run of its own, with its warm-up kernel: kernel 20 is in pass 2, with
    // the last block or two in the VRAM tier.
    let fault = [("PINSTREAM_INJECT_FAULT", "kernel:20")];
    let (o, out) = run_scale_with("vram-fault", &THREE_WITH_32K, &fault);
    common::clean_exit(&o);
    let err = common::stderr(&o);
    assert!(!o.status.success(), "{err}");
    // The pass is the run's, not the pass's own run's (which counts from the first again).
    assert!(err.contains(" in pass 2 (kernel)"), "{err}");
    assert!(!out.exists(), "no output is written");
    let left = std::fs::read_dir(out.parent().unwrap()).unwrap().count();
    assert_eq!(left, 2, "kernel and input only: {err}");
}
