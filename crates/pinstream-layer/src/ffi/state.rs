//! The process-wide state of the layer: the ledger, the ways it was entered and the summary at
//! exit. The settings are [`crate::settings::Settings::current`], the log is `sink`'s.

use super::sink::log;
use crate::ledger::{Ledger, Notice};
use crate::settings::{LogLevel, Policy, Settings};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

/// How the layer was entered (for the summary).
#[derive(Clone, Copy)]
pub(crate) enum WayIn {
    /// `clInitLayer`, from a loader that honours `OPENCL_LAYERS`.
    Layers,
    /// An interposed entry point, through `LD_PRELOAD`.
    Preload,
}

static LEDGER: OnceLock<Mutex<Ledger>> = OnceLock::new();
/// Tracked buffers alive: lets the per-call hooks skip the lock when there are none.
static TRACKED: AtomicUsize = AtomicUsize::new(0);
static VIA_LAYERS: AtomicBool = AtomicBool::new(false);
static VIA_PRELOAD: AtomicBool = AtomicBool::new(false);
static ANNOUNCE: Once = Once::new();

/// The ledger, locked. A panic elsewhere never poisons the layer for the program.
pub(crate) fn ledger() -> MutexGuard<'static, Ledger> {
    let m = LEDGER.get_or_init(|| Mutex::new(Ledger::new()));
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether any tracked buffer is alive (no lock).
pub(crate) fn tracking() -> bool {
    TRACKED.load(Ordering::Relaxed) > 0
}

/// Refreshes [`tracking`] after the ledger changed.
pub(crate) fn sync_tracking(ledger: &Ledger) {
    TRACKED.store(ledger.live_count(), Ordering::Relaxed);
}

/// Logs a notice about a use of a tracked buffer.
pub(crate) fn notice(n: Option<Notice>) {
    if let Some(n) = n {
        log(LogLevel::Warnings, &n.line());
    }
}

/// Records that the layer was entered `way`; the first entry announces the settings and
/// arranges the summary at exit.
pub(crate) fn entered(way: WayIn) {
    let flag = match way {
        WayIn::Layers => &VIA_LAYERS,
        WayIn::Preload => &VIA_PRELOAD,
    };
    // A load first: most calls find it set and write nothing (no cache-line traffic).
    let first = !flag.load(Ordering::Relaxed) && !flag.swap(true, Ordering::Relaxed);
    if first && Settings::current().policy != Policy::Off {
        let s = Settings::current();
        log(
            LogLevel::Verbose,
            &format!(
                "entered through {}; policy {}, minimum size {}",
                way_name(way),
                s.policy,
                crate::settings::human(s.min_size)
            ),
        );
    }
    ANNOUNCE.call_once(announce);
}

fn way_name(way: WayIn) -> &'static str {
    match way {
        WayIn::Layers => "OPENCL_LAYERS",
        WayIn::Preload => "LD_PRELOAD",
    }
}

fn announce() {
    let (s, problems) = Settings::from_env();
    for p in problems {
        log(LogLevel::Warnings, &p);
    }
    if s.fake_nv && s.policy != Policy::Off {
        log(LogLevel::Warnings, "TEST HOOK PINSTREAM_LAYER_TEST_FAKE_NV=1: clCreateBufferNV is faked by a plain clCreateBuffer with the same flags; nothing is pinned and no VRAM is saved");
    }
    let wanted = match s.policy {
        Policy::Off => false,
        Policy::Audit => s.log >= LogLevel::Warnings,
        Policy::Rewrite => s.log == LogLevel::Verbose,
    };
    if wanted {
        // SAFETY: `print_summary` is an `extern "C" fn()` of this library; atexit from a shared
        // library registers it against this library (glibc's __cxa_atexit with its DSO
        // handle), so it also runs, and is dropped, if the library is unloaded first.
        unsafe { libc::atexit(print_summary) };
    }
}

extern "C" fn print_summary() {
    super::guard::guarded("the summary at exit", |_| summary(), &|| (), || ());
}

/// The summary, unless another thread holds the ledger as the program exits: waiting for it
/// could hang the exit, so the summary is left out then.
fn summary() {
    let Some(ledger) = LEDGER.get() else {
        return;
    };
    let ledger = match ledger.try_lock() {
        Ok(l) => l,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            return log(
                LogLevel::Warnings,
                "summary left out: another thread was inside the layer as the program exited",
            );
        }
    };
    let way = match (
        VIA_LAYERS.load(Ordering::Relaxed),
        VIA_PRELOAD.load(Ordering::Relaxed),
    ) {
        (true, true) => "OPENCL_LAYERS and LD_PRELOAD (the LD_PRELOAD entry did the work)",
        (true, false) => "OPENCL_LAYERS",
        _ => "LD_PRELOAD",
    };
    let lines = ledger.summary(Settings::current().policy, way);
    drop(ledger);
    for line in lines {
        log(LogLevel::Warnings, &line);
    }
}
