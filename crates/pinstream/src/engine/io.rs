//! Files in and out of pinned regions: large positioned reads and writes on several threads;
//! outputs go to a temporary file renamed into place only when complete.

use super::job::HostMemory;
use crate::units::Bytes;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes one thread reads or writes per call.
const IO_PIECE: usize = 64 << 20;

/// A file problem, naming the file and the fix.
#[derive(Debug, thiserror::Error)]
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
    #[error("{path} holds {} ({have} bytes), shorter than the {want} bytes stated{hint}", Bytes(*.have))]
    Short {
        /// The file.
        path: PathBuf,
        /// Bytes it has.
        have: u64,
        /// Bytes wanted.
        want: u64,
        /// What stated the size.
        hint: String,
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
}

/// The size of `path` in bytes.
pub fn file_len(path: &Path) -> Result<u64, IoError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| IoError::Open {
            path: path.into(),
            source,
        })
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

fn parallel<T: Send>(
    items: Vec<T>,
    f: impl Fn(T) -> Result<(), std::io::Error> + Sync,
) -> Result<(), std::io::Error> {
    let threads = crate::host::cores().clamp(1, 8).min(items.len().max(1));
    let mut buckets: Vec<Vec<T>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, it) in items.into_iter().enumerate() {
        buckets[i % threads].push(it);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = buckets
            .into_iter()
            .map(|b| s.spawn(|| b.into_iter().try_for_each(&f)))
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("io thread panicked"))
    })
}

/// Reads the first `region.len()` bytes of `path` into `region`.
pub fn read_into(path: &Path, region: &mut dyn HostMemory, hint: &str) -> Result<(), IoError> {
    let want = region.len() as u64;
    let file = File::open(path).map_err(|source| IoError::Open {
        path: path.into(),
        source,
    })?;
    let have = file.metadata().map(|m| m.len()).unwrap_or(0);
    let short = |have| IoError::Short {
        path: path.into(),
        have,
        want,
        hint: hint.to_string(),
    };
    if have < want {
        return Err(short(have));
    }
    let slices = region.slices_mut(0..region.len()).expect("whole range");
    let r = parallel(pieces(slices), |(off, buf)| {
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], off + done as u64)? {
                0 => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shrank while being read",
                    ))
                }
                n => done += n,
            }
        }
        Ok(())
    });
    r.map_err(|source| match source.kind() {
        std::io::ErrorKind::UnexpectedEof => short(file_len(path).unwrap_or(0)),
        _ => IoError::Rw {
            op: "reading",
            path: path.into(),
            source,
        },
    })
}

/// Writes `len` bytes of `region` to `path` through a temporary file beside it, renamed into
/// place only when every byte is written and synced: `path` is written whole or not at all.
/// `stop` is asked between pieces; once it says yes the temporary file is removed.
pub fn write_from(
    path: &Path,
    region: &dyn HostMemory,
    len: usize,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), IoError> {
    let tmp = TempFile(temp_path(path));
    let stopped = || std::io::Error::new(std::io::ErrorKind::Interrupted, "stop requested");
    let result = (|| {
        let file = File::create(&tmp.0)?;
        file.set_len(len as u64)?;
        let slices = region.slices(0..len).map_err(std::io::Error::other)?;
        let mut items = Vec::new();
        let mut off = 0u64;
        for s in slices {
            for p in s.chunks(IO_PIECE) {
                items.push((off, p));
                off += p.len() as u64;
            }
        }
        parallel(items, |(off, buf)| {
            if stop() {
                Err(stopped())
            } else {
                file.write_all_at(buf, off)
            }
        })?;
        file.sync_all()?;
        if stop() {
            return Err(stopped());
        }
        std::fs::rename(&tmp.0, path)
    })();
    result.map_err(|e| match e.kind() {
        std::io::ErrorKind::Interrupted => IoError::Stopped,
        _ => IoError::Rw {
            op: "writing",
            path: path.into(),
            source: e,
        },
    })
}

/// Removes the temporary file when dropped, on every path (after a successful rename there
/// is nothing left to remove).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The temporary name `write_from` uses for `path` (removed on failure and on interruption).
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.pinstream-tmp-{}", std::process::id()))
}
