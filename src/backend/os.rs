//! Page-aligned anonymous memory from the OS: `mmap`, huge-page advice, parallel touch, `mlock`.
//!
//! Written by hand over `libc` because no maintained crate combines `MADV_HUGEPAGE`,
//! a multi-threaded first touch and `mlock` with the error details pinstream reports
//! (`memmap2` maps files and anonymous memory but neither touches in parallel nor locks).

use std::io;
use std::ptr::NonNull;

/// How to make a mapping resident.
#[derive(Debug, Clone, Copy)]
pub struct Residency {
    /// Ask for transparent huge pages (`MADV_HUGEPAGE`).
    pub huge_pages: bool,
    /// Threads that touch one byte per page now; 0 leaves pages to fault in on first use.
    pub touch_threads: usize,
}

/// An anonymous private mapping, unmapped on drop.
pub struct PageMap {
    ptr: NonNull<u8>,
    len: usize,
    locked: bool,
}

// SAFETY: the mapping is plain memory owned by this value; access goes through &/&mut.
unsafe impl Send for PageMap {}
// SAFETY: as above; shared access is read-only through the safe types above this one.
unsafe impl Sync for PageMap {}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

impl PageMap {
    /// Maps `len` bytes (rounded up to whole pages) and makes them resident as asked.
    pub fn new(len: usize, how: Residency) -> io::Result<Self> {
        let len = len.max(1).div_ceil(page_size()) * page_size();
        // SAFETY: an anonymous private mapping with no address hint has no preconditions.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = Self {
            ptr: NonNull::new(raw.cast()).expect("mmap never returns null on success"),
            len,
            locked: false,
        };
        if how.huge_pages {
            // SAFETY: the range is our mapping. Failure (no THP) only loses speed.
            let _ = unsafe { libc::madvise(raw, len, libc::MADV_HUGEPAGE) };
        }
        if how.touch_threads > 0 {
            map.touch(how.touch_threads);
        }
        Ok(map)
    }

    fn touch(&self, threads: usize) {
        let page = page_size();
        let pages = self.len / page;
        let per = pages.div_ceil(threads.max(1));
        let base = self.ptr.as_ptr() as usize;
        std::thread::scope(|s| {
            for t in 0..threads {
                let (first, last) = (t * per, ((t + 1) * per).min(pages));
                s.spawn(move || {
                    for p in first..last {
                        // SAFETY: page p lies inside our mapping; no other reference to the
                        // memory exists yet (the map is being constructed).
                        unsafe { std::ptr::write_volatile((base + p * page) as *mut u8, 0) };
                    }
                });
            }
        });
    }

    /// Locks the pages in RAM with `mlock`.
    pub fn lock(&mut self) -> io::Result<()> {
        // SAFETY: the range is our mapping.
        if unsafe { libc::mlock(self.ptr.as_ptr().cast(), self.len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.locked = true;
        Ok(())
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

impl Drop for PageMap {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; munmap also drops any mlock.
        if unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) } != 0 {
            tracing::warn!("munmap failed: {}", io::Error::last_os_error());
        }
        let _ = self.locked;
    }
}

/// `RLIMIT_MEMLOCK` soft limit in bytes (`None` when unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into our struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(lim.rlim_cur)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(m.len(), 4 * page_size());
        assert_eq!(m.as_ptr() as usize % page_size(), 0);
    }
}
