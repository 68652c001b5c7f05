//! What files look like on each platform, for [`super`] and [`super::output`]: positioned
//! reads and writes, file kinds, identities, owners and permission bits.
//!
//! unix: `std::os::unix::fs` (`read_at`/`write_all_at`, FIFOs and devices, device and inode,
//! uid, mode bits). Windows: `std::os::windows::fs::FileExt` (`seek_read`/`seek_write`, which
//! take the offset per call and so are safe from several threads on one handle), file IDs
//! from `GetFileInformationByHandle` (the backend's `file_id`). Windows has no FIFOs,
//! sockets or block devices among paths `std::fs` opens, no uid in file metadata (ACLs decide)
//! and no sticky shared folders; the rules that need them do not apply there.

use std::fs::{File, FileType, Metadata};
use std::io;
use std::path::Path;

#[cfg(unix)]
mod imp {
    use super::*;
    use crate::backend::os;
    use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};

    pub fn read_at(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
        file.read_at(buf, off)
    }

    pub fn write_all_at(file: &File, buf: &[u8], off: u64) -> io::Result<()> {
        file.write_all_at(buf, off)
    }

    pub fn is_fifo(t: FileType) -> bool {
        t.is_fifo()
    }

    pub fn is_char_device(t: FileType) -> bool {
        t.is_char_device()
    }

    pub fn is_block_device(t: FileType) -> bool {
        t.is_block_device()
    }

    pub fn is_socket(t: FileType) -> bool {
        t.is_socket()
    }

    /// Device and inode of the file at `path` (links followed).
    pub fn identity(_path: &Path, m: &Metadata) -> Option<(u64, u64)> {
        Some((m.dev(), m.ino()))
    }

    /// The file belongs to the user running pinstream.
    pub fn owned_by_me(m: &Metadata) -> bool {
        m.uid() == os::effective_uid()
    }

    /// A link another user planted in a shared sticky folder (`/tmp`): its owner's uid.
    pub fn foreign_link_in_shared_folder(link: &Metadata, dir: &Metadata) -> Option<u32> {
        let shared = dir.mode() & 0o1002 == 0o1002; // sticky and world-writable, as /tmp
        (shared && link.uid() != os::effective_uid() && dir.uid() != link.uid()).then(|| link.uid())
    }

    /// Permission bits of an existing file (0o666 for a new one).
    pub fn mode_of(target: &Path) -> u32 {
        std::fs::metadata(target).map_or(0o666, |m| m.mode() & 0o777)
    }

    pub fn permissions(mode: u32) -> Option<std::fs::Permissions> {
        Some(std::fs::Permissions::from_mode(mode))
    }
}

#[cfg(windows)]
mod imp {
    use super::*;
    use crate::backend::os;
    use std::os::windows::fs::FileExt;

    pub fn read_at(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
        file.seek_read(buf, off)
    }

    pub fn write_all_at(file: &File, mut buf: &[u8], mut off: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match file.seek_write(buf, off) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    off += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn is_fifo(_: FileType) -> bool {
        false
    }

    /// Windows devices opened by name (`NUL`, `CON`, `\\.\…`) are neither files nor folders.
    pub fn is_char_device(t: FileType) -> bool {
        !t.is_file() && !t.is_dir() && !t.is_symlink()
    }

    pub fn is_block_device(_: FileType) -> bool {
        false
    }

    pub fn is_socket(_: FileType) -> bool {
        false
    }

    /// Volume serial number and file index (`GetFileInformationByHandle`).
    pub fn identity(path: &Path, _m: &Metadata) -> Option<(u64, u64)> {
        File::open(path).and_then(|f| os::file_id(&f)).ok()
    }

    /// Windows metadata carries no owner; the folder's ACL decided who could create it.
    pub fn owned_by_me(_m: &Metadata) -> bool {
        true
    }

    /// Windows has no sticky shared folders (and creating links needs a privilege).
    pub fn foreign_link_in_shared_folder(_link: &Metadata, _dir: &Metadata) -> Option<u32> {
        None
    }

    pub fn mode_of(_target: &Path) -> u32 {
        0o666
    }

    /// Windows files have a read-only flag, not mode bits: the new file keeps the default.
    pub fn permissions(_mode: u32) -> Option<std::fs::Permissions> {
        None
    }
}

pub(super) use imp::*;
