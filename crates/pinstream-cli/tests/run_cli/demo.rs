//! `pinstream demo` through the real binary: it checks itself, and waits as asked.

use super::*;

#[test]
fn demo_checks_itself() {
    let o = pinstream(&[
        "demo",
        "--size",
        "32MiB",
        "--block",
        "4MiB",
        "--vram-budget",
        "16MiB",
        "--compare-sequential",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = v["workloads"].as_array().unwrap();
    assert_eq!(w.len(), 2);
    for x in w {
        assert_eq!(x["mismatches"], 0, "{x}");
        assert!(x["checked"].as_u64().unwrap() > 0);
        assert!(x["stream"]["pool_bytes"].as_u64().unwrap() <= 16 << 20);
        assert!(x["sequential"]["totals"]["combined_gbps"].as_f64().unwrap() > 0.0);
        // The stream's CPU cost: PoCL runs the kernels on the host's cores, so it is never 0.
        let (cpu, per_gib) = (
            x["cpu_s"].as_f64().unwrap(),
            x["cpu_s_per_gib"].as_f64().unwrap(),
        );
        assert!(cpu > 0.0 && per_gib > 0.0, "{x}");
    }
    assert_eq!(w[0]["stream"]["blocks"], 8);
}

/// `demo --wait sleep`: the same checked results, the mode in the report, a CPU figure.
#[test]
fn demo_waits_by_sleeping_when_asked() {
    let o = pinstream(&[
        "demo",
        "--size",
        "16MiB",
        "--block",
        "4MiB",
        "--vram-budget",
        "16MiB",
        "--wait",
        "sleep",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["wait"], "sleep");
    for x in v["workloads"].as_array().unwrap() {
        assert_eq!(x["mismatches"], 0, "{x}");
        assert!(x["cpu_s_per_gib"].as_f64().unwrap() > 0.0, "{x}");
    }
    let bad = pinstream(&["demo", "--wait", "spin"]);
    assert!(!bad.status.success());
    // The default: the stream's waits spin briefly, then sleep.
    let o = pinstream(&["demo", "--size", "16MiB", "--block", "4MiB", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["wait"], "auto");
}
