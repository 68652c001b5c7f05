//! Messages that name the real fix for the command at hand (issue 21, class 9 and 13): only
//! flags the command takes, the driver's real state, the flag that is too small, the device
//! that timed out; no colour where standard error is not a terminal.

mod common;

use common::{pinstream, stderr};

/// `demo` takes no --slots: its advice for a budget too small names only its own flags.
#[test]
fn demo_advice_names_only_demo_flags() {
    let o = pinstream(&["demo", "--size", "16MiB", "--vram-budget", "64KiB"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("raise --vram-budget to at least 16 MiB, or lower --block"),
        "{e}"
    );
    assert!(!e.contains("--slots"), "{e}");
}

/// A wrong `POCL_DEVICES` leaves PoCL installed with no device: the message names the
/// variable and its value, not a driver to install. PoCL alone (`OCL_ICD_VENDORS`), so that a
/// GPU machine's other platforms do not list devices.
#[test]
#[cfg_attr(
    windows,
    ignore = "Wine does not pass a child's POCL_DEVICES on to PoCL (scripts/test-windows.sh)"
)]
fn a_wrong_pocl_devices_is_named_not_a_missing_driver() {
    let icd = "/etc/OpenCL/vendors/pocl.icd";
    if !std::path::Path::new(icd).exists() {
        common::skip(&format!("no {icd} to choose PoCL alone with"));
        return;
    }
    let others = common::platforms_besides_pocl(&[("OCL_ICD_VENDORS", icd)]);
    if !others.is_empty() {
        common::skip(&format!(
            "needs PoCL as the only platform; this OpenCL loader lists others too (it ignores \
             OCL_ICD_VENDORS, as CUDA's libOpenCL.so.1 does): {}",
            others.join("; ")
        ));
        return;
    }
    for args in [&["devices"][..], &["bench", "latency"]] {
        let o = std::process::Command::new(common::bin())
            .args(args)
            .env("POCL_DEVICES", "bogus")
            .env("OCL_ICD_VENDORS", icd)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("is installed (platform(s) Portable Computing Language) but reported no device; check POCL_DEVICES=bogus"),
            "{e}"
        );
        assert!(!e.contains("install a driver"), "{e}");
    }
}

/// A gather staging below the least the gather takes names --staging and that least.
#[test]
fn a_staging_too_small_names_the_flag_and_the_least() {
    let o = pinstream(&[
        "bench",
        "gather",
        "--staging",
        "1",
        "--pieces",
        "4",
        "--repeat",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.starts_with("error: a gather staging of 1 B is below the least the gather takes, ")
            && e.contains(": pass --staging ")
            && e.trim_end().ends_with(" or more"),
        "{e}"
    );
}

/// Standard error piped (not a terminal): no ANSI escape in the log lines or the messages.
#[test]
fn no_colour_when_stderr_is_not_a_terminal() {
    let o = std::process::Command::new(common::bin())
        .args(["devices"])
        .env("PINSTREAM_LOG", "debug")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("DEBUG"), "the log is there: {e}");
    assert!(!e.contains('\u{1b}'), "ANSI escape in: {e:?}");
}

/// `bench latency`: the enqueue call alone is no transfer, so it has a time and no GB/s
/// (it read 5122 GB/s); every row that times a whole transfer keeps its GB/s.
#[test]
fn the_enqueue_call_alone_has_no_bandwidth() {
    let o = pinstream(&[
        "bench",
        "latency",
        "--sizes",
        "4KiB",
        "--samples",
        "10",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["sizes"][0]["rows"].as_array().unwrap();
    let alone: Vec<_> = rows
        .iter()
        .filter(|r| r["path"] == "the enqueue call alone")
        .collect();
    assert!(!alone.is_empty(), "{v}");
    for r in alone {
        assert!(
            r["gbps"].is_null() && r["median_us"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    let others = rows
        .iter()
        .filter(|r| r["path"] != "the enqueue call alone");
    assert!(
        others
            .into_iter()
            .all(|r| r["gbps"].as_f64().unwrap() > 0.0),
        "{v}"
    );
    let o = pinstream(&["bench", "latency", "--sizes", "4KiB", "--samples", "10"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("the enqueue call alone"))
        .unwrap();
    assert!(line.trim_end().ends_with(" -"), "{line}");
}

/// `demo --workload embedding --bags N` whose ids and sums (768 bytes a bag, the sums one
/// buffer of 512 bytes a bag) cannot be had: the refusal names `--bags` and the most that
/// fits, not a size to shrink (it said "size 1024.0 GiB exceeds the … host memory available
/// now: choose a smaller size", which no `--size` fixes; a lesser excess named the device's
/// largest buffer and a table to split). 400 million bags need 307 GB, past any machine's
/// host memory here and on the GPU machines (40 million, 30.7 GB, fit the 128 GiB GPU host and
/// ran the demo until the 300 s limit).
#[test]
fn too_many_bags_name_the_flag_and_the_most_that_fit() {
    for bags in ["4294967295", "400000000"] {
        let o = pinstream(&["demo", "--workload", "embedding", "--bags", bags]);
        common::clean_exit(&o);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.starts_with(&format!("error: --bags {bags} needs ")) && e.contains("768 bytes a bag"),
            "{e}"
        );
        let most: u64 = e
            .split("pass --bags ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no `pass --bags N or fewer` in: {e}"));
        assert!(most >= 1 && most < bags.parse().unwrap(), "{e}");
        assert!(!e.contains("smaller size") && !e.contains("split"), "{e}");
    }
}

/// A block that is no whole number of elements, in each command that takes `--block`: the
/// refusal names only flags that command has. `demo`, `soak` and `doctor` were told of "the
/// element size times --reduce", a flag only `run` has.
#[test]
fn a_block_refusal_names_reduce_only_where_the_command_has_it() {
    let scale = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/scale.cl");
    let run = [
        "run",
        "--kernel",
        scale,
        "--entry",
        "scale",
        "--arg",
        "factor=2",
        "--synthetic",
        "1MiB",
        "--block",
        "6",
    ];
    for (args, reduce) in [
        (&run[..], true),
        (&["demo", "--size", "1MiB", "--block", "6"], false),
        (&["soak", "--size", "64MiB", "--block", "6"], false),
        (&["doctor", "--block", "0"], false),
    ] {
        let o = pinstream(args);
        common::clean_exit(&o);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("is not a positive multiple of") && e.contains(": pass --block "),
            "{args:?}: {e}"
        );
        assert_eq!(e.contains("--reduce"), reduce, "{args:?}: {e}");
    }
}
