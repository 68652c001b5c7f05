//! Reads and writes that bypass the page cache ([`DIRECT`]: `O_DIRECT` on Linux,
//! `FILE_FLAG_NO_BUFFERING` on Windows), and dropping what a buffered read left in the cache
//! ([`drop_cached`]) where a file system refuses them.

use std::fs::File;

/// Bytes a direct transfer's offset, length and buffer address must be multiples of (the
/// largest logical block size of common disks; 512-byte disks accept it too).
pub const DIRECT_ALIGN: usize = 4096;

/// True where a transfer of `len` bytes at file offset `off` from or to address `addr` may
/// go direct: all three multiples of [`DIRECT_ALIGN`].
pub fn direct_aligned(off: u64, len: usize, addr: usize) -> bool {
    let a = DIRECT_ALIGN;
    off % a as u64 == 0 && len % a == 0 && addr % a == 0
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

/// A regular file mapped read-only into memory (unix `mmap`): its pages are read from the
/// page cache as they are touched, the common way to load a file, for baselines. Unmapped
/// when dropped. Windows: not available ([`MappedFile::map`] says so).
pub struct MappedFile {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a private read-only mapping: no Rust code writes through it, so it may be read
// from any thread.
unsafe impl Send for MappedFile {}
// SAFETY: as above.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps all of `file` (not empty), read-only.
    #[cfg(unix)]
    pub fn map(file: &File) -> std::io::Result<Self> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
        if len == 0 {
            return Err(std::io::Error::other("an empty file cannot be mapped"));
        }
        // SAFETY: a new private read-only mapping of a descriptor `file` keeps open for the
        // call; the kernel chooses the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(MappedFile {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Tells the kernel the mapping is read in no order it can follow
    /// (`madvise(MADV_RANDOM)`): a fault then reads the page it touched and no readahead
    /// follows it, as faults of scattered reads of a mapped file do.
    #[cfg(unix)]
    pub fn advise_random(&self) -> std::io::Result<()> {
        // SAFETY: advice about the mapping this value owns, at its start and of its length;
        // no memory is changed.
        let r = unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_RANDOM) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Not available on this platform (no mapping is made here).
    #[cfg(not(unix))]
    pub fn advise_random(&self) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// Not available on this platform.
    #[cfg(not(unix))]
    pub fn map(_file: &File) -> std::io::Result<Self> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "file mappings are measured on unix only",
        ))
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping holds `len` readable bytes until `self` is dropped. (A file
        // truncated meanwhile by another process makes reads past its end fault, as any
        // mmap user accepts; the baseline maps files the caller names.)
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: unmaps exactly the mapping `map` made; nothing borrows it any more.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
