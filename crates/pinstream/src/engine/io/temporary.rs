//! The temporary files outputs are written to before they replace their target
//! ([`Temporary`]), listed while they exist, so that a process about to end without
//! unwinding (a program's second Ctrl-C, its watchdog) can remove them first:
//! [`remove_temporaries`]. Nothing here runs by itself: a library caller that never asks
//! keeps `tempfile`'s behaviour (removed when dropped).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// Paths of the temporary files this process has open.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A temporary file, listed from its creation until it is renamed over its target or
/// removed (when dropped). `None` once renamed.
pub(crate) struct Temporary(Option<tempfile::NamedTempFile>);

impl Temporary {
    /// Lists `file`, just created.
    pub(crate) fn new(file: tempfile::NamedTempFile) -> Self {
        live().push(file.path().to_path_buf());
        Temporary(Some(file))
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

/// Removes every temporary file of this process's outputs still listed, and returns their
/// paths: for a program about to end at once (exit without unwinding), so that no
/// half-written output is left beside its target. A writer still writing to one writes to a
/// file no longer in any folder.
pub fn remove_temporaries() -> Vec<PathBuf> {
    let live = live();
    live.iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .cloned()
        .collect()
}

/// `path` is listed as a temporary file.
#[cfg(test)]
pub(crate) fn is_listed(path: &Path) -> bool {
    live().iter().any(|p| p == path)
}
