//! Locks that outlive a panic: every mutex in the library guards plain data that a panicking
//! holder leaves whole (lists, counters, handles), so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, whatever a panicking holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
