//! `--vk-copy` (every way Vulkan can copy, chosen from the command line), `compare --api
//! vulkan` and `bench devices --api vulkan`, on the machine's Vulkan device (lavapipe in CI). Without Vulkan these tests fail,
//! saying what to install.

mod common;

use common::{clean_exit, pinstream, stderr};
use std::process::Output;

fn json(o: &Output) -> serde_json::Value {
    clean_exit(o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "these tests need a Vulkan device (apt-get install mesa-vulkan-drivers): {}",
        stderr(o)
    );
    serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).expect("a JSON report")
}

const WAYS: [&str; 7] = [
    "transfer",
    "universal",
    "shader",
    "split",
    "mixed",
    "auto",
    "crossed",
];

#[test]
fn bench_copies_each_way_and_says_which() {
    for way in WAYS {
        let j = json(&pinstream(&[
            "bench",
            "--api",
            "vulkan",
            "--vk-copy",
            way,
            "--sizes",
            "256KiB",
            "--repeat",
            "1",
            "--json",
        ]));
        let copies = j["copies"].as_str().unwrap_or_default();
        assert!(copies.starts_with(&format!("{way} (")), "{way}: {j}");
        for s in j["strategies"].as_array().unwrap() {
            assert!(s["error"].is_null(), "{way}: {s}");
        }
    }
    let j = json(&pinstream(&[
        "bench", "--api", "vulkan", "--sizes", "256KiB", "--repeat", "1", "--json",
    ]));
    assert!(j["copies"].as_str().unwrap().starts_with("auto ("), "{j}");
}

#[test]
fn demo_streams_and_checks_each_way() {
    for way in WAYS {
        let j = json(&pinstream(&[
            "demo",
            "--api",
            "vulkan",
            "--vk-copy",
            way,
            "--size",
            "4MiB",
            "--json",
        ]));
        for w in j["workloads"].as_array().unwrap() {
            assert_eq!(w["mismatches"], 0, "{way}: {w}");
            assert!(w["checked"].as_u64().unwrap() > 0, "{way}: {w}");
        }
    }
}

#[test]
fn vk_copy_is_refused_without_api_vulkan() {
    for args in [
        &["bench", "--api", "opencl", "--vk-copy", "shader"][..],
        &["demo", "--vk-copy", "split", "--size", "1MiB"],
        &["compare", "--vk-copy", "auto", "--size", "1MiB"],
    ] {
        let o = pinstream(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--vk-copy applies to --api vulkan only"),
            "{}",
            stderr(&o)
        );
    }
    let o = pinstream(&["bench", "--api", "vulkan", "--vk-copy", "fast"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn compare_puts_vulkan_beside_opencl_and_says_when_it_is_not_the_same_gpu() {
    let j = json(&pinstream(&[
        "compare",
        "--api",
        "vulkan",
        "--vk-copy",
        "split",
        "--size",
        "8MiB",
        "--vram-budget",
        "8MiB",
        "--sizes",
        "1MiB",
        "--repeat",
        "1",
        "--point-repeats",
        "2",
        "--json",
    ]));
    assert_eq!(j["vulkan"]["status"], "measured", "{}", j["vulkan"]);
    let half = &j["vulkan"]["half"];
    let copies = half["copies"].as_str().unwrap_or_default();
    assert!(copies.starts_with("split ("), "--vk-copy split: {half}");
    assert_eq!(
        half["bench_passes"][0].as_array().unwrap().len(),
        2,
        "{half}"
    );
    assert!(half["in_place"][0].as_f64().unwrap() > 0.0, "{half}");
    let ratios = j["vulkan_ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 5, "3 directions, in place, gemv: {ratios:?}");
    let against = if j["cuda"]["status"] == "measured" {
        "CUDA"
    } else {
        "OpenCL"
    };
    assert!(ratios
        .iter()
        .all(|r| r["against"] == against && r["ratio"].as_f64().unwrap() > 0.0));
    if j["device"]["pci_address"].is_null() {
        // PoCL beside lavapipe: no common PCI device.
        let device = j["vulkan"]["device"].as_str().unwrap();
        assert!(
            device.contains("the default Vulkan device instead"),
            "{device}"
        );
    }
    // Without --api vulkan the report is as before: no Vulkan fields.
    let o = pinstream(&[
        "compare",
        "--size",
        "4MiB",
        "--vram-budget",
        "4MiB",
        "--sizes",
        "1MiB",
        "--repeat",
        "1",
        "--point-repeats",
        "1",
        "--json",
    ]);
    let j = json(&o);
    assert!(
        j.get("vulkan").is_none() && j.get("vulkan_ratios").is_none(),
        "{j}"
    );
}

#[test]
fn bench_devices_measures_vulkan_devices_alone_and_together() {
    let j = json(&pinstream(&[
        "bench",
        "devices",
        "--api",
        "vulkan",
        "--devices",
        "0",
        "--vk-copy",
        "split",
        "--sizes",
        "256KiB,1MiB",
        "--repeat",
        "1",
        "--json",
    ]));
    assert_eq!(j["devices"][0]["api"], "Vulkan", "{j}");
    let apis = j["apis"].as_array().unwrap();
    assert_eq!(apis.len(), 1, "{j}");
    assert_eq!(apis[0]["api"], "vulkan");
    assert!(apis[0]["error"].is_null(), "{j}");
    let points = apis[0]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{j}");
    assert_eq!(points[0]["per_device"].as_array().unwrap().len(), 1, "{j}");
}

/// `bench --region`: every shape of the demo's copies over a region pinned in three chunks,
/// each direction a shape moves with its rates, the block across two chunks among them, and
/// `--vk-huge-pages off` keeping the region off huge pages.
#[test]
fn bench_region_takes_the_demos_copies_apart() {
    let args = |huge: &'static str| {
        vec![
            "bench",
            "--api",
            "vulkan",
            "--region",
            "12MiB",
            "--max-chunk",
            "4MiB",
            "--sizes",
            "2MiB",
            "--repeat",
            "1",
            "--vk-huge-pages",
            huge,
            "--json",
        ]
    };
    for huge in ["on", "off"] {
        let j = json(&pinstream(&args(huge)));
        let region = &j["regions"][0];
        assert_eq!(region["chunks"], 3, "{j}");
        let shapes: Vec<&str> = region["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["shape"].as_str().unwrap())
            .collect();
        assert_eq!(shapes, ["walk", "same", "walk", "across", "chained"], "{j}");
        assert_eq!(region["rows"][0]["first_touch"], true);
        for r in region["rows"].as_array().unwrap() {
            let both = r["both_gbps"].as_f64();
            assert!(both.is_some() != r["first_touch"].as_bool().unwrap(), "{r}");
            assert!(r["shape"] == "chained" || r["h2d"]["busy_gbps"].as_f64().unwrap() > 0.0);
        }
        if huge == "off" && cfg!(target_os = "linux") {
            assert_eq!(region["huge_page_bytes"], 0, "{j}");
        }
    }
}

#[test]
fn region_and_vulkan_options_are_refused_where_they_do_not_apply() {
    for (args, says) in [
        (
            &["bench", "--region", "8MiB"][..],
            "--region measures one API",
        ),
        (
            &["demo", "--vk-huge-pages", "off", "--size", "1MiB"],
            "--vk-huge-pages applies to --api vulkan only",
        ),
        (
            &[
                "bench", "--api", "vulkan", "--region", "8MiB", "--sizes", "16MiB",
            ],
            "lower --sizes or raise --region",
        ),
    ] {
        let o = pinstream(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// `bench latency --api vulkan`: pinstream's path over Vulkan beside Vulkan's own calls at
/// each size, the gap to Vulkan's fastest wait read off them, and CUDA's absence explained.
#[test]
fn bench_latency_through_vulkan_puts_pinstream_beside_vulkans_own_calls() {
    let j = json(&pinstream(&[
        "bench",
        "latency",
        "--api",
        "vulkan",
        "--sizes",
        "4KiB,64KiB",
        "--samples",
        "20",
        "--json",
    ]));
    assert_eq!(j["api"], "vulkan", "{j}");
    let sizes = j["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 2, "{j}");
    for s in sizes {
        let apis: Vec<&str> = s["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["api"].as_str().unwrap())
            .filter(|a| *a != "cuda")
            .collect();
        assert_eq!(apis, ["pinstream", "pinstream", "vulkan", "vulkan"], "{s}");
        assert!(s["waited_gap_us"].as_f64().is_some(), "{s}");
    }
    assert!(
        j["cuda_unavailable"].is_string() || sizes[0]["rows"].as_array().unwrap().len() == 6,
        "{j}"
    );
    // lavapipe is no vendor's GPU: CUDA's absence says so, naming Vulkan's own listing.
    if j["device"]["vendor_kind"] == "other" {
        let why = j["cuda_unavailable"].as_str().unwrap_or_default();
        assert!(why.contains("not driven by NVIDIA's Vulkan driver"), "{j}");
        assert!(why.contains("pinstream devices --api vulkan"), "{j}");
    }
    assert_eq!(j["floor"], "vulkan", "{j}");
}

/// `bench gather --api vulkan`: pinstream's staged batch copies through Vulkan, Vulkan's
/// per-piece and batch copies, checked, and the peak, both ways; pinstream's zero-copy batch
/// copies named as not measured, with why.
#[test]
fn bench_gather_through_vulkan_moves_checked_pieces_and_says_what_it_leaves_out() {
    let j = json(&pinstream(&[
        "bench",
        "gather",
        "--api",
        "vulkan",
        "--pieces",
        "64",
        "--piece-size",
        "1KiB",
        "--repeat",
        "1",
        "--json",
    ]));
    let rows: Vec<(String, String)> = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["api"] == "vulkan")
        .map(|r| (r["direction"].to_string(), r["path"].to_string()))
        .collect();
    assert_eq!(rows.len(), 6, "{j}");
    let staged = j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["api"] == "pinstream" && r["path"].to_string().contains("BatchApi"))
        .count();
    assert_eq!(staged, 2, "pinstream's staged batch copies both ways: {j}");
    assert!(
        j["batch_way"].to_string().contains("vkCmdCopyBuffer"),
        "{j}"
    );
    for r in j["rows"].as_array().unwrap() {
        assert!(
            r["gbps"].as_f64().unwrap() > 0.0 && r["verified"] == true,
            "{r}"
        );
    }
    let left_out = j["zero_copy_unavailable"].as_str().unwrap_or_default();
    assert!(left_out.contains("mapped memory"), "{j}");
}
