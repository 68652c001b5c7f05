//! Files read and written past the page cache, block by block at given offsets, for data
//! streamed from storage ([`crate::engine::storage`]): `O_DIRECT` on Linux,
//! `FILE_FLAG_NO_BUFFERING` on Windows ([`crate::backend::os::cache::DIRECT`]).
//!
//! A direct transfer needs its offset, length and buffer address aligned to
//! [`DIRECT_ALIGN`]; the pinned staging is page-aligned and blocks are whole pages, so only
//! a file's unaligned tail (and buffers that are not aligned) goes through a second,
//! buffered handle. A file system that refuses direct transfers (`EINVAL` on open or on the
//! first transfer, as tmpfs on older kernels) is read buffered, dropping what each read left
//! in the page cache (`posix_fadvise(DONTNEED)`), and [`DirectReader::note`] says so.
//! Outputs keep the whole-or-nothing rule of [`super::output`]: a temporary file beside the
//! target, renamed over it by [`DirectWriter::finish`] once every byte is written.

use super::output::{temp_file, Output, Target};
use super::platform;
use super::temporary::Temporary;
use super::{ended_at, fill_at, open_regular_as, transfer_end, IoError};
use crate::backend::os::cache::{direct_aligned, drop_cached, misaligned, DIRECT, DIRECT_ALIGN};
#[cfg(target_os = "linux")]
use crate::backend::os::uring;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Why the files streamed from storage must be regular files.
const OFFSETS: &str = "storage reads a file at offsets, ahead of the device";

/// Opens regular file `path` for reading or writing, with the platform's direct flag where
/// `direct`; anything else is refused without waiting on it ([`open_regular_as`]).
fn open(path: &Path, write: bool, direct: bool) -> Result<std::io::Result<File>, IoError> {
    let op = if write {
        "write"
    } else {
        "stream from storage"
    };
    open_regular_as(path, write, direct, (op, OFFSETS))
}

/// True for the error a file system gives when it refuses direct transfers.
fn refuses_direct(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidInput
}

/// One file's handles: direct (where the file system takes it) and buffered.
struct Handles {
    path: PathBuf,
    direct: Option<File>,
    buffered: File,
    /// Direct transfers failed once and are no longer tried.
    refused: AtomicBool,
    note: Mutex<Option<String>>,
}

impl Handles {
    fn open(path: &Path, write: bool, direct: bool) -> Result<Self, IoError> {
        let err = |source| IoError::Open {
            path: path.into(),
            source,
        };
        let buffered = open(path, write, false)?.map_err(err)?;
        let direct = (direct && DIRECT != 0).then(|| open(path, write, true));
        let (direct, note) = match direct.transpose()? {
            Some(Ok(f)) => (Some(f), None),
            Some(Err(e)) if refuses_direct(&e) => (None, Some(refused_note(path, &e))),
            Some(Err(e)) => return Err(err(e)),
            None => (None, None),
        };
        Ok(Handles {
            path: path.into(),
            direct,
            buffered,
            refused: AtomicBool::new(false),
            note: Mutex::new(note),
        })
    }

    /// The direct handle for a transfer of `len` bytes at `off` from or to `addr`, where
    /// direct transfers are open and the three are aligned.
    fn direct_for(&self, off: u64, len: usize, addr: usize) -> Option<&File> {
        let aligned = direct_aligned(off, len, addr);
        self.direct
            .as_ref()
            .filter(|_| aligned && len > 0 && !self.refused.load(Ordering::Relaxed))
    }

    /// Direct transfers were refused at the first one: the rest go buffered.
    fn refuse(&self, e: &std::io::Error) {
        self.refused.store(true, Ordering::Relaxed);
        let mut note = crate::sync::lock(&self.note);
        note.get_or_insert_with(|| refused_note(&self.path, e));
    }

    fn note(&self) -> Option<String> {
        crate::sync::lock(&self.note).clone()
    }

    /// True while transfers go past the page cache: a direct handle is open and was not
    /// refused (false where direct I/O was not asked for or the platform has none).
    fn is_direct(&self) -> bool {
        self.direct.is_some() && !self.refused.load(Ordering::Relaxed)
    }

    fn rw(&self, op: &'static str, source: std::io::Error) -> IoError {
        IoError::Rw {
            op,
            path: self.path.clone(),
            source,
        }
    }
}

/// The test hook `PINSTREAM_INJECT_FAULT=direct:N`: the process's N-th direct transfer (from
/// 0) and every one after are refused as a file system that opens files for direct I/O but
/// refuses their transfers refuses them (`EINVAL`, [`refuses_direct`]).
fn injected_refusal() -> std::io::Result<()> {
    static TRANSFERS: AtomicUsize = AtomicUsize::new(0);
    let Some(("direct", n)) = crate::backend::injected_fault() else {
        return Ok(());
    };
    if TRANSFERS.fetch_add(1, Ordering::Relaxed) < n {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "PINSTREAM_INJECT_FAULT: a direct transfer refused on purpose",
    ))
}

fn refused_note(path: &Path, e: &std::io::Error) -> String {
    format!(
        "{}: its file system refuses direct I/O ({e}); read and written through the page cache instead (each block read is dropped from the cache after it is read; written blocks stay there until the kernel writes them back)",
        path.display()
    )
}

/// The part of a transfer of `len` bytes that may go direct: all of it where aligned, else
/// the aligned prefix (the tail goes buffered).
fn direct_prefix(len: usize) -> usize {
    len / DIRECT_ALIGN * DIRECT_ALIGN
}

/// A file read block by block at given offsets, past the page cache where possible.
pub struct DirectReader {
    h: Handles,
    len: u64,
    /// io_uring rings for the reader threads (Linux, where the kernel allows it); `None`:
    /// positional reads.
    #[cfg(target_os = "linux")]
    urings: Option<Mutex<Vec<uring::Uring>>>,
}

/// Bytes per read submitted through io_uring: a block's direct part is read in pieces of this
/// size, all in flight at once.
#[cfg(target_os = "linux")]
const URING_PIECE: usize = 1 << 20;

impl DirectReader {
    /// Opens regular file `path` (direct transfers where `direct`), reading through io_uring
    /// where `uring` and the kernel allow it.
    pub fn open_with(path: &Path, direct: bool, uring: bool) -> Result<Self, IoError> {
        let mut r = Self::open(path, direct)?;
        #[cfg(target_os = "linux")]
        if uring && r.h.direct.is_some() {
            r.urings = uring::Uring::new(16).ok().map(|u| Mutex::new(vec![u]));
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (uring, &mut r);
        Ok(r)
    }

    /// True when reads go through io_uring (false once direct reads were refused: they go
    /// buffered, with positional reads).
    pub fn uses_uring(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.urings.is_some() && self.h.is_direct();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Opens regular file `path` (direct transfers where `direct`); its length.
    pub fn open(path: &Path, direct: bool) -> Result<Self, IoError> {
        let h = Handles::open(path, false, direct)?;
        let meta = h.buffered.metadata().map_err(|e| h.rw("reading", e))?;
        Ok(DirectReader {
            h,
            len: meta.len(),
            #[cfg(target_os = "linux")]
            urings: None,
        })
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Why direct transfers are not used, where they were asked for and refused.
    pub fn note(&self) -> Option<String> {
        self.h.note()
    }

    /// True while its reads go past the page cache.
    pub fn is_direct(&self) -> bool {
        self.h.is_direct()
    }

    /// Fills `bufs`, in order, from byte `off` of the file; a file that ends first is
    /// [`IoError::Ended`].
    pub fn read_at(&self, mut off: u64, bufs: &mut [&mut [u8]]) -> Result<(), IoError> {
        // Checked once here: every offset below is a sum no larger than this end.
        transfer_end(off, bufs.iter().map(|b| b.len())).map_err(|e| self.h.rw("reading", e))?;
        #[cfg(target_os = "linux")]
        if self.read_uring(off, bufs)? {
            return Ok(());
        }
        for buf in bufs.iter_mut() {
            let n = buf.len();
            let direct = direct_prefix(n);
            let (head, tail) = buf.split_at_mut(direct);
            self.read_part(off, head)?;
            self.read_part(off + direct as u64, tail)?;
            off += n as u64;
        }
        Ok(())
    }

    /// Reads `bufs` from `off` through io_uring: the aligned parts in pieces all in flight,
    /// the unaligned tails buffered. False (nothing read) where io_uring is not used, or
    /// direct reads turn out refused (then read as without it).
    #[cfg(target_os = "linux")]
    fn read_uring(&self, off: u64, bufs: &mut [&mut [u8]]) -> Result<bool, IoError> {
        let (Some(pool), Some(f)) = (&self.urings, &self.h.direct) else {
            return Ok(false);
        };
        if self.h.refused.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let mut reads = Vec::new();
        let mut tails = Vec::new();
        let mut at = off;
        for buf in bufs.iter_mut() {
            let n = buf.len();
            let (head, tail) = buf.split_at_mut(direct_prefix(n));
            if !(head.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
                || !at.is_multiple_of(DIRECT_ALIGN as u64)
            {
                return Ok(false);
            }
            let mut o = at;
            for piece in head.chunks_mut(URING_PIECE) {
                let len = piece.len() as u64;
                reads.push((o, piece));
                o += len;
            }
            tails.push((at + direct_prefix(n) as u64, tail));
            at += n as u64;
        }
        let taken = crate::sync::lock(pool).pop();
        let mut ring = match taken {
            Some(r) => r,
            None => uring::Uring::new(16).map_err(|e| self.h.rw("reading", e))?,
        };
        let got = injected_refusal().and_then(|()| ring.read_all(f, &mut reads));
        if !ring.is_broken() {
            crate::sync::lock(pool).push(ring);
        }
        let got = match got {
            Err(e) if refuses_direct(&e) => {
                self.h.refuse(&e);
                return Ok(false);
            }
            other => other.map_err(|e| self.h.rw("reading", e))?,
        };
        // A read that came back short (the file ended in it, most likely) is continued
        // buffered: a direct read cannot start where it stopped, unaligned.
        for ((o, b), &n) in reads.iter_mut().zip(&got) {
            self.read_buffered(*o + n as u64, &mut b[n..])?;
        }
        for (o, tail) in tails {
            self.read_part(o, tail)?;
        }
        Ok(true)
    }

    /// Fills `buf` from `off`: direct where it may go direct, the rest (a tail, or what a
    /// short direct read left) buffered.
    fn read_part(&self, off: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let mut done = 0;
        if let Some(f) = self.h.direct_for(off, buf.len(), buf.as_ptr() as usize) {
            match read_direct(f, buf, off) {
                Ok(n) => done = n,
                Err(e) if refuses_direct(&e) => self.h.refuse(&e),
                Err(e) => return Err(self.h.rw("reading", e)),
            }
        }
        self.read_buffered(off + done as u64, &mut buf[done..])
    }

    /// Fills `buf` from `off` through the buffered handle, dropping what it read from the
    /// page cache.
    fn read_buffered(&self, off: u64, buf: &mut [u8]) -> Result<(), IoError> {
        if buf.is_empty() {
            return Ok(());
        }
        let read = fill_at(|b, o| platform::read_at(&self.h.buffered, b, o), off, buf);
        drop_cached(&self.h.buffered, off, buf.len() as u64);
        read.map_err(|e| self.failed(e, off, buf.len()))
    }

    fn failed(&self, e: std::io::Error, off: u64, len: usize) -> IoError {
        match ended_at(&e) {
            None => self.h.rw("reading", e),
            Some(at) => IoError::Ended {
                path: self.h.path.clone(),
                have: at,
                want: off + len as u64,
                stream: false,
            },
        }
    }
}

/// Reads `buf` at `off` through direct handle `f` until it is full, the file ends, or a read
/// comes back short of an aligned position (a direct read cannot go on from there): the
/// bytes read. A short read is no refusal: the caller reads the rest buffered, which finds
/// the end of the file where there is one.
fn read_direct(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    injected_refusal()?;
    let mut done = 0;
    while done < buf.len() {
        let (at, rest) = (off + done as u64, &mut buf[done..]);
        if !direct_aligned(at, rest.len(), rest.as_ptr() as usize) {
            return Err(misaligned());
        }
        match platform::read_at(f, rest, at) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if done % DIRECT_ALIGN != 0 {
            break;
        }
    }
    Ok(done)
}

/// An output written block by block, past the page cache where possible: a regular file
/// through a temporary file renamed over it by [`Self::finish`]; a device, FIFO or the
/// standard output in order, in place.
pub struct DirectWriter {
    out: Output,
    /// The temporary file's handles and the file (regular files): the handles close first
    /// when dropped, so that removing the file is not held up by them (Windows).
    tmp: Option<(Handles, Temporary)>,
    /// A device or FIFO, opened once for every write: a FIFO closed between blocks would end
    /// its reader's read, and opened again it would wait for a reader that is gone.
    through: Option<File>,
    len: u64,
}

impl DirectWriter {
    /// Starts writing `len` bytes to `out` (checked by [`super::output::prepare_output`]). A
    /// FIFO is opened here, which waits until it has a reader.
    pub fn create(out: &Output, len: u64, direct: bool) -> Result<Self, IoError> {
        let through = match &out.target {
            Target::Through { path, .. } => Some(
                OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|source| IoError::Open {
                        path: out.given.clone(),
                        source,
                    })?,
            ),
            _ => None,
        };
        let tmp = match &out.target {
            Target::Replace(path) => {
                let err = |source| IoError::Rw {
                    op: "writing",
                    path: path.clone(),
                    source,
                };
                let t = temp_file(path).map_err(err)?;
                let h = Handles::open(t.path(), true, direct)?;
                Some((h, t))
            }
            _ => None,
        };
        Ok(DirectWriter {
            out: out.clone(),
            tmp,
            through,
            len,
        })
    }

    /// True while its writes go past the page cache.
    pub fn is_direct(&self) -> bool {
        self.tmp.as_ref().is_some_and(|(h, _)| h.is_direct())
    }

    /// Why direct transfers are not used, where they were asked for and refused.
    pub fn note(&self) -> Option<String> {
        let note = self.tmp.as_ref().and_then(|(h, _)| h.note());
        note.map(|n| n.replace(&self.tmp_name(), &self.out.given.display().to_string()))
    }

    fn tmp_name(&self) -> String {
        let t = self
            .tmp
            .as_ref()
            .map(|(_, t)| t.path().display().to_string());
        t.unwrap_or_default()
    }

    /// Writes `bufs`, in order, at byte `off` (a device, FIFO or standard output: `off` must
    /// follow the last write).
    pub fn write_at(&self, mut off: u64, bufs: &[&[u8]]) -> Result<(), IoError> {
        // Checked once here: every offset below is a sum no larger than this end.
        transfer_end(off, bufs.iter().map(|b| b.len())).map_err(|e| self.error(e))?;
        let Some((h, _)) = &self.tmp else {
            return self.write_through(bufs);
        };
        for buf in bufs {
            let direct = direct_prefix(buf.len());
            let (head, tail) = buf.split_at(direct);
            self.write_part(h, off, head)?;
            self.write_part(h, off + direct as u64, tail)?;
            off += buf.len() as u64;
        }
        Ok(())
    }

    fn write_part(&self, h: &Handles, off: u64, buf: &[u8]) -> Result<(), IoError> {
        if let Some(f) = h.direct_for(off, buf.len(), buf.as_ptr() as usize) {
            match injected_refusal().and_then(|()| platform::write_all_at(f, buf, off)) {
                Err(e) if refuses_direct(&e) => h.refuse(&e),
                other => return other.map_err(|e| self.error(e)),
            }
        }
        let w = platform::write_all_at(&h.buffered, buf, off);
        w.map_err(|e| self.error(e))
    }

    fn write_through(&self, bufs: &[&[u8]]) -> Result<(), IoError> {
        let write = |w: &mut dyn Write| bufs.iter().try_for_each(|b| w.write_all(b));
        let r = match self.through.as_ref() {
            Some(mut f) => write(&mut f),
            None => write(&mut std::io::stdout().lock()),
        };
        r.map_err(|e| self.error(e))
    }

    fn error(&self, source: std::io::Error) -> IoError {
        IoError::Rw {
            op: "writing",
            path: self.out.given.clone(),
            source,
        }
    }

    /// Every byte is written: the temporary file gets its exact length, is synced and
    /// renamed over the target. Dropping the writer without this removes it.
    pub fn finish(self) -> Result<(), IoError> {
        let given = self.out.given.clone();
        let Target::Replace(path) = self.out.target.clone() else {
            return Ok(());
        };
        let Some(tmp) = self.finish_kept()? else {
            return Ok(());
        };
        tmp.persist(&path).map_err(|e| IoError::Rw {
            op: "writing",
            path: given,
            source: e,
        })
    }

    /// As [`Self::finish`], but the temporary file is kept where it is, whole and synced,
    /// for the caller to read (a pass's results that the next pass reads); it stays listed
    /// and is removed when dropped. `None` for outputs written in place.
    pub(crate) fn finish_kept(self) -> Result<Option<Temporary>, IoError> {
        let Some((h, tmp)) = self.tmp else {
            return Ok(None);
        };
        drop(h);
        let f = tmp.as_file();
        let done = f.set_len(self.len).and_then(|()| f.sync_all());
        done.map_err(|e| IoError::Rw {
            op: "writing",
            path: self.out.given.clone(),
            source: e,
        })?;
        Ok(Some(tmp))
    }
}

#[cfg(test)]
mod tests;
