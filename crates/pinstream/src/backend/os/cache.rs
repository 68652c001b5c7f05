//! Reads and writes that bypass the page cache ([`DIRECT`]: `O_DIRECT` on Linux,
//! `FILE_FLAG_NO_BUFFERING` on Windows), and dropping what a buffered read left in the cache
//! ([`drop_cached`]) where a file system refuses them.

use std::fs::File;

/// Bytes a direct transfer's offset, length and buffer address must be multiples of (the
/// largest logical block size of common disks; 512-byte disks accept it too).
pub const DIRECT_ALIGN: usize = 4096;

/// The open flag for unbuffered transfers (`OpenOptionsExt::custom_flags`); 0 where the
/// platform has none.
#[cfg(target_os = "linux")]
pub const DIRECT: i32 = libc::O_DIRECT;
/// The open flag for unbuffered transfers (`OpenOptionsExt::custom_flags`): Windows'
/// `FILE_FLAG_NO_BUFFERING`.
#[cfg(windows)]
pub const DIRECT: u32 = windows_sys::Win32::Storage::FileSystem::FILE_FLAG_NO_BUFFERING;
/// The open flag for unbuffered transfers; none on this platform.
#[cfg(not(any(target_os = "linux", windows)))]
pub const DIRECT: i32 = 0;

/// Tells the kernel that bytes `off..off + len` of `file` will not be read again, so that a
/// buffered read of a file larger than memory does not fill the page cache (Linux:
/// `posix_fadvise(DONTNEED)`; a hint, so failures are ignored; nothing elsewhere).
pub fn drop_cached(file: &File, off: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(off), Ok(len)) = (i64::try_from(off), i64::try_from(len)) else {
            return;
        };
        // SAFETY: a hint about a descriptor `file` keeps open; no memory is passed.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_DONTNEED) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, off, len);
}
