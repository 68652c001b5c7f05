//! Outputs: what a path names, checked before any work, and written whole or not at all.
//!
//! [`prepare_output`] looks at a path once, before the run, and decides:
//! - a regular file, or a name that does not exist yet: [`Target::Replace`]. The data goes to
//!   a temporary file created in the same folder by `tempfile` (`O_EXCL`, an unpredictable
//!   name, so nobody can plant a link under it) and is renamed over the target only when
//!   every byte is written and synced. The folder is checked for writability by creating
//!   (and removing) such a file; an existing read-only file is refused, as a shell would.
//!   A replaced file keeps its permission bits; it is owned by whoever ran pinstream.
//! - a character device (`/dev/null`, a terminal) or a FIFO: [`Target::Through`], written in
//!   place and never replaced, renamed or truncated. A FIFO's writer waits for a reader.
//! - the process's own standard output (`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`):
//!   [`Target::Stdout`], written through the standard output handle (so a `>>` redirection
//!   appends and a pipe gets the bytes); other `/dev/fd/N` and `/dev/stderr` are written
//!   through in place (appending).
//! - a symbolic link: its target is written (for a regular file, the rename replaces the
//!   target, not the link), once resolved. A link that points nowhere is refused (pass the
//!   target itself), and so is a link in a shared sticky folder such as `/tmp` owned by
//!   another user (the rule of Linux's `fs.protected_symlinks`: such a link could send a
//!   root run's output anywhere).
//! - folders, sockets and block devices are refused.
//!
//! Temporary files are named `.NAME.pinstream-tmp-PID.RANDOM` beside the target. A program
//! about to end without unwinding (a second Ctrl-C) removes them first with
//! [`super::remove_temporaries`]. A run killed by SIGKILL cannot remove its own; the next
//! [`prepare_output`] for the same target removes those whose process (PID) no longer runs
//! and that belong to the same user, and lists them in [`Output::removed`]. One whose PID is
//! running again is left alone.

use super::platform::{self, is_block_device, is_char_device, is_fifo};
use super::temporary::Temporary;
use super::{kind_of, IoError, IO_PIECE};
use crate::backend::os;
use crate::engine::job::HostMemory;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What an output path names, and so how it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A regular file (existing or new) at this path, symbolic links resolved: written to a
    /// temporary file beside it and renamed over it when whole.
    Replace(PathBuf),
    /// A character device, a FIFO or another process's descriptor, written in place.
    Through {
        /// The path to open for writing.
        path: PathBuf,
        /// What it is, for messages (`a FIFO`).
        kind: &'static str,
    },
    /// This process's standard output.
    Stdout,
}

/// An output checked by [`prepare_output`].
#[derive(Debug, Clone)]
pub struct Output {
    /// The path as given.
    pub given: PathBuf,
    /// How it is written.
    pub target: Target,
    /// Temporary files of earlier runs that were killed, removed while preparing.
    pub removed: Vec<PathBuf>,
}

/// Which file a path names, to find two paths of one run that are the same file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    key: Key,
    char_device: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Inode(u64, u64),
    Path(PathBuf),
    Stdout,
}

impl FileIdentity {
    /// The identity of `path`: device and inode where it exists (links followed), else its
    /// absolute path with the folder's links resolved.
    pub fn of(path: &Path) -> Self {
        if is_stdout(path) {
            return FileIdentity {
                key: Key::Stdout,
                char_device: false,
            };
        }
        match std::fs::metadata(path) {
            Ok(m) => FileIdentity {
                key: platform::identity(path, &m)
                    .map_or_else(|| Key::Path(absolute(path)), |(d, i)| Key::Inode(d, i)),
                char_device: is_char_device(m.file_type()),
            },
            Err(_) => FileIdentity {
                key: Key::Path(absolute(path)),
                char_device: false,
            },
        }
    }

    /// True for a character device (writing it twice, or reading and writing it, replaces
    /// nothing: `/dev/null`).
    pub fn is_char_device(&self) -> bool {
        self.char_device
    }
}

fn absolute(path: &Path) -> PathBuf {
    let dir = folder(path);
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match path.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    }
}

/// The folder `path` is in (`.` for a bare name).
fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn is_stdout(path: &Path) -> bool {
    ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"]
        .iter()
        .any(|p| path == Path::new(p))
}

/// Another descriptor of this process (`/dev/stderr`, `/dev/fd/N`): written in place.
fn is_descriptor(path: &Path) -> bool {
    path == Path::new("/dev/stderr")
        || path.starts_with("/dev/fd/")
        || path.starts_with("/proc/self/fd/")
}

/// Looks at output `path` before any work: what it is, whether it can be written, and how
/// (see the module documentation). Removes temporary files that killed runs left for it.
pub fn prepare_output(path: &Path) -> Result<Output, IoError> {
    let target = classify(path)?;
    let removed = match &target {
        Target::Replace(p) => {
            probe_folder(p)?;
            remove_stale(p)
        }
        _ => Vec::new(),
    };
    Ok(Output {
        given: path.to_path_buf(),
        target,
        removed,
    })
}

fn refused(path: &Path, why: String) -> IoError {
    IoError::Refused {
        op: "write",
        path: path.into(),
        why,
    }
}

fn classify(path: &Path) -> Result<Target, IoError> {
    if is_stdout(path) {
        return Ok(Target::Stdout);
    }
    if is_descriptor(path) {
        std::fs::metadata(path)
            .map_err(|e| refused(path, format!("{e}: no such open file descriptor")))?;
        return Ok(Target::Through {
            path: path.into(),
            kind: "a file descriptor",
        });
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return new_file(path),
        Err(e) => return Err(refused(path, e.to_string())),
    };
    if meta.file_type().is_symlink() {
        return follow_link(path, &meta);
    }
    existing(path, &meta)
}

fn new_file(path: &Path) -> Result<Target, IoError> {
    let dir = folder(path);
    if !dir.is_dir() {
        return Err(refused(
            path,
            format!("folder {} does not exist", dir.display()),
        ));
    }
    if path.file_name().is_none() {
        return Err(refused(path, "it is not a file name".into()));
    }
    Ok(Target::Replace(path.into()))
}

fn existing(path: &Path, meta: &std::fs::Metadata) -> Result<Target, IoError> {
    let t = meta.file_type();
    if t.is_file() {
        // Replacing a file the user cannot write would defeat its protection.
        OpenOptions::new().write(true).open(path).map_err(|e| {
            refused(
                path,
                format!(
                    "{e}; the file is not writable by this user: make it writable or remove it"
                ),
            )
        })?;
        return Ok(Target::Replace(path.into()));
    }
    if is_char_device(t) {
        OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| refused(path, e.to_string()))?;
        return Ok(Target::Through {
            path: path.into(),
            kind: "a character device",
        });
    }
    if is_fifo(t) {
        return Ok(Target::Through {
            path: path.into(),
            kind: "a FIFO",
        });
    }
    let why = if is_block_device(t) {
        "it is a block device: pinstream never writes to a device that holds a file system; pass a file".to_string()
    } else if t.is_dir() {
        format!(
            "it is a folder: pass a file name in it, e.g. {}",
            path.join("out.bin").display()
        )
    } else {
        format!(
            "it is {}, which pinstream cannot write: pass a file",
            kind_of(t)
        )
    };
    Err(refused(path, why))
}

/// A symbolic link: refused where it points nowhere or could be another user's trap; else
/// its target, classified as itself.
fn follow_link(path: &Path, link: &std::fs::Metadata) -> Result<Target, IoError> {
    let dir = std::fs::metadata(folder(path)).map_err(|e| refused(path, e.to_string()))?;
    if let Some(uid) = platform::foreign_link_in_shared_folder(link, &dir) {
        return Err(refused(path, format!(
            "it is a symbolic link owned by another user (uid {uid}) in the shared folder {}; pinstream does not follow such links (they could send the output anywhere): pass the file it should write itself",
            folder(path).display()
        )));
    }
    match std::fs::canonicalize(path) {
        Ok(real) => {
            let meta = std::fs::metadata(&real).map_err(|e| refused(path, e.to_string()))?;
            existing(&real, &meta)
        }
        Err(_) => {
            let to = std::fs::read_link(path).unwrap_or_default();
            Err(refused(
                path,
                format!(
                "it is a symbolic link to {}, which does not exist: pass {} itself to create it",
                to.display(),
                to.display()
            ),
            ))
        }
    }
}

/// The prefix of every temporary file for `target`, up to the process id.
fn temp_prefix(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    format!(".{name}.pinstream-tmp-")
}

pub(super) fn temp_file(target: &Path) -> std::io::Result<Temporary> {
    let mode = platform::mode_of(target);
    let prefix = format!("{}{}.", temp_prefix(target), std::process::id());
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).rand_bytes(8);
    let perms = platform::permissions(mode);
    if let Some(p) = &perms {
        builder.permissions(p.clone());
    }
    let file = Temporary::create(|| builder.tempfile_in(folder(target)))?;
    if let Some(p) = perms.filter(|_| mode != 0o666) {
        // Keep a replaced file's bits exactly (the umask applied at creation).
        file.as_file().set_permissions(p)?;
    }
    Ok(file)
}

/// The folder of `target` accepts a new file (permissions, read-only file systems, quotas
/// on inodes): made and removed at once.
fn probe_folder(target: &Path) -> Result<(), IoError> {
    temp_file(target).map(drop).map_err(|e| {
        refused(
            target,
            format!(
                "cannot create a file in folder {} ({e}); check that it is writable",
                folder(target).display()
            ),
        )
    })
}

/// Removes the temporary files of `target` left by runs that no longer exist (killed with
/// SIGKILL, or by a power cut), belonging to this user.
fn remove_stale(target: &Path) -> Vec<PathBuf> {
    let prefix = temp_prefix(target);
    let Ok(entries) = std::fs::read_dir(folder(target)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = stale_pid(&name, &prefix)?;
            let m = std::fs::symlink_metadata(e.path()).ok()?;
            let stale = m.is_file()
                && platform::owned_by_me(&m)
                && pid != std::process::id()
                && !os::process_alive(pid);
            (stale && std::fs::remove_file(e.path()).is_ok()).then(|| e.path())
        })
        .collect()
}

/// The process id in a temporary file's name `PREFIX PID[.RANDOM]`.
fn stale_pid(name: &str, prefix: &str) -> Option<u32> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, tail) = rest.split_at(rest.find('.').unwrap_or(rest.len()));
    (tail.is_empty() || tail.len() > 1).then_some(())?;
    pid.parse().ok()
}

/// Writes `len` bytes of `region` to `out`: whole or not at all for a file; in place for a
/// device, FIFO or standard output. `stop` is asked between pieces; once it says yes, a
/// temporary file is removed and nothing replaces the target.
pub fn write_from(
    out: &Output,
    region: &dyn HostMemory,
    len: usize,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), IoError> {
    let slices = region
        .slices(0..len)
        .map_err(|e| write_error(out, std::io::Error::other(e)))?;
    write_slices(out, &slices, stop)
}

/// Writes `bytes` to `out` (see [`write_from`]).
pub fn write_bytes(
    out: &Output,
    bytes: &[u8],
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), IoError> {
    write_slices(out, &[bytes], stop)
}

fn write_error(out: &Output, e: std::io::Error) -> IoError {
    match e.kind() {
        std::io::ErrorKind::Interrupted => IoError::Stopped,
        _ => IoError::Rw {
            op: "writing",
            path: out.given.clone(),
            source: e,
        },
    }
}

fn stopped() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Interrupted, "stop requested")
}

fn write_slices(
    out: &Output,
    slices: &[&[u8]],
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<(), IoError> {
    let result = match &out.target {
        Target::Replace(path) => replace(path, slices, stop),
        Target::Through { path, .. } => {
            let file = OpenOptions::new().append(true).open(path);
            file.and_then(|mut f| sequential(&mut f, slices, stop))
        }
        Target::Stdout => sequential(&mut std::io::stdout().lock(), slices, stop),
    };
    result.map_err(|e| write_error(out, e))
}

fn sequential(
    w: &mut dyn Write,
    slices: &[&[u8]],
    stop: &(dyn Fn() -> bool + Sync),
) -> std::io::Result<()> {
    for piece in slices.iter().flat_map(|s| s.chunks(IO_PIECE)) {
        if stop() {
            return Err(stopped());
        }
        w.write_all(piece)?;
    }
    w.flush()
}

/// The temporary file, filled in parallel pieces, synced, then renamed over `path`; on any
/// failure or stop it is removed (a [`Temporary`] removes itself when dropped).
fn replace(path: &Path, slices: &[&[u8]], stop: &(dyn Fn() -> bool + Sync)) -> std::io::Result<()> {
    let tmp = temp_file(path)?;
    let file: &File = tmp.as_file();
    let len: usize = slices.iter().map(|s| s.len()).sum();
    file.set_len(len as u64)?;
    let mut items = Vec::new();
    let mut off = 0u64;
    for s in slices {
        for p in s.chunks(IO_PIECE) {
            items.push((off, p));
            off += p.len() as u64;
        }
    }
    super::parallel(items, |(off, buf)| {
        if stop() {
            Err(stopped())
        } else {
            platform::write_all_at(file, buf, off)
        }
    })?;
    file.sync_all()?;
    if stop() {
        return Err(stopped());
    }
    tmp.persist(path)
}

#[cfg(test)]
mod tests;
