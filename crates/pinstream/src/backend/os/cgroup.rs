//! How much memory this process may still take: the smaller of what the machine has available
//! (`MemAvailable`) and the room left under its memory cgroup's limit (what `docker --memory`
//! and Kubernetes set). A process that takes more than its cgroup allows is OOM-killed
//! (exit 137) without a message, so every size pinstream checks is checked against both.
//!
//! Pure functions over the texts of `/proc/self/cgroup`, `/proc/self/mountinfo` and the cgroup
//! files (given by a reader, so that tests give fixture strings); `unix.rs` reads the real ones.
//!
//! - cgroup v2: `memory.max` (or `max`: no limit) minus `memory.current`.
//! - cgroup v1: `memory.limit_in_bytes` (a value near 2^63: no limit) minus
//!   `memory.usage_in_bytes`.
//!
//! Both usage figures count page cache the kernel would reclaim before killing anyone, so the
//! inactive file pages (`inactive_file` in v2's `memory.stat`, `total_inactive_file` in v1's)
//! are taken off them, as `docker stats` and the kubelet do. A limit on any ancestor binds
//! too: every level from the process's cgroup up to the mount's root is read, and the one with
//! the least room wins. Files that are missing (a hierarchy without the memory controller, a
//! level pinstream may not read) are skipped.

use crate::units::Bytes;
use std::fmt;
use std::path::{Path, PathBuf};

/// v1 writes "no limit" as the largest page-aligned `i64`; anything from 2^62 up is no limit.
const V1_UNLIMITED: u64 = 1 << 62;

/// A memory cgroup's limit that bounds this process, at the level with the least room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The limit's file: `memory.max` (v2) or `memory.limit_in_bytes` (v1).
    pub file: &'static str,
    /// The limit in bytes.
    pub limit: u64,
    /// Bytes in use under it, inactive page cache left out.
    pub in_use: u64,
}

impl CgroupLimit {
    /// Bytes left under the limit.
    pub fn room(&self) -> u64 {
        self.limit.saturating_sub(self.in_use)
    }
}

/// The memory this process may still take, and what bounds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoom {
    /// Bytes that may still be made resident.
    pub bytes: u64,
    /// The cgroup limit that bounds `bytes`; `None` when `MemAvailable` (or, on Windows,
    /// the physical memory available) bounds it.
    pub cgroup: Option<CgroupLimit>,
}

impl HostRoom {
    /// The smaller of `available` (`MemAvailable`) and the cgroup's room; `None` when
    /// neither is known.
    pub fn smaller(available: Option<u64>, cgroup: Option<CgroupLimit>) -> Option<Self> {
        match (available, cgroup) {
            (Some(a), Some(c)) if c.room() < a => Some(Self::of_cgroup(c)),
            (None, Some(c)) => Some(Self::of_cgroup(c)),
            (a, _) => a.map(|bytes| Self {
                bytes,
                cgroup: None,
            }),
        }
    }

    fn of_cgroup(c: CgroupLimit) -> Self {
        Self {
            bytes: c.room(),
            cgroup: Some(c),
        }
    }
}

/// `the 20.0 GiB of host memory available now (MemAvailable)`, or `the 0.8 GiB left under
/// the container's memory limit (cgroup memory.max 1 GiB, 0.2 GiB in use)`.
impl fmt::Display for HostRoom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cgroup {
            None => write!(
                f,
                "the {} of host memory available now (MemAvailable)",
                Bytes(self.bytes)
            ),
            Some(c) => write!(
                f,
                "the {} left under the container's memory limit (cgroup {} {}, {} in use)",
                Bytes(self.bytes),
                c.file,
                Bytes(c.limit),
                Bytes(c.in_use)
            ),
        }
    }
}

/// One cgroup hierarchy that holds the memory controller: where it is mounted and which
/// directory under it is this process's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    /// True for cgroup v2.
    pub v2: bool,
    /// This process's cgroup directory.
    pub dir: PathBuf,
    /// The mount point: the walk up stops here.
    pub top: PathBuf,
}

/// This process's cgroup paths from `/proc/self/cgroup`: the v2 path (`0::PATH`) and the v1
/// memory controller's (`N:...memory...:PATH`).
pub(crate) fn proc_paths(proc_cgroup: &str) -> (Option<&str>, Option<&str>) {
    let (mut v2, mut v1) = (None, None);
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && ctrls.is_empty() {
            v2 = Some(path);
        } else if ctrls.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        }
    }
    (v2, v1)
}

/// A cgroup mount from `/proc/self/mountinfo`: (root, mount point) of the cgroup2 mount
/// (`v2`) or of the v1 mount holding the memory controller.
pub(crate) fn mount_of(mountinfo: &str, v2: bool) -> Option<(&str, &str)> {
    mountinfo.lines().find_map(|line| {
        let (head, tail) = line.split_once(" - ")?;
        let mut h = head.split(' ');
        let (root, point) = (h.nth(3)?, h.next()?);
        let mut t = tail.split(' ');
        let (fstype, opts) = (t.next()?, t.nth(1).unwrap_or(""));
        let memory_v1 = fstype == "cgroup" && opts.split(',').any(|o| o == "memory");
        ((v2 && fstype == "cgroup2") || (!v2 && memory_v1)).then_some((root, point))
    })
}

/// The directory of cgroup `path` in a mount of `root` at `point`: the path below the mount's
/// root, joined to the mount point. A path outside the root (another cgroup namespace) is
/// the mount point itself.
pub(crate) fn cgroup_dir(path: &str, root: &str, point: &str) -> PathBuf {
    let below = path.strip_prefix(root).unwrap_or("");
    Path::new(point).join(below.trim_start_matches('/'))
}

/// The hierarchies with a memory controller this process is in, from the texts of
/// `/proc/self/cgroup` and `/proc/self/mountinfo` (the usual mounts, `/sys/fs/cgroup` and
/// `/sys/fs/cgroup/memory`, where mountinfo names none).
pub(crate) fn hierarchies(proc_cgroup: &str, mountinfo: &str) -> Vec<Hierarchy> {
    let (v2, v1) = proc_paths(proc_cgroup);
    let usual = |v2| {
        if v2 {
            ("/", "/sys/fs/cgroup")
        } else {
            ("/", "/sys/fs/cgroup/memory")
        }
    };
    [(true, v2), (false, v1)]
        .into_iter()
        .filter_map(|(is_v2, path)| {
            let (root, point) = mount_of(mountinfo, is_v2).unwrap_or_else(|| usual(is_v2));
            Some(Hierarchy {
                v2: is_v2,
                dir: cgroup_dir(path?, root, point),
                top: PathBuf::from(point),
            })
        })
        .collect()
}

/// A limit file's value: `None` for no limit (`max`, v1's near-2^63) or unreadable text.
pub(crate) fn parse_limit(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    t.parse::<u64>().ok().filter(|&n| n < V1_UNLIMITED)
}

/// The value of `key` in a `memory.stat` text (`key value` lines); 0 when absent.
pub(crate) fn stat_value(stat: &str, key: &str) -> u64 {
    stat.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

/// The limit of one cgroup directory, read through `read`; `None` when it has none or its
/// files are missing.
pub(crate) fn level_limit(
    h: &Hierarchy,
    dir: &Path,
    read: &impl Fn(&Path) -> Option<String>,
) -> Option<CgroupLimit> {
    let (file, usage, inactive) = if h.v2 {
        ("memory.max", "memory.current", "inactive_file")
    } else {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    };
    let limit = parse_limit(&read(&dir.join(file))?)?;
    let used: u64 = read(&dir.join(usage))?.trim().parse().ok()?;
    let stat = read(&dir.join("memory.stat")).unwrap_or_default();
    Some(CgroupLimit {
        file,
        limit,
        in_use: used.saturating_sub(stat_value(&stat, inactive)),
    })
}

/// The cgroup limit with the least room over every level of every hierarchy, from the
/// process's cgroup up to the mount point; `None` when no level has a limit.
pub(crate) fn tightest(
    hierarchies: &[Hierarchy],
    read: impl Fn(&Path) -> Option<String>,
) -> Option<CgroupLimit> {
    hierarchies
        .iter()
        .flat_map(|h| {
            let levels = h.dir.ancestors().take_while(|d| d.starts_with(&h.top));
            levels
                .filter_map(|d| level_limit(h, d, &read))
                .collect::<Vec<_>>()
        })
        .min_by_key(CgroupLimit::room)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    /// A reader over fixture files.
    fn files(list: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = list
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        move |p| map.get(p).cloned()
    }

    const V2_MOUNT: &str =
        "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    const V1_MOUNTS: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v2_limit_minus_current_and_inactive_cache() {
        let h = hierarchies("0::/user.slice/job\n", V2_MOUNT);
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup/user.slice/job"));
        let read = files(&[
            ("/sys/fs/cgroup/user.slice/job/memory.max", "1073741824\n"),
            (
                "/sys/fs/cgroup/user.slice/job/memory.current",
                "314572800\n",
            ),
            (
                "/sys/fs/cgroup/user.slice/job/memory.stat",
                "anon 1\ninactive_file 104857600\nactive_file 5\n",
            ),
        ]);
        let c = tightest(&h, read).unwrap();
        assert_eq!((c.file, c.limit, c.in_use), ("memory.max", GIB, 200 << 20));
        assert_eq!(c.room(), GIB - (200 << 20));
    }

    #[test]
    fn v2_max_is_no_limit_and_a_parent_limit_binds() {
        let h = hierarchies("0::/a/b\n", V2_MOUNT);
        let read = files(&[
            ("/sys/fs/cgroup/a/b/memory.max", "max\n"),
            ("/sys/fs/cgroup/a/b/memory.current", "1000\n"),
            ("/sys/fs/cgroup/a/memory.max", "2147483648\n"),
            ("/sys/fs/cgroup/a/memory.current", "1073741824\n"),
        ]);
        let c = tightest(&h, read).unwrap();
        assert_eq!((c.limit, c.room()), (2 * GIB, GIB));
        let none = files(&[
            ("/sys/fs/cgroup/a/b/memory.max", "max\n"),
            ("/sys/fs/cgroup/a/b/memory.current", "1000\n"),
        ]);
        assert_eq!(tightest(&h, none), None);
    }

    #[test]
    fn v1_limit_and_unlimited() {
        let proc = "5:devices:/\n4:memory:/docker/abc\n3:cpu,cpuacct:/\n";
        let h = hierarchies(proc, V1_MOUNTS);
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup/memory/docker/abc"));
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "1073741824",
            ),
            (
                "/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes",
                "536870912",
            ),
            (
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712",
            ),
            ("/sys/fs/cgroup/memory/memory.usage_in_bytes", "999999999"),
        ]);
        let c = tightest(&h, read).unwrap();
        assert_eq!((c.file, c.room()), ("memory.limit_in_bytes", GIB / 2));
    }

    #[test]
    fn hybrid_reads_both_and_skips_missing_files() {
        let proc = "4:memory:/job\n0::/job\n";
        let h = hierarchies(proc, V1_MOUNTS);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup/unified/job"));
        // The unified hierarchy has no memory controller: no memory.max anywhere.
        let read = files(&[
            (
                "/sys/fs/cgroup/memory/job/memory.limit_in_bytes",
                "3221225472",
            ),
            ("/sys/fs/cgroup/memory/job/memory.usage_in_bytes", "0"),
        ]);
        assert_eq!(tightest(&h, read).unwrap().limit, 3 * GIB);
    }

    #[test]
    fn namespaced_root_and_no_mountinfo() {
        let ns = "40 30 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let h = hierarchies("0::/docker/abc\n", ns);
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup"));
        let h = hierarchies("0::/x\n", "");
        assert_eq!(h[0].dir, PathBuf::from("/sys/fs/cgroup/x"));
        assert!(hierarchies("", V2_MOUNT).is_empty());
    }

    #[test]
    fn room_is_the_smaller_and_says_what_bounds_it() {
        let c = CgroupLimit {
            file: "memory.max",
            limit: GIB,
            in_use: GIB / 4,
        };
        let r = HostRoom::smaller(Some(20 * GIB), Some(c.clone())).unwrap();
        assert_eq!(r.bytes, 3 * GIB / 4);
        assert_eq!(
            r.to_string(),
            "the 768 MiB left under the container's memory limit (cgroup memory.max 1 GiB, 256 MiB in use)"
        );
        let r = HostRoom::smaller(Some(GIB / 2), Some(c)).unwrap();
        assert_eq!(r.cgroup, None);
        assert!(r.to_string().contains("(MemAvailable)"), "{r}");
        assert_eq!(HostRoom::smaller(None, None), None);
    }
}
