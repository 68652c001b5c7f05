//! The other commands through CUDA on the GPU: compare, devices, doctor and the embedding
//! demo.

use super::*;

#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn compare_measures_both_halves_on_the_gpu() {
    let o = pinstream(&[
        "compare",
        "--size",
        "256MiB",
        "--vram-budget",
        "128MiB",
        "--sizes",
        "1MiB,64MiB",
        "--repeat",
        "2",
        "--point-repeats",
        "4",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cuda"]["status"], "measured", "{}", v["cuda"]);
    let ratios = v["ratios"].as_array().unwrap();
    // Per block size H2D, D2H and both ways; the two streams; and the gather against CUDA's
    // per-piece loop and its batch call, and the zero-copy gather, checked and vouched,
    // against CUDA's zero-copy kernel, each direction.
    assert_eq!(ratios.len(), 2 * 3 + 2 + 2 * 4, "{ratios:?}");
    for dir in ["H2D", "D2H"] {
        for label in [
            "gather / CUDA per-piece loop",
            "gather / CUDA cuMemcpyBatchAsync",
            "zero-copy gather / CUDA zero-copy kernel",
            "zero-copy gather, vouched / CUDA zero-copy kernel",
        ] {
            let figure = format!("4096 x 4 KiB scattered {dir}: {label}");
            assert!(
                ratios.iter().any(|r| r["figure"] == figure.as_str()),
                "no {figure}"
            );
        }
    }
    for r in ratios {
        let (a, b) = (r["opencl"].as_f64().unwrap(), r["cuda"].as_f64().unwrap());
        assert!(a > 0.0 && b > 0.0, "{r}");
        assert_eq!(r["marked"].as_bool().unwrap(), a / b < 0.97, "{r}");
        assert!(r["paired"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(v["cuda"]["half"]["in_place"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["cuda"]["half"]["bench_passes"][1]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

/// `devices --api cuda`: every CUDA device with the fields every API reports, one default.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn devices_api_cuda_lists_the_gpus() {
    let o = pinstream(&["devices", "--api", "cuda", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["devices"].as_array().unwrap();
    assert!(!list.is_empty(), "{v}");
    for (i, d) in list.iter().enumerate() {
        assert_eq!(
            (d["api"].as_str(), d["index"].as_u64()),
            (Some("CUDA"), Some(i as u64))
        );
        assert!(d["name"].as_str().unwrap().contains("NVIDIA"), "{d}");
        assert!(d["pci_address"].as_str().unwrap().contains(':'), "{d}");
        assert!(d["memory"].as_u64().unwrap() > 1 << 30, "{d}");
        assert_eq!(d["kind"], "Gpu", "{d}");
        // How pinstream pins there, as every API's listing says it (`HostApi::offer`).
        assert_eq!(
            d["strategies"],
            serde_json::json!(["cuda-host-alloc", "cuda-register"])
        );
        assert_eq!(d["unavailable"], serde_json::json!([]), "{d}");
        assert_eq!(d["auto"], "cuda-register", "{d}");
        assert!(
            d["auto_reason"]
                .as_str()
                .unwrap()
                .contains("cuMemHostRegister"),
            "{d}"
        );
    }
    assert_eq!(list.iter().filter(|d| d["default"] == true).count(), 1);
    let o = pinstream(&["devices", "--api", "cuda"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("CUDA devices:\n  device 0: "), "{text}");
    assert!(
        text.contains("(default)") && text.contains("PCI "),
        "{text}"
    );
    assert!(
        text.contains("    strategies: cuda-host-alloc, cuda-register\n")
            && text.contains("    auto: cuda-register ("),
        "{text}"
    );
}

/// `doctor --api cuda`: both of CUDA's ways to pin measured on the GPU, every byte checked,
/// and one recommended, in the report OpenCL's doctor gives.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn doctor_api_cuda_measures_both_pinnings_and_recommends_one() {
    let o = pinstream(&[
        "doctor", "--api", "cuda", "--size", "512MiB", "--block", "64MiB", "--repeat", "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let list = v["strategies"].as_array().unwrap();
    let names: Vec<&str> = list
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cuda-host-alloc", "cuda-register"]);
    for s in list {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["verified_bytes"], 512 << 20, "{s}");
        assert_eq!(s["mismatched_bytes"], 0, "{s}");
        assert!(s["pin_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["h2d"]["wall_gbps"].as_f64().unwrap() > 1.0, "{s}");
        assert!(s["both"]["events_gbps"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(v["device"]["api"], "CUDA", "{}", v["device"]);
    assert_eq!(v["auto_strategy"], "cuda-register");
    assert!(
        names.contains(&v["recommendation"].as_str().unwrap()),
        "{v}"
    );
    let o = pinstream(&[
        "doctor",
        "--api",
        "cuda",
        "--size",
        "128MiB",
        "--block",
        "64MiB",
        "--repeat",
        "1",
        "--strategy",
        "cuda-host-alloc",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows = text.lines().filter(|l| l.starts_with("cuda-"));
    assert_eq!(rows.count(), 1, "{text}");
    assert!(
        text.contains("128 MiB ok") && text.contains("recommendation: "),
        "{text}"
    );
    let o = pinstream(&["doctor", "--api", "cuda", "--strategy", "register"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown strategy `register`: choose all, auto or one of cuda-host-alloc, cuda-register"),
        "{}",
        stderr(&o)
    );
}

/// The embedding lookup through CUDA on `cudaHostAllocMapped` memory: the same kernel shape
/// as OpenCL's, every checked bag equal to the CPU's, and the table not copied into VRAM.
#[test]
#[ignore = "needs a CUDA driver and an NVIDIA GPU: run with --ignored there"]
fn the_embedding_demo_runs_through_cuda_on_mapped_memory() {
    let o = pinstream(&[
        "demo",
        "--workload",
        "embedding",
        "--api",
        "cuda",
        "--size",
        "1GiB",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["api"], "CUDA", "{v}");
    assert_eq!(v["mechanism"], "cuda-host-alloc-mapped", "{v}");
    assert_eq!(v["mismatched_bags"], 0, "{v}");
    assert_eq!(v["checked_bags"], 512, "{v}");
    let cost = v["vram_cost"]
        .as_i64()
        .expect("NVML counts the H200's VRAM");
    assert!(
        cost < 64 << 20,
        "a 1 GiB mapped table cost {cost} bytes of VRAM"
    );
}
