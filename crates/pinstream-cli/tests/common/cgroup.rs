//! A child memory cgroup with a limit, for tests that run the binary inside a container's
//! memory limit (Linux, root, a memory controller: cgroup v2 or v1's memory hierarchy).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set for the half of a test that runs inside the cgroup.
pub const INNER: &str = "PINSTREAM_TEST_IN_CGROUP";

/// A child memory cgroup with a limit, removed on drop.
pub struct Cgroup {
    /// The cgroup's folder.
    pub dir: PathBuf,
}

impl Cgroup {
    /// A child (named after `tag` and this process) of the cgroup v2 root (enabling `+memory` there if needed), or else of v1's
    /// memory hierarchy, limited to `limit` bytes; `Err(why)` where neither can be made.
    pub fn new(tag: &str, limit: u64) -> Result<Self, String> {
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
    pub fn run(&self, program: &str, args: &[&str]) -> std::process::Output {
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

impl Cgroup {
    /// The most memory the cgroup's processes used at once (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`), where the kernel keeps it.
    pub fn peak(&self) -> Option<u64> {
        ["memory.peak", "memory.max_usage_in_bytes"]
            .iter()
            .find_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .and_then(|s| s.trim().parse().ok())
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
