//! The operating system's memory services, one file per platform behind one interface:
//! page-aligned memory made resident by several threads ([`PageMap`]), locking it
//! ([`PageMap::lock`]: `mlock` on unix, `VirtualLock` on Windows), faulting in the caller's
//! pages without changing them ([`populate_write`]), memory available, this process's
//! resident memory, what kind of mapping backs a range ([`mappings`]), and a copy whose
//! stores bypass the caches, for memory a device reads next ([`copy_streaming`]).
//!
//! - unix (`unix.rs`): `mmap`, `MADV_HUGEPAGE`, `mlock`, `RLIMIT_MEMLOCK`, `/proc`.
//! - Windows (`windows.rs`): `VirtualAlloc` (large pages when the process holds
//!   `SeLockMemoryPrivilege`), `VirtualLock` after raising the minimum working set,
//!   `GlobalMemoryStatusEx`, `GetProcessMemoryInfo`, `VirtualQuery`. No `/proc` read: under
//!   Wine `/proc` would be the Linux host's, and on Windows it does not exist.

pub mod cache;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod cgroup;
mod maps;
pub mod numa;
pub mod par;
pub(crate) mod simd;
mod streaming;
#[cfg(unix)]
mod unix;
#[cfg(target_os = "linux")]
pub mod uring;
#[cfg(windows)]
mod windows;
pub mod winerr;

pub use cgroup::{CgroupLimit, HostRoom};
pub use maps::{mappings, Backing, Mapping};
use std::io;
pub use streaming::copy_streaming;
#[cfg(unix)]
pub use unix::*;
#[cfg(windows)]
pub use windows::*;

/// Logical cores of this machine (at least 1).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The memory this process may still make resident: the smaller of [`mem_available`] and the
/// room under its memory cgroup's limit ([`cgroup_limit`]), with what bounds it, for every
/// size check and its message. `None` when neither is known.
pub fn host_room() -> Option<HostRoom> {
    HostRoom::smaller(mem_available(), cgroup_limit())
}

/// How to make a mapping resident.
#[derive(Debug, Clone, Copy)]
pub struct Residency {
    /// Ask for huge pages (unix: transparent huge pages through `MADV_HUGEPAGE`; Windows:
    /// large pages, when the process holds `SeLockMemoryPrivilege`).
    pub huge_pages: bool,
    /// Threads that touch one byte per page now; 0 leaves pages to fault in on first use.
    pub touch_threads: usize,
}

/// What [`PageMap`] does alike on every platform; making, locking and releasing the pages
/// are per platform.
impl PageMap {
    /// Touches every page on `threads` threads, each a contiguous piece (none with 0).
    pub(crate) fn touch_on(&self, threads: usize) {
        touch_all(self.len, threads, |r| self.touch(r));
    }

    /// Writes one zero byte into every page of `range` (bytes), making it resident.
    ///
    /// Only for memory not yet handed out: it overwrites whatever the pages hold. The
    /// constructors and the registration path in `hostmem` call it before any slice of the
    /// mapping exists.
    pub(crate) fn touch(&self, range: std::ops::Range<usize>) {
        let base = self.ptr.as_ptr() as usize;
        for off in (range.start..range.end.min(self.len)).step_by(page_size()) {
            // SAFETY: `off` lies inside our mapping; no reference to the memory exists yet.
            unsafe { std::ptr::write_volatile((base + off) as *mut u8, 0) };
        }
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: lengths round up to a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `len` (at least 1) rounded up to a multiple of `unit`, or an out-of-memory error where that
/// does not fit the address space: a size near `usize::MAX` wrapped to a small mapping, then
/// written past (issue 34).
pub(crate) fn round_up(len: usize, unit: usize) -> io::Result<usize> {
    len.max(1).checked_next_multiple_of(unit).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("{len} bytes rounded up to whole pages do not fit the address space"),
        )
    })
}

/// Calls `touch` on `threads` page-aligned slices of `0..len`, on the pool ([`par::try_each`]:
/// at most `threads`, and at most the cores, at once; none for 0 threads).
fn touch_all(len: usize, threads: usize, touch: impl Fn(std::ops::Range<usize>) + Sync) {
    if threads == 0 {
        return;
    }
    let per = len.div_ceil(threads).div_ceil(page_size()) * page_size();
    let ranges = (0..threads)
        .map(|t| (t * per).min(len)..((t + 1) * per).min(len))
        .collect();
    par::run_each(ranges, threads, |_, range| touch(range));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_alive() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }

    #[test]
    fn sizes_past_the_address_space_are_refused_not_wrapped() {
        let how = Residency {
            huge_pages: true,
            touch_threads: 1,
        };
        for len in [usize::MAX, usize::MAX - page_size() + 2, usize::MAX / 2 + 1] {
            let e = PageMap::new(len, how).err();
            assert!(e.is_some(), "{len} bytes were mapped");
        }
    }

    #[test]
    fn maps_touches_and_unmaps() {
        let m = PageMap::new(
            3 * page_size() + 1,
            Residency {
                huge_pages: true,
                touch_threads: 3,
            },
        )
        .unwrap();
        assert!(m.len() >= 4 * page_size());
        assert_eq!(m.as_ptr() as usize % page_size(), 0);
        // SAFETY: the range is the mapping just made, readable and writable.
        unsafe { populate_write(m.as_ptr(), m.len()) }.unwrap();
    }

    #[test]
    fn memory_figures() {
        assert!(host_room().is_some());
        // One reading of the available memory: two would race with the other tests of this
        // process that allocate and free meanwhile (seen once, under the layer's run).
        let available = mem_available();
        assert!(available.is_some_and(|b| b > 0));
        let room = HostRoom::smaller(available, cgroup_limit()).unwrap();
        assert!(room.bytes <= available.unwrap());
        let v = vec![1u8; 8 << 20];
        assert!(
            resident_bytes() >= v.len() as u64 / 2,
            "{}",
            resident_bytes()
        );
    }
}
