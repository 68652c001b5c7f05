//! Issue 21, class 3, in a real memory cgroup: `run --synthetic 3GiB` inside a 1 GiB limit
//! (as `docker --memory 1g` sets) fails with a message naming the container's limit, and is
//! not OOM-killed (exit 137); so do the library calls under `psHostAlloc` and
//! `psHostRegister` (`HostRegion::new`, `HostRegion::register`) of 3 GiB, run by this test
//! binary itself inside the cgroup. Needs root and a memory controller (cgroup v2, or v1's memory
//! hierarchy); elsewhere the test is skipped visibly (`common::skip`) and returns.
// Memory cgroups are Linux only: the whole file is.
#![cfg(target_os = "linux")]

mod common;

use common::{bin, clean_exit, fresh_dir, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor;
}
"#;

/// Set for the half of a test that runs inside the cgroup.
const INNER: &str = "PINSTREAM_TEST_IN_CGROUP";

/// A child memory cgroup with a limit, removed on drop.
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    /// A child (named after `tag` and this process) of the cgroup v2 root (enabling `+memory` there if needed), or else of v1's
    /// memory hierarchy, limited to `limit` bytes; `Err(why)` where neither can be made.
    fn new(tag: &str, limit: u64) -> Result<Self, String> {
        if pinstream::backend::os::effective_uid() != 0 {
            return Err("not root".into());
        }
        let name = format!("pinstream-test-{tag}-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup");
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let controllers = std::fs::read_to_string(v2.join("cgroup.controllers"));
        if controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
            let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+memory");
            return Self::make(v2.join(name), "memory.max", limit);
        }
        if v1.join("memory.limit_in_bytes").exists() {
            return Self::make(v1.join(name), "memory.limit_in_bytes", limit);
        }
        Err("no memory controller (neither cgroup v2 with memory nor v1's memory hierarchy)".into())
    }

    fn make(dir: PathBuf, file: &str, limit: u64) -> Result<Self, String> {
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = Self { dir };
        std::fs::write(cg.dir.join(file), limit.to_string())
            .map_err(|e| format!("cannot set {file}: {e}"))?;
        Ok(cg)
    }

    /// `program args...` run inside the cgroup (the shell moves itself in, then execs).
    fn run(&self, program: &str, args: &[&str]) -> std::process::Output {
        let procs = self.dir.join("cgroup.procs");
        let script = format!("echo $$ > '{}' && exec \"$@\"", procs.display());
        Command::new("sh")
            .args(["-c", &script, "sh", program])
            .args(args)
            .env(INNER, "1")
            .output()
            .expect("sh runs")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The processes inside have exited; a cgroup without processes can be removed.
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

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
            && err.contains("use smaller or fewer inputs"),
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
