//! The temporary files outputs are written to before they replace their target
//! ([`Temporary`]), listed while they exist, so that a process about to end without
//! unwinding (a program's second Ctrl-C, its watchdog) can remove them first:
//! [`remove_temporaries`]. Nothing here runs by itself: a library caller that never asks
//! keeps `tempfile`'s behaviour (removed when dropped).
//!
//! The list is held while a temporary file is created and listed, renamed over its target
//! and unlisted, or removed and unlisted: whoever holds it sees every temporary file that
//! exists, and none is created or renamed until it lets go.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// Paths of the temporary files this process has open.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

type Live = MutexGuard<'static, Vec<PathBuf>>;

fn live() -> Live {
    crate::sync::lock(&LIVE)
}

/// The list, where it can be had within `patience` (tried every millisecond); `None` where
/// another thread holds it longer (its file system hangs in a create, rename or unlink).
fn live_within(patience: Duration) -> Option<Live> {
    let deadline = Instant::now() + patience;
    loop {
        match LIVE.try_lock() {
            Ok(live) => return Some(live),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// A temporary file, listed from its creation until it is renamed over its target or
/// removed (when dropped). `None` once renamed.
pub(crate) struct Temporary(Option<tempfile::NamedTempFile>);

impl Temporary {
    /// Creates a file with `create` and lists it, under one hold of the list: a
    /// [`remove_temporaries`] meanwhile finds it listed, or it is not created yet (and,
    /// while that caller keeps the list, is not created at all).
    pub(crate) fn create(
        create: impl FnOnce() -> std::io::Result<tempfile::NamedTempFile>,
    ) -> std::io::Result<Self> {
        let mut live = live();
        let file = create()?;
        live.push(file.path().to_path_buf());
        Ok(Temporary(Some(file)))
    }

    fn file(&self) -> &tempfile::NamedTempFile {
        self.0
            .as_ref()
            .expect("a temporary file is there until it is renamed")
    }

    /// The open file.
    pub(crate) fn as_file(&self) -> &File {
        self.file().as_file()
    }

    /// Its path.
    pub(crate) fn path(&self) -> &Path {
        self.file().path()
    }

    /// Renames it over `target`. The list is held meanwhile, so that [`remove_temporaries`]
    /// finds it either still temporary or already renamed, never half-way.
    pub(crate) fn persist(mut self, target: &Path) -> std::io::Result<()> {
        let mut live = live();
        let file = self.0.take().expect("renamed once");
        let path = file.path().to_path_buf();
        let renamed = file.persist(target).map(drop).map_err(|e| e.error);
        live.retain(|p| *p != path);
        renamed
    }
}

impl Drop for Temporary {
    /// Removes the file (where not renamed) and unlists it under one hold of the list, so
    /// that a [`remove_temporaries`] meanwhile cannot miss it.
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            let mut live = live();
            live.retain(|p| p != file.path());
            drop(file);
        }
    }
}

/// The temporary files [`remove_temporaries`] removed, with the list of temporary files
/// held: while this lives no temporary file is created, renamed over its target or removed
/// (those threads wait). A program about to exit keeps it until it has exited.
#[derive(Debug)]
pub struct RemovedTemporaries {
    paths: Vec<PathBuf>,
    _live: Live,
}

impl RemovedTemporaries {
    /// The temporary files removed.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }
}

/// Removes every temporary file of this process's outputs still listed: for a program about
/// to end at once (exit without unwinding), so that no half-written output is left beside
/// its target. A writer still writing to one writes to a file no longer in any folder.
///
/// The list is held only while a file is created, renamed or removed, moments in a file
/// system that answers; this waits at most `patience` for it and gives up (`None`, nothing
/// removed) where another thread holds it longer, so that a program ending at once is not
/// held up by a hung file system. Removing a file can hang on the same file system: a
/// program that must end by a deadline keeps one of its own besides. The returned
/// [`RemovedTemporaries`] keeps the list held (see there): kept until the process exits, no temporary
/// file appears or is renamed over its target after the removal.
pub fn remove_temporaries(patience: Duration) -> Option<RemovedTemporaries> {
    let mut live = live_within(patience)?;
    let mut paths = Vec::new();
    live.retain(|p| match std::fs::remove_file(p) {
        Ok(()) => {
            paths.push(p.clone());
            false
        }
        Err(_) => true,
    });
    Some(RemovedTemporaries { paths, _live: live })
}

/// `path` is listed as a temporary file.
#[cfg(test)]
pub(crate) fn is_listed(path: &Path) -> bool {
    live().iter().any(|p| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A temporary file is created under the list's lock: while the list is held (as a program
    /// ending at once holds it from the removal to its exit), none is created, listed or not.
    /// Before, the file was created first and listed after, so a removal between the two
    /// missed it and the process exited leaving it behind.
    #[test]
    fn no_temporary_file_is_created_while_the_list_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let held = live();
        let maker = std::thread::spawn(move || super::super::output::temp_file(&target));
        std::thread::sleep(Duration::from_millis(300));
        let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        drop(held);
        let tmp = maker.join().unwrap().unwrap();
        assert!(made.is_empty(), "created while the list was held: {made:?}");
        assert!(is_listed(tmp.path()) && tmp.path().exists());
    }

    /// A removal gives up, removing nothing, where the list stays held past its patience (a
    /// create, rename or unlink hung in the file system): a program ending at once is not held
    /// up by it.
    #[test]
    fn a_removal_gives_up_where_the_list_stays_held() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = super::super::output::temp_file(&dir.path().join("out")).unwrap();
        let held = live();
        let start = Instant::now();
        let removal = std::thread::spawn(|| {
            remove_temporaries(Duration::from_millis(50)).map(|r| r.paths().to_vec())
        });
        let removed = removal.join().unwrap();
        let waited = start.elapsed();
        drop(held);
        assert!(removed.is_none(), "{removed:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(is_listed(tmp.path()) && tmp.path().exists());
    }
}
