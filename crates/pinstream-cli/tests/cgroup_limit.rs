//! Issue 21, class 3, in a real memory cgroup: `run --synthetic 3GiB` inside a 1 GiB limit
//! (as `docker --memory 1g` sets) fails with a message naming the container's limit, and is
//! not OOM-killed (exit 137); so do the library calls under `psHostAlloc` and
//! `psHostRegister` (`HostRegion::new`, `HostRegion::register`) of 3 GiB, run by this test
//! binary itself inside the cgroup. Needs root and a memory controller (cgroup v2, or v1's memory
//! hierarchy); elsewhere the test is skipped visibly (`common::skip`) and returns.
// Memory cgroups are Linux only: the whole file is.
#![cfg(target_os = "linux")]

mod common;

use common::cgroup::{Cgroup, INNER};
use common::{bin, clean_exit, fresh_dir, stderr};

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor;
}
"#;

#[test]
fn run_larger_than_the_container_limit_is_refused_not_killed() {
    let cg = match Cgroup::new("run", 1 << 30) {
        Ok(cg) => cg,
        Err(why) => {
            common::skip(&why);
            return;
        }
    };
    let d = fresh_dir("cgroup", "run");
    let k = d.join("scale.cl");
    std::fs::write(&k, SCALE).unwrap();
    let k = k.to_str().unwrap();
    let o = cg.run(
        &bin(),
        &[
            "run",
            "--kernel",
            k,
            "--entry",
            "scale",
            "--synthetic",
            "3GiB",
            "--arg",
            "factor=2",
        ],
    );
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("container's memory limit (cgroup memory.")
            && err.contains("limit")
            && err.contains("use smaller or fewer inputs")
            && err.contains("cannot stream from storage: --synthetic inputs have no file"),
        "{err}"
    );
    println!("in {}: {err}", cg.dir.display());
}

#[test]
fn host_alloc_and_register_larger_than_the_container_limit_are_refused_not_killed() {
    let cg = match Cgroup::new("lib", 1 << 30) {
        Ok(cg) => cg,
        Err(why) => {
            common::skip(&why);
            return;
        }
    };
    let me = std::env::current_exe().unwrap();
    let inner = "library_calls_inside_the_cgroup";
    let o = cg.run(me.to_str().unwrap(), &["--exact", inner, "--nocapture"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{:?}: {out}{}", o.status, stderr(&o));
    assert!(out.contains("1 passed"), "{out}");
    println!("{out}");
}

/// The half of the test above that runs inside the cgroup (does nothing elsewhere).
#[test]
fn library_calls_inside_the_cgroup() {
    use pinstream::backend::opencl::{default_device, devices, Context};
    use pinstream::host::{HostError, HostRegion, PinOptions};
    if std::env::var_os(INNER).is_none() {
        return;
    }
    let all = devices().expect("an OpenCL platform");
    let ctx = Context::new(default_device(&all).expect("a device")).unwrap();
    let e = HostRegion::new(&ctx, 3 << 30, &PinOptions::default()).unwrap_err();
    assert!(matches!(e, HostError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("container's memory limit"), "{e}");
    println!("psHostAlloc: {e}");
    // Fresh zeroed memory: no page of it is resident yet, so all 3 GiB would be faulted in.
    let mut mem = vec![0u8; 3 << 30];
    // SAFETY: `mem` outlives the call, which fails before registering anything.
    let e = unsafe { HostRegion::register(&ctx, mem.as_mut_ptr(), mem.len(), &Default::default()) }
        .unwrap_err();
    assert!(matches!(e, HostError::RegisterTooLarge { .. }), "{e}");
    assert!(e.to_string().contains("container's memory limit"), "{e}");
    println!("psHostRegister: {e}");
}
