//! The unix half of [`super`]: `mmap`, huge-page advice, parallel touch, `mlock`,
//! `RLIMIT_MEMLOCK`, `/proc/meminfo` and `/proc/self/status`.
//!
//! Written by hand over `libc` because no maintained crate combines `MADV_HUGEPAGE`,
//! a multi-threaded first touch and `mlock` with the error details pinstream reports
//! (`memmap2` maps files and anonymous memory but neither touches in parallel nor locks).

use super::Residency;
use crate::units::Bytes;
use std::io;
use std::ptr::NonNull;

/// Transparent huge page size on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// Maps `len` bytes aligned to `align` (a multiple of the page size) by mapping `align` more
/// and unmapping the slack on both sides.
fn map_aligned(len: usize, align: usize) -> io::Result<*mut u8> {
    let total = len
        .checked_add(align - page_size())
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: an anonymous private mapping with no address hint has no preconditions.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let start = raw as usize;
    let aligned = start.div_ceil(align) * align;
    let (head, tail) = (aligned - start, start + total - (aligned + len));
    // SAFETY: both slack ranges lie inside the mapping just made and nothing uses them.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    Ok(aligned as *mut u8)
}

/// An anonymous private mapping, unmapped on drop.
pub struct PageMap {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
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
    /// Maps `len` bytes (rounded up to whole pages) and makes them resident as asked. With
    /// huge pages the start is aligned to 2 MiB so that every 2 MiB of the range can be one
    /// transparent huge page.
    pub fn new(len: usize, how: Residency) -> io::Result<Self> {
        let len = super::round_up(len, page_size())?;
        let align = if how.huge_pages {
            HUGE_PAGE
        } else {
            page_size()
        };
        let raw = map_aligned(len, align)?;
        let map = Self {
            ptr: NonNull::new(raw).expect("mmap never returns null on success"),
            len,
            locked: false,
        };
        if how.huge_pages {
            // SAFETY: the range is our mapping. Failure (no THP) only loses speed.
            let _ = unsafe { libc::madvise(raw.cast(), len, libc::MADV_HUGEPAGE) };
        }
        map.touch_on(how.touch_threads);
        Ok(map)
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

/// Makes every page of `ptr..ptr + len` resident and privately writable without changing what
/// it holds.
///
/// Registration of memory the caller owns does this first, so that what the driver pins
/// does not depend on whether the program has written its pages yet: fresh `malloc` or
/// `mmap` pages have no page of their own until written, and a driver that pins them then
/// may pin the shared zero page, or nothing. (The H200 run that first pointed at this, 10 GiB
/// of fresh `malloc` memory moving 5–7 GB/s after registration, also had transfers crossing
/// registrations, which explains it alone; whether NVIDIA's driver pins unwritten pages has
/// not been isolated.) `MADV_POPULATE_WRITE` (Linux 5.14) faults the pages in as if written,
/// without writing; on older kernels an atomic OR with 0 on one byte of each page does it,
/// which loses no write another thread makes to that byte meanwhile.
///
/// # Safety
/// The range must be mapped, readable and writable memory of this process.
pub unsafe fn populate_write(ptr: *mut u8, len: usize) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let page = page_size();
        let start = ptr as usize / page * page;
        let span = ptr as usize + len - start;
        // SAFETY: the range is mapped (the caller's contract); madvise changes no content.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, span, libc::MADV_POPULATE_WRITE) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
    }
    let page = page_size();
    let mut at = ptr as usize;
    let end = ptr as usize + len;
    while at < end {
        // SAFETY: `at` lies in the caller's readable and writable range (this function's
        // contract), and a byte has no alignment to keep. An atomic OR with 0 faults the page in
        // writable and changes nothing, even with another thread writing that byte meanwhile.
        let byte = unsafe { &*(at as *const std::sync::atomic::AtomicU8) };
        byte.fetch_or(0, std::sync::atomic::Ordering::Relaxed);
        at = (at / page + 1) * page;
    }
    Ok(())
}

/// Bytes of the pages of `start..end` that are not resident now (`mincore`, a piece of at
/// most 256 MiB at a time): what faulting the range in must newly take. Pages only ever read
/// (mapped to the shared zero page) and copy-on-write pages of private file mappings count as
/// resident although writing them takes a page; `None` when `mincore` fails (it refuses
/// unmapped ranges).
pub fn nonresident_bytes(start: usize, end: usize) -> Option<u64> {
    const PIECE: usize = 1 << 16;
    let page = page_size();
    let first = start / page * page;
    let pages = (end.max(start + 1) - first).div_ceil(page);
    let mut vec = vec![0u8; pages.min(PIECE)];
    let mut absent = 0u64;
    for at in (0..pages).step_by(PIECE) {
        let n = (pages - at).min(PIECE);
        let addr = (first + at * page) as *mut libc::c_void;
        // SAFETY: mincore only reads the page tables of our own address space and writes `n`
        // bytes into `vec`, which holds at least `n`.
        if unsafe { libc::mincore(addr, n * page, vec.as_mut_ptr().cast()) } != 0 {
            return None;
        }
        absent += vec[..n].iter().filter(|&&b| b & 1 == 0).count() as u64;
    }
    Some(absent * page as u64)
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

/// What a failed [`PageMap::lock`] of `bytes` means and how to fix it (`limit`: the soft
/// `RLIMIT_MEMLOCK` read after the failure, `None` when unlimited).
pub fn lock_failure(bytes: u64, limit: Option<u64>, source: &io::Error) -> String {
    let limit = limit.map_or_else(|| "unlimited".into(), |l| Bytes(l).to_string());
    format!("mlock could not lock {}: RLIMIT_MEMLOCK is {limit} ({source}). Raise the limit (`ulimit -l unlimited` in a root shell, or a `memlock` line in /etc/security/limits.conf) or use a driver-pinning strategy such as `register` or `nv-host`, which does not count against RLIMIT_MEMLOCK", Bytes(bytes))
}

/// What a failed [`PageMap::new`] of `bytes` means.
pub fn map_failure(bytes: usize, source: &io::Error) -> String {
    format!("mmap of {bytes} bytes failed: {source}")
}

/// What limits a driver's pin here, for the message of a failed one: nothing pinstream can
/// name on unix (the driver's error says it; `RLIMIT_MEMLOCK` does not apply to drivers).
pub fn driver_pin_limit() -> Option<&'static str> {
    None
}

/// This process's resident memory (`VmRSS` from `/proc/self/status`), in bytes; 0 if unknown.
pub fn resident_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The memory cgroup limit with the least room for this process (read from
/// `/proc/self/cgroup`, `/proc/self/mountinfo` and the cgroup's files; `super::cgroup` says
/// how); `None` without one, or off Linux.
pub fn cgroup_limit() -> Option<super::CgroupLimit> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let read = |p: &std::path::Path| std::fs::read_to_string(p).ok();
    let proc = read("/proc/self/cgroup".as_ref())?;
    let mounts = read("/proc/self/mountinfo".as_ref()).unwrap_or_default();
    super::cgroup::tightest(&super::cgroup::hierarchies(&proc, &mounts), read)
}

/// True while a process with id `pid` exists (it may belong to another user).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// CPU time this process has used so far, user and system together (`getrusage`
/// `RUSAGE_SELF`: every thread, the driver's included).
pub fn cpu_time() -> std::time::Duration {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage; RUSAGE_SELF cannot fail with it.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return std::time::Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Opens `path` with `o` (and `flags`, more `open` flags such as `O_DIRECT`) where it is a
/// regular file, without ever waiting in `open`: `Ok(Err(kind))` for anything else. A blocking
/// `open` of a FIFO waits for the other end, forever where none comes, and a serial line's
/// for its carrier; so the path's kind is looked at first, then it is opened with
/// `O_NONBLOCK` (which opens those at once), the open handle's kind checked again (the path
/// may have been replaced in between) and, for a regular file, blocking restored.
pub fn open_regular(
    o: &mut std::fs::OpenOptions,
    flags: i32,
    path: &std::path::Path,
) -> io::Result<Result<std::fs::File, std::fs::FileType>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Ok(Err(kind));
    }
    let file = o.custom_flags(flags | libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Ok(Err(kind));
    }
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL reads the flags of a descriptor `file` keeps open; no memory is passed.
    let status = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: F_SETFL on the same open descriptor, with its own flags less O_NONBLOCK.
    if status < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, status & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Ok(file))
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_user() {
        let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        assert_eq!(me.ok(), Some(effective_uid()));
    }

    #[test]
    fn nonresident_pages_counted() {
        let m = PageMap::new(
            8 * page_size(),
            Residency {
                huge_pages: false,
                touch_threads: 0,
            },
        )
        .unwrap();
        let (p, n) = (m.as_ptr() as usize, m.len());
        assert_eq!(nonresident_bytes(p, p + n), Some(n as u64));
        m.touch(0..3 * page_size());
        let left = (n - 3 * page_size()) as u64;
        assert_eq!(nonresident_bytes(p + 1, p + n), Some(left));
    }

    #[test]
    fn exact_whole_pages() {
        let m = PageMap::new(
            3 * page_size() + 1,
            Residency {
                huge_pages: true,
                touch_threads: 3,
            },
        )
        .unwrap();
        assert_eq!(m.len(), 4 * page_size());
    }
}
