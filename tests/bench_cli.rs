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
        svg.starts_with("<svg") && svg.contains("register H2D"),
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
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cuda"]["status"], "unavailable");
    assert!(v["cuda"]["reason"]
        .as_str()
        .unwrap()
        .contains("no CUDA backend"));
    let b = &v["opencl"]["bench"][0];
    assert_eq!(b[0], 1 << 20);
    assert!(b[1].as_f64().unwrap() > 0.0 && b[3].as_f64().unwrap() > 0.0);
    assert!(v["opencl"]["in_place"][0].as_f64().unwrap() > 0.0);
    assert!(v["opencl"]["gemv"][0].as_f64().unwrap() > 0.0);
}
