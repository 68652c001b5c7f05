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

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor + (float)block;
}
"#;

/// `run --progressive on` reads each chunk of the input file as it is pinned: the output is
/// the same file as with `off`, and the report says when the first block moved.
#[test]
fn run_pins_its_input_as_it_streams_with_the_same_output() {
    let d = common::fresh_dir("progressive", "run");
    let (k, input) = (d.join("scale.cl"), d.join("in.f32"));
    std::fs::write(&k, SCALE).unwrap();
    let n = (3 << 20) / 4 + 5; // a partial last block
    let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(&input, bytes).unwrap();
    let mut outs = Vec::new();
    for mode in ["on", "off"] {
        let out = d.join(format!("out-{mode}.f32"));
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
        let (k, i, o) = (s(&k), s(&input), s(&out));
        let o = pinstream(&[
            "run",
            "--kernel",
            &k,
            "--entry",
            "scale",
            "--input",
            &i,
            "--output",
            &o,
            "--arg",
            "factor=2",
            "--block",
            "64KiB",
            "--vram-budget",
            "1MiB",
            "--strategy",
            "register",
            "--progressive",
            mode,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["progressive"], mode == "on", "{v}");
        assert!(v["first_block_ms"].as_f64().unwrap() > 0.0, "{v}");
        outs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outs[0], outs[1]);
    let y: &[f32] = bytemuck::cast_slice(&outs[0]);
    assert_eq!(
        y[(64 << 10) / 4 + 1],
        ((64 << 10) / 4 + 1) as f32 * 2.0 + 1.0
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `run --synthetic` draws each chunk as it is pinned: the same data as drawn whole.
#[test]
fn run_with_a_synthetic_input_checks_out_either_way() {
    let d = common::fresh_dir("progressive", "synthetic");
    let k = d.join("scale.cl");
    std::fs::write(&k, SCALE).unwrap();
    let mut outs = Vec::new();
    for mode in ["on", "off"] {
        let out = d.join(format!("out-{mode}.f32"));
        let (k, o) = (k.to_str().unwrap(), out.to_str().unwrap());
        let o = pinstream(&[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--synthetic",
            "2MiB",
            "--seed",
            "3",
            "--output",
            o,
            "--arg",
            "factor=1",
            "--block",
            "128KiB",
            "--vram-budget",
            "1MiB",
            "--progressive",
            mode,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(text.contains("first block on the device"), "{text}");
        outs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(
        outs[0], outs[1],
        "the same drawn data, chunk by chunk or whole"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Waits for `child` at most `secs` seconds; kills it (and fails) past that.
#[cfg(unix)]
fn wait_bounded(mut child: std::process::Child, secs: u64, what: &str) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{what} still running after {secs} s: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `run --progressive on` with a FIFO input opens it once: it reads the stream whole before
/// the stream starts (a FIFO cannot be read by chunk), finishes with the same output as the
/// regular file gives, and the writer keeps its reader (it lost it, to EPIPE or SIGPIPE: the FIFO was
/// opened once to look at it, closed, and opened again, which then waited forever).
#[cfg(unix)]
#[test]
fn run_with_a_fifo_input_and_progressive_on_finishes_and_spares_the_writer() {
    use std::process::{Command, Stdio};
    let d = common::fresh_dir("progressive", "fifo");
    let (k, input, fifo) = (d.join("scale.cl"), d.join("in.f32"), d.join("in.fifo"));
    std::fs::write(&k, SCALE).unwrap();
    let n = 100_000;
    let bytes: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(&input, bytes).unwrap();
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // The writer writes as soon as the FIFO has a reader, as a producer does; a reader that
    // goes away ends its write with EPIPE (a process without this test's SIGPIPE handling
    // dies of the signal).
    let writer = {
        let (fifo, bytes) = (fifo.clone(), std::fs::read(&input).unwrap());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(fifo)?;
            f.write_all(&bytes)
        })
    };
    let mut outs = Vec::new();
    for (source, mode) in [(&fifo, "on"), (&input, "off")] {
        let out = d.join(format!("out-{mode}.f32"));
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
        let child = Command::new(common::bin())
            .args([
                "run",
                "--kernel",
                &s(&k),
                "--entry",
                "scale",
                "--arg",
                "factor=2",
            ])
            .args(["--input", &s(source), "--elements", &n.to_string()])
            .args([
                "--output",
                &s(&out),
                "--block",
                "64KiB",
                "--progressive",
                mode,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = wait_bounded(child, 60, "run --progressive on over a FIFO");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        outs.push(std::fs::read(&out).unwrap());
    }
    let written = writer.join().unwrap();
    assert!(written.is_ok(), "the writer lost its reader: {written:?}");
    assert_eq!(outs[0], outs[1]);
    let _ = std::fs::remove_dir_all(&d);
}
