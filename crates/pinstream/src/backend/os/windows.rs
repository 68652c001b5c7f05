//! The Windows half of [`super`], over `windows-sys`: `VirtualAlloc` (large pages when the
//! process holds `SeLockMemoryPrivilege`), `VirtualLock` after raising the minimum working set
//! with `SetProcessWorkingSetSizeEx`, `GlobalMemoryStatusEx`, `GetProcessMemoryInfo`.
//!
//! Written by hand because no maintained crate makes memory resident from several threads and
//! locks it with the working-set handling and error details pinstream reports.
//!
//! Driver pinning (`register`, `nv-host`, `alloc-host-ptr`, `svm`, `intel-usm`) needs none of
//! this: the driver locks the pages itself, as on Linux it needs no `RLIMIT_MEMLOCK`. Under
//! WDDM the driver's pinned memory has its own budget, reported as about half of RAM
//! (see docs/windows.md).

use super::Residency;
use std::io;
use std::ptr::NonNull;
use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, ERROR_NOT_ALL_ASSIGNED, HANDLE, LUID, STILL_ACTIVE,
};
use windows_sys::Win32::Security::{
    AdjustTokenPrivileges, LookupPrivilegeValueW, SE_PRIVILEGE_ENABLED, TOKEN_ADJUST_PRIVILEGES,
    TOKEN_PRIVILEGES, TOKEN_QUERY,
};
use windows_sys::Win32::System::Memory::{
    GetLargePageMinimum, GetProcessWorkingSetSizeEx, SetProcessWorkingSetSizeEx, VirtualAlloc,
    VirtualFree, VirtualLock, MEM_COMMIT, MEM_LARGE_PAGES, MEM_RELEASE, MEM_RESERVE,
    PAGE_READWRITE, QUOTA_LIMITS_HARDWS_MIN_ENABLE,
};
use windows_sys::Win32::System::ProcessStatus::{GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::SystemInformation::{
    GetSystemInfo, GlobalMemoryStatusEx, MEMORYSTATUSEX, SYSTEM_INFO,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetExitCodeProcess, OpenProcess, OpenProcessToken,
    PROCESS_QUERY_LIMITED_INFORMATION,
};

/// Memory from `VirtualAlloc`, released on drop.
pub struct PageMap {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
    large: bool,
}

// SAFETY: the allocation is plain memory owned by this value; access goes through &/&mut.
unsafe impl Send for PageMap {}
// SAFETY: as above; shared access is read-only through the safe types above this one.
unsafe impl Sync for PageMap {}

/// The system page size (`GetSystemInfo`).
pub fn page_size() -> usize {
    // SAFETY: an all-zero SYSTEM_INFO is valid for GetSystemInfo to overwrite.
    let mut info: SYSTEM_INFO = unsafe { std::mem::zeroed() };
    // SAFETY: GetSystemInfo writes into our struct and cannot fail.
    unsafe { GetSystemInfo(&mut info) };
    (info.dwPageSize as usize).max(4096)
}

fn alloc(len: usize, flags: u32) -> Option<NonNull<u8>> {
    // SAFETY: a fresh allocation with no address hint has no preconditions.
    let raw = unsafe { VirtualAlloc(std::ptr::null(), len, flags, PAGE_READWRITE) };
    NonNull::new(raw.cast())
}

/// Large pages: only with `SeLockMemoryPrivilege` held (and enabled here); `None` otherwise or
/// when Windows has no contiguous large pages left. Large pages are resident and never paged.
fn alloc_large(len: usize) -> Option<(NonNull<u8>, usize)> {
    // SAFETY: GetLargePageMinimum has no preconditions.
    let large = unsafe { GetLargePageMinimum() };
    if large == 0 {
        return None;
    }
    if !enable_lock_memory_privilege() {
        let why = super::winerr::memory_error_fix(super::winerr::ERROR_PRIVILEGE_NOT_HELD);
        tracing::debug!("no large pages: {}", why.unwrap_or_default());
        return None;
    }
    let len = len.checked_next_multiple_of(large)?;
    alloc(len, MEM_RESERVE | MEM_COMMIT | MEM_LARGE_PAGES).map(|p| (p, len))
}

/// Enables `SeLockMemoryPrivilege` in this process's token; false when the account does not
/// hold it ("Lock pages in memory" in the local security policy).
fn enable_lock_memory_privilege() -> bool {
    let name: Vec<u16> = "SeLockMemoryPrivilege\0".encode_utf16().collect();
    let mut luid = LUID {
        LowPart: 0,
        HighPart: 0,
    };
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: `name` is NUL-terminated; the outputs are our locals; the token is closed below.
    unsafe {
        if LookupPrivilegeValueW(std::ptr::null(), name.as_ptr(), &mut luid) == 0
            || OpenProcessToken(
                GetCurrentProcess(),
                TOKEN_ADJUST_PRIVILEGES | TOKEN_QUERY,
                &mut token,
            ) == 0
        {
            return false;
        }
        let mut tp: TOKEN_PRIVILEGES = std::mem::zeroed();
        tp.PrivilegeCount = 1;
        tp.Privileges[0].Luid = luid;
        tp.Privileges[0].Attributes = SE_PRIVILEGE_ENABLED;
        let ok =
            AdjustTokenPrivileges(token, 0, &tp, 0, std::ptr::null_mut(), std::ptr::null_mut())
                != 0
                && GetLastError() != ERROR_NOT_ALL_ASSIGNED;
        CloseHandle(token);
        ok
    }
}

impl PageMap {
    /// Allocates `len` bytes (rounded up to whole pages) and makes them resident as asked:
    /// large pages when `huge_pages` and the process holds `SeLockMemoryPrivilege`, else
    /// normal pages touched by `touch_threads` threads.
    pub fn new(len: usize, how: Residency) -> io::Result<Self> {
        let len = super::round_up(len, page_size())?;
        if how.huge_pages {
            if let Some((ptr, len)) = alloc_large(len) {
                return Ok(Self {
                    ptr,
                    len,
                    large: true,
                });
            }
        }
        let ptr = alloc(len, MEM_RESERVE | MEM_COMMIT).ok_or_else(io::Error::last_os_error)?;
        let map = Self {
            ptr,
            len,
            large: false,
        };
        map.touch_on(how.touch_threads);
        Ok(map)
    }

    /// Locks the pages in RAM with `VirtualLock`, first raising the process's minimum working
    /// set by the length (`SetProcessWorkingSetSizeEx` with `QUOTA_LIMITS_HARDWS_MIN_ENABLE`):
    /// `VirtualLock` can lock no more than the minimum working set, a few hundred KiB by
    /// default. Large pages are locked already.
    pub fn lock(&mut self) -> io::Result<()> {
        if self.large {
            return Ok(());
        }
        raise_working_set(self.len)?;
        // SAFETY: the range is our allocation.
        if unsafe { VirtualLock(self.ptr.as_ptr().cast(), self.len) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for PageMap {
    fn drop(&mut self) {
        // SAFETY: we own the allocation; releasing it also unlocks it.
        if unsafe { VirtualFree(self.ptr.as_ptr().cast(), 0, MEM_RELEASE) } == 0 {
            tracing::warn!("VirtualFree failed: {}", io::Error::last_os_error());
        }
    }
}

/// The process's (minimum, maximum) working set in bytes.
pub fn working_set() -> Option<(usize, usize)> {
    let (mut min, mut max, mut flags) = (0usize, 0usize, 0u32);
    // SAFETY: the outputs are our locals; the pseudo-handle needs no closing.
    let ok =
        unsafe { GetProcessWorkingSetSizeEx(GetCurrentProcess(), &mut min, &mut max, &mut flags) };
    (ok != 0).then_some((min, max))
}

/// Adds `bytes` to the minimum working set (and the maximum, which must stay above it) as a
/// hard minimum, so that `VirtualLock` may lock them.
fn raise_working_set(bytes: usize) -> io::Result<()> {
    let (min, max) = working_set().ok_or_else(io::Error::last_os_error)?;
    let new_min = min.saturating_add(bytes);
    let new_max = max.max(new_min.saturating_add(page_size() * 64));
    // SAFETY: the pseudo-handle of this process; sizes are plain numbers.
    let ok = unsafe {
        SetProcessWorkingSetSizeEx(
            GetCurrentProcess(),
            new_min,
            new_max,
            QUOTA_LIMITS_HARDWS_MIN_ENABLE,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Faults in every page of `ptr..ptr + len` without changing what it holds: the first byte of
/// each page is read and written back (Windows has no `MADV_POPULATE_WRITE`). This races with
/// a concurrent writer of that byte, which the caller's contract excludes.
///
/// # Safety
/// The range must be committed, readable and writable memory of this process.
pub unsafe fn populate_write(ptr: *mut u8, len: usize) -> io::Result<()> {
    let page = page_size();
    let (mut at, end) = (ptr as usize, ptr as usize + len);
    while at < end {
        // SAFETY: `at` lies in the caller's readable and writable range; the byte is written
        // back unchanged.
        unsafe {
            std::ptr::write_volatile(at as *mut u8, std::ptr::read_volatile(at as *const u8))
        };
        at = (at / page + 1) * page;
    }
    Ok(())
}

/// The limit [`PageMap::lock`] runs into: the minimum working set, in bytes, read after a
/// failure (Windows has no `RLIMIT_MEMLOCK`).
pub fn memlock_limit() -> Option<u64> {
    working_set().map(|(min, _)| min as u64)
}

/// What a failed [`PageMap::lock`] of `bytes` means and how to fix it (`limit`: the minimum
/// working set read after the failure); the wording is [`super::winerr`]'s.
pub fn lock_failure(bytes: u64, limit: Option<u64>, source: &io::Error) -> String {
    super::winerr::lock_failure(bytes, limit, source.raw_os_error(), &source.to_string())
}

/// What a failed [`PageMap::new`] of `bytes` means and how to fix it.
pub fn map_failure(bytes: usize, source: &io::Error) -> String {
    super::winerr::alloc_failure(bytes as u64, source.raw_os_error(), &source.to_string())
}

/// What limits a driver's pin here, for the message of a failed one: WDDM's budget.
pub fn driver_pin_limit() -> Option<&'static str> {
    Some(super::winerr::WDDM_PIN_LIMIT)
}

/// This process's resident memory (the working set, `GetProcessMemoryInfo`), in bytes; 0 if
/// unknown.
pub fn resident_bytes() -> u64 {
    // SAFETY: an all-zero PROCESS_MEMORY_COUNTERS is valid for the call to overwrite.
    let mut c: PROCESS_MEMORY_COUNTERS = unsafe { std::mem::zeroed() };
    let cb = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    // SAFETY: `c` is writable and `cb` its size; the pseudo-handle needs no closing.
    let ok = unsafe { GetProcessMemoryInfo(GetCurrentProcess(), &mut c, cb) };
    if ok == 0 {
        0
    } else {
        c.WorkingSetSize as u64
    }
}

/// `GlobalMemoryStatusEx`, `None` if it fails. A result with no total (impossible on a real
/// machine) is asked again: Wine 8 caches the figures for a second without a lock, and a
/// thread that reads the cache while another refills it sees zeros (seen under Wine when
/// tests ran in parallel).
fn memory_status() -> Option<MEMORYSTATUSEX> {
    for _ in 0..20 {
        // SAFETY: an all-zero MEMORYSTATUSEX is valid once its length is set.
        let mut m: MEMORYSTATUSEX = unsafe { std::mem::zeroed() };
        m.dwLength = std::mem::size_of::<MEMORYSTATUSEX>() as u32;
        // SAFETY: `m` is writable and carries its length.
        if unsafe { GlobalMemoryStatusEx(&mut m) } == 0 {
            return None;
        }
        if m.ullTotalPhys > 0 {
            return Some(m);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    None
}

/// Physical memory available (`ullAvailPhys` from `GlobalMemoryStatusEx`), in bytes.
pub fn mem_available() -> Option<u64> {
    memory_status().map(|m| m.ullAvailPhys)
}

/// Bytes of `start..end` not resident now: not told on Windows (`None`, so registration
/// checks no room there).
pub fn nonresident_bytes(_start: usize, _end: usize) -> Option<u64> {
    None
}

/// No memory cgroup on Windows (job-object limits are not read): always `None`.
pub fn cgroup_limit() -> Option<super::CgroupLimit> {
    None
}

/// Total physical memory (`ullTotalPhys`), in bytes.
pub fn mem_total() -> Option<u64> {
    memory_status().map(|m| m.ullTotalPhys)
}

/// True while a process with id `pid` runs (`OpenProcess` and `GetExitCodeProcess`).
pub fn process_alive(pid: u32) -> bool {
    // SAFETY: OpenProcess has no preconditions; the handle is closed below.
    let h = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if h.is_null() {
        // Access denied means it exists (another user's process).
        return io::Error::last_os_error().raw_os_error() == Some(5);
    }
    let mut code = 0u32;
    // SAFETY: `h` is the handle just opened; `code` is our local.
    let ok = unsafe { GetExitCodeProcess(h, &mut code) } != 0;
    // SAFETY: `h` is ours and closed once.
    unsafe { CloseHandle(h) };
    ok && code == STILL_ACTIVE as u32
}

/// Opens `path` with `o` (and `flags`, more `CreateFile` flags such as
/// `FILE_FLAG_NO_BUFFERING`) where it is a regular file: `Ok(Err(kind))` for anything else.
/// Windows paths that `std::fs` opens name no FIFO whose `open` would wait (a named pipe with
/// no server fails at once), so the open handle's kind is checked after a plain open.
pub fn open_regular(
    o: &mut std::fs::OpenOptions,
    flags: u32,
    path: &std::path::Path,
) -> io::Result<Result<std::fs::File, std::fs::FileType>> {
    use std::os::windows::fs::OpenOptionsExt;
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Ok(Err(kind));
    }
    let file = o.custom_flags(flags).open(path)?;
    let kind = file.metadata()?.file_type();
    Ok(if kind.is_file() { Ok(file) } else { Err(kind) })
}

/// Opaque identity of a file's volume and index (`GetFileInformationByHandle`), the
/// counterpart of unix device and inode numbers.
pub fn file_id(file: &std::fs::File) -> io::Result<(u64, u64)> {
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::{
        GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
    };
    // SAFETY: an all-zero BY_HANDLE_FILE_INFORMATION is valid for the call to overwrite.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is the open file's, borrowed for the call; `info` is writable.
    if unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok((u64::from(info.dwVolumeSerialNumber), index))
}

/// This process's CPU time so far, user plus system (`GetProcessTimes`); zero if it cannot be
/// read.
pub fn cpu_time() -> std::time::Duration {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, GetProcessTimes};
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the pseudo-handle of this process and four live, writable FILETIMEs.
    let ok = unsafe {
        GetProcessTimes(
            GetCurrentProcess(),
            &mut created,
            &mut exited,
            &mut kernel,
            &mut user,
        )
    };
    if ok == 0 {
        return std::time::Duration::ZERO;
    }
    // FILETIME counts 100 ns units.
    let ns = |t: FILETIME| (u64::from(t.dwHighDateTime) << 32 | u64::from(t.dwLowDateTime)) * 100;
    std::time::Duration::from_nanos(ns(kernel) + ns(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn working_set_is_known() {
        let (min, max) = working_set().unwrap();
        assert!(min > 0 && max >= min);
    }

    #[test]
    fn winerr_codes_are_windows_sys_codes() {
        use super::super::winerr as w;
        use windows_sys::Win32::Foundation as f;
        let pairs = [
            (w::ERROR_NOT_ENOUGH_MEMORY, f::ERROR_NOT_ENOUGH_MEMORY),
            (w::ERROR_OUTOFMEMORY, f::ERROR_OUTOFMEMORY),
            (w::ERROR_PRIVILEGE_NOT_HELD, f::ERROR_PRIVILEGE_NOT_HELD),
            (w::ERROR_NO_SYSTEM_RESOURCES, f::ERROR_NO_SYSTEM_RESOURCES),
            (w::ERROR_WORKING_SET_QUOTA, f::ERROR_WORKING_SET_QUOTA),
            (w::ERROR_COMMITMENT_LIMIT, f::ERROR_COMMITMENT_LIMIT),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours as u32, theirs);
        }
    }

    #[test]
    fn a_real_lock_error_gets_the_message_with_the_fix() {
        let e = io::Error::from_raw_os_error(super::super::winerr::ERROR_WORKING_SET_QUOTA);
        let m = lock_failure(1 << 20, memlock_limit(), &e);
        assert!(
            m.contains("ERROR_WORKING_SET_QUOTA, 1453") && m.contains("`register`"),
            "{m}"
        );
    }

    #[test]
    fn an_allocation_too_large_for_the_machine_names_the_fix() {
        let how = Residency {
            huge_pages: false,
            touch_threads: 0,
        };
        let e = PageMap::new(1 << 46, how)
            .err()
            .expect("64 TiB cannot be committed");
        let m = map_failure(1 << 46, &e);
        assert!(m.starts_with("VirtualAlloc of 64 TiB failed: "), "{m}");
        let code = e.raw_os_error();
        assert!(
            code.and_then(super::super::winerr::memory_error_fix)
                .is_some(),
            "{code:?}: {m}"
        );
    }

    #[test]
    fn file_ids_tell_files_apart() {
        let a = tempfile::tempfile().unwrap();
        let b = tempfile::tempfile().unwrap();
        assert_eq!(file_id(&a).unwrap(), file_id(&a).unwrap());
        assert_ne!(file_id(&a).unwrap(), file_id(&b).unwrap());
    }
}
