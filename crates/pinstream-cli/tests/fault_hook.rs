//! Issue 21, class 10, through the real binary: a malformed `PINSTREAM_INJECT_FAULT` is an
//! error naming the valid forms (not "no fault"), the pin ceiling `pin:BYTES` reaches the
//! chunks of a progressive pin, and `--progressive on` with a strategy that cannot pin chunk
//! by chunk says it pins up front.

mod common;

use common::{bin, clean_exit, fresh_dir, stderr};
use std::ffi::OsStr;
use std::process::{Command, Output};

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor;
}
"#;

/// `run` of `scale` over 4 MiB of synthetic data in 256 KiB blocks, with `extra` and `env`.
fn run(tag: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(v))).collect();
    run_os(tag, extra, &env)
}

/// [`run`] with environment values that need not be UTF-8.
fn run_os(tag: &str, extra: &[&str], env: &[(&str, &OsStr)]) -> Output {
    let d = fresh_dir("fault-hook", tag);
    let k = d.join("scale.cl");
    std::fs::write(&k, SCALE).unwrap();
    let out = d.join("out.f32");
    let o = Command::new(bin())
        .args(["run", "--kernel", k.to_str().unwrap(), "--entry", "scale"])
        .args([
            "--synthetic",
            "4MiB",
            "--block",
            "256KiB",
            "--vram-budget",
            "1MiB",
        ])
        .args(["--arg", "factor=2", "--output", out.to_str().unwrap()])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    clean_exit(&o);
    let _ = std::fs::remove_dir_all(&d);
    o
}

#[test]
fn malformed_fault_specs_are_refused_with_the_valid_forms() {
    for (spec, why) in [
        ("upload", "no `:INDEX`"),
        ("bogus:1", "unknown stage `bogus`"),
        ("pin:abc", "`abc` is not a whole number"),
        ("upload:-1", "`-1` is not a whole number"),
    ] {
        let o = run("bad", &[], &[("PINSTREAM_INJECT_FAULT", spec)]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{spec}: {err}");
        assert!(
            err.contains(&format!("PINSTREAM_INJECT_FAULT=`{spec}`"))
                && err.contains(why)
                && err.contains("upload:N")
                && err.contains("pin:BYTES"),
            "{spec}: {err}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_non_utf8_fault_spec_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"pin:\xff");
    let o = run_os("utf8", &[], &[("PINSTREAM_INJECT_FAULT", bad)]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("not UTF-8") && err.contains("pin:BYTES"),
        "{err}"
    );
}

#[test]
fn the_pin_ceiling_reaches_progressive_chunks() {
    let o = run(
        "ceiling",
        &["--progressive", "on"],
        &[("PINSTREAM_INJECT_FAULT", "pin:1048576")],
    );
    let err = stderr(&o);
    assert!(
        !o.status.success(),
        "the 4 MiB pin passed a 1 MiB ceiling: {err}"
    );
    assert!(err.contains("CL_OUT_OF_RESOURCES"), "{err}");
    // Under the ceiling it pins and runs.
    let o = run(
        "ceiling-ok",
        &["--progressive", "on"],
        &[("PINSTREAM_INJECT_FAULT", "pin:67108864")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn progressive_with_a_strategy_that_pins_whole_says_so() {
    for s in ["mlock", "pageable"] {
        let o = run(s, &["--progressive", "on", "--strategy", s], &[]);
        let err = stderr(&o);
        assert!(o.status.success(), "{s}: {err}");
        assert!(
            err.contains(&format!("--progressive on pins up front with strategy {s}"))
                && err.contains("use --strategy register"),
            "{s}: {err}"
        );
    }
}
