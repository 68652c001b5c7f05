//! Files in and out of pinned regions.
//!
//! Reading: regular files with large positioned reads on several threads; streams (FIFOs,
//! character devices such as `/dev/urandom`) sequentially, for a length the caller states,
//! since they have none of their own. Kernel sources are read whole, up to a size limit.
//!
//! Writing ([`output`]): regular files through a temporary file renamed into place only when
//! complete; devices and FIFOs written through in place, never replaced.
//!
//! A read from a slow or endless source blocks in the operating system; a caller that must
//! answer a signal at once (the CLI) does so outside this module.

pub mod direct;
pub mod output;
mod platform;
pub(crate) mod temporary;

pub use output::{prepare_output, write_bytes, write_from, FileIdentity, Output, Target};
pub use temporary::{remove_temporaries, RemovedTemporaries};

use super::job::HostMemory;
use crate::backend::os::{self, par};
use crate::units::Bytes;
use platform::{is_block_device, is_char_device, is_fifo, is_socket};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes one thread reads or writes per call.
const IO_PIECE: usize = 64 << 20;
/// The most pieces of one file read or written at once.
const IO_LANES: usize = 8;

/// The largest kernel source [`read_source`] accepts.
pub const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// A file problem, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// Cannot open or stat.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Fewer bytes than stated.
    #[error("{path} holds {} ({have} bytes), shorter than the {want} bytes to be read from it", Bytes(*.have))]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes it has.
        have: u64,
        /// Bytes wanted.
        want: u64,
    },
    /// The file ended early while it was being read (it shrank, or a stream ended).
    #[error("{path} ended after {have} bytes while being read, but {want} were expected{}", if *.stream { "" } else { " (it shrank while being read)" })]
    Ended {
        /// The file.
        path: PathBuf,
        /// Bytes read before the end.
        have: u64,
        /// Bytes expected.
        want: u64,
        /// A FIFO or device rather than a regular file.
        stream: bool,
    },
    /// The caller asked to stop; the temporary file was removed.
    #[error("stopped before the output was complete; nothing was written")]
    Stopped,
    /// Read or write failed.
    #[error("{op} {path} failed: {source}")]
    Rw {
        /// `reading` or `writing`.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A path pinstream will not read or write as asked, and why.
    #[error("cannot {op} {path}: {why}")]
    Refused {
        /// `read` or `write`.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// Why, and what to do instead.
        why: String,
    },
    /// A path that is not a regular file where only one will do, refused before anything
    /// waits on it (a FIFO's `open` waits for its other end).
    #[error("cannot {op} {path}: it is {kind}, not a regular file ({why})")]
    NotRegular {
        /// What was to be done with it (`stream from storage`).
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// What it is (`a FIFO`, `a character device`, `a folder`).
        kind: &'static str,
        /// Why a regular file is needed.
        why: &'static str,
    },
    /// A kernel source above [`MAX_SOURCE_BYTES`].
    #[error("kernel file {path} is larger than {}: is it an OpenCL C source file?", Bytes(*.limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
}

fn open_error(path: &Path) -> impl FnOnce(std::io::Error) -> IoError + '_ {
    move |source| IoError::Open {
        path: path.into(),
        source,
    }
}

/// The size of `path` in bytes.
pub fn file_len(path: &Path) -> Result<u64, IoError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(open_error(path))
}

/// What kind of file `t` is, for a name in messages (`a FIFO`, `a character device`).
pub fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a folder"
    } else if is_fifo(t) {
        "a FIFO"
    } else if is_char_device(t) {
        "a character device"
    } else if is_block_device(t) {
        "a block device"
    } else if is_socket(t) {
        "a socket"
    } else {
        "a file"
    }
}

/// The length of input `path`: `Some(bytes)` for a regular file, `None` for a stream (a
/// FIFO or a device), which has no length of its own: the caller must state how much to
/// read. Folders and sockets are refused.
pub fn input_len(path: &Path) -> Result<Option<u64>, IoError> {
    let m = std::fs::metadata(path).map_err(open_error(path))?;
    let t = m.file_type();
    if t.is_file() {
        return Ok(Some(m.len()));
    }
    if t.is_dir() || is_socket(t) {
        return Err(IoError::Refused {
            op: "read",
            path: path.into(),
            why: format!("it is {}, not a file", kind_of(t)),
        });
    }
    Ok(None)
}

fn pieces(slices: Vec<&mut [u8]>) -> Vec<(u64, &mut [u8])> {
    let mut off = 0u64;
    let mut out = Vec::new();
    for s in slices {
        for p in s.chunks_mut(IO_PIECE) {
            let n = p.len() as u64;
            out.push((off, p));
            off += n;
        }
    }
    out
}

/// Runs `f` on every piece on the one pool ([`par::try_each`]), at most [`IO_LANES`] at once.
fn parallel<T: Send>(
    items: Vec<T>,
    f: impl Fn(T) -> Result<(), std::io::Error> + Sync,
) -> Result<(), std::io::Error> {
    par::try_each(items, IO_LANES, |_, item| f(item))
}

/// Reads the first `region.len()` bytes of `path` into `region`: a regular file in parallel
/// pieces, a stream (FIFO, device) in order.
pub fn read_into(path: &Path, region: &mut dyn HostMemory) -> Result<(), IoError> {
    let file = open_input(path)?;
    read_file_into(&file, path, region)
}

/// Opens input `path` for reading. A caller that must look at the file (is it a regular
/// file?) before reading it opens it once here and passes the handle on to
/// [`read_file_into`]: a FIFO opened twice loses its writer in between (which dies of
/// SIGPIPE), and the second open then waits forever for another.
pub fn open_input(path: &Path) -> Result<File, IoError> {
    File::open(path).map_err(open_error(path))
}

/// Opens regular file `path` for reading, refusing anything else without waiting on it
/// ([`IoError::NotRegular`]: `op` says what was to be done with it, `why` why only a regular
/// file will do): a plain `open` of a FIFO with no writer waits for one forever.
pub fn open_regular(path: &Path, op: &'static str, why: &'static str) -> Result<File, IoError> {
    open_regular_as(path, false, false, (op, why))?.map_err(open_error(path))
}

/// Opens regular file `path` for reading or writing (`write`), past the page cache where
/// `direct` ([`crate::backend::os::cache::DIRECT`]), without waiting on what is not a regular
/// file ([`os::open_regular`]), which is refused as [`IoError::NotRegular`] with `(op, why)`.
/// The outer error is the refusal, the inner the system's.
pub(crate) fn open_regular_as(
    path: &Path,
    write: bool,
    direct: bool,
    (op, why): (&'static str, &'static str),
) -> Result<std::io::Result<File>, IoError> {
    let mut o = std::fs::OpenOptions::new();
    o.read(!write).write(write);
    let flags = if direct { os::cache::DIRECT } else { 0 };
    match os::open_regular(&mut o, flags, path) {
        Ok(Ok(f)) => Ok(Ok(f)),
        Ok(Err(kind)) => Err(IoError::NotRegular {
            op,
            path: path.into(),
            kind: kind_of(kind),
            why,
        }),
        Err(e) => Ok(Err(e)),
    }
}

/// As [`read_into`], from `file`, already open (`path`: its name in messages).
pub fn read_file_into(
    file: &File,
    path: &Path,
    region: &mut dyn HostMemory,
) -> Result<(), IoError> {
    let want = region.len() as u64;
    let meta = file.metadata().map_err(open_error(path))?;
    let stream = !meta.is_file();
    if !stream && meta.len() < want {
        return Err(IoError::Short {
            path: path.into(),
            have: meta.len(),
            want,
        });
    }
    let slices = region.slices_mut(0..region.len()).expect("whole range");
    let read = if stream {
        read_stream(file, slices)
    } else {
        read_pieces(file, slices)
    };
    read.map_err(|source| read_error(path, want, stream, source))
}

/// A failed read of `path` (to byte `want`): the file ended early ([`ended`]), or the system's
/// error.
fn read_error(path: &Path, want: u64, stream: bool, source: std::io::Error) -> IoError {
    match source.kind() {
        std::io::ErrorKind::UnexpectedEof => IoError::Ended {
            path: path.into(),
            have: ended_at(&source).unwrap_or(0),
            want,
            stream,
        },
        _ => IoError::Rw {
            op: "reading",
            path: path.into(),
            source,
        },
    }
}

/// Fills `buf` from byte `at` of regular file `file` (`path`: its name in messages) on this
/// thread, through the page cache, as a program that reads a file into its own memory does;
/// a file that ends first (it shrank while being read) is [`IoError::Ended`].
pub fn read_exact_at(file: &File, path: &Path, at: u64, buf: &mut [u8]) -> Result<(), IoError> {
    let want = transfer_end(at, [buf.len()]).map_err(|e| read_error(path, 0, false, e))?;
    fill_at(|b, off| platform::read_at(file, b, off), at, buf)
        .map_err(|e| read_error(path, want, false, e))
}

/// Fills `buf` from byte `at` by `read_at` (a positioned read: [`platform::read_at`] on a
/// file), as many reads as it takes, retrying one a signal interrupted (`EINTR`); a file that
/// ends first is an `UnexpectedEof` error carrying the offset it ended at ([`ended_at`]).
/// The one loop of every positioned read that must come back whole.
pub(crate) fn fill_at(
    mut read_at: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
    at: u64,
    buf: &mut [u8],
) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let off = at + done as u64;
        match read_at(&mut buf[done..], off) {
            Ok(0) => return Err(ended(off)),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The offset just past `len` bytes at `at`; `None` where it would pass `u64::MAX`.
pub fn offset_end(at: u64, len: usize) -> Option<u64> {
    at.checked_add(u64::try_from(len).ok()?)
}

/// The offset just past a transfer of pieces of `lens` bytes from `at`, checked once at the
/// transfer's start: every offset inside it is then a sum no larger, which cannot overflow.
/// `Err` (`InvalidInput`, before the system is asked) where it would pass `u64::MAX`.
pub(crate) fn transfer_end(at: u64, lens: impl IntoIterator<Item = usize>) -> std::io::Result<u64> {
    let total = lens.into_iter().try_fold(0usize, usize::checked_add);
    total.and_then(|n| offset_end(at, n)).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a transfer at offset {at} would end past the largest file offset"),
        )
    })
}

/// A read that ended early, after this many bytes.
#[derive(Debug, thiserror::Error)]
#[error("ended after {0} bytes")]
struct EndedAt(u64);

fn ended(have: u64) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, EndedAt(have))
}

/// Where the file ended, for an error of [`ended`].
pub(crate) fn ended_at(e: &std::io::Error) -> Option<u64> {
    e.get_ref()
        .and_then(|e| e.downcast_ref::<EndedAt>())
        .map(|e| e.0)
}

fn read_pieces(file: &File, slices: Vec<&mut [u8]>) -> Result<(), std::io::Error> {
    read_chunk(file, 0, slices)
}

/// Reads `file` from byte `at` on into `slices`, in parallel pieces (a whole input, or one
/// chunk of it as a progressive pin makes the chunk resident); a file that ends first is an
/// `UnexpectedEof` error.
pub fn read_chunk(file: &File, at: u64, slices: Vec<&mut [u8]>) -> Result<(), std::io::Error> {
    transfer_end(at, slices.iter().map(|s| s.len()))?;
    parallel(pieces(slices), |(off, buf)| {
        fill_at(|b, o| platform::read_at(file, b, o), at + off, buf)
    })
}

fn read_stream(mut file: &File, slices: Vec<&mut [u8]>) -> Result<(), std::io::Error> {
    let mut have = 0u64;
    for buf in slices {
        let mut done = 0;
        while done < buf.len() {
            match file.read(&mut buf[done..]) {
                Ok(0) => return Err(ended(have + done as u64)),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        have += done as u64;
    }
    Ok(())
}

/// Reads a kernel source: any readable file, FIFO or device that is not a folder, up to
/// [`MAX_SOURCE_BYTES`] (an endless source such as `/dev/zero` is refused at the limit), as
/// UTF-8 text without NUL bytes. An empty source is refused here and in
/// `Context::build_program`: it never reaches the driver.
pub fn read_source(path: &Path) -> Result<String, IoError> {
    let refused = |why: String| IoError::Refused {
        op: "read kernel file",
        path: path.into(),
        why,
    };
    let t = std::fs::metadata(path)
        .map_err(open_error(path))?
        .file_type();
    if t.is_dir() || is_socket(t) {
        return Err(refused(format!("it is {}, not a file", kind_of(t))));
    }
    let file = File::open(path).map_err(open_error(path))?;
    let mut bytes = Vec::new();
    file.take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| IoError::Rw {
            op: "reading",
            path: path.into(),
            source,
        })?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(IoError::TooLarge {
            path: path.into(),
            limit: MAX_SOURCE_BYTES,
        });
    }
    if bytes.contains(&0) {
        return Err(refused(
            "it contains NUL bytes: an OpenCL C source is text (is it a binary?)".into(),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| refused("it is not UTF-8 text: an OpenCL C source is text".into()))?;
    if text.trim().is_empty() {
        return Err(refused(
            "it is empty: it must define at least one `__kernel void NAME(...)`".into(),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pinstream-io-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sources_are_bounded_text() {
        let d = tmp("src");
        let k = d.join("k.cl");
        std::fs::write(&k, "__kernel void f(__global float* x, ulong n) {}").unwrap();
        assert!(read_source(&k).unwrap().contains("__kernel"));
        std::fs::write(&k, " \n\t").unwrap();
        assert!(read_source(&k)
            .unwrap_err()
            .to_string()
            .contains("is empty"));
        std::fs::write(&k, b"ab\0cd").unwrap();
        assert!(read_source(&k).unwrap_err().to_string().contains("NUL"));
        std::fs::write(&k, [0xff, 0xfe, b'a']).unwrap();
        assert!(read_source(&k).unwrap_err().to_string().contains("UTF-8"));
        let e = read_source(&d).unwrap_err().to_string();
        assert!(e.contains("is a folder"), "{e}");
        #[cfg(unix)] // an endless device; Windows has none that std::fs reads
        {
            let e = read_source(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(e.contains("larger than 16 MiB"), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Every positioned read that must come back whole (`read_chunk`'s pieces,
    /// `read_exact_at`, the storage reader's buffered reads) goes through `fill_at`: short
    /// reads are continued, a read a signal interrupted is retried (`read_chunk`'s copy of the
    /// loop returned `EINTR` as a failed read), and the end of the file is an error carrying
    /// where it ended.
    #[test]
    fn a_positioned_read_continues_short_reads_retries_interrupts_and_names_the_end() {
        let file: Vec<u8> = (0..100u8).collect();
        let mut interrupts = 2;
        let mut calls = Vec::new();
        let mut read_at = |buf: &mut [u8], off: u64| {
            calls.push(off);
            if interrupts > 0 {
                interrupts -= 1;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let rest = file.get(off as usize..).unwrap_or(&[]);
            let n = buf.len().min(rest.len()).min(7);
            buf[..n].copy_from_slice(&rest[..n]);
            Ok(n)
        };
        let mut buf = [0u8; 30];
        fill_at(&mut read_at, 10, &mut buf).unwrap();
        assert_eq!(buf.to_vec(), (10..40u8).collect::<Vec<_>>());
        let e = fill_at(&mut read_at, 90, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(ended_at(&e), Some(100));
        assert_eq!(calls, [10, 10, 10, 17, 24, 31, 38, 90, 97, 100]);
        let hard = fill_at(
            |_, _| Err(std::io::ErrorKind::PermissionDenied.into()),
            0,
            &mut buf,
        );
        assert_eq!(
            hard.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }

    #[test]
    fn input_lengths() {
        let d = tmp("len");
        let f = d.join("x.bin");
        std::fs::write(&f, [1u8; 12]).unwrap();
        assert_eq!(input_len(&f).unwrap(), Some(12));
        #[cfg(unix)] // a stream; Windows has no FIFOs or readable devices that std::fs opens
        assert_eq!(input_len(Path::new("/dev/zero")).unwrap(), None);
        assert!(input_len(&d).unwrap_err().to_string().contains("folder"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
