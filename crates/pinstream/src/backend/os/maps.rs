//! What kind of memory backs an address range: the OS's own description of its mappings.
//!
//! Linux reads `/proc/self/maps` (and `statfs` of a backing file, to tell shared memory from
//! a disk file). Windows asks `VirtualQuery`, which gives each committed range's protection
//! and type (`MEM_PRIVATE`, `MEM_MAPPED` for a section view, `MEM_IMAGE` for a loaded
//! executable) and, through `GetMappedFileNameW`, the file behind a view. What Windows cannot
//! tell: whether a view was mapped shared or copy-on-write once it is writable
//! (`PAGE_WRITECOPY` pages that were written turn `PAGE_READWRITE` and private), and which
//! named section a pagefile-backed view belongs to (it has no file: reported as shared
//! memory). Other systems return `ErrorKind::Unsupported`. This module only reports; the
//! memory layer decides what it accepts.

use std::io;
use std::path::PathBuf;

/// What backs one mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous memory (`malloc`, anonymous `mmap`, the heap and stacks).
    Anonymous,
    /// A file in memory-backed storage: tmpfs, `/dev/shm`, `memfd`, System V shared memory, or
    /// an anonymous shared mapping.
    SharedMemory(String),
    /// A file on a disk (or any file system that is not memory-backed).
    File(PathBuf),
    /// A kernel-provided mapping such as `[vdso]` or `[vvar]`.
    Special(String),
}

/// One mapping of this process, as the OS describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// `PROT_READ`.
    pub readable: bool,
    /// `PROT_WRITE`.
    pub writable: bool,
    /// `MAP_SHARED` (else private, copy-on-write).
    pub shared: bool,
    /// Offset in the backing file of `start` (0 without a file, and on Windows).
    pub offset: u64,
    /// What backs it.
    pub backing: Backing,
}

impl Mapping {
    /// `rw-p`-style permissions and the backing, for messages.
    pub fn describe(&self) -> String {
        let perms = format!(
            "{}{}-{}",
            if self.readable { 'r' } else { '-' },
            if self.writable { 'w' } else { '-' },
            if self.shared { 's' } else { 'p' }
        );
        let what = match &self.backing {
            Backing::Anonymous => "anonymous memory".to_string(),
            Backing::SharedMemory(name) => format!("shared memory {name}"),
            Backing::File(path) => format!("file {}", path.display()),
            Backing::Special(name) => format!("kernel mapping {name}"),
        };
        format!("{perms} {what}")
    }
}

/// The mappings of this process that overlap `start..end`, in address order (gaps between
/// them are addresses nothing maps).
pub fn mappings(start: usize, end: usize) -> io::Result<Vec<Mapping>> {
    imp::mappings(start, end)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{Backing, Mapping};
    use std::io;
    use std::path::PathBuf;

    /// `TMPFS_MAGIC` from `linux/magic.h` (also what `memfd` and `/dev/shm` report).
    const TMPFS_MAGIC: i64 = 0x0102_1994;

    pub fn mappings(start: usize, end: usize) -> io::Result<Vec<Mapping>> {
        let text = std::fs::read_to_string("/proc/self/maps")?;
        Ok(text
            .lines()
            .filter_map(parse_line)
            .filter(|m| m.start < end && m.end > start)
            .collect())
    }

    /// One line: `start-end perms offset dev inode [path]`.
    pub(super) fn parse_line(line: &str) -> Option<Mapping> {
        let mut fields = line.split_whitespace();
        let (lo, hi) = fields.next()?.split_once('-')?;
        let perms = fields.next()?.as_bytes();
        let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
        let inode = fields.nth(1)?;
        // The path is the rest of the line and may contain spaces.
        let path = line
            .splitn(6, char::is_whitespace)
            .nth(5)
            .map(str::trim)
            .unwrap_or("");
        Some(Mapping {
            start: usize::from_str_radix(lo, 16).ok()?,
            end: usize::from_str_radix(hi, 16).ok()?,
            readable: perms.first() == Some(&b'r'),
            writable: perms.get(1) == Some(&b'w'),
            shared: perms.get(3) == Some(&b's'),
            offset,
            backing: backing(path, inode != "0"),
        })
    }

    fn backing(path: &str, has_inode: bool) -> Backing {
        // `[anon:NAME]` is anonymous memory a program named (Linux 5.17, PR_SET_VMA_ANON_NAME;
        // some allocators do), `[anon_shmem:NAME]` named shared anonymous memory.
        if path.is_empty()
            || path == "[heap]"
            || path.starts_with("[stack")
            || path.starts_with("[anon:")
        {
            return Backing::Anonymous;
        }
        if path.starts_with("[anon_shmem:") {
            return Backing::SharedMemory(path.to_string());
        }
        if path.starts_with('[') || !has_inode {
            return Backing::Special(path.to_string());
        }
        let memory_named = ["/dev/shm/", "/memfd:", "/SYSV", "/dev/zero"]
            .iter()
            .any(|p| path.starts_with(p));
        let file = path.strip_suffix(" (deleted)").unwrap_or(path);
        if memory_named || on_tmpfs(file) {
            Backing::SharedMemory(path.to_string())
        } else {
            Backing::File(PathBuf::from(file))
        }
    }

    fn on_tmpfs(path: &str) -> bool {
        let Ok(c) = std::ffi::CString::new(path) else {
            return false;
        };
        // SAFETY: an all-zero statfs is a valid value for the call to overwrite.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a NUL-terminated path and `st` a writable statfs.
        unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == TMPFS_MAGIC }
    }
}

#[cfg(windows)]
mod imp {
    use super::{Backing, Mapping};
    use std::io;
    use std::path::PathBuf;
    use windows_sys::Win32::System::Memory::{
        VirtualQuery, MEMORY_BASIC_INFORMATION, MEM_COMMIT, MEM_IMAGE, MEM_MAPPED,
        PAGE_EXECUTE_READ, PAGE_EXECUTE_READWRITE, PAGE_EXECUTE_WRITECOPY, PAGE_GUARD,
        PAGE_NOACCESS, PAGE_READONLY, PAGE_READWRITE, PAGE_WRITECOPY,
    };
    use windows_sys::Win32::System::ProcessStatus::K32GetMappedFileNameW;
    use windows_sys::Win32::System::Threading::GetCurrentProcess;

    /// Committed ranges overlapping `start..end`, one `VirtualQuery` each; reserved and free
    /// ranges are gaps.
    pub fn mappings(start: usize, end: usize) -> io::Result<Vec<Mapping>> {
        let mut out = Vec::new();
        let mut at = start;
        while at < end {
            // SAFETY: an all-zero MEMORY_BASIC_INFORMATION is valid for the call to overwrite.
            let mut mbi: MEMORY_BASIC_INFORMATION = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<MEMORY_BASIC_INFORMATION>();
            // SAFETY: VirtualQuery accepts any address and writes into `mbi`.
            if unsafe { VirtualQuery(at as *const _, &mut mbi, size) } == 0 {
                return Err(io::Error::last_os_error());
            }
            let (lo, hi) = (
                mbi.BaseAddress as usize,
                mbi.BaseAddress as usize + mbi.RegionSize,
            );
            if mbi.State == MEM_COMMIT {
                out.push(describe(&mbi, lo, hi));
            }
            if hi <= at {
                break;
            }
            at = hi;
        }
        Ok(out)
    }

    fn describe(mbi: &MEMORY_BASIC_INFORMATION, start: usize, end: usize) -> Mapping {
        let p = mbi.Protect;
        let base = p & 0xff;
        let usable = p & PAGE_GUARD == 0 && base != PAGE_NOACCESS;
        let readable = usable
            && [
                PAGE_READONLY,
                PAGE_READWRITE,
                PAGE_WRITECOPY,
                PAGE_EXECUTE_READ,
            ]
            .into_iter()
            .chain([PAGE_EXECUTE_READWRITE, PAGE_EXECUTE_WRITECOPY])
            .any(|f| base == f);
        let writable = usable
            && [
                PAGE_READWRITE,
                PAGE_WRITECOPY,
                PAGE_EXECUTE_READWRITE,
                PAGE_EXECUTE_WRITECOPY,
            ]
            .contains(&base);
        let cow = base == PAGE_WRITECOPY || base == PAGE_EXECUTE_WRITECOPY;
        let view = mbi.Type == MEM_MAPPED || mbi.Type == MEM_IMAGE;
        let backing = if !view {
            Backing::Anonymous
        } else {
            match file_name(start) {
                Some(path) => Backing::File(path),
                None => Backing::SharedMemory("(pagefile-backed section)".into()),
            }
        };
        Mapping {
            start,
            end,
            readable,
            writable,
            shared: view && !cow,
            offset: 0,
            backing,
        }
    }

    /// The file behind a mapped view (an NT device path such as
    /// `\Device\HarddiskVolume3\data.bin`), `None` for pagefile-backed sections.
    fn file_name(addr: usize) -> Option<PathBuf> {
        let mut buf = vec![0u16; 1024];
        // SAFETY: `buf` is writable for its length; the pseudo-handle needs no closing.
        let n = unsafe {
            K32GetMappedFileNameW(
                GetCurrentProcess(),
                addr as *const _,
                buf.as_mut_ptr(),
                buf.len() as u32,
            )
        };
        (n > 0).then(|| PathBuf::from(String::from_utf16_lossy(&buf[..n as usize])))
    }
}

#[cfg(not(any(target_os = "linux", windows)))]
mod imp {
    use super::Mapping;
    use std::io;

    pub fn mappings(_start: usize, _end: usize) -> io::Result<Vec<Mapping>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "reading the kinds of memory mappings is implemented for Linux only",
        ))
    }
}

#[cfg(all(test, any(target_os = "linux", windows)))]
mod this_process {
    use super::*;

    #[test]
    fn finds_this_process_heap_memory() {
        let v = vec![1u8; 1 << 20];
        let start = v.as_ptr() as usize;
        let maps = mappings(start, start + v.len()).unwrap();
        assert!(!maps.is_empty());
        assert!(maps.iter().all(|m| m.readable && m.writable && !m.shared));
        assert!(maps
            .iter()
            .all(|m| m.backing == Backing::Anonymous || cfg!(unix)));
        assert!(maps[0].start <= start && maps.last().unwrap().end >= start + v.len());
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::imp::parse_line;
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let anon = parse_line("7f00-7f10 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.start, anon.end), (0x7f00, 0x7f10));
        assert!(anon.readable && anon.writable && !anon.shared);
        assert_eq!(anon.backing, Backing::Anonymous);
        let file = parse_line("1000-2000 r--s 00001000 08:01 1234 /data/my file.bin").unwrap();
        assert!(file.shared && !file.writable);
        assert_eq!(file.offset, 0x1000);
        assert_eq!(
            file.backing,
            Backing::File(PathBuf::from("/data/my file.bin"))
        );
        let shm = parse_line("1000-2000 rw-s 00000000 00:05 99 /dev/zero (deleted)").unwrap();
        assert!(matches!(shm.backing, Backing::SharedMemory(_)));
        let vdso = parse_line("1000-2000 r-xp 00000000 00:00 0 [vdso]").unwrap();
        assert_eq!(vdso.backing, Backing::Special("[vdso]".into()));
        assert_eq!(vdso.describe(), "r--p kernel mapping [vdso]");
        let named = parse_line("1000-2000 rw-p 00000000 00:00 0 [anon:jemalloc]").unwrap();
        assert_eq!(named.backing, Backing::Anonymous);
        let shmem = parse_line("1000-2000 rw-s 00000000 00:01 7 [anon_shmem:pool]").unwrap();
        assert!(matches!(shmem.backing, Backing::SharedMemory(_)));
    }
}
