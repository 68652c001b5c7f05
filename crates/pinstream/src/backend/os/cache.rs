//! Reads and writes that bypass the page cache ([`DIRECT`]: `O_DIRECT` on Linux,
//! `FILE_FLAG_NO_BUFFERING` on Windows), dropping what a buffered read left in the cache
//! ([`drop_cached`]) where a file system refuses them, and turning readahead off for a file
//! read in no order ([`advise_random`]).

use std::fs::File;

/// Bytes a direct transfer's offset, length and buffer address must be multiples of (the
/// largest logical block size of common disks; 512-byte disks accept it too).
pub const DIRECT_ALIGN: usize = 4096;

/// True where a transfer of `len` bytes at file offset `off` from or to address `addr` may
/// go direct: all three multiples of [`DIRECT_ALIGN`].
pub fn direct_aligned(off: u64, len: usize, addr: usize) -> bool {
    let a = DIRECT_ALIGN;
    off.is_multiple_of(a as u64) && len.is_multiple_of(a) && addr.is_multiple_of(a)
}

/// The error of a direct transfer that is not [`direct_aligned`], given before the system is
/// asked, on every platform: Windows and file systems that check alignment first refuse it,
/// but ext4 and XFS answer a direct read at the end of a file with 0 bytes whatever its
/// alignment, so a misaligned transfer would pass unseen on them and fail elsewhere.
pub fn misaligned() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("a direct transfer's offset, length and buffer must be multiples of {DIRECT_ALIGN} bytes"),
    )
}

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

/// Tells the kernel that `file` is read in no order it can follow
/// (`posix_fadvise(POSIX_FADV_RANDOM)`, for the open file description): no readahead follows
/// a read, so each buffered read fetches only the pages it asked for, as a fault of a mapped
/// file under `madvise(MADV_RANDOM)` does. Linux only; elsewhere `Unsupported`.
pub fn advise_random(file: &File) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a hint about a descriptor `file` keeps open (offset 0, length 0: all of
        // it); no memory is passed.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        match r {
            0 => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        Err(std::io::ErrorKind::Unsupported.into())
    }
}
