//! `pinstream demo --progressive on|off` through the real binary (issue 13, goal 3): the
//! same checked results either way, and the time to the first block in the JSON and the text.

mod common;

use common::pinstream;

fn demo(progressive: &str, json: bool) -> std::process::Output {
    let mut args = vec![
        "demo",
        "--size",
        "16MiB",
        "--block",
        "1MiB",
        "--vram-budget",
        "4MiB",
        "--progressive",
        progressive,
    ];
    if json {
        args.push("--json");
    }
    pinstream(&args)
}

#[test]
fn the_demo_reports_its_first_block_with_and_without_progressive_pinning() {
    for mode in ["on", "off"] {
        let o = demo(mode, true);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let w = &v["workloads"][0];
        assert_eq!(w["mismatches"], 0, "{w}");
        assert_eq!(w["progressive"], mode == "on", "{w}");
        let first = w["first_block_ms"].as_f64().expect("first_block_ms");
        let done = w["done_s"].as_f64().expect("done_s");
        assert!(
            first > 0.0 && first <= done * 1e3,
            "{first} ms, done {done} s"
        );
        assert!(w["stream"]["first_upload_s"].as_f64().unwrap() > 0.0, "{w}");
        assert!(w["stream"]["pin_wait_s"].as_f64().unwrap() >= 0.0, "{w}");
        assert!(w["pin_done_s"].as_f64().unwrap() > 0.0, "{w}");
        // y = W·x pins up front and has no first-block figure.
        assert_eq!(v["workloads"][1]["progressive"], false);
    }
    let text = String::from_utf8(demo("on", false).stdout).unwrap();
    assert!(
        text.contains("first block on the device") && text.contains("pinned progressively"),
        "{text}"
    );
}

#[test]
fn a_bad_progressive_value_names_the_choices() {
    let o = demo("maybe", true);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("on") && e.contains("off"), "{e}");
}
